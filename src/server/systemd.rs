//! systemd's notify protocol (sd_notify(3), through the `sd-notify` crate):
//! `READY=1` once every shard recovered its log and listens, `STOPPING=1`
//! when a graceful shutdown starts, and with `WatchdogSec=` set,
//! `WATCHDOG=1` every half interval while every shard's executor proves it
//! still runs tasks (a heartbeat task per shard bumps a counter). Without
//! `NOTIFY_SOCKET` (not started by systemd) every call is a no-op.

use super::{Process, STOPPING};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// `READY=1` with a status line for `systemctl status`.
pub(super) fn ready(status: &str) {
    send(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(status)]);
}

/// `STOPPING=1`: the shutdown started (systemd waits up to TimeoutStopSec).
pub(super) fn stopping() {
    send(&[sd_notify::NotifyState::Stopping, sd_notify::NotifyState::Status("shutting down")]);
}

fn send(states: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("telling systemd ({}): {e}", std::env::var("NOTIFY_SOCKET").unwrap_or_default());
    }
}

/// The watchdog interval systemd asks for (`WATCHDOG_USEC`, for this pid).
pub(super) fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}

/// How often each shard's heartbeat task beats: four beats per interval, so
/// every half-interval check sees at least one from a healthy shard.
pub(super) fn heartbeat_period(watchdog: Duration) -> Duration {
    watchdog / 4
}

/// Shards whose heartbeat did not move between two checks.
pub(super) fn stalled(before: &[u64], now: &[u64]) -> Vec<usize> {
    before.iter().zip(now).enumerate().filter(|(_, (b, n))| b == n).map(|(i, _)| i).collect()
}

/// Sends `WATCHDOG=1` every half `interval` while every shard beats; a shard
/// that stops beating (a stuck executor) stops the pings, and systemd
/// restarts the service once the interval passes.
pub(super) fn start_watchdog(process: Arc<Process>, interval: Duration) {
    let beats = |p: &Process| p.heartbeats.iter().map(|b| b.load(Ordering::Relaxed)).collect::<Vec<_>>();
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            let mut before = beats(&process);
            let mut warned = false;
            loop {
                std::thread::sleep(interval / 2);
                let now = beats(&process);
                let stuck = stalled(&before, &now);
                if stuck.is_empty() {
                    send(&[sd_notify::NotifyState::Watchdog]);
                    warned = false;
                } else if process.state.load(Ordering::Acquire) == STOPPING {
                    // Drained shards end their executors: not a stall.
                } else if !warned {
                    tracing::error!(
                        "shards {stuck:?} ran no task for {} ms: withholding the systemd watchdog ping",
                        (interval / 2).as_millis()
                    );
                    warned = true;
                }
                before = now;
            }
        })
        .expect("starting the watchdog thread");
}

/// Runs on shard `id`'s executor: bumps its heartbeat every `period`.
pub(super) async fn heartbeat(process: Arc<Process>, id: usize, period: Duration) {
    loop {
        process.heartbeats[id].fetch_add(1, Ordering::Relaxed);
        glommio::timer::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_that_did_not_beat_is_stalled() {
        assert!(stalled(&[1, 5], &[2, 6]).is_empty());
        assert_eq!(stalled(&[1, 5, 7], &[2, 5, 7]), vec![1, 2]);
        assert_eq!(heartbeat_period(Duration::from_secs(20)), Duration::from_secs(5));
    }
}
