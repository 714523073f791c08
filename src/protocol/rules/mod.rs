//! The protocol's decisions as pure functions over plain state: they check a
//! request and say what should happen, and change nothing. The shard applies
//! the verdict (and acknowledges only after the log made it durable). One
//! file per kind of decision.

mod append;
mod create;
mod expiry;
mod fork;
mod incarnation;
mod producer;
mod read;
mod retention;
mod snapshot;

pub use append::{check_append, AppendContext, AppendVerdict};
pub use create::{recreate_matches, same_config, CreateConfig};
pub use expiry::{access_report_due, expired};
pub use fork::{check_fork_source, ForkSource};
pub use incarnation::check_incarnation;
pub use producer::{admit_producer, check_producer, producer_idle, ProducerPolicy, ProducerState, ProducerVerdict};
pub use read::{range_etag, read_start, stream_etag, Retained};
pub use retention::{retention_boundary, RetentionTarget};
pub use snapshot::{check_snapshot_offset, SnapshotTarget};
