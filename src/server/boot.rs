//! Starting the shards: one pinned executor each, and the main thread's side
//! of the boot protocol (steps, "replicated", "go", "ready", the summary).

use super::shard_main::{shard_main, ShardBoot};
use super::Process;
use crate::config::Config;
use crate::limits::{BOOT_STALL_SECS, EXECUTOR_IO_MEMORY_BYTES, EXECUTOR_PREEMPT_TIMER_US};
use crate::shard::mesh;
use anyhow::{bail, Context};
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a booting shard tells the main thread, in this order: steps (each
/// one proof of progress), Replicated (its buckets and fork references are
/// known to every shard), Ready (listening), or Failed at any point.
pub(super) enum Boot {
    Step { shard: usize, what: &'static str },
    Replicated,
    Ready(Recovered),
    Failed(String),
}

/// One shard's recovery, for the startup log.
pub(super) struct Recovered {
    pub shard: usize,
    pub storage: String,
    pub streams: usize,
    /// Record bodies found in the log.
    pub bytes: u64,
    pub report: crate::storage::RecoveryReport,
    pub elapsed: Duration,
}

/// The running shards, as the main thread holds them.
pub(super) struct Shards {
    pub handles: Vec<ExecutorJoinHandle<()>>,
    boot: crossbeam_channel::Receiver<Boot>,
    /// One message per shard when its executor ends (see `ShardExit`).
    pub done: crossbeam_channel::Receiver<Result<(), String>>,
}

/// Starts one executor per shard (pinned to the allowed CPUs unless --no-pin).
pub(super) fn start(
    cfg: &Config,
    cpus: &[usize],
    direct: bool,
    addr: SocketAddr,
    process: &Arc<Process>,
) -> anyhow::Result<Shards> {
    let mut plan = mesh::Plan::new(cfg.shards).context("creating the cross-shard mesh")?;
    // Unbounded: each shard sends a handful of boot messages.
    let (boot_tx, boot) = crossbeam_channel::unbounded::<Boot>();
    let (done_tx, done) = crossbeam_channel::bounded::<Result<(), String>>(cfg.shards);
    let mut handles = Vec::new();
    for id in 0..cfg.shards {
        let placement = if cfg.pin { Placement::Fixed(cpus[id % cpus.len()]) } else { Placement::Unbound };
        let b = ShardBoot {
            id,
            cfg: cfg.clone(),
            direct,
            addr,
            link: Some(plan.link(id)),
            boot: boot_tx.clone(),
            done: done_tx.clone(),
            process: process.clone(),
        };
        let h = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{id}"))
            .io_memory(EXECUTOR_IO_MEMORY_BYTES)
            .preempt_timer(Duration::from_micros(EXECUTOR_PREEMPT_TIMER_US))
            .spawn(move || shard_main(b))
            .map_err(|e| anyhow::anyhow!("starting executor for shard {id}: {e}"))?;
        handles.push(h);
    }
    Ok(Shards { handles, boot, done })
}

/// Follows the boot: every shard replicated (then opens the go latch),
/// every shard listening; logs what recovery found.
pub(super) fn wait_until_listening(
    shards: &Shards,
    process: &Process,
    count: usize,
    started: Instant,
) -> anyhow::Result<()> {
    let mut steps = vec!["starting"; count];
    for _ in 0..count {
        if !matches!(next_boot_message(&shards.boot, &mut steps)?, Boot::Replicated) {
            bail!("boot: a shard reported ready before every shard replicated");
        }
    }
    process.go.count_down();
    let mut ready = Vec::with_capacity(count);
    for _ in 0..count {
        match next_boot_message(&shards.boot, &mut steps)? {
            Boot::Ready(r) => ready.push(r),
            _ => bail!("boot: a shard replicated twice"),
        }
    }
    log_recovery(&ready, started);
    Ok(())
}

/// One line per shard (info when it cut a torn tail, else debug), then the totals.
fn log_recovery(ready: &[Recovered], started: Instant) {
    for r in ready {
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
    }
    tracing::info!(
        streams = ready.iter().map(|r| r.streams).sum::<usize>(),
        bytes = ready.iter().map(|r| r.bytes).sum::<u64>(),
        records = ready.iter().map(|r| r.report.records).sum::<usize>(),
        segments = ready.iter().map(|r| r.report.segments).sum::<usize>(),
        torn_tails_cut = ready.iter().filter(|r| r.report.torn_tail.is_some()).count(),
        recovery_ms = ready.iter().map(|r| r.elapsed).max().unwrap_or_default().as_millis() as u64,
        boot_ms = started.elapsed().as_millis() as u64,
        "recovered the logs (shards in parallel; recovery_ms: the slowest shard)"
    );
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
