//! One replicated group over real sockets: three replicas, each on its own
//! glommio executor (thread) with its `cell::link::Links` on loopback (the
//! handshake, then frames) and a `cell::group::Group` over raft-rs's
//! in-memory store, ticked every 10 ms. They elect a leader, commit what it
//! is given, lose it (its executor stops: listener and links closed, as a
//! killed process's would be), elect another and commit again. Every
//! acknowledged proposal must be applied by every surviving replica at its
//! index, and a survivor must acknowledge again within a few seconds; the
//! time from the stop to that first acknowledgement is printed.

#[path = "common/raft_mem.rs"]
mod raft_mem;

use crossbeam_channel::{Receiver, Sender};
use glommio::{LocalExecutorBuilder, Placement};
use raft::prelude::HardState;
use raft::StateRole;
use raft_mem::Store;
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

const IDS: [u64; 3] = [1, 2, 3];
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

fn free_addrs() -> Vec<SocketAddr> {
    let ls: Vec<_> = IDS.iter().map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

fn start(id: u64, addrs: &[SocketAddr], work: Arc<Work>, events: Sender<Event>) -> Replica {
    let stop = Arc::new(AtomicBool::new(false));
    let cfg_peers: Vec<_> = IDS.iter().zip(addrs).filter(|(p, _)| **p != id).map(|(p, a)| (*p, *a)).collect();
    let listen = addrs[(id - 1) as usize];
    let halt = stop.clone();
    let thread = LocalExecutorBuilder::new(Placement::Unbound)
        .name(&format!("replica-{id}"))
        .spawn(move || async move {
            let secret = Rc::new(Secret::new(vec![7; 32]).unwrap());
            let (links, frames) = Links::start(LinkConfig { me: id, listen, peers: cfg_peers, secret }).unwrap();
            let store = Store::with(&IDS, &[], &HardState::default());
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
    mut g: Group<Store>,
    links: &Links,
    frames: &glommio::channels::local_channel::LocalReceiver<Frame>,
    work: &Work,
    events: &Sender<Event>,
    halt: &AtomicBool,
) {
    let mut next_tick = Instant::now() + TICK;
    let mut proposed: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut led = false;
    while !halt.load(Ordering::Relaxed) {
        let wait = next_tick.saturating_duration_since(Instant::now());
        if let Ok(Some(Frame::Raft { message, .. })) =
            glommio::timer::timeout(wait, async { Ok(frames.recv().await) }).await
        {
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
                links.send(0, m);
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

fn propose_some(g: &mut Group<Store>, work: &Work, proposed: &mut HashMap<u64, Vec<u8>>) {
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

#[test]
fn a_group_over_real_links_commits_loses_its_leader_and_commits_again() {
    let addrs = free_addrs();
    let work = Arc::new(Work { to_propose: AtomicU64::new(200), made: AtomicU64::new(0) });
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut replicas: Vec<_> = IDS.iter().map(|&id| start(id, &addrs, work.clone(), tx.clone())).collect();
    let mut seen = Seen::default();

    let all_in = |s: &Seen| s.acked.len() == 200 && IDS.iter().all(|&id| s.holds_all_acked(id));
    assert!(seen.take(&rx, all_in, Duration::from_secs(30)), "200 proposals not committed everywhere in 30 s");
    let leader = *seen.leaders.last().unwrap();

    let stopped_at = Instant::now();
    let r = &mut replicas[(leader - 1) as usize];
    r.stop.store(true, Ordering::Relaxed);
    r.thread.take().unwrap().join().unwrap();
    work.to_propose.store(100, Ordering::Relaxed);
    let survivors: Vec<u64> = IDS.iter().copied().filter(|&id| id != leader).collect();
    let again = |s: &Seen| s.acked.len() == 300 && survivors.iter().all(|&id| s.holds_all_acked(id));
    assert!(seen.take(&rx, again, Duration::from_secs(30)), "no new leader committed 100 more in 30 s");

    let first_after = seen.acked[200..].iter().map(|(_, _, at)| *at).min().unwrap();
    let failover = first_after.duration_since(stopped_at);
    eprintln!("leader {leader} stopped; first acknowledgement through a survivor after {failover:?}");
    assert!(failover < Duration::from_secs(5), "failover took {failover:?}");
    let new_leader = *seen.leaders.last().unwrap();
    assert_ne!(new_leader, leader);
    for r in &mut replicas {
        r.stop.store(true, Ordering::Relaxed);
        if let Some(t) = r.thread.take() {
            t.join().unwrap();
        }
    }
}

#[test]
fn links_refuse_a_peer_without_the_secret_and_take_one_with_it() {
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(|| async {
            let addrs = free_addrs();
            let secret = Rc::new(Secret::new(vec![7; 32]).unwrap());
            let cfg = LinkConfig { me: 1, listen: addrs[0], peers: vec![(2, addrs[1])], secret };
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
            let message = raft::eraftpb::Message { to: 1, from: 2, term: 4, ..Default::default() };
            ringstream::cell::wire::encode(&Frame::Raft { group: 0, message }, &mut bytes);
            futures_lite::AsyncWriteExt::write_all(&mut io, &bytes).await.unwrap();
            let got = glommio::timer::timeout(Duration::from_secs(5), async { Ok(frames.recv().await) }).await;
            let Ok(Some(Frame::Raft { message, .. })) = got else { panic!("the frame did not arrive: {got:?}") };
            assert_eq!((message.from, message.term), (2, 4));
            for _ in 0..100 {
                if links.stats().refused.get() > 0 {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(links.stats().refused.get(), 1);
            assert_eq!(links.stats().received.get(), 1);
        })
        .unwrap()
        .join()
        .unwrap();
}
