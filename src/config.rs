//! The server's configuration, decided once at boot (see `cli` for where
//! each value comes from: flag > environment > config file > default).

use crate::cell::config::CellConfig;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub shards: usize,
    pub direct_io: DirectIoMode,
    pub long_poll_timeout_ms: u64,
    pub segment_bytes: u64,
    /// Per shard: bytes of appends waiting for disk beyond which appends get 503.
    pub max_pending_bytes: u64,
    /// Open connections per shard (beyond it the longest-waiting idle one is closed).
    pub max_connections: usize,
    /// A request head must arrive within this many ms of its first byte (else 408).
    pub header_timeout_ms: u64,
    /// A request body must arrive within this many ms of its head (else 408).
    pub body_timeout_ms: u64,
    /// Producers whose state one stream holds at most (a new one beyond: 429).
    pub max_producers_per_stream: usize,
    /// A producer idle (no accepted append) for longer than this is forgotten.
    pub producer_idle_expiry_secs: u64,
    /// Pin each shard's executor to one CPU (off only for tests that run
    /// several servers on a small machine).
    pub pin: bool,
    /// A `tracing` filter: a level (`info`) or directives (`info,ringstream::storage=debug`).
    pub log_level: String,
    pub log_format: LogFormat,
    /// Absolute URLs (`Location`) follow the `Forwarded` / `X-Forwarded-*`
    /// headers of a proxy in front (TLS termination).
    pub trust_proxy: bool,
    /// Bearer tokens and bucket quotas (`--auth-file`); None: no access control.
    pub auth_file: Option<PathBuf>,
    /// `--no-auth`: serving a non-loopback address without an auth file is meant.
    pub no_auth: bool,
    /// Tiered storage (`--tier s3`); None: every segment stays local.
    pub tier: Option<TierConfig>,
    /// The replicated cell (`--node-id`, `--cell`, `--cell-secret-file`);
    /// None: a single node. Its `Debug` shows the secret's length only.
    pub cell: Option<CellConfig>,
    /// The file the cell's secret was read from (for `--check-config`'s report).
    pub cell_secret_file: Option<PathBuf>,
    /// The TOML file the settings were read from, if any.
    pub config_file: Option<PathBuf>,
}

/// Tiered storage: where sealed segments go and how much stays local.
#[derive(Clone, PartialEq, Eq)]
pub struct TierConfig {
    pub s3: crate::tier::S3Settings,
    /// Keys start with `{prefix}/{node id}/`.
    pub prefix: String,
    /// Local budget of the whole node, split evenly over the shards.
    pub hot_bytes: u64,
}

impl std::fmt::Debug for TierConfig {
    /// Never prints the secret key (`--check-config` prints the settings).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierConfig")
            .field("endpoint", &self.s3.endpoint)
            .field("bucket", &self.s3.bucket)
            .field("region", &self.s3.region)
            .field("access_key_id", &self.s3.access_key_id)
            .field("prefix", &self.prefix)
            .field("hot_bytes", &self.hot_bytes)
            .finish_non_exhaustive()
    }
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line (for log shippers).
    Json,
}

pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `--direct-io` as given by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DirectIoMode {
    /// Fail at boot if the data directory cannot do O_DIRECT.
    Required,
    /// Use O_DIRECT where the file system supports it, buffered I/O elsewhere.
    Optional,
    /// Always buffered I/O (still fdatasync on every flush).
    Disabled,
}
