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
//! - A membership change is an entry whose batch is one `KIND_CONF` record
//!   (its body the `ConfChangeV2`): raft-rs gets it back as a conf-change
//!   entry, the change in `data` and the batch's bytes in `context` (a
//!   follower writes those). The membership it leads to is written into
//!   the same file with the index of the change; until one was made, the
//!   voters are the cell's (`--cell`) and the file holds what it always
//!   did.

use super::members::{Addresses, Membership};
use crate::storage::io::SegmentStore;
use crate::storage::log::{Batch, BatchMark, LocalLog};
use crate::storage::slots::Slots;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot};
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
    /// The term, vote or membership changed since they were last written.
    dirty: bool,
    /// The index of the membership change `state.conf_state` results from
    /// (0: none was made; the voters are the cell's).
    conf_index: u64,
    /// The members' peer addresses, kept with the membership.
    addresses: Addresses,
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
        let saved = saved.map(|b| decode_raft_state(&b)).transpose()?;
        let (mut hard, conf) = saved.unwrap_or_default();
        // Never past the log; never before its first whole entry either: a
        // log whose oldest segments are gone (shipped from a leader, or
        // reclaimed) lost only committed entries, and raft-rs requires the
        // commit index at or past the entry before its first.
        let before_first = log.first_index().map_or(0, |f| f - 1);
        hard.commit = hard.commit.min(log.last_index()).max(before_first);
        let saved =
            conf.unwrap_or(Membership { conf: ConfState { voters, ..ConfState::default() }, ..Membership::default() });
        let state = RaftState { hard_state: hard, conf_state: saved.conf };
        Ok(LogStore {
            log,
            slots,
            state,
            dirty: false,
            conf_index: saved.index,
            addresses: saved.addresses,
            staged: None,
            failed: None,
            cut_backs: 0,
        })
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
            let conf = Membership {
                index: self.conf_index,
                conf: self.state.conf_state.clone(),
                addresses: self.addresses.clone(),
            };
            let bytes = encode_raft_state(&hs, (self.conf_index > 0).then_some(&conf));
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
        let batch = Batch::decode(batch_bytes(e))?;
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
        let term = mark.close.term;
        Ok(match batch.conf_body() {
            Some(change) => Entry {
                entry_type: EntryType::EntryConfChangeV2.into(),
                term,
                index,
                data: change.to_vec(),
                context: batch.encode(),
                ..Entry::default()
            },
            None => Entry { term, index, data: batch.encode(), ..Entry::default() },
        })
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

    fn set_conf_state(&mut self, cs: &ConfState, index: u64, addresses: &Addresses) {
        self.state.conf_state = cs.clone();
        self.conf_index = index;
        self.addresses = addresses.clone();
        self.dirty = true;
    }

    fn conf_index(&self) -> u64 {
        self.conf_index
    }
    fn addresses(&self) -> Addresses {
        self.addresses.clone()
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
            size += (e.data.len() + e.context.len()) as u64;
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

/// Gives a replica about to open its log for the first time (joining a
/// cell: its segments, if any, were just copied) the membership `m` its
/// peers applied, so that it knows its group's members (the changes that
/// made them may lie in segments reclaimed long ago). A membership it
/// keeps already stays, unless `m` results from a later change.
pub async fn seed_membership<S: SegmentStore>(store: &S, m: &Membership) -> Result<(), StoreError> {
    let io = || crate::storage::Error::io_at("seed the Raft state", 0);
    let (mut slots, saved) = Slots::open(store, HARD_STATE_FILE).await.map_err(io())?;
    let (hs, kept) = saved.map(|b| decode_raft_state(&b)).transpose()?.unwrap_or_default();
    if kept.is_some_and(|k| k.index >= m.index) {
        return Ok(());
    }
    slots.write(store, &encode_raft_state(&hs, Some(m))).await.map_err(io())
}

/// What the Raft state file of a replica restored from its cell's objects
/// holds (`server/restore.rs`): `term` (at least that of the last entry the
/// restored segments close), `commit` (that entry: every one is committed),
/// no vote, and no membership change (the voters are the cell's).
pub fn restored_state(term: u64, commit: u64) -> Vec<u8> {
    encode_raft_state(&HardState { term, vote: 0, commit }, None)
}

fn store_error(e: crate::storage::Error) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(e)))
}

/// The bytes of the batch an entry carries: a membership change's are in
/// its context (raft-rs reads the change itself from its data).
fn batch_bytes(e: &Entry) -> &[u8] {
    if e.get_entry_type() == EntryType::EntryConfChangeV2 {
        &e.context
    } else {
        &e.data
    }
}

/// `term u64 | vote u64 | commit u64`, then, once a membership change was
/// made, `conf_index u64 | voters u64 | learners u64 | voters_outgoing u64
/// | learners_next u64 | auto_leave u64 (0 or 1) | the ids, u64 each`, in
/// that order, then the addresses: `count u64`, and for each `id u64 |
/// length u64 | its bytes, zero-padded to whole words`; little-endian.
/// Without a change the file is the 24 bytes it always was, which an older
/// build reads.
fn encode_raft_state(hs: &HardState, conf: Option<&Membership>) -> Vec<u8> {
    let mut words = vec![hs.term, hs.vote, hs.commit];
    if let Some(saved) = conf {
        membership_words(saved, &mut words);
    }
    le_bytes(&words)
}

/// A membership as `encode_raft_state` writes it (segment shipping sends
/// it so to a joining replica, `cell::ship`).
pub fn encode_membership(m: &Membership) -> Vec<u8> {
    let mut words = Vec::new();
    membership_words(m, &mut words);
    le_bytes(&words)
}

/// What [`encode_membership`] wrote; None when it does not add up.
pub fn decode_membership(bytes: &[u8]) -> Option<Membership> {
    let mut state = [0u8; 24].to_vec();
    state.extend_from_slice(bytes);
    decode_raft_state(&state).ok()?.1
}

fn membership_words(saved: &Membership, words: &mut Vec<u64>) {
    let cs = &saved.conf;
    let lists = [&cs.voters, &cs.learners, &cs.voters_outgoing, &cs.learners_next];
    words.push(saved.index);
    words.extend(lists.iter().map(|l| l.len() as u64));
    words.push(u64::from(cs.auto_leave));
    words.extend(lists.iter().flat_map(|l| l.iter().copied()));
    words.push(saved.addresses.len() as u64);
    for (id, at) in &saved.addresses {
        words.extend([*id, at.len() as u64]);
        let mut padded = at.as_bytes().to_vec();
        padded.resize(at.len().div_ceil(8) * 8, 0);
        words.extend(padded.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))));
    }
}

fn le_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn decode_raft_state(bytes: &[u8]) -> Result<(HardState, Option<Membership>), StoreError> {
    let bad = |why: &str| {
        let why = format!("{HARD_STATE_FILE} ({} bytes): {why}", bytes.len());
        StoreError::io("read the Raft state", 0, std::io::Error::new(std::io::ErrorKind::InvalidData, why))
    };
    if !bytes.len().is_multiple_of(8) || bytes.len() < 24 {
        return Err(bad("not whole words, or fewer than 3"));
    }
    let words: Vec<u64> = bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    let hs = HardState { term: words[0], vote: words[1], commit: words[2] };
    let Some((&index, rest)) = words[3..].split_first() else { return Ok((hs, None)) };
    let (counts, rest) = rest.split_at_checked(5).ok_or_else(|| bad("a membership cut short"))?;
    let ids = counts[..4].iter().try_fold(0u64, |sum, &n| sum.checked_add(n));
    let (ids, rest) = match ids.and_then(|n| rest.split_at_checked(usize::try_from(n).ok()?)) {
        Some(split) if counts[4] <= 1 => split,
        _ => return Err(bad("a membership whose counts do not add up")),
    };
    let mut ids = ids.iter().copied();
    let mut list = |n: u64| ids.by_ref().take(n as usize).collect::<Vec<u64>>();
    let conf = ConfState {
        voters: list(counts[0]),
        learners: list(counts[1]),
        voters_outgoing: list(counts[2]),
        learners_next: list(counts[3]),
        auto_leave: counts[4] == 1,
    };
    let addresses = decode_addresses(rest).ok_or_else(|| bad("its addresses do not add up"))?;
    Ok((hs, Some(Membership { index, conf, addresses })))
}

/// The address section of [`encode_raft_state`]; none at all in a file of
/// a build that kept no addresses.
fn decode_addresses(words: &[u64]) -> Option<Addresses> {
    let Some((&count, mut rest)) = words.split_first() else { return Some(Addresses::new()) };
    let mut addresses = Addresses::new();
    for _ in 0..count {
        let (&[id, len], after) = rest.split_first_chunk::<2>()?;
        let len = usize::try_from(len).ok().filter(|&l| l <= super::members::PEER_ADDRESS_BYTES_MAX)?;
        let (text, after) = after.split_at_checked(len.div_ceil(8))?;
        let mut bytes: Vec<u8> = text.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.truncate(len);
        addresses.insert(id, String::from_utf8(bytes).ok()?);
        rest = after;
    }
    rest.is_empty().then_some(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raft_state_reads_back_with_or_without_members_and_refuses_what_does_not_add_up() {
        let hs = HardState { term: 7, vote: 2, commit: 40 };
        let old = encode_raft_state(&hs, None);
        assert_eq!(old.len(), 24, "the form older builds read");
        assert_eq!(decode_raft_state(&old).unwrap(), (hs.clone(), None));
        let conf = ConfState { voters: vec![1, 2, 3], learners: vec![4], ..ConfState::default() };
        let addresses: Addresses = [(4, "10.0.0.4:7400".to_string()), (5, "node-five.example:7400".to_string())].into();
        let saved = Membership { index: 12, conf: conf.clone(), addresses };
        let new = encode_raft_state(&hs, Some(&saved));
        assert_eq!(decode_raft_state(&new).unwrap(), (hs.clone(), Some(saved.clone())));
        let unaddressed = Membership { addresses: Addresses::new(), ..saved.clone() };
        let members_only = encode_raft_state(&hs, Some(&unaddressed));
        let without_section = &members_only[..members_only.len() - 8];
        assert_eq!(decode_raft_state(without_section).unwrap(), (hs, Some(unaddressed)), "a file kept no addresses");
        for cut in [8, 16, 24, 32] {
            let bad = &new[..new.len() - cut];
            assert!(decode_raft_state(bad).is_err(), "{} bytes read as a state", bad.len());
        }
        for bad in [&new[..32], &new[..20], &new[..new.len() - 1]] {
            assert!(decode_raft_state(bad).is_err(), "{} bytes read as a state", bad.len());
        }
        let mut flag = new.clone();
        flag[32 + 32..32 + 40].copy_from_slice(&2u64.to_le_bytes());
        assert!(decode_raft_state(&flag).is_err(), "auto_leave is 0 or 1");
        let mut huge = new.clone();
        huge[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_raft_state(&huge).is_err(), "counts that overflow are refused, not summed");
        let mut long = new.clone();
        long[(9 + 4 + 2) * 8..(9 + 4 + 2) * 8 + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_raft_state(&long).is_err(), "an address longer than any is refused");
    }
}
