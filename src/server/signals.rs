//! SIGTERM, SIGINT and SIGHUP: blocked in every thread, taken by one
//! `signals` thread. A stop signal moves the process to stopping and opens
//! the stop latch; SIGHUP re-reads the auth file (`access`).

use super::{Process, BOOTING, SERVING, STOPPING};
use crate::limits::SHUTDOWN_TIMEOUT_MS;
use anyhow::bail;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and every
/// thread it starts later); `start_signal_thread` takes them with sigwait.
pub(super) fn block_stop_signals() -> anyhow::Result<libc::sigset_t> {
    // Safety: sigset operations on a local, zero-initialised set.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        (rc, set)
    };
    if rc.0 != 0 {
        bail!("blocking SIGTERM/SIGINT/SIGHUP: {}", std::io::Error::from_raw_os_error(rc.0));
    }
    Ok(rc.1)
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Waits for SIGTERM or SIGINT (blocked in every thread). The first one
/// moves the process to STOPPING and opens the stop latch, which wakes every
/// shard at once; the main thread then returns (exit status 0) once all
/// shards drained and synced. If that takes longer than SHUTDOWN_TIMEOUT_MS,
/// or a second signal comes, this thread logs it and exits with status 1.
/// A stop signal during boot exits at once with status 0: nothing has been
/// acknowledged that is not already durable, and recovery is idempotent.
/// SIGHUP while serving reloads the auth file; at other times it is logged
/// and ignored.
pub(super) fn start_signal_thread(set: libc::sigset_t, process: Arc<Process>) {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let sig = loop {
                // Safety: `set` is a valid signal set; sigwaitinfo writes nothing when given null.
                let sig = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
                if sig == libc::SIGHUP {
                    hang_up(&process);
                } else if sig > 0 {
                    break sig;
                }
            };
            if process.state.swap(STOPPING, Ordering::AcqRel) == BOOTING {
                tracing::warn!("{} during boot: exiting", signal_name(sig));
                // Safety: _exit ends the process without running destructors on other threads.
                unsafe { libc::_exit(0) };
            }
            tracing::info!(
                "{}: shutting down (stop accepting, finish requests in flight, end live reads, final sync; limit {SHUTDOWN_TIMEOUT_MS} ms)",
                signal_name(sig)
            );
            super::systemd::stopping();
            process.stop.count_down();
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
                if sig == libc::SIGHUP {
                    hang_up(&process);
                } else if sig > 0 {
                    tracing::error!("second {} during shutdown: exiting now with status 1", signal_name(sig));
                    // Safety: as above.
                    unsafe { libc::_exit(1) };
                }
            }
        })
        .expect("starting the signal thread");
}

/// SIGHUP: re-read the auth file and the webhook key files while serving
/// (not during boot, when the shards cannot answer yet, nor during a
/// shutdown).
fn hang_up(process: &Process) {
    match process.state.load(Ordering::Acquire) {
        SERVING => {}
        BOOTING => return tracing::warn!("SIGHUP during boot: ignored; send it again once the server listens"),
        _ => return tracing::info!("SIGHUP during shutdown: ignored"),
    }
    match &process.auth {
        None => tracing::info!("SIGHUP: no --auth-file to re-read"),
        Some(auth) => auth.reload(),
    }
    if let Some(dir) = &process.webhook_keys_dir {
        super::webhook_key::reload(dir, &process.subs.0);
    }
}
