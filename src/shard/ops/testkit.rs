//! Building a shard's state in unit tests the way the log would: each
//! helper applies a record through `records`, at a made-up location.

use crate::protocol::headers::{Lifetime, ProducerHeaders};
use crate::protocol::persist::{self, AppendRecord, CreateRecord};
use crate::protocol::{AppendReq, StreamKey};
use crate::shard::records;
use crate::shard::state::State;
use crate::storage::RecordLoc;

/// A stream of bucket "b".
pub(crate) fn key(stream: &str) -> StreamKey {
    StreamKey { bucket: "b".into(), stream: stream.into() }
}

/// A record at segment `lsn` (one record a segment keeps the arithmetic
/// obvious) of `body_len` bytes.
pub(crate) fn loc(lsn: u64, body_len: u32) -> RecordLoc {
    RecordLoc { segment: lsn, pos: 0, body_len }
}

/// An append record of `data`.
pub(crate) fn rec(data: &[u8], close: bool) -> AppendRecord {
    AppendRecord { close, stream_seq: None, producer: None, written_at_ms: 1_000, data: data.to_vec() }
}

/// An append request of `body`, as text/plain.
pub(crate) fn req(body: &[u8]) -> AppendReq {
    AppendReq {
        content_type: Some("text/plain".into()),
        body: body.to_vec(),
        close: false,
        stream_seq: None,
        producer: None,
        if_match: None,
    }
}

/// Creates stream `name` (empty, never expiring) with its record at `lsn`.
pub(crate) fn create(state: &mut State, name: &str, content_type: &str, lsn: u64) -> u64 {
    create_with(state, name, content_type, Lifetime::Forever, lsn)
}

pub(crate) fn create_with(state: &mut State, name: &str, content_type: &str, lifetime: Lifetime, lsn: u64) -> u64 {
    let k = key(name);
    let uid = state.next_uid();
    let h = records::stream_header(persist::KIND_CREATE, uid, state.next_incarnation(&k), 0);
    let c = CreateRecord {
        bucket: k.bucket.clone(),
        stream: k.stream.clone(),
        content_type: content_type.into(),
        lifetime,
        closed: false,
        created_at_ms: 1_000,
        fork: None,
        data: Vec::new(),
    };
    records::apply_create(state, k, &h, c, loc(lsn, 10), lsn, 1_000);
    uid
}

/// Appends `data` (by `producer`, if any) to stream `name` at `lsn`.
pub(crate) fn append(state: &mut State, name: &str, data: &[u8], producer: Option<ProducerHeaders>, lsn: u64) {
    let mut r = rec(data, false);
    r.producer = producer.map(|p| (p.id, p.epoch, p.seq));
    let s = state.get_mut(&key(name)).expect("created first");
    records::apply_append(s, &r, loc(lsn, data.len() as u32 + 4), 4, lsn, lsn.saturating_sub(1));
}

/// Publishes a snapshot of `blob_len` bytes at `offset` of stream `name`,
/// its record at `lsn`, as the live operation does.
pub(crate) fn publish(state: &mut State, name: &str, offset: u64, blob_len: usize, lsn: u64) {
    use crate::protocol::{Offset, SnapshotReq};
    let req = SnapshotReq { offset: Offset::new(0, offset), content_type: None, body: vec![0; blob_len] };
    let plan = crate::shard::ops::snapshot::plan_publish(state, &key(name), &req, "text/plain", 2_000, lsn)
        .expect("a valid snapshot");
    records::apply_state(state, &key(name), lsn, lsn);
    let s = state.get_mut(&key(name)).unwrap();
    records::apply_snapshot(s, &plan.rec, loc(lsn, 100 + blob_len as u32), blob_len);
}
