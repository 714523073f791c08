//! The process's own resource use and the data directory's free space, for
//! `/metrics` (the `process_*` families Prometheus clients conventionally
//! export, and `ringstream_disk_*`). Read from /proc/self and statvfs at
//! scrape time; parsing is pure and unit-tested.

use crate::metrics::{Family, Samples};
use std::path::Path;

/// What /proc/self says about this process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
    pub start_time_seconds: f64,
}

/// From /proc/self/stat: (utime + stime in ticks, start time in ticks after
/// boot, resident pages). The command name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last ')'.
pub fn parse_stat(text: &str) -> Option<(u64, u64, u64)> {
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): field n is f[n - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some((num(14)? + num(15)?, num(22)?, num(24)?))
}

/// `btime` of /proc/stat: boot time in seconds since the epoch.
pub fn parse_btime(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// Reads the process's figures; None where /proc is not mounted.
pub fn process() -> Option<ProcessStats> {
    // Safety: sysconf only reads its argument.
    let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    let (ticks, page) = (ticks.max(1) as f64, page.max(1) as u64);
    let (cpu, start, rss) = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let btime = parse_btime(&std::fs::read_to_string("/proc/stat").ok()?).unwrap_or(0);
    let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // Safety: getrlimit only writes the struct we pass.
    let max_fds = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 0 };
    Some(ProcessStats {
        cpu_seconds: cpu as f64 / ticks,
        resident_bytes: rss * page,
        open_fds,
        max_fds,
        start_time_seconds: btime as f64 + start as f64 / ticks,
    })
}

/// (bytes available to unprivileged users, total bytes) of `dir`'s file system.
pub fn disk_space(dir: &Path) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // Safety: a zeroed statvfs is valid; statvfs writes at most its size.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // Safety: a NUL-terminated path and a struct of the right type.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let block = st.f_frsize as u64;
    Some((st.f_bavail as u64 * block, st.f_blocks as u64 * block))
}

/// Adds the process-wide samples: build info, disk space of `data_dir`,
/// and the process's CPU, memory and descriptors.
pub fn render(data_dir: &Path, out: &mut Samples) {
    use crate::build_info as b;
    let labels = format!(
        "version=\"{}\",commit=\"{}\",rustc=\"{}\",profile=\"{}\"",
        b::VERSION,
        b::COMMIT,
        b::RUSTC,
        b::PROFILE
    );
    out.process(Family::BuildInfo, &labels, 1.0);
    if let Some((free, size)) = disk_space(data_dir) {
        out.process(Family::DiskFreeBytes, "", free as f64);
        out.process(Family::DiskSizeBytes, "", size as f64);
    }
    if let Some(p) = process() {
        out.process(Family::ProcessCpuSeconds, "", p.cpu_seconds);
        out.process(Family::ProcessResidentMemoryBytes, "", p.resident_bytes as f64);
        out.process(Family::ProcessOpenFds, "", p.open_fds as f64);
        out.process(Family::ProcessMaxFds, "", p.max_fds as f64);
        out.process(Family::ProcessStartTimeSeconds, "", p.start_time_seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_a_hostile_command_name() {
        let stat = "4242 (shard-0) (x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 50 0 0 20 0 4 0 98765 \
                    1000000 2500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_stat(stat), Some((200, 98765, 2500)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_btime("cpu 1 2 3\nbtime 1700000000\nprocesses 5\n"), Some(1_700_000_000));
    }

    #[test]
    fn reads_this_process() {
        let p = process().expect("/proc is mounted");
        assert!(p.resident_bytes > 0 && p.open_fds >= 3 && p.max_fds >= p.open_fds, "{p:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(p.start_time_seconds > now - 86_400.0 * 30.0 && p.start_time_seconds <= now + 1.0, "{p:?}");
        let (free, size) = disk_space(Path::new("/")).unwrap();
        assert!(size > 0 && free <= size);
    }
}
