//! Boot: check the data directory, start one pinned glommio executor per
//! shard, recover each shard's log, join the cross-core mesh, replicate
//! bucket metadata, then listen (SO_REUSEPORT, one listener per shard).

use crate::config::Config;
use crate::http::conn::{self, ConnContext};
use crate::limits::{EXECUTOR_IO_MEMORY_BYTES, EXECUTOR_PREEMPT_TIMER_US, SHARDS_MAX};
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const FORMAT_VERSION: u32 = 1;

/// The data directory remembers how many shards wrote it: streams are placed
/// by hash modulo the shard count, so another count would lose them.
fn check_layout(dir: &Path, shards: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating data directory {}", dir.display()))?;
    let meta = dir.join("ringstream.meta");
    let want = format!("format={FORMAT_VERSION}\nshards={shards}\n");
    match std::fs::read_to_string(&meta) {
        Ok(have) if have == want => Ok(()),
        Ok(have) => bail!(
            "data directory {} was written with a different layout ({}); start with the same --shards or use another --data-dir",
            dir.display(),
            have.trim().replace('\n', ", ")
        ),
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

struct Ctx {
    me: usize,
    shards: usize,
    shard: Rc<Shard<DiskStore>>,
    mesh: Rc<Mesh>,
}

impl Dispatch for Ctx {
    fn dispatch(&self, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>> {
        Box::pin(async move {
            match req.owner(self.shards) {
                Some(owner) if owner != self.me => self.mesh.call(owner, req).await,
                _ => {
                    self.shard.stats.borrow_mut().requests_local += 1;
                    self.shard.handle(req).await
                }
            }
        })
    }
}

impl ConnContext for Ctx {
    fn metrics(&self) -> Pin<Box<dyn Future<Output = String> + '_>> {
        Box::pin(async move {
            let mut text = String::new();
            for s in 0..self.shards {
                let r = if s == self.me {
                    self.shard.handle(ShardRequest::Stats).await
                } else {
                    self.mesh.call(s, ShardRequest::Stats).await
                };
                if let Ok(Outcome::Stats(t)) = r {
                    text.push_str(&t);
                }
            }
            text.push_str(&format!(
                "ringstream_mesh_hops_out_total{{shard=\"{}\"}} {}\n",
                self.me,
                self.mesh.hops_out.get()
            ));
            text.push_str(&format!("ringstream_mesh_wakeups_total{{shard=\"{}\"}} {}\n", self.me, self.mesh.wakeups()));
            text
        })
    }
}

enum Boot {
    Ready { shard: usize, streams: usize, storage: String, recovery: String },
    Failed(String),
}

pub fn run(cfg: Config) -> anyhow::Result<()> {
    assert!(cfg.shards > 0 && cfg.shards <= SHARDS_MAX);
    check_layout(&cfg.data_dir, cfg.shards)?;
    let direct = match cfg.direct_io {
        DirectIoMode::Disabled => false,
        mode => {
            let ok = supports_direct_io(&cfg.data_dir).context("probing O_DIRECT support")?;
            if !ok && mode == DirectIoMode::Required {
                bail!("--direct-io required, but {} does not support O_DIRECT (tmpfs?)", cfg.data_dir.display());
            }
            ok
        }
    };
    log::info!(
        "direct I/O: {} (--direct-io {:?})",
        if direct { "on (O_DIRECT)" } else { "off (buffered + fdatasync)" },
        cfg.direct_io
    );
    check_memlock();
    let (reservation, addr) = reserve(cfg.listen)?;
    let cpus: Vec<usize> = (0..crate::config::online_cpus()).collect();
    let mut mesh_plan = mesh::Plan::new(cfg.shards).context("creating the cross-shard mesh")?;
    let (boot_tx, boot_rx) = crossbeam_channel::bounded::<Boot>(cfg.shards);
    // Two barriers driven from here: "every shard recovered and replicated
    // its buckets" then "listen".
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(cfg.shards);
    let (replicated_tx, replicated_rx) = crossbeam_channel::bounded::<()>(cfg.shards);
    let threads: Arc<Vec<AtomicU64>> = Arc::new((0..cfg.shards).map(|_| AtomicU64::new(0)).collect());
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..cfg.shards).map(|_| AtomicU64::new(0)).collect());
    install_kick_handler()?;
    start_kicker(threads.clone());
    let mut handles = Vec::new();
    for id in 0..cfg.shards {
        let threads = threads.clone();
        let progress = progress.clone();
        let placement = if cfg.pin { Placement::Fixed(cpus[id % cpus.len()]) } else { Placement::Unbound };
        let cfg = cfg.clone();
        let link = mesh_plan.link(id);
        let boot_tx = boot_tx.clone();
        let go_rx = go_rx.clone();
        let replicated_tx = replicated_tx.clone();
        let h = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{id}"))
            .io_memory(EXECUTOR_IO_MEMORY_BYTES)
            .preempt_timer(Duration::from_micros(EXECUTOR_PREEMPT_TIMER_US))
            .spawn(move || {
                // Safety: pthread_self has no preconditions.
                threads[id].store(unsafe { libc::pthread_self() } as u64, Ordering::Release);
                async move {
                    let fail = |e: String| {
                        let _ = boot_tx.send(Boot::Failed(e));
                    };
                    let dir = cfg.data_dir.join(format!("shard-{id}"));
                    boot_step(&progress[id], &format!("shard {id}: boot: opening {}", dir.display()));
                    let store = match DiskStore::open(&dir, direct).await {
                        Ok(s) => s,
                        Err(e) => return fail(format!("shard {id}: opening {}: {e}", dir.display())),
                    };
                    let storage = crate::storage::io::SegmentStore::describe(&store);
                    let log_cfg =
                        LogConfig { segment_bytes: cfg.segment_bytes, pending_bytes_max: cfg.max_pending_bytes };
                    boot_step(&progress[id], &format!("shard {id}: boot: recovering the log"));
                    let (log, records, report) = match Log::open(store, log_cfg).await {
                        Ok(x) => x,
                        Err(e) => return fail(format!("shard {id}: recovery failed: {e}")),
                    };
                    let log = Rc::new(log);
                    let shard = match Shard::recover(id, cfg.shards, log.clone(), &records) {
                        Ok(s) => Rc::new(s),
                        Err(e) => return fail(e),
                    };
                    drop(records);
                    shard.set_live(
                        Rc::new(|d| Box::pin(glommio::timer::sleep(d))),
                        Duration::from_millis(cfg.long_poll_timeout_ms),
                    );
                    let l = log.clone();
                    glommio::spawn_local(async move { l.run_writer().await }).detach();
                    let l = log.clone();
                    glommio::spawn_local(async move { l.run_preparer().await }).detach();
                    boot_step(&progress[id], &format!("shard {id}: boot: joining the mesh"));
                    let (mesh, inbox) = link.join();
                    shard.set_peers(mesh.clone());
                    {
                        let shard = shard.clone();
                        glommio::spawn_local(mesh.clone().serve(inbox, move |req| {
                            let shard = shard.clone();
                            async move {
                                shard.stats.borrow_mut().requests_remote_in += 1;
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
                    boot_step(&progress[id], &format!("shard {id}: boot: replicated"));
                    let _ = replicated_tx.send(());
                    // Wait for every shard's buckets, while still serving the mesh.
                    while go_rx.try_recv().is_err() {
                        glommio::timer::sleep(Duration::from_millis(1)).await;
                    }
                    let s = shard.clone();
                    glommio::spawn_local(async move { s.collect_unreferenced().await }).detach();
                    boot_step(&progress[id], &format!("shard {id}: boot: listening"));
                    let listener = match TcpListener::bind(addr) {
                        Ok(l) => l,
                        Err(e) => return fail(format!("shard {id}: listening on {addr}: {e}")),
                    };
                    let recovery = format!(
                        "{} segments, {} records, torn tail: {:?}, active segment {}",
                        report.segments, report.records, report.torn_tail, report.active_segment
                    );
                    let _ = boot_tx.send(Boot::Ready { shard: id, streams: shard.stream_count(), storage, recovery });
                    let ctx = Rc::new(Ctx { me: id, shards: cfg.shards, shard, mesh });
                    let timeouts = conn::RequestTimeouts {
                        header: Duration::from_millis(cfg.header_timeout_ms),
                        body: Duration::from_millis(cfg.body_timeout_ms),
                    };
                    let gate = Rc::new(conn::Gate::new(cfg.max_connections, timeouts));
                    loop {
                        match listener.accept().await {
                            Ok(stream) => conn::admit(stream, ctx.clone(), &gate),
                            Err(e) => {
                                log::warn!("shard {id}: accept failed: {e}");
                                glommio::timer::sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("starting executor for shard {id}: {e}"))?;
        handles.push(h);
    }
    drop(boot_tx);
    for _ in 0..cfg.shards {
        wait_boot(&replicated_rx, &boot_rx, &progress)?;
        if let Ok(Boot::Failed(e)) = boot_rx.try_recv() {
            bail!(e);
        }
    }
    for _ in 0..cfg.shards {
        let _ = go_tx.send(());
    }
    for _ in 0..cfg.shards {
        match wait_boot(&boot_rx, &boot_rx, &progress)? {
            Boot::Ready { shard, streams, storage, recovery } => {
                log::info!("shard {shard}: {storage}; recovered {streams} streams ({recovery})")
            }
            Boot::Failed(e) => bail!(e),
        }
    }
    drop(reservation);
    println!("ringstream listening on http://{addr} ({} shards, data in {})", cfg.shards, cfg.data_dir.display());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    for h in handles {
        if let Err(e) = h.join() {
            bail!("a shard stopped: {e:?}");
        }
    }
    Ok(())
}

/// glommio registers its I/O buffers with io_uring, which needs locked
/// memory; without enough it silently falls back to slower unregistered I/O.
fn check_memlock() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // Safety: getrlimit only writes the struct we pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } == 0;
    let is_root = unsafe { libc::geteuid() } == 0;
    let need = 3 * EXECUTOR_IO_MEMORY_BYTES as u64;
    if ok && !is_root && lim.rlim_cur != libc::RLIM_INFINITY && lim.rlim_cur < need {
        log::warn!(
            "RLIMIT_MEMLOCK is {} bytes, below the ~{need} bytes per shard glommio wants for registered buffers; I/O will be slower (raise it with ulimit -l)",
            lim.rlim_cur
        );
    }
}

extern "C" fn on_kick(_: libc::c_int) {}

/// A no-op SIGUSR1 handler without SA_RESTART, so a kick makes a sleeping
/// `io_uring_enter` return EINTR (which glommio treats as a wake-up).
fn install_kick_handler() -> anyhow::Result<()> {
    // Safety: sigaction with a zeroed struct, a valid handler and an empty mask.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_kick as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        bail!("installing the SIGUSR1 handler: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Liveness watchdog. glommio 0.9 on this kernel (6.x) sometimes parks an
/// executor in `io_uring_enter` although work is ready: a completion from
/// its blocking-syscall pool, a timer on its latency ring, or even the
/// first poll of a new task is never noticed (we saw boot hang in about
/// 1 of 25 starts under load, and idle servers leave a request waiting until
/// unrelated traffic arrived). Kicking every executor thread with a signal
/// every EXECUTOR_KICK_INTERVAL_MS bounds such a stall to that interval; a
/// kicked executor re-checks all its rings and queues, and goes back to sleep
/// if there is nothing to do.
fn start_kicker(threads: Arc<Vec<AtomicU64>>) {
    std::thread::Builder::new()
        .name("kicker".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(crate::limits::EXECUTOR_KICK_INTERVAL_MS));
            for t in threads.iter() {
                let tid = t.load(Ordering::Acquire);
                if tid != 0 {
                    // Safety: the id is a live executor thread of this process
                    // (executors run until the process exits).
                    unsafe { libc::pthread_kill(tid as libc::pthread_t, libc::SIGUSR1) };
                }
            }
        })
        .expect("starting the kicker thread");
}

fn boot_step(progress: &AtomicU64, what: &str) {
    log::debug!("{what}");
    progress.fetch_add(1, Ordering::Release);
}

/// Waits for one boot message. glommio 0.9 occasionally loses an I/O
/// completion during an executor's first steps (about 1 boot in 50 under
/// heavy parallel load; the kicker does not revive it because nothing is
/// pending any more). Boot is idempotent (recovery only reads, truncates a
/// torn tail and removes unused segments), so when no shard has made
/// progress for BOOT_STALL_SECS we start over by re-executing ourselves, at
/// most BOOT_ATTEMPTS_MAX times.
fn wait_boot<T>(
    rx: &crossbeam_channel::Receiver<T>,
    failures: &crossbeam_channel::Receiver<Boot>,
    progress: &[AtomicU64],
) -> anyhow::Result<T> {
    use crate::limits::{BOOT_ATTEMPTS_MAX, BOOT_STALL_SECS};
    let total = || progress.iter().map(|p| p.load(Ordering::Acquire)).sum::<u64>();
    let mut seen = total();
    let mut since = std::time::Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(x) => return Ok(x),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => bail!("a shard exited during boot"),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
        if let Ok(Boot::Failed(e)) = failures.try_recv() {
            bail!(e);
        }
        let now = total();
        if now != seen {
            seen = now;
            since = std::time::Instant::now();
            continue;
        }
        if since.elapsed() < Duration::from_secs(BOOT_STALL_SECS) {
            continue;
        }
        let attempt: u32 = std::env::var("RINGSTREAM_BOOT_ATTEMPT").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
        if attempt >= BOOT_ATTEMPTS_MAX {
            log::error!("boot made no progress for {BOOT_STALL_SECS} s (attempt {attempt}); still waiting");
            since = std::time::Instant::now();
            continue;
        }
        log::error!("boot made no progress for {BOOT_STALL_SECS} s (an executor lost an I/O completion); restarting the process, attempt {}", attempt + 1);
        use std::os::unix::process::CommandExt;
        let err = std::process::Command::new("/proc/self/exe")
            .args(std::env::args_os().skip(1))
            .env("RINGSTREAM_BOOT_ATTEMPT", (attempt + 1).to_string())
            .exec();
        bail!("re-executing for a new boot attempt: {err}");
    }
}
