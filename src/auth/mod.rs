//! Who may do what: bearer tokens scoped to buckets (the auth file of
//! `--auth-file`), checked at the HTTP edge before a request reaches a shard.
//!
//! - [`file`](mod@file): the TOML format, validated into tokens and bucket quotas;
//! - [`bearer`]: the `Authorization` header and token digests (SHA-256,
//!   compared in constant time; the server never holds a token);
//! - [`grants`]: bucket patterns, rights, and the pure decision for one
//!   request ([`grants::authorize`]);
//! - [`access`]: the grants in force, swapped whole on SIGHUP without a lock;
//! - [`counters`]: per-token, per-shard request counts for /metrics.
//!
//! Nothing here does I/O but [`file::load`], nor knows HTTP or shards.

pub mod access;
pub mod bearer;
pub mod counters;
pub mod file;
pub mod grants;
