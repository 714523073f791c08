//! Storage: per-shard append-only segment logs with group commit.
//!
//! Knows nothing of HTTP or of the protocol: it frames, checks, stores and
//! finds opaque records. glommio appears only in `dma_file`.

pub mod dma_file;
pub mod error;
pub mod io;
pub mod log;
pub mod record;
pub mod sim_file;

pub use error::{Error, Result};
pub use log::{Log, LogConfig, LogStats, RecordLoc, Recovered, RecoveryReport, TierStats, Tiering};
pub use record::RecordHeader;
