//! Protocol errors: what went wrong in terms of the protocol, with the data
//! the HTTP edge needs for its headers. Only `http::respond` maps them to
//! status codes (and the /ds vs /v1 dialect).

use super::offset::Offset;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("not found")]
    NotFound,
    #[error("gone: {0}")]
    Gone(&'static str),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("payload too large")]
    TooLarge,
    /// Append to a closed stream (F26): 409 with Stream-Closed and the final offset.
    #[error("stream is closed")]
    StreamClosed { next_offset: Offset },
    /// Producer epoch older than the stored one (F31): 403 on /v1, 409 on /ds.
    #[error("stale producer epoch; current is {current}")]
    StaleEpoch { current: u64 },
    /// Producer sequence gap (F31): 409 with expected/received.
    #[error("producer sequence gap: expected {expected}, received {received}")]
    SeqGap { expected: u64, received: u64 },
    /// If-Match did not match the current ETag: 412.
    #[error("precondition failed: the stream's ETag does not match If-Match")]
    PreconditionFailed,
    /// Write backpressure: 503 + Retry-After.
    #[error("too many writes waiting for disk; retry later")]
    Overloaded { retry_after_secs: u64 },
    /// Storage failed underneath (a failed fsync poisons the shard): 503.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The shard's disk is full (ENOSPC/EDQUOT): 507 + Retry-After. Like
    /// `Unavailable`, the shard refuses writes until restarted; reads go on.
    #[error("insufficient storage: {0}")]
    InsufficientStorage(String),
}
