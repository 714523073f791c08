//! A shard's tables: its streams (by key and by uid), the incarnations of
//! deleted streams, the buckets it owns and knows, and what each segment
//! holds that recovery needs. Synchronous and free of I/O: operations plan
//! on it and apply their records to it (`records`), recovery replays into
//! it, and its invariants are unit-tested without a log or an executor.

use super::stream::Stream;
use super::subs::{SubEntry, SubId};
use crate::protocol::subs::Subscription;
use crate::protocol::{Incarnation, StreamKey};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A shard's maps keyed by stream: every request looks its stream up a few
/// times, so the hasher is aHash (randomly keyed per process) rather than
/// std's SipHash.
type StreamMap<V> = HashMap<StreamKey, V, ahash::RandomState>;

/// What one segment holds that recovery may need besides stream data (see
/// `ops::reclaim`): a delete record is needed while an older segment still
/// holds a record that would bring back what it deleted.
#[derive(Debug, Default)]
pub(super) struct SegIndex {
    /// Streams with a create, state or snapshot record here.
    pub(super) state_uids: HashSet<u64>,
    /// Streams hard-deleted here.
    pub(super) deleted_uids: Vec<u64>,
    pub(super) bucket_creates: HashSet<String>,
    pub(super) bucket_deletes: Vec<String>,
    /// Subscriptions with a record here, and those deleted here.
    pub(super) sub_records: HashSet<SubId>,
    pub(super) sub_deletes: Vec<SubId>,
}

/// The tables. Streams are reached by key; `by_uid` (what records name)
/// always maps exactly the uids of the streams held, which `insert` and
/// `remove` keep true.
#[derive(Debug)]
pub(super) struct State {
    streams: StreamMap<Stream>,
    by_uid: HashMap<u64, StreamKey, ahash::RandomState>,
    next_uid: u64,
    /// Incarnation of the last deleted stream of each name seen since boot.
    tombstones: StreamMap<u32>,
    /// Buckets whose durable record is in this shard's log.
    pub(super) buckets_owned: BTreeSet<String>,
    /// Every bucket that exists, replicated from the owners.
    pub(super) buckets_known: BTreeSet<String>,
    /// Per segment, what recovery may need from it besides data.
    seg_index: BTreeMap<u64, SegIndex>,
    /// Segment of each owned bucket's latest create record.
    bucket_segs: HashMap<String, u64>,
    /// The subscriptions this shard owns (`shard/subs`).
    pub(super) subs: BTreeMap<SubId, SubEntry>,
}

impl Default for State {
    fn default() -> Self {
        State {
            streams: StreamMap::default(),
            by_uid: HashMap::default(),
            next_uid: 1,
            tombstones: StreamMap::default(),
            buckets_owned: BTreeSet::new(),
            buckets_known: BTreeSet::new(),
            seg_index: BTreeMap::new(),
            bucket_segs: HashMap::new(),
            subs: BTreeMap::new(),
        }
    }
}

impl State {
    pub(super) fn get(&self, key: &StreamKey) -> Option<&Stream> {
        self.streams.get(key)
    }

    pub(super) fn get_mut(&mut self, key: &StreamKey) -> Option<&mut Stream> {
        self.streams.get_mut(key)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&StreamKey, &Stream)> {
        self.streams.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&StreamKey, &mut Stream)> {
        self.streams.iter_mut()
    }

    pub(super) fn len(&self) -> usize {
        self.streams.len()
    }

    /// Which creation of its path the stream at `key` is, if one is there.
    pub(super) fn incarnation(&self, key: &StreamKey) -> Option<Incarnation> {
        self.streams.get(key).map(Stream::incarnation)
    }

    /// The key of the stream a record names by uid.
    pub(super) fn key_of(&self, uid: u64) -> Option<&StreamKey> {
        self.by_uid.get(&uid)
    }

    /// Puts a stream at `key`, replacing (and forgetting) whatever was there.
    pub(super) fn insert(&mut self, key: StreamKey, s: Stream) {
        if let Some(old) = self.streams.remove(&key) {
            self.by_uid.remove(&old.uid);
        }
        self.by_uid.insert(s.uid, key.clone());
        self.streams.insert(key, s);
    }

    /// Takes a stream out without a tombstone (recovery moves streams
    /// between records this way).
    pub(super) fn take(&mut self, key: &StreamKey) -> Option<Stream> {
        let s = self.streams.remove(key)?;
        self.by_uid.remove(&s.uid);
        Some(s)
    }

    /// Removes a deleted stream; a stream created later at its key is its
    /// next incarnation.
    pub(super) fn remove(&mut self, key: &StreamKey) -> Option<Stream> {
        let s = self.take(key)?;
        self.tombstones.insert(key.clone(), s.incarnation);
        Some(s)
    }

    /// The incarnation a stream created now at `key` gets.
    pub(super) fn next_incarnation(&self, key: &StreamKey) -> u32 {
        self.tombstones.get(key).map_or(1, |i| i + 1)
    }

    /// The uid the next new stream gets (taken by `records::apply_create`).
    pub(super) fn next_uid(&self) -> u64 {
        self.next_uid
    }

    /// No uid up to `uid` is given out again.
    pub(super) fn uid_used(&mut self, uid: u64) {
        self.next_uid = self.next_uid.max(uid.saturating_add(1));
    }

    /// Uids given out from now on are at least `first`.
    pub(super) fn uids_from(&mut self, first: u64) {
        self.next_uid = self.next_uid.max(first);
    }

    pub(super) fn index(&mut self, segment: u64) -> &mut SegIndex {
        self.seg_index.entry(segment).or_default()
    }

    /// A segment is gone: nothing in it is needed any more.
    pub(super) fn forget_segment(&mut self, segment: u64) {
        self.seg_index.remove(&segment);
    }

    /// A record holding the stream's whole configuration (create, state,
    /// snapshot) was written in `segment`.
    pub(super) fn note_state(&mut self, s: &mut Stream, segment: u64) {
        pin_state(&mut self.seg_index, s, segment);
    }

    /// [`State::note_state`] for a stream already in the table.
    pub(super) fn note_state_of(&mut self, key: &StreamKey, segment: u64) {
        if let Some(s) = self.streams.get_mut(key) {
            pin_state(&mut self.seg_index, s, segment);
        }
    }

    /// A stream's hard delete record was written in `segment`.
    pub(super) fn note_deleted(&mut self, uid: u64, segment: u64) {
        self.index(segment).deleted_uids.push(uid);
    }

    /// A bucket create (or delete) record was written in `segment`.
    pub(super) fn note_bucket(&mut self, bucket: &str, segment: u64, created: bool) {
        if created {
            self.index(segment).bucket_creates.insert(bucket.to_string());
            self.bucket_segs.insert(bucket.to_string(), segment);
        } else {
            self.index(segment).bucket_deletes.push(bucket.to_string());
            self.bucket_segs.remove(bucket);
        }
    }

    /// Each owned bucket with the segment of its latest create record.
    pub(super) fn bucket_segments(&self) -> impl Iterator<Item = (&String, u64)> {
        self.bucket_segs.iter().map(|(b, &s)| (b, s))
    }

    /// Whether a delete record in `seg` still has something to delete in an
    /// older segment that is still on disk.
    pub(super) fn delete_still_needed(&self, seg: u64, on_disk: &BTreeSet<u64>) -> bool {
        let Some(here) = self.seg_index.get(&seg) else {
            return false;
        };
        let older = || on_disk.range(..seg).filter_map(|o| self.seg_index.get(o));
        here.deleted_uids.iter().any(|uid| older().any(|i| i.state_uids.contains(uid)))
            || here.bucket_deletes.iter().any(|b| older().any(|i| i.bucket_creates.contains(b)))
            || here.sub_deletes.iter().any(|id| older().any(|i| i.sub_records.contains(id)))
    }

    /// A subscription's record was written in `segment` at `lsn`: its
    /// state (which replaces what was there) or, with none, its delete.
    pub(super) fn apply_sub(&mut self, id: SubId, sub: Option<Subscription>, segment: u64, lsn: u64) {
        match sub {
            Some(sub) => {
                self.index(segment).sub_records.insert(id.clone());
                self.subs.insert(id, SubEntry { sub, seg: segment, last_lsn: lsn });
            }
            None => {
                self.index(segment).sub_deletes.push(id.clone());
                self.subs.remove(&id);
            }
        }
    }
}

/// `segment` now holds the stream's latest whole-state record: older
/// data-less records no longer pin theirs.
fn pin_state(seg_index: &mut BTreeMap<u64, SegIndex>, s: &mut Stream, segment: u64) {
    s.state_seg = segment;
    s.meta_segs.clear();
    seg_index.entry(segment).or_default().state_uids.insert(s.uid);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::headers::Lifetime;

    fn key(s: &str) -> StreamKey {
        StreamKey { bucket: "b".into(), stream: s.into() }
    }

    fn stream(uid: u64, incarnation: u32) -> Stream {
        Stream::new(uid, incarnation, "text/plain".into(), Lifetime::Forever, 0, 0)
    }

    #[test]
    fn uids_name_exactly_the_streams_held() {
        let mut state = State::default();
        state.insert(key("a"), stream(7, 1));
        assert_eq!(state.key_of(7), Some(&key("a")));
        // Replacing the stream at a key forgets the old uid.
        state.insert(key("a"), stream(9, 1));
        assert_eq!(state.key_of(7), None);
        assert_eq!(state.key_of(9), Some(&key("a")));
        assert_eq!(state.len(), 1);
        let taken = state.take(&key("a")).unwrap();
        assert_eq!(taken.uid, 9);
        assert_eq!(state.key_of(9), None);
        assert_eq!(state.next_incarnation(&key("a")), 1, "taking is not deleting");
    }

    #[test]
    fn a_removed_stream_leaves_its_incarnation_behind() {
        let mut state = State::default();
        state.insert(key("a"), stream(1, 3));
        assert!(state.remove(&key("a")).is_some());
        assert_eq!(state.next_incarnation(&key("a")), 4);
        assert_eq!(state.next_incarnation(&key("b")), 1);
        assert!(state.remove(&key("a")).is_none());
    }

    #[test]
    fn uids_only_grow() {
        let mut state = State::default();
        assert_eq!(state.next_uid(), 1);
        state.uid_used(41);
        assert_eq!(state.next_uid(), 42);
        state.uid_used(5);
        assert_eq!(state.next_uid(), 42);
        state.uids_from(1_000);
        assert_eq!(state.next_uid(), 1_000);
        state.uids_from(10);
        assert_eq!(state.next_uid(), 1_000);
    }

    #[test]
    fn a_state_record_moves_the_streams_pin_and_clears_older_meta_segments() {
        let mut state = State::default();
        state.insert(key("a"), stream(1, 1));
        state.get_mut(&key("a")).unwrap().note_meta(3);
        state.note_state_of(&key("a"), 5);
        let s = state.get(&key("a")).unwrap();
        assert_eq!(s.state_seg, 5);
        assert!(s.meta_segs.is_empty());
        assert!(state.seg_index[&5].state_uids.contains(&1));
        state.forget_segment(5);
        assert!(!state.seg_index.contains_key(&5));
    }

    #[test]
    fn a_bucket_segment_follows_its_latest_create() {
        let mut state = State::default();
        state.note_bucket("x", 1, true);
        state.note_bucket("x", 4, true);
        assert_eq!(state.bucket_segments().collect::<Vec<_>>(), vec![(&"x".to_string(), 4)]);
        state.note_bucket("x", 6, false);
        assert_eq!(state.bucket_segments().count(), 0);
        assert_eq!(state.seg_index[&6].bucket_deletes, vec!["x".to_string()]);
    }
}
