//! Shards: one per core, each owning the streams that hash to it.
//!
//! `router` picks the owner, `mesh` carries requests between cores, `pump`
//! applies operations against protocol rules and the shard's log.

pub mod mesh;
pub mod pump;
pub mod router;

pub use pump::{Reply, Shard, ShardRequest};
