//! Replicated cells (issue 33): three or five nodes whose shard *i* forms
//! Raft group *i*, so that an acknowledged append is durable on a majority.
//!
//! The server connects each shard to its group's replica
//! (`server/cell.rs`); what is here knows neither HTTP nor shards:
//! - [`confirm`]: a leader's freshness claims (HEAD, a 404, a read at the
//!   tail) wait until a read index round confirmed that it still leads:
//!   the waiters, one round at a time for all of them, its deadline.
//! - [`catch_up`]: a follower's live reads (long-poll, SSE) wait until it
//!   applied what its leader had committed when they came (a read index
//!   round through the leader): the waiters, the round, the deadline.
//! - [`config`]: the cell's voters, this node's id and the shared secret,
//!   as `--node-id`, `--cell` and `--cell-secret-file` give them (`cli`
//!   resolves them).
//! - [`board`]: what each replica publishes (atomics, one slot per
//!   group) for `/cellz`, `/leaderz` and the cell's metrics, read by any
//!   shard's HTTP edge.
//! - [`auth`]: peers prove they hold the secret (an HMAC-SHA256
//!   challenge both ways) before any Raft message crosses a link.
//! - [`wire`]: the frames of the peer link (a group's Raft message, prost
//!   encoded; a forwarded request or its answer, opaque), decoded with
//!   bounds and typed errors.
//! - [`group`]: one Raft group as a replica sees it: tikv's raft-rs
//!   `RawNode` driven by its owner (sans-I/O; no thread, timer or channel
//!   of its own), what must be written, sent and applied, and the
//!   proposals answered once committed (never before a majority holds
//!   them) or refused when they cannot be.
//! - [`link`]: a replica's links to its peers on its shard's executor:
//!   dial with backoff, accept, authenticate, frames both ways, bounded
//!   queues, requests forwarded to the leader and their answers, segment
//!   fetches (the one file here that uses glommio).
//! - [`log`]: raft-rs's log lines (slog) into ours (tracing).
//! - [`members`]: a group's members with their peer addresses, what a
//!   requested change needs now, what a committed one does (pure).
//! - [`asking`]: a membership change asked of a group's leader, run
//!   beside its replica: proposed, waited for until applied.
//! - [`observe`]: the bodies of `/leaderz` and `/cellz` from the board.
//! - [`replica`]: one group's replica at work on its shard's executor:
//!   messages, ticks, proposals of what the shard appended, each turn
//!   handed to the log, commits made visible.
//! - [`ship`]: segment shipping's transfer: a sealed segment file copied
//!   whole from a peer's log, chunk by chunk, each CRC-checked, into a
//!   segment store.
//! - [`unity`]: whether a node with more than one shard leads every group
//!   and its shards told one another again what a single node's keep in
//!   memory (what lets a request that crosses groups run there).
//! - [`store`]: a group's Raft log kept in its shard's segments (a batched
//!   log: an entry is a group-commit batch where it lies), and its term,
//!   vote and members in a two-slot file beside them.
//!
//! The deterministic simulation in `tests/cell_sim.rs` steps three or five
//! groups through dropped, duplicated and reordered messages, partitions
//! and power cuts, and checks Raft's safety properties and that every
//! acknowledged proposal survives. Without `--cell` nothing here runs.

pub mod amnesia;
pub mod asking;
pub mod auth;
pub mod board;
pub mod catch_up;
pub mod config;
pub mod confirm;
pub mod group;
pub mod link;
pub mod log;
pub mod members;
pub mod observe;
pub mod replica;
pub mod ship;
pub mod skeletons;
pub mod store;
pub mod unity;
pub mod wire;
