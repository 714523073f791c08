//! Workload setup and the per-connection run loops.
//!
//! One thread per connection, each with its own keep-alive [`Client`] and its
//! own histogram (no locks on the hot path; only relaxed atomic counters for
//! the progress line). Histograms are merged after the threads finish.
//!
//! Open loop (`rate > 0`): connection `k` of `C` sends request `n` at the
//! intended time `t0 + (n*C + k) / R`. Latency is measured from the *intended*
//! send time, so a server stall (or a client that fell behind) shows up in the
//! histogram instead of being hidden by coordinated omission. A connection
//! that falls behind sends immediately and never skips a request; requests
//! whose intended time fell inside the run but that could not be sent before
//! it ended are reported as `unsent`.
//!
//! Closed loop (`rate == 0`): each connection sends the next request as soon
//! as the previous one completes; latency is measured from the actual send.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;

use crate::client::{Client, Target};

/// Highest latency the histograms track (µs); larger values saturate.
pub const HIST_MAX_US: u64 = 60_000_000;
/// Significant figures kept by the histograms.
pub const HIST_SIGFIG: u8 = 3;

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

/// Everything a run needs; built from the CLI (or directly by tests).
#[derive(Debug, Clone)]
pub struct Config {
    pub target: Target,
    pub surface: Surface,
    pub bucket: String,
    pub prefix: String,
    pub streams: usize,
    pub connections: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub payload: usize,
    /// Total intended requests/second across all connections; 0 = closed loop.
    pub rate: f64,
    /// Connect/read/write timeout per request.
    pub timeout: Duration,
    /// Print a progress line to stderr every second.
    pub progress: bool,
}

impl Config {
    /// Request path of stream `i`.
    pub fn stream_path(&self, i: usize) -> String {
        match self.surface {
            Surface::V1 => self
                .target
                .path(&format!("/v1/stream/{}-{}", self.prefix, i)),
            Surface::Ds => self
                .target
                .path(&format!("/ds/{}/{}-{}", self.bucket, self.prefix, i)),
        }
    }

    fn bucket_path(&self) -> String {
        self.target.path(&format!("/ds/{}", self.bucket))
    }

    /// Whether `status` is a successful append on this surface.
    pub fn append_ok(&self, status: u16) -> bool {
        match self.surface {
            Surface::V1 => status == 204 || status == 200,
            Surface::Ds => status == 200 || status == 204,
        }
    }

    pub fn open_loop(&self) -> bool {
        self.rate > 0.0
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
pub fn stream_index(n: u64, k: usize, connections: usize, streams: usize) -> usize {
    ((n as u128 * connections as u128 + k as u128) % streams as u128) as usize
}

/// Result of a run, aggregated over all connections.
#[derive(Debug)]
pub struct RunResult {
    /// Latencies (µs) of successful appends in the measured window.
    pub hist: Histogram<u64>,
    /// Successful appends in the measured window.
    pub ok: u64,
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
}

impl RunResult {
    pub fn errors(&self) -> u64 {
        self.errors_by_status.values().sum()
    }
    pub fn warmup_errors(&self) -> u64 {
        self.warmup_errors_by_status.values().sum()
    }
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, HIST_MAX_US, HIST_SIGFIG).expect("valid histogram bounds")
}

fn send_with_retry(
    client: &mut Client,
    method: &str,
    path: &str,
    body: &[u8],
) -> io::Result<crate::client::Response> {
    // Setup requests are idempotent PUTs, so one retry on a fresh connection
    // is safe (e.g. the server closed an idle keep-alive connection).
    match client.request(method, path, Some("application/octet-stream"), body) {
        Ok(r) => Ok(r),
        Err(_) => client.request(method, path, Some("application/octet-stream"), body),
    }
}

/// Create the bucket (ds surface) and all streams. Streams are created in
/// parallel over up to `connections` connections.
pub fn setup(cfg: &Config) -> anyhow::Result<()> {
    let mut client = Client::new(&cfg.target, cfg.timeout)
        .with_context(|| format!("resolving {}", cfg.target))?;
    if cfg.surface == Surface::Ds {
        let path = cfg.bucket_path();
        let r = send_with_retry(&mut client, "PUT", &path, b"")
            .with_context(|| format!("PUT {path}"))?;
        if !matches!(r.status, 200 | 201 | 204 | 409) {
            bail!(
                "PUT {path}: unexpected status {} ({})",
                r.status,
                String::from_utf8_lossy(&r.body).trim()
            );
        }
    }

    let workers = cfg.connections.min(cfg.streams).max(1);
    let next = AtomicUsize::new(0);
    thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| -> anyhow::Result<()> {
                    let mut client = Client::new(&cfg.target, cfg.timeout)?;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= cfg.streams {
                            return Ok(());
                        }
                        let path = cfg.stream_path(i);
                        let r = send_with_retry(&mut client, "PUT", &path, b"")
                            .with_context(|| format!("PUT {path}"))?;
                        // 201 created, 200/204 already exists with the same
                        // config; 409 tolerated so reruns against existing
                        // streams still work (appends reveal real problems).
                        if !matches!(r.status, 200 | 201 | 204 | 409) {
                            bail!(
                                "PUT {path}: unexpected status {} ({})",
                                r.status,
                                String::from_utf8_lossy(&r.body).trim()
                            );
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("setup thread panicked")?;
        }
        Ok(())
    })
}

/// Shared progress counters (relaxed atomics; read once a second).
#[derive(Default)]
struct Progress {
    done: AtomicU64,
    errors: AtomicU64,
}

/// Per-connection outcome, merged into a [`RunResult`].
struct ConnResult {
    hist: Histogram<u64>,
    ok: u64,
    errors: BTreeMap<String, u64>,
    warmup_requests: u64,
    warmup_errors: BTreeMap<String, u64>,
    unsent: u64,
}

/// Sleep until `t`: coarse sleep, then yield for the last stretch so wakeup
/// lateness (which would count as latency in open loop) stays small.
fn sleep_until(t: Instant) {
    const SPIN: Duration = Duration::from_micros(200);
    loop {
        let now = Instant::now();
        if now >= t {
            return;
        }
        let left = t - now;
        if left > SPIN {
            thread::sleep(left - SPIN);
        } else {
            thread::yield_now();
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

struct Timing {
    t0: Instant,
    warm_end: Instant,
    end: Instant,
}

fn connection_loop(
    cfg: &Config,
    k: usize,
    mut client: Client,
    paths: &[String],
    payload: &[u8],
    timing: &Timing,
    progress: &Progress,
) -> ConnResult {
    let mut res = ConnResult {
        hist: new_histogram(),
        ok: 0,
        errors: BTreeMap::new(),
        warmup_requests: 0,
        warmup_errors: BTreeMap::new(),
        unsent: 0,
    };
    let c = cfg.connections;
    let mut n: u64 = 0;
    loop {
        // Decide when this request is (or was) due.
        let (start_ref, measured) = if cfg.open_loop() {
            let intended = timing.t0 + intended_offset(n, k, c, cfg.rate);
            if intended >= timing.end {
                break;
            }
            sleep_until(intended);
            if Instant::now() >= timing.end {
                // Fell behind and ran out of time: account for everything
                // that was due in the measured window but never sent.
                let mut m = n;
                loop {
                    let due = timing.t0 + intended_offset(m, k, c, cfg.rate);
                    if due >= timing.end {
                        break;
                    }
                    if due >= timing.warm_end {
                        res.unsent += 1;
                    }
                    m += 1;
                }
                break;
            }
            (intended, intended >= timing.warm_end)
        } else {
            let now = Instant::now();
            if now >= timing.end {
                break;
            }
            (now, now >= timing.warm_end)
        };

        let path = &paths[stream_index(n, k, c, paths.len())];
        let outcome = client.request("POST", path, Some("application/octet-stream"), payload);
        let done_at = Instant::now();
        n += 1;

        let err_key = match outcome {
            Ok(r) if cfg.append_ok(r.status) => None,
            Ok(r) => Some(r.status.to_string()),
            Err(_) => Some("io".to_string()),
        };
        progress.done.fetch_add(1, Ordering::Relaxed);
        match err_key {
            None => {
                if measured {
                    res.hist
                        .saturating_record(micros(done_at.saturating_duration_since(start_ref)));
                    res.ok += 1;
                } else {
                    res.warmup_requests += 1;
                }
            }
            Some(key) => {
                progress.errors.fetch_add(1, Ordering::Relaxed);
                let is_io = key == "io";
                if measured {
                    *res.errors.entry(key).or_insert(0) += 1;
                } else {
                    res.warmup_requests += 1;
                    *res.warmup_errors.entry(key).or_insert(0) += 1;
                }
                if is_io && !cfg.open_loop() {
                    // Avoid a hot reconnect loop against a dead server.
                    thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    res
}

/// Run the append workload (streams must already exist; see [`setup`]).
pub fn run(cfg: &Config) -> anyhow::Result<RunResult> {
    if cfg.connections == 0 || cfg.streams == 0 {
        bail!("connections and streams must be at least 1");
    }
    if !(cfg.rate >= 0.0 && cfg.rate.is_finite()) {
        bail!("rate must be a finite number >= 0");
    }
    let paths: Vec<String> = (0..cfg.streams).map(|i| cfg.stream_path(i)).collect();
    let payload: Vec<u8> = (0..cfg.payload).map(|i| b'a' + (i % 26) as u8).collect();
    let progress = Progress::default();

    let results: Vec<ConnResult> = thread::scope(|s| -> anyhow::Result<Vec<ConnResult>> {
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let mut starts = Vec::with_capacity(cfg.connections);
        let mut handles = Vec::with_capacity(cfg.connections);
        for k in 0..cfg.connections {
            let (start_tx, start_rx) = mpsc::channel::<Timing>();
            starts.push(start_tx);
            let ready_tx = ready_tx.clone();
            let (paths, payload, progress) = (&paths, &payload, &progress);
            let handle = thread::Builder::new()
                .name(format!("loadgen-conn-{k}"))
                .spawn_scoped(s, move || -> anyhow::Result<ConnResult> {
                    let client = Client::new(&cfg.target, cfg.timeout);
                    let mut client = match client {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(());
                            return Err(e.into());
                        }
                    };
                    // Pre-connect so connection setup is not in the first
                    // latency sample; a failure here is retried by the loop.
                    let _ = client.ensure_connected();
                    let _ = ready_tx.send(());
                    let timing = start_rx.recv().context("start signal lost")?;
                    Ok(connection_loop(
                        cfg, k, client, paths, payload, &timing, progress,
                    ))
                })
                .context("spawning connection thread")?;
            handles.push(handle);
        }
        drop(ready_tx);
        for _ in 0..cfg.connections {
            // A closed channel means a thread exited early; join reports why.
            if ready_rx.recv().is_err() {
                break;
            }
        }

        let t0 = Instant::now() + Duration::from_millis(5);
        let warm_end = t0 + cfg.warmup;
        let end = warm_end + cfg.duration;
        for tx in &starts {
            let _ = tx.send(Timing { t0, warm_end, end });
        }
        drop(starts);

        if cfg.progress {
            progress_loop(&progress, t0, warm_end, end, &handles);
        }

        let mut out = Vec::with_capacity(handles.len());
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(r)) => out.push(r),
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => {
                    first_err = first_err.or(Some(anyhow::anyhow!("connection thread panicked")))
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    })?;

    let mut total = RunResult {
        hist: new_histogram(),
        ok: 0,
        errors_by_status: BTreeMap::new(),
        warmup_requests: 0,
        warmup_errors_by_status: BTreeMap::new(),
        unsent: 0,
        measured: cfg.duration,
    };
    for r in results {
        total.hist.add(&r.hist).expect("histograms share bounds");
        total.ok += r.ok;
        total.warmup_requests += r.warmup_requests;
        total.unsent += r.unsent;
        for (k, v) in r.errors {
            *total.errors_by_status.entry(k).or_insert(0) += v;
        }
        for (k, v) in r.warmup_errors {
            *total.warmup_errors_by_status.entry(k).or_insert(0) += v;
        }
    }
    Ok(total)
}

/// Print one line per second to stderr until the run ends (or every
/// connection thread has exited).
fn progress_loop<T>(
    progress: &Progress,
    t0: Instant,
    warm_end: Instant,
    end: Instant,
    handles: &[thread::ScopedJoinHandle<'_, T>],
) {
    let mut tick = 1u32;
    let mut last_done = 0u64;
    loop {
        let at = t0 + Duration::from_secs(u64::from(tick));
        let stop_at = at.min(end);
        while Instant::now() < stop_at {
            if handles.iter().all(|h| h.is_finished()) {
                return;
            }
            let left = stop_at.saturating_duration_since(Instant::now());
            thread::sleep(left.min(Duration::from_millis(100)));
        }
        let now = Instant::now();
        let done = progress.done.load(Ordering::Relaxed);
        let errors = progress.errors.load(Ordering::Relaxed);
        let span = if at <= end {
            1.0
        } else {
            // Final partial second.
            (end - (at - Duration::from_secs(1))).as_secs_f64()
        };
        let phase = if now <= warm_end + Duration::from_millis(1) {
            " (warmup)"
        } else {
            ""
        };
        if span > 0.0 {
            eprintln!(
                "[{:7.1}s] {:>10.0} req/s  errors so far: {}{}",
                now.saturating_duration_since(t0).as_secs_f64(),
                (done - last_done) as f64 / span,
                errors,
                phase
            );
        }
        last_done = done;
        if at >= end {
            return;
        }
        tick += 1;
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};

    #[test]
    fn intended_times_are_evenly_interleaved() {
        // 4 connections at 1000 req/s total: global slot g = n*4 + k is due at g ms.
        assert_eq!(intended_offset(0, 0, 4, 1000.0), Duration::ZERO);
        assert_eq!(intended_offset(0, 3, 4, 1000.0), Duration::from_millis(3));
        assert_eq!(intended_offset(1, 0, 4, 1000.0), Duration::from_millis(4));
        assert_eq!(intended_offset(10, 2, 4, 1000.0), Duration::from_millis(42));
        // Per-connection spacing is C / R.
        let d = intended_offset(6, 1, 4, 1000.0) - intended_offset(5, 1, 4, 1000.0);
        assert_eq!(d, Duration::from_millis(4));

        // Across all connections, the first R*T intended times cover [0, T)
        // exactly once each at spacing 1/R.
        let (c, r) = (7usize, 350.0);
        let mut all: Vec<Duration> = (0..c)
            .flat_map(|k| (0..50u64).map(move |n| intended_offset(n, k, c, r)))
            .collect();
        all.sort();
        for (g, t) in all.iter().enumerate() {
            let want = g as f64 / r;
            assert!(
                (t.as_secs_f64() - want).abs() < 1e-9,
                "slot {g}: {t:?} vs {want}"
            );
        }
    }

    #[test]
    fn streams_round_robin() {
        // Request n of connection k hits (n*C + k) mod S.
        assert_eq!(stream_index(0, 0, 16, 64), 0);
        assert_eq!(stream_index(0, 15, 16, 64), 15);
        assert_eq!(stream_index(1, 0, 16, 64), 16);
        assert_eq!(stream_index(4, 3, 16, 64), 3);
        assert_eq!(stream_index(5, 2, 3, 4), 1);
        let mut hits = vec![0; 5];
        for n in 0..10 {
            for k in 0..3 {
                hits[stream_index(n, k, 3, 5)] += 1;
            }
        }
        assert_eq!(hits, vec![6; 5]);
    }

    #[test]
    fn stream_paths_per_surface() {
        let mut cfg = test_config(
            Target::parse("http://127.0.0.1:1/base").unwrap(),
            Surface::V1,
        );
        cfg.prefix = "p".into();
        assert_eq!(cfg.stream_path(3), "/base/v1/stream/p-3");
        cfg.surface = Surface::Ds;
        cfg.bucket = "b".into();
        assert_eq!(cfg.stream_path(3), "/base/ds/b/p-3");
        assert_eq!(cfg.bucket_path(), "/base/ds/b");
    }

    pub fn test_config(target: Target, surface: Surface) -> Config {
        Config {
            target,
            surface,
            bucket: "loadgen".into(),
            prefix: "lg".into(),
            streams: 8,
            connections: 4,
            duration: Duration::from_millis(1000),
            warmup: Duration::from_millis(200),
            payload: 100,
            rate: 0.0,
            timeout: Duration::from_secs(5),
            progress: false,
        }
    }

    /// What the fake server saw.
    #[derive(Default)]
    pub struct Seen {
        pub puts: Vec<String>,
        pub posts: u64,
        pub post_bytes: u64,
        pub bad_requests: u64,
    }

    /// Throwaway HTTP/1.1 server: thread per connection, keep-alive.
    /// PUT /ds/{bucket} -> 201 the first time, 409 after; other PUT -> 201;
    /// POST -> `post_status` (every `fail_every`-th POST gets 503 if set).
    pub fn fake_server(
        post_status: u16,
        fail_every: u64,
    ) -> (Target, Arc<Mutex<Seen>>, Arc<AtomicBool>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        thread::spawn(move || {
            for s in l.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(s) = s else { continue };
                let seen = seen2.clone();
                thread::spawn(move || serve_conn(s, &seen, post_status, fail_every));
            }
        });
        let t = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        (t, seen, stop)
    }

    fn serve_conn(s: TcpStream, seen: &Mutex<Seen>, post_status: u16, fail_every: u64) {
        s.set_nodelay(true).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let mut it = line.split_whitespace();
            let (method, path) = (
                it.next().unwrap_or("").to_string(),
                it.next().unwrap_or("").to_string(),
            );
            let mut cl = 0usize;
            let mut ct_ok = false;
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
                let (k, v) = line.split_once(':').unwrap();
                if k.eq_ignore_ascii_case("content-length") {
                    cl = v.trim().parse().unwrap();
                }
                if k.eq_ignore_ascii_case("content-type") && v.trim() == "application/octet-stream"
                {
                    ct_ok = true;
                }
            }
            let mut body = vec![0; cl];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            let resp: &[u8] = {
                let mut g = seen.lock().unwrap();
                if !ct_ok {
                    g.bad_requests += 1;
                }
                match method.as_str() {
                    "PUT" => {
                        let dup = path.matches('/').count() == 2 && g.puts.contains(&path);
                        g.puts.push(path);
                        if dup {
                            b"HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\n\r\n"
                        } else {
                            b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
                        }
                    }
                    "POST" => {
                        g.posts += 1;
                        g.post_bytes += cl as u64;
                        if fail_every > 0 && g.posts.is_multiple_of(fail_every) {
                            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 4\r\n\r\nbusy"
                        } else if post_status == 200 {
                            b"HTTP/1.1 200 OK\r\nStream-Next-Offset: 1\r\nContent-Length: 0\r\n\r\n"
                        } else {
                            b"HTTP/1.1 204 No Content\r\nStream-Next-Offset: 1\r\n\r\n"
                        }
                    }
                    _ => b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n",
                }
            };
            if w.write_all(resp).is_err() {
                return;
            }
        }
    }

    #[test]
    fn end_to_end_closed_loop_v1() {
        let (t, seen, stop) = fake_server(204, 0);
        let mut cfg = test_config(t, Surface::V1);
        cfg.duration = Duration::from_millis(500);
        setup(&cfg).unwrap();
        let r = run(&cfg).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(r.ok > 0, "no successful requests");
        assert_eq!(r.errors(), 0, "{:?}", r.errors_by_status);
        assert_eq!(r.warmup_errors(), 0);
        assert_eq!(r.unsent, 0);
        assert_eq!(r.hist.len(), r.ok);
        let g = seen.lock().unwrap();
        assert_eq!(g.puts.len(), 8);
        assert!(g.puts.contains(&"/v1/stream/lg-7".to_string()));
        assert_eq!(g.bad_requests, 0);
        // Every POST the server answered is accounted for (the server may
        // have seen at most one in-flight request per connection more).
        assert!(
            g.posts >= r.ok + r.warmup_requests,
            "{} vs {}",
            g.posts,
            r.ok
        );
        assert_eq!(g.post_bytes, g.posts * 100);
    }

    #[test]
    fn end_to_end_open_loop_hits_target_rate() {
        let (t, _seen, stop) = fake_server(204, 0);
        let mut cfg = test_config(t, Surface::V1);
        cfg.rate = 500.0;
        cfg.duration = Duration::from_millis(1000);
        cfg.warmup = Duration::from_millis(200);
        setup(&cfg).unwrap();
        let r = run(&cfg).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.errors(), 0, "{:?}", r.errors_by_status);
        let achieved = r.ok as f64 / r.measured.as_secs_f64();
        assert!(
            (achieved - 500.0).abs() <= 50.0,
            "achieved {achieved} req/s, wanted 500 +- 10%"
        );
        // The schedule is exact: 500/s for 1 s after a 0.2 s warmup is 500
        // requests in the window, all of them sent.
        assert_eq!(r.ok + r.unsent, 500);
        assert_eq!(r.warmup_requests, 100);
    }

    #[test]
    fn end_to_end_ds_surface_and_503_bucketed() {
        let (t, seen, stop) = fake_server(200, 10);
        let mut cfg = test_config(t, Surface::Ds);
        cfg.duration = Duration::from_millis(300);
        cfg.warmup = Duration::ZERO;
        setup(&cfg).unwrap();
        // Second setup: bucket PUT now answers 409, which is fine.
        setup(&cfg).unwrap();
        let r = run(&cfg).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(r.ok > 0);
        let n503 = r.errors_by_status.get("503").copied().unwrap_or(0);
        assert!(n503 > 0, "{:?}", r.errors_by_status);
        assert_eq!(r.errors(), n503);
        let g = seen.lock().unwrap();
        assert_eq!(g.puts.iter().filter(|p| *p == "/ds/loadgen").count(), 2);
        assert!(g.puts.contains(&"/ds/loadgen/lg-0".to_string()));
    }

    #[test]
    fn io_errors_are_counted_and_recovered() {
        // Server that hangs up on every 5th request on a connection.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        thread::spawn(move || {
            for s in l.incoming().flatten() {
                thread::spawn(move || {
                    let mut w = s.try_clone().unwrap();
                    let mut r = BufReader::new(s);
                    let mut served = 0;
                    loop {
                        let mut line = String::new();
                        let mut cl = 0usize;
                        loop {
                            line.clear();
                            if r.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if let Some(v) = line.strip_prefix("Content-Length:") {
                                cl = v.trim().parse().unwrap();
                            }
                        }
                        let mut body = vec![0; cl];
                        if r.read_exact(&mut body).is_err() {
                            return;
                        }
                        served += 1;
                        if served == 5 {
                            return; // drop without answering
                        }
                        if w.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let t = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let mut cfg = test_config(t, Surface::V1);
        cfg.connections = 2;
        cfg.warmup = Duration::ZERO;
        cfg.duration = Duration::from_millis(200);
        let r = run(&cfg).unwrap();
        let io = r.errors_by_status.get("io").copied().unwrap_or(0);
        assert!(io > 0, "{:?}", r.errors_by_status);
        assert!(r.ok > io * 2, "ok {} io {}", r.ok, io);
    }
}
