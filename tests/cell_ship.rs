//! Segment shipping's transfer over real parts (`cell::ship`): two
//! replicas of one group on their own glommio executors, links on
//! loopback, segment directories on the real file system (O_DIRECT where
//! it works). Replica 2 holds a batched log of sealed segments (2 MiB and
//! 64 KiB each, written and committed as a leader writes them, the last
//! sealed at a restart where its records end, mid-block) and answers
//! fetches from it (`ship::Source`); replica 1 copies every sealed segment
//! into an empty directory, three chunks a segment:
//! - each copy is byte for byte the leader's file (length included), and
//!   the copies open as a batched log whose every entry is the leader's
//!   (same marks, same batch bytes);
//! - a segment the leader does not hold sealed (its active one, one past
//!   its end) is refused as not held;
//! - a chunk corrupted on its way (one byte flipped in the leader's
//!   answer, after its CRC) is refused: shown with a planted handler;
//! - the leader gone mid-transfer fails the copy, at once.

mod common;

use common::TempDir;
use glommio::{LocalExecutorBuilder, Placement};
use ringstream::cell::config::Secret;
use ringstream::cell::link::{FetchHandler, LinkConfig, Links};
use ringstream::cell::ship::{self, ShipError, Source};
use ringstream::limits::{CELL_SHIP_CHUNK_BYTES, DIRECT_IO_ALIGNMENT_BYTES};
use ringstream::storage::dma_file::DiskStore;
use ringstream::storage::log::LocalLog;
use ringstream::storage::{LogConfig, RecordHeader};
use std::cell::Cell;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sealed segments the leader holds when it serves.
const SEALED: usize = 3;
/// Two chunks and a bit: a copy takes three fetches.
const SEGMENT_BYTES: u64 = 2 * CELL_SHIP_CHUNK_BYTES as u64 + 64 * 1024;

fn log_config() -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES, pending_bytes_max: 4 * 1024 * 1024 }
}

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    common::cell::free_ports(n).into_iter().map(|p| SocketAddr::from(([127, 0, 0, 1], p))).collect()
}

fn links(me: u64, addrs: &[SocketAddr]) -> Links {
    let peer = 3 - me;
    let secret = Rc::new(Secret::new(vec![7; 32]).unwrap());
    let peers = vec![(peer, addrs[peer as usize - 1])];
    Links::start(LinkConfig { me, group: 0, listen: addrs[me as usize - 1], peers, secret }).unwrap().0
}

async fn disk_store(dir: &Path) -> DiskStore {
    let direct = ringstream::preflight::supports_direct_io(dir).unwrap_or(false);
    DiskStore::open(dir, direct).await.unwrap()
}

/// What the serving replica does with its answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Serve {
    Honestly,
    /// Flips one byte of the bytes of its third answer from now on (a
    /// planted fault).
    CorruptingTheThird,
}

/// `Source`, or `Source` with a fault planted.
struct Serving {
    source: Source<DiskStore>,
    how: Rc<Cell<Serve>>,
    answers: Cell<u32>,
}

impl FetchHandler for Serving {
    fn fetch(&self, request: &[u8]) -> Vec<u8> {
        let mut answer = self.source.fetch(request);
        if self.how.get() == Serve::CorruptingTheThird {
            self.answers.set(self.answers.get() + 1);
            if self.answers.get() == 3 && answer.len() > 100 {
                answer[100] ^= 0x40;
            }
        }
        answer
    }
}

/// The log the serving replica holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Leader {
    /// A replica's batched log, its batches closed and committed as a
    /// leader's are; a restart resumes its newest segment.
    Batched,
    /// A single node's log: a restart seals its newest segment where its
    /// records end, so that file is not a whole number of blocks long.
    Single,
}

async fn open_log(dir: &Path, kind: Leader) -> LocalLog<DiskStore> {
    let store = disk_store(dir).await;
    match kind {
        Leader::Batched => LocalLog::open_batched(store, log_config()).await.unwrap().0,
        Leader::Single => LocalLog::open(store, log_config(), None).await.unwrap().0,
    }
}

/// Writes 4 KiB records (in committed batches of 7 for a batched log)
/// until the log holds SEALED - 1 sealed segments and part of one more,
/// then stops and reopens it. Returns the reopened log.
async fn leader_log(dir: &Path, kind: Leader) -> Rc<LocalLog<DiskStore>> {
    let log = Rc::new(open_log(dir, kind).await);
    let (w, p) = (log.clone(), log.clone());
    let writer = glommio::spawn_local(async move { w.run_writer().await });
    let preparer = glommio::spawn_local(async move { p.run_preparer().await });
    log.set_appendable(true);
    let (mut n, mut index, mut more) = (0u64, 0u64, 20);
    while more > 0 {
        if log.sealed_files().len() >= SEALED - 1 {
            more -= 1;
        }
        let mut lsn = 0;
        for _ in 0..7 {
            let body = format!("record {n} {}", "x".repeat(4000 + (n % 17) as usize)).into_bytes();
            let h = RecordHeader { kind: 1, stream_id: 1, incarnation: 0, stream_offset: n, body_len: 0 };
            lsn = log.append(h, &body).unwrap().1;
            n += 1;
        }
        if kind == Leader::Batched {
            index += 1;
            let end = log.tail_position();
            log.pending_batch().unwrap();
            lsn = log.close_batch(1, index, end).unwrap().1;
            log.commit_to(index);
        }
        log.durable(lsn).await.unwrap();
    }
    log.stop();
    drop((writer, preparer, log));
    Rc::new(open_log(dir, kind).await)
}

/// Copies segments 0.. below `past_sealed` from replica 2 into a new
/// directory (tagged `tag`); the first copy's failure, if one failed.
async fn first_failure(l: &Links, past_sealed: u64, tag: &str) -> Option<ShipError> {
    let scratch = TempDir::new(tag);
    let into = disk_store(scratch.path()).await;
    for no in 0..past_sealed {
        if let Err(e) = ship::fetch_segment(l, 2, no, &into).await {
            return Some(e);
        }
    }
    None
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

#[test]
fn sealed_segments_are_copied_whole_checked_and_open_as_the_leaders_log() {
    ship_from(Leader::Batched);
}

#[test]
fn a_segment_that_ends_mid_block_is_copied_to_its_length() {
    ship_from(Leader::Single);
}

fn ship_from(kind: Leader) {
    let (leader_dir, copy_dir) = (TempDir::new("ship-leader"), TempDir::new("ship-copy"));
    let addrs = free_addrs(2);
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicU64::new(0));
    let how = Arc::new(AtomicU64::new(0));
    let (server_addrs, halt, serving_ready, serving_how) = (addrs.clone(), stop.clone(), ready.clone(), how.clone());
    let leader_path = leader_dir.path().to_path_buf();
    let server = LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let log = leader_log(&leader_path, kind).await;
            let l = links(2, &server_addrs);
            let mode = Rc::new(Cell::new(Serve::Honestly));
            let source = Source::new(log.clone());
            l.serve_fetches(Rc::new(Serving { source, how: mode.clone(), answers: Cell::new(0) }));
            serving_ready.store(log.sealed_files().last().unwrap().0 + 1, Ordering::Release);
            while !halt.load(Ordering::Relaxed) {
                if serving_how.load(Ordering::Relaxed) == 1 {
                    mode.set(Serve::CorruptingTheThird);
                }
                glommio::timer::sleep(Duration::from_millis(2)).await;
            }
            log.stop();
            // Dropping the links closes every connection, as a kill does.
        })
        .unwrap();
    let (leader_path, copy_path) = (leader_dir.path().to_path_buf(), copy_dir.path().to_path_buf());
    let client = LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let l = links(1, &addrs);
            let deadline = Instant::now() + Duration::from_secs(30);
            while ready.load(Ordering::Acquire) == 0 || !l.is_connected(2) {
                assert!(Instant::now() < deadline, "the leader did not serve within 30 s");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            let past_sealed = ready.load(Ordering::Acquire);
            let into = disk_store(&copy_path).await;
            let started = Instant::now();
            let mut lengths = Vec::new();
            for no in 0..past_sealed {
                lengths.push(ship::fetch_segment(&l, 2, no, &into).await.unwrap());
            }
            let took = started.elapsed();
            eprintln!("shipped {past_sealed} segments of {lengths:?} bytes in {took:?}");
            assert!(lengths.iter().any(|&n| n > 2 * CELL_SHIP_CHUNK_BYTES as u64), "no copy took three chunks");
            let mid_block = lengths.iter().any(|n| n % DIRECT_IO_ALIGNMENT_BYTES != 0);
            assert_eq!(mid_block, kind == Leader::Single, "files ending mid-block: {lengths:?}");

            // Byte for byte the leader's files, lengths included.
            let copies = segment_files(&copy_path);
            assert_eq!(copies.len() as u64, past_sealed);
            for copy in &copies {
                let original = leader_path.join(copy.file_name().unwrap());
                assert!(std::fs::read(copy).unwrap() == std::fs::read(&original).unwrap(), "{copy:?} differs");
            }

            // Not held: the leader's active segment, and one past it.
            for no in [past_sealed, past_sealed + 5] {
                let r = ship::fetch_segment(&l, 2, no, &disk_store(&copy_path).await).await;
                assert!(matches!(r, Err(ShipError::NotHeld { segment, from: 2 }) if segment == no), "{r:?}");
            }

            // A chunk corrupted after its CRC: refused.
            how.store(1, Ordering::Relaxed);
            glommio::timer::sleep(Duration::from_millis(20)).await;
            let r = first_failure(&l, past_sealed, "ship-scratch").await.expect("a corrupted chunk passed");
            assert!(matches!(&r, ShipError::Refused { why, .. } if why.contains("CRC")), "{r}");

            // The leader gone mid-transfer: the copy fails, at once.
            stop.store(true, Ordering::Relaxed);
            let gone = Instant::now();
            let r = first_failure(&l, past_sealed, "ship-scratch-2").await.expect("a copy went on without its leader");
            assert!(matches!(r, ShipError::Link { .. }), "{r}");
            assert!(gone.elapsed() < Duration::from_secs(5), "the failure took {:?}", gone.elapsed());
        })
        .unwrap();
    client.join().unwrap();
    server.join().unwrap();
    if kind == Leader::Single {
        return;
    }

    // The copies open as the leader's log (reopened once it stopped):
    // every entry they hold is the leader's, the same marks and bytes.
    let (leader_path, copy_path) = (leader_dir.path().to_path_buf(), copy_dir.path().to_path_buf());
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let leader = LocalLog::open_batched(disk_store(&leader_path).await, log_config()).await;
            let (leader, _, _, _) = leader.unwrap();
            let (copied, _, _, _) = LocalLog::open_batched(disk_store(&copy_path).await, log_config()).await.unwrap();
            assert_eq!(copied.first_index(), Some(1));
            let last = copied.last_index();
            assert!(last > 20 && last < leader.last_index(), "{last} entries copied of {}", leader.last_index());
            for index in 1..=last {
                let (m, lm) = (copied.mark(index).unwrap().unwrap(), leader.mark(index).unwrap().unwrap());
                assert_eq!(m, lm, "entry {index}");
                assert_eq!(copied.batch_of(&m).unwrap(), leader.batch_of(&lm).unwrap(), "entry {index}");
            }
        })
        .unwrap()
        .join()
        .unwrap();
}
