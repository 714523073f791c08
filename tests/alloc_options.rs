//! The allocator option ringstream sets is the one it means: mimalloc 3's
//! purge delay (1,000 ms by default), found by its position in an enum that
//! libmimalloc-sys does not fully name. A renumbering in an upgrade would
//! make `alloc::configure` set some other option; this fails first.

use ringstream::alloc::{configure, MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS};

#[test]
fn the_purge_delay_option_is_the_one_set() {
    // SAFETY: reading and setting an option; no allocation depends on it here.
    let before = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
    assert_eq!(before, 1_000, "mimalloc 3's default purge delay, in ms");
    let numa_before = unsafe { libmimalloc_sys::mi_option_get(libmimalloc_sys::mi_option_use_numa_nodes) };
    configure();
    assert_eq!(unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }, PURGE_DELAY_MS);
    // Its neighbour is untouched.
    assert_eq!(unsafe { libmimalloc_sys::mi_option_get(libmimalloc_sys::mi_option_use_numa_nodes) }, numa_before);
}
