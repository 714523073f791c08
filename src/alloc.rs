//! The memory allocator's settings. The binary's global allocator is
//! mimalloc (src/main.rs): a heap per thread, so a shard allocates and
//! frees without touching another shard's memory, and none of glibc
//! malloc's arena consolidation on the request path.
//!
//! mimalloc gives free pages back to the kernel ("purges" them) 1 s after
//! they emptied. Under a steady load that is a steady stream of
//! `madvise` calls, each a TLB shoot-down on every core the process runs
//! on, and of page faults when the pages are used again: measured at 1-2 µs
//! of system time per durable append on the 2-vCPU machine. Ten seconds
//! keeps a busy server's working set mapped and still returns what a burst
//! left behind.

use std::ffi::c_long;

/// Milliseconds an empty page stays mapped before it is given back.
pub const PURGE_DELAY_MS: c_long = 10_000;

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_t`: the one before
/// `mi_option_use_numa_nodes` (16), which libmimalloc-sys names; it does
/// not name this one. `tests/alloc_options.rs` checks it by its default.
pub const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = libmimalloc_sys::mi_option_use_numa_nodes - 1;

/// Applies the settings; call first thing in `main`, before any thread starts.
pub fn configure() {
    // SAFETY: sets a process-wide option before other threads exist.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    disable_transparent_huge_pages();
}

/// Turns transparent huge pages off for this process (and what it execs).
///
/// mimalloc asks for huge pages, and the kernel then backs each first touch
/// of 2 MiB, such as the growing mirror of a new segment, by zeroing a whole
/// huge page in the fault, on the shard's thread. On the 2-vCPU VM each of
/// those faults held the shard for milliseconds (fresh memory the host must
/// back as well): about five a second at 5,000 appends/s, and the open-loop
/// p99 was 4.8-7.0 ms with them against 1.9-2.2 ms without, with
/// throughput unchanged at 128 connections (docs/benchmarks-journal.md, the
/// sixth round). With 4 KiB
/// pages the same zeroing comes in slices too small to show.
fn disable_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments and touches no memory.
    let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if r != 0 {
        // Kernels before 3.15 lack it; huge pages then stay as configured.
        tracing::debug!("PR_SET_THP_DISABLE failed: {}", std::io::Error::last_os_error());
    }
}
