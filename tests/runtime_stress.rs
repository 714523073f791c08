//! The executor runtime under stress: more glommio executors than CPUs, a
//! short preemption timer, and every kind of wake-up the server relies on
//! (a round trip over a Unix socket, a cross-executor mailbox woken by
//! glommio's foreign wakers as the server's mesh is, glommio's shared channel,
//! O_DIRECT writes and fdatasync, timers, `spawn_blocking`, `spawn_local` in
//! loops), plus a loop of executor boots, and the other way round: an idle
//! executor that must sleep.
//!
//! glommio 0.9.0 parks an executor that still has runnable tasks when a
//! preemption is pending (see vendor/glommio/PATCHES.md): there, one of these
//! operations stalls until something unrelated wakes the thread, often for
//! ever. A watchdog thread fails the test as soon as any single operation
//! has been outstanding for longer than `OP_LIMIT`, naming it.
//!
//! `RINGSTREAM_STRESS_SECS` (default 6) sets how long the mixed workload
//! runs, `RINGSTREAM_STRESS_BOOTS` (default 300) how many boots the boot loop
//! makes.

use futures_util::task::AtomicWaker;
use glommio::channels::shared_channel;
use glommio::io::DmaFile;
use glommio::net::UnixStream;
use glommio::{LocalExecutorBuilder, Placement};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The slowest any one operation may be while its executor makes no other
/// progress, and the slowest any scheduling operation may be at all.
const OP_LIMIT: Duration = Duration::from_millis(500);
/// The slowest an O_DIRECT write + fdatasync may be while its executor keeps
/// running its other tasks. Such a write is in the kernel (io_uring, io-wq,
/// the file system, the disk), not waiting for the scheduler: on the shared
/// 2-vCPU VM it took up to ~0.5 s at times under this load while plain
/// threads writing beside it stayed under 20 ms (cause unknown; see
/// vendor/glommio/PATCHES.md, "Known, not fixed"). A lost completion still
/// fails here.
const IO_LIMIT: Duration = Duration::from_secs(5);
/// Short enough that a pending preemption is common at every step.
const PREEMPT: Duration = Duration::from_micros(50);
/// Small DMA pools, so that dozens of executors fit any memlock limit.
const IO_MEMORY: usize = 512 * 1024;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn executors() -> usize {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * cpus).max(4) & !1 // even: executors pair up for the ping-pongs
}

/// The operations the watchdog can name.
#[derive(Clone, Copy, Debug)]
#[repr(usize)]
enum Op {
    /// A task that has not yet reached its first operation.
    Start,
    SpawnLocal,
    Timer,
    Blocking,
    DirectWrite,
    Doorbell,
    SharedChannel,
    Boot,
    Mailbox,
}

const OPS: [Op; 9] = [
    Op::Start,
    Op::SpawnLocal,
    Op::Timer,
    Op::Blocking,
    Op::DirectWrite,
    Op::Doorbell,
    Op::SharedChannel,
    Op::Boot,
    Op::Mailbox,
];

/// What one task is doing and since when (nanoseconds after `epoch`, 0 =
/// nothing). Every slot starts as `Start`, so an executor that never polls a
/// new task is caught too.
struct Slot {
    since: AtomicU64,
    op: AtomicUsize,
    /// The executor's progress count when the operation began.
    progress_at_begin: AtomicU64,
}

struct Watch {
    epoch: Instant,
    slots: Vec<Slot>,
    /// Operations completed, per executor (slot / per_executor).
    progress: Vec<AtomicU64>,
    per_executor: usize,
    completed: AtomicU64,
    /// Per kind of operation (indexed like OPS), the slowest one completed.
    slowest_ns: [AtomicU64; 9],
}

impl Watch {
    /// `slots` tasks, `per_executor` of them on each executor.
    fn new(slots: usize, per_executor: usize) -> Arc<Watch> {
        let slot = || Slot {
            since: AtomicU64::new(1),
            op: AtomicUsize::new(Op::Start as usize),
            progress_at_begin: AtomicU64::new(0),
        };
        Arc::new(Watch {
            epoch: Instant::now(),
            slots: (0..slots).map(|_| slot()).collect(),
            progress: (0..slots.div_ceil(per_executor)).map(|_| AtomicU64::new(0)).collect(),
            per_executor,
            completed: AtomicU64::new(0),
            slowest_ns: Default::default(),
        })
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    fn begin(&self, slot: usize, op: Op) {
        let progress = self.progress[slot / self.per_executor].load(Ordering::Relaxed);
        self.slots[slot].progress_at_begin.store(progress, Ordering::Relaxed);
        self.slots[slot].op.store(op as usize, Ordering::Relaxed);
        self.slots[slot].since.store(self.now_ns(), Ordering::Release);
    }

    fn end(&self, slot: usize) {
        let since = self.slots[slot].since.swap(0, Ordering::AcqRel);
        let op = self.slots[slot].op.load(Ordering::Relaxed);
        self.slowest_ns[op].fetch_max(self.now_ns() - since, Ordering::Relaxed);
        self.progress[slot / self.per_executor].fetch_add(1, Ordering::Relaxed);
        self.completed.fetch_add(1, Ordering::Relaxed);
    }

    /// Times one operation of task `slot`.
    async fn time<T>(&self, slot: usize, op: Op, f: impl std::future::Future<Output = T>) -> T {
        self.begin(slot, op);
        let out = f.await;
        self.end(slot);
        out
    }

    /// The first operation past its limit, if any: OP_LIMIT for everything
    /// but an O_DIRECT write whose executor kept completing other operations
    /// meanwhile, which gets IO_LIMIT.
    fn overdue(&self) -> Option<String> {
        let now = self.now_ns();
        self.slots.iter().enumerate().find_map(|(i, s)| {
            let since = s.since.load(Ordering::Acquire);
            let age = Duration::from_nanos(now.saturating_sub(since));
            let op = OPS[s.op.load(Ordering::Relaxed)];
            let progress = self.progress[i / self.per_executor].load(Ordering::Relaxed);
            let executor_ran = progress != s.progress_at_begin.load(Ordering::Relaxed);
            let limit = if matches!(op, Op::DirectWrite) && executor_ran { IO_LIMIT } else { OP_LIMIT };
            (since != 0 && age > limit).then(|| {
                let idle = if executor_ran { "" } else { ", its executor completed nothing meanwhile" };
                format!("task {i}: {op:?} outstanding for {age:?} (limit {limit:?}{idle})")
            })
        })
    }
}

/// Runs `work` on a helper thread while watching `watch`: panics naming the
/// first overdue operation, or when `work` itself fails or panics. A stalled
/// executor is left behind (the test process ends anyway).
fn watched(watch: &Arc<Watch>, work: impl FnOnce() -> Result<(), String> + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let _ = tx.send(r.unwrap_or_else(|_| Err("the workload panicked".into())));
    });
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Ok(())) => break,
            Ok(Err(e)) => panic!("{e}"),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the workload thread vanished"),
        }
        if let Some(what) = watch.overdue() {
            panic!("runtime stall: {what}");
        }
    }
    let slowest: Vec<String> = OPS
        .iter()
        .zip(&watch.slowest_ns)
        .filter(|(_, ns)| ns.load(Ordering::Relaxed) > 0)
        .map(|(op, ns)| format!("{op:?} {:?}", Duration::from_nanos(ns.load(Ordering::Relaxed))))
        .collect();
    eprintln!("{} operations; slowest of each kind: {}", watch.completed.load(Ordering::Relaxed), slowest.join(", "));
    assert!(watch.overdue().is_none());
}

fn scratch_dir(name: &str) -> PathBuf {
    // Under target/, which is on a real file system (O_DIRECT needs one; /tmp may be tmpfs).
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn builder(name: String) -> LocalExecutorBuilder {
    LocalExecutorBuilder::new(Placement::Unbound).name(&name).preempt_timer(PREEMPT).io_memory(IO_MEMORY)
}

/// A tiny deterministic generator (xorshift), one per task.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What one executor of the mixed workload gets: its index, its end of the
/// doorbell socket, of the shared channels and of the mailboxes to its partner.
struct Seat {
    id: usize,
    bell: std::os::unix::net::UnixStream,
    to_partner: shared_channel::SharedSender<u64>,
    from_partner: shared_channel::SharedReceiver<u64>,
    mail: Mailbox,
}

/// Per executor, seven tasks (one per kind of operation), each looping until
/// the deadline: slots `id * 7 .. id * 7 + 7`.
const TASKS_PER_EXECUTOR: usize = 7;

/// A task that is not done at its first poll (glommio runs a new task at
/// once, inside `spawn_local`), so the spawner really waits for it.
async fn yielding<T>(v: T) -> T {
    futures_lite::future::yield_now().await;
    std::hint::black_box(v)
}

async fn mixed(seat: Seat, dir: PathBuf, watch: Arc<Watch>, until: Instant) -> Result<(), String> {
    let base = seat.id * TASKS_PER_EXECUTOR;
    let w = watch.clone();
    let spawner = glommio::spawn_local(async move {
        while Instant::now() < until {
            w.time(base, Op::SpawnLocal, glommio::spawn_local(yielding(1))).await;
        }
    });
    let w = watch.clone();
    let timers = glommio::spawn_local(async move {
        let mut rng = Rng(base as u64 + 7);
        while Instant::now() < until {
            let d = Duration::from_micros(rng.below(2_000));
            w.time(base + 1, Op::Timer, glommio::timer::sleep(d)).await;
        }
    });
    let w = watch.clone();
    let blocking = glommio::spawn_local(async move {
        while Instant::now() < until {
            let fut = glommio::executor().spawn_blocking(|| std::hint::black_box(2 + 2));
            w.time(base + 2, Op::Blocking, fut).await;
        }
    });
    let w = watch.clone();
    let disk = glommio::spawn_local(async move { direct_writes(&dir, seat.id, &w, base + 3, until).await });
    let w = watch.clone();
    let bell =
        glommio::spawn_local(async move { doorbell(seat.bell, seat.id.is_multiple_of(2), &w, base + 4, until).await });
    let w = watch.clone();
    let channel = glommio::spawn_local(async move {
        // Both at once: each end's connect waits for its peer's.
        let (tx, rx) = futures_lite::future::zip(seat.to_partner.connect(), seat.from_partner.connect()).await;
        let leader = seat.id.is_multiple_of(2);
        let mut n = 0u64;
        loop {
            // The leader decides when to stop and tells the follower with u64::MAX.
            let last = leader && Instant::now() >= until;
            let v = if last { u64::MAX } else { n };
            let round = async {
                if leader {
                    tx.send(v).await.map_err(|_| "shared channel closed")?;
                    rx.recv().await.ok_or("shared channel closed")
                } else {
                    let got = rx.recv().await.ok_or("shared channel closed")?;
                    tx.send(got).await.map_err(|_| "shared channel closed")?;
                    Ok(got)
                }
            };
            let got = w.time(base + 5, Op::SharedChannel, round).await?;
            if got == u64::MAX {
                return Ok::<(), String>(());
            }
            n += 1;
        }
    });
    let w = watch.clone();
    let mail =
        glommio::spawn_local(async move { mailbox(seat.mail, seat.id.is_multiple_of(2), &w, base + 6, until).await });
    spawner.await;
    timers.await;
    blocking.await;
    disk.await?;
    bell.await?;
    mail.await?;
    channel.await
}

/// One executor's end of a pair of mailboxes: the shape of the server's
/// cross-shard mesh (src/shard/mesh.rs). A sender pushes into the partner's
/// crossbeam channel, then takes the partner's parked waker and wakes it: a
/// wake-up from another thread, which glommio queues for the partner's
/// executor and signals through its eventfd only when it sleeps.
struct Mailbox {
    to_partner: crossbeam_channel::Sender<u8>,
    inbox: crossbeam_channel::Receiver<u8>,
    parked: Arc<AtomicWaker>,
    partner_parked: Arc<AtomicWaker>,
}

impl Mailbox {
    fn pair() -> (Mailbox, Mailbox) {
        let (a_tx, b_rx) = crossbeam_channel::unbounded();
        let (b_tx, a_rx) = crossbeam_channel::unbounded();
        let (a_w, b_w) = (Arc::new(AtomicWaker::new()), Arc::new(AtomicWaker::new()));
        let a = Mailbox { to_partner: a_tx, inbox: a_rx, parked: a_w.clone(), partner_parked: b_w.clone() };
        (a, Mailbox { to_partner: b_tx, inbox: b_rx, parked: b_w, partner_parked: a_w })
    }

    fn send(&self, v: u8) -> Result<(), String> {
        self.to_partner.send(v).map_err(|_| "mailbox closed".to_string())?;
        if let Some(w) = self.partner_parked.take() {
            w.wake();
        }
        Ok(())
    }

    async fn recv(&self) -> u8 {
        std::future::poll_fn(|cx| {
            if let Ok(v) = self.inbox.try_recv() {
                return std::task::Poll::Ready(v);
            }
            self.parked.register(cx.waker());
            match self.inbox.try_recv() {
                Ok(v) => std::task::Poll::Ready(v),
                Err(_) => std::task::Poll::Pending,
            }
        })
        .await
    }
}

/// One message there, one back, through the mailboxes. The leader stops by
/// sending 0xff.
async fn mailbox(m: Mailbox, leader: bool, w: &Watch, slot: usize, until: Instant) -> Result<(), String> {
    loop {
        let last = leader && Instant::now() >= until;
        let round = async {
            if leader {
                m.send(if last { 0xff } else { 1 })?;
                Ok::<u8, String>(m.recv().await)
            } else {
                let got = m.recv().await;
                m.send(got)?;
                Ok(got)
            }
        };
        if w.time(slot, Op::Mailbox, round).await? == 0xff {
            return Ok(());
        }
    }
}

async fn direct_writes(dir: &Path, id: usize, w: &Watch, slot: usize, until: Instant) -> Result<(), String> {
    let path = dir.join(format!("exec-{id}.dat"));
    let file = DmaFile::create(&path).await.map_err(|e| format!("creating {}: {e}", path.display()))?;
    // Pre-zeroed, like the server's segments: a write that extends a file
    // makes fdatasync commit the file system's journal, which on a shared
    // disk can take longer than OP_LIMIT without any executor at fault.
    const FILE_BYTES: u64 = 256 * 4096;
    let zeros = file.alloc_dma_buffer(FILE_BYTES as usize);
    file.write_at(zeros, 0).await.map_err(|e| format!("pre-zeroing: {e}"))?;
    file.fdatasync().await.map_err(|e| format!("pre-zeroing: {e}"))?;
    let mut pos = 0u64;
    while Instant::now() < until {
        let mut buf = file.alloc_dma_buffer(4096);
        buf.as_bytes_mut().fill(id as u8);
        let write = async {
            file.write_at(buf, pos).await?;
            file.fdatasync().await
        };
        w.time(slot, Op::DirectWrite, write).await.map_err(|e| format!("O_DIRECT write: {e}"))?;
        pos = (pos + 4096) % FILE_BYTES;
    }
    file.close().await.map_err(|e| e.to_string())
}

/// One byte there, one byte back, over a Unix socket pair: socket wake-ups,
/// as client connections have them. The leader stops by sending 0xff.
async fn doorbell(
    std_bell: std::os::unix::net::UnixStream,
    leader: bool,
    w: &Watch,
    slot: usize,
    until: Instant,
) -> Result<(), String> {
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    // Safety: the fd comes from a socket this task owns and hands over.
    let mut bell = unsafe { UnixStream::from_raw_fd(std_bell.into_raw_fd()) };
    let mut byte = [0u8; 1];
    loop {
        let last = leader && Instant::now() >= until;
        let round = async {
            if leader {
                bell.write_all(&[if last { 0xff } else { 1 }]).await?;
                bell.read_exact(&mut byte).await
            } else {
                bell.read_exact(&mut byte).await?;
                bell.write_all(&byte).await
            }
        };
        w.time(slot, Op::Doorbell, round).await.map_err(|e| format!("doorbell: {e}"))?;
        if byte[0] == 0xff {
            return Ok(());
        }
    }
}

#[test]
fn mixed_wakeups_never_stall() {
    let n = executors();
    let secs = env_or("RINGSTREAM_STRESS_SECS", 6);
    let watch = Watch::new(n * TASKS_PER_EXECUTOR, TASKS_PER_EXECUTOR);
    let dir = scratch_dir("runtime-stress");
    let mut seats = Vec::new();
    for pair in 0..n / 2 {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (a_tx, b_rx) = shared_channel::new_bounded(4);
        let (b_tx, a_rx) = shared_channel::new_bounded(4);
        let (a_mail, b_mail) = Mailbox::pair();
        seats.push(Seat { id: 2 * pair, bell: a, to_partner: a_tx, from_partner: a_rx, mail: a_mail });
        seats.push(Seat { id: 2 * pair + 1, bell: b, to_partner: b_tx, from_partner: b_rx, mail: b_mail });
    }
    let w = watch.clone();
    let d = dir.clone();
    watched(&watch, move || {
        let until = Instant::now() + Duration::from_secs(secs);
        let mut handles = Vec::new();
        for seat in seats {
            let (w, d) = (w.clone(), d.clone());
            let h = builder(format!("stress-{}", seat.id))
                .spawn(move || mixed(seat, d, w, until))
                .map_err(|e| format!("starting an executor: {e}"))?;
            handles.push(h);
        }
        for h in handles {
            h.join().map_err(|e| format!("an executor failed: {e}"))??;
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// One boot: the steps the server's shards take before they serve (open,
/// write and sync a file, a blocking call, a timer, a channel from another
/// thread), timed as a whole.
async fn boot(dir: PathBuf, i: usize) -> Result<(), String> {
    let path = dir.join(format!("boot-{i}.dat"));
    let file = DmaFile::create(&path).await.map_err(|e| format!("boot {i}: creating a file: {e}"))?;
    let buf = file.alloc_dma_buffer(4096);
    file.write_at(buf, 0).await.map_err(|e| format!("boot {i}: write: {e}"))?;
    file.fdatasync().await.map_err(|e| format!("boot {i}: fdatasync: {e}"))?;
    file.close().await.map_err(|e| format!("boot {i}: close: {e}"))?;
    glommio::executor().spawn_blocking(move || std::fs::remove_file(path)).await.map_err(|e| e.to_string())?;
    glommio::timer::sleep(Duration::from_micros(200)).await;
    let (tx, rx) = futures_channel::oneshot::channel();
    std::thread::spawn(move || tx.send(i));
    match rx.await {
        Ok(v) if v == i => Ok(()),
        other => Err(format!("boot {i}: channel answered {other:?}")),
    }
}

#[test]
fn boot_loop_never_stalls() {
    let n = executors();
    let boots = env_or("RINGSTREAM_STRESS_BOOTS", 300) as usize;
    // One slot per executor running at once; a boot is timed from its spawn to its join.
    let watch = Watch::new(n, 1);
    let dir = scratch_dir("boot-loop");
    let w = watch.clone();
    let d = dir.clone();
    watched(&watch, move || {
        for round in 0..boots.div_ceil(n) {
            let mut handles = Vec::new();
            for slot in 0..n.min(boots - round * n) {
                let i = round * n + slot;
                w.begin(slot, Op::Boot);
                let d = d.clone();
                let h = builder(format!("boot-{i}"))
                    .spawn(move || boot(d, i))
                    .map_err(|e| format!("starting boot {i}: {e}"))?;
                handles.push((slot, h));
            }
            for (slot, h) in handles {
                h.join().map_err(|e| format!("a boot failed: {e}"))??;
                w.end(slot);
            }
        }
        Ok(())
    });
    assert_eq!(watch.completed.load(Ordering::Relaxed), boots as u64);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The smallest case: one executor, a 1 µs preemption timer, a task that
/// spawns and awaits tasks in a loop.
#[test]
fn spawn_local_loop_with_tiny_preempt_timer() {
    let watch = Watch::new(1, 1);
    let w = watch.clone();
    watched(&watch, move || {
        let h = LocalExecutorBuilder::new(Placement::Unbound)
            .preempt_timer(Duration::from_micros(1))
            .io_memory(IO_MEMORY)
            .spawn(move || async move {
                for i in 0..20_000u32 {
                    w.time(0, Op::SpawnLocal, glommio::spawn_local(yielding(i))).await;
                }
            })
            .map_err(|e| e.to_string())?;
        h.join().map_err(|e| e.to_string())
    });
}

/// The main ring's completions run as task work without an interrupt
/// (vendor/glommio PATCHES.md, patch 4: COOP_TASKRUN): they must still reach
/// an executor whose only other task computes without a system call, at the
/// next entry into the kernel (its preemption timer, on the latency ring,
/// still interrupts it). Each round: another thread writes a byte to a
/// socket a task reads; the read must complete within 100 ms of the write
/// while the busy task keeps the executor from parking.
#[test]
fn socket_completion_reaches_a_busy_executor() {
    use futures_lite::AsyncReadExt;
    const ROUNDS: u32 = 20;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let (sent_tx, sent_rx) = mpsc::channel::<Instant>();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        for _ in 0..ROUNDS {
            std::thread::sleep(Duration::from_millis(20));
            sent_tx.send(Instant::now()).unwrap();
            (&theirs).write_all(&[1]).unwrap();
        }
    });
    let worst = LocalExecutorBuilder::new(Placement::Unbound)
        .preempt_timer(Duration::from_millis(10))
        .io_memory(IO_MEMORY)
        .spawn(move || async move {
            let done = std::rc::Rc::new(std::cell::Cell::new(false));
            let d = done.clone();
            let busy = glommio::spawn_local(async move {
                let mut x = 0u64;
                while !d.get() {
                    for i in 0..10_000u64 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                    }
                    glommio::yield_if_needed().await;
                }
                x
            });
            // Safety: the fd comes from a socket this test owns and hands over.
            let mut sock = unsafe { UnixStream::from_raw_fd(ours.into_raw_fd()) };
            let mut worst = Duration::ZERO;
            for _ in 0..ROUNDS {
                let mut byte = [0u8; 1];
                sock.read_exact(&mut byte).await.unwrap();
                let got = Instant::now();
                let sent = sent_rx.recv().unwrap();
                worst = worst.max(got.saturating_duration_since(sent));
            }
            done.set(true);
            busy.await;
            worst
        })
        .unwrap()
        .join()
        .unwrap();
    writer.join().unwrap();
    assert!(worst < Duration::from_millis(100), "a socket read completed {worst:?} after its byte was sent");
    eprintln!("slowest socket completion beside a busy task: {worst:?}");
}

/// How many times the calling thread gave up its CPU of its own accord: for
/// an executor's thread, each sleep that blocked, so each wake-up (counted
/// by the kernel).
fn voluntary_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let count = status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"));
    count.expect("the kernel reports voluntary_ctxt_switches").trim().parse().unwrap()
}

/// An idle shard sleeps (vendor/glommio PATCHES.md, patch 9): an executor
/// with the server's preemption timer, after a burst of tasks, waits a
/// second for a socket read with nothing else to run. Its thread wakes for
/// the kept preemption timer once and for the read (2-3 times measured);
/// when each wake-up armed a new preemption timer it woke every period
/// (about 90 times with 10 ms).
#[test]
fn an_idle_executor_sleeps() {
    use futures_lite::AsyncReadExt;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        std::thread::sleep(Duration::from_secs(1));
        (&theirs).write_all(&[1]).unwrap();
    });
    let wakeups = LocalExecutorBuilder::new(Placement::Unbound)
        .preempt_timer(Duration::from_micros(ringstream::limits::EXECUTOR_PREEMPT_TIMER_US))
        .io_memory(IO_MEMORY)
        .spawn(move || async move {
            for i in 0..100u32 {
                assert_eq!(glommio::spawn_local(yielding(i)).await, i);
            }
            // Safety: the fd comes from a socket this test owns and hands over.
            let mut sock = unsafe { UnixStream::from_raw_fd(ours.into_raw_fd()) };
            let before = voluntary_switches();
            let mut byte = [0u8; 1];
            sock.read_exact(&mut byte).await.unwrap();
            voluntary_switches() - before
        })
        .unwrap()
        .join()
        .unwrap();
    writer.join().unwrap();
    assert!(wakeups <= 5, "an idle executor woke {wakeups} times in a second");
}
