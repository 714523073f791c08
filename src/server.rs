//! Boot: lock and check the data directory, check the host (`preflight`),
//! start one pinned glommio executor per shard, recover each shard's log, join the cross-core mesh, replicate
//! bucket metadata, then listen (SO_REUSEPORT, one listener per shard).
//! Shutdown (SIGTERM/SIGINT): stop accepting, drain, final sync, exit 0
//! within SHUTDOWN_TIMEOUT_MS (see `start_signal_thread`).

use crate::config::Config;
use crate::http::conn::{self, ConnContext};
use crate::http::stop::Stop;
use crate::latch::Latch;
use crate::limits::{
    BOOT_STALL_SECS, EXECUTOR_IO_MEMORY_BYTES, EXECUTOR_PREEMPT_TIMER_US, SHARDS_MAX, SHUTDOWN_DRAIN_MS,
    SHUTDOWN_TIMEOUT_MS,
};
use crate::metrics::{EdgeMetrics, Family, Samples};
use crate::preflight;
use crate::protocol::Outcome;
use crate::shard::mesh::{self, Mesh, Peers};
use crate::shard::router::{Dispatch, Reply, ShardRequest};
use crate::shard::Shard;
use crate::storage::dma_file::{supports_direct_io, DirectIoMode, DiskStore};
use crate::storage::{Log, LogConfig};
use anyhow::{bail, Context};
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The storage format this version writes and reads (ringstream.meta).
/// 1: the first; 2: every segment but the newest ends in a seal record.
const FORMAT_VERSION: u32 = 2;

/// The data directory remembers how many shards wrote it: streams are placed
/// by hash modulo the shard count, so another count would lose them.
fn check_layout(dir: &Path, shards: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating data directory {}", dir.display()))?;
    let meta = dir.join("ringstream.meta");
    let want = format!("format={FORMAT_VERSION}\nshards={shards}\n");
    match std::fs::read_to_string(&meta) {
        Ok(have) if have == want => Ok(()),
        Ok(have) if !have.starts_with(&format!("format={FORMAT_VERSION}\n")) => bail!(
            "data directory {} has a storage format this version does not read ({}; this version reads \
             format={FORMAT_VERSION}): run the version that wrote it, or use another --data-dir",
            dir.display(),
            have.trim().replace('\n', ", ")
        ),
        Ok(have) => {
            let written = have.lines().find_map(|l| l.strip_prefix("shards=")).unwrap_or("?");
            bail!(
                "data directory {} was written by {written} shards ({}), but this server has {shards} (--shards, \
                 RINGSTREAM_SHARDS or `shards` in the config file; the default is the number of CPUs it may use): \
                 streams are placed by shard, so start with --shards {written}, or use another --data-dir",
                dir.display(),
                have.trim().replace('\n', ", ")
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tmp = dir.join("ringstream.meta.tmp");
            std::fs::write(&tmp, &want)?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &meta)?;
            std::fs::File::open(dir)?.sync_all()?;
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", meta.display())),
    }
}

/// Resolves the listen address (port 0 -> a real port) with a socket bound
/// under SO_REUSEPORT but not listening, so every shard can bind the same
/// concrete address. Dropped once all shards listen.
fn reserve(addr: SocketAddr) -> anyhow::Result<(socket2::Socket, SocketAddr)> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    s.set_reuse_port(true)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into()).with_context(|| format!("binding {addr}"))?;
    let real = s.local_addr()?.as_socket().context("listen address is not IP")?;
    Ok((s, real))
}

/// Process state, shared by the main thread, the signal thread and the shards.
const BOOTING: u8 = 0;
const SERVING: u8 = 1;
const STOPPING: u8 = 2;

struct Ctx {
    me: usize,
    shards: usize,
    shard: Rc<Shard<DiskStore>>,
    mesh: Rc<Mesh>,
    edge: Rc<EdgeMetrics>,
    stop: Rc<Stop>,
    state: Arc<AtomicU8>,
}

impl Dispatch for Ctx {
    fn dispatch(&self, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>> {
        Box::pin(async move {
            match req.owner(self.shards) {
                Some(owner) if owner != self.me => {
                    self.edge.handoffs.set(self.edge.handoffs.get() + 1);
                    self.mesh.call(owner, req).await
                }
                _ => {
                    self.shard.stats.borrow_mut().requests_local += 1;
                    self.shard.handle(req).await
                }
            }
        })
    }
}

/// One shard's metrics: its streams and log (the pump), its HTTP edge, its
/// mesh end.
fn shard_metrics(shard: &Shard<DiskStore>, edge: &EdgeMetrics, mesh: &Mesh) -> Samples {
    let mut s = shard.metrics();
    edge.render(shard.id, &mut s);
    s.sample(Family::MeshCalls, shard.id, "", mesh.hops_out.get());
    s.sample(Family::MeshWakeups, shard.id, "", mesh.wakeups());
    s
}

impl ConnContext for Ctx {
    fn metrics(&self) -> Pin<Box<dyn Future<Output = String> + '_>> {
        Box::pin(async move {
            let mut all = Samples::default();
            for s in 0..self.shards {
                if s == self.me {
                    all.merge(&shard_metrics(&self.shard, &self.edge, &self.mesh).into_blocks());
                } else if let Ok(Outcome::Stats(blocks)) = self.mesh.call(s, ShardRequest::Stats).await {
                    all.merge(&blocks);
                }
            }
            all.render()
        })
    }

    fn edge(&self) -> &EdgeMetrics {
        &self.edge
    }

    fn stop(&self) -> &Rc<Stop> {
        &self.stop
    }

    fn ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == SERVING
    }
}

/// Sent when a shard's executor finishes (also on a panic or a failed
/// boot), so that the main thread never waits for a shard that is gone.
struct ShardExit {
    id: usize,
    done: crossbeam_channel::Sender<Result<(), String>>,
    result: Option<Result<(), String>>,
}

impl Drop for ShardExit {
    fn drop(&mut self) {
        let r = self.result.take().unwrap_or_else(|| Err(format!("shard {} stopped unexpectedly", self.id)));
        let _ = self.done.send(r);
    }
}

/// What a booting shard tells the main thread, in this order: steps (each
/// one proof of progress), Replicated (its buckets and fork references are
/// known to every shard), Ready (listening), or Failed at any point.
enum Boot {
    Step { shard: usize, what: &'static str },
    Replicated,
    Ready(Recovered),
    Failed(String),
}

/// The latches that carry boot and shutdown across threads (each shard
/// waits in the slot of its id).
struct Phases {
    /// Opened by the main thread once every shard replicated: start serving.
    go: Latch,
    /// Opened by the signal thread: stop accepting and drain.
    stop: Latch,
    /// Counted down by each shard once its connections are done; the final
    /// syncs wait for all of them (a request in flight may need any shard).
    drained: Latch,
}

/// One shard's recovery, for the startup log.
struct Recovered {
    shard: usize,
    storage: String,
    streams: usize,
    /// Record bodies found in the log.
    bytes: u64,
    report: crate::storage::RecoveryReport,
    elapsed: Duration,
}

pub fn run(cfg: Config) -> anyhow::Result<()> {
    assert!(cfg.shards > 0 && cfg.shards <= SHARDS_MAX);
    let boot_started = Instant::now();
    let cpus = preflight::allowed_cpus();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        shards = cfg.shards,
        cpus = ?cpus,
        pinned = cfg.pin,
        data_dir = %cfg.data_dir.display(),
        listen = %cfg.listen,
        config_file = %cfg.config_file.as_ref().map_or("none".to_string(), |p| p.display().to_string()),
        "ringstream starting"
    );
    // Held until run returns (the kernel drops it if the process dies).
    let lock = preflight::lock_data_dir(&cfg.data_dir).map_err(anyhow::Error::msg)?;
    tracing::debug!("holding {}", lock.path.display());
    check_layout(&cfg.data_dir, cfg.shards)?;
    preflight::probe_io_uring().map_err(anyhow::Error::msg)?;
    let memlock = preflight::ensure_memlock(cfg.shards, EXECUTOR_IO_MEMORY_BYTES).map_err(anyhow::Error::msg)?;
    if let Some(to) = memlock.raised_to {
        tracing::info!(from = memlock.facts.soft, to, need = memlock.need, "raised the RLIMIT_MEMLOCK soft limit");
    }
    if let Some(w) = &memlock.warning {
        tracing::warn!("{w}");
    }
    let supported = match cfg.direct_io {
        DirectIoMode::Disabled => false,
        _ => supports_direct_io(&cfg.data_dir).context("probing O_DIRECT support")?,
    };
    let direct = preflight::direct_io_decision(cfg.direct_io, supported, &cfg.data_dir).map_err(anyhow::Error::msg)?;
    tracing::info!(
        "direct I/O: {} (--direct-io {})",
        if direct { "on (O_DIRECT)" } else { "off (buffered + fdatasync)" },
        clap::ValueEnum::to_possible_value(&cfg.direct_io).map_or_else(String::new, |v| v.get_name().to_string())
    );
    // Before any thread starts, so every thread inherits the mask and only
    // the signal thread receives SIGTERM/SIGINT.
    let stop_signals = block_stop_signals()?;
    let state = Arc::new(AtomicU8::new(BOOTING));
    let n = cfg.shards;
    let phases = Arc::new(Phases { go: Latch::new(1, n), stop: Latch::new(1, n), drained: Latch::new(n, n) });
    start_signal_thread(stop_signals, state.clone(), phases.clone());
    let (reservation, addr) = reserve(cfg.listen)?;
    let mut mesh_plan = mesh::Plan::new(cfg.shards).context("creating the cross-shard mesh")?;
    // Unbounded: each shard sends a handful of boot messages.
    let (boot_tx, boot_rx) = crossbeam_channel::unbounded::<Boot>();
    let (done_tx, done_rx) = crossbeam_channel::bounded::<Result<(), String>>(cfg.shards);
    let mut handles = Vec::new();
    for id in 0..cfg.shards {
        let done = done_tx.clone();
        let state = state.clone();
        let phases = phases.clone();
        let placement = if cfg.pin { Placement::Fixed(cpus[id % cpus.len()]) } else { Placement::Unbound };
        let cfg = cfg.clone();
        let link = mesh_plan.link(id);
        let boot_tx = boot_tx.clone();
        let h = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{id}"))
            .io_memory(EXECUTOR_IO_MEMORY_BYTES)
            .preempt_timer(Duration::from_micros(EXECUTOR_PREEMPT_TIMER_US))
            .spawn(move || {
                async move {
                    let mut exit = ShardExit { id, done, result: None };
                    let fail = |e: String| {
                        let _ = boot_tx.send(Boot::Failed(e));
                    };
                    let dir = cfg.data_dir.join(format!("shard-{id}"));
                    let step = |what| {
                        tracing::debug!("shard {id}: boot: {what}");
                        let _ = boot_tx.send(Boot::Step { shard: id, what });
                    };
                    step("opening the data directory");
                    let store = match DiskStore::open(&dir, direct).await {
                        Ok(s) => s,
                        Err(e) => return fail(format!("shard {id}: opening {}: {e}", dir.display())),
                    };
                    let storage = crate::storage::io::SegmentStore::describe(&store);
                    let log_cfg =
                        LogConfig { segment_bytes: cfg.segment_bytes, pending_bytes_max: cfg.max_pending_bytes };
                    step("recovering the log");
                    let recovery_started = Instant::now();
                    let (log, records, report) = match Log::open(store, log_cfg).await {
                        Ok(x) => x,
                        Err(e) => return fail(format!("shard {id}: recovery failed: {e}")),
                    };
                    let log = Rc::new(log);
                    let shard = match Shard::recover(id, cfg.shards, log.clone(), &records) {
                        Ok(s) => Rc::new(s),
                        Err(e) => return fail(e),
                    };
                    let recovered_bytes: u64 = records.iter().map(|r| u64::from(r.loc.body_len)).sum();
                    let recovery_elapsed = recovery_started.elapsed();
                    drop(records);
                    shard.set_live(
                        Rc::new(|d| Box::pin(glommio::timer::sleep(d))),
                        Duration::from_millis(cfg.long_poll_timeout_ms),
                    );
                    let l = log.clone();
                    glommio::spawn_local(async move { l.run_writer().await }).detach();
                    let l = log.clone();
                    glommio::spawn_local(async move { l.run_preparer().await }).detach();
                    step("joining the mesh");
                    let (mesh, inbox) = link.join();
                    shard.set_peers(mesh.clone());
                    let edge = Rc::new(EdgeMetrics::default());
                    {
                        let (shard, edge, m) = (shard.clone(), edge.clone(), mesh.clone());
                        glommio::spawn_local(mesh.clone().serve(inbox, move |req| {
                            let (shard, edge, m) = (shard.clone(), edge.clone(), m.clone());
                            async move {
                                shard.stats.borrow_mut().requests_remote_in += 1;
                                if let ShardRequest::Stats = req {
                                    return Ok(Outcome::Stats(shard_metrics(&shard, &edge, &m).into_blocks()));
                                }
                                shard.handle(req).await
                            }
                        }))
                        .detach();
                    }
                    for bucket in shard.owned_buckets() {
                        for peer in (0..cfg.shards).filter(|&p| p != id) {
                            if let Err(e) = mesh
                                .call(peer, ShardRequest::ReplicateBucket { bucket: bucket.clone(), present: true })
                                .await
                            {
                                return fail(format!("shard {id}: replicating buckets: {e}"));
                            }
                        }
                    }
                    // Forks tell their sources' owners they exist (references are
                    // not logged: they are rebuilt from the forks' own records).
                    for (source, source_uid) in shard.fork_sources() {
                        let req = ShardRequest::ForkRef { source, source_uid, add: true };
                        let owner = req.owner(cfg.shards).unwrap_or(id);
                        let r = if owner == id { shard.handle(req).await } else { mesh.call(owner, req).await };
                        if let Err(e) = r {
                            return fail(format!("shard {id}: counting fork references: {e}"));
                        }
                    }
                    step("replicated buckets and fork references");
                    let _ = boot_tx.send(Boot::Replicated);
                    // Wait for every shard's buckets, while still serving the mesh.
                    phases.go.wait(id).await;
                    let s = shard.clone();
                    glommio::spawn_local(async move { s.collect_unreferenced().await }).detach();
                    // Only now: every fork has counted its reference, so the
                    // TTL sweep inside never hard-deletes a referenced source.
                    let s = shard.clone();
                    glommio::spawn_local(async move {
                        loop {
                            glommio::timer::sleep(Duration::from_millis(crate::limits::RECLAIM_INTERVAL_MS)).await;
                            s.reclaim().await;
                        }
                    })
                    .detach();
                    step("listening");
                    let listener = match TcpListener::bind(addr) {
                        Ok(l) => l,
                        Err(e) => return fail(format!("shard {id}: listening on {addr}: {e}")),
                    };
                    let _ = boot_tx.send(Boot::Ready(Recovered {
                        shard: id,
                        storage,
                        streams: shard.stream_count(),
                        bytes: recovered_bytes,
                        report,
                        elapsed: recovery_elapsed,
                    }));
                    let stop = Rc::new(Stop::default());
                    let ctx = Rc::new(Ctx {
                        me: id,
                        shards: cfg.shards,
                        shard: shard.clone(),
                        mesh,
                        edge: edge.clone(),
                        stop: stop.clone(),
                        state: state.clone(),
                    });
                    // The process-wide flag (set by the signal thread) becomes
                    // this shard's stop: live reads answer, idle connections close.
                    {
                        let (shard, stop, phases) = (shard.clone(), stop.clone(), phases.clone());
                        glommio::spawn_local(async move {
                            phases.stop.wait(id).await;
                            shard.begin_shutdown();
                            stop.trigger();
                        })
                        .detach();
                    }
                    let timeouts = conn::RequestTimeouts {
                        header: Duration::from_millis(cfg.header_timeout_ms),
                        body: Duration::from_millis(cfg.body_timeout_ms),
                    };
                    let gate = Rc::new(conn::Gate::new(cfg.max_connections, timeouts));
                    let accepting = stop.slot();
                    loop {
                        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
                            accepting.wait().await;
                            None
                        })
                        .await;
                        let stream = match accepted {
                            None => break,
                            Some(Ok(s)) => s,
                            Some(Err(e)) => {
                                tracing::warn!("shard {id}: accept failed: {e}");
                                glommio::timer::sleep(Duration::from_millis(10)).await;
                                continue;
                            }
                        };
                        conn::admit(stream, ctx.clone(), &gate);
                    }
                    drop(listener);
                    let r = drain(id, &shard, &edge, &gate, &phases.drained).await;
                    exit.result = Some(r);
                }
            })
            .map_err(|e| anyhow::anyhow!("starting executor for shard {id}: {e}"))?;
        handles.push(h);
    }
    drop(boot_tx);
    let mut steps = vec!["starting"; cfg.shards];
    for _ in 0..cfg.shards {
        if !matches!(next_boot_message(&boot_rx, &mut steps)?, Boot::Replicated) {
            bail!("boot: a shard reported ready before every shard replicated");
        }
    }
    phases.go.count_down();
    let (mut streams, mut bytes, mut records, mut segments, mut torn, mut slowest) = (0, 0, 0, 0, 0, Duration::ZERO);
    for _ in 0..cfg.shards {
        match next_boot_message(&boot_rx, &mut steps)? {
            Boot::Ready(r) => {
                macro_rules! shard_recovered {
                    ($level:ident) => {
                        tracing::$level!(
                            shard = r.shard,
                            storage = %r.storage,
                            streams = r.streams,
                            bytes = r.bytes,
                            records = r.report.records,
                            segments = r.report.segments,
                            recovery_ms = r.elapsed.as_millis() as u64,
                            torn_tail_cut = ?r.report.torn_tail,
                            active_segment = r.report.active_segment,
                            "shard recovered"
                        )
                    };
                }
                // A torn tail (the normal trace of a crash) is worth a line at info.
                if r.report.torn_tail.is_some() {
                    shard_recovered!(info);
                } else {
                    shard_recovered!(debug);
                }
                streams += r.streams;
                bytes += r.bytes;
                records += r.report.records;
                segments += r.report.segments;
                torn += usize::from(r.report.torn_tail.is_some());
                slowest = slowest.max(r.elapsed);
            }
            _ => bail!("boot: a shard replicated twice"),
        }
    }
    tracing::info!(
        streams,
        bytes,
        records,
        segments,
        torn_tails_cut = torn,
        recovery_ms = slowest.as_millis() as u64,
        boot_ms = boot_started.elapsed().as_millis() as u64,
        "recovered the logs (shards in parallel; recovery_ms: the slowest shard)"
    );
    drop(reservation);
    drop(done_tx);
    // A signal during boot found BOOTING and ended the process; from here on
    // it moves SERVING to STOPPING.
    let _ = state.compare_exchange(BOOTING, SERVING, Ordering::AcqRel, Ordering::Acquire);
    println!("ringstream listening on http://{addr} ({} shards, data in {})", cfg.shards, cfg.data_dir.display());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // The shards run until a shutdown; each reports once drained and synced.
    // A shard that ends outside a shutdown (a panic) ends the process.
    let mut failures = Vec::new();
    for _ in 0..cfg.shards {
        match done_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) if state.load(Ordering::Acquire) != STOPPING => bail!(e),
            Ok(Err(e)) => failures.push(e),
            Err(_) => break,
        }
    }
    for h in handles {
        if let Err(e) = h.join() {
            failures.push(format!("a shard stopped: {e:?}"));
        }
    }
    if !failures.is_empty() {
        bail!("shutdown: {}", failures.join("; "));
    }
    tracing::info!("shutdown complete: every shard drained and synced");
    Ok(())
}

/// Graceful shutdown of one shard, once it stopped accepting: wait for its
/// connections to finish (at most SHUTDOWN_DRAIN_MS), then for every other
/// shard to get there (requests still in flight may need this shard's log
/// or mesh), then a final sync of everything appended, and stop the log's
/// tasks.
async fn drain(
    id: usize,
    shard: &Shard<DiskStore>,
    edge: &EdgeMetrics,
    gate: &conn::Gate,
    drained: &Latch,
) -> Result<(), String> {
    tracing::info!("shard {id}: stopped accepting; {} connections to finish", edge.connections.get());
    let deadline = glommio::timer::sleep(Duration::from_millis(SHUTDOWN_DRAIN_MS));
    let closed = async {
        while edge.connections.get() > 0 {
            gate.all_closed().await;
        }
        true
    };
    if !futures_lite::future::or(closed, async {
        deadline.await;
        false
    })
    .await
    {
        tracing::warn!(
            "shard {id}: {} connections still open after {SHUTDOWN_DRAIN_MS} ms; closing them",
            edge.connections.get()
        );
    }
    drained.count_down();
    drained.wait(id).await;
    let log = shard.log();
    let tail = log.tail_lsn();
    let r = log.durable(tail).await.map_err(|e| format!("shard {id}: final sync failed: {e}"));
    log.stop();
    if r.is_ok() {
        tracing::info!("shard {id}: drained and synced ({tail} log bytes since boot)");
    }
    r
}

/// Blocks SIGTERM and SIGINT in the calling thread (and every thread it
/// starts later); `start_signal_thread` takes them with sigwait.
fn block_stop_signals() -> anyhow::Result<libc::sigset_t> {
    // Safety: sigset operations on a local, zero-initialised set.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        (rc, set)
    };
    if rc.0 != 0 {
        bail!("blocking SIGTERM/SIGINT: {}", std::io::Error::from_raw_os_error(rc.0));
    }
    Ok(rc.1)
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}

/// Waits for SIGTERM or SIGINT (blocked in every thread). The first one
/// moves the process to STOPPING and opens the stop latch, which wakes every
/// shard at once; the main thread then returns (exit status 0) once all
/// shards drained and synced. If that takes longer than SHUTDOWN_TIMEOUT_MS,
/// or a second signal comes, this thread logs it and exits with status 1.
/// A signal during boot exits at once with status 0: nothing has been
/// acknowledged that is not already durable, and recovery is idempotent.
fn start_signal_thread(set: libc::sigset_t, state: Arc<AtomicU8>, phases: Arc<Phases>) {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let sig = loop {
                // Safety: `set` is a valid signal set; sigwaitinfo writes nothing when given null.
                let sig = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
                if sig > 0 {
                    break sig;
                }
            };
            if state.swap(STOPPING, Ordering::AcqRel) == BOOTING {
                tracing::warn!("{} during boot: exiting", signal_name(sig));
                // Safety: _exit ends the process without running destructors on other threads.
                unsafe { libc::_exit(0) };
            }
            tracing::info!(
                "{}: shutting down (stop accepting, finish requests in flight, end live reads, final sync; limit {SHUTDOWN_TIMEOUT_MS} ms)",
                signal_name(sig)
            );
            phases.stop.count_down();
            let deadline = std::time::Instant::now() + Duration::from_millis(SHUTDOWN_TIMEOUT_MS);
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    tracing::error!("shutdown did not finish within {SHUTDOWN_TIMEOUT_MS} ms; exiting with status 1");
                    // Safety: as above.
                    unsafe { libc::_exit(1) };
                }
                let ts = libc::timespec { tv_sec: left.as_secs() as libc::time_t, tv_nsec: left.subsec_nanos() as _ };
                // Safety: valid set and timeout; no siginfo wanted.
                let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
                if sig > 0 {
                    tracing::error!("second {} during shutdown: exiting now with status 1", signal_name(sig));
                    // Safety: as above.
                    unsafe { libc::_exit(1) };
                }
            }
        })
        .expect("starting the signal thread");
}

/// Waits for the next boot message that is not a step, noting each shard's
/// last step. Boot normally takes milliseconds, but recovering a large log
/// legitimately takes longer, so a boot without progress for BOOT_STALL_SECS
/// is reported loudly (where each shard is) and waited for, never retried.
fn next_boot_message(rx: &crossbeam_channel::Receiver<Boot>, steps: &mut [&'static str]) -> anyhow::Result<Boot> {
    let stall = Duration::from_secs(BOOT_STALL_SECS);
    let mut quiet = Duration::ZERO;
    loop {
        match rx.recv_timeout(stall) {
            Ok(Boot::Step { shard, what }) => {
                steps[shard] = what;
                quiet = Duration::ZERO;
            }
            Ok(Boot::Failed(e)) => bail!(e),
            Ok(other) => return Ok(other),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => bail!("a shard exited during boot"),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                quiet += stall;
                let at: Vec<String> = steps.iter().enumerate().map(|(i, s)| format!("shard {i}: {s}")).collect();
                tracing::warn!(
                    "boot has made no progress for {} s; still waiting ({})",
                    quiet.as_secs(),
                    at.join(", ")
                );
            }
        }
    }
}
