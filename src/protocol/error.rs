//! Protocol errors: what went wrong in terms of the protocol, with the data
//! the HTTP edge needs for its headers. Only `http::respond` maps them to
//! status codes (and the /ds vs /v1 dialect).

use super::offset::Offset;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Error {
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("not found")]
    NotFound,
    #[error("gone: {0}")]
    Gone(std::borrow::Cow<'static, str>),
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
    /// The write would take its bucket past a quota of the auth file
    /// (nothing was written): 429 for `max_streams`, 507 for `max_bytes`.
    #[error("bucket {bucket}: quota {} of {limit} exceeded ({used} used, {requested} more asked)", quota.name())]
    QuotaExceeded { quota: QuotaKind, bucket: String, limit: u64, used: u64, requested: u64 },
    /// An append from a producer the stream holds no state for, while it
    /// holds `limit` producers' state already (nothing was written): 429.
    /// (Forwarded answers encode variants by position: add new ones last.)
    #[error("the stream holds the state of {limit} producers, its limit; a new producer may start once one has been idle long enough")]
    ProducerLimit { limit: u64 },
    /// `Stream-Incarnation` named another creation of the stream than the
    /// one at its path now (deleted and re-created since): 412, nothing
    /// written. (After `ProducerLimit`: variants encode by position.)
    #[error("precondition failed: the creation of this stream that Stream-Incarnation names is gone (deleted; the path holds another stream now, or none)")]
    IncarnationMismatch,
    /// A read below the stream's retained start (data a snapshot or an
    /// explicit retention trimmed): 410 with `Stream-Retained-Offset`, so
    /// that a client knows where to read on. (Last: variants encode by
    /// position.)
    #[error("gone: {reason}")]
    Trimmed { retained: Offset, reason: std::borrow::Cow<'static, str> },
    /// In a cell: the write was discarded before the replica proposed it
    /// (it stopped leading, a leadership hand-over among them), so it was
    /// never applied anywhere: 503, and safe to run again as it is (the
    /// shard does, on the new leader). (Last: variants encode by position.)
    #[error("the write was discarded before it was replicated (not applied): {0}")]
    Discarded(String),
    /// The subscription API's refusals, each with the code its JSON body
    /// names (`WEBHOOK_URL_REJECTED`, `ALREADY_CLAIMED` with the current
    /// holder, `FENCED`, ...). (Last: variants encode by position.)
    #[error("{code}: {message}")]
    Refused { status: u16, code: String, message: String, holder: Option<String> },
}

/// Which quota of a `[[bucket]]` entry a write would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum QuotaKind {
    MaxStreams,
    MaxBytes,
}

impl QuotaKind {
    /// The key in the auth file, which the error body names.
    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::MaxStreams => "max_streams",
            QuotaKind::MaxBytes => "max_bytes",
        }
    }
}
