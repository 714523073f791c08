//! Replicas of one group at work, over real parts: each on its own glommio
//! executor (thread) with its segment directory on the real file system
//! (O_DIRECT where it works), its peer links on loopback, and the
//! `cell::replica` loop. A writer on every replica appends records while
//! that replica leads; a record is acknowledged when `durable` resolves
//! (durable here and committed by the group).
//!
//! - three replicas acknowledge, lose their leader (its executor ends, as
//!   a killed process's), acknowledge through a survivor within seconds,
//!   take the old leader back, which catches up; then every acknowledged
//!   record is in every replica's log at the place it was acknowledged,
//!   once, and the replicas' segments are byte for byte the same;
//! - a leader whose followers are gone acknowledges nothing.

mod common;

use common::TempDir;
use crossbeam_channel::{Receiver, Sender};
use glommio::{LocalExecutorBuilder, Placement};
use ringstream::cell::config::Secret;
use ringstream::cell::link::{LinkConfig, Links};
use ringstream::cell::replica::{self, Replica, Sleep};
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::storage::dma_file::DiskStore;
use ringstream::storage::io::SegmentStore;
use ringstream::storage::log::LocalLog;
use ringstream::storage::{LogConfig, RecordHeader, RecordLoc};
use std::cell::Cell;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(10);

fn log_config() -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: 4 * 1024 * 1024 }
}

/// An acknowledged record: its body and where it was when acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Acked {
    body: Vec<u8>,
    loc: RecordLoc,
    at: Instant,
    by: u64,
}

/// Shared by the writers: the next record's number, how many to write.
struct Work {
    /// Each replica's committed index, as it last saw it (by id - 1).
    committed: [AtomicU64; 3],
    next: AtomicU64,
    wanted: AtomicU64,
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: glommio::ExecutorJoinHandle<()>,
}

struct Group {
    dirs: Vec<TempDir>,
    addrs: Vec<SocketAddr>,
    running: HashMap<u64, Running>,
    work: Arc<Work>,
    tx: Sender<Acked>,
    rx: Receiver<Acked>,
    acked: Vec<Acked>,
}

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let ls: Vec<_> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

impl Group {
    fn new(n: usize) -> Group {
        let (tx, rx) = crossbeam_channel::unbounded();
        let work = Arc::new(Work { committed: Default::default(), next: AtomicU64::new(0), wanted: AtomicU64::new(0) });
        let dirs = (0..n).map(|_| TempDir::new("replica")).collect();
        let mut g = Group { dirs, addrs: free_addrs(n), running: HashMap::new(), work, tx, rx, acked: Vec::new() };
        for id in 1..=n as u64 {
            g.start(id);
        }
        g
    }

    fn start(&mut self, id: u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let voters: Vec<u64> = (1..=self.addrs.len() as u64).collect();
        let peers: Vec<_> = voters.iter().zip(&self.addrs).filter(|(p, _)| **p != id).map(|(p, a)| (*p, *a)).collect();
        let listen = self.addrs[(id - 1) as usize];
        let dir = self.dirs[(id - 1) as usize].path().to_path_buf();
        let (halt, work, tx) = (stop.clone(), self.work.clone(), self.tx.clone());
        let thread = LocalExecutorBuilder::new(Placement::Unbound)
            .name(&format!("replica-{id}"))
            .spawn(move || async move { serve(id, voters, peers, listen, &dir, &halt, &work, &tx).await })
            .unwrap();
        self.running.insert(id, Running { stop, thread });
    }

    /// Stops replica `id` as a killed process stops: its executor ends.
    fn stop(&mut self, id: u64) {
        let r = self.running.remove(&id).expect("running");
        r.stop.store(true, Ordering::Relaxed);
        r.thread.join().unwrap();
    }

    /// Asks for `count` more records; true once they are acknowledged.
    fn write(&mut self, count: u64, limit: Duration) -> bool {
        let target = self.acked.len() + count as usize;
        self.work.wanted.fetch_add(count, Ordering::Relaxed);
        let end = Instant::now() + limit;
        while self.acked.len() < target {
            let Ok(a) = self.rx.recv_deadline(end) else { return false };
            self.acked.push(a);
        }
        true
    }

    /// Waits until every replica running has committed the same index, for
    /// a while (nothing more comes).
    fn caught_up(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        let mut same_since: Option<(u64, Instant)> = None;
        while Instant::now() < end {
            let seen: Vec<u64> =
                self.running.keys().map(|id| self.work.committed[(id - 1) as usize].load(Ordering::Relaxed)).collect();
            let all_same = seen.windows(2).all(|w| w[0] == w[1]);
            same_since = match (all_same, same_since) {
                (true, Some((c, at))) if c == seen[0] => Some((c, at)),
                (true, _) => Some((seen[0], Instant::now())),
                (false, _) => None,
            };
            if same_since.is_some_and(|(_, at)| at.elapsed() > Duration::from_millis(200)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn leader(&self) -> u64 {
        self.acked.last().expect("something was acknowledged").by
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.running.keys().copied().collect();
        for id in ids {
            self.stop(id);
        }
    }
}

/// One replica's executor: its log, links and loop, and a writer that
/// appends while the replica leads.
#[allow(clippy::too_many_arguments)]
async fn serve(
    id: u64,
    voters: Vec<u64>,
    peers: Vec<(u64, SocketAddr)>,
    listen: SocketAddr,
    dir: &Path,
    halt: &Arc<AtomicBool>,
    work: &Arc<Work>,
    tx: &Sender<Acked>,
) {
    let direct = ringstream::preflight::supports_direct_io(dir).unwrap_or(false);
    let store = DiskStore::open(dir, direct).await.unwrap();
    let (log, _, _, _) = LocalLog::open_batched(store, log_config()).await.unwrap();
    let log = Rc::new(log);
    let (w, p) = (log.clone(), log.clone());
    let writer = glommio::spawn_local(async move { w.run_writer().await });
    let preparer = glommio::spawn_local(async move { p.run_preparer().await });
    let secret = Rc::new(Secret::new(vec![7; 32]).unwrap());
    let (links, inbox) = Links::start(LinkConfig { me: id, group: 0, listen, peers, secret }).unwrap();
    let replica = Replica::open(id, 0, voters, log.clone()).await.unwrap();
    let status = replica.status();
    let stop = Rc::new(Cell::new(false));
    let sleep: Sleep = Rc::new(|d| Box::pin(glommio::timer::sleep(d)));
    let (s, l) = (stop.clone(), log.clone());
    let looped = glommio::spawn_local(async move {
        replica::run(replica, inbox.stream(), &links, &sleep, TICK, &s).await;
    });
    while !halt.load(Ordering::Relaxed) {
        work.committed[(id - 1) as usize].store(log.committed_index(), Ordering::Relaxed);
        if !status.leading.get() || work.wanted.load(Ordering::Relaxed) == 0 {
            glommio::timer::sleep(Duration::from_millis(2)).await;
            continue;
        }
        work.wanted.fetch_sub(1, Ordering::Relaxed);
        let n = work.next.fetch_add(1, Ordering::Relaxed);
        let tx = tx.clone();
        let l = l.clone();
        glommio::spawn_local(async move {
            // About 500 bytes, so a run crosses several segments.
            let body = format!("record {n} {}", "x".repeat(480)).into_bytes();
            let h = RecordHeader { kind: 1, stream_id: 1, incarnation: 0, stream_offset: n, body_len: 0 };
            let Ok((loc, lsn)) = l.append(h, &body) else { return };
            if l.durable(lsn).await.is_ok() {
                let _ = tx.send(Acked { body, loc, at: Instant::now(), by: id });
            }
        })
        .detach();
    }
    stop.set(true);
    log.stop();
    drop(looped);
    drop((writer, preparer));
}

/// A stopped replica's log: each record's body by its place (segment,
/// position), and the segments with entries, whole.
type Held = (HashMap<(u64, u64), Vec<u8>>, Vec<(u64, Vec<u8>)>);

/// A stopped replica's log, as recovery reads it.
fn records_of(dir: &Path) -> Held {
    let dir = dir.to_path_buf();
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let direct = ringstream::preflight::supports_direct_io(&dir).unwrap_or(false);
            let store = DiskStore::open(&dir, direct).await.unwrap();
            let segments: Vec<(u64, Vec<u8>)> = {
                let list = store.list().await.unwrap();
                list.iter().map(|&(no, _)| (no, store.map(no).unwrap().bytes().to_vec())).collect()
            };
            let (log, recovered, _, _) = LocalLog::open_batched(store, log_config()).await.unwrap();
            // The segments with entries (not those made ahead, empty).
            let last = log.batch_start().segment;
            let segments: Vec<_> = segments.into_iter().filter(|(no, _)| *no <= last).collect();
            let mut bodies = HashMap::new();
            for r in recovered {
                let mut out = Vec::new();
                log.read_body(r.loc, 0..r.loc.body_len as usize, &mut out).unwrap();
                bodies.insert((r.loc.segment, r.loc.pos), out);
            }
            (bodies, segments)
        })
        .unwrap()
        .join()
        .unwrap()
}

fn dirs(g: &Group) -> Vec<PathBuf> {
    g.dirs.iter().map(|d| d.path().to_path_buf()).collect()
}

#[test]
fn three_replicas_acknowledge_fail_over_catch_up_and_hold_the_same_bytes() {
    let mut g = Group::new(3);
    assert!(g.write(300, Duration::from_secs(30)), "300 records not acknowledged in 30 s");
    let old = g.leader();
    let before = g.acked.len();
    let stopped = Instant::now();
    g.stop(old);
    assert!(g.write(200, Duration::from_secs(30)), "no survivor acknowledged 200 more in 30 s");
    let first = g.acked[before..].iter().map(|a| a.at).min().unwrap();
    let failover = first.duration_since(stopped);
    eprintln!("leader {old} stopped; first acknowledgement through a survivor after {failover:?}");
    assert!(failover < Duration::from_secs(5), "failover took {failover:?}");
    assert_ne!(g.leader(), old);
    // The old leader comes back, catches up, and the group goes on.
    g.start(old);
    assert!(g.write(200, Duration::from_secs(30)), "200 more not acknowledged after the restart");
    // Every replica has committed all there is (the old leader caught up).
    assert!(g.caught_up(Duration::from_secs(30)), "the replicas did not catch up in 30 s");
    for id in 1..=3 {
        g.stop(id);
    }
    let logs: Vec<_> = dirs(&g).iter().map(|d| records_of(d)).collect();
    for (i, (bodies, _)) in logs.iter().enumerate() {
        for a in &g.acked {
            assert_eq!(bodies.get(&(a.loc.segment, a.loc.pos)), Some(&a.body), "replica {} lacks {a:?}", i + 1);
        }
        let mut seen = std::collections::HashSet::new();
        for body in bodies.values() {
            assert!(seen.insert(body), "replica {}: {} twice", i + 1, String::from_utf8_lossy(body));
        }
    }
    assert!(logs[0].1.len() >= 3, "the run should cross segments");
    assert_eq!(logs[0].1, logs[1].1, "replicas 1 and 2 hold other segments");
    assert_eq!(logs[0].1, logs[2].1, "replicas 1 and 3 hold other segments");
}

#[test]
fn a_leader_without_a_majority_acknowledges_nothing() {
    let mut g = Group::new(3);
    assert!(g.write(50, Duration::from_secs(30)), "50 records not acknowledged in 30 s");
    let leader = g.leader();
    for id in (1..=3).filter(|&id| id != leader) {
        g.stop(id);
    }
    let before = g.acked.len();
    assert!(!g.write(20, Duration::from_secs(3)), "a lone replica acknowledged");
    assert_eq!(g.acked.len(), before);
}

/// Drops what the replica sends: a group of one has no one to send to.
struct Nowhere;

impl replica::Outbox for Nowhere {
    fn send(&self, _: raft::prelude::Message) -> bool {
        false
    }
}

#[test]
fn a_replica_whose_loop_ends_leads_no_more_and_refuses_confirmations() {
    let dir = TempDir::new("replica");
    let path = dir.path().to_path_buf();
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let direct = ringstream::preflight::supports_direct_io(&path).unwrap_or(false);
            let store = DiskStore::open(&path, direct).await.unwrap();
            let (log, _, _, _) = LocalLog::open_batched(store, log_config()).await.unwrap();
            let log = Rc::new(log);
            let (w, p) = (log.clone(), log.clone());
            let _writer = glommio::spawn_local(async move { w.run_writer().await });
            let _preparer = glommio::spawn_local(async move { p.run_preparer().await });
            // A group of one elects itself.
            let replica = Replica::open(1, 0, vec![1], log.clone()).await.unwrap();
            let status = replica.status();
            let (tx, rx) = futures_channel::mpsc::unbounded::<raft::prelude::Message>();
            let sleep: Sleep = Rc::new(|d| Box::pin(glommio::timer::sleep(d)));
            let looped = glommio::spawn_local(async move {
                replica::run(replica, rx, &Nowhere, &sleep, TICK, &Cell::new(false)).await;
            });
            let end = Instant::now() + Duration::from_secs(10);
            while !status.leading.get() {
                assert!(Instant::now() < end, "a group of one did not elect itself in 10 s");
                glommio::timer::sleep(TICK).await;
            }
            let ticket = status.confirms.ticket();
            // Its inbox ends (the links are gone): the loop returns.
            drop(tx);
            looped.await;
            assert!(!status.leading.get(), "the shard may still write");
            assert_eq!(status.leader.get(), None, "requests would still be sent to it");
            let confirmed =
                glommio::timer::timeout(Duration::from_secs(2), async { Ok(status.confirms.confirm(ticket).await) })
                    .await;
            assert!(matches!(confirmed, Ok(false)), "a confirmation was {confirmed:?}, not refused");
            log.stop();
        })
        .unwrap()
        .join()
        .unwrap();
    drop(dir);
}
