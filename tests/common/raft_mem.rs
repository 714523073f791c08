//! raft-rs's in-memory store (a `GroupStore`, `src/cell/group.rs`) made
//! from what a replica keeps, for the cell tests and the `raft_group`
//! benchmark. Included with `#[path]`, apart from `common/mod.rs`.

use raft::prelude::{Entry, HardState};
use raft::storage::MemStorage;

/// An empty log of a group with `voters`, then `entries` and `hs`.
pub fn store(voters: &[u64], entries: &[Entry], hs: &HardState) -> MemStorage {
    let store = MemStorage::new_with_conf_state((voters.to_vec(), vec![]));
    store.wl().append(entries).unwrap();
    store.wl().set_hardstate(hs.clone());
    store
}
