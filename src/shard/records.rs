//! Every record a shard writes, in one place: the header of each kind, and
//! what a record does to the shard's [`State`] once it is in the log. An
//! operation applies its record right after appending it (before the
//! durable wait, so later requests sequence after it); recovery applies the
//! same functions to the records it reads back (with lsn 0: all durable).

use super::state::State;
use super::stream::{Chunk, Snap, Stream};
use crate::protocol::persist::{self, AppendRecord, CreateRecord, StateRecord};
use crate::protocol::StreamKey;
use crate::storage::{RecordHeader, RecordLoc};

/// The header of a record about one stream (the log fills in the length).
pub(super) fn stream_header(kind: u8, uid: u64, incarnation: u32, stream_offset: u64) -> RecordHeader {
    RecordHeader { kind, stream_id: uid, incarnation, stream_offset, body_len: 0 }
}

/// The header of a bucket create or delete record.
pub(super) fn bucket_header(created: bool) -> RecordHeader {
    let kind = if created { persist::KIND_BUCKET_CREATE } else { persist::KIND_BUCKET_DELETE };
    RecordHeader { kind, stream_id: 0, incarnation: 0, stream_offset: 0, body_len: 0 }
}

/// A create record: the new stream at `key` (replacing any older one there),
/// holding the data it was created with (a PUT body or what a fork
/// inherits), the rest of the record's body.
pub(super) fn apply_create<'a>(
    state: &'a mut State,
    key: StreamKey,
    h: &RecordHeader,
    rec: CreateRecord,
    loc: RecordLoc,
    lsn: u64,
    now: i64,
) -> &'a mut Stream {
    let data_len = rec.data.len();
    let mut s = Stream::new(h.stream_id, h.incarnation, rec.content_type, rec.lifetime, rec.created_at_ms, now);
    s.created_lsn = lsn;
    s.write_lsn = lsn;
    s.closed = rec.closed;
    s.closed_lsn = lsn;
    s.last_lsn = lsn;
    s.fork = rec.fork;
    if data_len > 0 {
        let data_off = loc.body_len - data_len as u32;
        s.chunks.push(Chunk { start: 0, len: data_len as u32, loc, data_off, lsn });
        s.tail = data_len as u64;
    }
    state.note_state(&mut s, loc.segment);
    state.uid_used(h.stream_id);
    state.insert(key.clone(), s);
    state.get_mut(&key).expect("inserted above")
}

/// An append record written live at `lsn`: its data at the stream's tail,
/// its producer, Stream-Seq and closure, and the write times a listing
/// reports. (Recovery replays appends through `Stream::replay_append`,
/// which also bridges reclaimed records.)
pub(super) fn apply_append(
    s: &mut Stream,
    rec: &AppendRecord,
    loc: RecordLoc,
    data_off: usize,
    lsn: u64,
    durable_lsn: u64,
) {
    s.apply_append(rec, loc, data_off, lsn);
    if rec.close {
        s.closed_lsn = lsn;
    }
    if s.write_lsn <= durable_lsn {
        s.durable_write_ms = s.last_write_ms;
    }
    s.last_write_ms = rec.written_at_ms;
    s.write_lsn = lsn;
    s.last_lsn = lsn;
}

/// A state or snapshot record written live: the stream's whole
/// configuration now lives in `segment`.
pub(super) fn apply_state(state: &mut State, key: &StreamKey, segment: u64, lsn: u64) {
    state.note_state_of(key, segment);
    if let Some(s) = state.get_mut(key) {
        s.last_lsn = lsn;
    }
}

/// A snapshot record written live, carrying `rec` and a blob of
/// `blob_len` bytes at the end of its body: the data before the snapshot's
/// offset (`rec.trim`) is trimmed, the snapshots `rec` no longer lists are
/// dropped, and the new one (listed last) is the current one.
pub(super) fn apply_snapshot(s: &mut Stream, rec: &StateRecord, loc: RecordLoc, blob_len: usize) {
    let meta = rec.snapshots.last().expect("a snapshot record lists its snapshot last");
    s.trim_to(rec.trim);
    s.snapshots.retain(|o, _| rec.snapshots.iter().any(|m| m.offset == *o));
    let snap = Snap {
        content_type: meta.content_type.clone(),
        loc,
        data_off: loc.body_len - blob_len as u32,
        len: blob_len as u32,
        published_at_ms: meta.published_at_ms,
    };
    s.snapshots.insert(meta.offset, snap);
}

/// A delete record of the stream at `key`. Soft (forks still read its
/// data): it stays, answering 410, and its live readers are released.
/// Hard: it is gone, and a later create there is its next incarnation.
/// Returns the removed stream of a hard delete.
pub(super) fn apply_delete(state: &mut State, key: &StreamKey, soft: bool, segment: u64, lsn: u64) -> Option<Stream> {
    if soft {
        let s = state.get_mut(key)?;
        s.note_meta(segment);
        s.soft_deleted = true;
        s.usage = None;
        s.last_lsn = s.last_lsn.max(lsn);
        s.waiters.clear();
        return None;
    }
    let s = state.remove(key)?;
    state.note_deleted(s.uid, segment);
    Some(s)
}

/// A bucket create or delete record. The owner's table changes at once; a
/// create reaches the known buckets (where streams may be created) only
/// once durable, so the caller adds it there.
pub(super) fn apply_bucket(state: &mut State, bucket: &str, segment: u64, created: bool) {
    state.note_bucket(bucket, segment, created);
    if created {
        state.buckets_owned.insert(bucket.to_string());
    } else {
        state.buckets_owned.remove(bucket);
        state.buckets_known.remove(bucket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::headers::Lifetime;
    use crate::shard::ops::testkit::{create, key, loc, rec};

    #[test]
    fn headers_carry_the_stream_and_its_position() {
        let h = stream_header(persist::KIND_APPEND, 7, 2, 99);
        assert_eq!(
            (h.kind, h.stream_id, h.incarnation, h.stream_offset, h.body_len),
            (persist::KIND_APPEND, 7, 2, 99, 0)
        );
        assert_eq!(bucket_header(true).kind, persist::KIND_BUCKET_CREATE);
        assert_eq!(bucket_header(false).kind, persist::KIND_BUCKET_DELETE);
        assert_eq!(bucket_header(true).stream_id, 0);
    }

    #[test]
    fn a_create_with_data_holds_it_as_the_first_chunk_at_the_end_of_its_body() {
        let mut state = State::default();
        let c = CreateRecord {
            bucket: "b".into(),
            stream: "a".into(),
            content_type: "text/plain".into(),
            lifetime: Lifetime::Forever,
            closed: true,
            created_at_ms: 5,
            fork: None,
            data: b"hello".to_vec(),
        };
        let h = stream_header(persist::KIND_CREATE, 3, 1, 0);
        let s = apply_create(&mut state, key("a"), &h, c, loc(9, 40), 9, 6);
        assert_eq!((s.tail, s.chunks.len(), s.chunks[0].data_off, s.chunks[0].len), (5, 1, 35, 5));
        assert!(s.closed);
        assert_eq!((s.created_lsn, s.closed_lsn, s.state_seg), (9, 9, 9));
        assert_eq!((s.created_at_ms, s.last_access_ms), (5, 6));
        assert!(state.next_uid() > 3);
        assert!(!state.get(&key("a")).unwrap().visible(8).closed, "closed once the create is durable");
        assert!(state.get(&key("a")).unwrap().visible(9).closed);
    }

    #[test]
    fn an_append_moves_the_tail_at_once_and_the_visible_tail_once_durable() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        let s = state.get_mut(&key("a")).unwrap();
        let mut r = rec(b"abc", false);
        r.written_at_ms = 50;
        apply_append(s, &r, loc(2, 7), 4, 2, 1);
        assert_eq!((s.tail, s.last_lsn, s.write_lsn, s.last_write_ms), (3, 2, 2, 50));
        assert_eq!(s.durable_write_ms, 1_000, "the create's write time is what is durable");
        assert_eq!(s.visible(1).tail, 0);
        assert_eq!(s.visible(2).tail, 3);
        let mut close = rec(b"", true);
        close.written_at_ms = 60;
        apply_append(s, &close, loc(3, 4), 4, 3, 2);
        assert_eq!(s.durable_write_ms, 50, "the append's write became durable");
        assert!(s.closed && !s.visible(2).closed && s.visible(3).closed);
        assert_eq!(s.meta_segs, vec![3], "a close-only record is metadata recovery needs");
    }

    #[test]
    fn a_snapshot_trims_and_becomes_current() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        let s = state.get_mut(&key("a")).unwrap();
        apply_append(s, &rec(b"abc", false), loc(2, 7), 4, 2, 1);
        apply_append(s, &rec(b"de", false), loc(3, 6), 4, 3, 2);
        let mut st = s.state_record(&key("a"));
        st.trim = 3;
        st.snapshots.push(persist::SnapshotMeta { offset: 3, content_type: "x/y".into(), published_at_ms: 9 });
        apply_snapshot(s, &st, loc(4, 30), 10);
        assert_eq!(s.trim, 3);
        assert_eq!(s.chunks.len(), 1);
        let snap = &s.snapshots[&3];
        assert_eq!((snap.data_off, snap.len, snap.content_type.as_str()), (20, 10, "x/y"));
        assert_eq!(s.stored_bytes(), 2 + 10);
    }
}
