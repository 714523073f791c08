//! A leader's answers that claim freshness, confirmed by a read index round
//! (`cell::confirm`), over real parts in one process: three shards as the
//! replicas of one group, each over a batched log on the simulated disk
//! with its `cell::replica::Replica` (raft-rs), and a network the test
//! steps (messages delivered, or dropped while a node is cut off). Requests
//! go through `Shard::run_owned`, as the HTTP edge sends them.
//!
//! - a healthy leader answers HEAD, a read at the tail and a 404 once
//!   confirmed, and fifty such answers share one round; a write needs none;
//! - a leader cut off whose clock stands still (a paused process: it never
//!   steps down by itself) still believes it leads while the other two
//!   elect a leader that appends and creates a stream; asked then, it gives
//!   no stale tail, no 404 for the new stream, no refusal and no "already
//!   there" decided from its state: nothing until it notices, then 503;
//! - a leader that deleted a stream answers a 404 for it only once the
//!   delete is committed, though it confirms its lead sooner;
//! - a follower that has not heard of the leader's last commit serves a
//!   live read (SSE, long-poll) only once it applied it (`cell::catch_up`),
//!   and one cut off answers no "up to date" at all;
//! - a leader that loses its place between a fork's delete and its source's
//!   collection leaves the source to the next leader's sweep.

mod common;

use common::requests::{append, create, head, on, read_from_start, read_live, BUCKET};
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use raft::prelude::{Message, MessageType};
use ringstream::cell::replica::{Outbox, Replica, Status};
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::protocol::rules::ProducerPolicy;
use ringstream::protocol::{BucketOp, Error, Live, Offset, Outcome, StreamOp};
use ringstream::shard::forward::{Forwarder, Unsent};
use ringstream::shard::{Reply, Shard, ShardRequest};
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{Log, LogConfig};
use std::cell::RefCell;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

/// The shard's side of the cell as the server wires it, minus the links:
/// nothing is forwarded here (each test asks the node it means).
struct Confirming(Rc<Status>);

impl Forwarder for Confirming {
    fn forward(&self, _: Vec<u8>, _: Duration) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, Unsent>>>> {
        Box::pin(async { Err(Unsent::Failed("no forwarding in this test".into())) })
    }
    fn confirmation(&self) -> Pin<Box<dyn Future<Output = bool>>> {
        let (status, ticket) = (self.0.clone(), self.0.confirms.ticket());
        Box::pin(async move { status.confirms.confirm(ticket).await })
    }
    fn caught_up(&self) -> Pin<Box<dyn Future<Output = bool>>> {
        let status = self.0.clone();
        Box::pin(async move { status.catch_ups.caught_up().await })
    }
    fn notify(&self, _: Vec<u8>) {}
}

/// Messages a replica sent, for the test's network.
#[derive(Default)]
struct Sent(RefCell<Vec<Message>>);

impl Outbox for Sent {
    fn send(&self, message: Message) -> bool {
        self.0.borrow_mut().push(message);
        true
    }
}

struct Node {
    replica: Replica<SimStore>,
    status: Rc<Status>,
    shard: Rc<Shard<SimStore>>,
    pool: LocalPool,
}

fn boot(id: u64) -> Node {
    let cfg = LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: 4 * 1024 * 1024 };
    let (log, _, _, _) = block_on(Log::open_batched(SimStore::new(), cfg, None)).expect("a new log");
    let log = Rc::new(log);
    let mut replica = block_on(Replica::open(id, 0, vec![1, 2, 3], log.local().clone())).expect("replica");
    let shard = Rc::new(Shard::recover(0, 1, log.clone(), &[], ProducerPolicy::default()).expect("shard"));
    replica.set_applier(shard.clone());
    let status = replica.status();
    shard.set_writable(status.leading.clone());
    shard.set_forwarder(Rc::new(Confirming(status.clone())));
    let pool = LocalPool::new();
    let (w, p) = (log.clone(), log.clone());
    pool.spawner().spawn_local(async move { w.run_writer().await }).unwrap();
    pool.spawner().spawn_local(async move { p.run_preparer().await }).unwrap();
    Node { replica, status, shard, pool }
}

type Answer = Rc<RefCell<Option<Reply>>>;

struct Cell {
    nodes: Vec<Node>,
    net: Vec<Message>,
    /// Nodes cut off from every other: what they send or are sent is lost.
    cut: HashSet<u64>,
    /// Nodes whose clock stands still: their replica is not ticked.
    paused: HashSet<u64>,
    /// Kinds of message the network loses, whoever sends them.
    lost: HashSet<MessageType>,
    /// Nodes that hear no entries (MsgAppend): heartbeats and read index
    /// rounds reach them, commits of new entries do not.
    deaf: HashSet<u64>,
    steps: u64,
}

impl Cell {
    fn new() -> Cell {
        let nodes = (1..=3).map(boot).collect();
        let none = HashSet::new;
        Cell { nodes, net: Vec::new(), cut: none(), paused: none(), lost: HashSet::new(), deaf: none(), steps: 0 }
    }

    fn node(&mut self, id: u64) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    /// One step: messages delivered, a tick every fifth, each node's turn.
    fn step(&mut self) {
        self.steps += 1;
        for m in std::mem::take(&mut self.net) {
            let deaf = self.deaf.contains(&m.to) && m.msg_type() == MessageType::MsgAppend;
            if !self.cut.contains(&m.from) && !self.cut.contains(&m.to) && !self.lost.contains(&m.msg_type()) && !deaf {
                self.nodes[(m.to - 1) as usize].replica.step(m);
            }
        }
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if self.steps.is_multiple_of(5) && !self.paused.contains(&(i as u64 + 1)) {
                n.replica.tick();
            }
            let _ = n.replica.propose();
            let sent = Sent::default();
            n.pool.run_until(n.replica.turn(&sent)).expect("turn");
            n.pool.run_until_stalled();
            n.pool.run_until(n.replica.turn(&sent)).expect("turn");
            self.net.extend(sent.0.into_inner());
        }
    }

    /// Steps until a node that is not cut off may write.
    fn elect(&mut self) -> u64 {
        for _ in 0..2_000 {
            let leading = |n: &Node| n.status.leading.get();
            if let Some(id) = (1..=3).find(|id| !self.cut.contains(id) && leading(&self.nodes[(id - 1) as usize])) {
                return id;
            }
            self.step();
        }
        panic!("no leader in 2,000 steps");
    }

    /// Hands `req` to node `id`'s shard as the HTTP edge does; the answer
    /// lands in what it returns.
    fn send(&mut self, id: u64, req: ShardRequest) -> Answer {
        let out: Answer = Rc::default();
        let (o, shard) = (out.clone(), self.node(id).shard.clone());
        let spawner = self.node(id).pool.spawner();
        spawner.spawn_local(async move { *o.borrow_mut() = Some(shard.run_owned(req).await) }).unwrap();
        self.node(id).pool.run_until_stalled();
        out
    }

    /// Steps until every answer came, at most `limit` steps; false if not.
    fn until_answered(&mut self, answers: &[Answer], limit: u64) -> bool {
        for _ in 0..limit {
            if answers.iter().all(|a| a.borrow().is_some()) {
                return true;
            }
            self.step();
        }
        answers.iter().all(|a| a.borrow().is_some())
    }

    fn call(&mut self, id: u64, req: ShardRequest) -> Reply {
        let a = self.send(id, req);
        assert!(self.until_answered(std::slice::from_ref(&a), 500), "node {id} did not answer");
        a.take().unwrap()
    }
}

/// The tail a HEAD answers, or a panic naming what came instead.
fn tail(reply: &Reply) -> Offset {
    match reply {
        Ok(Outcome::Head { info, .. }) => info.next_offset,
        other => panic!("not a HEAD's answer: {other:?}"),
    }
}

/// A cell whose leader holds stream "s" with `appends` appends; the leader.
fn cell_with_data(appends: usize) -> (Cell, u64) {
    let mut cell = Cell::new();
    let leader = cell.elect();
    let r = cell.call(leader, ShardRequest::Bucket { bucket: BUCKET.into(), op: BucketOp::Create });
    assert!(r.is_ok(), "bucket: {r:?}");
    let r = cell.call(leader, on("s", create()));
    assert!(matches!(r, Ok(Outcome::Created { .. })), "create: {r:?}");
    for i in 0..appends {
        let r = cell.call(leader, on("s", append(format!("<append {i}>").as_bytes())));
        assert!(matches!(r, Ok(Outcome::Appended { .. })), "append {i}: {r:?}");
    }
    cell.step();
    (cell, leader)
}

#[test]
fn a_healthy_leader_confirms_and_many_answers_share_one_round() {
    let (mut cell, leader) = cell_with_data(3);
    let want = tail(&cell.call(leader, on("s", head())));
    let rounds = cell.node(leader).status.confirms.rounds();
    let mut heads: Vec<Answer> = (0..50).map(|_| cell.send(leader, on("s", head()))).collect();
    let read = cell.send(leader, on("s", read_from_start()));
    let missing = cell.send(leader, on("nothing here", head()));
    assert_eq!(cell.node(leader).status.confirms.waiting(), 52, "every such answer waits for the round");
    heads.extend([read.clone(), missing.clone()]);
    assert!(cell.until_answered(&heads, 50), "a healthy leader confirms within a few steps");
    for h in &heads[..50] {
        assert_eq!(tail(&h.borrow().clone().unwrap()), want);
    }
    let Some(Ok(Outcome::Read(r))) = read.take() else { panic!("the read at the tail was not answered") };
    assert!(r.up_to_date && r.next_offset == want);
    assert_eq!(missing.take(), Some(Err(Error::NotFound)));
    assert_eq!(cell.node(leader).status.confirms.rounds(), rounds + 1, "52 answers, one heartbeat round");
    // A write's answer is its commit: no round.
    let r = cell.call(leader, on("s", append(b"<more>")));
    assert!(matches!(r, Ok(Outcome::Appended { .. })), "{r:?}");
    assert_eq!(cell.node(leader).status.confirms.rounds(), rounds + 1, "a write asked for a round");
}

#[test]
fn a_leader_cut_off_and_replaced_answers_no_stale_tail_and_no_stale_404() {
    let (mut cell, old) = cell_with_data(3);
    let stale = tail(&cell.call(old, on("s", head())));
    cell.cut.insert(old);
    cell.paused.insert(old);
    let new = cell.elect();
    assert_ne!(new, old);
    let r = cell.call(new, on("s", append(b"<after>")));
    assert!(matches!(r, Ok(Outcome::Appended { .. })), "append on the new leader: {r:?}");
    let r = cell.call(new, on("born", create()));
    assert!(matches!(r, Ok(Outcome::Created { .. })), "create on the new leader: {r:?}");
    let fresh = tail(&cell.call(new, on("s", head())));
    assert!(fresh > stale);
    assert!(cell.node(old).status.leading.get(), "the old leader still believes it leads (the hole)");

    let mut conflicting = create();
    if let StreamOp::Create(c) = &mut conflicting {
        c.content_type = Some("text/plain".into());
    }
    let asked = [
        cell.send(old, on("s", head())),
        cell.send(old, on("s", read_from_start())),
        cell.send(old, on("born", head())),
        // A refusal decided from its state (409: another content type).
        cell.send(old, on("s", conflicting)),
        // A create that finds the same stream (200).
        cell.send(old, on("s", create())),
    ];
    cell.until_answered(&asked, 200);
    for a in &asked {
        let r = a.borrow().clone();
        assert!(r.is_none(), "the cut-off leader answered from stale state: {r:?}");
    }
    // Its clock runs again: it notices (no majority, or its round's deadline).
    cell.paused.clear();
    assert!(cell.until_answered(&asked, 2_000), "the cut-off leader never answered");
    for a in &asked {
        let r = a.take().unwrap();
        assert!(matches!(r, Err(Error::Unavailable(_))), "not a 503: {r:?}");
    }
    assert!(!cell.node(old).status.leading.get());
    assert_eq!(cell.node(old).status.confirms.waiting(), 0);
}

#[test]
fn a_404_for_a_deleted_stream_waits_for_the_delete_to_commit() {
    let (mut cell, leader) = cell_with_data(1);
    // Heartbeats are answered (the lead is confirmed), appends never are:
    // nothing more commits.
    cell.lost.insert(MessageType::MsgAppendResponse);
    let rounds = cell.node(leader).status.confirms.rounds();
    let deleted = cell.send(leader, on("s", StreamOp::Delete));
    let missing = cell.send(leader, on("s", head()));
    cell.until_answered(std::slice::from_ref(&missing), 200);
    assert!(cell.node(leader).status.confirms.rounds() > rounds, "no read index round was started");
    assert_eq!(cell.node(leader).status.confirms.waiting(), 0, "the round was not settled");
    assert!(cell.node(leader).status.leading.get(), "the leader stepped down");
    let early = missing.borrow().clone();
    assert!(early.is_none(), "answered {early:?} while the delete was not committed");
    assert!(deleted.borrow().is_none(), "the delete was acknowledged uncommitted");
    cell.lost.clear();
    assert!(cell.until_answered(&[deleted.clone(), missing.clone()], 500), "no answer once healed");
    assert!(matches!(deleted.take(), Some(Ok(Outcome::Deleted { .. }))));
    assert_eq!(missing.take(), Some(Err(Error::NotFound)));
}

/// The read's answer, or a panic naming what came instead.
fn read_answer(answer: &Answer) -> ringstream::protocol::ReadOutcome {
    match answer.take() {
        Some(Ok(Outcome::Read(r))) => r,
        other => panic!("not a read's answer: {other:?}"),
    }
}

#[test]
fn a_follower_behind_its_leader_serves_live_reads_once_caught_up() {
    let (mut cell, leader) = cell_with_data(2);
    let behind = (1..=3).find(|&id| id != leader).unwrap();
    cell.deaf.insert(behind);
    let r = cell.call(leader, on("s", append(b"<unseen>")));
    assert!(matches!(r, Ok(Outcome::Appended { .. })), "committed without the deaf follower: {r:?}");
    let fresh = tail(&cell.call(leader, on("s", head())));
    let live =
        [cell.send(behind, on("s", read_live(Live::Sse))), cell.send(behind, on("s", read_live(Live::LongPoll)))];
    // Ten ticks: half the round's deadline.
    cell.until_answered(&live, 50);
    for a in &live {
        let early = a.borrow().clone();
        assert!(early.is_none(), "answered before it applied the leader's commit: {early:?}");
    }
    assert_eq!(cell.node(behind).status.catch_ups.waiting(), 2, "both wait, in one round");
    assert_eq!(cell.node(behind).status.catch_ups.rounds(), 1);
    cell.deaf.clear();
    assert!(cell.until_answered(&live, 50), "not answered once the follower could catch up");
    for (a, kind) in live.iter().zip(["SSE", "long-poll"]) {
        let r = read_answer(a);
        assert!(
            r.up_to_date && r.next_offset == fresh,
            "{kind}: up to date {} at {:?}, not {fresh:?}",
            r.up_to_date,
            r.next_offset
        );
        assert!(common::find(&r.body, b"<unseen>").is_some(), "{kind}: the acknowledged append is missing");
    }
}

#[test]
fn a_follower_cut_off_claims_no_tail_in_a_live_read() {
    let (mut cell, leader) = cell_with_data(2);
    let off = (1..=3).find(|&id| id != leader).unwrap();
    let stale = tail(&cell.call(leader, on("s", head())));
    for _ in 0..20 {
        cell.step();
    }
    cell.cut.insert(off);
    let r = cell.call(leader, on("s", append(b"<unseen>")));
    assert!(matches!(r, Ok(Outcome::Appended { .. })), "committed without the follower: {r:?}");
    let live = [cell.send(off, on("s", read_live(Live::Sse))), cell.send(off, on("s", read_live(Live::LongPoll)))];
    assert!(cell.until_answered(&live, 500), "no answer past the round's deadline");
    let sse = read_answer(&live[0]);
    assert!(!sse.up_to_date && sse.next_offset == stale, "SSE: what it holds, not the tail: {sse:?}");
    let long_poll = live[1].take();
    assert!(matches!(long_poll, Some(Err(Error::Unavailable(_)))), "long-poll: not a 503: {long_poll:?}");
    assert_eq!(cell.node(off).status.catch_ups.waiting(), 0);
}

/// A fork of "s" in the test bucket.
fn fork_of_s() -> StreamOp {
    let mut op = create();
    if let StreamOp::Create(c) = &mut op {
        let source = ringstream::protocol::StreamKey { bucket: BUCKET.into(), stream: "s".into() };
        c.fork = Some(ringstream::protocol::ForkReq { source, offset: None, sub_offset: 0 });
    }
    op
}

/// A leader deletes a source's last fork, then loses its place before the
/// source's own collection commits: the soft-deleted source, which no fork
/// reads any more, is collected by the next leader's sweep (the reclaim
/// pass's `reclaim_in_cell`), so its path is free again.
#[test]
fn a_new_leader_collects_a_source_its_predecessor_left() {
    let (mut cell, old) = cell_with_data(2);
    let r = cell.call(old, on("f", fork_of_s()));
    assert!(matches!(r, Ok(Outcome::Created { .. })), "the fork: {r:?}");
    let r = cell.call(old, on("s", StreamOp::Delete));
    assert!(matches!(r, Ok(Outcome::Deleted { .. })), "the source's delete: {r:?}");
    let r = cell.call(old, on("s", head()));
    assert!(matches!(r, Err(Error::Gone(_))), "the source is soft-deleted: {r:?}");
    // The fork's delete commits; the source's collection that follows it
    // on the leader (before the delete is answered) never leaves it.
    let local = cell.node(old).shard.log().local().clone();
    let fork_delete = local.last_index() + 1;
    let _unanswered = cell.send(old, on("f", StreamOp::Delete));
    for step in 0.. {
        if local.committed_index() >= fork_delete {
            break;
        }
        assert!(step < 2_000, "the fork's delete did not commit in 2,000 steps");
        cell.step();
    }
    cell.cut.insert(old);
    let new = cell.elect();
    let gone = |cell: &mut Cell| cell.call(new, on("s", head()));
    let r = gone(&mut cell);
    assert!(matches!(r, Err(Error::Gone(_))), "the source is soft-deleted on the new leader: {r:?}");
    let shard = cell.node(new).shard.clone();
    let sweep = cell.node(new).pool.spawner();
    sweep.spawn_local(async move { shard.reclaim_in_cell().await }).unwrap();
    for _ in 0..50 {
        cell.step();
    }
    assert_eq!(gone(&mut cell), Err(Error::NotFound), "the new leader's sweep left the source");
    let r = cell.call(new, on("s", create()));
    assert!(matches!(r, Ok(Outcome::Created { .. })), "its path is free again: {r:?}");
}
