//! The types every part of a run shares: its configuration, its schedule,
//! how a response counts, the progress counters, the aggregated result and
//! the histograms. Depends only on `client` (the target) and `payload`
//! (body sizes), so `engine`, `reader`, `report` and `workload` all import
//! from here and none imports another's internals (no cycle).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::client::Target;
use crate::payload::{PayloadDist, BIN_HEADER};

/// Error key for I/O and protocol failures (real statuses are 100..=599).
pub const IO_ERROR: u16 = 0;

/// Highest latency the histograms track (µs); larger values saturate.
pub const HIST_MAX_US: u64 = 60_000_000;
/// Significant figures kept by the histograms.
pub const HIST_SIGFIG: u8 = 3;
/// After the writers finish, readers keep collecting deliveries this long.
pub const READER_GRACE: Duration = Duration::from_millis(500);

/// Which HTTP surface of the server to drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Surface {
    /// `/v1/stream/{prefix}-{i}`: PUT to create, POST to append (expects 204).
    V1,
    /// `/ds/{bucket}/{prefix}-{i}`: PUT bucket, PUT stream, POST to append (expects 200).
    Ds,
}

impl Surface {
    pub fn as_str(self) -> &'static str {
        match self {
            Surface::V1 => "v1",
            Surface::Ds => "ds",
        }
    }
}

/// Which streams a connection appends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Spread {
    /// Request n of connection k goes to stream (n*C + k) mod N: every
    /// connection visits every stream, every stream gets every connection.
    Rotate,
    /// Connection k appends only to stream k mod N (one writer per stream,
    /// as most clients and producers do).
    Pinned,
}

impl Spread {
    pub fn as_str(self) -> &'static str {
        match self {
            Spread::Rotate => "rotate",
            Spread::Pinned => "pinned",
        }
    }
}

/// How live readers follow their stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadMode {
    /// `GET ?offset=…&live=long-poll` in a loop.
    LongPoll,
    /// `GET ?offset=…&live=sse`, reconnecting when the server ends it.
    Sse,
}

impl ReadMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadMode::LongPoll => "long-poll",
            ReadMode::Sse => "sse",
        }
    }
}

/// How an append response counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    Ok,
    /// Producer mode: the server already had this (id, epoch, seq).
    Duplicate,
    Error,
}

/// Everything a run needs; built from the CLI (or directly by tests).
#[derive(Debug, Clone)]
pub struct Config {
    pub target: Target,
    pub surface: Surface,
    pub bucket: String,
    pub prefix: String,
    pub streams: usize,
    pub spread: Spread,
    pub connections: usize,
    /// Worker threads for the connections (at most `connections`).
    pub threads: usize,
    pub duration: Duration,
    pub warmup: Duration,
    /// Nominal body size (`--payload`; the fixed distribution's size).
    pub payload: usize,
    pub payload_dist: PayloadDist,
    /// Seed of the body-size generators.
    pub seed: u64,
    /// Stream and append content type.
    pub content_type: String,
    /// Bodies are JSON messages.
    pub json: bool,
    /// Send idempotent-producer headers.
    pub producer: bool,
    /// Run id used in producer ids (`lg-<run>-<k>`).
    pub run_id: String,
    /// Total intended requests/second across all connections; 0 = closed loop.
    pub rate: f64,
    /// Connect/read/write timeout per request.
    pub timeout: Duration,
    /// Live readers (0 = none).
    pub readers: usize,
    /// Where the live readers read, if not from `target` (a replicated
    /// cell's follower, say, while the writers go to its leader).
    pub read_target: Option<Target>,
    pub read_mode: ReadMode,
    /// Print a progress line to stderr every second.
    pub progress: bool,
}

impl Config {
    /// Request path of stream `i`.
    pub fn stream_path(&self, i: usize) -> String {
        self.stream_path_on(&self.target, i)
    }

    /// Where the live readers read.
    pub fn reader_target(&self) -> &Target {
        self.read_target.as_ref().unwrap_or(&self.target)
    }

    /// Request path of stream `i` for a live reader.
    pub fn read_path(&self, i: usize) -> String {
        self.stream_path_on(self.reader_target(), i)
    }

    fn stream_path_on(&self, target: &Target, i: usize) -> String {
        match self.surface {
            Surface::V1 => target.path(&format!("/v1/stream/{}-{}", self.prefix, i)),
            Surface::Ds => target.path(&format!("/ds/{}/{}-{}", self.bucket, self.prefix, i)),
        }
    }

    pub fn bucket_path(&self) -> String {
        self.target.path(&format!("/ds/{}", self.bucket))
    }

    /// Whether `status` is a successful append on this surface.
    pub fn append_ok(&self, status: u16) -> bool {
        match self.surface {
            Surface::V1 => status == 204 || status == 200,
            Surface::Ds => status == 200 || status == 204,
        }
    }

    /// How an append answered with `status` counts. With producer headers
    /// on the v1 surface, 200 is a new append and 204 a duplicate (the ds
    /// surface answers 200 to both).
    pub fn append_outcome(&self, status: u16) -> AppendOutcome {
        if self.producer && self.surface == Surface::V1 {
            match status {
                200 => AppendOutcome::Ok,
                204 => AppendOutcome::Duplicate,
                _ => AppendOutcome::Error,
            }
        } else if self.append_ok(status) {
            AppendOutcome::Ok
        } else {
            AppendOutcome::Error
        }
    }

    pub fn open_loop(&self) -> bool {
        self.rate > 0.0
    }

    /// Smallest body: binary bodies need room for the timestamp header when
    /// readers decode them.
    pub fn min_payload(&self) -> usize {
        if self.readers > 0 && !self.json {
            BIN_HEADER
        } else {
            0
        }
    }
}

/// Offset from `t0` at which request `n` of connection `k` (of `connections`)
/// is intended to be sent, for a total rate of `rate` requests/second.
/// Connections are evenly interleaved: globally, request number `n*C + k` is
/// due at `(n*C + k) / rate` seconds.
pub fn intended_offset(n: u64, k: usize, connections: usize, rate: f64) -> Duration {
    let global = n as f64 * connections as f64 + k as f64;
    // Rounded to whole nanoseconds so integral rates give exact schedules.
    Duration::from_nanos((global * 1e9 / rate).round() as u64)
}

/// Stream that request `n` of connection `k` appends to.
pub fn stream_index(spread: Spread, n: u64, k: usize, connections: usize, streams: usize) -> usize {
    match spread {
        Spread::Rotate => ((n as u128 * connections as u128 + k as u128) % streams as u128) as usize,
        Spread::Pinned => k % streams,
    }
}

/// The run's schedule, shared by every thread.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub t0: Instant,
    pub warm_end: Instant,
    pub end: Instant,
    /// The measured window in wall-clock µs (for send timestamps).
    pub wall_warm_end_us: u64,
    pub wall_end_us: u64,
}

/// Result of a run, aggregated over all connections.
#[derive(Debug)]
pub struct RunResult {
    /// Latencies (µs) of successful appends in the measured window.
    pub hist: Histogram<u64>,
    /// Successful appends in the measured window.
    pub ok: u64,
    /// Body bytes of those appends.
    pub ok_bytes: u64,
    /// Open loop: actual send − intended send time (µs) of requests in the
    /// window; the load tool's own lateness (part of `hist`).
    pub send_lag_hist: Histogram<u64>,
    /// Producer mode: appends the server reported as duplicates (measured
    /// window; neither ok nor errors).
    pub duplicates: u64,
    /// Failed appends in the measured window, by status code or "io".
    pub errors_by_status: BTreeMap<String, u64>,
    /// Requests (successful or not) during warmup.
    pub warmup_requests: u64,
    /// Failed requests during warmup, by status code or "io".
    pub warmup_errors_by_status: BTreeMap<String, u64>,
    /// Open loop only: requests due inside the measured window that were
    /// never sent because the connection was still behind when the run ended.
    pub unsent: u64,
    /// Length of the measured window.
    pub measured: Duration,
    /// Worker threads used.
    pub threads: usize,
    /// TCP connections opened by the writers.
    pub connects: u64,
    /// Live readers' append→delivery latency (µs), messages sent in the
    /// measured window.
    pub delivery_hist: Histogram<u64>,
    pub deliveries: u64,
    pub reader_errors_by_status: BTreeMap<String, u64>,
    pub delivery_parse_errors: u64,
    /// The measured window second by second.
    pub series: Series,
}

impl RunResult {
    pub fn errors(&self) -> u64 {
        self.errors_by_status.values().sum()
    }
    pub fn warmup_errors(&self) -> u64 {
        self.warmup_errors_by_status.values().sum()
    }
    pub fn reader_errors(&self) -> u64 {
        self.reader_errors_by_status.values().sum()
    }

    /// An empty result (for tests and reports).
    pub fn empty(measured: Duration) -> RunResult {
        RunResult {
            hist: new_histogram(),
            ok: 0,
            ok_bytes: 0,
            send_lag_hist: new_histogram(),
            duplicates: 0,
            errors_by_status: BTreeMap::new(),
            warmup_requests: 0,
            warmup_errors_by_status: BTreeMap::new(),
            unsent: 0,
            measured,
            threads: 1,
            connects: 0,
            delivery_hist: new_histogram(),
            deliveries: 0,
            reader_errors_by_status: BTreeMap::new(),
            delivery_parse_errors: 0,
            series: Series::new(measured),
        }
    }
}

/// Significant figures of the per-second histograms (1% resolution is
/// plenty for a p50/p99 per second, and keeps them ~20 KiB each).
pub const SERIES_SIGFIG: u8 = 2;

/// One second of the measured window, by completion time: second `i`
/// covers [warm_end + i s, warm_end + (i+1) s); completions after the end
/// count in the last second.
#[derive(Debug, Clone, Default)]
pub struct SecondStats {
    /// Successful appends completed in this second.
    pub ok: u64,
    /// Failed appends (measured window) that failed in this second.
    pub errors: u64,
    /// Latencies (µs) of this second's successful appends; None: none yet.
    pub hist: Option<Histogram<u64>>,
}

/// The measured window, one [`SecondStats`] per (started) second.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub seconds: Vec<SecondStats>,
}

impl Series {
    /// Seconds for a window of `measured` (the last one may be partial).
    pub fn new(measured: Duration) -> Series {
        let n = measured.as_secs_f64().ceil().max(1.0) as usize;
        Series { seconds: vec![SecondStats::default(); n] }
    }

    fn at(&mut self, since_warm_end: Duration) -> &mut SecondStats {
        let last = self.seconds.len() - 1;
        &mut self.seconds[(since_warm_end.as_secs() as usize).min(last)]
    }

    pub fn record_ok(&mut self, since_warm_end: Duration, latency_us: u64) {
        let s = self.at(since_warm_end);
        s.ok += 1;
        let h = s.hist.get_or_insert_with(|| {
            Histogram::new_with_bounds(1, HIST_MAX_US, SERIES_SIGFIG).expect("valid histogram bounds")
        });
        h.saturating_record(latency_us);
    }

    pub fn record_error(&mut self, since_warm_end: Duration) {
        self.at(since_warm_end).errors += 1;
    }

    /// Adds another worker's series (same window).
    pub fn merge(&mut self, other: &Series) {
        for (mine, theirs) in self.seconds.iter_mut().zip(&other.seconds) {
            mine.ok += theirs.ok;
            mine.errors += theirs.errors;
            match (&mut mine.hist, &theirs.hist) {
                (Some(a), Some(b)) => a.add(b).expect("histograms share bounds"),
                (None, Some(b)) => mine.hist = Some(b.clone()),
                _ => {}
            }
        }
    }
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, HIST_MAX_US, HIST_SIGFIG).expect("valid histogram bounds")
}

/// Shared progress counters (relaxed atomics; read once a second).
#[derive(Default)]
pub struct Progress {
    pub done: AtomicU64,
    pub errors: AtomicU64,
    pub deliveries: AtomicU64,
}
