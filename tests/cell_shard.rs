//! Shards as replicas of one group, in one process: each node a shard over
//! a batched log on the simulated disk, its `cell::replica::Replica`
//! (raft-rs), and a network the test steps (messages delivered, or held
//! while a link is cut). The shards serve real requests (`Shard::handle`):
//!
//! - the leader's writes are answered once committed, and every follower
//!   serves the same streams, byte for byte, from the records it applied;
//!   a follower refuses writes (503);
//! - a leader cut off from its followers answers no write (its appends
//!   fail once it steps down); the others elect a leader and go on; when
//!   the old leader returns it drops what it wrote and never committed,
//!   rebuilds its state from the committed records and serves what the
//!   others serve;
//! - a follower restarted from its disk recovers only committed records,
//!   catches up and serves the same;
//! - a live reader (long-poll) waiting at a follower's tail is answered
//!   when the follower applies the leader's next append, not at its
//!   timeout.

mod common;

use common::requests::{append, create, BUCKET};
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use raft::prelude::Message;
use ringstream::cell::replica::{Outbox, Replica};
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::protocol::offset::ReadFrom;
use ringstream::protocol::rules::ProducerPolicy;
use ringstream::protocol::{BucketOp, Error, Live, Offset, Outcome, ReadReq, StreamKey, StreamOp, Surface};
use ringstream::shard::tiering::recovery_prefix;
use ringstream::shard::{Reply, Shard, ShardRequest, Sleep};
use ringstream::storage::io::SegmentStore;
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::tiered::TierFiles;
use ringstream::storage::{Log, LogConfig, Recovered, Tiering};
use ringstream::tier::TierClient;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::Duration;

fn log_config() -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: 4 * 1024 * 1024 }
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
    disk: SimStore,
    replica: Replica<SimStore>,
    shard: Rc<Shard<SimStore>>,
    log: Rc<Log<SimStore>>,
    pool: LocalPool,
}

/// Boots node `id` from `disk`: the log, the replica, then the shard from
/// the committed records only.
fn boot(id: u64, disk: SimStore) -> Node {
    boot_tiered(id, disk, None)
}

/// [`boot`], with tiering to the object store `tier` (shared by the nodes).
fn boot_tiered(id: u64, disk: SimStore, tier: Option<TierClient>) -> Node {
    let tiering = tier.map(|client| Tiering { client, shard: 0 });
    let (log, records, _, _) = block_on(Log::open_batched(disk.clone(), log_config(), tiering)).expect("recovery");
    let log = Rc::new(log);
    let mut replica = block_on(Replica::open(id, 0, vec![1, 2, 3], log.local().clone())).expect("replica");
    let end = log.local().mark(log.local().committed_index()).unwrap().map(|m| (m.end.segment, m.end.pos));
    let committed: Vec<Recovered> =
        records.into_iter().filter(|r| end.is_some_and(|e| (r.loc.segment, r.loc.pos) < e)).collect();
    let shard =
        Rc::new(Shard::recover(0, 1, log.clone(), &committed, ProducerPolicy::default()).expect("shard recovery"));
    replica.set_applier(shard.clone());
    shard.set_writable(replica.status().leading.clone());
    shard.set_lead_term(replica.status().lead_term.clone());
    let pool = LocalPool::new();
    let (w, p) = (log.clone(), log.clone());
    pool.spawner().spawn_local(async move { w.run_writer().await }).unwrap();
    pool.spawner().spawn_local(async move { p.run_preparer().await }).unwrap();
    Node { disk, replica, shard, log, pool }
}

struct Cell {
    nodes: Vec<Option<Node>>,
    net: Vec<Message>,
    /// Nodes cut off from every other.
    cut: HashSet<u64>,
    steps: u64,
}

impl Cell {
    fn new() -> Cell {
        let nodes = (1..=3).map(|id| Some(boot(id, SimStore::new()))).collect();
        Cell { nodes, net: Vec::new(), cut: HashSet::new(), steps: 0 }
    }

    fn node(&mut self, id: u64) -> &mut Node {
        self.nodes[(id - 1) as usize].as_mut().expect("node up")
    }

    /// One step: messages delivered, a tick now and then, each node's turn.
    fn step(&mut self) {
        self.steps += 1;
        let net = std::mem::take(&mut self.net);
        for m in net {
            let cut = self.cut.contains(&m.from) || self.cut.contains(&m.to);
            if let (false, Some(n)) = (cut, self.nodes[(m.to - 1) as usize].as_mut()) {
                n.replica.step(m);
            }
        }
        for n in self.nodes.iter_mut().flatten() {
            if self.steps.is_multiple_of(5) {
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

    fn run(&mut self, steps: u64) {
        for _ in 0..steps {
            self.step();
        }
    }

    /// The node whose replica may write now, if one may.
    fn leader(&self) -> Option<u64> {
        (1..=3).find(|&id| self.nodes[(id - 1) as usize].as_ref().is_some_and(|n| n.replica.status().leading.get()))
    }

    /// Steps until a leader may write.
    fn elect(&mut self) -> u64 {
        for _ in 0..2_000 {
            if let Some(id) = self.leader().filter(|id| !self.cut.contains(id)) {
                return id;
            }
            self.step();
        }
        panic!("no leader in 2,000 steps");
    }

    /// Cuts node `old` off while it leads and sends it an append to "s":
    /// it still takes it (it has not stepped down yet) but never answers it
    /// as written. Returns the leader the others elect.
    fn cut_off_with_a_write(&mut self, old: u64) -> u64 {
        self.cut.insert(old);
        let key = StreamKey { bucket: BUCKET.into(), stream: "s".into() };
        let req = ShardRequest::Stream { key, surface: Surface::Ds, if_incarnation: None, op: append(b"<lost>") };
        let r = self.call(old, req, 400);
        assert!(!matches!(r, Some(Ok(_))), "a leader without a majority answered a write: {r:?}");
        self.elect()
    }

    /// Sends `req` to node `id`'s shard; steps until it is answered (or
    /// `limit` steps pass: None).
    fn call(&mut self, id: u64, req: ShardRequest, limit: u64) -> Option<Reply> {
        let out = Rc::new(RefCell::new(None));
        let (o, shard) = (out.clone(), self.node(id).shard.clone());
        self.node(id)
            .pool
            .spawner()
            .spawn_local(async move { *o.borrow_mut() = Some(shard.handle(req).await) })
            .unwrap();
        for _ in 0..limit {
            self.node(id).pool.run_until_stalled();
            if let Some(r) = out.borrow_mut().take() {
                return Some(r);
            }
            self.step();
        }
        None
    }

    /// Runs `task` on node `id`'s executor, stepping the cell until it ends.
    fn run_on<T: 'static>(&mut self, id: u64, task: impl std::future::Future<Output = T> + 'static) -> T {
        let out = Rc::new(RefCell::new(None));
        let o = out.clone();
        self.node(id).pool.spawner().spawn_local(async move { *o.borrow_mut() = Some(task.await) }).unwrap();
        for _ in 0..2_000 {
            self.node(id).pool.run_until_stalled();
            if let Some(r) = out.borrow_mut().take() {
                return r;
            }
            // The object store answers from its own thread.
            std::thread::sleep(Duration::from_millis(1));
            self.step();
        }
        panic!("node {id}: a task did not end in 2,000 steps");
    }

    fn stream_op(&mut self, id: u64, stream: &str, op: StreamOp) -> Option<Reply> {
        let key = StreamKey { bucket: BUCKET.into(), stream: stream.into() };
        self.call(id, ShardRequest::Stream { key, surface: Surface::Ds, if_incarnation: None, op }, 500)
    }

    /// The whole stream as node `id` serves it.
    fn read_all(&mut self, id: u64, stream: &str) -> Vec<u8> {
        let mut got = Vec::new();
        let mut pos = 0;
        loop {
            let read =
                ReadReq { from: ReadFrom::At(Offset::new(0, pos)), live: Live::No, cursor: None, if_none_match: None };
            let r = self.stream_op(id, stream, StreamOp::Read(read)).expect("a read is answered");
            let Ok(Outcome::Read(r)) = r else { panic!("node {id}: read {stream} at {pos}: {r:?}") };
            got.extend_from_slice(&r.body);
            pos = r.next_offset.pos;
            if r.up_to_date {
                return got;
            }
        }
    }
}

/// A cell with a bucket and stream "s" holding `rounds` committed appends.
fn cell_with_data(rounds: usize) -> (Cell, u64, Vec<u8>) {
    with_data(Cell::new(), (0..rounds).map(|i| format!("<append {i}>").into_bytes()))
}

/// `cell` with a bucket and stream "s" holding `bodies` committed appends.
fn with_data(mut cell: Cell, bodies: impl Iterator<Item = Vec<u8>>) -> (Cell, u64, Vec<u8>) {
    let leader = cell.elect();
    let r = cell.call(leader, ShardRequest::Bucket { bucket: BUCKET.into(), op: BucketOp::Create }, 500);
    assert!(matches!(r, Some(Ok(_))), "bucket: {r:?}");
    let r = cell.stream_op(leader, "s", create());
    assert!(matches!(r, Some(Ok(Outcome::Created { .. }))), "create: {r:?}");
    let mut data = Vec::new();
    for (i, body) in bodies.enumerate() {
        let r = cell.stream_op(leader, "s", append(&body));
        assert!(matches!(r, Some(Ok(Outcome::Appended { .. }))), "append {i}: {r:?}");
        data.extend_from_slice(&body);
    }
    (cell, leader, data)
}

#[test]
fn followers_serve_what_the_leader_committed_and_refuse_writes() {
    let (mut cell, leader, data) = cell_with_data(40);
    cell.run(50);
    for id in 1..=3 {
        assert!(cell.read_all(id, "s") == data, "node {id} serves other bytes");
    }
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let r = cell.stream_op(follower, "s", append(b"refused"));
    assert!(matches!(r, Some(Err(Error::Unavailable(_)))), "a follower took a write: {r:?}");
}

#[test]
fn a_leader_cut_off_answers_no_write_and_returns_to_the_committed_state() {
    let (mut cell, old, data) = cell_with_data(10);
    cell.run(50);
    // The others elect a leader and go on.
    let new = cell.cut_off_with_a_write(old);
    assert_ne!(new, old);
    let r = cell.stream_op(new, "s", append(b"<after>"));
    assert!(matches!(r, Some(Ok(Outcome::Appended { .. }))), "append on the new leader: {r:?}");
    let mut want = data.clone();
    want.extend_from_slice(b"<after>");
    // The old leader returns: it serves what the others serve.
    cell.cut.clear();
    cell.run(300);
    for id in 1..=3 {
        let got = cell.read_all(id, "s");
        assert!(got == want, "node {id} serves {:?}", String::from_utf8_lossy(&got));
    }
}

#[test]
fn a_restarted_follower_recovers_committed_records_and_catches_up() {
    let (mut cell, leader, mut data) = cell_with_data(10);
    cell.run(50);
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let disk = cell.node(follower).disk.clone();
    cell.nodes[(follower - 1) as usize] = None;
    for i in 0..10 {
        let body = format!("<while down {i}>").into_bytes();
        let r = cell.stream_op(leader, "s", append(&body));
        assert!(matches!(r, Some(Ok(Outcome::Appended { .. }))), "append {i}: {r:?}");
        data.extend_from_slice(&body);
    }
    cell.nodes[(follower - 1) as usize] = Some(boot(follower, disk.crash_image(None)));
    cell.run(300);
    assert!(cell.read_all(follower, "s") == data, "the restarted follower serves other bytes");
}

#[test]
fn a_followers_long_poll_is_answered_when_it_applies_the_leaders_append() {
    let (mut cell, leader, data) = cell_with_data(3);
    cell.run(50);
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    // A timer that never fires: only a wake-up can answer the long-poll.
    let never: Sleep = Rc::new(|_| Box::pin(futures::future::pending()));
    cell.node(follower).shard.set_live(never, Duration::from_secs(3600));
    let key = StreamKey { bucket: BUCKET.into(), stream: "s".into() };
    let read = ReadReq {
        from: ReadFrom::At(Offset::new(0, data.len() as u64)),
        live: Live::LongPoll,
        cursor: None,
        if_none_match: None,
    };
    let req = ShardRequest::Stream { key, surface: Surface::Ds, if_incarnation: None, op: StreamOp::Read(read) };
    let out = Rc::new(RefCell::new(None));
    let (o, shard) = (out.clone(), cell.node(follower).shard.clone());
    cell.node(follower)
        .pool
        .spawner()
        .spawn_local(async move { *o.borrow_mut() = Some(shard.handle(req).await) })
        .unwrap();
    cell.run(20);
    assert!(out.borrow().is_none(), "the long-poll answered before any append: {:?}", out.borrow());
    let r = cell.stream_op(leader, "s", append(b"<woken>"));
    assert!(matches!(r, Some(Ok(Outcome::Appended { .. }))), "append: {r:?}");
    for _ in 0..300 {
        if out.borrow().is_some() {
            break;
        }
        cell.step();
    }
    let r = out.borrow_mut().take();
    let Some(Ok(Outcome::Read(r))) = r else {
        panic!("the follower's long-poll was not answered after it applied the append: {r:?}")
    };
    assert_eq!(r.body, b"<woken>", "the follower's long-poll answered other bytes");
}

/// Tiering in a cell: the leader uploads the oldest sealed segment once and
/// commits the move; every replica that applies it builds the skeleton from
/// its own copy and deletes its file; each serves the segment's bytes from
/// the object store, also after a restart from its disk, and a leader cut
/// off and deposed rebuilds its state with the remote segment's records.
#[test]
fn a_segment_moved_by_the_leader_is_moved_on_every_replica_and_stored_once() {
    let (client, _down) = TierClient::in_memory("cell");
    let nodes = (1..=3).map(|id| Some(boot_tiered(id, SimStore::new(), Some(client.clone())))).collect();
    let cell = Cell { nodes, net: Vec::new(), cut: HashSet::new(), steps: 0 };
    let (mut cell, leader, mut data) = with_data(cell, (0..40u8).map(|i| vec![i; 8 * 1024]));
    cell.run(50);
    let log = cell.node(leader).log.clone();
    let oldest = log.local().sealed_segments()[0];
    let term = cell.node(leader).replica.status().lead_term.get();
    assert!(term > 0, "a leader names its term");
    let moved = cell.run_on(leader, async move { log.tier_in_term(oldest, term, recovery_prefix, &|| true).await });
    assert!(moved.is_ok(), "the move: {moved:?}");
    cell.run(50);
    for id in 1..=3 {
        let log = cell.node(id).log.clone();
        let finished = cell.run_on(id, async move { log.finish_committed(recovery_prefix).await });
        assert!(finished.is_ok(), "node {id}: {finished:?}");
        let disk = cell.node(id).disk.clone();
        let skeletons = disk.list_skeletons().unwrap();
        assert_eq!(skeletons.iter().map(|s| s.0).collect::<Vec<_>>(), vec![oldest], "node {id}'s skeletons");
        let files = block_on(disk.list()).unwrap();
        assert!(!files.iter().any(|f| f.0 == oldest), "node {id} kept the file of a moved segment");
        assert_eq!(cell.node(id).log.remote_segments().0, 1, "node {id}");
    }
    let keys = block_on(client.list(client.shard_prefix(0))).unwrap();
    assert_eq!(keys.len(), 1, "one object for the three replicas: {keys:?}");
    assert_eq!(TierClient::segment_of(&keys[0].0), Some((oldest, term)));
    for id in 1..=3 {
        assert!(cell.read_all(id, "s") == data, "node {id} serves other bytes");
    }
    // A follower restarted from its disk serves it too, from the skeleton.
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let disk = cell.node(follower).disk.crash_image(None);
    cell.nodes[(follower - 1) as usize] = Some(boot_tiered(follower, disk, Some(client.clone())));
    cell.run(100);
    assert!(cell.read_all(follower, "s") == data, "the restarted follower serves other bytes");
    // The leader cut off: what it appends is lost, and it rebuilds its
    // state, remote records first, once deposed.
    let new = cell.cut_off_with_a_write(leader);
    let r = cell.stream_op(new, "s", append(b"<after>"));
    assert!(matches!(r, Some(Ok(Outcome::Appended { .. }))), "append on the new leader: {r:?}");
    data.extend_from_slice(b"<after>");
    cell.cut.clear();
    cell.run(300);
    for id in 1..=3 {
        assert!(cell.read_all(id, "s") == data, "node {id} serves other bytes after the failover");
    }
}
