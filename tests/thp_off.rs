//! `alloc::configure` turns transparent huge pages off for the process (a
//! huge page's first touch zeroes 2 MiB in the fault, on a shard's thread;
//! see src/alloc.rs). Its own test binary: `configure` is process-wide.

use ringstream::alloc::configure;

#[test]
fn transparent_huge_pages_are_off_after_configure() {
    configure();
    // SAFETY: PR_GET_THP_DISABLE reads a flag of this process.
    let off = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    assert_eq!(off, 1, "configure() must turn transparent huge pages off for the process");
    // Where the kernel reports it (Linux 6.x), it agrees.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    if let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
        assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    }
}
