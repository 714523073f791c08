//! Storage: per-shard append-only segment logs with group commit, and
//! tiering of sealed segments to an object store.
//!
//! Knows nothing of HTTP or of the protocol: it frames, checks, stores and
//! finds opaque records. glommio appears only in `dma_file`. The shard uses
//! [`Log`] (`tiered/`): the local log of `log/`, which knows only the local
//! disk, plus the segments tiering moved to an object store. `slots` keeps
//! a small value (a replica's term and vote) durably beside the segments.

pub mod dma_file;
pub mod error;
pub mod io;
pub mod log;
pub mod record;
pub mod sim_file;
pub mod slots;
pub mod stats;
pub mod tiered;

pub use error::{Error, Result};
pub use log::{LogConfig, RecordLoc, Recovered, RecoveryReport};
pub use record::RecordHeader;
pub use stats::{LogStats, TierStats};
pub use tiered::{Log, Tiering};
