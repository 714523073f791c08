//! raft-rs's in-memory store as a replica's view of its log (what it
//! wrote, durable or not), for the cell tests that keep replicas in
//! memory: `cell_sim.rs` (with its own model of what a power cut keeps)
//! and `cell_link.rs`. Included with `#[path]`, apart from `common/mod.rs`.

use raft::prelude::{Entry, HardState, Snapshot};
use raft::storage::MemStorage;
use raft::{GetEntriesContext, RaftState, Storage};
use ringstream::cell::group::GroupStore;

pub struct Store(pub MemStorage);

impl Store {
    /// An empty log of a group with `voters`, then `entries` and `hs`.
    pub fn with(voters: &[u64], entries: &[Entry], hs: &HardState) -> Store {
        let store = MemStorage::new_with_conf_state((voters.to_vec(), vec![]));
        store.wl().append(entries).unwrap();
        store.wl().set_hardstate(hs.clone());
        Store(store)
    }
}

impl Storage for Store {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.0.initial_state()
    }
    fn entries(
        &self,
        lo: u64,
        hi: u64,
        max: impl Into<Option<u64>>,
        cx: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.0.entries(lo, hi, max, cx)
    }
    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.0.term(idx)
    }
    fn first_index(&self) -> raft::Result<u64> {
        self.0.first_index()
    }
    fn last_index(&self) -> raft::Result<u64> {
        self.0.last_index()
    }
    fn snapshot(&self, idx: u64, to: u64) -> raft::Result<Snapshot> {
        self.0.snapshot(idx, to)
    }
}

impl GroupStore for Store {
    fn append(&mut self, entries: &[Entry]) {
        self.0.wl().append(entries).expect("entries follow the log");
    }
    fn set_hard_state(&mut self, hs: &HardState) {
        self.0.wl().set_hardstate(hs.clone());
    }
}
