//! Operations surface of the real binary: `/metrics` in the Prometheus
//! text format (checked by a strict parser written here), counters that
//! move with traffic, `/healthz` and `/readyz`, and graceful shutdown on
//! SIGTERM (in-flight appends finish, live readers get clean ends, exit 0,
//! nothing acknowledged is lost).

mod common;

use common::{read_all, Conn, Server};
use ringstream::http::affinity::Affinity;
use ringstream::protocol::names::split_v1_path;
use ringstream::protocol::StreamKey;
use ringstream::shard::router::shard_for;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const OCT: (&str, &str) = ("Content-Type", "application/octet-stream");
const SHARDS: usize = 2;
/// src/limits.rs SHUTDOWN_TIMEOUT_MS: past it the server exits 1 by itself.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_millis(10_000);

// ---------------------------------------------------------------------------
// A strict parser for the Prometheus text exposition format 0.0.4.

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug)]
struct Scrape {
    /// Family name -> type.
    types: HashMap<String, String>,
    samples: Vec<Sample>,
}

fn valid_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => v.parse::<f64>().map_err(|_| format!("bad value {v:?}")),
    }
}

/// `{a="b",c="d"}` (without the braces) -> labels; escapes \\ \" \n.
fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').ok_or_else(|| format!("label without '=' in {s:?}"))?;
        if !valid_name(key) || key.starts_with("__") {
            return Err(format!("bad label name {key:?}"));
        }
        let mut chars = after.chars();
        if chars.next() != Some('"') {
            return Err(format!("label {key} value is not quoted in {s:?}"));
        }
        let mut value = String::new();
        let mut consumed = 1;
        let mut closed = false;
        while let Some(c) = chars.next() {
            consumed += c.len_utf8();
            match c {
                '"' => {
                    closed = true;
                    break;
                }
                '\\' => {
                    let e = chars.next().ok_or("dangling escape")?;
                    consumed += e.len_utf8();
                    value.push(match e {
                        '\\' => '\\',
                        '"' => '"',
                        'n' => '\n',
                        _ => return Err(format!("bad escape \\{e}")),
                    });
                }
                '\n' => return Err("newline in label value".into()),
                c => value.push(c),
            }
        }
        if !closed {
            return Err(format!("unterminated label value in {s:?}"));
        }
        if out.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key} twice in {s:?}"));
        }
        rest = &after[consumed..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.is_empty() {
            return Err(format!("expected ',' after label {key} in {s:?}"));
        }
    }
    Ok(out)
}

/// The family a sample belongs to: its name, or for a histogram's
/// `_bucket`/`_sum`/`_count` the histogram's name.
fn family_of(name: &str, types: &HashMap<String, String>) -> Option<String> {
    if types.contains_key(name) {
        return Some(name.to_string());
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if types.get(base).is_some_and(|t| t == "histogram") {
                return Some(base.to_string());
            }
        }
    }
    None
}

fn parse_exposition(text: &str) -> Result<Scrape, String> {
    if !text.ends_with('\n') {
        return Err("text does not end with a newline".into());
    }
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut samples = Vec::new();
    let mut current: Option<String> = None;
    let mut finished: HashSet<String> = HashSet::new();
    let mut series: HashSet<String> = HashSet::new();
    for (no, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", no + 1);
        if line.is_empty() {
            return Err(at("empty line".into()));
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kw, name, tail) = (parts.next().unwrap(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if !valid_name(name) {
                return Err(at(format!("bad metric name {name:?}")));
            }
            if current.as_deref() != Some(name) {
                if let Some(prev) = current.take() {
                    finished.insert(prev);
                }
                if finished.contains(name) {
                    return Err(at(format!("family {name} appears twice (its lines must be together)")));
                }
                current = Some(name.to_string());
            }
            match kw {
                "HELP" => {
                    if tail.is_empty() || !helps.insert(name.to_string()) {
                        return Err(at("empty or repeated HELP".into()));
                    }
                }
                "TYPE" => {
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&tail) {
                        return Err(at(format!("bad type {tail:?}")));
                    }
                    if types.insert(name.to_string(), tail.to_string()).is_some() {
                        return Err(at("repeated TYPE".into()));
                    }
                }
                _ => return Err(at("unknown comment keyword".into())),
            }
            continue;
        }
        if line.starts_with('#') {
            return Err(at("comment that is neither HELP nor TYPE".into()));
        }
        let (series_part, value) = line.rsplit_once(' ').ok_or_else(|| at("no value".into()))?;
        let value = parse_value(value).map_err(at)?;
        let (name, labels) = match series_part.split_once('{') {
            Some((n, l)) => {
                let l = l.strip_suffix('}').ok_or_else(|| at("labels not closed".into()))?;
                (n, parse_labels(l).map_err(at)?)
            }
            None => (series_part, BTreeMap::new()),
        };
        if !valid_name(name) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let family = family_of(name, &types).ok_or_else(|| at("sample before its TYPE".into()))?;
        if current.as_deref() != Some(family.as_str()) {
            return Err(at(format!("sample of {family} outside its family's block")));
        }
        if !helps.contains(&family) {
            return Err(at("family has no HELP".into()));
        }
        if types[&family] == "counter" && !family.ends_with("_total") {
            return Err(at("counter name does not end in _total".into()));
        }
        if !series.insert(format!("{name}{labels:?}")) {
            return Err(at("duplicate series".into()));
        }
        samples.push(Sample { name: name.to_string(), labels, value });
    }
    for f in types.keys() {
        if !helps.contains(f) {
            return Err(format!("family {f} has TYPE but no HELP"));
        }
    }
    let scrape = Scrape { types, samples };
    check_histograms(&scrape)?;
    Ok(scrape)
}

/// One histogram series: (le, cumulative count) in order, `_sum`, `_count`.
type HistogramSeries = (Vec<(f64, f64)>, Option<f64>, Option<f64>);

/// Buckets cumulative, ending in `le="+Inf"` equal to `_count`, with a `_sum`.
fn check_histograms(s: &Scrape) -> Result<(), String> {
    for (family, t) in &s.types {
        if t != "histogram" {
            continue;
        }
        // Labels other than `le` -> (bucket bounds and counts in order, sum, count).
        let mut groups: BTreeMap<String, HistogramSeries> = BTreeMap::new();
        for x in s.samples.iter().filter(|x| x.name.starts_with(family.as_str())) {
            let mut key = x.labels.clone();
            let le = key.remove("le");
            let g = groups.entry(format!("{key:?}")).or_default();
            match x.name.strip_prefix(family.as_str()) {
                Some("_bucket") => {
                    let le = le.ok_or_else(|| format!("{family}_bucket without le"))?;
                    g.0.push((parse_value(&le)?, x.value));
                }
                Some("_sum") => g.1 = Some(x.value),
                Some("_count") => g.2 = Some(x.value),
                _ => return Err(format!("{}: not a histogram series of {family}", x.name)),
            }
        }
        if groups.is_empty() {
            return Err(format!("histogram {family} has no samples"));
        }
        for (key, (buckets, sum, count)) in groups {
            let count = count.ok_or_else(|| format!("{family}{key}: no _count"))?;
            sum.ok_or_else(|| format!("{family}{key}: no _sum"))?;
            let last = buckets.last().ok_or_else(|| format!("{family}{key}: no buckets"))?;
            if last.0 != f64::INFINITY || last.1 != count {
                return Err(format!("{family}{key}: last bucket {last:?} is not le=+Inf equal to _count {count}"));
            }
            for w in buckets.windows(2) {
                if w[0].0 >= w[1].0 || w[0].1 > w[1].1 {
                    return Err(format!("{family}{key}: buckets not increasing and cumulative: {buckets:?}"));
                }
            }
        }
    }
    Ok(())
}

impl Scrape {
    /// Sum of the samples named `name` whose labels include every `(k, v)`.
    fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|x| x.name == name && want.iter().all(|(k, v)| x.labels.get(*k).map(String::as_str) == Some(*v)))
            .map(|x| x.value)
            .sum()
    }
}

fn scrape(s: &Server) -> Scrape {
    let r = s.conn().request("GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200, "GET /metrics: {}", r.summary());
    assert!(r.must("content-type").starts_with("text/plain; version=0.0.4"), "{}", r.summary());
    let text = r.text();
    parse_exposition(&text).unwrap_or_else(|e| panic!("/metrics is not valid exposition text: {e}\n{text}"))
}

#[test]
fn strict_parser_rejects_what_it_should() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{shard=\"0\"} 1\n";
    assert!(parse_exposition(ok).is_ok());
    for (bad, why) in [
        ("a_total 1\n", "no TYPE"),
        ("# TYPE a_total counter\na_total 1\n", "no HELP"),
        ("# HELP a A.\n# TYPE a counter\na 1\n", "counter without _total"),
        ("# HELP a_total A.\n# TYPE a_total counter\na_total{shard=0} 1\n", "unquoted label"),
        ("# HELP a_total A.\n# TYPE a_total counter\na_total 1\na_total 2\n", "duplicate series"),
        (
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
            "not cumulative",
        ),
        ("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n", "no +Inf"),
        (
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 3\nh_sum 1\nh_count 2\n",
            "+Inf differs from count",
        ),
        (
            "# HELP a_total A.\n# TYPE a_total counter\n# HELP b B.\n# TYPE b gauge\nb 1\na_total 1\n",
            "family split",
        ),
    ] {
        assert!(parse_exposition(bad).is_err(), "accepted ({why}): {bad:?}");
    }
}

// ---------------------------------------------------------------------------

/// The shard that owns `/v1/stream/{path}`.
fn owner_v1(path: &str) -> usize {
    let (bucket, stream) = split_v1_path(path).expect("valid path");
    shard_for(&StreamKey { bucket, stream }, SHARDS)
}

#[test]
fn metrics_parse_and_move_with_traffic() {
    let s = Server::start();
    let before = scrape(&s);
    // Every family has a sample for every shard, even when nothing happened
    // (requests by route and status only once counted, and per-token counts
    // only with tokens: tests/auth.rs).
    // Process-wide families (build info, disk space, process_*) have one
    // sample without a shard label.
    let process_wide =
        |f: &str| f.starts_with("process_") || f.starts_with("ringstream_disk_") || f == "ringstream_build_info";
    for family in before.types.keys().filter(|f| process_wide(f)) {
        let n = before.samples.iter().filter(|x| &x.name == family && !x.labels.contains_key("shard")).count();
        assert_eq!(n, 1, "{family}: one process-wide sample");
    }
    let build = before.samples.iter().find(|x| x.name == "ringstream_build_info").expect("build info");
    assert_eq!(build.value, 1.0);
    assert_eq!(build.labels.get("version").map(String::as_str), Some(env!("CARGO_PKG_VERSION")));
    assert!(build.labels.contains_key("commit") && build.labels.contains_key("rustc"), "{:?}", build.labels);
    let value = |name: &str| before.samples.iter().find(|x| x.name == name).map_or(-1.0, |x| x.value);
    assert!(value("process_resident_memory_bytes") > 1e6 && value("process_open_fds") >= 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds") && value("process_cpu_seconds_total") > 0.0);
    assert!(value("ringstream_disk_size_bytes") >= value("ringstream_disk_free_bytes"));
    assert!(value("ringstream_disk_free_bytes") > 0.0);
    // Per series, or only with tiered storage or in a cell (this server
    // has neither).
    let per_series = |f: &str| {
        f == "ringstream_http_requests_total"
            || f.starts_with("ringstream_token_")
            || f.starts_with("ringstream_tier_")
            || f.starts_with("ringstream_cell_")
    };
    for (family, t) in before.types.iter().filter(|(f, _)| !per_series(f) && !process_wide(f)) {
        let name = if t == "histogram" { format!("{family}_count") } else { family.clone() };
        for shard in 0..SHARDS {
            let shard = shard.to_string();
            assert!(
                before.samples.iter().any(|x| x.name == name && x.labels.get("shard") == Some(&shard)),
                "{name} has no sample for shard {shard}"
            );
        }
    }
    assert!(
        before.samples.iter().all(|x| x.labels.contains_key("shard") || process_wide(&x.name)),
        "every other sample carries a shard label"
    );
    assert!(before.samples.iter().filter(|x| x.name == "ringstream_log_poisoned").all(|x| x.value == 0.0));

    // One connection. A request for a stream the serving shard does not own
    // is a hand-off; a run of them moves the connection to that shard
    // (http::affinity), so the expected counts replay that rule.
    let mut c = s.conn();
    const STREAMS: usize = 24;
    const APPENDS: usize = 5;
    let mut bytes = 0usize;
    let mut owners = Vec::new();
    // The first request shows which shard accepted the connection.
    assert_eq!(c.request("PUT", "/v1/stream/obs/s0", &[OCT], b"").status, 201);
    let first = scrape(&s);
    let accepted = (0..SHARDS)
        .find(|sh| {
            let l = [("shard", sh.to_string()), ("route", "v1_stream".to_string())];
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            first.sum("ringstream_http_requests_total", &l) > before.sum("ringstream_http_requests_total", &l)
        })
        .expect("some shard counted the first /v1 request");
    for i in 0..STREAMS {
        let path = format!("obs/s{i}");
        owners.push(owner_v1(&path));
        if i > 0 {
            assert_eq!(c.request("PUT", &format!("/v1/stream/{path}"), &[OCT], b"").status, 201);
        }
        for k in 0..APPENDS {
            let body = format!("stream {i} append {k} {}", "x".repeat(i));
            bytes += body.len();
            assert_eq!(c.request("POST", &format!("/v1/stream/{path}"), &[OCT], body.as_bytes()).status, 204);
        }
    }
    assert!(owners.contains(&0) && owners.contains(&1), "the streams span both shards: {owners:?}");
    assert_eq!(c.request("GET", "/nope", &[], b"").status, 404);
    assert_eq!(c.request("PUT", "/ds/obsbucket", &[], b"").status, 201);
    assert_eq!(c.request("PUT", "/ds/obsbucket/orders", &[OCT], b"").status, 201);
    assert_eq!(c.request("POST", "/ds/obsbucket/orders", &[OCT], b"abc").status, 200);
    bytes += 3;
    let after = scrape(&s);
    let delta = |name: &str, want: &[(&str, &str)]| after.sum(name, want) - before.sum(name, want);

    let v1 = |status: &str| delta("ringstream_http_requests_total", &[("route", "v1_stream"), ("status", status)]);
    assert_eq!(v1("201"), STREAMS as f64);
    assert_eq!(v1("204"), (STREAMS * APPENDS) as f64);
    let ds =
        |route: &str, status: &str| delta("ringstream_http_requests_total", &[("route", route), ("status", status)]);
    assert_eq!(ds("ds_bucket", "201"), 1.0);
    assert_eq!(ds("ds_stream", "201"), 1.0);
    assert_eq!(ds("ds_stream", "200"), 1.0);
    assert_eq!(ds("other", "404"), 1.0);
    let scrapes = delta("ringstream_http_requests_total", &[("route", "metrics"), ("status", "200")]);
    assert_eq!(scrapes, 2.0, "scrapes are counted (the last one after it answers)");

    // Hand-offs and moves, replayed: the /v1 requests, the 404 (no shard),
    // then the /ds ones (the bucket's owner, then the stream's twice).
    let bucket_owner = ringstream::shard::router::shard_for_bucket("obsbucket", SHARDS);
    let ds_key = StreamKey { bucket: "obsbucket".into(), stream: "orders".into() };
    let ds_owner = shard_for(&ds_key, SHARDS);
    let mut targets: Vec<Option<usize>> = owners.iter().flat_map(|&o| vec![Some(o); 1 + APPENDS]).collect();
    targets.extend([None, Some(bucket_owner), Some(ds_owner), Some(ds_owner)]);
    let (mut at, mut affinity, mut handoffs, mut moves) = (accepted, Affinity::default(), 0, 0);
    for owner in targets {
        let remote = owner.filter(|&o| o != at);
        handoffs += usize::from(remote.is_some());
        affinity.observe(remote);
        if let Some(to) = affinity.take_move() {
            (at, moves) = (to, moves + 1);
        }
    }
    assert_eq!(delta("ringstream_handoffs_total", &[]), handoffs as f64);
    assert!(moves > 0, "a run of requests to the other shard moves the connection");
    assert_eq!(delta("ringstream_connections_moved_total", &[("direction", "out")]), moves as f64);
    assert_eq!(delta("ringstream_connections_moved_total", &[("direction", "in")]), moves as f64);
    let at = at.to_string();
    assert!(after.sum("ringstream_connections", &[("shard", &at)]) >= 1.0, "our connection is open where it moved");

    // Appends and bytes, on the owners.
    assert_eq!(delta("ringstream_appends_total", &[]), (STREAMS * APPENDS + 1) as f64);
    assert_eq!(delta("ringstream_appended_bytes_total", &[]), bytes as f64);
    for sh in 0..SHARDS {
        let sh = sh.to_string();
        let l = [("shard", sh.as_str())];
        let appends = delta("ringstream_appends_total", &l);
        assert!(appends > 0.0, "shard {sh} owns some of the streams");
        assert_eq!(delta("ringstream_append_seconds_count", &l), appends, "one latency per append on shard {sh}");
        assert!(delta("ringstream_append_seconds_sum", &l) > 0.0);
        // Every flush that carried records is one batch; every record durable.
        assert_eq!(after.sum("ringstream_flush_batch_records_count", &l), after.sum("ringstream_flushes_total", &l));
        assert_eq!(
            after.sum("ringstream_flush_batch_records_sum", &l),
            after.sum("ringstream_flushed_records_total", &l)
        );
        let writes = after.sum("ringstream_write_seconds_count", &l);
        assert!(writes >= after.sum("ringstream_flushes_total", &l) && writes > 0.0, "shard {sh}: {writes} writes");
        let syncs = after.sum("ringstream_fdatasync_seconds_count", &l);
        if after.sum("ringstream_direct_io", &l) == 1.0 {
            assert_eq!(syncs, 0.0, "O_DIRECT|O_DSYNC: the write is the sync");
        } else {
            assert_eq!(syncs, writes, "buffered: one fdatasync per write");
        }
        assert_eq!(after.sum("ringstream_pending_bytes", &l), 0.0, "nothing waits for disk after the acks");
    }
    assert_eq!(after.sum("ringstream_streams", &[]), (STREAMS + 1) as f64);
    assert!(delta("ringstream_connections_accepted_total", &[]) >= 1.0);
}

#[test]
fn buffered_mode_times_write_and_fdatasync_separately() {
    let s = Server::start_with(&["--direct-io", "disabled"]);
    let mut c = s.conn();
    assert_eq!(c.request("PUT", "/v1/stream/obs/buffered", &[OCT], b"").status, 201);
    for _ in 0..5 {
        assert_eq!(c.request("POST", "/v1/stream/obs/buffered", &[OCT], b"data").status, 204);
    }
    let m = scrape(&s);
    assert_eq!(m.sum("ringstream_direct_io", &[]), 0.0);
    let writes = m.sum("ringstream_write_seconds_count", &[]);
    assert!(writes >= 6.0, "one write per flush at least: {writes}");
    assert_eq!(m.sum("ringstream_fdatasync_seconds_count", &[]), writes, "one fdatasync per buffered write");
    assert!(m.sum("ringstream_fdatasync_seconds_sum", &[]) > 0.0);
}

/// Sends a request head without reading the answer (for live reads held open).
fn send_get(port: u16, path: &str) -> TcpStream {
    let mut t = TcpStream::connect(("127.0.0.1", port)).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(t, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    t
}

/// Polls /metrics until `name` summed over shards with labels `want` is `v`.
fn wait_metric(s: &Server, name: &str, want: &[(&str, &str)], v: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = scrape(s).sum(name, want);
        if got == v {
            return;
        }
        assert!(Instant::now() < deadline, "{name}{want:?} stayed {got}, expected {v}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn live_reader_gauges_follow_long_polls_and_sse() {
    let s = Server::start_with(&["--long-poll-timeout-ms", "30000"]);
    let mut c = s.conn();
    assert_eq!(c.request("PUT", "/v1/stream/obs/live", &[OCT], b"").status, 201);
    let tail = c.request("POST", "/v1/stream/obs/live", &[OCT], b"a").sno();
    let kind = |k: &'static str| [("kind", k)];
    wait_metric(&s, "ringstream_live_readers", &kind("long_poll"), 0.0);
    let mut lp = send_get(s.port(), &format!("/v1/stream/obs/live?offset={tail}&live=long-poll"));
    wait_metric(&s, "ringstream_live_readers", &kind("long_poll"), 1.0);
    let mut sse = send_get(s.port(), &format!("/v1/stream/obs/live?offset={tail}&live=sse"));
    wait_metric(&s, "ringstream_live_readers", &kind("sse"), 1.0);
    assert_eq!(c.request("POST", "/v1/stream/obs/live", &[OCT], b"b").status, 204);
    let mut buf = [0u8; 4096];
    let n = lp.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "the long-poll got the append");
    wait_metric(&s, "ringstream_live_readers", &kind("long_poll"), 0.0);
    assert_eq!(scrape(&s).sum("ringstream_live_readers", &kind("sse")), 1.0, "the SSE reader stays");
    let _ = sse.read(&mut buf).unwrap();
    drop(sse);
    // The server notices the closed SSE connection when a write to it fails
    // (the first write after the close may still succeed): append until then.
    let deadline = Instant::now() + Duration::from_secs(10);
    while scrape(&s).sum("ringstream_live_readers", &kind("sse")) != 0.0 {
        assert!(Instant::now() < deadline, "the closed SSE reader is still counted");
        assert_eq!(c.request("POST", "/v1/stream/obs/live", &[OCT], b"c").status, 204);
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn health_and_readiness() {
    let mut s = Server::start();
    let mut c = s.conn();
    let h = c.request("GET", "/healthz", &[], b"");
    assert_eq!((h.status, h.text().trim()), (200, "ok"), "{}", h.summary());
    let r = c.request("GET", "/readyz", &[], b"");
    assert_eq!((r.status, r.text().trim()), (200, "ready"), "{}", r.summary());
    assert_eq!(c.request("POST", "/readyz", &[], b"").status, 405);
    assert_eq!(c.request("HEAD", "/healthz", &[], b"").status, 200);
    // A request begun before SIGTERM is answered during the drain, and
    // readiness is then 503.
    let mut t = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    t.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n").unwrap();
    thread::sleep(Duration::from_millis(100));
    let child_pid = s.pid();
    let finisher = thread::spawn(move || {
        // Give every shard time to see the shutdown flag (they poll every 5 ms).
        thread::sleep(Duration::from_millis(300));
        t.write_all(b"\r\n").unwrap();
        let mut out = Vec::new();
        let _ = t.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    let (status, took) = s.terminate(SHUTDOWN_TIMEOUT + Duration::from_secs(5));
    let answer = finisher.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "readyz during shutdown (pid {child_pid}): {answer:?}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "the last answer closes: {answer:?}");
    assert!(status.is_some_and(|st| st.success()), "exit status {status:?} after {took:?}");
}

struct Appender {
    path: String,
    /// Payloads acknowledged, in order.
    acked: Vec<Vec<u8>>,
    /// The payload sent but not answered when the connection ended.
    unanswered: Option<Vec<u8>>,
}

fn append_until_closed(port: u16, path: String, id: usize, running: Arc<AtomicBool>) -> Appender {
    let mut a = Appender { path, acked: Vec::new(), unanswered: None };
    let mut c = match Conn::try_connect(port) {
        Ok(c) => c,
        Err(_) => return a,
    };
    for k in 0.. {
        let body = format!("[{id}:{k}]").into_bytes();
        match c.try_request("POST", &a.path, &[OCT], &body) {
            Ok(r) if r.status == 204 => {
                a.acked.push(body);
                running.store(true, Ordering::Relaxed);
                if r.header("connection") == Some("close") {
                    return a;
                }
            }
            Ok(r) => panic!("append to {} answered {}", a.path, r.summary()),
            Err(_) => {
                a.unanswered = Some(body);
                return a;
            }
        }
    }
    a
}

#[test]
fn sigterm_drains_appends_ends_live_readers_and_exits_zero() {
    let mut s = Server::start_with(&["--long-poll-timeout-ms", "60000"]);
    let port = s.port();
    let mut c = s.conn();
    const WRITERS: usize = 8;
    let paths: Vec<String> = (0..WRITERS).map(|i| format!("/v1/stream/term/w{i}")).collect();
    for p in &paths {
        assert_eq!(c.request("PUT", p, &[OCT], b"").status, 201);
    }
    assert_eq!(c.request("PUT", "/v1/stream/term/quiet", &[OCT], b"").status, 201);
    let tail = c.request("POST", "/v1/stream/term/quiet", &[OCT], b"q").sno();
    drop(c);

    // Live readers on a stream nobody appends to: they wait until shutdown.
    // Several of each, on separate connections, so that SO_REUSEPORT puts
    // some on the shard that does not own the stream.
    const READERS: usize = 4;
    let long_polls: Vec<_> = (0..READERS)
        .map(|_| {
            let lp_path = format!("/v1/stream/term/quiet?offset={tail}&live=long-poll");
            thread::spawn(move || {
                let mut c = Conn::connect(port);
                let t = Instant::now();
                let r = c.request("GET", &lp_path, &[], b"");
                (r, t.elapsed())
            })
        })
        .collect();
    let sses: Vec<_> = (0..READERS)
        .map(|_| {
            let sse_path = format!("/v1/stream/term/quiet?offset={tail}&live=sse");
            thread::spawn(move || {
                let mut t = send_get(port, &sse_path);
                let mut out = Vec::new();
                let r = t.read_to_end(&mut out);
                (r.is_ok(), String::from_utf8_lossy(&out).into_owned())
            })
        })
        .collect();
    wait_metric(&s, "ringstream_live_readers", &[("kind", "long_poll")], READERS as f64);
    wait_metric(&s, "ringstream_live_readers", &[("kind", "sse")], READERS as f64);
    let idle = s.conn();

    let running: Vec<Arc<AtomicBool>> = (0..WRITERS).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let writers: Vec<_> = paths
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, p)| {
            let r = running[i].clone();
            thread::spawn(move || append_until_closed(port, p, i, r))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !running.iter().all(|r| r.load(Ordering::Relaxed)) {
        assert!(Instant::now() < deadline, "appenders did not get going");
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(200));

    let (status, took) = s.terminate(SHUTDOWN_TIMEOUT + Duration::from_secs(5));
    let log = s.log_tail();
    assert!(status.is_some_and(|st| st.success()), "exit status {status:?} after {took:?}; log:\n{log}");
    assert!(took < SHUTDOWN_TIMEOUT, "exited after {took:?}");
    assert!(log.contains("shutdown complete"), "log:\n{log}");

    for h in long_polls {
        let (lp, waited) = h.join().unwrap();
        assert_eq!(lp.status, 204, "the long-poll gets a clean timeout answer: {}", lp.summary());
        assert_eq!(lp.sno(), tail, "positioned at the tail");
        assert!(waited < Duration::from_secs(30), "answered at shutdown, not at its 60 s timeout ({waited:?})");
    }
    for h in sses {
        let (clean, events) = h.join().unwrap();
        assert!(clean, "the SSE stream ends with EOF, not an error");
        assert!(events.starts_with("HTTP/1.1 200"), "{events:?}");
        assert!(events.contains("event: control"), "{events:?}");
        assert!(events.ends_with("\n\n"), "the SSE stream ends at an event boundary: {events:?}");
    }
    let mut idle = idle;
    assert!(idle.peer_closed_within(Duration::from_secs(1)), "an idle keep-alive connection was closed");

    let results: Vec<Appender> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let total: usize = results.iter().map(|a| a.acked.len()).sum();
    let unanswered = results.iter().filter(|a| a.unanswered.is_some()).count();
    eprintln!("SIGTERM to exit: {took:?}; {total} appends acknowledged, {unanswered} writers cut before an answer");
    assert!(total >= WRITERS, "every writer got acknowledgements ({total})");

    // Every acknowledged append is there after a restart; at most the one
    // unanswered append per writer follows it.
    s.start_again();
    let mut c = s.conn();
    for a in &results {
        let (got, _, _) = read_all(&mut c, &a.path);
        let acked: Vec<u8> = a.acked.concat();
        assert!(
            got.starts_with(&acked),
            "{}: acknowledged data missing after restart:\n acked {:?}\n found {:?}",
            a.path,
            String::from_utf8_lossy(&acked),
            String::from_utf8_lossy(&got)
        );
        let rest = &got[acked.len()..];
        assert!(
            rest.is_empty() || Some(rest) == a.unanswered.as_deref(),
            "{}: unexpected data after the acknowledged appends: {:?}",
            a.path,
            String::from_utf8_lossy(rest)
        );
    }
}
