//! The simulated-log rig of the storage-level tests: a log over the
//! in-memory `SimStore` (or a store wrapping it), with its writer and
//! preparer on a single-threaded local executor next to the test's tasks.
//!
//! [`drive`] runs the pool until nothing can make progress and then
//! requires every task to have finished, so a lost wake-up or a deadlock
//! fails the test instead of hanging it. [`drive_until`] is for a future
//! woken from another thread (the tier thread answers object store jobs),
//! where a pool with nothing to run has not stalled for good.

use futures::executor::{block_on, LocalPool, LocalSpawner};
use futures::task::LocalSpawnExt;
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::storage::io::SegmentStore;
use ringstream::storage::{Error, Log, LogConfig, RecordLoc, Recovered, RecoveryReport, Tiering};
use ringstream::tier::TierClient;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// A test's task on the pool.
pub type Task = Pin<Box<dyn Future<Output = ()>>>;

/// A log as recovery returned it.
pub type Opened<S> = (Rc<Log<S>>, Vec<Recovered>, RecoveryReport);

/// Appended-but-not-durable bytes a log allows in these tests: more than
/// any test but the backpressure ones ever has in flight.
pub const PENDING_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// The smallest segments, so a few hundred records cross several rollovers.
pub fn config() -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: PENDING_BYTES_MAX }
}

/// Recovers the log in `store`; the report must count the records it returned.
pub fn try_open<S: SegmentStore>(store: S, cfg: LogConfig) -> Result<Opened<S>, Error> {
    let (log, recovered, report) = block_on(Log::open(store, cfg))?;
    assert_eq!(report.records, recovered.len(), "report and recovered records disagree");
    Ok((Rc::new(log), recovered, report))
}

/// [`try_open`] of a store that must recover.
pub fn open<S: SegmentStore>(store: S, cfg: LogConfig) -> Opened<S> {
    try_open(store, cfg).unwrap_or_else(|e| panic!("open: {e}"))
}

/// [`open`] with tiered storage, as shard 0 of `client`'s node.
pub fn open_tiered<S: SegmentStore>(store: S, cfg: LogConfig, client: &TierClient) -> Opened<S> {
    let tier = Tiering { client: client.clone(), shard: 0 };
    let (log, recovered, report) = block_on(Log::open_tiered(store, cfg, Some(tier))).expect("open");
    assert_eq!(report.records, recovered.len(), "report and recovered records disagree");
    (Rc::new(log), recovered, report)
}

/// Spawns the log's writer and preparer on `spawner`'s pool: they run as
/// long as the pool does.
pub fn spawn_log_tasks<S: SegmentStore + 'static>(spawner: &LocalSpawner, log: &Rc<Log<S>>) {
    let l = log.clone();
    spawner.spawn_local(async move { l.run_writer().await }).expect("spawn writer");
    let l = log.clone();
    spawner.spawn_local(async move { l.run_preparer().await }).expect("spawn preparer");
}

/// Runs `tasks` next to the log's writer and preparer until nothing can
/// make progress, and panics unless every task finished: a stall here is a
/// lost wake-up or a deadlock in the log.
pub fn drive<S: SegmentStore + 'static>(log: &Rc<Log<S>>, tasks: Vec<Task>) {
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    spawn_log_tasks(&spawner, log);
    let expected = tasks.len();
    let done = Rc::new(Cell::new(0usize));
    for task in tasks {
        let done = done.clone();
        spawner
            .spawn_local(async move {
                task.await;
                done.set(done.get() + 1);
            })
            .expect("spawn");
    }
    pool.run_until_stalled();
    assert_eq!(done.get(), expected, "log stalled: {} of {expected} tasks never finished", expected - done.get());
    // Dropping the pool drops the writer and preparer with it.
}

/// [`drive`] for one future with a result.
pub fn drive_one<S: SegmentStore + 'static, T: 'static>(log: &Rc<Log<S>>, fut: impl Future<Output = T> + 'static) -> T {
    let out = Rc::new(RefCell::new(None));
    let o = out.clone();
    drive(log, vec![Box::pin(async move { *o.borrow_mut() = Some(fut.await) })]);
    let value = out.borrow_mut().take();
    value.expect("drive checked that the task finished")
}

/// Runs `fut` next to the log's writer and preparer until it finishes,
/// waiting for wake-ups from other threads.
pub fn drive_until<S: SegmentStore + 'static, T>(log: &Rc<Log<S>>, fut: impl Future<Output = T>) -> T {
    let mut pool = LocalPool::new();
    spawn_log_tasks(&pool.spawner(), log);
    pool.run_until(fut)
}

/// The whole body of the record at `loc`, which must be readable.
pub fn read_body<S: SegmentStore>(log: &Log<S>, loc: RecordLoc) -> Vec<u8> {
    let mut out = Vec::new();
    log.read_body(loc, 0..loc.body_len as usize, &mut out).unwrap_or_else(|e| panic!("reading {loc:?}: {e}"));
    out
}
