//! Replicated groups over real sockets: three (or five) replicas, each on
//! its own glommio executor (thread) with its `cell::link::Links` on
//! loopback (the handshake, then frames) and a `cell::group::Group` over
//! raft-rs's in-memory store, ticked every 10 ms. A replica is stopped as a
//! killed process stops (its executor ends: listener and links closed).
//! - three replicas commit, lose their leader, elect another and commit
//!   again; the time from the stop to the first acknowledgement through a
//!   survivor is printed and must stay under 5 s;
//! - five replicas lose two leaders in turn and keep committing;
//! - a leader whose two followers are gone acknowledges nothing;
//! - a peer without the secret is refused, one with it delivers a frame,
//!   and a frame claiming another sender closes its link.
//!
//! Every acknowledged proposal must be applied at its index by every
//! replica still up.

#[path = "common/raft_mem.rs"]
mod raft_mem;

use crossbeam_channel::{Receiver, Sender};
use glommio::{LocalExecutorBuilder, Placement};
use raft::prelude::HardState;
use raft::storage::MemStorage;
use raft::StateRole;
use ringstream::cell::config::Secret;
use ringstream::cell::group::{self, Answer, Group};
use ringstream::cell::link::{LinkConfig, Links};
use ringstream::cell::wire::Frame;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(10);

/// What a replica tells the test.
#[derive(Debug)]
enum Event {
    Leads { id: u64 },
    Applied { id: u64, index: u64, data: Vec<u8> },
    Acked { index: u64, data: Vec<u8>, at: Instant },
}

/// What the test holds of one replica's thread.
struct Replica {
    stop: Arc<AtomicBool>,
    thread: Option<glommio::ExecutorJoinHandle<()>>,
}

/// Shared by the replicas: how many proposals the leader should still make.
struct Work {
    to_propose: AtomicU64,
    made: AtomicU64,
}

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let ls: Vec<_> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

fn start(id: u64, addrs: &[SocketAddr], work: Arc<Work>, events: Sender<Event>) -> Replica {
    let stop = Arc::new(AtomicBool::new(false));
    let ids: Vec<u64> = (1..=addrs.len() as u64).collect();
    let cfg_peers: Vec<_> = ids.iter().zip(addrs).filter(|(p, _)| **p != id).map(|(p, a)| (*p, *a)).collect();
    let listen = addrs[(id - 1) as usize];
    let halt = stop.clone();
    let thread = LocalExecutorBuilder::new(Placement::Unbound)
        .name(&format!("replica-{id}"))
        .spawn(move || async move {
            let secret = Rc::new(Secret::new(vec![7; 32]).unwrap());
            let (links, frames) =
                Links::start(LinkConfig { me: id, group: 0, listen, peers: cfg_peers, secret }).unwrap();
            let store = raft_mem::store(&ids, &[], &HardState::default());
            let logger = slog::Logger::root(slog::Discard, slog::o!());
            let g = Group::new(&group::config(id, 0), store, &logger).unwrap();
            drive(id, g, &links, &frames, &work, &events, &halt).await;
        })
        .unwrap();
    Replica { stop, thread: Some(thread) }
}

/// The replica's loop: frames in, ticks, proposals while leading, work out.
async fn drive(
    id: u64,
    mut g: Group<MemStorage>,
    links: &Links,
    frames: &glommio::channels::local_channel::LocalReceiver<raft::prelude::Message>,
    work: &Work,
    events: &Sender<Event>,
    halt: &AtomicBool,
) {
    let mut next_tick = Instant::now() + TICK;
    let mut proposed: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut led = false;
    while !halt.load(Ordering::Relaxed) {
        let wait = next_tick.saturating_duration_since(Instant::now());
        if let Ok(Some(message)) = glommio::timer::timeout(wait, async { Ok(frames.recv().await) }).await {
            let _ = g.step(message);
        }
        if Instant::now() >= next_tick {
            g.tick();
            next_tick += TICK;
        }
        if g.role() == StateRole::Leader {
            if !led {
                let _ = events.send(Event::Leads { id });
            }
            propose_some(&mut g, work, &mut proposed);
        }
        led = g.role() == StateRole::Leader;
        while let Some(w) = g.ready() {
            for m in w.send.into_iter().chain(w.send_when_durable) {
                links.send(m);
            }
            g.persisted(w.number); // in memory: durable at once
            for e in w.apply.into_iter().filter(|e| !e.data.is_empty()) {
                let _ = events.send(Event::Applied { id, index: e.index, data: e.data });
            }
            for a in w.answers {
                if let (Answer::Committed { index }, Some(data)) = (a, proposed.remove(&a_index(a))) {
                    let _ = events.send(Event::Acked { index, data, at: Instant::now() });
                }
            }
        }
    }
}

fn a_index(a: Answer) -> u64 {
    match a {
        Answer::Committed { index } | Answer::Unknown { index } | Answer::Lost { index } => index,
    }
}

fn propose_some(g: &mut Group<MemStorage>, work: &Work, proposed: &mut HashMap<u64, Vec<u8>>) {
    for _ in 0..4 {
        if work.to_propose.load(Ordering::Relaxed) == 0 {
            return;
        }
        let n = work.made.load(Ordering::Relaxed);
        let data = format!("v{n}").into_bytes();
        let Ok(p) = g.propose(data.clone()) else { return };
        work.to_propose.fetch_sub(1, Ordering::Relaxed);
        work.made.fetch_add(1, Ordering::Relaxed);
        proposed.insert(p.index, data);
    }
}

/// What the test has seen.
#[derive(Default)]
struct Seen {
    leaders: Vec<u64>,
    applied: HashMap<u64, HashMap<u64, Vec<u8>>>,
    acked: Vec<(u64, Vec<u8>, Instant)>,
}

impl Seen {
    fn take(&mut self, rx: &Receiver<Event>, until: impl Fn(&Seen) -> bool, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while !until(self) {
            let Ok(ev) = rx.recv_deadline(end) else { return false };
            match ev {
                Event::Leads { id } => self.leaders.push(id),
                Event::Applied { id, index, data } => {
                    self.applied.entry(id).or_default().insert(index, data);
                }
                Event::Acked { index, data, at } => self.acked.push((index, data, at)),
            }
        }
        true
    }

    /// Every acknowledged proposal applied by `id` at its index.
    fn holds_all_acked(&self, id: u64) -> bool {
        let log = self.applied.get(&id);
        self.acked.iter().all(|(i, d, _)| log.and_then(|l| l.get(i)) == Some(d))
    }
}

/// A running group of `n` replicas and what the test has seen of it.
struct Cell {
    replicas: Vec<Replica>,
    work: Arc<Work>,
    rx: Receiver<Event>,
    seen: Seen,
}

impl Cell {
    fn start(n: usize) -> Cell {
        let addrs = free_addrs(n);
        let work = Arc::new(Work { to_propose: AtomicU64::new(0), made: AtomicU64::new(0) });
        let (tx, rx) = crossbeam_channel::unbounded();
        let replicas = (1..=n as u64).map(|id| start(id, &addrs, work.clone(), tx.clone())).collect();
        Cell { replicas, work, rx, seen: Seen::default() }
    }

    fn up(&self) -> Vec<u64> {
        (1..=self.replicas.len() as u64).filter(|id| self.replicas[(*id - 1) as usize].thread.is_some()).collect()
    }

    /// Asks the leader for `count` more proposals; waits until they are
    /// acknowledged and applied by every replica still up.
    fn commit(&mut self, count: usize, limit: Duration) -> bool {
        let target = self.seen.acked.len() + count;
        self.work.to_propose.store(count as u64, Ordering::Relaxed);
        let up = self.up();
        let done = |s: &Seen| s.acked.len() >= target && up.iter().all(|&id| s.holds_all_acked(id));
        self.seen.take(&self.rx, done, limit)
    }

    /// Stops replica `id` as a killed process stops: its links close.
    fn stop(&mut self, id: u64) {
        let r = &mut self.replicas[(id - 1) as usize];
        r.stop.store(true, Ordering::Relaxed);
        r.thread.take().unwrap().join().unwrap();
    }

    fn leader(&self) -> u64 {
        *self.seen.leaders.last().unwrap()
    }

    /// Stops the leader; returns the time to the first acknowledgement
    /// after it, once `count` more are committed.
    fn fail_over(&mut self, count: usize) -> Duration {
        let (old, before) = (self.leader(), self.seen.acked.len());
        let stopped_at = Instant::now();
        self.stop(old);
        assert!(self.commit(count, Duration::from_secs(30)), "no new leader committed {count} more in 30 s");
        assert_ne!(self.leader(), old);
        let first = self.seen.acked[before..].iter().map(|(_, _, at)| *at).min().unwrap();
        first.duration_since(stopped_at)
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        for id in self.up() {
            self.stop(id);
        }
    }
}

#[test]
fn a_group_over_real_links_commits_loses_its_leader_and_commits_again() {
    let mut cell = Cell::start(3);
    assert!(cell.commit(200, Duration::from_secs(30)), "200 proposals not committed everywhere in 30 s");
    let old = cell.leader();
    let failover = cell.fail_over(100);
    eprintln!("leader {old} stopped; first acknowledgement through a survivor after {failover:?}");
    assert!(failover < Duration::from_secs(5), "failover took {failover:?}");
}

#[test]
fn five_replicas_lose_two_leaders_in_turn_and_commit() {
    let mut cell = Cell::start(5);
    assert!(cell.commit(100, Duration::from_secs(30)), "100 proposals not committed everywhere in 30 s");
    for _ in 0..2 {
        let failover = cell.fail_over(100);
        assert!(failover < Duration::from_secs(5), "failover took {failover:?}");
    }
    assert_eq!(cell.up().len(), 3);
}

#[test]
fn a_leader_without_a_majority_acknowledges_nothing() {
    let mut cell = Cell::start(3);
    assert!(cell.commit(50, Duration::from_secs(30)), "50 proposals not committed everywhere in 30 s");
    let leader = cell.leader();
    for id in cell.up().into_iter().filter(|&id| id != leader) {
        cell.stop(id);
    }
    let before = cell.seen.acked.len();
    // Far past check-quorum's step-down (an election timeout, 100-200 ms).
    let acked_more = cell.commit(50, Duration::from_secs(3));
    assert!(!acked_more, "a lone replica committed");
    assert_eq!(cell.seen.acked.len(), before, "a replica without a majority acknowledged a proposal");
}

#[test]
fn links_refuse_a_peer_without_the_secret_and_take_one_with_it() {
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(|| async {
            let addrs = free_addrs(2);
            let secret = Rc::new(Secret::new(vec![7; 32]).unwrap());
            let cfg = LinkConfig { me: 1, group: 0, listen: addrs[0], peers: vec![(2, addrs[1])], secret };
            let (links, frames) = Links::start(cfg).unwrap();
            let to = addrs[0];
            let dial = |fill: u8| async move {
                let mut io = glommio::net::TcpStream::connect(to).await.unwrap();
                let secret = Secret::new(vec![fill; 32]).unwrap();
                let shook = ringstream::cell::auth::dial_handshake(&mut io, 2, 1, &secret).await;
                (io, shook)
            };
            let (io, shook) = dial(8).await;
            assert!(shook.is_err(), "a wrong secret passed the handshake");
            drop(io);
            let (mut io, shook) = dial(7).await;
            shook.unwrap();
            let mut bytes = Vec::new();
            let mut message = raft::eraftpb::Message { to: 1, from: 2, term: 4, ..Default::default() };
            message.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
            ringstream::cell::wire::encode(&Frame::Raft { group: 0, message }, &mut bytes);
            futures_lite::AsyncWriteExt::write_all(&mut io, &bytes).await.unwrap();
            let got = glommio::timer::timeout(Duration::from_secs(5), async { Ok(frames.recv().await) }).await;
            let Ok(Some(message)) = got else { panic!("the frame did not arrive: {got:?}") };
            assert_eq!((message.from, message.term), (2, 4));
            for _ in 0..100 {
                if links.stats().refused.get() > 0 {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(links.stats().refused.get(), 1);
            assert_eq!(links.stats().received.get(), 1);
            // A message claiming another sender closes the link, refused.
            let mut forged = raft::eraftpb::Message { to: 1, from: 3, term: 4, ..Default::default() };
            forged.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
            let mut bytes = Vec::new();
            ringstream::cell::wire::encode(&Frame::Raft { group: 0, message: forged }, &mut bytes);
            futures_lite::AsyncWriteExt::write_all(&mut io, &bytes).await.unwrap();
            let mut rest = [0u8; 1];
            let closed = futures_lite::AsyncReadExt::read(&mut io, &mut rest).await;
            assert!(matches!(closed, Ok(0) | Err(_)), "the link stayed open: {closed:?}");
            assert_eq!(links.stats().refused.get(), 2);
            assert_eq!(links.stats().received.get(), 1);
        })
        .unwrap()
        .join()
        .unwrap();
}

/// A peer added at run time (a member added to the cell): before, a
/// replica neither sends to it nor lets it connect; once added on both
/// sides, frames go both ways; once removed, none is sent to it.
#[test]
fn a_peer_added_at_run_time_is_linked_both_ways_and_unlinked_when_removed() {
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(|| async {
            let addrs = free_addrs(2);
            let secret = Rc::new(Secret::new(vec![7; 32]).unwrap());
            let one = LinkConfig { me: 1, group: 0, listen: addrs[0], peers: vec![], secret: secret.clone() };
            let (links_1, frames_1) = Links::start(one).unwrap();
            let four = LinkConfig { me: 4, group: 0, listen: addrs[1], peers: vec![(1, addrs[0])], secret };
            let (links_4, frames_4) = Links::start(four).unwrap();
            let heartbeat = |from: u64, to: u64, term: u64| {
                let mut m = raft::eraftpb::Message { from, to, term, ..Default::default() };
                m.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
                m
            };

            assert!(!links_1.send(heartbeat(1, 4, 1)), "sent to a peer it does not know");
            assert!(links_4.send(heartbeat(4, 1, 1)), "queued for its dialler");
            for _ in 0..100 {
                if links_1.stats().refused.get() > 0 {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            assert!(links_1.stats().refused.get() > 0, "a replica not a member connected");
            assert_eq!(links_1.stats().received.get(), 0);

            links_1.add_peer(4, addrs[1]);
            assert!(links_1.send(heartbeat(1, 4, 2)));
            let got = glommio::timer::timeout(Duration::from_secs(5), async { Ok(frames_4.recv().await) }).await;
            let got = got.ok().flatten().expect("replica 4 hears replica 1");
            assert_eq!((got.from, got.term), (1, 2));
            // Replica 4's dialler tries again (backing off) and is let in now.
            let mut got = None;
            for term in 3..100 {
                links_4.send(heartbeat(4, 1, term));
                got = glommio::timer::timeout(Duration::from_millis(200), async { Ok(frames_1.recv().await) })
                    .await
                    .ok()
                    .flatten();
                if got.is_some() {
                    break;
                }
            }
            assert_eq!(got.map(|m| m.from), Some(4), "replica 1 hears replica 4");

            links_1.remove_peer(4);
            assert!(!links_1.send(heartbeat(1, 4, 200)), "sent to a peer removed");
            assert!(links_1.dialled(4).is_none());
        })
        .unwrap()
        .join()
        .unwrap();
}
