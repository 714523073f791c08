//! Recovery: rebuilding a shard's streams, buckets and segment index from
//! the records its log returned at boot.

use super::records;
use super::stream::{Snap, Stream};
use super::subs::Matcher;
use super::{wall_clock_ms, Shard};
use crate::metrics::Histo;
use crate::protocol::persist::{self, AppendRecord, CreateRecord, StateDecodeError, StateRecord};
use crate::protocol::rules::ProducerPolicy;
use crate::protocol::subs::record::SubRecord;
use crate::protocol::StreamKey;
use crate::storage::{io::SegmentStore, Log, Recovered};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// What replaying a log keeps between records.
struct Replay {
    boot_ms: i64,
    /// Appends whose stream's create record was reclaimed: adopted by the
    /// stream's next state record (which always exists: see `reclaim`).
    orphans: HashMap<u64, Stream>,
    /// Snapshot blobs seen, by (uid, offset).
    blobs: HashMap<(u64, u64), Snap>,
    /// Committed records applied in a cell (not the boot's replay, after
    /// which `publish_owned_subs` tells every shard what subscriptions
    /// select): each subscription's change goes to the registries at once.
    applying: bool,
    /// A fork was created or removed: sources' references are counted again.
    forks_changed: bool,
}

impl Replay {
    /// A replay at `boot_ms`: the boot's (`applying` false) or, in a cell,
    /// of committed records as they come.
    fn new(boot_ms: i64, applying: bool) -> Replay {
        Replay { boot_ms, orphans: HashMap::new(), blobs: HashMap::new(), applying, forks_changed: false }
    }
}

impl<S: SegmentStore> Shard<S> {
    /// Rebuilds the shard's state from its recovered log: one replay
    /// function per record kind, in log order, then the checks that every
    /// gap and every listed snapshot was explained.
    /// `policy` bounds each stream's producers from the first record on
    /// (see `producers`), so it is the configured one, not set afterwards.
    pub fn recover(
        id: usize,
        shards: usize,
        log: Rc<Log<S>>,
        records: &[Recovered],
        policy: ProducerPolicy,
    ) -> Result<Self, String> {
        let shard = Shard {
            id,
            shards,
            log,
            state: RefCell::default(),
            peers: RefCell::new(None),
            stats: RefCell::default(),
            append_us: RefCell::new(Histo::latency_us()),
            stopping: Cell::new(false),
            now_ms: Box::new(wall_clock_ms),
            sleep: RefCell::new(None),
            long_poll_timeout: Cell::new(Duration::from_millis(crate::limits::LONG_POLL_TIMEOUT_MS_DEFAULT)),
            producer_policy: Cell::new(policy),
            rng: Cell::new(0x9e37_79b9_7f4a_7c15 ^ (wall_clock_ms() as u64) ^ ((id as u64) << 32)),
            reclaim_due: Cell::new(true),
            reclaim_sealed: Cell::new(0),
            reclaim_through: Cell::new(None),
            reclaim_pending: Cell::new(None),
            held_by_all: RefCell::new(None),
            lead_term: RefCell::new(None),
            finish_failing: Cell::new(false),
            reclaim_waits_for: Cell::new(None),
            orphans: RefCell::default(),
            counted: RefCell::default(),
            hot_budget: Cell::new(0),
            writable: RefCell::new(None),
            forwarder: RefCell::new(None),
            subs_env: RefCell::new(None),
            registry: RefCell::default(),
            subs_due: Default::default(),
            deliveries: RefCell::default(),
            subs_resync: Cell::new(false),
        };
        let mut replay = Replay::new((shard.now_ms)(), false);
        let mut body = Vec::new();
        for r in records {
            body.clear();
            shard
                .log
                .read_recovered(r.loc, &mut body)
                .map_err(|e| format!("shard {id}: reading recovered record: {e}"))?;
            shard.state.borrow_mut().uid_used(r.header.stream_id);
            shard.replay_record(&mut replay, r, &body)?;
        }
        for (key, s) in shard.state.borrow().iter() {
            if s.gap_end > 0 {
                return Err(format!(
                    "shard {id}: stream {key:?}: records before offset {} are missing and nothing trimmed them",
                    s.gap_end
                ));
            }
            if s.blob_missing {
                return Err(format!("shard {id}: stream {key:?}: a retained snapshot's record is missing"));
            }
        }
        // Uids must never repeat, even when every record of the newest
        // streams was reclaimed: start above the wall clock (1024 per ms).
        shard.state.borrow_mut().uids_from((wall_clock_ms().max(0) as u64) << 10);
        shard.log.recovery_done();
        // In a cell the replay stopped at the commit index it knew: the
        // state records that adopt these come as later entries commit.
        *shard.orphans.borrow_mut() = replay.orphans;
        Ok(shard)
    }

    /// In a cell: applies records the group committed that this shard did
    /// not write itself (a follower's, or a new leader's from earlier
    /// terms), in log order, as recovery replays them. Then wakes the live
    /// readers (long-poll, SSE) waiting on the streams those records
    /// changed, as a leader's append wakes its own once durable: without
    /// this a follower's live readers heard of nothing until their timeout.
    pub fn apply_committed(&self, records: &[Recovered]) -> Result<(), String> {
        let mut replay = Replay::new((self.now_ms)(), true);
        // Appends whose state record comes in a later call wait across calls.
        replay.orphans = std::mem::take(&mut *self.orphans.borrow_mut());
        let result = self.apply_with(&mut replay, records);
        *self.orphans.borrow_mut() = std::mem::take(&mut replay.orphans);
        result
    }

    fn apply_with(&self, replay: &mut Replay, records: &[Recovered]) -> Result<(), String> {
        let mut body = Vec::new();
        let mut touched = Vec::new();
        for r in records {
            body.clear();
            self.log
                .read_recovered(r.loc, &mut body)
                .map_err(|e| format!("shard {}: reading a committed record: {e}", self.id))?;
            self.state.borrow_mut().uid_used(r.header.stream_id);
            self.replay_record(replay, r, &body)?;
            if !matches!(
                r.header.kind,
                persist::KIND_BUCKET_CREATE
                    | persist::KIND_BUCKET_DELETE
                    | persist::KIND_SUBSCRIPTION
                    | persist::KIND_RECLAIM
                    | crate::storage::record::KIND_TIER
            ) {
                touched.push(r.header.stream_id);
            }
        }
        // With more than one shard a node a fork's source may be on another
        // shard: the node counts them again once it leads every group
        // (`Shard::retell`).
        if replay.forks_changed && self.shards == 1 {
            self.recount_fork_refs();
        }
        touched.sort_unstable();
        touched.dedup();
        for uid in touched {
            let key = self.state.borrow().key_of(uid).cloned();
            if let Some(key) = key {
                self.wake_readers(&key);
            }
        }
        Ok(())
    }

    /// In a cell of one shard a node (so every fork's source is here): the
    /// references each source holds, counted again from the forks the
    /// state holds, once applied records created or removed forks (the
    /// references are not logged). A replica that comes to lead must know
    /// which sources forks still read: a delete of one is soft (F43).
    fn recount_fork_refs(&self) {
        debug_assert_eq!(self.shards, 1, "a fork's source may be on another shard");
        let forks = self.fork_sources();
        let mut state = self.state.borrow_mut();
        for (_, s) in state.iter_mut() {
            s.fork_refs = 0;
        }
        for (source, uid) in forks {
            if let Some(s) = state.get_mut(&source).filter(|s| s.uid == uid) {
                s.fork_refs += 1;
            }
        }
    }

    /// In a cell: the shard's state again from the committed records
    /// alone, after it stopped leading with records it wrote that may never
    /// be committed. Live readers waiting here are answered (as at their
    /// timeout) and come back to the rebuilt state.
    pub fn rebuild(&self, committed: &[Recovered]) -> Result<(), String> {
        let mut old = std::mem::take(&mut *self.state.borrow_mut());
        for (_, s) in old.iter_mut() {
            for w in s.waiters.drain(..) {
                let _ = w.send(());
            }
        }
        drop(old);
        self.orphans.borrow_mut().clear();
        // Those of remote segments first (tiering in a cell), read from their skeletons.
        let mut all = self.log.remote_records().map_err(|e| format!("shard {}: reading skeletons: {e}", self.id))?;
        all.extend_from_slice(committed);
        let applied = self.apply_committed(&all);
        self.log.recovery_done();
        applied?;
        self.state.borrow_mut().uids_from((wall_clock_ms().max(0) as u64) << 10);
        Ok(())
    }

    fn replay_record(&self, replay: &mut Replay, r: &Recovered, body: &[u8]) -> Result<(), String> {
        let bad = |what: &str| {
            format!("shard {}: malformed {what} record in segment {} at {}", self.id, r.loc.segment, r.loc.pos)
        };
        match r.header.kind {
            persist::KIND_CREATE => {
                let c = CreateRecord::decode(body).map_err(|_| bad("create"))?;
                replay.forks_changed |= c.fork.is_some();
                let key = StreamKey { bucket: c.bucket.clone(), stream: c.stream.clone() };
                records::apply_create(&mut self.state.borrow_mut(), key, &r.header, c, r.loc, 0, replay.boot_ms);
                Ok(())
            }
            persist::KIND_APPEND => {
                let (a, data_off) = AppendRecord::decode_meta(body).map_err(|_| bad("append"))?;
                self.replay_append(replay, r, &a, data_off)
            }
            persist::KIND_STATE | persist::KIND_SNAPSHOT => {
                let (st, blob_off) = StateRecord::decode_meta(body).map_err(|e| match e {
                    StateDecodeError::Malformed(_) => bad("state"),
                    newer => format!(
                        "shard {}: state record in segment {} at {}: {newer}",
                        self.id, r.loc.segment, r.loc.pos
                    ),
                })?;
                if r.header.kind == persist::KIND_SNAPSHOT {
                    let m = st.snapshots.last().ok_or_else(|| bad("snapshot"))?;
                    let snap = Snap {
                        content_type: m.content_type.clone(),
                        loc: r.loc,
                        data_off: blob_off as u32,
                        len: r.header.body_len - blob_off as u32,
                        published_at_ms: m.published_at_ms,
                    };
                    replay.blobs.insert((r.header.stream_id, m.offset), snap);
                }
                self.replay_state(replay, r, &st)
            }
            persist::KIND_DELETE => {
                let soft = persist::decode_delete(body).map_err(|_| bad("delete"))?;
                self.replay_delete(replay, r, soft);
                Ok(())
            }
            persist::KIND_BUCKET_CREATE | persist::KIND_BUCKET_DELETE => {
                let b = persist::decode_bucket(body).map_err(|_| bad("bucket"))?;
                let created = r.header.kind == persist::KIND_BUCKET_CREATE;
                let mut state = self.state.borrow_mut();
                records::apply_bucket(&mut state, &b, r.loc.segment, created);
                if created {
                    state.buckets_known.insert(b);
                }
                Ok(())
            }
            persist::KIND_SUBSCRIPTION => {
                let rec = SubRecord::decode(body).map_err(|_| bad("subscription"))?;
                let id = (rec.root, rec.id);
                if replay.applying {
                    self.publish_applied_matcher(&id, rec.sub.as_ref().map(Matcher::of));
                }
                self.state.borrow_mut().apply_sub(id, rec.sub, r.loc.segment, 0);
                Ok(())
            }
            persist::KIND_RECLAIM => {
                let through = persist::decode_reclaim(body).map_err(|_| bad("reclaim"))?;
                self.reclaimed_through(through);
                Ok(())
            }
            // In a cell, a segment's move to the object store (on a single
            // node the tier layer takes these out before the shard sees them).
            crate::storage::record::KIND_TIER => {
                self.log.tier_committed(body).map_err(|e| format!("shard {}: a tier record: {e}", self.id))
            }
            k => Err(format!("shard {}: unknown record kind {k}", self.id)),
        }
    }

    /// An append joins its stream, or waits as an orphan for the state
    /// record that adopts it (its stream's create record was reclaimed).
    fn replay_append(
        &self,
        replay: &mut Replay,
        r: &Recovered,
        a: &AppendRecord,
        data_off: usize,
    ) -> Result<(), String> {
        let h = r.header;
        let mut state = self.state.borrow_mut();
        let key = state.key_of(h.stream_id).cloned();
        let s = match key.as_ref().and_then(|k| state.get_mut(k)) {
            Some(s) => s,
            None => replay
                .orphans
                .entry(h.stream_id)
                .or_insert_with(|| Stream::adoptable(h.stream_id, h.incarnation, replay.boot_ms)),
        };
        if s.incarnation != h.incarnation {
            return Ok(());
        }
        s.replay_append(a, r.loc, h.stream_offset, data_off, &self.producer_policy.get())
            .map_err(|e| format!("shard {}: {e}", self.id))
    }

    /// A state record carries a stream's whole state; records between what
    /// was replayed and it may have been reclaimed (their data trimmed by a
    /// later state): a gap. A gap this record's trim covers is explained; one
    /// it does not must be explained by a later state record (checked at the
    /// end), as must a snapshot listed here whose blob is gone.
    fn replay_state(&self, replay: &mut Replay, r: &Recovered, st: &StateRecord) -> Result<(), String> {
        let (h, seg) = (r.header, r.loc.segment);
        let key = StreamKey { bucket: st.bucket.clone(), stream: st.stream.clone() };
        let mut state = self.state.borrow_mut();
        let known = state.key_of(h.stream_id).cloned();
        let mut s = match known.and_then(|k| state.take(&k)) {
            Some(s) => s,
            None => replay
                .orphans
                .remove(&h.stream_id)
                .unwrap_or_else(|| Stream::adoptable(h.stream_id, h.incarnation, replay.boot_ms)),
        };
        if s.incarnation != h.incarnation {
            s = Stream::adoptable(h.stream_id, h.incarnation, replay.boot_ms);
        }
        if s.tail > st.tail {
            return Err(format!(
                "shard {}: stream {key:?}: replayed data ends at {} past the tail {} of the state record in \
                 segment {seg} at {}",
                self.id, s.tail, st.tail, r.loc.pos
            ));
        }
        s.trim_to(st.trim);
        if s.tail < st.tail {
            s.gap_end = st.tail;
            s.chunks.clear();
        }
        if s.gap_end <= st.trim {
            s.gap_end = 0;
        }
        s.apply_state(st, &self.producer_policy.get());
        // A blob this replay has not seen may be one the stream already
        // holds (in a cell, committed records come a few at a time).
        let held = std::mem::take(&mut s.snapshots);
        s.blob_missing = false;
        for m in &st.snapshots {
            match replay.blobs.get(&(h.stream_id, m.offset)).or_else(|| held.get(&m.offset)) {
                Some(snap) => {
                    s.snapshots.insert(m.offset, snap.clone());
                }
                None => s.blob_missing = true,
            }
        }
        state.note_state(&mut s, seg);
        state.insert(key, s);
        Ok(())
    }

    fn replay_delete(&self, replay: &mut Replay, r: &Recovered, soft: bool) {
        let (uid, seg) = (r.header.stream_id, r.loc.segment);
        let mut state = self.state.borrow_mut();
        match state.key_of(uid).cloned() {
            Some(key) => {
                replay.forks_changed |= state.get(&key).is_some_and(|s| s.fork.is_some());
                records::apply_delete(&mut state, &key, soft, seg, 0);
            }
            // Its stream's records were reclaimed: it still deletes any
            // appends that wait for a state record.
            None if !soft => {
                replay.orphans.remove(&uid);
                state.note_deleted(uid, seg);
            }
            None => {}
        }
    }
}
