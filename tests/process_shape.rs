//! The running server has the shape the architecture promises: executor
//! threads pinned to single CPUs, io_uring instances, and segment files open
//! with O_DIRECT (seen from /proc, as an operator would check).

mod common;

use common::Server;
use std::fs;

const O_DIRECT: u32 = 0o40000;
/// O_DSYNC: a write completes only once its data (and the metadata needed
/// to read it) is on stable storage; this is what makes an acknowledged
/// append survive a power cut in O_DIRECT mode (docs/recovery.md).
const O_DSYNC: u32 = 0o10000;

fn cpus_allowed(status: &str) -> Option<String> {
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string())
}

#[test]
fn pinned_threads_io_uring_and_o_direct_segments() {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let s = Server::start_pinned(&["--segment-bytes", "1048576"]);
    // One append so both the writer and the segment files are in use.
    let mut c = s.conn();
    assert_eq!(c.request("PUT", "/v1/stream/shape/s", &[("Content-Type", "text/plain")], b"x").status, 201);
    let pid = s.pid();

    let mut pinned = 0;
    for t in fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let comm = fs::read_to_string(t.join("comm")).unwrap_or_default();
        if !comm.starts_with("shard-") {
            continue;
        }
        let cpus = cpus_allowed(&fs::read_to_string(t.join("status")).unwrap()).unwrap();
        if cpus.parse::<usize>().is_ok() {
            pinned += 1;
        }
    }
    if online >= 2 {
        assert!(pinned >= 2, "expected at least 2 executor threads pinned to one CPU each, found {pinned}");
    }

    let mut rings = 0;
    let mut segments = Vec::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let fd = fd.unwrap().path();
        let Ok(target) = fs::read_link(&fd) else { continue };
        let target = target.to_string_lossy().into_owned();
        if target.contains("io_uring") {
            rings += 1;
        }
        if target.ends_with(".seg") {
            let n = fd.file_name().unwrap().to_string_lossy().into_owned();
            let info = fs::read_to_string(format!("/proc/{pid}/fdinfo/{n}")).unwrap();
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap().trim().to_string();
            segments.push((target, u32::from_str_radix(&flags, 8).unwrap()));
        }
    }
    assert!(rings >= 2, "expected io_uring instances for 2 shards, found {rings}");
    assert!(!segments.is_empty(), "no segment file open");
    let log = s.log_tail();
    if log.contains("direct I/O: on") {
        // Sealed segments are opened briefly without O_DIRECT to be mapped;
        // the segment being written must always have it.
        let direct: Vec<_> = segments.iter().filter(|(_, f)| f & O_DIRECT != 0).collect();
        assert!(!direct.is_empty(), "no segment file is open with O_DIRECT: {segments:?}");
        // Without O_DSYNC a completed O_DIRECT write may still sit in the
        // device's volatile cache, and acknowledged appends could die in a power cut.
        for (path, flags) in &direct {
            assert!(flags & O_DSYNC != 0, "{path} is written with O_DIRECT but without O_DSYNC (flags {flags:o})");
        }
    } else {
        // tmpfs and friends: the server said so at boot, and must not claim O_DIRECT.
        assert!(log.contains("direct I/O: off"), "boot log does not say which I/O mode is in effect:\n{log}");
    }
}
