//! The shard's requests as the in-process cell tests build them
//! (`tests/cell_shard.rs`, `tests/cell_read_index.rs`): octet-stream
//! streams in one `/ds` bucket, no producer, no preconditions.

use ringstream::protocol::headers::Lifetime;
use ringstream::protocol::offset::{Offset, ReadFrom};
use ringstream::protocol::{AppendReq, CreateReq, Live, ReadReq, StreamKey, StreamOp, Surface};
use ringstream::shard::ShardRequest;

pub const BUCKET: &str = "cell";
pub const OCTET: &str = "application/octet-stream";

/// `op` on stream `stream` of [`BUCKET`].
pub fn on(stream: &str, op: StreamOp) -> ShardRequest {
    let key = StreamKey { bucket: BUCKET.into(), stream: stream.into() };
    ShardRequest::Stream { key, surface: Surface::Ds, if_incarnation: None, op }
}

pub fn create() -> StreamOp {
    StreamOp::Create(CreateReq {
        content_type: Some(OCTET.into()),
        lifetime: Lifetime::Forever,
        closed: false,
        body: Vec::new(),
        if_match: None,
        fork: None,
    })
}

pub fn append(body: &[u8]) -> StreamOp {
    StreamOp::Append(AppendReq {
        content_type: Some(OCTET.into()),
        body: body.to_vec(),
        close: false,
        stream_seq: None,
        producer: None,
        if_match: None,
    })
}

pub fn head() -> StreamOp {
    StreamOp::Head { if_none_match: None }
}

pub fn read_from_start() -> StreamOp {
    StreamOp::Read(ReadReq { from: ReadFrom::At(Offset::new(0, 0)), live: Live::No, cursor: None, if_none_match: None })
}

/// A live read (`live`: long-poll or SSE) from the stream's start.
pub fn read_live(live: Live) -> StreamOp {
    StreamOp::Read(ReadReq { from: ReadFrom::At(Offset::new(0, 0)), live, cursor: None, if_none_match: None })
}
