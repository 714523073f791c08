//! Startup checks that turn an unusable host into a message saying what to
//! change: io_uring availability, the locked-memory limit glommio needs, the
//! O_DIRECT decision, and exclusive use of the data directory.
//!
//! The decisions are pure functions of the facts they are given (so tests
//! can inject a disabled io_uring or a low RLIMIT_MEMLOCK); the thin
//! wrappers around them read the real facts from the kernel.

use crate::config::DirectIoMode;
use crate::limits::GLOMMIO_MEMLOCK_FLOOR_BYTES;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------
// io_uring

/// Creates (and closes) a one-entry io_uring with the raw `io_uring_setup`
/// syscall, before glommio tries and fails with a less helpful error.
pub fn probe_io_uring() -> Result<(), String> {
    // struct io_uring_params is 120 bytes; zeroed means "no flags".
    let mut params = [0u64; 15];
    // Safety: io_uring_setup writes at most sizeof(io_uring_params) into the
    // buffer we pass, which is that size.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd >= 0 {
        // Safety: fd is the ring we just created and nothing else owns it.
        unsafe { libc::close(fd as libc::c_int) };
        return Ok(());
    }
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let disabled =
        std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok().and_then(|s| s.trim().parse().ok());
    Err(io_uring_diagnosis(errno, disabled))
}

/// Why `io_uring_setup` failed with `errno`, given the value of
/// /proc/sys/kernel/io_uring_disabled (None: the file does not exist, as on
/// kernels before 6.6), and what to do about it.
pub fn io_uring_diagnosis(errno: i32, disabled: Option<u32>) -> String {
    let head = format!("io_uring is unavailable (io_uring_setup: {})", std::io::Error::from_raw_os_error(errno));
    let fix = match (errno, disabled) {
        (_, Some(2)) => "the kernel has it switched off for every process (sysctl kernel.io_uring_disabled = 2); \
             ringstream does all its I/O through io_uring: set `sysctl -w kernel.io_uring_disabled=0` \
             (and in /etc/sysctl.d/ to keep it)"
            .to_string(),
        (libc::EPERM, Some(1)) => "the kernel allows it only to members of the group in kernel.io_uring_group \
             (sysctl kernel.io_uring_disabled = 1): add the service user to that group \
             (`sysctl kernel.io_uring_group` shows its gid) or set kernel.io_uring_disabled=0"
            .to_string(),
        (libc::ENOSYS, _) => "the kernel is older than 5.1 or built without CONFIG_IO_URING, or a seccomp filter \
             answers ENOSYS (container runtimes' default profiles, e.g. Docker 25+, block io_uring): use \
             kernel 5.10 or newer, or a seccomp profile that allows io_uring_setup, io_uring_enter and \
             io_uring_register"
            .to_string(),
        (libc::EPERM | libc::EACCES, _) => "a seccomp filter or security module denies it (container runtimes' \
             default seccomp profiles, e.g. Docker 25+, block io_uring): run with a profile that allows \
             io_uring_setup, io_uring_enter and io_uring_register"
            .to_string(),
        (libc::ENOMEM, _) => "the locked-memory limit is too low for even one ring (kernels before 5.12 charge \
             rings to RLIMIT_MEMLOCK): raise `ulimit -l`, or LimitMEMLOCK= in the systemd unit"
            .to_string(),
        _ => "see io_uring_setup(2)".to_string(),
    };
    format!("{head}: {fix}")
}

// ---------------------------------------------------------------------------
// Locked memory

/// Locked memory the kernel charges for glommio's registered I/O buffers:
/// each executor allocates `io_memory` (rounded up to 4 KiB, at least 64 KiB)
/// and registers it with each of its three rings (main, latency, poll); the
/// kernel charges every registration to the user's locked memory.
pub fn memlock_needed_bytes(shards: usize, io_memory: usize) -> u64 {
    let per_executor = (io_memory.div_ceil(4096) * 4096).max(64 * 1024) as u64;
    shards as u64 * 3 * per_executor
}

/// What the process may lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemlockFacts {
    /// RLIMIT_MEMLOCK soft and hard limits in bytes (u64::MAX: unlimited).
    pub soft: u64,
    pub hard: u64,
    /// CAP_IPC_LOCK: registered buffers are not charged.
    pub cap_ipc_lock: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemlockPlan {
    /// The soft limit is enough.
    Enough,
    /// Raise the soft limit to this (the hard limit), which is enough.
    Raise(u64),
    /// Not enough for registered buffers even at the hard limit: glommio
    /// falls back to unregistered (slower, still correct) I/O. Raise the
    /// soft limit to `raise_to` if it is above the current one, and warn.
    Degraded { raise_to: u64, message: String },
    /// Below glommio's floor even at the hard limit: the executors cannot start.
    Fatal(String),
}

const MEMLOCK_FIX: &str = "raise it with `ulimit -l` (KiB; `unlimited` is fine) before starting, \
     `LimitMEMLOCK=` in the systemd unit (docs/deploy/ringstream.service), a memlock line in \
     /etc/security/limits.conf";

pub fn memlock_plan(f: MemlockFacts, need: u64) -> MemlockPlan {
    let want = if f.cap_ipc_lock { GLOMMIO_MEMLOCK_FLOOR_BYTES } else { need.max(GLOMMIO_MEMLOCK_FLOOR_BYTES) };
    if f.soft >= want {
        return MemlockPlan::Enough;
    }
    if f.hard >= want {
        return MemlockPlan::Raise(f.hard);
    }
    if f.hard < GLOMMIO_MEMLOCK_FLOOR_BYTES {
        return MemlockPlan::Fatal(format!(
            "RLIMIT_MEMLOCK is {} bytes (hard limit {}), below the {GLOMMIO_MEMLOCK_FLOOR_BYTES} bytes glommio \
             needs to start its io_uring executors: {MEMLOCK_FIX}",
            f.soft,
            show_limit(f.hard)
        ));
    }
    MemlockPlan::Degraded {
        raise_to: f.hard,
        message: format!(
            "RLIMIT_MEMLOCK hard limit is {} bytes, below the {need} bytes the shards' registered io_uring \
             buffers need; I/O falls back to unregistered buffers (correct, but slower): {MEMLOCK_FIX}, \
             or grant CAP_IPC_LOCK",
            show_limit(f.hard)
        ),
    }
}

fn show_limit(v: u64) -> String {
    if v == u64::MAX {
        "unlimited".to_string()
    } else {
        v.to_string()
    }
}

fn memlock_facts() -> Result<MemlockFacts, String> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // Safety: getrlimit only writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return Err(format!("getrlimit(RLIMIT_MEMLOCK): {}", std::io::Error::last_os_error()));
    }
    let bytes = |v: libc::rlim_t| if v == libc::RLIM_INFINITY { u64::MAX } else { v };
    Ok(MemlockFacts { soft: bytes(lim.rlim_cur), hard: bytes(lim.rlim_max), cap_ipc_lock: has_cap_ipc_lock() })
}

/// CAP_IPC_LOCK in the effective set, from /proc/self/status.
fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14; // linux/capability.h
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

fn set_memlock_soft(to: u64, hard: u64) -> Result<(), String> {
    let as_rlim = |v: u64| if v == u64::MAX { libc::RLIM_INFINITY } else { v };
    let lim = libc::rlimit { rlim_cur: as_rlim(to), rlim_max: as_rlim(hard) };
    // Safety: setrlimit only reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
        return Err(format!("setrlimit(RLIMIT_MEMLOCK, {to}): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Checks RLIMIT_MEMLOCK against what `shards` executors with `io_memory`
/// bytes each need, raising the soft limit toward the hard one. Ok carries a
/// warning to log when I/O will run degraded, and a note when the limit was
/// raised.
pub fn ensure_memlock(shards: usize, io_memory: usize) -> Result<MemlockOutcome, String> {
    let facts = memlock_facts()?;
    let need = memlock_needed_bytes(shards, io_memory);
    match memlock_plan(facts, need) {
        MemlockPlan::Enough => Ok(MemlockOutcome { facts, need, raised_to: None, warning: None }),
        MemlockPlan::Raise(to) => {
            set_memlock_soft(to, facts.hard)?;
            Ok(MemlockOutcome { facts, need, raised_to: Some(to), warning: None })
        }
        MemlockPlan::Degraded { raise_to, message } => {
            let raised = raise_to > facts.soft && set_memlock_soft(raise_to, facts.hard).is_ok();
            Ok(MemlockOutcome { facts, need, raised_to: raised.then_some(raise_to), warning: Some(message) })
        }
        MemlockPlan::Fatal(message) => Err(message),
    }
}

#[derive(Debug)]
pub struct MemlockOutcome {
    pub facts: MemlockFacts,
    pub need: u64,
    pub raised_to: Option<u64>,
    pub warning: Option<String>,
}

// ---------------------------------------------------------------------------
// CPUs

/// The CPUs this process may run on (its affinity mask, as set by `taskset`,
/// systemd's `CPUAffinity=` or a cpuset), in ascending order. Shard *i* is
/// pinned to the *i*-th of them, so restricting the mask moves the shards
/// off CPUs kept for interrupts or other work. Falls back to 0..online.
pub fn allowed_cpus() -> Vec<usize> {
    // Safety: a zeroed cpu_set_t is a valid empty set; sched_getaffinity
    // writes at most the size we pass; CPU_ISSET reads within the set.
    let cpus: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
        } else {
            Vec::new()
        }
    };
    if cpus.is_empty() {
        (0..crate::config::online_cpus()).collect()
    } else {
        cpus
    }
}

// ---------------------------------------------------------------------------
// O_DIRECT

/// Whether to use O_DIRECT, given the operator's mode and whether the data
/// directory's file system accepted an O_DIRECT open.
pub fn direct_io_decision(mode: DirectIoMode, supported: bool, dir: &Path) -> Result<bool, String> {
    match (mode, supported) {
        (DirectIoMode::Disabled, _) => Ok(false),
        (DirectIoMode::Optional, s) => Ok(s),
        (DirectIoMode::Required, true) => Ok(true),
        (DirectIoMode::Required, false) => Err(format!(
            "--direct-io required, but the file system of {} refuses O_DIRECT (EINVAL; e.g. tmpfs before Linux \
             6.6, some FUSE and network file systems): put --data-dir on a local ext4 or XFS file system, or \
             start with --direct-io optional",
            dir.display()
        )),
    }
}

// ---------------------------------------------------------------------------
// Exclusive use of the data directory

/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = "ringstream.lock";

/// An exclusive `flock` on `<data dir>/ringstream.lock`, held until dropped
/// (the process keeps it for its lifetime; the kernel releases it when the
/// process dies, however it dies). The file holds the owner's pid.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    pub path: PathBuf,
}

/// Takes the data directory's lock (creating the directory if needed), or
/// fails at once naming the directory and the pid of the holder.
pub fn lock_data_dir(dir: &Path) -> Result<DataDirLock, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating data directory {}: {e}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    // Safety: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(format!("locking {}: {err}", path.display()));
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let holder = match text.trim().parse::<u32>() {
            Ok(pid) => format!("pid {pid}"),
            Err(_) => "pid unknown".to_string(),
        };
        return Err(format!(
            "data directory {} is in use by another ringstream process ({holder}, holding {}); stop it or use \
             another --data-dir (two servers on one directory would corrupt each other's logs)",
            dir.display(),
            path.display()
        ));
    }
    let write_pid = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.rewind()?;
        writeln!(f, "{}", std::process::id())
    };
    write_pid(&mut file).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(DataDirLock { _file: file, path })
}

/// Whether the files in `dir` can be opened with O_DIRECT.
pub fn supports_direct_io(dir: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(".direct-io-probe");
    let r = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let _ = std::fs::remove_file(&probe);
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn io_uring_disabled_sysctl_is_named() {
        let m = io_uring_diagnosis(libc::EPERM, Some(2));
        assert!(m.contains("kernel.io_uring_disabled = 2") && m.contains("io_uring_disabled=0"), "{m}");
        let m = io_uring_diagnosis(libc::EPERM, Some(1));
        assert!(m.contains("io_uring_group"), "{m}");
        let m = io_uring_diagnosis(libc::EPERM, Some(0));
        assert!(m.contains("seccomp"), "{m}");
        let m = io_uring_diagnosis(libc::ENOSYS, None);
        assert!(m.contains("seccomp") && m.contains("CONFIG_IO_URING"), "{m}");
        let m = io_uring_diagnosis(libc::ENOMEM, None);
        assert!(m.contains("ulimit -l"), "{m}");
    }

    #[test]
    fn io_uring_is_available_here() {
        // The rest of the test suite needs it too; this names the cause when not.
        probe_io_uring().unwrap();
    }

    #[test]
    fn memlock_need_follows_glommio_sizing() {
        assert_eq!(memlock_needed_bytes(2, 4 * MIB as usize), 2 * 3 * 4 * MIB);
        assert_eq!(memlock_needed_bytes(1, 1000), 3 * 64 * 1024, "glommio rounds up to 64 KiB");
        assert_eq!(memlock_needed_bytes(1, 100_000), 3 * 102_400, "and to 4 KiB pages");
    }

    #[test]
    fn memlock_decisions() {
        let need = 24 * MIB;
        let f = |soft, hard, cap| MemlockFacts { soft, hard, cap_ipc_lock: cap };
        assert_eq!(memlock_plan(f(u64::MAX, u64::MAX, false), need), MemlockPlan::Enough);
        assert_eq!(memlock_plan(f(8 * MIB, 64 * MIB, false), need), MemlockPlan::Raise(64 * MIB));
        assert_eq!(memlock_plan(f(8 * MIB, u64::MAX, false), need), MemlockPlan::Raise(u64::MAX));
        // CAP_IPC_LOCK: buffers are not charged; only glommio's own floor applies.
        assert_eq!(memlock_plan(f(8 * MIB, 8 * MIB, true), need), MemlockPlan::Enough);
        assert_eq!(memlock_plan(f(64 * 1024, MIB, true), need), MemlockPlan::Raise(MIB));
        match memlock_plan(f(64 * 1024, 8 * MIB, false), need) {
            MemlockPlan::Degraded { raise_to, message } => {
                assert_eq!(raise_to, 8 * MIB);
                assert!(message.contains("ulimit -l") && message.contains("LimitMEMLOCK"), "{message}");
                assert!(message.contains(&need.to_string()), "{message}");
            }
            p => panic!("{p:?}"),
        }
        match memlock_plan(f(64 * 1024, 64 * 1024, true), need) {
            MemlockPlan::Fatal(m) => assert!(m.contains("ulimit -l") && m.contains("LimitMEMLOCK"), "{m}"),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn direct_io_required_without_support_names_the_dir() {
        let dir = Path::new("/dev/shm/x");
        assert_eq!(direct_io_decision(DirectIoMode::Optional, false, dir), Ok(false));
        assert_eq!(direct_io_decision(DirectIoMode::Disabled, true, dir), Ok(false));
        assert_eq!(direct_io_decision(DirectIoMode::Required, true, dir), Ok(true));
        let e = direct_io_decision(DirectIoMode::Required, false, dir).unwrap_err();
        assert!(e.contains("--direct-io required") && e.contains("/dev/shm/x"), "{e}");
    }

    #[test]
    fn a_second_lock_on_the_same_dir_fails_naming_the_holder() {
        let dir = std::env::temp_dir().join(format!("ringstream-lock-{}", std::process::id()));
        let held = lock_data_dir(&dir).unwrap();
        // flock locks belong to the open file description, so a second open
        // in the same process conflicts just like another process would.
        let e = lock_data_dir(&dir).unwrap_err();
        assert!(e.contains(&dir.display().to_string()), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        let again = lock_data_dir(&dir).unwrap();
        drop(again);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
