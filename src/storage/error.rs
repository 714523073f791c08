//! Storage errors, with enough context to act on.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op} failed on segment {segment}: {source}")]
    Io {
        op: &'static str,
        segment: u64,
        #[source]
        source: io::Error,
    },
    #[error("corrupt record in segment {segment} at byte {position}, followed by newer data: refusing to serve it")]
    Corrupt { segment: u64, position: u64 },
    /// The device is out of space (ENOSPC, or EDQUOT for a quota) on a
    /// write or while creating a segment. Poisons the log like any other
    /// failed write: the shard refuses writes until it is restarted with
    /// space available; what was durable stays readable and intact.
    #[error("{op} on segment {segment} failed: no space left on the device; writes refused until space is freed and the server restarted")]
    NoSpace { op: &'static str, segment: u64 },
    #[error("an earlier write or sync failed; the shard refuses writes until restarted")]
    Poisoned,
    #[error("too many bytes waiting for disk")]
    Full,
    /// A batched log cut back its uncommitted tail (a replica that stopped
    /// leading, or a follower whose tail conflicts with its leader's):
    /// the awaited record is gone.
    #[error("the record was discarded: the replicated log cut back its uncommitted tail")]
    CutBack,
    /// A batched log's replica stopped leading while the record waited to
    /// be committed: whether it will be is not known here (the client
    /// retries; with its producer headers a retry is not applied twice).
    #[error("the replica stopped leading before the record was committed: it may or may not be; retry")]
    Abandoned,
    /// A batched log whose replica does not lead takes no append of the
    /// layer above.
    #[error("this replica does not lead its group: writes go to the leader")]
    NotLeader,
    /// A replicated batch that does not fit this replica's log (another
    /// position, a record that does not verify, no room for its close).
    #[error("replicated batch refused: {0}")]
    Batch(String),
    #[error("record of {0} bytes does not fit in a segment")]
    TooLarge(usize),
    /// A read reached a range of a remote segment that is not in the block
    /// cache: fetch it ([`crate::storage::Log::fetch_cold`]), then read again.
    #[error("segment {} blocks {:?} are in the object store, not cached", .0.segment, .0.blocks)]
    Cold(ColdNeed),
    /// The object store failed a request for a segment (down, timed out,
    /// a missing object, an upload that did not verify).
    #[error("object store: {op} of segment {segment} failed: {reason}")]
    ObjectStore { op: &'static str, segment: u64, reason: String },
}

/// The blocks of a remote segment a read needs (see `TIER_BLOCK_BYTES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColdNeed {
    pub segment: u64,
    pub blocks: std::ops::RangeInclusive<u64>,
}

impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::Io { op, segment, source } => {
                Error::Io { op, segment: *segment, source: io::Error::new(source.kind(), source.to_string()) }
            }
            Error::NoSpace { op, segment } => Error::NoSpace { op, segment: *segment },
            Error::Corrupt { segment, position } => Error::Corrupt { segment: *segment, position: *position },
            Error::Poisoned => Error::Poisoned,
            Error::Full => Error::Full,
            Error::CutBack => Error::CutBack,
            Error::Abandoned => Error::Abandoned,
            Error::NotLeader => Error::NotLeader,
            Error::Batch(r) => Error::Batch(r.clone()),
            Error::TooLarge(n) => Error::TooLarge(*n),
            Error::Cold(n) => Error::Cold(n.clone()),
            Error::ObjectStore { op, segment, reason } => {
                Error::ObjectStore { op, segment: *segment, reason: reason.clone() }
            }
        }
    }
}

impl Error {
    /// A failed I/O call on `segment`: `NoSpace` for ENOSPC and EDQUOT, so
    /// the HTTP edge can tell "disk full" from "disk broken"; `Io` otherwise.
    pub fn io(op: &'static str, segment: u64, source: io::Error) -> Error {
        match source.kind() {
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => Error::NoSpace { op, segment },
            _ => Error::Io { op, segment, source },
        }
    }

    /// [`Error::io`] as a `map_err` argument: `.map_err(Error::io_at("read", seg))`.
    pub fn io_at(op: &'static str, segment: u64) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::io(op, segment, source)
    }

    /// An operation that needs a sealed segment named one that is not
    /// (unknown, still written, or being moved).
    pub fn not_sealed(op: &'static str, segment: u64) -> Error {
        let source = io::Error::new(io::ErrorKind::InvalidInput, "segment is not sealed");
        Error::Io { op, segment, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
