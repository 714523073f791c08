//! A log's counters, for the metrics endpoint and the benchmarks: the local
//! log fills the flush counters, the tier layer its own (`tier`).

use crate::metrics::Histo;

/// Counters of one shard's log.
#[derive(Debug, Clone)]
pub struct LogStats {
    pub flushes: u64,
    pub records_flushed: u64,
    pub bytes_flushed: u64,
    /// Bytes of pad records (flushes padded to a block, see `log/writer.rs`).
    pub bytes_padded: u64,
    pub max_records_per_flush: u64,
    /// Records per flush.
    pub batch_records: Histo,
    /// Microseconds from the first write of a flush to the end of its sync.
    pub flush_io_us: Histo,
    /// Microseconds of each segment write (with O_DSYNC: write + sync in one).
    pub write_us: Histo,
    /// Microseconds of each fdatasync (none when writes are durable by themselves).
    pub sync_us: Histo,
    /// Zero without tiering.
    pub tier: TierStats,
}

impl Default for LogStats {
    fn default() -> Self {
        LogStats {
            flushes: 0,
            records_flushed: 0,
            bytes_flushed: 0,
            bytes_padded: 0,
            max_records_per_flush: 0,
            batch_records: Histo::batch_records(),
            flush_io_us: Histo::latency_us(),
            write_us: Histo::latency_us(),
            sync_us: Histo::latency_us(),
            tier: TierStats::default(),
        }
    }
}

/// Tiering counters (see `storage/tiered/`).
#[derive(Debug, Clone, Default)]
pub struct TierStats {
    pub uploads_ok: u64,
    pub uploads_failed: u64,
    pub uploaded_bytes: u64,
    /// Record reads of remote segments served from the block cache.
    pub cold_cached: u64,
    /// Block fetches from the store that succeeded, and their bytes.
    pub cold_fetched: u64,
    pub cold_fetched_bytes: u64,
    /// Block fetches that failed (the read answered 503).
    pub cold_unavailable: u64,
    /// Remote objects deleted (reclaim and orphan sweeps).
    pub remote_deleted: u64,
}
