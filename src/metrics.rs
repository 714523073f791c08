//! Metrics: what each shard counts, and how it is written out in the
//! Prometheus text exposition format (version 0.0.4). Pure: no I/O.
//!
//! Every family is declared once in [`Family`] with its type and help text;
//! docs/metrics.md lists them. Each shard renders its own samples into a
//! [`Samples`] (one text block per family, every sample labelled `shard`,
//! except the process-wide families: build info, disk space, `process_*`);
//! the shard answering `GET /metrics` gathers every shard's blocks and
//! [`Samples::render`] writes each family once: `# HELP`, `# TYPE`, then the
//! samples of all shards, so a family's lines are contiguous as the format
//! requires.
//!
//! Recording is cheap: counters are `Cell`s, latencies and batch sizes go
//! into hdrhistograms ([`Histo`]), nothing allocates per request. The
//! exported histograms have fixed buckets (the `le` bounds of each family);
//! a bucket's cumulative count is derived from the hdrhistogram at scrape
//! time (`count_between(0, le)`). The hdrhistograms keep 2 significant
//! digits, so a value within 1% above a bound may be counted in that bound's
//! bucket; `_sum` is exact (kept beside the histogram).

use crate::limits::{HISTOGRAM_BATCH_RECORDS_MAX, HISTOGRAM_LATENCY_US_MAX};
use std::cell::Cell;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric family, in exposition order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    HttpRequests,
    Handoffs,
    ShardRequests,
    CellForwarded,
    MeshCalls,
    MeshWakeups,
    Connections,
    ConnectionsMoved,
    ConnectionsAccepted,
    ConnectionsRefused,
    LiveReaders,
    Appends,
    AppendedBytes,
    AppendSeconds,
    BackpressureRejections,
    Flushes,
    FlushedRecords,
    FlushedBytes,
    PaddedBytes,
    FlushBatchRecords,
    FlushSeconds,
    WriteSeconds,
    FdatasyncSeconds,
    PendingBytes,
    Streams,
    DirectIo,
    Segments,
    SegmentsReclaimed,
    LogPoisoned,
    Unauthorized,
    TokenRequests,
    TokenForbidden,
    TokenHidden,
    QuotaRefusals,
    WebhookDeliveries,
    Subscriptions,
    SubscriptionPendingStreams,
    TierLocalBytes,
    TierHotBudgetBytes,
    TierRemoteSegments,
    TierRemoteBytes,
    TierUploads,
    TierUploadedBytes,
    TierColdReads,
    TierFetchedBytes,
    TierRemoteDeleted,
    TierStoreUp,
    CellElections,
    CellTerm,
    CellLeaderChanges,
    CellReadIndexRounds,
    CellCatchUpRounds,
    CellLeading,
    CellCommitIndex,
    CellCommitSeconds,
    CellSentBytes,
    CellReceivedBytes,
    CellShippedSegments,
    CellShippedBytes,
    CellServedSegmentBytes,
    CellFollowerLag,
    BuildInfo,
    DiskFreeBytes,
    DiskSizeBytes,
    ProcessCpuSeconds,
    ProcessResidentMemoryBytes,
    ProcessOpenFds,
    ProcessMaxFds,
    ProcessStartTimeSeconds,
}

/// Latency bounds in microseconds (exported in seconds): 50 µs to 10 s.
const LATENCY_BUCKETS: usize = 17;
const LATENCY_BOUNDS_US: &[u64; LATENCY_BUCKETS] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];
/// Records per group-commit flush.
const BATCH_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384];

/// What [`Family::def`] knows of a family: its exported name, its type
/// and its `# HELP` text.
struct Def {
    family: Family,
    name: &'static str,
    kind: Kind,
    help: &'static str,
}

/// Every family's name, type and help text, in [`Family::ALL`] order (a
/// unit test checks the order, so `DEFS[f as usize]` is `f`'s row).
const DEFS: [Def; 69] = [
    Def {
        family: Family::HttpRequests,
        name: "ringstream_http_requests_total",
        kind: Kind::Counter,
        help: "HTTP requests answered, by the shard whose connection received them, by route (ds_stream, ds_bucket, v1_stream, metrics, health, other) and status code.",
    },
    Def {
        family: Family::Handoffs,
        name: "ringstream_handoffs_total",
        kind: Kind::Counter,
        help: "Requests this shard's connections handed to the owning shard over the cross-core mesh.",
    },
    Def {
        family: Family::ShardRequests,
        name: "ringstream_shard_requests_total",
        kind: Kind::Counter,
        help: "Requests run by their owning shard, by origin: local (from its own connections) or remote (handed over by another shard, including internal requests).",
    },
    Def {
        family: Family::CellForwarded,
        name: "ringstream_cell_forwarded_requests_total",
        kind: Kind::Counter,
        help: "In a cell: requests a shard whose replica does not lead sent to its group's leader (direction to_leader: writes and bucket requests; reads are answered here, caught up with the leader first when they claim freshness), and requests followers forwarded to this shard (from_follower).",
    },
    Def {
        family: Family::MeshCalls,
        name: "ringstream_mesh_calls_total",
        kind: Kind::Counter,
        help: "Messages this shard sent over the mesh expecting a reply (hand-offs and internal requests).",
    },
    Def {
        family: Family::MeshWakeups,
        name: "ringstream_mesh_wakeups_total",
        kind: Kind::Counter,
        help: "Times another shard woke this shard's parked mesh task (a message to a running one needs no wake-up).",
    },
    Def {
        family: Family::Connections,
        name: "ringstream_connections",
        kind: Kind::Gauge,
        help: "Open client connections.",
    },
    Def {
        family: Family::ConnectionsMoved,
        name: "ringstream_connections_moved_total",
        kind: Kind::Counter,
        help: "Client connections moved between shards (to the shard their requests kept going to), by direction: out of or into this shard.",
    },
    Def {
        family: Family::ConnectionsAccepted,
        name: "ringstream_connections_accepted_total",
        kind: Kind::Counter,
        help: "Client connections accepted.",
    },
    Def {
        family: Family::ConnectionsRefused,
        name: "ringstream_connections_refused_total",
        kind: Kind::Counter,
        help: "Client connections refused (503, then closed) because the shard held --max-connections busy connections.",
    },
    Def {
        family: Family::LiveReaders,
        name: "ringstream_live_readers",
        kind: Kind::Gauge,
        help: "Live readers held by this shard's connections: kind=long_poll (long-poll requests in flight) and kind=sse (open SSE responses).",
    },
    Def {
        family: Family::Appends,
        name: "ringstream_appends_total",
        kind: Kind::Counter,
        help: "Append records written by the owning shard (duplicates and rejected appends excluded).",
    },
    Def {
        family: Family::AppendedBytes,
        name: "ringstream_appended_bytes_total",
        kind: Kind::Counter,
        help: "Stream data bytes in append records (after JSON normalisation).",
    },
    Def {
        family: Family::AppendSeconds,
        name: "ringstream_append_seconds",
        kind: Kind::Histogram,
        help: "Append latency on the owning shard, from the request reaching the shard to its durable acknowledgement (successful appends, duplicates included).",
    },
    Def {
        family: Family::BackpressureRejections,
        name: "ringstream_backpressure_rejections_total",
        kind: Kind::Counter,
        help: "Appends answered 503 because the shard's bytes waiting for disk were over --max-pending-bytes.",
    },
    Def {
        family: Family::Flushes,
        name: "ringstream_flushes_total",
        kind: Kind::Counter,
        help: "Group-commit flushes that carried records.",
    },
    Def {
        family: Family::FlushedRecords,
        name: "ringstream_flushed_records_total",
        kind: Kind::Counter,
        help: "Records made durable.",
    },
    Def {
        family: Family::FlushedBytes,
        name: "ringstream_flushed_bytes_total",
        kind: Kind::Counter,
        help: "Bytes written by flushes (aligned blocks, rewrites included).",
    },
    Def {
        family: Family::PaddedBytes,
        name: "ringstream_padded_bytes_total",
        kind: Kind::Counter,
        help: "Bytes of pad records: busy flushes end on a block boundary so the next can go out while they are in flight.",
    },
    Def {
        family: Family::FlushBatchRecords,
        name: "ringstream_flush_batch_records",
        kind: Kind::Histogram,
        help: "Records per group-commit flush (the batch size).",
    },
    Def {
        family: Family::FlushSeconds,
        name: "ringstream_flush_seconds",
        kind: Kind::Histogram,
        help: "Time of one group-commit flush's I/O: every write of the batch and its sync.",
    },
    Def {
        family: Family::WriteSeconds,
        name: "ringstream_write_seconds",
        kind: Kind::Histogram,
        help: "Time of one segment write. With O_DIRECT (ringstream_direct_io 1) the file is opened O_DIRECT|O_DSYNC, so the write IS the sync: it completes once the data is durable, and no fdatasync is issued. Buffered: the write only reaches the page cache; see ringstream_fdatasync_seconds.",
    },
    Def {
        family: Family::FdatasyncSeconds,
        name: "ringstream_fdatasync_seconds",
        kind: Kind::Histogram,
        help: "Time of one fdatasync after a buffered write. Stays empty with O_DIRECT|O_DSYNC (ringstream_direct_io 1), where the write itself is durable.",
    },
    Def {
        family: Family::PendingBytes,
        name: "ringstream_pending_bytes",
        kind: Kind::Gauge,
        help: "Bytes of records appended but not yet durable (backpressure input).",
    },
    Def {
        family: Family::Streams,
        name: "ringstream_streams",
        kind: Kind::Gauge,
        help: "Streams held by this shard (soft-deleted ones included).",
    },
    Def {
        family: Family::DirectIo,
        name: "ringstream_direct_io",
        kind: Kind::Gauge,
        help: "1 when segments are written with O_DIRECT|O_DSYNC, 0 for buffered writes + fdatasync.",
    },
    Def {
        family: Family::Segments,
        name: "ringstream_segments",
        kind: Kind::Gauge,
        help: "Segments of this shard's log: sealed ones (local, or remote with tiered storage) plus the active one.",
    },
    Def {
        family: Family::SegmentsReclaimed,
        name: "ringstream_segments_reclaimed_total",
        kind: Kind::Counter,
        help: "Segment files deleted because no record in them was needed any more.",
    },
    Def {
        family: Family::LogPoisoned,
        name: "ringstream_log_poisoned",
        kind: Kind::Gauge,
        help: "1 once a write or sync of this shard's log failed: its appends fail (503) until a restart recovers the log.",
    },
    Def {
        family: Family::Unauthorized,
        name: "ringstream_unauthorized_total",
        kind: Kind::Counter,
        help: "Requests answered 401 (access control on), by reason: missing (no Authorization header), malformed (not one Bearer header with a well-formed token), unknown (a token the auth file does not have).",
    },
    Def {
        family: Family::TokenRequests,
        name: "ringstream_token_requests_total",
        kind: Kind::Counter,
        help: "Requests that presented a token of the auth file, by the token's name, whatever their answer.",
    },
    Def {
        family: Family::TokenForbidden,
        name: "ringstream_token_forbidden_total",
        kind: Kind::Counter,
        help: "Requests answered 403 by token name: the token's grants cover the bucket but lack the right.",
    },
    Def {
        family: Family::TokenHidden,
        name: "ringstream_token_hidden_total",
        kind: Kind::Counter,
        help: "Requests answered 404 by token name because the token's grants do not cover the bucket.",
    },
    Def {
        family: Family::QuotaRefusals,
        name: "ringstream_quota_refusals_total",
        kind: Kind::Counter,
        help: "Writes refused by the owning shard because they would pass a bucket quota, by quota: max_streams (429) or max_bytes (507).",
    },
    Def {
        family: Family::WebhookDeliveries,
        name: "ringstream_webhook_deliveries_total",
        kind: Kind::Counter,
        help: "Webhook POSTs for the subscriptions a shard owns, by outcome: ok (a 2xx answer) or failed (no answer or not 2xx; retried with backoff).",
    },
    Def {
        family: Family::Subscriptions,
        name: "ringstream_subscriptions",
        kind: Kind::Gauge,
        help: "Subscriptions (__ds/subscriptions) a shard owns.",
    },
    Def {
        family: Family::SubscriptionPendingStreams,
        name: "ringstream_subscription_pending_streams",
        kind: Kind::Gauge,
        help: "Streams with data past their acknowledged offset, summed over the subscriptions a shard owns (their consumers' lag).",
    },
    Def {
        family: Family::TierLocalBytes,
        name: "ringstream_tier_local_bytes",
        kind: Kind::Gauge,
        help: "Tiered storage: bytes of this shard's segment files on the local disk (active and prepared segments at full size, sealed ones, skeletons of remote ones).",
    },
    Def {
        family: Family::TierHotBudgetBytes,
        name: "ringstream_tier_hot_budget_bytes",
        kind: Kind::Gauge,
        help: "Tiered storage: this shard's share of --hot-bytes; local bytes above it are being moved (or wait for the object store).",
    },
    Def {
        family: Family::TierRemoteSegments,
        name: "ringstream_tier_remote_segments",
        kind: Kind::Gauge,
        help: "Tiered storage: this shard's segments that are in the object store.",
    },
    Def {
        family: Family::TierRemoteBytes,
        name: "ringstream_tier_remote_bytes",
        kind: Kind::Gauge,
        help: "Tiered storage: bytes of this shard's segments in the object store.",
    },
    Def {
        family: Family::TierUploads,
        name: "ringstream_tier_uploads_total",
        kind: Kind::Counter,
        help: "Tiered storage: segment moves to the object store, by result (ok: uploaded, verified, recorded, local file deleted; error: retried later).",
    },
    Def {
        family: Family::TierUploadedBytes,
        name: "ringstream_tier_uploaded_bytes_total",
        kind: Kind::Counter,
        help: "Tiered storage: bytes of segments moved to the object store.",
    },
    Def {
        family: Family::TierColdReads,
        name: "ringstream_tier_cold_reads_total",
        kind: Kind::Counter,
        help: "Tiered storage: records read from remote segments (cached: from fetched blocks) and block fetches (fetched; unavailable: the store did not answer, the read got 503).",
    },
    Def {
        family: Family::TierFetchedBytes,
        name: "ringstream_tier_fetched_bytes_total",
        kind: Kind::Counter,
        help: "Tiered storage: bytes fetched from the object store by cold reads.",
    },
    Def {
        family: Family::TierRemoteDeleted,
        name: "ringstream_tier_remote_deleted_total",
        kind: Kind::Counter,
        help: "Tiered storage: objects deleted from the object store (reclaimed segments, orphans of interrupted moves).",
    },
    Def {
        family: Family::TierStoreUp,
        name: "ringstream_tier_store_up",
        kind: Kind::Gauge,
        help: "Tiered storage: 1 while the object store answered its last request, 0 while it does not (/readyz says degraded).",
    },
    Def {
        family: Family::CellElections,
        name: "ringstream_cell_elections_total",
        kind: Kind::Counter,
        help: "In a cell: elections this shard's replica started (it became a candidate after its leader went silent past the election timeout, or a leader handed its group over to it); pre-votes it lost are not counted.",
    },
    Def {
        family: Family::CellTerm,
        name: "ringstream_cell_term",
        kind: Kind::Gauge,
        help: "In a cell: the Raft term this shard's replica is in (it rises with every election in its group).",
    },
    Def {
        family: Family::CellLeaderChanges,
        name: "ringstream_cell_leader_changes_total",
        kind: Kind::Counter,
        help: "In a cell: times this shard's replica learned of a new leader of its group (itself included).",
    },
    Def {
        family: Family::CellReadIndexRounds,
        name: "ringstream_cell_read_index_rounds_total",
        kind: Kind::Counter,
        help: "In a cell: read index rounds this shard's replica ran to confirm it still leads before an answer that \
               claims freshness, by outcome (started, confirmed, failed: no majority by the deadline or the lead ended).",
    },
    Def {
        family: Family::CellCatchUpRounds,
        name: "ringstream_cell_catch_up_rounds_total",
        kind: Kind::Counter,
        help: "In a cell: rounds this shard's replica ran, as a follower, to catch up with its leader's commit before \
               serving live reads and reads that claim freshness, by outcome (started, caught_up, failed: no answer or not applied by the deadline).",
    },
    Def {
        family: Family::CellLeading,
        name: "ringstream_cell_leading",
        kind: Kind::Gauge,
        help: "In a cell: 1 while this shard's replica leads its group and lets its shard write (what /leaderz reports), 0 otherwise.",
    },
    Def {
        family: Family::CellCommitIndex,
        name: "ringstream_cell_commit_index",
        kind: Kind::Gauge,
        help: "In a cell: the highest Raft log index this shard's replica knows committed (durable on a majority).",
    },
    Def {
        family: Family::CellCommitSeconds,
        name: "ringstream_cell_commit_seconds",
        kind: Kind::Histogram,
        help: "In a cell, on a leader: from proposing an entry (one group-commit batch) to seeing it committed (durable on a majority, the leader included).",
    },
    Def {
        family: Family::CellSentBytes,
        name: "ringstream_cell_sent_bytes_total",
        kind: Kind::Counter,
        help: "In a cell: bytes of Raft messages this shard's replica queued to its peers (prost-encoded messages; frame headers and handshakes not counted).",
    },
    Def {
        family: Family::CellReceivedBytes,
        name: "ringstream_cell_received_bytes_total",
        kind: Kind::Counter,
        help: "In a cell: bytes of Raft messages this shard's replica received from its peers (prost-encoded messages; frame headers and handshakes not counted).",
    },
    Def {
        family: Family::CellShippedSegments,
        name: "ringstream_cell_shipped_segments_total",
        kind: Kind::Counter,
        help: "In a cell: sealed segment files this shard's replica copied whole from a peer at boot, having none of its own (a new node, a lost disk).",
    },
    Def {
        family: Family::CellShippedBytes,
        name: "ringstream_cell_shipped_bytes_total",
        kind: Kind::Counter,
        help: "In a cell: bytes of the sealed segment files this shard's replica copied from a peer at boot.",
    },
    Def {
        family: Family::CellServedSegmentBytes,
        name: "ringstream_cell_served_segment_bytes_total",
        kind: Kind::Counter,
        help: "In a cell: bytes of sealed segment files this shard's replica sent to peers that copy them at boot.",
    },
    Def {
        family: Family::CellFollowerLag,
        name: "ringstream_cell_follower_lag_entries",
        kind: Kind::Gauge,
        help: "In a cell, on a leader: entries of the leader's log each follower (label peer: its node id) is not known to hold, as of the last tick.",
    },
    Def {
        family: Family::BuildInfo,
        name: "ringstream_build_info",
        kind: Kind::Gauge,
        help: "Always 1; the labels say what is running: version, commit (git), rustc, profile.",
    },
    Def {
        family: Family::DiskFreeBytes,
        name: "ringstream_disk_free_bytes",
        kind: Kind::Gauge,
        help: "Bytes available to the server on the data directory's file system (statvfs f_bavail).",
    },
    Def {
        family: Family::DiskSizeBytes,
        name: "ringstream_disk_size_bytes",
        kind: Kind::Gauge,
        help: "Size in bytes of the data directory's file system.",
    },
    Def {
        family: Family::ProcessCpuSeconds,
        name: "process_cpu_seconds_total",
        kind: Kind::Counter,
        help: "User and system CPU time of the process, in seconds.",
    },
    Def {
        family: Family::ProcessResidentMemoryBytes,
        name: "process_resident_memory_bytes",
        kind: Kind::Gauge,
        help: "Resident memory of the process, in bytes.",
    },
    Def {
        family: Family::ProcessOpenFds,
        name: "process_open_fds",
        kind: Kind::Gauge,
        help: "Open file descriptors of the process.",
    },
    Def {
        family: Family::ProcessMaxFds,
        name: "process_max_fds",
        kind: Kind::Gauge,
        help: "The process's limit on open file descriptors.",
    },
    Def {
        family: Family::ProcessStartTimeSeconds,
        name: "process_start_time_seconds",
        kind: Kind::Gauge,
        help: "When the process started, in seconds since the UNIX epoch.",
    },
];

// The table's order is checked when the crate compiles: row i is family i.
const _: () = {
    let mut i = 0;
    while i < DEFS.len() {
        assert!(DEFS[i].family as usize == i, "DEFS is not in Family order");
        i += 1;
    }
};

impl Family {
    pub const ALL: [Family; 69] = [
        Family::HttpRequests,
        Family::Handoffs,
        Family::ShardRequests,
        Family::CellForwarded,
        Family::MeshCalls,
        Family::MeshWakeups,
        Family::Connections,
        Family::ConnectionsMoved,
        Family::ConnectionsAccepted,
        Family::ConnectionsRefused,
        Family::LiveReaders,
        Family::Appends,
        Family::AppendedBytes,
        Family::AppendSeconds,
        Family::BackpressureRejections,
        Family::Flushes,
        Family::FlushedRecords,
        Family::FlushedBytes,
        Family::PaddedBytes,
        Family::FlushBatchRecords,
        Family::FlushSeconds,
        Family::WriteSeconds,
        Family::FdatasyncSeconds,
        Family::PendingBytes,
        Family::Streams,
        Family::DirectIo,
        Family::Segments,
        Family::SegmentsReclaimed,
        Family::LogPoisoned,
        Family::Unauthorized,
        Family::TokenRequests,
        Family::TokenForbidden,
        Family::TokenHidden,
        Family::QuotaRefusals,
        Family::WebhookDeliveries,
        Family::Subscriptions,
        Family::SubscriptionPendingStreams,
        Family::TierLocalBytes,
        Family::TierHotBudgetBytes,
        Family::TierRemoteSegments,
        Family::TierRemoteBytes,
        Family::TierUploads,
        Family::TierUploadedBytes,
        Family::TierColdReads,
        Family::TierFetchedBytes,
        Family::TierRemoteDeleted,
        Family::TierStoreUp,
        Family::CellElections,
        Family::CellTerm,
        Family::CellLeaderChanges,
        Family::CellReadIndexRounds,
        Family::CellCatchUpRounds,
        Family::CellLeading,
        Family::CellCommitIndex,
        Family::CellCommitSeconds,
        Family::CellSentBytes,
        Family::CellReceivedBytes,
        Family::CellShippedSegments,
        Family::CellShippedBytes,
        Family::CellServedSegmentBytes,
        Family::CellFollowerLag,
        Family::BuildInfo,
        Family::DiskFreeBytes,
        Family::DiskSizeBytes,
        Family::ProcessCpuSeconds,
        Family::ProcessResidentMemoryBytes,
        Family::ProcessOpenFds,
        Family::ProcessMaxFds,
        Family::ProcessStartTimeSeconds,
    ];

    fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        self.def().name
    }

    pub fn kind(self) -> Kind {
        self.def().kind
    }

    pub fn help(self) -> &'static str {
        self.def().help
    }

    /// One sample for the whole process, without a `shard` label.
    pub fn process_wide(self) -> bool {
        self.index() >= Family::BuildInfo.index()
    }

    /// (bucket bounds in recorded units, recorded units per exported unit).
    fn buckets(self) -> (&'static [u64], f64) {
        match self {
            Family::FlushBatchRecords => (BATCH_BOUNDS, 1.0),
            _ => (LATENCY_BOUNDS_US, 1e6),
        }
    }

    fn def(self) -> &'static Def {
        &DEFS[self.index()]
    }
}

/// A histogram for recording: hdrhistogram plus the exact sum.
#[derive(Debug, Clone)]
pub struct Histo {
    hdr: hdrhistogram::Histogram<u64>,
    sum: u64,
}

impl Histo {
    /// Microsecond latencies up to HISTOGRAM_LATENCY_US_MAX (larger values count as that).
    pub fn latency_us() -> Histo {
        Histo::with_max(HISTOGRAM_LATENCY_US_MAX)
    }

    /// Record counts per flush up to HISTOGRAM_BATCH_RECORDS_MAX.
    pub fn batch_records() -> Histo {
        Histo::with_max(HISTOGRAM_BATCH_RECORDS_MAX)
    }

    fn with_max(max: u64) -> Histo {
        Histo { hdr: hdrhistogram::Histogram::new_with_bounds(1, max, 2).expect("valid histogram bounds"), sum: 0 }
    }

    pub fn record(&mut self, v: u64) {
        self.hdr.saturating_record(v);
        self.sum = self.sum.saturating_add(v);
    }

    pub fn count(&self) -> u64 {
        self.hdr.len()
    }

    pub fn sum(&self) -> u64 {
        self.sum
    }
}

/// The `route` label of `ringstream_http_requests_total`: a fixed set, so
/// counting needs no allocation and the label set stays small.
/// A latency histogram recorded on one thread and read on any other (the
/// cell's board: a replica records, whichever shard answers `/metrics`
/// reads): one atomic count per exported bucket, no lock, no
/// hdrhistogram. Counts are exact (no 1% rounding as in [`Histo`]).
#[derive(Debug)]
pub struct SharedLatency {
    /// Values in (bound i-1, bound i]; values past the last bound are
    /// counted only in `count`.
    buckets: [AtomicU64; LATENCY_BUCKETS],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Default for SharedLatency {
    fn default() -> Self {
        SharedLatency {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl SharedLatency {
    pub fn record(&self, us: u64) {
        let i = LATENCY_BOUNDS_US.partition_point(|&bound| bound < us);
        if let Some(b) = self.buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteLabel {
    DsStream,
    DsBucket,
    V1Stream,
    Metrics,
    Health,
    Other,
}

impl RouteLabel {
    const ALL: [RouteLabel; 6] = [
        RouteLabel::DsStream,
        RouteLabel::DsBucket,
        RouteLabel::V1Stream,
        RouteLabel::Metrics,
        RouteLabel::Health,
        RouteLabel::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RouteLabel::DsStream => "ds_stream",
            RouteLabel::DsBucket => "ds_bucket",
            RouteLabel::V1Stream => "v1_stream",
            RouteLabel::Metrics => "metrics",
            RouteLabel::Health => "health",
            RouteLabel::Other => "other",
        }
    }
}

/// Status codes counted one by one: 100..=599 (others count as 599).
const STATUS_FIRST: u16 = 100;
const STATUS_SLOTS: usize = 500;

/// What a shard's HTTP edge counts (its connections, whatever shard owns
/// the streams they touch).
#[derive(Debug)]
pub struct EdgeMetrics {
    /// Route-major: `route * STATUS_SLOTS + (status - 100)`.
    requests: Box<[Cell<u64>]>,
    pub handoffs: Cell<u64>,
    pub connections: Cell<u64>,
    pub moved_out: Cell<u64>,
    pub moved_in: Cell<u64>,
    pub accepted: Cell<u64>,
    pub refused: Cell<u64>,
    pub long_polls: Cell<u64>,
    pub sse: Cell<u64>,
    /// 401 answers, by [`UNAUTHORIZED_REASONS`] index.
    pub unauthorized: [Cell<u64>; 3],
}

/// The `reason` labels of `ringstream_unauthorized_total`, in the order of
/// `auth::bearer::Unauthenticated`.
pub const UNAUTHORIZED_REASONS: [&str; 3] = ["missing", "malformed", "unknown"];

impl Default for EdgeMetrics {
    fn default() -> Self {
        EdgeMetrics {
            requests: (0..RouteLabel::ALL.len() * STATUS_SLOTS).map(|_| Cell::new(0)).collect(),
            handoffs: Cell::new(0),
            connections: Cell::new(0),
            moved_out: Cell::new(0),
            moved_in: Cell::new(0),
            accepted: Cell::new(0),
            refused: Cell::new(0),
            long_polls: Cell::new(0),
            sse: Cell::new(0),
            unauthorized: Default::default(),
        }
    }
}

/// Adds one to a gauge until dropped.
pub struct Held<'a>(&'a Cell<u64>);

impl<'a> Held<'a> {
    pub fn new(g: &'a Cell<u64>) -> Held<'a> {
        g.set(g.get() + 1);
        Held(g)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl EdgeMetrics {
    /// The counter of (`route`, `status`); statuses outside 100-599 count
    /// at the nearest end.
    fn request_counter(&self, route: RouteLabel, status: u16) -> &Cell<u64> {
        let slot = (status.clamp(STATUS_FIRST, STATUS_FIRST + STATUS_SLOTS as u16 - 1) - STATUS_FIRST) as usize;
        &self.requests[route as usize * STATUS_SLOTS + slot]
    }

    pub fn count_request(&self, route: RouteLabel, status: u16) {
        let c = self.request_counter(route, status);
        c.set(c.get() + 1);
    }

    pub fn requests(&self, route: RouteLabel, status: u16) -> u64 {
        self.request_counter(route, status).get()
    }

    pub fn render(&self, shard: usize, out: &mut Samples) {
        for route in RouteLabel::ALL {
            for slot in 0..STATUS_SLOTS {
                let n = self.requests[route as usize * STATUS_SLOTS + slot].get();
                if n > 0 {
                    let status = STATUS_FIRST as usize + slot;
                    let labels = format!("route=\"{}\",status=\"{status}\"", route.as_str());
                    out.sample(Family::HttpRequests, shard, &labels, n);
                }
            }
        }
        out.sample(Family::Handoffs, shard, "", self.handoffs.get());
        out.sample(Family::Connections, shard, "", self.connections.get());
        out.sample(Family::ConnectionsMoved, shard, "direction=\"out\"", self.moved_out.get());
        out.sample(Family::ConnectionsMoved, shard, "direction=\"in\"", self.moved_in.get());
        out.sample(Family::ConnectionsAccepted, shard, "", self.accepted.get());
        out.sample(Family::ConnectionsRefused, shard, "", self.refused.get());
        out.sample(Family::LiveReaders, shard, "kind=\"long_poll\"", self.long_polls.get());
        out.sample(Family::LiveReaders, shard, "kind=\"sse\"", self.sse.get());
        for (reason, n) in UNAUTHORIZED_REASONS.iter().zip(&self.unauthorized) {
            out.sample(Family::Unauthorized, shard, &format!("reason=\"{reason}\""), n.get());
        }
    }
}

/// Samples being gathered: one block of sample lines per family.
#[derive(Debug, Clone)]
pub struct Samples {
    blocks: Vec<String>,
}

impl Default for Samples {
    fn default() -> Self {
        Samples { blocks: vec![String::new(); Family::ALL.len()] }
    }
}

impl Samples {
    /// One sample `name{shard="N",extra} value`. `extra`: more labels, already
    /// formatted (`a="b",c="d"`), or empty.
    pub fn sample(&mut self, f: Family, shard: usize, extra: &str, v: u64) {
        debug_assert!(f.kind() != Kind::Histogram && !f.process_wide());
        let b = &mut self.blocks[f.index()];
        let _ = write!(b, "{}{{shard=\"{shard}\"", f.name());
        if !extra.is_empty() {
            b.push(',');
            b.push_str(extra);
        }
        let _ = writeln!(b, "}} {v}");
    }

    /// A process-wide sample `name{labels} value` (no `shard` label).
    /// `labels`: already formatted (`a="b"`), or empty.
    pub fn process(&mut self, f: Family, labels: &str, v: f64) {
        debug_assert!(f.process_wide());
        let b = &mut self.blocks[f.index()];
        if labels.is_empty() {
            let _ = writeln!(b, "{} {v}", f.name());
        } else {
            let _ = writeln!(b, "{}{{{labels}}} {v}", f.name());
        }
    }

    /// A histogram's `_bucket` (cumulative, ending with `le="+Inf"`), `_sum`
    /// and `_count` lines, with the family's fixed bounds.
    pub fn histogram(&mut self, f: Family, shard: usize, h: &Histo) {
        debug_assert!(f.kind() == Kind::Histogram);
        let (bounds, scale) = f.buckets();
        let name = f.name();
        let b = &mut self.blocks[f.index()];
        let total = h.count();
        for &le in bounds {
            // Cumulative by construction: every range starts at 0.
            let n = if total == 0 { 0 } else { h.hdr.count_between(0, le).min(total) };
            let _ = writeln!(b, "{name}_bucket{{shard=\"{shard}\",le=\"{}\"}} {n}", le as f64 / scale);
        }
        let _ = writeln!(b, "{name}_bucket{{shard=\"{shard}\",le=\"+Inf\"}} {total}");
        let _ = writeln!(b, "{name}_sum{{shard=\"{shard}\"}} {}", h.sum() as f64 / scale);
        let _ = writeln!(b, "{name}_count{{shard=\"{shard}\"}} {total}");
    }

    /// The blocks, to send to another shard.
    /// A [`SharedLatency`] as a latency family. Buckets are read before
    /// the count, and capped by it, so a record landing meanwhile leaves
    /// the buckets cumulative and at most `+Inf`.
    pub fn shared_histogram(&mut self, f: Family, shard: usize, h: &SharedLatency) {
        debug_assert!(f.kind() == Kind::Histogram && f.buckets().0 == LATENCY_BOUNDS_US);
        let name = f.name();
        let counts: Vec<u64> = h.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let (total, sum) = (h.count(), h.sum_us.load(Ordering::Relaxed));
        let b = &mut self.blocks[f.index()];
        let mut below = 0;
        for (le, n) in LATENCY_BOUNDS_US.iter().zip(counts) {
            below += n;
            let _ = writeln!(b, "{name}_bucket{{shard=\"{shard}\",le=\"{}\"}} {}", *le as f64 / 1e6, below.min(total));
        }
        let _ = writeln!(b, "{name}_bucket{{shard=\"{shard}\",le=\"+Inf\"}} {total}");
        let _ = writeln!(b, "{name}_sum{{shard=\"{shard}\"}} {}", sum as f64 / 1e6);
        let _ = writeln!(b, "{name}_count{{shard=\"{shard}\"}} {total}");
    }

    pub fn into_blocks(self) -> Vec<String> {
        self.blocks
    }

    /// Appends another shard's blocks (from [`Samples::into_blocks`]).
    pub fn merge(&mut self, blocks: &[String]) {
        for (mine, theirs) in self.blocks.iter_mut().zip(blocks) {
            mine.push_str(theirs);
        }
    }

    /// The exposition text: every family with its HELP and TYPE lines,
    /// but a histogram with no series (the cell's, without `--cell`): a
    /// histogram is its buckets, `_sum` and `_count`, so none is written.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(self.blocks.iter().map(|b| b.len() + 256).sum());
        for f in Family::ALL {
            if f.kind() == Kind::Histogram && self.blocks[f.index()].is_empty() {
                continue;
            }
            let kind = match f.kind() {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let _ = writeln!(out, "# HELP {} {}", f.name(), f.help());
            let _ = writeln!(out, "# TYPE {} {kind}", f.name());
            out.push_str(&self.blocks[f.index()]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_in_index_order_and_named_by_type() {
        for (i, f) in Family::ALL.iter().enumerate() {
            assert_eq!(f.index(), i, "{f:?}");
            let counter = f.name().ends_with("_total");
            assert_eq!(counter, f.kind() == Kind::Counter, "{}: counters and only counters end in _total", f.name());
            assert!(!f.help().contains('\n') && !f.help().contains('\\'), "{}: help needs escaping", f.name());
        }
    }

    #[test]
    fn the_table_has_one_row_per_family_in_order_and_no_name_twice() {
        assert_eq!(DEFS.len(), Family::ALL.len());
        for (row, f) in DEFS.iter().zip(Family::ALL) {
            assert_eq!(row.family, f, "row {} of DEFS is not {f:?}", f.index());
            assert_eq!((f.name(), f.kind(), f.help()), (row.name, row.kind, row.help));
        }
        let mut names: Vec<&str> = DEFS.iter().map(|d| d.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DEFS.len(), "two families share a name");
        assert_eq!(Family::TierStoreUp.name(), "ringstream_tier_store_up");
        assert_eq!(Family::QuotaRefusals.kind(), Kind::Counter);
        assert!(Family::Unauthorized.help().starts_with("Requests answered 401"));
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_count() {
        let mut h = Histo::latency_us();
        for v in [10, 60, 60, 300, 2_000, 20_000_000] {
            h.record(v);
        }
        let mut s = Samples::default();
        s.histogram(Family::WriteSeconds, 3, &h);
        let text = s.render();
        let buckets: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("ringstream_write_seconds_bucket"))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
            .collect();
        assert_eq!(buckets.len(), LATENCY_BOUNDS_US.len() + 1);
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert_eq!(buckets[0], 1, "only 10 µs is <= 50 µs");
        assert_eq!(buckets[1], 3, "60 µs twice is <= 100 µs");
        assert_eq!(buckets[buckets.len() - 2], 5, "20 s is past the last bound");
        assert_eq!(*buckets.last().unwrap(), 6);
        assert!(text.contains("ringstream_write_seconds_bucket{shard=\"3\",le=\"0.00005\"} 1\n"), "{text}");
        assert!(text.contains("ringstream_write_seconds_bucket{shard=\"3\",le=\"+Inf\"} 6\n"));
        assert!(text.contains("ringstream_write_seconds_count{shard=\"3\"} 6\n"));
        assert!(text.contains("ringstream_write_seconds_sum{shard=\"3\"} 20.00243\n"), "{text}");
    }

    #[test]
    fn a_shared_histogram_renders_as_the_hdr_one_does() {
        let (mut h, shared) = (Histo::latency_us(), SharedLatency::default());
        for v in [10, 50, 60, 60, 300, 2_000, 20_000_000] {
            h.record(v);
            shared.record(v);
        }
        let (mut a, mut b) = (Samples::default(), Samples::default());
        a.histogram(Family::CellCommitSeconds, 2, &h);
        b.shared_histogram(Family::CellCommitSeconds, 2, &shared);
        assert_eq!(a.render(), b.render());
        assert!(b.render().contains("ringstream_cell_commit_seconds_bucket{shard=\"2\",le=\"0.00005\"} 2\n"));
        assert_eq!(shared.count(), 7);
    }

    #[test]
    fn merged_shards_keep_each_family_together() {
        let mut a = Samples::default();
        a.sample(Family::Appends, 0, "", 1);
        a.sample(Family::Streams, 0, "", 2);
        let mut b = Samples::default();
        b.sample(Family::Appends, 1, "", 3);
        b.sample(Family::Streams, 1, "", 4);
        a.merge(&b.into_blocks());
        let text = a.render();
        let appends = text.find("ringstream_appends_total{shard=\"0\"} 1\nringstream_appends_total{shard=\"1\"} 3\n");
        assert!(appends.is_some(), "{text}");
        assert_eq!(text.matches("# TYPE ringstream_streams gauge").count(), 1);
        assert!(text.contains("# TYPE ringstream_tier_uploads_total counter\n"), "an empty counter keeps its header");
        assert!(!text.contains("ringstream_cell_commit_seconds"), "an empty histogram is left out");
    }

    #[test]
    fn requests_count_by_route_and_status_without_growing() {
        let m = EdgeMetrics::default();
        m.count_request(RouteLabel::V1Stream, 200);
        m.count_request(RouteLabel::V1Stream, 200);
        m.count_request(RouteLabel::DsBucket, 404);
        m.count_request(RouteLabel::Other, 999);
        assert_eq!(m.requests(RouteLabel::V1Stream, 200), 2);
        assert_eq!(m.requests(RouteLabel::DsBucket, 404), 1);
        assert_eq!(m.requests(RouteLabel::Other, 599), 1);
        let mut s = Samples::default();
        m.render(1, &mut s);
        let text = s.render();
        assert!(text.contains("ringstream_http_requests_total{shard=\"1\",route=\"v1_stream\",status=\"200\"} 2\n"));
        assert!(text.contains("ringstream_live_readers{shard=\"1\",kind=\"sse\"} 0\n"));
    }

    #[test]
    fn process_wide_samples_have_no_shard_label() {
        let mut s = Samples::default();
        s.process(Family::BuildInfo, "version=\"1\"", 1.0);
        s.process(Family::ProcessCpuSeconds, "", 1.25);
        let text = s.render();
        assert!(text.contains("\nringstream_build_info{version=\"1\"} 1\n"), "{text}");
        assert!(text.contains("\nprocess_cpu_seconds_total 1.25\n"), "{text}");
        assert!(Family::ALL.iter().filter(|f| f.process_wide()).all(|f| *f as usize >= Family::BuildInfo as usize));
        assert!(!Family::LogPoisoned.process_wide() && Family::ProcessStartTimeSeconds.process_wide());
    }

    #[test]
    fn held_gauge_goes_back_down() {
        let g = Cell::new(0);
        {
            let _a = Held::new(&g);
            let _b = Held::new(&g);
            assert_eq!(g.get(), 2);
        }
        assert_eq!(g.get(), 0);
    }
}
