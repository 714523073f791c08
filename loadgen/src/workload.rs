//! Workload configuration, setup (bucket and streams), and the run: worker
//! threads with the append event loops ([`crate::engine`]), an optional
//! thread of live readers ([`crate::reader`]), the progress line, and the
//! merge of their results.
//!
//! Connection `k` of `C` belongs to worker `k mod T`. Each worker keeps its
//! own histogram and counters (no locks on the hot path; only relaxed atomic
//! counters for the progress line); they are merged when the run ends.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};

use crate::client::Client;
use crate::engine::{self, Shared, WorkerResult};
use crate::model::*;
use crate::reader::{self, ReaderResult};

fn send_with_retry(
    client: &mut Client,
    method: &str,
    path: &str,
    content_type: &str,
) -> std::io::Result<crate::client::Response> {
    // Setup requests are idempotent PUTs, so one retry on a fresh connection
    // is safe (e.g. the server closed an idle keep-alive connection).
    match client.request(method, path, Some(content_type), b"") {
        Ok(r) => Ok(r),
        Err(_) => client.request(method, path, Some(content_type), b""),
    }
}

/// Connections that create the streams, at most.
const SETUP_CONNECTIONS_MAX: usize = 64;

/// Create the bucket (ds surface) and all streams (with the run's content
/// type). Streams are created in parallel over up to `connections`
/// connections (at most SETUP_CONNECTIONS_MAX).
pub fn setup(cfg: &Config) -> anyhow::Result<()> {
    let mut client = Client::new(&cfg.target, cfg.timeout).with_context(|| format!("resolving {}", cfg.target))?;
    if cfg.surface == Surface::Ds {
        let path = cfg.bucket_path();
        let r = send_with_retry(&mut client, "PUT", &path, "application/octet-stream")
            .with_context(|| format!("PUT {path}"))?;
        if !matches!(r.status, 200 | 201 | 204 | 409) {
            bail!("PUT {path}: unexpected status {} ({})", r.status, String::from_utf8_lossy(&r.body).trim());
        }
    }

    let workers = cfg.connections.min(cfg.streams).clamp(1, SETUP_CONNECTIONS_MAX);
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
                        let r = send_with_retry(&mut client, "PUT", &path, &cfg.content_type)
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

fn key_name(k: u16) -> String {
    if k == IO_ERROR {
        "io".to_string()
    } else {
        k.to_string()
    }
}

fn merge_errors(into: &mut BTreeMap<String, u64>, from: BTreeMap<u16, u64>) {
    for (k, v) in from {
        *into.entry(key_name(k)).or_insert(0) += v;
    }
}

fn wall_of(t: Instant, base_i: Instant, base_wall_us: u64) -> u64 {
    base_wall_us + u64::try_from(t.saturating_duration_since(base_i).as_micros()).unwrap_or(0)
}

/// Run the append workload (streams must already exist; see [`setup`]).
pub fn run(cfg: &Config) -> anyhow::Result<RunResult> {
    if cfg.connections == 0 || cfg.streams == 0 {
        bail!("connections and streams must be at least 1");
    }
    if !(cfg.rate >= 0.0 && cfg.rate.is_finite()) {
        bail!("rate must be a finite number >= 0");
    }
    let addrs: Vec<SocketAddr> = cfg.target.resolve().with_context(|| format!("resolving {}", cfg.target))?;
    let read_addrs: Vec<SocketAddr> = match &cfg.read_target {
        Some(t) => t.resolve().with_context(|| format!("resolving {t}"))?,
        None => addrs.clone(),
    };
    let threads = cfg.threads.clamp(1, cfg.connections);
    let progress = Progress::default();
    let shared = Shared::new(cfg, addrs.clone(), &progress);
    let stop_readers = AtomicBool::new(false);

    let (results, readers) = thread::scope(|s| -> anyhow::Result<(Vec<WorkerResult>, Option<ReaderResult>)> {
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let mut starts = Vec::new();

        // Readers first, so they are following their streams before the
        // first append.
        let reader_handle = if cfg.readers > 0 {
            let (start_tx, start_rx) = mpsc::channel::<Timing>();
            starts.push(start_tx);
            let (rready_tx, rready_rx) = mpsc::channel::<()>();
            let (addrs, progress, stop) = (&read_addrs, &progress, &stop_readers);
            let h = thread::Builder::new()
                .name("loadgen-readers".into())
                .spawn_scoped(s, move || reader::run_readers(cfg, addrs, progress, rready_tx, start_rx, stop))
                .context("spawning reader thread")?;
            // An error means the thread exited early; join reports why.
            let _ = rready_rx.recv();
            Some(h)
        } else {
            None
        };

        let mut handles = Vec::with_capacity(threads);
        for w in 0..threads {
            let ks: Vec<usize> = (w..cfg.connections).step_by(threads).collect();
            let (start_tx, start_rx) = mpsc::channel::<Timing>();
            starts.push(start_tx);
            let ready_tx = ready_tx.clone();
            let shared = &shared;
            let handle = thread::Builder::new()
                .name(format!("loadgen-worker-{w}"))
                .spawn_scoped(s, move || engine::run_worker(shared, ks, ready_tx, start_rx))
                .context("spawning worker thread")?;
            handles.push(handle);
        }
        drop(ready_tx);
        for _ in 0..threads {
            // A closed channel means a thread exited early; join reports why.
            if ready_rx.recv().is_err() {
                break;
            }
        }

        let now_i = Instant::now();
        let now_wall = crate::payload::wall_us();
        let t0 = now_i + Duration::from_millis(5);
        let warm_end = t0 + cfg.warmup;
        let end = warm_end + cfg.duration;
        let timing = Timing {
            t0,
            warm_end,
            end,
            wall_warm_end_us: wall_of(warm_end, now_i, now_wall),
            wall_end_us: wall_of(end, now_i, now_wall),
        };
        for tx in &starts {
            let _ = tx.send(timing);
        }
        drop(starts);

        if cfg.progress {
            progress_loop(&progress, cfg.readers > 0, t0, warm_end, end, &handles);
        }

        let mut out = Vec::with_capacity(handles.len());
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(r)) => out.push(r),
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => first_err = first_err.or(Some(anyhow::anyhow!("worker panicked"))),
            }
        }
        let readers = match reader_handle {
            Some(h) => {
                if !h.is_finished() {
                    thread::sleep(READER_GRACE);
                }
                stop_readers.store(true, Ordering::Relaxed);
                match h.join() {
                    Ok(Ok(r)) => Some(r),
                    Ok(Err(e)) => {
                        first_err = first_err.or(Some(e.context("live readers")));
                        None
                    }
                    Err(_) => {
                        first_err = first_err.or(Some(anyhow::anyhow!("reader panicked")));
                        None
                    }
                }
            }
            None => None,
        };
        match first_err {
            Some(e) => Err(e),
            None => Ok((out, readers)),
        }
    })?;

    let mut total = RunResult::empty(cfg.duration);
    total.threads = threads;
    for r in results {
        total.hist.add(&r.hist).expect("histograms share bounds");
        total.ok += r.ok;
        total.ok_bytes += r.ok_bytes;
        total.send_lag_hist.add(&r.send_lag).expect("histograms share bounds");
        total.duplicates += r.duplicates;
        total.warmup_requests += r.warmup_requests;
        total.unsent += r.unsent;
        total.connects += r.connects;
        merge_errors(&mut total.errors_by_status, r.errors);
        merge_errors(&mut total.warmup_errors_by_status, r.warmup_errors);
        total.series.merge(&r.series);
    }
    if let Some(r) = readers {
        total.delivery_hist = r.hist;
        total.deliveries = r.deliveries;
        total.delivery_parse_errors = r.parse_errors;
        merge_errors(&mut total.reader_errors_by_status, r.errors);
    }
    Ok(total)
}

/// A per-run id for producer ids: hex of the wall clock and process id.
pub fn new_run_id() -> String {
    let us = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
    format!("{:x}{:x}", us & 0xffff_ffff_ffff, std::process::id())
}

/// Print one line per second to stderr until the run ends (or every
/// worker thread has exited).
fn progress_loop<T>(
    progress: &Progress,
    readers: bool,
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
        let phase = if now <= warm_end + Duration::from_millis(1) { " (warmup)" } else { "" };
        let deliveries = if readers {
            format!("  deliveries: {}", progress.deliveries.load(Ordering::Relaxed))
        } else {
            String::new()
        };
        if span > 0.0 {
            eprintln!(
                "[{:7.1}s] {:>10.0} req/s  errors so far: {}{}{}",
                now.saturating_duration_since(t0).as_secs_f64(),
                (done - last_done) as f64 / span,
                errors,
                deliveries,
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
    use crate::client::Target;
    use crate::payload::PayloadDist;
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
        let mut all: Vec<Duration> =
            (0..c).flat_map(|k| (0..50u64).map(move |n| intended_offset(n, k, c, r))).collect();
        all.sort();
        for (g, t) in all.iter().enumerate() {
            let want = g as f64 / r;
            assert!((t.as_secs_f64() - want).abs() < 1e-9, "slot {g}: {t:?} vs {want}");
        }
    }

    #[test]
    fn streams_round_robin() {
        // Request n of connection k hits (n*C + k) mod S.
        assert_eq!(stream_index(Spread::Rotate, 0, 0, 16, 64), 0);
        assert_eq!(stream_index(Spread::Rotate, 0, 15, 16, 64), 15);
        assert_eq!(stream_index(Spread::Rotate, 1, 0, 16, 64), 16);
        assert_eq!(stream_index(Spread::Rotate, 4, 3, 16, 64), 3);
        assert_eq!(stream_index(Spread::Rotate, 5, 2, 3, 4), 1);
        let mut hits = vec![0; 5];
        for n in 0..10 {
            for k in 0..3 {
                hits[stream_index(Spread::Rotate, n, k, 3, 5)] += 1;
            }
        }
        assert_eq!(hits, vec![6; 5]);
    }

    #[test]
    fn pinned_streams_keep_one_stream_per_connection() {
        for n in 0..10 {
            assert_eq!(stream_index(Spread::Pinned, n, 3, 16, 64), 3);
            assert_eq!(stream_index(Spread::Pinned, n, 70, 128, 64), 6);
        }
    }

    #[test]
    fn stream_paths_per_surface() {
        let mut cfg = test_config(Target::parse("http://127.0.0.1:1/base").unwrap(), Surface::V1);
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
            spread: Spread::Rotate,
            connections: 4,
            threads: 1,
            duration: Duration::from_millis(1000),
            warmup: Duration::from_millis(200),
            payload: 100,
            payload_dist: PayloadDist::Fixed(100),
            seed: 1,
            content_type: "application/octet-stream".into(),
            json: false,
            producer: false,
            run_id: "test".into(),
            rate: 0.0,
            timeout: Duration::from_secs(5),
            readers: 0,
            read_target: None,
            read_mode: ReadMode::LongPoll,
            progress: false,
        }
    }

    /// What the fake server saw.
    #[derive(Default)]
    pub struct Seen {
        pub puts: Vec<String>,
        pub posts: u64,
        pub post_bytes: u64,
        /// Requests whose Content-Type differed from `expect_ct`
        /// (application/octet-stream when unset).
        pub bad_requests: u64,
        pub expect_ct: Option<String>,
        /// (path, producer id, seq) of appends with producer headers.
        pub producer: Vec<(String, String, u64)>,
        /// Appended messages per stream path (offsets are indexes here).
        pub logs: std::collections::HashMap<String, Vec<Vec<u8>>>,
        /// Read requests (GET).
        pub gets: u64,
    }

    /// Throwaway HTTP/1.1 server: thread per connection, keep-alive.
    /// PUT /ds/{bucket} -> 201 the first time, 409 after; other PUT -> 201;
    /// POST -> `post_status` (every `fail_every`-th POST gets 503 if set;
    /// with producer headers 200, or 204 for a repeated seq);
    /// GET ?offset=N|now&live=long-poll|sse -> the messages appended since
    /// (long-poll waits up to 100 ms, then 204; SSE ends after 300 ms).
    pub fn fake_server(post_status: u16, fail_every: u64) -> (Target, Arc<Mutex<Seen>>, Arc<AtomicBool>) {
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

    /// Body of a read of `msgs` (JSON array or concatenation).
    fn read_body(msgs: &[Vec<u8>], json: bool) -> Vec<u8> {
        if json {
            let mut b = b"[".to_vec();
            b.extend(msgs.join(&b","[..]));
            b.push(b']');
            b
        } else {
            msgs.concat()
        }
    }

    fn serve_get(w: &mut TcpStream, seen: &Mutex<Seen>, target: &str) -> bool {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let param = |name: &str| {
            query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')).unwrap_or("").to_string()
        };
        let (offset, live) = (param("offset"), param("live"));
        let json = seen.lock().unwrap().expect_ct.as_deref() == Some("application/json");
        let tail = |g: &Seen| g.logs.get(path).map_or(0, |l| l.len());
        let mut next = {
            let mut g = seen.lock().unwrap();
            g.gets += 1;
            if offset == "now" {
                tail(&g)
            } else {
                offset.parse().unwrap_or(0)
            }
        };
        let started = Instant::now();
        if live == "sse" {
            let mut head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n".to_vec();
            if !json {
                head.extend_from_slice(b"Stream-SSE-Data-Encoding: base64\r\n");
            }
            head.extend_from_slice(b"\r\n");
            if w.write_all(&head).is_err() {
                return false;
            }
            while started.elapsed() < Duration::from_millis(300) {
                let msgs: Vec<Vec<u8>> = {
                    let g = seen.lock().unwrap();
                    g.logs.get(path).map_or(Vec::new(), |l| l[next.min(l.len())..].to_vec())
                };
                let mut out = Vec::new();
                if !msgs.is_empty() {
                    next += msgs.len();
                    let body = read_body(&msgs, json);
                    out.extend_from_slice(b"event: data\ndata:");
                    if json {
                        out.extend_from_slice(&body);
                    } else {
                        use base64::Engine as _;
                        out.extend(base64::engine::general_purpose::STANDARD.encode(body).bytes());
                    }
                    out.extend_from_slice(b"\n\n");
                }
                out.extend(format!("event: control\ndata:{{\"streamNextOffset\":\"{next}\"}}\n\n").bytes());
                if w.write_all(&out).is_err() {
                    return false;
                }
                thread::sleep(Duration::from_millis(2));
            }
            return false; // close: the client reconnects
        }
        loop {
            let msgs: Vec<Vec<u8>> = {
                let g = seen.lock().unwrap();
                g.logs.get(path).map_or(Vec::new(), |l| l[next.min(l.len())..].to_vec())
            };
            if !msgs.is_empty() {
                let body = read_body(&msgs, json);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nStream-Next-Offset: {}\r\nContent-Length: {}\r\n\r\n",
                    next + msgs.len(),
                    body.len()
                );
                return w.write_all(head.as_bytes()).is_ok() && w.write_all(&body).is_ok();
            }
            if live != "long-poll" || started.elapsed() > Duration::from_millis(100) {
                let head = format!("HTTP/1.1 204 No Content\r\nStream-Next-Offset: {next}\r\n\r\n");
                return w.write_all(head.as_bytes()).is_ok();
            }
            thread::sleep(Duration::from_millis(1));
        }
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
            let (method, path) = (it.next().unwrap_or("").to_string(), it.next().unwrap_or("").to_string());
            let mut cl = 0usize;
            let mut ct = String::new();
            let mut producer = (None, None);
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
                let (k, v) = line.split_once(':').unwrap();
                let v = v.trim();
                if k.eq_ignore_ascii_case("content-length") {
                    cl = v.parse().unwrap();
                } else if k.eq_ignore_ascii_case("content-type") {
                    ct = v.to_string();
                } else if k.eq_ignore_ascii_case("producer-id") {
                    producer.0 = Some(v.to_string());
                } else if k.eq_ignore_ascii_case("producer-seq") {
                    producer.1 = Some(v.parse::<u64>().unwrap());
                }
            }
            let mut body = vec![0; cl];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            if method == "GET" {
                if !serve_get(&mut w, seen, &path) {
                    return;
                }
                continue;
            }
            let resp: &[u8] = {
                let mut g = seen.lock().unwrap();
                let want = g.expect_ct.as_deref().unwrap_or("application/octet-stream");
                if ct != want && method != "PUT" || (method == "PUT" && ct.is_empty()) {
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
                        let repeat = match &producer {
                            (Some(id), Some(seq)) => {
                                let key = (path.clone(), id.clone(), *seq);
                                let repeat = g.producer.contains(&key);
                                g.producer.push(key);
                                Some(repeat)
                            }
                            _ => None,
                        };
                        if fail_every > 0 && g.posts.is_multiple_of(fail_every) {
                            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 4\r\n\r\nbusy"
                        } else {
                            if repeat != Some(true) {
                                g.logs.entry(path).or_default().push(body);
                            }
                            match repeat {
                                Some(false) => b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                                Some(true) => b"HTTP/1.1 204 No Content\r\n\r\n",
                                None if post_status == 200 => {
                                    b"HTTP/1.1 200 OK\r\nStream-Next-Offset: 1\r\nContent-Length: 0\r\n\r\n"
                                }
                                None => b"HTTP/1.1 204 No Content\r\nStream-Next-Offset: 1\r\n\r\n",
                            }
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
        assert!(g.posts >= r.ok + r.warmup_requests, "{} vs {}", g.posts, r.ok);
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
        assert!((achieved - 500.0).abs() <= 50.0, "achieved {achieved} req/s, wanted 500 +- 10%");
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

    #[test]
    fn event_loop_open_loop_8_connections_one_thread() {
        let (t, _seen, stop) = fake_server(204, 0);
        let mut cfg = test_config(t, Surface::V1);
        cfg.connections = 8;
        cfg.threads = 1;
        cfg.rate = 500.0;
        cfg.duration = Duration::from_millis(1000);
        cfg.warmup = Duration::from_millis(200);
        setup(&cfg).unwrap();
        let r = run(&cfg).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.threads, 1);
        assert_eq!(r.errors(), 0, "{:?}", r.errors_by_status);
        let achieved = r.ok as f64 / r.measured.as_secs_f64();
        assert!((achieved - 500.0).abs() <= 50.0, "achieved {achieved} req/s, wanted 500 +- 10%");
        assert_eq!(r.ok + r.unsent, 500);
        assert_eq!(r.warmup_requests, 100);
        // One connection each, reused throughout.
        assert_eq!(r.connects, 8);
        // Sent on schedule: a local fake server answers well within 50 ms
        // of the intended time (coarse bound; CI machines are noisy).
        assert!(r.hist.value_at_quantile(0.5) < 50_000, "{}", r.hist.value_at_quantile(0.5));
    }

    #[test]
    fn event_loop_closed_loop_two_threads_payload_dist() {
        let (t, seen, stop) = fake_server(204, 0);
        let mut cfg = test_config(t, Surface::V1);
        cfg.connections = 6;
        cfg.threads = 2;
        cfg.duration = Duration::from_millis(400);
        cfg.warmup = Duration::from_millis(100);
        cfg.payload_dist = PayloadDist::Uniform(30, 90);
        setup(&cfg).unwrap();
        let r = run(&cfg).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.threads, 2);
        assert!(r.ok > 50, "{}", r.ok);
        assert_eq!(r.errors(), 0, "{:?}", r.errors_by_status);
        assert_eq!(r.hist.len(), r.ok);
        let mean = r.ok_bytes as f64 / r.ok as f64;
        assert!((30.0..=90.0).contains(&mean), "{mean}");
        let g = seen.lock().unwrap();
        assert_eq!(g.bad_requests, 0);
        // Every body carries its timestamp header.
        let now = crate::payload::wall_us();
        for log in g.logs.values() {
            for m in log {
                let (ts, len) = crate::payload::decode_binary(m).unwrap();
                assert_eq!(len, m.len());
                assert!((30..=90).contains(&len));
                assert!(ts <= now && now - ts < 60_000_000);
            }
        }
    }

    #[test]
    fn producer_headers_and_json_bodies() {
        let (t, seen, stop) = fake_server(204, 0);
        seen.lock().unwrap().expect_ct = Some("application/json".into());
        let mut cfg = test_config(t, Surface::V1);
        cfg.producer = true;
        cfg.json = true;
        cfg.content_type = "application/json".into();
        cfg.run_id = "r1".into();
        cfg.connections = 2;
        cfg.streams = 3;
        cfg.warmup = Duration::ZERO;
        cfg.duration = Duration::from_millis(300);
        setup(&cfg).unwrap();
        let r = run(&cfg).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(r.ok > 10);
        assert_eq!(r.errors(), 0, "{:?}", r.errors_by_status);
        assert_eq!(r.duplicates, 0);
        let g = seen.lock().unwrap();
        assert_eq!(g.bad_requests, 0);
        // Per (connection, stream): ids lg-r1-<k>, seqs 0, 1, 2, ... in order.
        let mut per: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
        for (path, id, seq) in &g.producer {
            per.entry((path.clone(), id.clone())).or_default().push(*seq);
        }
        assert_eq!(per.len(), 6, "{:?}", per.keys());
        for ((_, id), seqs) in &per {
            assert!(id == "lg-r1-0" || id == "lg-r1-1", "{id}");
            assert_eq!(*seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
        }
        for log in g.logs.values() {
            for m in log {
                let v: serde_json::Value = serde_json::from_slice(m).unwrap();
                assert!(v["t"].as_u64().is_some() && v["i"].as_u64().is_some());
                assert!(m.len() >= 90 && m.len() <= 110, "{}", m.len());
            }
        }
    }

    #[test]
    fn producer_duplicates_are_counted_separately() {
        let (t, seen, stop) = fake_server(204, 0);
        let mut cfg = test_config(t, Surface::V1);
        cfg.producer = true;
        cfg.run_id = "dup".into();
        cfg.connections = 1;
        cfg.streams = 1;
        cfg.warmup = Duration::ZERO;
        cfg.duration = Duration::from_millis(200);
        setup(&cfg).unwrap();
        // Pretend seqs 0..3 already landed: the first three appends are duplicates.
        {
            let mut g = seen.lock().unwrap();
            for seq in 0..3 {
                g.producer.push(("/v1/stream/lg-0".into(), "lg-dup-0".into(), seq));
            }
        }
        let r = run(&cfg).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.duplicates, 3);
        assert_eq!(r.errors(), 0, "{:?}", r.errors_by_status);
        assert!(r.ok > 0);
        assert_eq!(r.hist.len(), r.ok);
    }

    fn readers_end_to_end(mode: ReadMode, json: bool) {
        let (t, seen, stop) = fake_server(204, 0);
        let mut cfg = test_config(t, Surface::V1);
        if json {
            seen.lock().unwrap().expect_ct = Some("application/json".into());
            cfg.json = true;
            cfg.content_type = "application/json".into();
        }
        cfg.streams = 4;
        cfg.connections = 2;
        cfg.rate = 400.0;
        cfg.readers = 2;
        cfg.read_mode = mode;
        cfg.payload_dist = PayloadDist::Uniform(10, 60);
        cfg.warmup = Duration::from_millis(100);
        cfg.duration = Duration::from_millis(700);
        setup(&cfg).unwrap();
        let r = run(&cfg).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(r.errors(), 0, "{:?}", r.errors_by_status);
        assert_eq!(r.delivery_parse_errors, 0);
        assert_eq!(r.reader_errors(), 0, "{:?}", r.reader_errors_by_status);
        // Readers follow streams 0 and 1: half of the 280 appends in the window.
        assert!(
            (100..=145).contains(&r.deliveries),
            "{mode:?} json={json}: {} deliveries of {} appends",
            r.deliveries,
            r.ok
        );
        assert_eq!(r.delivery_hist.len(), r.deliveries);
        // The fake delivers within milliseconds (long-poll polls every 1 ms,
        // SSE every 2 ms); allow for a slow machine.
        let p50 = r.delivery_hist.value_at_quantile(0.5);
        assert!(p50 < 100_000, "delivery p50 {p50} µs");
        if mode == ReadMode::Sse {
            // SSE responses end after 300 ms; the readers came back.
            assert!(seen.lock().unwrap().gets >= 4);
        }
    }

    #[test]
    fn readers_long_poll_binary() {
        readers_end_to_end(ReadMode::LongPoll, false);
    }

    #[test]
    fn readers_sse_binary_base64() {
        readers_end_to_end(ReadMode::Sse, false);
    }

    #[test]
    fn readers_long_poll_json() {
        readers_end_to_end(ReadMode::LongPoll, true);
    }

    #[test]
    fn readers_sse_json() {
        readers_end_to_end(ReadMode::Sse, true);
    }
}
