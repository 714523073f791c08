//! The preparer zero-fills the next segment in step with the active one
//! (storage/log/preparer.rs), on the real backend: O_DIRECT files through
//! io_uring where the scratch directory allows it, buffered otherwise.
//! Nothing waits on a paced fill: a rollover that finds the next segment
//! unfinished fills it at once.

use glommio::{LocalExecutorBuilder, Placement};
use ringstream::limits::{ZERO_AHEAD_DONE_AT, ZERO_CHUNK_BYTES};
use ringstream::storage::dma_file::DiskStore;
use ringstream::storage::record::RecordHeader;
use ringstream::storage::{Log, LogConfig};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

const SEGMENT_BYTES: u64 = 16 * ZERO_CHUNK_BYTES;
const BODY: usize = 16 * 1024;

fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn open(dir: &Path) -> Rc<Log<DiskStore>> {
    let store = match DiskStore::open(dir, true).await {
        Ok(s) => s,
        Err(_) => DiskStore::open(dir, false).await.unwrap(),
    };
    let cfg = LogConfig { segment_bytes: SEGMENT_BYTES, pending_bytes_max: 64 * 1024 * 1024 };
    let (log, _, _) = Log::open(store, cfg).await.unwrap();
    let log = Rc::new(log);
    let l = log.clone();
    glommio::spawn_local(async move { l.run_writer().await }).detach();
    let l = log.clone();
    glommio::spawn_local(async move { l.run_preparer().await }).detach();
    log
}

async fn append(log: &Log<DiskStore>, i: u64) {
    let h = RecordHeader { kind: 1, stream_id: 1, incarnation: 1, stream_offset: i * BODY as u64, body_len: 0 };
    let (_, lsn) = log.append(h, &vec![i as u8; BODY]).unwrap();
    log.durable(lsn).await.unwrap();
}

async fn wait_ready(log: &Log<DiskStore>, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if log.next_segment_ready() {
            return true;
        }
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    log.next_segment_ready()
}

fn on_executor(f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send + 'static) {
    LocalExecutorBuilder::new(Placement::Unbound).spawn(f).unwrap().join().unwrap();
}

#[test]
fn the_next_segment_is_filled_in_step_with_the_active_one() {
    on_executor(|| {
        Box::pin(async {
            let dir = scratch_dir("zero-pace");
            let log = open(&dir).await;
            // Idle: one chunk of the next segment may go out, not the rest.
            glommio::timer::sleep(Duration::from_millis(300)).await;
            assert!(!log.next_segment_ready(), "an idle log's next segment was zero-filled at once");
            // Fill the active segment to just short of the share after which
            // the next one must be complete: still not ready.
            let (num, den) = ZERO_AHEAD_DONE_AT;
            let share = SEGMENT_BYTES * num / den;
            let records = share / (BODY as u64 + 64) - 2;
            for i in 0..records {
                append(&log, i).await;
            }
            glommio::timer::sleep(Duration::from_millis(100)).await;
            assert!(!log.next_segment_ready(), "the next segment was ready before the active one held its share");
            // Past the share, the fill finishes.
            for i in records..records + 4 {
                append(&log, i).await;
            }
            assert!(wait_ready(&log, Duration::from_secs(10)).await, "the next segment never became ready");
            log.stop();
            let _ = std::fs::remove_dir_all(&dir);
        })
    });
}

#[test]
fn appends_that_outrun_the_fill_roll_over_without_waiting_for_the_pace() {
    on_executor(|| {
        Box::pin(async {
            let dir = scratch_dir("zero-pace-burst");
            let log = open(&dir).await;
            // Three segments' worth appended at once, faster than any paced
            // fill: each rollover finds its segment unfinished and fills it
            // at once; every append becomes durable.
            let n = 3 * SEGMENT_BYTES / BODY as u64;
            let mut waits = Vec::new();
            for i in 0..n {
                let h = RecordHeader { kind: 1, stream_id: 1, incarnation: 1, stream_offset: i, body_len: 0 };
                waits.push(log.append(h, &vec![1; BODY]).unwrap().1);
            }
            let last = *waits.last().unwrap();
            let l = log.clone();
            let durable = glommio::spawn_local(async move { l.durable(last).await.is_ok() });
            let until = Instant::now() + Duration::from_secs(30);
            while log.durable_lsn() < last && Instant::now() < until {
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            assert!(log.durable_lsn() >= last, "appends across rollovers did not become durable within 30 s");
            assert!(durable.await, "the last append's wait failed");
            log.stop();
            let _ = std::fs::remove_dir_all(&dir);
        })
    });
}
