//! Command line: flags -> [`Config`].

use crate::config::{online_cpus, Config};
use crate::limits::{CONN_BODY_TIMEOUT_MS, CONN_HEADER_TIMEOUT_MS, CONN_REQUEST_TIMEOUT_MS_MIN, SHARD_CONNECTIONS_MAX};
use crate::limits::{
    LONG_POLL_TIMEOUT_MS_DEFAULT, LONG_POLL_TIMEOUT_MS_MAX, SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MAX,
    SEGMENT_BYTES_MIN, SHARDS_MAX, SHARD_PENDING_BYTES_MAX, SHARD_PENDING_BYTES_MIN,
};
use crate::storage::dma_file::DirectIoMode;
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// ringstream: a durable-streams HTTP server.
///
/// Serves the product API under /ds/{bucket}/{stream} and the base Durable
/// Streams protocol under /v1/stream/{path} over one storage engine. One
/// pinned io_uring executor per shard; every append is acknowledged only
/// after it is on stable storage (group-committed O_DIRECT|O_DSYNC write,
/// or buffered write + fdatasync without O_DIRECT).
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
pub struct Cli {
    /// Address to listen on (every shard listens on it with SO_REUSEPORT).
    /// Port 0 picks a free port; the chosen address is printed at startup.
    #[arg(long, default_value = "127.0.0.1:4437", env = "RINGSTREAM_LISTEN")]
    pub listen: SocketAddr,

    /// Directory for the segment logs (one sub-directory per shard). Created
    /// if missing. A directory written with N shards must be served with N.
    #[arg(long, default_value = "./data", env = "RINGSTREAM_DATA_DIR")]
    pub data_dir: PathBuf,

    /// Number of shards (executors, one per core). Default: the number of
    /// online CPUs.
    #[arg(long, env = "RINGSTREAM_SHARDS")]
    pub shards: Option<usize>,

    /// O_DIRECT use: `required` fails at boot if the data directory's file
    /// system cannot do it; `optional` uses it where possible (tmpfs cannot);
    /// `disabled` uses buffered writes. Every mode makes a write durable
    /// (O_DSYNC, or fdatasync) before acknowledging it.
    #[arg(long, value_enum, default_value = "optional", env = "RINGSTREAM_DIRECT_IO")]
    pub direct_io: DirectIoMode,

    /// How long a long-poll read waits at the tail before answering 204.
    #[arg(long, default_value_t = LONG_POLL_TIMEOUT_MS_DEFAULT, env = "RINGSTREAM_LONG_POLL_TIMEOUT_MS")]
    pub long_poll_timeout_ms: u64,

    /// Size of each segment file in bytes (advanced; a multiple of 4096).
    #[arg(long, default_value_t = SEGMENT_BYTES_DEFAULT, env = "RINGSTREAM_SEGMENT_BYTES")]
    pub segment_bytes: u64,

    /// Per shard, bytes of appends accepted but not yet on disk beyond which
    /// new appends get 503 + Retry-After (backpressure; bounds memory). At
    /// least 65536; one append larger than it is still taken when nothing
    /// else is waiting.
    #[arg(long, default_value_t = SHARD_PENDING_BYTES_MAX, env = "RINGSTREAM_MAX_PENDING_BYTES")]
    pub max_pending_bytes: u64,

    /// Open connections per shard. A new connection beyond it closes the
    /// connection that has waited longest for its next request (idle
    /// keep-alive, or a head still arriving); if every connection is busy
    /// with a request, the newcomer gets 503 + Retry-After.
    #[arg(long, default_value_t = SHARD_CONNECTIONS_MAX, env = "RINGSTREAM_MAX_CONNECTIONS")]
    pub max_connections: usize,

    /// A request head must be complete within this many milliseconds of its
    /// first byte, else 408 and the connection is closed (slowloris).
    #[arg(long, default_value_t = CONN_HEADER_TIMEOUT_MS, env = "RINGSTREAM_HEADER_TIMEOUT_MS")]
    pub header_timeout_ms: u64,

    /// A request body must be complete within this many milliseconds of the
    /// end of its head, else 408 and the connection is closed.
    #[arg(long, default_value_t = CONN_BODY_TIMEOUT_MS, env = "RINGSTREAM_BODY_TIMEOUT_MS")]
    pub body_timeout_ms: u64,

    /// Do not pin shard executors to CPUs (for running many test servers on
    /// a small machine; production wants pinning).
    #[arg(long)]
    pub no_pin: bool,
}

impl Cli {
    pub fn into_config(self) -> Result<Config, String> {
        let shards = self.shards.unwrap_or_else(online_cpus);
        if shards == 0 || shards > SHARDS_MAX {
            return Err(format!("--shards must be between 1 and {SHARDS_MAX}, got {shards}"));
        }
        if self.long_poll_timeout_ms == 0 || self.long_poll_timeout_ms > LONG_POLL_TIMEOUT_MS_MAX {
            return Err(format!("--long-poll-timeout-ms must be between 1 and {LONG_POLL_TIMEOUT_MS_MAX}"));
        }
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes)
            || !self.segment_bytes.is_multiple_of(4096)
        {
            return Err(format!(
                "--segment-bytes must be a multiple of 4096 between {SEGMENT_BYTES_MIN} and {SEGMENT_BYTES_MAX}"
            ));
        }
        if self.max_pending_bytes < SHARD_PENDING_BYTES_MIN {
            return Err(format!("--max-pending-bytes must be at least {SHARD_PENDING_BYTES_MIN}"));
        }
        if self.max_connections == 0 {
            return Err("--max-connections must be at least 1".to_string());
        }
        if self.header_timeout_ms < CONN_REQUEST_TIMEOUT_MS_MIN || self.body_timeout_ms < CONN_REQUEST_TIMEOUT_MS_MIN {
            return Err(format!(
                "--header-timeout-ms and --body-timeout-ms must be at least {CONN_REQUEST_TIMEOUT_MS_MIN}"
            ));
        }
        Ok(Config {
            listen: self.listen,
            data_dir: self.data_dir,
            shards,
            direct_io: self.direct_io,
            long_poll_timeout_ms: self.long_poll_timeout_ms,
            segment_bytes: self.segment_bytes,
            max_pending_bytes: self.max_pending_bytes,
            max_connections: self.max_connections,
            header_timeout_ms: self.header_timeout_ms,
            body_timeout_ms: self.body_timeout_ms,
            pin: !self.no_pin,
        })
    }
}
