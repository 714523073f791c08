//! A group's Raft log kept in its shard's segments: raft-rs's `Storage`
//! over a batched [`LocalLog`] (see `storage/log/batches.rs`), so an entry
//! is a group-commit batch where it lies and nothing is written twice.
//!
//! - A leader's entries are in its log before raft-rs hands them out to be
//!   made durable: the owner closes each batch with the index its proposal
//!   got. The store finds them there and writes nothing.
//! - A follower's entries are copied into the log as they arrive
//!   ([`LocalLog::append_batch`], synchronous: into the active mirror, for
//!   the writer to flush).
//! - Entries that conflict with the log (a follower that held a deposed
//!   leader's tail) wait in memory, with everything after them, until
//!   [`LogStore::persist`] has cut the log back on disk and copied them in.
//! - The term and vote, which differ between replicas, are kept in a
//!   two-slot file beside the segments (`storage/slots.rs`), written by
//!   [`LogStore::persist`] when either changes. The commit index goes with
//!   them, no further than the entries applied (so held durably here), and
//!   is not written for itself: a replica that restarts with an older one
//!   learns the newer from its leader.

use crate::storage::io::SegmentStore;
use crate::storage::log::{Batch, BatchMark, LocalLog};
use crate::storage::slots::Slots;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};
use std::rc::Rc;

/// The small file the term, vote and commit index are kept in.
pub const HARD_STATE_FILE: &str = "raft-state";

/// What went wrong under a [`LogStore`]: the replica must stop (its log is
/// not what its peers think it is, or the disk failed).
pub type StoreError = crate::storage::Error;

/// A follower's entries that wait for the log to be cut back.
#[derive(Debug)]
struct Staged {
    /// The last entry kept (None: none is).
    keep: Option<BatchMark>,
    entries: Vec<Entry>,
}

pub struct LogStore<S: SegmentStore> {
    log: Rc<LocalLog<S>>,
    slots: Slots,
    state: RaftState,
    /// The term or vote changed since they were last written.
    dirty: bool,
    staged: Option<Staged>,
    /// The first failure; the store takes nothing after it.
    failed: Option<StoreError>,
    /// Times the log was cut back (entries that conflicted with a leader's).
    cut_backs: u64,
}

impl<S: SegmentStore> LogStore<S> {
    /// The store of a recovered batched `log`, with the voters of the cell.
    /// The saved commit index is clamped to the log's last entry (it may
    /// have been saved ahead of this replica's durable entries).
    pub async fn open(log: Rc<LocalLog<S>>, voters: Vec<u64>) -> Result<Self, StoreError> {
        let (slots, saved) = Slots::open(log.store(), HARD_STATE_FILE)
            .await
            .map_err(crate::storage::Error::io_at("open the Raft state", 0))?;
        let mut hard = saved.map(|b| decode_hard_state(&b)).transpose()?.unwrap_or_default();
        // Never past the log; never before its first whole entry either: a
        // log whose oldest segments are gone (shipped from a leader, or
        // reclaimed) lost only committed entries, and raft-rs requires the
        // commit index at or past the entry before its first.
        let before_first = log.first_index().map_or(0, |f| f - 1);
        hard.commit = hard.commit.min(log.last_index()).max(before_first);
        let state = RaftState { hard_state: hard, conf_state: ConfState { voters, ..ConfState::default() } };
        Ok(LogStore { log, slots, state, dirty: false, staged: None, failed: None, cut_backs: 0 })
    }

    pub fn log(&self) -> &Rc<LocalLog<S>> {
        &self.log
    }

    /// Times this store cut its log back since it was opened.
    pub fn cut_backs(&self) -> u64 {
        self.cut_backs
    }

    /// The failure that stopped this store, if one did.
    pub fn failed(&self) -> Option<&StoreError> {
        self.failed.as_ref()
    }

    /// Makes what [`GroupStore`](super::group::GroupStore) took this turn
    /// durable-bound: cuts the log back and copies in the entries that
    /// waited for it, writes the term and vote if they changed. Returns the
    /// lsn of the log that makes the turn durable (every earlier turn too).
    /// Not to be cancelled: run it to its end once started.
    pub async fn persist(&mut self) -> Result<u64, StoreError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.persist_now().await;
        if let Err(e) = &result {
            self.failed.get_or_insert(e.clone());
        }
        result
    }

    async fn persist_now(&mut self) -> Result<u64, StoreError> {
        if let Some(staged) = self.staged.take() {
            self.log.cut_back(staged.keep).await?;
            self.cut_backs += 1;
            for e in &staged.entries {
                self.copy_in(e)?;
            }
        }
        if self.dirty {
            // The commit index saved is only as far as entries this replica
            // holds durably (raft-rs hands out committed entries to apply
            // only once they are persisted here): a commit index learnt
            // ahead of them would, after a power cut, name entries the log
            // may hold in another version.
            let mut hs = self.state.hard_state.clone();
            hs.commit = hs.commit.min(self.log.committed_index());
            let bytes = encode_hard_state(&hs);
            self.slots
                .write(self.log.store(), &bytes)
                .await
                .map_err(crate::storage::Error::io_at("write the Raft state", 0))?;
            self.dirty = false;
        }
        // Not the tail: on a leader it may hold records not yet proposed,
        // which a cut-back could discard.
        Ok(self.log.closed_lsn())
    }

    /// A follower's entry, next in the log: its batch copied in.
    fn copy_in(&self, e: &Entry) -> Result<(), StoreError> {
        let batch = Batch::decode(&e.data)?;
        self.log.append_batch(&batch, e.term, e.index)?;
        Ok(())
    }

    /// The term of entry `index` in the log (0 for index 0).
    fn log_term(&self, index: u64) -> raft::Result<u64> {
        if index == 0 {
            return Ok(0);
        }
        match self.log.mark(index) {
            Ok(Some(m)) => Ok(m.close.term),
            Ok(None) if index > self.log.last_index() => Err(raft::Error::Store(StorageError::Unavailable)),
            Ok(None) => Err(raft::Error::Store(StorageError::Compacted)),
            Err(e) => Err(store_error(e)),
        }
    }

    /// Entry `index` as the log holds it: its batch read back.
    fn log_entry(&self, index: u64) -> raft::Result<Entry> {
        let mark = self.log.mark(index).map_err(store_error)?.ok_or(raft::Error::Store(StorageError::Unavailable))?;
        let batch = self.log.batch_of(&mark).map_err(store_error)?;
        Ok(Entry { term: mark.close.term, index, data: batch.encode(), ..Entry::default() })
    }

    fn staged_from(&self) -> Option<u64> {
        self.staged.as_ref().and_then(|s| s.entries.first()).map(|e| e.index)
    }

    /// Takes one entry raft-rs hands out to make durable: entries of one
    /// turn, and of turns one after the other, follow each other, except
    /// where one replaces what was there from its index on.
    fn take(&mut self, e: &Entry) -> Result<(), StoreError> {
        if let Some(staged) = &mut self.staged {
            let from = staged.entries.first().map_or(e.index, |f| f.index);
            if e.index >= from {
                staged.entries.truncate((e.index - from) as usize);
                staged.entries.push(e.clone());
                return Ok(());
            }
        }
        if e.index <= self.log.last_index() || self.staged.is_some() || self.log.has_unclosed() {
            if self.staged.is_none()
                && e.index <= self.log.last_index()
                && self.log.mark(e.index)?.is_some_and(|m| m.close.term == e.term)
            {
                // A leader's own batch, closed when it was proposed.
                return Ok(());
            }
            // Entries that conflict, or records this replica appended as
            // leader and never proposed: the log is cut back first.
            let keep = if e.index > 1 { self.log.mark(e.index - 1)? } else { None };
            self.staged = Some(Staged { keep, entries: vec![e.clone()] });
            return Ok(());
        }
        self.copy_in(e)
    }
}

impl<S: SegmentStore> super::group::GroupStore for LogStore<S> {
    fn append(&mut self, entries: &[Entry]) {
        for e in entries {
            if self.failed.is_some() {
                return;
            }
            if let Err(err) = self.take(e) {
                tracing::error!("replica log: entry {} of term {} refused: {err}; this replica stops", e.index, e.term);
                self.failed = Some(err);
            }
        }
    }

    fn set_hard_state(&mut self, hs: &HardState) {
        let old = &self.state.hard_state;
        self.dirty |= old.term != hs.term || old.vote != hs.vote;
        self.state.hard_state = hs.clone();
    }
}

impl<S: SegmentStore> Storage for LogStore<S> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(self.state.clone())
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max = max_size.into().unwrap_or(u64::MAX);
        let mut out = Vec::new();
        let mut size = 0u64;
        for index in low..high {
            let e = match (self.staged_from(), &self.staged) {
                (Some(from), Some(s)) if index >= from => s.entries[(index - from) as usize].clone(),
                _ => self.log_entry(index)?,
            };
            size += e.data.len() as u64;
            // At least one entry, however large (raft-rs's contract).
            if !out.is_empty() && size > max {
                break;
            }
            out.push(e);
        }
        Ok(out)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        match (self.staged_from(), &self.staged) {
            (Some(from), Some(s)) if index >= from => s
                .entries
                .get((index - from) as usize)
                .map(|e| e.term)
                .ok_or(raft::Error::Store(StorageError::Unavailable)),
            _ => self.log_term(index),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.log.first_index().unwrap_or(1))
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(match &self.staged {
            Some(s) => s.entries.last().map_or(0, |e| e.index),
            None => self.log.last_index(),
        })
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        // Every entry since the log began is in the segments: raft-rs never
        // needs one (a compacted log, with segment shipping, comes later).
        Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable))
    }
}

fn store_error(e: crate::storage::Error) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(e)))
}

/// term u64 | vote u64 | commit u64, little-endian.
fn encode_hard_state(hs: &HardState) -> Vec<u8> {
    [hs.term, hs.vote, hs.commit].iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn decode_hard_state(bytes: &[u8]) -> Result<HardState, StoreError> {
    let bad = || {
        let why = format!("{HARD_STATE_FILE} holds {} bytes, not 24", bytes.len());
        StoreError::io("read the Raft state", 0, std::io::Error::new(std::io::ErrorKind::InvalidData, why))
    };
    let words: Vec<u64> = bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    match words[..] {
        [term, vote, commit] if bytes.len() == 24 => Ok(HardState { term, vote, commit }),
        _ => Err(bad()),
    }
}
