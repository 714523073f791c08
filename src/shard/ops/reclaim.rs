//! Space reclamation: the per-shard pass that re-logs what old segments
//! still hold and deletes the segments nothing needs.

use crate::protocol::{persist, StreamKey};
use crate::shard::ops::lifecycle::expiry_due;
use crate::shard::state::State;
use crate::shard::stream::MetaPin;
use crate::shard::Shard;
use crate::storage::io::SegmentStore;
use std::collections::{BTreeMap, BTreeSet, HashSet};

impl<S: SegmentStore> Shard<S> {
    /// Background pass (every RECLAIM_INTERVAL_MS): expires streams whose
    /// TTL ran out, then deletes every sealed segment recovery no longer
    /// needs. A segment is needed while it holds
    /// - data a stream still serves (not trimmed, not deleted) or a retained
    ///   snapshot's blob;
    /// - a stream's latest create/state/snapshot record, or a data-less
    ///   record written after it (close, soft delete); a bucket's create;
    /// - a delete record (stream or bucket) while an older segment still holds
    ///   a record that would bring back what it deleted.
    ///
    /// Metadata that alone keeps a segment is re-logged into the active
    /// segment first (a state record, a bucket create), which frees it.
    /// Segments go oldest first, so a delete record never goes before what it
    /// deleted. Recovery then rebuilds the same state from what is left (see
    /// `recover`: appends whose create is gone wait for their state record).
    pub async fn reclaim(&self) {
        if self.stopping.get() {
            // Shutting down: write nothing more.
            return;
        }
        self.expire_due().await;
        let sealed = self.log.sealed_segments();
        if !self.reclaim_due.get() && sealed.len() == self.reclaim_sealed.get() {
            return;
        }
        self.reclaim_due.set(false);
        if sealed.is_empty() {
            self.reclaim_sealed.set(0);
            return;
        }
        let Some((sealed, data, pins)) = self.needs_after_relog(sealed).await else { return };
        self.remove_unneeded(&sealed, &data, &pins).await;
        self.reclaim_sealed.set(self.log.sealed_segments().len());
    }

    /// In a cell's background pass (every RECLAIM_INTERVAL_MS), on every
    /// replica. The one that leads its group decides, as a single node's
    /// pass would, and writes what it decided through the group's log, so
    /// every replica applies the same: it expires every due stream (delete
    /// records), and names the oldest sealed segments nothing needs (a
    /// reclaim record: `decide_reclaim`). Every replica then
    /// deletes the segments a committed reclaim record named
    /// (`remove_reclaimed`); a follower decides nothing.
    pub async fn reclaim_in_cell(&self) {
        if self.stopping.get() {
            return;
        }
        // Expiry and collection decide on fork references, which other
        // shards count: only on a node whole again (one shard a node, or
        // leading every group and retold).
        if self.leads() && self.whole() {
            self.expire_due().await;
            // Soft-deleted sources whose last fork went: a leader that
            // failed between that fork's delete and the source's
            // collection left it to its successor.
            self.collect_unreferenced().await;
        }
        if self.leads() {
            self.decide_reclaim().await;
        }
        self.remove_reclaimed().await;
        self.finish_moves().await;
    }

    /// On the leader: re-logs the metadata that alone keeps the oldest
    /// sealed segments, then names, in a reclaim record, the longest prefix
    /// of them that nothing needs and whose every entry, and the first
    /// entry closed after them (it may have begun in them), each voter
    /// holds and the group committed: no replica, however far behind, is
    /// then sent an entry from them (a replica with no segment is given
    /// the segments that are left, `cell::ship`). Segments go as a prefix,
    /// oldest first: a hole would leave raft-rs a log that is not one.
    async fn decide_reclaim(&self) {
        let sealed = self.log.sealed_segments();
        let unblocked = self.reclaim_waits_for.get().is_some_and(|index| self.all_hold() >= index);
        if sealed.is_empty() || (!self.reclaim_due.get() && !unblocked && sealed.len() == self.reclaim_sealed.get()) {
            return;
        }
        self.reclaim_due.set(false);
        self.reclaim_waits_for.set(None);
        self.reclaim_sealed.set(sealed.len());
        let Some((sealed, data, pins)) = self.needs_after_relog(sealed).await else { return };
        let Some(through) = self.free_prefix(&sealed, &data, &pins) else { return };
        if self.reclaim_through.get().is_some_and(|t| t >= through) {
            return;
        }
        let h = crate::storage::RecordHeader {
            kind: persist::KIND_RECLAIM,
            stream_id: 0,
            incarnation: 0,
            stream_offset: 0,
            body_len: 0,
        };
        // Tiering leaves these segments alone from now (`Shard::due_in_cell`).
        self.reclaim_pending.set(Some(through));
        let logged = self.log.append(h, &persist::encode_reclaim(through));
        match logged {
            Ok((_, lsn)) if self.log.durable(lsn).await.is_ok() => self.reclaimed_through(through),
            _ => self.reclaim_due.set(true),
        }
        self.reclaim_pending.set(None);
    }

    /// What each of `sealed` is needed for, once the metadata that alone
    /// keeps one is re-logged and durable (computed again if anything was:
    /// the sealed segments and the state moved on meanwhile). None when the
    /// log refused a record or failed: the next pass tries again.
    async fn needs_after_relog(
        &self,
        sealed: Vec<u64>,
    ) -> Option<(Vec<u64>, HashSet<u64>, BTreeMap<u64, Vec<MetaPin>>)> {
        let (data, pins) = segment_needs(&self.state.borrow(), &sealed);
        // With nothing re-logged nothing has changed (no await since the
        // needs were computed).
        match self.relog(&data, &pins) {
            Err(()) => None,
            Ok(None) => Some((sealed, data, pins)),
            Ok(Some(lsn)) => {
                if self.log.durable(lsn).await.is_err() {
                    self.reclaim_due.set(true);
                    return None;
                }
                let sealed = self.log.sealed_segments();
                let (data, pins) = segment_needs(&self.state.borrow(), &sealed);
                Some((sealed, data, pins))
            }
        }
    }

    /// The newest of `sealed` (oldest first; never the newest of all) up to which every segment is
    /// free (no data, no pinned metadata, no delete still needed) and held
    /// by every voter, the entry begun in it included; None if the oldest
    /// is not. A prefix stopped by the voters alone is tried again once
    /// they hold the entry it waits for (`reclaim_waits_for`).
    fn free_prefix(&self, sealed: &[u64], data: &HashSet<u64>, pins: &BTreeMap<u64, Vec<MetaPin>>) -> Option<u64> {
        let local = self.log.local();
        let bound = self.all_hold();
        let mut on_disk: BTreeSet<u64> = sealed.iter().copied().collect();
        let mut through = None;
        // The newest sealed segment stays: a replica with no segments (a
        // lost disk) copies the sealed ones at boot and is sent the entries
        // after them, so with none left to copy it would need entries the
        // log no longer holds (raft-rs's snapshot, not built).
        let (_, keep_newest) = sealed.split_last()?;
        for &seg in keep_newest {
            let state = self.state.borrow();
            if data.contains(&seg) || pins.contains_key(&seg) || state.delete_still_needed(seg, &on_disk) {
                break;
            }
            if self.log.is_moving(seg) {
                // Being moved to the object store: free once it is remote.
                self.reclaim_due.set(true);
                break;
            }
            match local.first_close_after(seg) {
                Some(first) if first <= bound => {}
                // Free, but not yet held by every voter (or nothing is
                // closed after it yet): tried again once it is.
                first => {
                    self.reclaim_waits_for.set(Some(first.unwrap_or(local.last_index() + 1)));
                    break;
                }
            }
            on_disk.remove(&seg);
            through = Some(seg);
        }
        through
    }

    /// The newest entry every voter holds and the group committed (0 on a
    /// replica that does not lead).
    pub(in crate::shard) fn all_hold(&self) -> u64 {
        let held = self.held_by_all.borrow().as_ref().map_or(0, |h| h.get());
        held.min(self.log.local().committed_index())
    }

    /// A committed reclaim record named segments up to `through`.
    pub(in crate::shard) fn reclaimed_through(&self, through: u64) {
        if self.reclaim_through.get().is_none_or(|t| t < through) {
            self.reclaim_through.set(Some(through));
        }
    }

    /// On every replica: deletes, oldest first, the sealed segments a
    /// committed reclaim record named (also those a replica that crashed
    /// before deleting finds named again as it recovers).
    async fn remove_reclaimed(&self) {
        let Some(through) = self.reclaim_through.get() else { return };
        self.remove_remote_reclaimed(through).await;
        let local = self.log.local();
        let doomed: Vec<u64> = local.sealed_segments().into_iter().take_while(|&s| s <= through).collect();
        if doomed.is_empty() {
            return;
        }
        if let Err(e) = local.remove_through(through).await {
            tracing::warn!("shard {}: could not delete the segments up to {through}: {e}", self.id);
            return;
        }
        let mut state = self.state.borrow_mut();
        for seg in &doomed {
            state.forget_segment(*seg);
        }
        self.stats.borrow_mut().segments_reclaimed += doomed.len() as u64;
        tracing::info!("shard {}: deleted segments {}..={through}, reclaimed through the log", self.id, doomed[0]);
    }

    /// With tiering: the remote segments up to `through` go first (the
    /// oldest), their skeletons on every replica and, on the leader, their
    /// objects.
    async fn remove_remote_reclaimed(&self, through: u64) {
        match self.log.remove_remote_through(through, self.leads()).await {
            Ok(gone) if gone.is_empty() => {}
            Ok(gone) => {
                let mut state = self.state.borrow_mut();
                for seg in &gone {
                    state.forget_segment(*seg);
                }
                self.stats.borrow_mut().segments_reclaimed += gone.len() as u64;
                tracing::info!(
                    "shard {}: deleted remote segments {}..={through}, reclaimed through the log",
                    self.id,
                    gone[0]
                );
            }
            Err(e) => tracing::warn!("shard {}: could not delete the remote segments up to {through}: {e}", self.id),
        }
    }

    /// Expires every stream whose TTL or expiry time has passed.
    async fn expire_due(&self) {
        let now = (self.now_ms)();
        let expired: Vec<StreamKey> = {
            let state = self.state.borrow();
            state.iter().filter(|(k, _)| expiry_due(&state, k, now)).map(|(k, _)| k.clone()).collect()
        };
        // Each is checked again: an earlier one's release may have awaited.
        for key in &expired {
            self.expire_if_due(key).await;
        }
    }

    /// Re-logs the metadata that alone keeps a sealed segment (at most
    /// `RECLAIM_RELOG_MAX` records a pass). Ok(lsn of the last record
    /// written, if any); Err when the log refused one (backpressure or a
    /// failing disk: the next pass tries again).
    fn relog(&self, data: &HashSet<u64>, pins: &BTreeMap<u64, Vec<MetaPin>>) -> Result<Option<u64>, ()> {
        let mut relogged = 0usize;
        let mut last_lsn = None;
        let mut seen = HashSet::new();
        let pinned = pins.iter().filter(|(seg, _)| !data.contains(seg)).flat_map(|(_, list)| list);
        for pin in pinned {
            if relogged == crate::limits::RECLAIM_RELOG_MAX {
                // The rest waits for the next pass.
                self.reclaim_due.set(true);
                break;
            }
            let lsn = match pin {
                MetaPin::Stream(key) if seen.insert(key.clone()) => {
                    let mut rec = match self.state.borrow().get(key) {
                        Some(s) => s.state_record(key),
                        None => continue,
                    };
                    self.log_state(key, &mut rec, None).map(|(_, lsn)| lsn)
                }
                MetaPin::Stream(_) => continue,
                MetaPin::Bucket(b) => self.log_bucket_create(b),
                MetaPin::Sub(id) => match self.relog_sub(id) {
                    Some(r) => r,
                    None => continue,
                },
            };
            let Ok(lsn) = lsn else {
                self.reclaim_due.set(true);
                return Err(());
            };
            last_lsn = Some(lsn);
            relogged += 1;
        }
        self.stats.borrow_mut().relogged += relogged as u64;
        Ok(last_lsn)
    }

    /// Deletes, oldest first, the sealed segments nothing needs, so a
    /// delete record never goes before what it deleted.
    async fn remove_unneeded(&self, sealed: &[u64], data: &HashSet<u64>, pins: &BTreeMap<u64, Vec<MetaPin>>) {
        let mut on_disk: BTreeSet<u64> = sealed.iter().copied().collect();
        for &seg in sealed {
            if data.contains(&seg) || pins.contains_key(&seg) || self.state.borrow().delete_still_needed(seg, &on_disk)
            {
                continue;
            }
            if self.log.is_moving(seg) {
                // Being uploaded: free once it is remote (it stays in
                // `on_disk`, so newer deletes that it needs stay too).
                self.reclaim_due.set(true);
                continue;
            }
            if let Err(e) = self.log.remove_segment(seg).await {
                tracing::warn!("shard {}: could not reclaim segment {seg}: {e}", self.id);
                self.reclaim_due.set(true);
                break;
            }
            on_disk.remove(&seg);
            self.state.borrow_mut().forget_segment(seg);
            self.stats.borrow_mut().segments_reclaimed += 1;
        }
    }
}

/// Which of `sealed` hold needed data, and which hold needed metadata (by whom).
pub(in crate::shard) fn segment_needs(state: &State, sealed: &[u64]) -> (HashSet<u64>, BTreeMap<u64, Vec<MetaPin>>) {
    let oldest = sealed.first().copied().unwrap_or(0);
    let newest = sealed.last().copied().unwrap_or(0);
    let in_range = |seg: u64| (oldest..=newest).contains(&seg);
    let mut data = HashSet::new();
    let mut pins: BTreeMap<u64, Vec<MetaPin>> = BTreeMap::new();
    for (key, s) in state.iter() {
        // A stream's chunks are in log order, so their segments do not
        // decrease: visit each distinct segment once (O(segments × log chunks)).
        let mut i = 0;
        while let Some(c) = s.chunks.get(i) {
            let seg = c.loc.segment;
            data.insert(seg);
            i += s.chunks[i..].partition_point(|c| c.loc.segment <= seg);
        }
        data.extend(s.snapshots.values().map(|sn| sn.loc.segment));
        for &seg in std::iter::once(&s.state_seg).chain(&s.meta_segs) {
            if in_range(seg) {
                pins.entry(seg).or_default().push(MetaPin::Stream(key.clone()));
            }
        }
    }
    for (b, seg) in state.bucket_segments() {
        if in_range(seg) {
            pins.entry(seg).or_default().push(MetaPin::Bucket(b.clone()));
        }
    }
    for (id, e) in &state.subs {
        if in_range(e.seg) {
            pins.entry(e.seg).or_default().push(MetaPin::Sub(id.clone()));
        }
    }
    (data, pins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ops::testkit::{append, create, key, publish};
    use crate::shard::records;

    fn pinned_by(pins: &BTreeMap<u64, Vec<MetaPin>>, seg: u64) -> Vec<String> {
        pins.get(&seg)
            .map(|l| {
                l.iter()
                    .map(|p| match p {
                        MetaPin::Stream(k) => k.stream.clone(),
                        MetaPin::Bucket(b) => format!("bucket {b}"),
                        MetaPin::Sub((_, id)) => format!("subscription {id}"),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn data_and_the_latest_state_record_keep_their_segments() {
        // The testkit puts each record in the segment numbered by its lsn.
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abc", None, 2);
        append(&mut state, "a", b"def", None, 3);
        records::apply_bucket(&mut state, "b", 4, true);
        let (data, pins) = segment_needs(&state, &[1, 2, 3, 4]);
        assert!(data.contains(&2) && data.contains(&3));
        assert!(!data.contains(&1), "the create held no data");
        assert_eq!(pinned_by(&pins, 1), vec!["a"], "the create is the stream's latest state record");
        assert_eq!(pinned_by(&pins, 4), vec!["bucket b"]);
    }

    #[test]
    fn a_snapshot_frees_the_data_before_it_and_moves_the_state_pin() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abc", None, 2);
        append(&mut state, "a", b"def", None, 3);
        publish(&mut state, "a", 3, 2, 4);
        let (data, pins) = segment_needs(&state, &[1, 2, 3, 4]);
        assert!(!data.contains(&2), "trimmed");
        assert!(data.contains(&3) && data.contains(&4), "the rest of the data and the blob");
        assert!(pinned_by(&pins, 1).is_empty(), "the create no longer holds the latest state");
        assert_eq!(pinned_by(&pins, 4), vec!["a"]);
    }

    #[test]
    fn a_delete_record_is_needed_while_an_older_segment_could_bring_its_stream_back() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        records::apply_delete(&mut state, &key("a"), false, 2, 2);
        let on_disk: BTreeSet<u64> = [1, 2].into();
        assert!(state.delete_still_needed(2, &on_disk));
        let create_gone: BTreeSet<u64> = [2].into();
        assert!(!state.delete_still_needed(2, &create_gone));
        records::apply_bucket(&mut state, "x", 3, true);
        records::apply_bucket(&mut state, "x", 4, false);
        assert!(state.delete_still_needed(4, &[3, 4].into()));
        assert!(!state.delete_still_needed(4, &[4].into()));
        assert!(!state.buckets_owned.contains("x"));
    }
}
