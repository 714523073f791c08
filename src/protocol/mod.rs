//! The protocol's rules as pure code: no I/O, no glommio, no HTTP types.
//!
//! The HTTP edge turns requests into [`op::StreamOp`]s and [`op::BucketOp`]s; the shard checks them with
//! these functions against stream state and applies the verdict after the
//! storage says the change is durable.

pub mod cursor;
pub mod digits;
pub mod error;
pub mod headers;
pub mod incarnation;
pub mod json;
pub mod members;
pub mod names;
pub mod offset;
pub mod op;
pub mod persist;
pub mod rules;
pub mod subs;

pub use error::{Error, QuotaKind};
pub use incarnation::Incarnation;
pub use offset::Offset;
pub use op::*;
