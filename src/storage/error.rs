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
    #[error("an earlier write or sync failed; the shard refuses writes until restarted")]
    Poisoned,
    #[error("too many bytes waiting for disk")]
    Full,
    #[error("record of {0} bytes does not fit in a segment")]
    TooLarge(usize),
}

impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::Io { op, segment, source } => {
                Error::Io { op, segment: *segment, source: io::Error::new(source.kind(), source.to_string()) }
            }
            Error::Corrupt { segment, position } => Error::Corrupt { segment: *segment, position: *position },
            Error::Poisoned => Error::Poisoned,
            Error::Full => Error::Full,
            Error::TooLarge(n) => Error::TooLarge(*n),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
