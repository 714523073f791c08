//! Fault-injection tests of the segment log over the in-memory `SimStore`.
//!
//! Each test runs the log's writer and preparer on a single-threaded local
//! executor next to its own client tasks. `drive` runs the pool until nothing
//! can make progress and then requires every client task to have finished, so
//! a lost wake-up or a deadlock fails the test instead of hanging it; and
//! `watchdog` fails a test whose log spins (e.g. retries a failed flush forever).
//!
//! The central property (test `acknowledged_prefix_survives_every_crash_point`):
//! whatever write or sync fails, and however much of the last unsynced write
//! reached the media (any subset of its sectors, a tear at any byte, bits
//! garbled in the bytes it changed), a restarted process recovers a prefix of
//! the append order that contains every acknowledged record, byte for byte,
//! and nothing else; and the recovered log keeps working. Its workloads are
//! drawn from a seed printed at the start (and in every failure message);
//! `RINGSTREAM_CRASH_SEED=<seed>` replays a run.

mod common;

use common::sim::{config, drive, drive_one, open, read_body, spawn_log_tasks, Task};
use futures::executor::{block_on, LocalPool};
use ringstream::limits::{DIRECT_IO_ALIGNMENT_BYTES, RECORD_HEADER_BYTES, SECTOR_BYTES, SEGMENT_BYTES_MIN};
use ringstream::storage::io::{SealedBytes, SegmentFile, SegmentStore};
use ringstream::storage::record;
use ringstream::storage::sim_file::{SimFile, SimStore};
use ringstream::storage::{Error, Log, LogConfig, RecordHeader, RecordLoc, Recovered};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::thread;
use std::time::Duration;

/// The rig's segments (`common::sim::config`): a few hundred records cross
/// several rollovers. No test but the backpressure one ever sees `Full`.
const SEGMENT_BYTES: u64 = SEGMENT_BYTES_MIN;
/// Body lengths are 1..=BODY_BYTES_MAX, so records straddle 4 KiB blocks.
const BODY_BYTES_MAX: u64 = 3000;

// ---------------------------------------------------------------------------
// Executor harness (the rest is `common::sim`)

/// The slowest test takes ~5 s in a debug build; far beyond that, the log is spinning.
const TEST_TIME_MAX: Duration = Duration::from_secs(120);

/// Runs `test` on its own thread and fails if it does not finish in time: a
/// writer that never yields can't be caught by `drive`, only by the clock.
fn watchdog(test: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        test();
        let _ = tx.send(());
    });
    match rx.recv_timeout(TEST_TIME_MAX) {
        // Finished, or panicked (the sender dropped): join to pass on its panic.
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        // The thread is left behind; the test binary exits after reporting.
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("test still running after {TEST_TIME_MAX:?}: the log hangs or spins")
        }
    }
}

/// `SimStore` as the log sees it in these tests: every write and sync first
/// yields to the executor once, like real I/O, so clients append while a flush
/// is in flight (without it the writer's flush completes within one poll and
/// an over-eager release of waiters could never be observed). Optionally one
/// chosen sync fails without killing the disk, like a transient fdatasync
/// error after which later syncs succeed although the kernel dropped the
/// dirty pages.
#[derive(Clone)]
struct TestStore {
    sim: SimStore,
    /// The n-th sync (counting from 1) fails transiently; 0 = none.
    fail_sync: u64,
    syncs: Rc<Cell<u64>>,
    writes: Rc<Cell<u64>>,
    /// When set, every write waits until the test releases it.
    gate: Option<Rc<Gate>>,
}

impl TestStore {
    fn new(sim: SimStore) -> Self {
        TestStore { sim, fail_sync: 0, syncs: Rc::default(), writes: Rc::default(), gate: None }
    }
}

/// Holds each write (numbered from 1 as they start) until the test releases
/// it, in any order: flushes in flight together, completing out of order.
#[derive(Default)]
struct Gate {
    started: Cell<u64>,
    released: RefCell<std::collections::BTreeSet<u64>>,
    wakers: RefCell<Vec<std::task::Waker>>,
}

impl Gate {
    async fn pass(&self) {
        let id = self.started.get() + 1;
        self.started.set(id);
        std::future::poll_fn(|cx| {
            if self.released.borrow().contains(&id) {
                return Poll::Ready(());
            }
            self.wakers.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    fn release(&self, id: u64) {
        self.released.borrow_mut().insert(id);
        self.wakers.borrow_mut().drain(..).for_each(|w| w.wake());
    }
}

struct TestFile {
    sim: SimFile,
    store: TestStore,
}

/// Returns Pending once (waking itself), then Ready.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl SegmentFile for TestFile {
    type Buf = Vec<u8>;
    fn alloc_buf(&self, len: usize) -> Vec<u8> {
        self.sim.alloc_buf(len)
    }
    async fn write_at(&self, buf: Vec<u8>, pos: u64) -> io::Result<()> {
        YieldOnce(false).await;
        if let Some(gate) = &self.store.gate {
            gate.pass().await;
        }
        self.store.writes.set(self.store.writes.get() + 1);
        self.sim.write_at(buf, pos).await
    }
    async fn sync(&self) -> io::Result<()> {
        YieldOnce(false).await;
        let n = self.store.syncs.get() + 1;
        self.store.syncs.set(n);
        if n == self.store.fail_sync {
            return Err(io::Error::other("transient fdatasync failure"));
        }
        self.sim.sync().await
    }
}

impl SegmentStore for TestStore {
    type File = TestFile;
    async fn list(&self) -> io::Result<Vec<(u64, u64)>> {
        self.sim.list().await
    }
    async fn create(&self, no: u64, len: u64) -> io::Result<TestFile> {
        Ok(TestFile { sim: self.sim.create(no, len).await?, store: self.clone() })
    }
    async fn reopen(&self, no: u64) -> io::Result<TestFile> {
        Ok(TestFile { sim: self.sim.reopen(no).await?, store: self.clone() })
    }
    fn map(&self, no: u64) -> io::Result<Rc<dyn SealedBytes>> {
        self.sim.map(no)
    }
    async fn finish(&self, no: u64, at: u64, tail: &[u8]) -> io::Result<()> {
        self.sim.finish(no, at, tail).await
    }
    async fn remove(&self, no: u64) -> io::Result<()> {
        self.sim.remove(no).await
    }
    async fn read_small(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        self.sim.read_small(name).await
    }
    async fn write_small(&self, name: &str, pos: u64, block: Vec<u8>) -> io::Result<()> {
        self.sim.write_small(name, pos, block).await
    }
    fn describe(&self) -> String {
        "simulator with yielding I/O".into()
    }

    fn location(&self) -> String {
        self.sim.location()
    }
}

// ---------------------------------------------------------------------------
// Deterministic workload

/// Body length of the `i`-th record of `stream`: 1..=BODY_BYTES_MAX, scattered.
fn body_len(stream: u64, i: u64) -> usize {
    let x = (stream * 1_000_003 + i).wrapping_mul(2_654_435_761) >> 7;
    1 + (x % BODY_BYTES_MAX) as usize
}

/// Body bytes that depend on the stream and offset, so a record read back
/// from the wrong place never matches.
fn body_bytes(stream: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut x = (stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ offset.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn header(stream: u64, offset: u64, len: usize) -> RecordHeader {
    RecordHeader {
        kind: 1 + (offset % 3) as u8,
        stream_id: stream,
        incarnation: (stream as u32) ^ 0x5a5a,
        stream_offset: offset,
        body_len: len as u32,
    }
}

/// One record as the client appended it.
#[derive(Clone, Debug)]
struct Appended {
    header: RecordHeader,
    loc: RecordLoc,
    body: Vec<u8>,
}

/// Everything the clients appended, in append (= lsn) order, and which
/// appends were acknowledged as durable.
#[derive(Default)]
struct Journal {
    appended: Vec<Appended>,
    acked: Vec<bool>,
}

impl Journal {
    /// Number of leading records that must survive: up to the last acknowledged one.
    fn must_survive(&self) -> usize {
        self.acked.iter().rposition(|&a| a).map_or(0, |i| i + 1)
    }
}

/// A client of one stream: appends `count` records, each followed by waiting
/// for it to be durable, and stops at the first error.
async fn client<S: SegmentStore>(log: Rc<Log<S>>, journal: Rc<RefCell<Journal>>, stream: u64, count: u64) {
    let mut offset = 0u64;
    for i in 0..count {
        // Think time of 0-2 executor turns, so clients fall out of step and
        // some append while a flush is in flight.
        for _ in 0..(stream + i) % 3 {
            YieldOnce(false).await;
        }
        let len = body_len(stream, i);
        match journaled_append(&log, &journal, stream, offset, len).await {
            Ok(true) => {}
            Err(Error::Full) => panic!("unexpected backpressure"),
            Ok(false) | Err(_) => return,
        }
        offset += len as u64;
    }
}

/// Appends `len` bytes to `stream` at `offset`, journaled as unacknowledged
/// at once and as acknowledged when durable. Err: the log refused the
/// append; Ok(false): it failed the wait for durability.
async fn journaled_append<S: SegmentStore>(
    log: &Log<S>,
    journal: &RefCell<Journal>,
    stream: u64,
    offset: u64,
    len: usize,
) -> Result<bool, Error> {
    let body = body_bytes(stream, offset, len);
    let h = header(stream, offset, len);
    let (loc, lsn) = log.append(h, &body)?;
    let idx = {
        let mut j = journal.borrow_mut();
        j.appended.push(Appended { header: h, loc, body });
        j.acked.push(false);
        j.appended.len() - 1
    };
    if log.durable(lsn).await.is_err() {
        return Ok(false);
    }
    journal.borrow_mut().acked[idx] = true;
    Ok(true)
}

fn clients<S: SegmentStore + 'static>(
    log: &Rc<Log<S>>,
    journal: &Rc<RefCell<Journal>>,
    streams: std::ops::Range<u64>,
    count: u64,
) -> Vec<Task> {
    streams.map(|s| Box::pin(client(log.clone(), journal.clone(), s, count)) as Task).collect()
}

/// Appends `count` records per stream on a healthy log and requires all of them acknowledged.
fn append_all<S: SegmentStore + 'static>(log: &Rc<Log<S>>, streams: std::ops::Range<u64>, count: u64) -> Vec<Appended> {
    let journal = Rc::new(RefCell::new(Journal::default()));
    let n = (streams.end - streams.start) * count;
    drive(log, clients(log, &journal, streams, count));
    let j = journal.borrow();
    assert_eq!(j.appended.len() as u64, n);
    assert!(j.acked.iter().all(|&a| a), "a healthy log failed an append");
    j.appended.clone()
}

/// Recovery found exactly a prefix of `expected`, at least `must` long, with
/// identical headers, locations and bodies.
fn check_prefix<S: SegmentStore>(log: &Log<S>, recovered: &[Recovered], expected: &[Appended], must: usize, ctx: &str) {
    assert!(
        recovered.len() >= must,
        "{ctx}: lost acknowledged records: recovered {} of {must} acknowledged",
        recovered.len()
    );
    assert!(
        recovered.len() <= expected.len(),
        "{ctx}: recovered {} records but only {} were ever appended",
        recovered.len(),
        expected.len()
    );
    for (i, (r, e)) in recovered.iter().zip(expected).enumerate() {
        assert_eq!(r.header, e.header, "{ctx}: record {i}: header differs (gap or foreign record)");
        assert_eq!(r.loc, e.loc, "{ctx}: record {i}: location differs");
        assert!(read_body(log, r.loc) == e.body, "{ctx}: record {i}: body differs");
    }
}

// ---------------------------------------------------------------------------
// 1. Acknowledged prefix survives any crash point

/// Seeded random workloads per run; each is crashed at every write and sync.
const WORKLOADS: u64 = 16;

/// splitmix64: a small deterministic generator for workloads and crash images.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The run's seed: `RINGSTREAM_CRASH_SEED` to replay a failure, else the clock.
fn crash_seed() -> u64 {
    match std::env::var("RINGSTREAM_CRASH_SEED") {
        Ok(s) => s.parse().expect("RINGSTREAM_CRASH_SEED is a u64"),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
    }
}

/// A workload drawn from a seed: how many clients, how many records each.
/// Bodies are mostly small, sometimes several blocks, rarely a fifth of a
/// segment; think times vary, so batches differ in size and records
/// straddle blocks, sectors and segments in many ways.
#[derive(Clone, Copy, Debug)]
struct Workload {
    seed: u64,
    clients: u64,
    per_client: u64,
}

impl Workload {
    fn from_seed(seed: u64) -> Self {
        let mut r = Rng::new(seed);
        Workload { seed, clients: 2 + r.below(5), per_client: 15 + r.below(26) }
    }

    /// Runs the workload on a fresh log over `store`, failing the `fail_at`-th write/sync.
    fn run(&self, store: &SimStore, fail_at: Option<u64>) -> (Rc<Log<TestStore>>, Rc<RefCell<Journal>>) {
        let (log, recovered, _) = open(TestStore::new(store.clone()), config());
        assert!(recovered.is_empty());
        if let Some(n) = fail_at {
            store.fail_after_ops(n);
        }
        let journal = Rc::new(RefCell::new(Journal::default()));
        let tasks = (0..self.clients)
            .map(|s| Box::pin(random_client(log.clone(), journal.clone(), self.seed, s, self.per_client)) as Task)
            .collect();
        drive(&log, tasks);
        (log, journal)
    }
}

/// `client` with lengths and think times drawn from `seed`.
async fn random_client<S: SegmentStore>(
    log: Rc<Log<S>>,
    journal: Rc<RefCell<Journal>>,
    seed: u64,
    stream: u64,
    n: u64,
) {
    let mut rng = Rng::new(seed ^ (stream + 1).wrapping_mul(0xA076_1D64_78BD_642F));
    let mut offset = 0u64;
    for _ in 0..n {
        for _ in 0..rng.below(4) {
            YieldOnce(false).await;
        }
        let len = 1 + match rng.below(20) {
            0 => rng.below(SEGMENT_BYTES / 5),
            1..=5 => rng.below(BODY_BYTES_MAX),
            _ => rng.below(300),
        } as usize;
        if !matches!(journaled_append(&log, &journal, stream, offset, len).await, Ok(true)) {
            return;
        }
        offset += len as u64;
    }
}

/// What the crash matrix exercised, over all workloads.
#[derive(Default, Debug)]
struct MatrixCount {
    /// (workload, write/sync at which it crashed) pairs, plus one clean end per workload.
    crash_points: u64,
    /// Crash images recovered and checked (several per crash point).
    images: u64,
    /// Images whose recovery cut a torn tail.
    torn_cuts: u64,
    /// Images with bits flipped in bytes the unsynced write changed.
    garbled: u64,
    /// Images also checked to take new appends and survive another crash.
    reused: u64,
    newest_acked_segment: u64,
}

/// Crash images of `store` after a crash at an unsynced write, drawn from
/// `rng`: the power cut (nothing unsynced survives) always; the first k
/// sectors; a random subset of sectors (devices reorder); a tear at any byte;
/// every sector reached but some bits garbled.
fn crash_images(store: &SimStore, rng: &mut Rng) -> Vec<(String, SimStore, bool)> {
    let mut out = vec![("power cut".to_string(), store.crash_image(None), false)];
    let Some(w) = store.unsynced_write() else { return out };
    let sectors = w.len.div_ceil(SECTOR_BYTES as usize) as u64;
    let k = rng.below(sectors + 1) as usize;
    out.push((format!("first {k} of {sectors} sectors"), store.crash_image_with(&|i| i < k, &[]), false));
    let mask: Vec<bool> = (0..sectors).map(|_| rng.below(2) == 1).collect();
    out.push((format!("sectors {mask:?}"), store.crash_image_with(&|i| mask[i], &[]), false));
    let b = rng.below(w.len as u64 + 1) as usize;
    out.push((format!("torn at byte {b} of {}", w.len), store.crash_image(Some(b)), false));
    if let Some(from) = w.changed_from {
        let bits = (w.len - from) as u64 * 8;
        let flips: Vec<usize> = (0..1 + rng.below(8)).map(|_| from * 8 + rng.below(bits) as usize).collect();
        let kept = rng.below(sectors + 1) as usize;
        let image = store.crash_image_with(&|i| i < kept, &flips);
        out.push((format!("first {kept} sectors, bits {flips:?} flipped"), image, true));
    }
    out
}

#[test]
fn acknowledged_prefix_survives_every_crash_point() {
    watchdog(acknowledged_prefix_survives_every_crash_point_body);
}

fn acknowledged_prefix_survives_every_crash_point_body() {
    let seed = crash_seed();
    // Printed first, so a failure's captured output names the seed to replay.
    eprintln!("crash matrix seed {seed} (replay with RINGSTREAM_CRASH_SEED={seed})");
    let mut count = MatrixCount::default();
    let mut seeds = Rng::new(seed);
    for w in 0..WORKLOADS {
        let mut wl = Workload::from_seed(seeds.next());
        if w == 0 {
            // One workload of the largest shape, so every run crosses several segments.
            (wl.clients, wl.per_client) = (6, 50);
        }
        crash_matrix(wl, seed, &mut count);
    }
    eprintln!("crash matrix: {count:?}");
    // The sweep must have exercised what it claims to.
    assert!(count.crash_points >= 1000, "only {} crash points (seed {seed})", count.crash_points);
    assert!(count.newest_acked_segment >= 2, "too few segments crossed (seed {seed}): {count:?}");
    assert!(count.torn_cuts >= 300, "too few torn tails cut (seed {seed}): {count:?}");
    assert!(count.garbled >= 300, "too few garbled images (seed {seed}): {count:?}");
}

/// Crashes `wl` at every write and sync; recovers several crash images of
/// each crash and checks the acknowledged prefix, byte for byte.
fn crash_matrix(wl: Workload, seed: u64, count: &mut MatrixCount) {
    // The run is deterministic up to the fault, so a clean run counts the
    // crash points: one per write or sync it issues.
    let clean = SimStore::new();
    wl.run(&clean, None);
    let total_ops = clean.ops();
    let mut rng = Rng::new(wl.seed ^ 0x5EED);
    // The last crash point falls after the workload: nothing fails.
    for n in 1..=total_ops + 1 {
        let at = format!("seed {seed}, {wl:?}, crash at op {n} of {total_ops}");
        let store = SimStore::new();
        let (log, journal) = wl.run(&store, Some(n));
        count.crash_points += 1;
        let j = journal.borrow();
        let must = j.must_survive();
        // Waiters are released in lsn order: an acknowledgement covers everything before it.
        assert!(j.acked[..must].iter().all(|&a| a), "{at}: acknowledgements out of order");
        assert_eq!(store.is_dead(), n <= total_ops, "{at}: the run was not deterministic");
        if store.is_dead() {
            assert!(log.is_poisoned(), "{at}: failed I/O did not poison the log");
            assert!(log.append(header(99, 0, 1), b"x").is_err(), "{at}: poisoned log accepted an append");
        } else {
            assert_eq!(must, j.appended.len(), "{at}: no fault, yet not everything acknowledged");
        }
        if let Some(last) = j.appended[..must].last() {
            count.newest_acked_segment = count.newest_acked_segment.max(last.loc.segment);
        }
        drop(log);

        let images = crash_images(&store, &mut rng);
        let reuse = rng.below(images.len() as u64) as usize;
        for (i, (what, image, garbled)) in images.into_iter().enumerate() {
            let ctx = format!("{at}, {what}");
            let (log, recovered, report) = open(TestStore::new(image.clone()), config());
            check_prefix(&log, &recovered, &j.appended, must, &ctx);
            count.images += 1;
            count.garbled += garbled as u64;
            if i == 0 {
                // Durable images hold only whole synced flushes.
                assert_eq!(report.torn_tail, None, "{ctx}: a durable image had a torn tail");
            }
            count.torn_cuts += report.torn_tail.is_some() as u64;
            if i != reuse {
                continue;
            }
            count.reused += 1;
            let mut expected: Vec<Appended> = j.appended[..recovered.len()].to_vec();
            // The recovered log takes new appends and serves them.
            let new = append_all(&log, 100..102, 6);
            for a in &new {
                assert!(read_body(&log, a.loc) == a.body, "{ctx}: new record unreadable");
            }
            expected.extend(new);
            drop(log);
            // A second crash and reopen sees the old prefix and the new records.
            let (log, recovered, report) = open(image.crash_image(None), config());
            assert_eq!(report.torn_tail, None, "{ctx}: second reopen found a torn tail");
            assert_eq!(recovered.len(), expected.len(), "{ctx}: second reopen");
            check_prefix(&log, &recovered, &expected, expected.len(), &format!("{ctx}, second reopen"));
        }
    }
}

// ---------------------------------------------------------------------------
// 2. Torn tail is cut and stays cut

/// A log with some durable records and one more record whose write reached
/// the live image but whose sync failed. Returns the store, the durable
/// records, the torn record, and where the failed write started.
fn log_with_unsynced_record() -> (SimStore, Vec<Appended>, Appended, u64) {
    let store = SimStore::new();
    let (log, _, _) = open(store.clone(), config());
    // ~8 KiB of durable records, so the durable end is inside a block.
    let durable = append_all(&log, 0..2, 3);
    let durable_end = durable.last().map(|a| a.loc.pos as usize + RECORD_HEADER_BYTES + a.body.len()).unwrap();
    assert!(!(durable_end as u64).is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES), "the durable end must be inside a block");
    // The write succeeds, the sync after it fails.
    store.fail_after_ops(2);
    let body = body_bytes(7, 0, 2000);
    let h = header(7, 0, body.len());
    let (loc, lsn) = log.append(h, &body).unwrap();
    let result = drive_one(&log, {
        let log = log.clone();
        async move { log.durable(lsn).await }
    });
    assert!(matches!(result, Err(Error::Io { op: "fdatasync", .. })), "{result:?}");
    let write_start = loc.pos / DIRECT_IO_ALIGNMENT_BYTES * DIRECT_IO_ALIGNMENT_BYTES;
    (store, durable, Appended { header: h, loc, body }, write_start)
}

#[test]
fn torn_tail_is_cut_and_stays_cut() {
    watchdog(torn_tail_is_cut_and_stays_cut_body);
}

fn torn_tail_is_cut_and_stays_cut_body() {
    let (store, durable, torn_rec, write_start) = log_with_unsynced_record();
    let into_record = (torn_rec.loc.pos - write_start) as usize;
    // Tears that leave an invalid record: inside the header, and inside the body.
    for extra in [3usize, 20, RECORD_HEADER_BYTES + 10, RECORD_HEADER_BYTES + 1999] {
        let ctx = format!("tear {extra} bytes into the record");
        let image = store.crash_image(Some(into_record + extra));
        let (log, recovered, report) = open(image.clone(), config());
        assert_eq!(report.torn_tail, Some((torn_rec.loc.segment, torn_rec.loc.pos)), "{ctx}");
        assert_eq!(report.sealed_at_boot, Some(torn_rec.loc.segment), "{ctx}: the cut segment is sealed");
        assert_eq!(recovered.len(), durable.len(), "{ctx}");
        check_prefix(&log, &recovered, &durable, durable.len(), &ctx);
        drop(log);
        // The cut is durable: the next boot finds a clean log with the same records.
        let rebooted = image.crash_image(None);
        let (log, recovered, report) = open(rebooted.clone(), config());
        assert_eq!(report.torn_tail, None, "{ctx}: cut did not stay cut");
        assert_eq!(report.sealed_at_boot, None, "{ctx}: the seal did not stay");
        assert_eq!(recovered.len(), durable.len(), "{ctx}");
        check_prefix(&log, &recovered, &durable, durable.len(), &ctx);
        // And it keeps working after the cut, in a new segment: the sealed
        // one is now older than the newest and must still verify.
        let new = append_all(&log, 50..51, 4);
        assert!(new.iter().all(|a| a.loc.segment > torn_rec.loc.segment), "{ctx}");
        drop(log);
        let (log, recovered, _) = open(rebooted.crash_image(None), config());
        let expected: Vec<Appended> = durable.iter().cloned().chain(new).collect();
        assert_eq!(recovered.len(), expected.len(), "{ctx}");
        check_prefix(&log, &recovered, &expected, expected.len(), &ctx);
    }
    // A tear that only rewrote already-durable bytes leaves no torn tail; a
    // complete write leaves a valid (unacknowledged) record that may be kept.
    for (torn, survives) in [(into_record, false), (usize::MAX, true)] {
        let (log, recovered, report) = open(store.crash_image(Some(torn)), config());
        assert_eq!(report.torn_tail, None, "torn {torn}");
        let mut expected = durable.clone();
        if survives {
            expected.push(torn_rec.clone());
        }
        assert_eq!(recovered.len(), expected.len(), "torn {torn}");
        check_prefix(&log, &recovered, &expected, expected.len(), "whole or no tear");
    }
}

// ---------------------------------------------------------------------------
// 3. Corruption: fatal when newer data follows, a torn tail otherwise

#[test]
fn corruption_before_newer_data_fails_open_but_at_the_tail_is_cut() {
    watchdog(corruption_before_newer_data_fails_open_but_at_the_tail_is_cut_body);
}

fn corruption_before_newer_data_fails_open_but_at_the_tail_is_cut_body() {
    let store = SimStore::new();
    let (log, _, _) = open(store.clone(), config());
    let all = append_all(&log, 0..4, 45);
    drop(log);
    let newest = all.last().unwrap().loc.segment;
    assert!(newest >= 3, "too few rollovers: newest segment {newest}");

    let body_byte = |a: &Appended| a.loc.pos as usize + RECORD_HEADER_BYTES + a.body.len() / 2;
    let header_byte = |a: &Appended| a.loc.pos as usize + 9; // inside stream_id
    let first_of = |seg: u64| all.iter().position(|a| a.loc.segment == seg).unwrap();

    // A flipped byte in an older segment, in a body or a header: refuse to open.
    let mid0 = &all[first_of(0) + 5];
    let mid2 = &all[first_of(2) + 1];
    let last0 = &all[first_of(1) - 1];
    for (victim, pos) in
        [(mid0, body_byte(mid0)), (mid0, header_byte(mid0)), (mid2, body_byte(mid2)), (last0, body_byte(last0))]
    {
        let image = store.crash_image(None);
        image.corrupt(victim.loc.segment, pos);
        match block_on(Log::open(image, config())) {
            Err(Error::Corrupt { segment, position }) => {
                assert_eq!((segment, position), (victim.loc.segment, victim.loc.pos));
            }
            Err(e) => panic!("corrupt {:?} at {pos}: wrong error {e}", victim.loc),
            Ok((_, recovered, _)) => {
                panic!("corrupt {:?} at {pos}: opened with {} records", victim.loc, recovered.len())
            }
        }
    }

    // Damage that looks like a clean end of an older segment: a zeroed
    // block, a cut at a record boundary (everything after a record zeroed),
    // a zeroed seal. Each would drop acknowledged records quietly without
    // the seal; with it the open fails, blaming the right place.
    let seg1 = &all[first_of(1)..first_of(2)];
    let seg1_end = seg1.last().map(|a| a.loc.pos as usize + record::framed_len(a.body.len())).unwrap();
    let block = seg1[seg1.len() / 2].loc.pos as usize / 4096 * 4096;
    // The scan stops at the first record the zeroed block reaches into.
    let hit = seg1.iter().find(|a| a.loc.pos as usize + record::framed_len(a.body.len()) > block).unwrap();
    let cut_at = &seg1[seg1.len() - 3];
    for (what, range, blamed) in [
        ("zeroed block", block..block + 4096, hit.loc.pos),
        ("cut at a record boundary", cut_at.loc.pos as usize..usize::MAX, cut_at.loc.pos),
        ("zeroed seal", seg1_end..seg1_end + record::SEAL_FRAMED_BYTES, seg1_end as u64),
    ] {
        let image = store.crash_image(None);
        image.zero(1, range);
        match block_on(Log::open(image, config())) {
            Err(Error::Corrupt { segment, position }) => assert_eq!((segment, position), (1, blamed), "{what}"),
            Err(e) => panic!("{what}: wrong error {e}"),
            Ok((_, recovered, _)) => panic!("{what}: opened with {} of {} records", recovered.len(), all.len()),
        }
    }

    // A flipped byte in the newest segment's last record: a torn tail, cut.
    let last = all.last().unwrap();
    for pos in [body_byte(last), header_byte(last)] {
        let image = store.crash_image(None);
        image.corrupt(newest, pos);
        let (log, recovered, report) = open(image.clone(), config());
        assert_eq!(report.torn_tail, Some((newest, last.loc.pos)));
        let kept = &all[..all.len() - 1];
        assert_eq!(recovered.len(), kept.len());
        check_prefix(&log, &recovered, kept, kept.len(), "corrupt last record");
        drop(log);
        let (_, recovered, report) = open(image.crash_image(None), config());
        assert_eq!(report.torn_tail, None);
        assert_eq!(recovered.len(), kept.len());
    }
}

// ---------------------------------------------------------------------------
// 4. Backpressure

#[test]
fn backpressure_bounds_pending_bytes_and_clears_after_flush() {
    watchdog(backpressure_bounds_pending_bytes_and_clears_after_flush_body);
}

fn backpressure_bounds_pending_bytes_and_clears_after_flush_body() {
    const PENDING_MAX: u64 = 16 * 1024;
    let cfg = LogConfig { segment_bytes: SEGMENT_BYTES, pending_bytes_max: PENDING_MAX };
    let store = SimStore::new();
    let (log, _, _) = open(store.clone(), cfg);
    let body = vec![0xabu8; 1000];
    let framed = (RECORD_HEADER_BYTES + body.len()).next_multiple_of(8) as u64;
    // Nothing polls the writer: appends pile up until the bound.
    let mut accepted = Vec::new();
    let mut offset = 0;
    let full_at = loop {
        match log.append(header(1, offset, body.len()), &body) {
            Ok((loc, lsn)) => accepted.push((loc, lsn)),
            Err(Error::Full) => break offset,
            Err(e) => panic!("unexpected {e}"),
        }
        offset += body.len() as u64;
        assert!(accepted.len() < 1000, "never pushed back");
    };
    assert_eq!(accepted.len() as u64, PENDING_MAX / framed, "Full came at the wrong point");
    assert!(log.pending_bytes() <= PENDING_MAX);
    let tail = log.tail_lsn();
    assert!(matches!(log.append(header(1, full_at, body.len()), &body), Err(Error::Full)));
    assert_eq!(log.tail_lsn(), tail, "a refused append changed the log");
    assert_eq!(store.ops(), 0, "the writer ran without being polled");

    // Let the writer drain; then appends are accepted again.
    let lsn = accepted.last().unwrap().1;
    let l = log.clone();
    drive_one(&log, async move { l.durable(lsn).await }).expect("drain");
    assert_eq!(log.pending_bytes(), 0);
    let (loc, lsn) = log.append(header(1, full_at, body.len()), &body).expect("accepted after drain");
    let l = log.clone();
    drive_one(&log, async move { l.durable(lsn).await }).expect("durable");
    assert_eq!(read_body(&log, loc), body);

    // An empty queue admits one record bigger than the bound, so a maximal request is never refused forever.
    let big = vec![7u8; PENDING_MAX as usize + 1];
    let (_, lsn) = log.append(header(2, 0, big.len()), &big).expect("a lone big record is admitted");
    assert!(matches!(log.append(header(1, 0, 1), b"x"), Err(Error::Full)));
    let l = log.clone();
    drive_one(&log, async move { l.durable(lsn).await }).expect("durable");
}

// ---------------------------------------------------------------------------
// 5. Poison

#[test]
fn failed_write_or_sync_poisons_the_log() {
    watchdog(failed_write_or_sync_poisons_the_log_body);
}

fn failed_write_or_sync_poisons_the_log_body() {
    for (n, op) in [(1u64, "write"), (2, "fdatasync")] {
        let store = SimStore::new();
        let (log, _, _) = open(store.clone(), config());
        let before = append_all(&log, 0..1, 5);
        let old_lsn = log.durable_lsn();
        store.fail_after_ops(n);
        // Three concurrent waiters land in the flush that fails.
        let results: Rc<RefCell<Vec<Result<(), Error>>>> = Rc::default();
        let tasks = (10..13)
            .map(|s| {
                let (log, results) = (log.clone(), results.clone());
                Box::pin(async move {
                    let body = body_bytes(s, 0, 500);
                    let (_, lsn) = log.append(header(s, 0, body.len()), &body).expect("append before the fault");
                    let r = log.durable(lsn).await;
                    results.borrow_mut().push(r);
                }) as Task
            })
            .collect();
        drive(&log, tasks);
        let results = results.borrow();
        assert_eq!(results.len(), 3);
        for r in results.iter() {
            match r {
                Err(Error::Io { op: got, .. }) => assert_eq!(*got, op),
                other => panic!("{op} failure: waiter got {other:?}"),
            }
        }
        assert!(log.is_poisoned());
        // Nothing is ever acknowledged or accepted again.
        for i in 0..3 {
            match log.append(header(20, i, 1), b"y") {
                Err(Error::Io { .. } | Error::Poisoned) => {}
                other => panic!("{op} failure: append after poison gave {other:?}"),
            }
        }
        let tail = log.tail_lsn();
        let l = log.clone();
        assert!(drive_one(&log, async move { l.durable(tail).await }).is_err());
        // What was durable before the fault stays acknowledged.
        let l = log.clone();
        assert!(drive_one(&log, async move { l.durable(old_lsn).await }).is_ok());
        drop(log);
        let (log, recovered, _) = open(store.crash_image(None), config());
        check_prefix(&log, &recovered, &before, before.len(), op);
    }
}

#[test]
fn transient_sync_failure_is_never_retried_into_an_acknowledgement() {
    watchdog(transient_sync_failure_is_never_retried_into_an_acknowledgement_body);
}

fn transient_sync_failure_is_never_retried_into_an_acknowledgement_body() {
    let store = TestStore { fail_sync: 4, ..TestStore::new(SimStore::new()) };
    let (log, _, _) = open(store.clone(), config());
    let journal = Rc::new(RefCell::new(Journal::default()));
    drive(&log, clients(&log, &journal, 0..4, 30));
    let j = journal.borrow();
    assert_eq!(store.syncs.get(), 4, "the writer kept syncing after a failed fdatasync");
    assert_eq!(store.writes.get(), 4, "the writer kept writing after a failed fdatasync");
    assert!(log.is_poisoned());
    let must = j.must_survive();
    assert!(must > 0 && must < j.appended.len(), "the fault missed the workload");
    // No acknowledgement after the failed sync, although the disk still works.
    assert!(j.acked[must..].iter().all(|&a| !a));
    let failed_lsn = log.tail_lsn();
    let l = log.clone();
    assert!(drive_one(&log, async move { l.durable(failed_lsn).await }).is_err());
    assert_eq!(store.syncs.get(), 4);
    drop(log);
    let (log, recovered, _) = open(store.sim.crash_image(None), config());
    check_prefix(&log, &recovered, &j.appended, must, "after transient sync failure");
}

// ---------------------------------------------------------------------------
// 6. Group commit

#[test]
fn group_commit_batches_concurrent_appends() {
    watchdog(group_commit_batches_concurrent_appends_body);
}

fn group_commit_batches_concurrent_appends_body() {
    const CLIENTS: u64 = 16;
    const PER_CLIENT: u64 = 20;
    let store = SimStore::new();
    let (log, _, _) = open(TestStore::new(store.clone()), config());
    let all = append_all(&log, 0..CLIENTS, PER_CLIENT);
    let stats = log.stats();
    let total = CLIENTS * PER_CLIENT;
    assert_eq!(stats.records_flushed, total);
    assert!(stats.max_records_per_flush > 1, "no flush carried more than one record: {stats:?}");
    assert!(stats.flushes < total, "one flush per record: {stats:?}");
    // With every client waiting on the writer, a flush should carry about one record per client.
    assert!(stats.flushes * 4 <= total, "batches are too small: {stats:?}");
    drop(log);
    let (log, recovered, _) = open(store.crash_image(None), config());
    assert_eq!(recovered.len(), all.len());
    check_prefix(&log, &recovered, &all, all.len(), "after group commit");
}

// ---------------------------------------------------------------------------
// Two flushes in flight

/// A flush of two records is padded to a block, so the next flush goes out
/// before it completes; when the second completes first, nothing is
/// acknowledged until the first completes too, and a crash in between
/// recovers neither (a hole before valid records is the end of the log).
#[test]
fn a_second_flush_in_flight_is_acknowledged_only_after_the_first() {
    watchdog(a_second_flush_in_flight_is_acknowledged_only_after_the_first_body);
}

fn a_second_flush_in_flight_is_acknowledged_only_after_the_first_body() {
    let sim = SimStore::new();
    let gate = Rc::new(Gate::default());
    let (log, _, _) = open(TestStore { gate: Some(gate.clone()), ..TestStore::new(sim.clone()) }, config());
    let mut pool = LocalPool::new();
    spawn_log_tasks(&pool.spawner(), &log);
    pool.run_until_stalled();
    let mut all = Vec::new();
    let append = |all: &mut Vec<Appended>| {
        let offset = all.len() as u64 * 100;
        let (header, body) = (header(1, offset, 100), body_bytes(1, offset, 100));
        let (loc, lsn) = log.append(header, &body).expect("append");
        all.push(Appended { header, loc, body });
        lsn
    };
    append(&mut all);
    let first = append(&mut all);
    pool.run_until_stalled();
    assert_eq!(gate.started.get(), 1, "the first flush is out");
    let second = append(&mut all);
    pool.run_until_stalled();
    assert_eq!(gate.started.get(), 2, "the second flush went out while the first was in flight");
    assert_eq!(all[2].loc.pos % DIRECT_IO_ALIGNMENT_BYTES, 0, "the first flush was padded to a block");
    assert!(log.stats().bytes_padded > 0);

    gate.release(2);
    pool.run_until_stalled();
    assert_eq!(log.durable_lsn(), 0, "the second flush completed, the first has not: nothing is durable");
    let (_, recovered, _) = open(sim.crash_image(None), config());
    assert!(recovered.is_empty(), "a crash now recovers neither flush: {recovered:?}");

    gate.release(1);
    pool.run_until_stalled();
    assert_eq!(log.durable_lsn(), log.tail_lsn());
    assert!(log.durable_lsn() >= second && second > first);
    let (reopened, recovered, _) = open(sim.crash_image(None), config());
    check_prefix(&reopened, &recovered, &all, all.len(), "after two flushes in flight");
}

// ---------------------------------------------------------------------------
// 7. Rollover faster than the preparer

/// More than two segments appended in one go, before the preparer task is
/// polled even once: every segment passed over must still get its file, or
/// the writer waits for it forever.
#[test]
fn appends_outrunning_the_preparer_do_not_stall_the_writer() {
    watchdog(appends_outrunning_the_preparer_do_not_stall_the_writer_body);
}

fn appends_outrunning_the_preparer_do_not_stall_the_writer_body() {
    let store = SimStore::new();
    let (log, _, _) = open(store.clone(), config());
    let mut expected = Vec::new();
    let mut offset = 0;
    let mut last_lsn = 0;
    for i in 0.. {
        let len = body_len(3, i);
        let body = body_bytes(3, offset, len);
        let h = header(3, offset, len);
        let (loc, lsn) = log.append(h, &body).expect("append");
        expected.push(Appended { header: h, loc, body });
        last_lsn = lsn;
        offset += len as u64;
        if loc.segment == 4 {
            break;
        }
    }
    let l = log.clone();
    drive_one(&log, async move { l.durable(last_lsn).await }).expect("durable");
    drop(log);
    let (log, recovered, _) = open(store.crash_image(None), config());
    assert_eq!(recovered.len(), expected.len());
    check_prefix(&log, &recovered, &expected, expected.len(), "after fast rollover");
}
