//! The life of the process, one step per line in [`run`]; each step lives in
//! its own file:
//! - `host`: the data directory's lock and layout, the host checks
//!   (io_uring, locked memory, O_DIRECT), the listen address;
//! - `access`: the auth file, loaded at boot and re-read on SIGHUP;
//! - `signals`: SIGTERM/SIGINT to the stop latch, SIGHUP to a reload;
//! - `boot`: one pinned executor per shard, and the main thread's side of
//!   the boot protocol;
//! - `shard_main`: what each executor runs (recover, join the mesh,
//!   replicate, serve, drain);
//! - `context`: what the server owns that a connection needs (metrics of
//!   every shard, readiness, stop, grants, moves);
//! - `shutdown`: one shard's drain and final sync;
//! - `systemd`: the notify protocol (READY, STOPPING, the watchdog);
//! - `check`: `--check-config`, the same checks without serving;
//! - `webhook_key`: the subscriptions' signing key file.
//!
//! Shutdown (SIGTERM/SIGINT): stop accepting, drain, final sync, exit 0
//! within SHUTDOWN_TIMEOUT_MS (see `signals`).

mod access;
mod boot;
mod cell;
mod check;
mod context;
mod host;
mod restore;
mod shard_main;
mod shutdown;
mod signals;
mod systemd;
mod webhook_key;

pub use check::check;
pub use restore::restore;

use crate::config::Config;
use crate::latch::Latch;
use crate::limits::SHARDS_MAX;
use anyhow::bail;
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Exit status of a start that failed because of how it was configured
/// (sysexits.h `EX_CONFIG`); the systemd unit does not restart on it.
pub const EXIT_CONFIG: i32 = 78;

/// A failure that retrying cannot fix: a bad setting, a data directory of
/// another layout, a host without what the settings require. `main` exits
/// [`EXIT_CONFIG`] for it (found anywhere in the error's chain).
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// A [`ConfigError`] as an `anyhow::Error`.
pub(crate) fn config_error(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(ConfigError(msg.into()))
}

/// Process states: a stop signal during boot exits at once; from serving
/// it starts a graceful shutdown. SIGHUP reloads only while serving.
const BOOTING: u8 = 0;
const SERVING: u8 = 1;
const STOPPING: u8 = 2;

/// What the main thread, the signal thread and the shards share: the state
/// and the latches that carry boot and shutdown across threads (each shard
/// waits in the slot of its id).
struct Process {
    state: AtomicU8,
    /// Opened by the main thread once every shard replicated: start serving.
    go: Latch,
    /// Opened by the signal thread: stop accepting and drain.
    stop: Latch,
    /// Counted down by each shard once its connections are done; the final
    /// syncs wait for all of them (a request in flight may need any shard).
    drained: Latch,
    /// systemd's watchdog interval, when it asked for one (`WATCHDOG_USEC`).
    watchdog: Option<Duration>,
    /// Bumped by each shard's heartbeat task (only with a watchdog).
    heartbeats: Box<[AtomicU64]>,
    /// Access control (`--auth-file`); None: off.
    auth: Option<Arc<access::Auth>>,
    /// The object store of tiered storage (`--tier s3`); None: off.
    tier: Option<crate::tier::TierClient>,
    /// What each shard's replica publishes (`--cell`), read by every
    /// shard's HTTP edge for `/cellz`, `/leaderz` and metrics; None: off.
    cell: Option<Arc<crate::cell::board::Board>>,
    /// In a cell of more than one shard a node: whether it leads every
    /// group and its shards told one another again since (`cell::unity`).
    unity: Option<Arc<crate::cell::unity::Unity>>,
    /// Subscriptions: the webhook signing key and the delivery thread.
    subs: (Arc<arc_swap::ArcSwap<crate::protocol::subs::sign::KeySet>>, crate::tier::outbound::Outbound),
    /// Single node: the data directory, whose webhook key files a SIGHUP
    /// loads again (in a cell the key comes from the cell secret).
    webhook_keys_dir: Option<std::path::PathBuf>,
}

pub fn run(cfg: Config) -> anyhow::Result<()> {
    assert!(cfg.shards > 0 && cfg.shards <= SHARDS_MAX);
    let started = Instant::now();
    abort_on_executor_panic();
    let cpus = crate::preflight::allowed_cpus();
    log_start(&cfg, &cpus);
    let auth = access::Auth::load(&cfg)?;
    let host = host::claim(&cfg)?;
    // Before any thread starts, so every thread inherits the mask and only
    // the signal thread receives SIGTERM/SIGINT.
    let stop_signals = signals::block_stop_signals()?;
    // Starts the tier thread: after the mask is in place.
    let tier = host::tier_client(&cfg)?;
    let keys = match &cfg.cell {
        Some(cell) => webhook_key::set_for_cell(&cell.secret),
        None => webhook_key::load_set(&cfg.data_dir)?,
    };
    let keys = Arc::new(arc_swap::ArcSwap::from_pointee(keys));
    // Deliveries reach public addresses, and loopback from a server on loopback.
    let loopback = cfg.listen.ip().is_loopback();
    let allow: crate::tier::outbound::Allow =
        Arc::new(move |ip| crate::protocol::subs::url::is_public(ip) || (loopback && ip.is_loopback()));
    let outbound = crate::tier::outbound::Outbound::start(allow).map_err(anyhow::Error::msg)?;
    let n = cfg.shards;
    let process = Arc::new(Process {
        state: AtomicU8::new(BOOTING),
        go: Latch::new(1, n),
        stop: Latch::new(1, n),
        drained: Latch::new(n, n),
        watchdog: systemd::watchdog_interval(),
        heartbeats: (0..n).map(|_| AtomicU64::new(0)).collect(),
        auth,
        tier,
        cell: cfg.cell.as_ref().map(|c| Arc::new(crate::cell::board::Board::new(c.node_id, n))),
        unity: (cfg.cell.is_some() && n > 1).then(|| Arc::new(crate::cell::unity::Unity::new(n))),
        subs: (keys, outbound),
        webhook_keys_dir: cfg.cell.is_none().then(|| cfg.data_dir.clone()),
    });
    signals::start_signal_thread(stop_signals, process.clone());
    let (reservation, addr) = host::reserve(cfg.listen)?;
    let shards = boot::start(&cfg, &cpus, host.direct, addr, &process)?;
    boot::wait_until_listening(&shards, &process, n, started)?;
    drop(reservation);
    // A signal during boot found BOOTING and ended the process; from here on
    // it moves SERVING to STOPPING.
    let _ = process.state.compare_exchange(BOOTING, SERVING, Ordering::AcqRel, Ordering::Acquire);
    println!("ringstream listening on http://{addr} ({n} shards, data in {})", cfg.data_dir.display());
    let _ = std::io::stdout().flush();
    systemd::ready(&format!("serving on http://{addr}, {n} shards"));
    if let Some(interval) = process.watchdog {
        systemd::start_watchdog(process.clone(), interval);
    }
    wait_for_shards(shards, &process)?;
    drop(host);
    tracing::info!("shutdown complete: every shard drained and synced");
    Ok(())
}

fn log_start(cfg: &Config, cpus: &[usize]) {
    tracing::info!(
        version = crate::build_info::VERSION,
        commit = crate::build_info::COMMIT,
        shards = cfg.shards,
        cpus = ?cpus,
        pinned = cfg.pin,
        data_dir = %cfg.data_dir.display(),
        listen = %cfg.listen,
        config_file = %cfg.config_file.as_ref().map_or("none".to_string(), |p| p.display().to_string()),
        "ringstream starting"
    );
}

/// An executor thread (`shard-N-…`) that panics would leave its shard dead
/// in a live process: its listening socket still taking connections that
/// nobody answers, its replica silent while the cell counts it. The process
/// ends instead (after the panic is printed), so that its supervisor
/// restarts it and, in a cell, the other nodes take over at once.
fn abort_on_executor_panic() {
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        print(info);
        if std::thread::current().name().is_some_and(|n| n.starts_with("shard-")) {
            eprintln!("ringstream: an executor thread panicked: ending the process");
            std::process::abort();
        }
    }));
}

/// The shards run until a shutdown; each reports once drained and synced.
/// A shard that ends outside a shutdown (a panic) ends the process.
fn wait_for_shards(shards: boot::Shards, process: &Process) -> anyhow::Result<()> {
    let mut failures = Vec::new();
    for _ in 0..shards.handles.len() {
        match shards.done.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) if process.state.load(Ordering::Acquire) != STOPPING => bail!(e),
            Ok(Err(e)) => failures.push(e),
            Err(_) => break,
        }
    }
    for h in shards.handles {
        if let Err(e) = h.join() {
            failures.push(format!("a shard stopped: {e:?}"));
        }
    }
    if !failures.is_empty() {
        bail!("shutdown: {}", failures.join("; "));
    }
    Ok(())
}
