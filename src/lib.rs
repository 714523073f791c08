//! ringstream: a durable-streams HTTP server built as a thread-per-core
//! storage engine.
//!
//! Request path: `http::conn` -> `http::parse` -> `http::route` (classify,
//! once) -> `shard::dispatch` (the shard is the edge's `Dispatch`: local, or
//! over `shard::mesh` to the owning core) -> the shard's op (`shard::append`,
//! `shard::read`, ...) -> `storage::log` (group commit: O_DIRECT|O_DSYNC
//! write) -> ack -> `http::respond` -> `http::encode`. docs/ARCHITECTURE.md
//! traces it file by file.
//!
//! # Layout
//! - [`limits`]: every bound, named once.
//! - [`metrics`]: counters and histograms, Prometheus text; pure, used by
//!   `http`, `shard` and `storage` like `limits`.
//! - [`notify`]: a single-waiter wake-up flag, used by `http` and `storage`.
//! - [`latch`]: a countdown latch across threads, for boot and shutdown.
//! - [`build_info`]: version and git commit of the build (build.rs).
//! - [`config`], [`cli`]: flags, environment and config file to configuration.
//! - [`auth`]: bearer tokens scoped to buckets (the `--auth-file`): the file
//!   format, token digests, the pure authorisation decision, the grants in
//!   force (swapped on SIGHUP); pure but for reading the file.
//! - [`quota`]: bucket usage counters shared by the shards, and their limits.
//! - [`bell`]: a bell any thread rings and executor tasks await (reloads).
//! - [`preflight`]: startup checks (io_uring, locked memory, O_DIRECT, the
//!   data directory's lock) with messages that say what to change.
//! - [`procstat`]: the process's CPU, memory and descriptors and the data
//!   directory's free space, read at scrape time for `/metrics`.
//! - [`server`]: the process's life: host checks, boot (executors,
//!   recovery, listeners), signals, shutdown; no protocol logic.
//! - [`http`]: bytes to typed requests and responses back; the /ds vs /v1 dialect.
//! - [`shard`]: ownership (stable hash), the cross-core mesh, and one file
//!   per kind of operation on a shard's streams.
//! - [`protocol`]: the Durable Streams rules as pure functions; no I/O.
//! - [`storage`]: per-shard segment logs, recovery, tiering to an object
//!   store; no HTTP, no protocol.
//! - [`cell`]: replicated cells: the cell's configuration, peer
//!   authentication, the peer link's frames and one Raft group's driver
//!   (raft-rs); not yet on a request path.
//! - [`tier`]: the object store client and the webhook delivery thread,
//!   each on a thread of its own (tokio, `object_store` and `reqwest`
//!   appear only there).
//!
//! # Dependency rule
//! `http -> protocol, shard::message, auth`; `shard -> protocol, storage, quota, tier`;
//! `auth -> quota, metrics, limits`; `quota -> protocol`;
//! `protocol -> limits`; `storage -> limits, metrics, notify, tier`; `tier -> limits`; `metrics -> limits`. storage and protocol never
//! import http or glommio networking; glommio appears only in `server`,
//! `shard::mesh`, `http::conn` and `storage::dma_file` (checked by
//! tests/tidy.rs).

pub mod alloc;
pub mod auth;
pub mod bell;
pub mod build_info;
pub mod cell;
pub mod cli;
pub mod config;
pub mod http;
pub mod latch;
pub mod limits;
pub mod metrics;
pub mod notify;
pub mod preflight;
pub mod procstat;
pub mod protocol;
pub mod quota;
pub mod server;
pub mod shard;
pub mod storage;
pub mod tier;
