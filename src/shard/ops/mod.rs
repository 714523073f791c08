//! The shard's operations, one concern a file. Each runs on the owning
//! shard's thread in the same steps: plan on the [`State`](super::state::State)
//! (synchronous: the verdict, the offsets, the conflicts; unit-tested here
//! without a log), append its records, apply them to the state
//! (`super::records`), await durability, answer.

mod append;
mod bucket;
mod create;
mod fork;
pub(super) mod lifecycle;
mod read;
mod reclaim;
mod retention;
pub(super) mod snapshot;
#[cfg(test)]
pub(super) mod testkit;
mod usage;

pub(super) use bucket::count_in_bucket;
pub(super) use read::head;
pub(super) use snapshot::latest as latest_snapshot;
