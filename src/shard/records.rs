//! Every record a shard writes, in one place: the header of each kind, and
//! what a record does to the shard's [`State`] once it is in the log. An
//! operation applies its record right after appending it (before the
//! durable wait, so later requests sequence after it); recovery applies the
//! same functions to the records it reads back (with lsn 0: all durable).

use super::state::State;
use super::stream::{Chunk, Stream};
use crate::protocol::persist::{self, AppendRecord, CreateRecord};
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
