//! Tiered storage, a layer above the local log: the [`Log`] a shard uses is
//! the local log (`storage/log/`, which knows nothing of remote segments)
//! plus, with tiering, the segments moved to an object store. Each call
//! that names a segment is answered by whichever of the two holds it.
//!
//! One segment goes remote in four steps, each durable before the next, so
//! a crash at any point loses nothing (`moves.rs`):
//! 1. upload the sealed file to its key and verify the stored object
//!    ([`TierClient::put_verified`]: size, and MD5 where the ETag is one);
//! 2. write its *skeleton* durably (`NNN.skel` beside the segments,
//!    `skeleton.rs`): every record's header and the part of its body
//!    recovery needs, which is all of it but append data and snapshot blobs
//!    (the caller says how much);
//! 3. append a [`KIND_TIER`] record naming the segment to the local log and
//!    wait until it is durable;
//! 4. delete the local file; reads of it now fetch blocks from the store
//!    (`cold.rs`, through the block cache of `cache.rs`).
//!
//! At boot (`recovery.rs`) the local log hands up every record it found,
//! tier records included; this layer takes those out and finishes or undoes
//! an interrupted move: a skeleton beside its file with a tier record
//! finishes step 4; without the record the attempt is dropped (the skeleton
//! deleted; the next attempt overwrites the object, or the sweep deletes
//! it); a skeleton without its file is a remote segment. Removing a remote
//! segment deletes the skeleton first, then the object; an object no
//! skeleton names is an orphan that [`Log::sweep_remote`] deletes
//! (`sweep.rs`).
//!
//! In a cell the move is an entry of the group's log instead, made by the
//! leader and finished by every replica that applies it (`cell.rs`).
//!
//! [`TierClient::put_verified`]: crate::tier::TierClient::put_verified
//! [`KIND_TIER`]: crate::storage::record::KIND_TIER

mod cache;
mod cell;
mod cold;
mod files;
mod moves;
mod recovery;
mod skeleton;
mod state;
mod sweep;

pub use files::TierFiles;
pub use state::{KeepFn, Tiering};

use super::error::{Error, Result};
use super::io::SegmentStore;
use super::log::{LocalLog, LogConfig, RecordLoc, Recovered, RecoveryReport};
use super::record::RecordHeader;
use super::stats::LogStats;
use state::Tier;
use std::rc::Rc;

/// One shard's log: its local segments and, with tiering, its remote ones.
pub struct Log<S: SegmentStore> {
    /// Shared with the replica of a cell, which drives a batched one.
    local: Rc<LocalLog<S>>,
    /// None: no tiering, every segment is local.
    tier: Option<Tier>,
}

impl<S: SegmentStore> Log<S> {
    /// Recovers the log in `store` without tiering (see [`Log::open_tiered`]).
    pub async fn open(store: S, cfg: LogConfig) -> Result<(Self, Vec<Recovered>, RecoveryReport)> {
        Self::open_tiered(store, cfg, None).await
    }

    /// The local log (in a cell, the replica's batched log).
    pub fn local(&self) -> &Rc<LocalLog<S>> {
        &self.local
    }

    pub fn tiering(&self) -> Option<&Tiering> {
        self.tier.as_ref().map(|t| &t.link)
    }

    /// The tier layer, which `why` needs: only called with tiering on.
    fn tier(&self, why: &str) -> &Tier {
        self.tier.as_ref().unwrap_or_else(|| panic!("{why}: needs tiering, which is off"))
    }

    // What only the local log does: appends, durability, its tasks.

    pub fn store(&self) -> &S {
        self.local.store()
    }

    pub fn segment_bytes(&self) -> u64 {
        self.local.segment_bytes()
    }

    /// See [`LocalLog::append`].
    pub fn append(&self, h: RecordHeader, body: &[u8]) -> Result<(RecordLoc, u64)> {
        self.local.append(h, body)
    }

    /// See [`LocalLog::append_parts`].
    pub fn append_parts(&self, h: RecordHeader, body: &[&[u8]]) -> Result<(RecordLoc, u64)> {
        self.local.append_parts(h, body)
    }

    /// Resolves when everything up to `lsn` is on stable storage.
    pub async fn durable(&self, lsn: u64) -> Result<()> {
        self.local.durable(lsn).await
    }

    /// What the shard may serve and acknowledge up to: the durable point
    /// (in a cell's batched log, the durable and committed one).
    pub fn durable_lsn(&self) -> u64 {
        self.local.visible()
    }

    pub fn tail_lsn(&self) -> u64 {
        self.local.tail_lsn()
    }

    pub fn pending_bytes(&self) -> u64 {
        self.local.pending_bytes()
    }

    pub fn next_segment_ready(&self) -> bool {
        self.local.next_segment_ready()
    }

    pub fn is_poisoned(&self) -> bool {
        self.local.is_poisoned()
    }

    /// Stops the writer, the preparer and the tiering task after their current step.
    pub fn stop(&self) {
        self.local.stop()
    }

    pub fn is_stopped(&self) -> bool {
        self.local.is_stopped()
    }

    /// See [`LocalLog::segment_sealed`].
    pub async fn segment_sealed(&self) {
        self.local.segment_sealed().await
    }

    /// Background task: the group-commit writer.
    pub async fn run_writer(&self) {
        self.local.run_writer().await
    }

    /// Background task: keeps the next segment ready.
    pub async fn run_preparer(&self) {
        self.local.run_preparer().await
    }

    // What names a segment: answered by whichever layer holds it.

    /// Appends bytes `range` of the record body at `loc` to `out`. Records
    /// are verified again as they are read, so media corruption after boot
    /// is reported instead of served. Of a remote segment whose blocks are
    /// not cached: `Error::Cold` naming them, for [`Log::fetch_cold`].
    pub fn read_body(&self, loc: RecordLoc, range: std::ops::Range<usize>, out: &mut Vec<u8>) -> Result<()> {
        match &self.tier {
            Some(t) if t.is_remote(loc.segment) => t.read(loc, range, out),
            _ => self.local.read_body(loc, range, out),
        }
    }

    /// What recovery replays of the record at `loc`: its whole body, but of
    /// a remote segment only the leading bytes its skeleton kept (all of it
    /// but append data and snapshot blobs).
    pub fn read_recovered(&self, loc: RecordLoc, out: &mut Vec<u8>) -> Result<()> {
        let Some(t) = self.tier.as_ref().filter(|t| t.is_remote(loc.segment)) else {
            return self.local.read_body(loc, 0..loc.body_len as usize, out);
        };
        let corrupt = || Error::Corrupt { segment: loc.segment, position: loc.pos };
        let remote = t.remote.borrow();
        let skeleton = remote.get(&loc.segment).and_then(|r| r.skeleton.as_ref()).ok_or_else(corrupt)?;
        out.extend_from_slice(skeleton.meta_at(loc.pos).ok_or_else(corrupt)?);
        Ok(())
    }

    /// Forgets the skeletons kept for recovery, once the shard replayed them.
    pub fn recovery_done(&self) {
        if let Some(t) = &self.tier {
            t.remote.borrow_mut().values_mut().for_each(|r| r.skeleton = None);
        }
    }

    /// Segments that are sealed and durable (never written again), local or
    /// remote, ascending: the ones [`Log::remove_segment`] may delete.
    pub fn sealed_segments(&self) -> Vec<u64> {
        let mut all = self.local.sealed_segments();
        if let Some(t) = &self.tier {
            all.extend(t.remote.borrow().keys());
            all.sort_unstable();
        }
        all
    }

    /// Deletes a sealed segment for good, local or remote. The caller
    /// guarantees no record in it is needed any more: recovery without it
    /// must rebuild the same state. Reads of it fail from now on.
    pub async fn remove_segment(&self, no: u64) -> Result<()> {
        match &self.tier {
            Some(t) if t.moving.borrow().contains(&no) => {
                Err(Error::not_sealed("remove while moving to the object store", no))
            }
            Some(t) if t.is_remote(no) => t.remove(self.tier_files(), no, true).await,
            _ => self.local.remove_segment(no).await,
        }
    }

    /// Remote segments and their bytes in the object store.
    pub fn remote_segments(&self) -> (u64, u64) {
        let Some(t) = &self.tier else { return (0, 0) };
        let remote = t.remote.borrow();
        (remote.len() as u64, remote.values().map(|r| r.len).sum())
    }

    pub fn stats(&self) -> LogStats {
        let mut stats = self.local.stats();
        if let Some(t) = &self.tier {
            stats.tier = t.stats.borrow().clone();
        }
        stats
    }

    fn tier_files(&self) -> &dyn TierFiles {
        self.store().tier_files().expect("a store with remote segments keeps their skeletons")
    }
}
