//! Typed operations and their outcomes. Everything here is `Send`: an op may
//! travel to the owning shard over the cross-core mesh and its outcome back.

use super::headers::{Lifetime, ProducerHeaders};
use super::incarnation::Incarnation;
use super::offset::{Offset, ReadFrom};

/// Which HTTP surface a request came through; decides the status dialect and
/// whether the bucket must exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Surface {
    /// `/ds/{bucket}/{stream}`: the product API (snakream.md).
    Ds,
    /// `/v1/stream/{path}`: the base Durable Streams protocol.
    V1,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct StreamKey {
    pub bucket: String,
    pub stream: String,
}

/// `Stream-Forked-From` and friends on a PUT (F97–F101).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForkReq {
    pub source: StreamKey,
    /// `Stream-Fork-Offset`; None = the source's tail.
    pub offset: Option<Offset>,
    /// `Stream-Fork-Sub-Offset` (bytes, or messages for JSON); 0 = none.
    pub sub_offset: u64,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CreateReq {
    /// The Content-Type header as sent, if any.
    pub content_type: Option<String>,
    pub lifetime: Lifetime,
    pub closed: bool,
    pub body: Vec<u8>,
    pub if_match: Option<String>,
    pub fork: Option<ForkReq>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AppendReq {
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    pub close: bool,
    pub stream_seq: Option<String>,
    pub producer: Option<ProducerHeaders>,
    pub if_match: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Live {
    No,
    LongPoll,
    /// The client asked for SSE. The connection runs the SSE loop; each of
    /// its catch-up rounds reaches the shard as `Sse` (read now, with a
    /// cursor), each wait as `LongPoll`.
    Sse,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReadReq {
    pub from: ReadFrom,
    pub live: Live,
    pub cursor: Option<String>,
    pub if_none_match: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum StreamOp {
    Create(CreateReq),
    Append(AppendReq),
    Read(ReadReq),
    /// `If-None-Match` equal to the stream's ETag → 304 (snakream.md).
    Head {
        if_none_match: Option<String>,
    },
    Delete,
    /// `PUT /ds/{b}/{s}/snapshot/{offset}` (snakream.md).
    SnapshotPublish(SnapshotReq),
    /// `GET /ds/{b}/{s}/snapshot`: where the current snapshot is (307).
    SnapshotLatest,
    /// `GET /ds/{b}/{s}/snapshot/{offset}`.
    SnapshotRead {
        offset: Offset,
    },
    /// `DELETE /ds/{b}/{s}/snapshot/{offset}`.
    SnapshotDelete {
        offset: Offset,
    },
    /// `GET /ds/{b}/{s}/bootstrap`: the current snapshot and the messages after it.
    Bootstrap,
    /// `PUT /ds/{b}/{s}/retention/{offset}`: moves the stream's retained
    /// start forward to `offset` (issue 35).
    Retain {
        offset: Offset,
    },
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SnapshotReq {
    pub offset: Offset,
    /// The blob's own Content-Type, as sent.
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BucketOp {
    Create,
    Get,
    Delete,
}

/// `GET /ds/{bucket}/streams?prefix=&after=&limit=`: one page of a bucket's
/// streams, sorted by stream ID (byte order).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListReq {
    /// Only stream IDs starting with these bytes ("" = all).
    pub prefix: String,
    /// Exclusive cursor: only stream IDs sorting after it.
    pub after: Option<String>,
    /// Page size, `1..=BUCKET_LIST_LIMIT_MAX`.
    pub limit: usize,
}

/// One stream in a bucket listing (durable state only).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedStream {
    pub stream_id: String,
    pub closed: bool,
    pub content_type: String,
    /// The stream's next offset: the token `Stream-Next-Offset` carries.
    pub tail_offset: Offset,
    pub created_at_ms: i64,
    pub last_write_at_ms: i64,
}

/// A page of a bucket listing, as the HTTP edge renders it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listing {
    pub bucket: String,
    pub prefix: String,
    /// Streams in the bucket whose ID matches the prefix (all pages).
    pub stream_count: u64,
    pub streams: Vec<ListedStream>,
    /// The `after` for the next page; None on the last page.
    pub next_cursor: Option<String>,
    pub has_more: bool,
}

/// What a stream looks like to a client right now (only durable state).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamInfo {
    /// Which creation of its path the stream is (`Stream-Incarnation`).
    pub incarnation: Incarnation,
    pub content_type: String,
    pub next_offset: Offset,
    pub closed: bool,
    /// Quoted stream-level ETag (changes on every append, close, re-create).
    pub etag: String,
    pub ttl_secs: Option<u64>,
    pub expires_at: Option<String>,
    /// Offset of the current snapshot, if one was published (`/ds`).
    pub snapshot_offset: Option<Offset>,
    /// Where the retained data starts, once a snapshot or retention moved
    /// it past 0 (`Stream-Retained-Offset`).
    pub retained_offset: Option<Offset>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProducerAck {
    pub epoch: u64,
    /// Highest accepted sequence number.
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadOutcome {
    pub info: StreamInfo,
    pub body: Vec<u8>,
    /// Where the next read starts.
    pub next_offset: Offset,
    pub up_to_date: bool,
    /// The stream is closed and this response reaches its end.
    pub closed_at_end: bool,
    /// Quoted ETag of this response's range; None for `offset=now`.
    pub etag: Option<String>,
    pub not_modified: bool,
    pub offset_now: bool,
    pub cursor: Option<u64>,
    /// Long-poll ended without data (204).
    pub timed_out: bool,
}

impl ReadOutcome {
    /// Whether the read carries messages (an empty read of a JSON stream is `[]`).
    pub fn has_data(&self) -> bool {
        !(self.body.is_empty() || (super::headers::is_json(&self.info.content_type) && self.body == b"[]"))
    }
}

/// `GET .../bootstrap`: the current snapshot (if any), then the retained
/// messages after it, each its own part (snakream.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bootstrap {
    pub info: StreamInfo,
    /// (offset, Content-Type, blob) of the current snapshot.
    pub snapshot: Option<(Offset, String, Vec<u8>)>,
    /// Content-Type of every message part.
    pub message_type: String,
    /// Each message after the snapshot, in order.
    pub messages: Vec<Vec<u8>>,
    /// Where a reader continues (after the last message included).
    pub next_offset: Offset,
    pub up_to_date: bool,
    pub closed_at_end: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// PUT: `new` = 201, else 200 (identical config existed).
    Created {
        info: StreamInfo,
        new: bool,
    },
    /// POST. `duplicate`: an idempotent-producer retry, nothing written.
    Appended {
        info: StreamInfo,
        producer: Option<ProducerAck>,
        duplicate: bool,
        close_only: bool,
    },
    Read(ReadOutcome),
    /// HEAD. `not_modified`: If-None-Match matched the stream's ETag (304).
    Head {
        info: StreamInfo,
        not_modified: bool,
    },
    /// A stream (or one of its snapshots) was deleted: which creation.
    Deleted {
        incarnation: Incarnation,
    },
    /// A snapshot was published (204).
    SnapshotPublished {
        info: StreamInfo,
        offset: Offset,
    },
    /// `GET .../snapshot`: 307 to the current snapshot.
    SnapshotAt {
        incarnation: Incarnation,
        offset: Offset,
    },
    /// `GET .../snapshot/{offset}`: the blob.
    Snapshot {
        info: StreamInfo,
        offset: Offset,
        content_type: String,
        body: Vec<u8>,
    },
    Bootstrap(Bootstrap),
    BucketCreated,
    BucketInfo {
        bucket: String,
        streams: u64,
    },
    BucketDeleted,
    /// A page of a bucket listing (gathered from every shard).
    Listing(Listing),
    /// `PUT .../retention/{offset}` (204): the retained start now.
    /// `moved`: a record moved it; else it already was there or past it.
    Retained {
        info: StreamInfo,
        offset: Offset,
        moved: bool,
    },
    /// An answer of the subscription API (`__ds`): its status and body as
    /// the shard made them. (Last: variants encode by position.)
    Control {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// A group's answer to a membership change (`/_cell/members`).
    Members(super::members::MemberOutcome),
}
