//! Run reports: the human summary, the JSON document harnesses parse, the
//! `.hgrm` percentile distribution, and comparison against a baseline report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};

use base64::Engine as _;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::model::{Config, RunResult};

/// Latency summary in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
    pub mean: f64,
    pub min: u64,
    pub stdev: f64,
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency { p50: 0, p90: 0, p99: 0, p999: 0, p9999: 0, max: 0, mean: 0.0, min: 0, stdev: 0.0 };
        }
        Latency {
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
            mean: h.mean(),
            min: h.min(),
            stdev: h.stdev(),
        }
    }
}

/// Version of the JSON report's layout (loadgen/README.md): 1 had no
/// `schema_version` field; 2 added it, `host` and `time_series`.
pub const SCHEMA_VERSION: u32 = 2;

/// The machine and build a report came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// CPUs this process could run on.
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_bytes: u64,
    /// `uname -r`.
    pub kernel: String,
    /// loadgen's build: version, git commit, rustc, profile.
    pub loadgen_build: String,
}

impl Host {
    pub fn this() -> Host {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let field = |text: &str, key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
        };
        let mem_kib: u64 = field(&read("/proc/meminfo"), "MemTotal")
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        Host {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: field(&cpuinfo, "model name").unwrap_or_default(),
            memory_bytes: mem_kib * 1024,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            loadgen_build: format!(
                "{} (commit {}, rustc {}, {})",
                env!("CARGO_PKG_VERSION"),
                env!("BUILD_GIT_COMMIT"),
                env!("BUILD_RUSTC"),
                env!("BUILD_PROFILE")
            ),
        }
    }
}

/// One second of the measured window (`time_series`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Start of the second, from the start of the measured window.
    pub t_s: f64,
    /// Successful appends completed in it.
    pub requests: u64,
    /// `requests` per second (the last second may be shorter).
    pub rate: f64,
    /// Failed appends in it.
    pub errors: u64,
    /// Latency percentiles of its successful appends (0 when none).
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// The per-second series of a run's measured window.
pub fn time_series(series: &crate::model::Series, measured: f64) -> Vec<Second> {
    series
        .seconds
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let span = (measured - i as f64).clamp(1e-3, 1.0);
            let q = |p: f64| s.hist.as_ref().map_or(0, |h| h.value_at_quantile(p));
            Second {
                t_s: i as f64,
                requests: s.ok,
                rate: s.ok as f64 / span,
                errors: s.errors,
                p50_us: q(0.5),
                p99_us: q(0.99),
                max_us: s.hist.as_ref().map_or(0, |h| h.max()),
            }
        })
        .collect()
}

/// The JSON report (`--out`). Field names are a contract with harnesses;
/// loadgen/README.md documents each one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`]; absent (read as 1) in older reports.
    #[serde(default = "schema_v1")]
    pub schema_version: u32,
    pub target: String,
    pub surface: String,
    pub streams: usize,
    /// `rotate` or `pinned` (`--spread`).
    #[serde(default)]
    pub spread: String,
    pub connections: usize,
    pub payload_bytes: usize,
    /// Length of the measured window (warmup excluded).
    pub duration_s: f64,
    pub warmup_s: f64,
    /// Intended total requests/second; 0 = closed loop.
    pub target_rate: f64,
    /// Successful appends in the measured window / `duration_s`.
    pub achieved_rate: f64,
    /// Successful appends in the measured window.
    pub requests: u64,
    /// Failed appends in the measured window.
    pub errors: u64,
    /// Failed appends in the measured window by HTTP status, or "io".
    pub errors_by_status: BTreeMap<String, u64>,
    /// Payload bytes of successful appends per second.
    pub bytes_per_sec: f64,
    pub latency_us: Latency,
    /// HdrHistogram V2 deflate-compressed serialization, base64 (µs values).
    pub histogram_v2_base64: String,
    /// Requests completed during warmup (not in the histogram).
    pub warmup_requests: u64,
    /// Failed requests during warmup.
    pub warmup_errors: u64,
    pub warmup_errors_by_status: BTreeMap<String, u64>,
    /// Open loop: requests due in the measured window that were never sent.
    pub unsent: u64,
    /// "open" or "closed".
    pub mode: String,
    pub loadgen_version: String,
    // Fields below were added later; `default` keeps older reports readable.
    /// Worker threads driving the connections.
    #[serde(default)]
    pub threads: usize,
    #[serde(default)]
    pub content_type: String,
    /// Bodies were JSON messages.
    #[serde(default)]
    pub json: bool,
    /// Idempotent-producer headers were sent.
    #[serde(default)]
    pub producer: bool,
    /// Body size distribution: fixed:N, uniform:MIN:MAX or exp:MEAN.
    #[serde(default)]
    pub payload_dist: String,
    /// Mean body size of the successful appends in the window.
    #[serde(default)]
    pub payload_bytes_mean: f64,
    #[serde(default)]
    pub seed: u64,
    /// Producer mode: appends answered as duplicates (measured window; not
    /// in `requests`, not errors).
    #[serde(default)]
    pub duplicates: u64,
    /// TCP connections the writers opened (connections + reconnects).
    #[serde(default)]
    pub connects: u64,
    /// Live readers and how they read ("long-poll", "sse"; "none").
    #[serde(default)]
    pub readers: usize,
    #[serde(default)]
    pub read_mode: String,
    /// Messages sent in the window that the readers received and recorded.
    #[serde(default)]
    pub deliveries: u64,
    /// From the append's send time to its delivery at a live reader, µs.
    #[serde(default)]
    pub delivery_latency_us: Latency,
    #[serde(default)]
    pub delivery_histogram_v2_base64: String,
    /// Open loop: how late the load tool sent requests (actual − intended
    /// send time, µs). Large values mean loadgen itself was behind (CPU
    /// starved), which inflates `latency_us`.
    #[serde(default)]
    pub send_lag_us: Latency,
    /// Failed reader requests.
    #[serde(default)]
    pub reader_errors: u64,
    #[serde(default)]
    pub reader_errors_by_status: BTreeMap<String, u64>,
    /// Delivered data that did not decode as loadgen messages.
    #[serde(default)]
    pub delivery_parse_errors: u64,
    // Schema version 2.
    /// Where the run was made.
    #[serde(default)]
    pub host: Host,
    /// The measured window second by second (by completion time).
    #[serde(default)]
    pub time_series: Vec<Second>,
    /// A name for the run in charts (`--label`; default: none).
    #[serde(default)]
    pub label: String,
}

fn schema_v1() -> u32 {
    1
}

pub fn histogram_base64(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut buf).expect("serializing into a Vec cannot fail");
    base64::engine::general_purpose::STANDARD.encode(buf)
}

/// Decode `histogram_v2_base64` back into a histogram.
pub fn histogram_from_base64(s: &str) -> anyhow::Result<Histogram<u64>> {
    use anyhow::Context as _;
    let bytes =
        base64::engine::general_purpose::STANDARD.decode(s).context("histogram_v2_base64 is not valid base64")?;
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| anyhow::anyhow!("bad histogram encoding: {e:?}"))
}

impl Report {
    pub fn new(cfg: &Config, r: &RunResult) -> Report {
        let secs = r.measured.as_secs_f64();
        let per_sec = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        Report {
            schema_version: SCHEMA_VERSION,
            target: cfg.target.to_string(),
            surface: cfg.surface.as_str().to_string(),
            streams: cfg.streams,
            spread: cfg.spread.as_str().to_string(),
            connections: cfg.connections,
            payload_bytes: cfg.payload,
            duration_s: secs,
            warmup_s: cfg.warmup.as_secs_f64(),
            target_rate: cfg.rate,
            achieved_rate: per_sec(r.ok as f64),
            requests: r.ok,
            errors: r.errors(),
            errors_by_status: r.errors_by_status.clone(),
            bytes_per_sec: per_sec(r.ok_bytes as f64),
            latency_us: Latency::from_histogram(&r.hist),
            histogram_v2_base64: histogram_base64(&r.hist),
            warmup_requests: r.warmup_requests,
            warmup_errors: r.warmup_errors(),
            warmup_errors_by_status: r.warmup_errors_by_status.clone(),
            unsent: r.unsent,
            mode: if cfg.open_loop() { "open" } else { "closed" }.to_string(),
            loadgen_version: env!("CARGO_PKG_VERSION").to_string(),
            threads: r.threads,
            content_type: cfg.content_type.clone(),
            json: cfg.json,
            producer: cfg.producer,
            payload_dist: cfg.payload_dist.describe(),
            payload_bytes_mean: if r.ok > 0 { r.ok_bytes as f64 / r.ok as f64 } else { 0.0 },
            seed: cfg.seed,
            duplicates: r.duplicates,
            connects: r.connects,
            readers: cfg.readers,
            read_mode: if cfg.readers > 0 { cfg.read_mode.as_str() } else { "none" }.to_string(),
            deliveries: r.deliveries,
            delivery_latency_us: Latency::from_histogram(&r.delivery_hist),
            delivery_histogram_v2_base64: if cfg.readers > 0 {
                histogram_base64(&r.delivery_hist)
            } else {
                String::new()
            },
            send_lag_us: Latency::from_histogram(&r.send_lag_hist),
            reader_errors: r.reader_errors(),
            reader_errors_by_status: r.reader_errors_by_status.clone(),
            delivery_parse_errors: r.delivery_parse_errors,
            host: Host::this(),
            time_series: time_series(&r.series, secs),
            label: String::new(),
        }
    }

    /// Human-readable summary for stdout.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let rate = if self.target_rate > 0.0 {
            format!("{} req/s (open loop)", self.target_rate)
        } else {
            "closed loop".to_string()
        };
        let _ = writeln!(s, "target        {}", self.target);
        let _ = writeln!(s, "surface       {}", self.surface);
        let _ = writeln!(s, "streams       {} ({})", self.streams, self.spread);
        let plural = if self.threads == 1 { "" } else { "s" };
        let _ = writeln!(s, "connections   {} on {} thread{plural}", self.connections, self.threads);
        if self.payload_dist.is_empty() || self.payload_dist.starts_with("fixed") {
            let _ = writeln!(s, "payload       {} bytes", self.payload_bytes);
        } else {
            let _ = writeln!(s, "payload       {} (mean {:.1} bytes)", self.payload_dist, self.payload_bytes_mean);
        }
        if !self.content_type.is_empty() {
            let json = if self.json { ", JSON messages" } else { "" };
            let producer = if self.producer { ", idempotent producer" } else { "" };
            let _ = writeln!(s, "content type  {}{json}{producer}", self.content_type);
        }
        let _ = writeln!(s, "target rate   {rate}");
        let _ = writeln!(s, "window        {:.2} s measured after {:.2} s warmup", self.duration_s, self.warmup_s);
        let _ = writeln!(s, "requests      {} ok", self.requests);
        let _ = writeln!(s, "achieved      {:.1} req/s", self.achieved_rate);
        let _ = writeln!(
            s,
            "throughput    {:.2} MB/s ({:.2} MiB/s)",
            self.bytes_per_sec / 1e6,
            self.bytes_per_sec / (1024.0 * 1024.0)
        );
        let l = &self.latency_us;
        let _ = writeln!(s, "latency (successful appends, µs)");
        for (name, v) in [
            ("min", l.min),
            ("p50", l.p50),
            ("p90", l.p90),
            ("p99", l.p99),
            ("p99.9", l.p999),
            ("p99.99", l.p9999),
            ("max", l.max),
        ] {
            let _ = writeln!(s, "  {name:<8}{v:>12} µs  {:>10.3} ms", v as f64 / 1000.0);
        }
        let _ = writeln!(s, "  {:<8}{:>12.1} µs  {:>10.3} ms", "mean", l.mean, l.mean / 1000.0);
        let _ = writeln!(s, "errors        {}{}", self.errors, fmt_map(&self.errors_by_status));
        if self.producer {
            let _ = writeln!(s, "duplicates    {}", self.duplicates);
        }
        if self.target_rate > 0.0 {
            let g = &self.send_lag_us;
            let _ = writeln!(
                s,
                "send lag      p50 {} µs, p99 {} µs, max {} µs (actual - intended send; loadgen's own lateness)",
                g.p50, g.p99, g.max
            );
        }
        if self.readers > 0 {
            let d = &self.delivery_latency_us;
            let _ = writeln!(
                s,
                "delivery latency (append sent -> delivered to {} {} readers, µs): {} deliveries",
                self.readers, self.read_mode, self.deliveries
            );
            for (name, v) in [("p50", d.p50), ("p90", d.p90), ("p99", d.p99), ("p99.9", d.p999), ("max", d.max)] {
                let _ = writeln!(s, "  {name:<8}{v:>12} µs  {:>10.3} ms", v as f64 / 1000.0);
            }
            if self.reader_errors > 0 || self.delivery_parse_errors > 0 {
                let _ = writeln!(
                    s,
                    "reader errors {}{}; undecodable deliveries {}",
                    self.reader_errors,
                    fmt_map(&self.reader_errors_by_status),
                    self.delivery_parse_errors
                );
            }
            if self.deliveries == 0 {
                let _ = writeln!(s, "WARNING: the live readers recorded no deliveries");
            }
        }
        if self.warmup_errors > 0 {
            let _ = writeln!(s, "warmup errors {}{}", self.warmup_errors, fmt_map(&self.warmup_errors_by_status));
        }
        if self.unsent > 0 {
            let _ = writeln!(
                s,
                "WARNING: fell behind the open-loop schedule: {} requests due in the window were \
                 never sent; the server (or loadgen) could not sustain {} req/s, and percentiles \
                 understate the tail",
                self.unsent, self.target_rate
            );
        }
        s
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serializes")
    }
}

fn fmt_map(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("  ({})", parts.join(", "))
}

/// Write the percentile distribution in the classic HdrHistogram `.hgrm`
/// text format (values in µs), suitable for the HdrHistogram plotter.
pub fn write_hgrm<W: Write>(h: &Histogram<u64>, mut w: W) -> io::Result<()> {
    writeln!(w, "{:>12} {:>14} {:>10} {:>14}\n", "Value(us)", "Percentile", "TotalCount", "1/(1-Percentile)")?;
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(5) {
            total += v.count_since_last_iteration();
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                writeln!(
                    w,
                    "{:>12.3} {:>14.12} {:>10} {:>14.2}",
                    v.value_iterated_to() as f64,
                    q,
                    total,
                    1.0 / (1.0 - q)
                )?;
            } else {
                writeln!(w, "{:>12.3} {:>14.12} {:>10}", v.value_iterated_to() as f64, q, total)?;
            }
        }
    }
    let (mean, stdev) = if h.is_empty() { (0.0, 0.0) } else { (h.mean(), h.stdev()) };
    writeln!(w, "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]", mean, stdev)?;
    writeln!(w, "#[Max     = {:>12.3}, Total count    = {:>12}]", h.max() as f64, h.len())?;
    writeln!(
        w,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        // Sub-bucket count as HdrHistogram defines it: enough for
        // single-unit resolution up to 2 * 10^sigfig.
        (2 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two()
    )?;
    Ok(())
}

/// One metric compared against the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub metric: &'static str,
    pub baseline: f64,
    pub current: f64,
    /// current / baseline (NaN when the baseline is 0).
    pub ratio: f64,
    pub higher_is_better: bool,
    pub regressed: bool,
}

impl Comparison {
    pub fn line(&self) -> String {
        let verdict = if self.regressed {
            "REGRESSION"
        } else if self.ratio.is_nan() {
            "skipped (baseline is 0)"
        } else {
            "ok"
        };
        format!(
            "{:<16} baseline {:>14.1}  current {:>14.1}  ratio {:>7.3}  {} ({})",
            self.metric,
            self.baseline,
            self.current,
            self.ratio,
            verdict,
            if self.higher_is_better { "higher is better" } else { "lower is better" }
        )
    }
}

fn json_f64(v: &serde_json::Value, path: &[&str]) -> anyhow::Result<f64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p).ok_or_else(|| anyhow::anyhow!("baseline has no field {}", path.join(".")))?;
    }
    cur.as_f64().ok_or_else(|| anyhow::anyhow!("baseline field {} is not a number", path.join(".")))
}

/// Compare `current` against a baseline report (parsed leniently, so older
/// or foreign reports with the same core fields work). A throughput
/// regression is `current < baseline * (1 - pct/100)`; a latency regression
/// is `current > baseline * (1 + pct/100)`.
pub fn compare(
    baseline: &serde_json::Value,
    current: &Report,
    max_regression_pct: f64,
) -> anyhow::Result<Vec<Comparison>> {
    let tol = max_regression_pct / 100.0;
    let metrics: [(&'static str, &[&str], f64, bool); 3] = [
        ("achieved_rate", &["achieved_rate"], current.achieved_rate, true),
        ("latency_us.p50", &["latency_us", "p50"], current.latency_us.p50 as f64, false),
        ("latency_us.p99", &["latency_us", "p99"], current.latency_us.p99 as f64, false),
    ];
    metrics
        .into_iter()
        .map(|(metric, path, cur, higher_is_better)| {
            let base = json_f64(baseline, path)?;
            let ratio = if base != 0.0 { cur / base } else { f64::NAN };
            let regressed = if base == 0.0 {
                false
            } else if higher_is_better {
                cur < base * (1.0 - tol)
            } else {
                cur > base * (1.0 + tol)
            };
            Ok(Comparison { metric, baseline: base, current: cur, ratio, higher_is_better, regressed })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Target;
    use crate::model::{new_histogram, Surface};
    use crate::workload::tests::test_config;
    use std::time::Duration;

    fn sample_result() -> RunResult {
        let mut hist = new_histogram();
        for v in 1..=10_000u64 {
            hist.saturating_record(v * 10);
        }
        hist.saturating_record(u64::MAX); // saturates at the max bound
        let mut errors = BTreeMap::new();
        errors.insert("503".to_string(), 3);
        errors.insert("io".to_string(), 1);
        let mut r = RunResult::empty(Duration::from_secs(10));
        r.ok = hist.len();
        r.ok_bytes = r.ok * 1024;
        r.hist = hist;
        r.errors_by_status = errors;
        r.warmup_requests = 7;
        r
    }

    fn sample_report() -> Report {
        let mut cfg = test_config(Target::parse("http://127.0.0.1:4437").unwrap(), Surface::V1);
        cfg.duration = Duration::from_secs(10);
        cfg.payload = 1024;
        Report::new(&cfg, &sample_result())
    }

    #[test]
    fn json_report_has_contract_fields() {
        let rep = sample_report();
        let v: serde_json::Value = serde_json::from_str(&rep.to_json()).unwrap();
        for k in [
            "target",
            "surface",
            "streams",
            "spread",
            "connections",
            "payload_bytes",
            "duration_s",
            "target_rate",
            "achieved_rate",
            "requests",
            "errors",
            "errors_by_status",
            "bytes_per_sec",
            "latency_us",
            "histogram_v2_base64",
        ] {
            assert!(v.get(k).is_some(), "missing field {k}");
        }
        for k in ["p50", "p90", "p99", "p999", "p9999", "max", "mean", "min"] {
            assert!(v["latency_us"].get(k).is_some(), "missing latency_us.{k}");
        }
        assert_eq!(v["target"], "http://127.0.0.1:4437");
        assert_eq!(v["surface"], "v1");
        assert_eq!(v["payload_bytes"], 1024);
        assert_eq!(v["target_rate"].as_f64(), Some(0.0));
        assert_eq!(v["requests"], 10_001);
        assert_eq!(v["errors"], 4);
        assert_eq!(v["errors_by_status"]["503"], 3);
        assert_eq!(v["errors_by_status"]["io"], 1);
        assert!((v["achieved_rate"].as_f64().unwrap() - 1000.1).abs() < 1e-9);
        assert!((v["bytes_per_sec"].as_f64().unwrap() - 1000.1 * 1024.0).abs() < 1e-6);
        let p50 = v["latency_us"]["p50"].as_u64().unwrap();
        assert!((49_900..=50_100).contains(&p50), "{p50}");
        // The saturated sample shows up as the max bound (within precision).
        let max = v["latency_us"]["max"].as_u64().unwrap();
        assert!(max >= 59_900_000, "{max}");

        // The histogram round-trips.
        let h = histogram_from_base64(v["histogram_v2_base64"].as_str().unwrap()).unwrap();
        assert_eq!(h.len(), 10_001);
        assert_eq!(h.value_at_quantile(0.5), rep.latency_us.p50);

        // And the whole report parses back.
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back.latency_us, rep.latency_us);
    }

    #[test]
    fn empty_histogram_report_is_all_zero() {
        let mut r = sample_result();
        r.hist = new_histogram();
        r.ok = 0;
        let cfg = test_config(Target::parse("http://h:1").unwrap(), Surface::Ds);
        let rep = Report::new(&cfg, &r);
        assert_eq!(rep.latency_us.p99, 0);
        assert_eq!(rep.achieved_rate, 0.0);
        assert!(rep.summary().contains("errors        4  (503: 3, io: 1)"));
        let mut out = Vec::new();
        write_hgrm(&r.hist, &mut out).unwrap();
    }

    #[test]
    fn summary_mentions_key_numbers() {
        let s = sample_report().summary();
        for needle in ["http://127.0.0.1:4437", "closed loop", "1000.1 req/s", "p99.99", "503: 3"] {
            assert!(s.contains(needle), "summary lacks {needle:?}:\n{s}");
        }
    }

    #[test]
    fn hgrm_output_is_monotone_and_complete() {
        let r = sample_result();
        let mut out = Vec::new();
        write_hgrm(&r.hist, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("   Value(us)"));
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(2)
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(rows.len() > 20);
        let mut prev = (0.0, 0.0, 0u64);
        for row in &rows {
            let v: f64 = row[0].parse().unwrap();
            let p: f64 = row[1].parse().unwrap();
            let c: u64 = row[2].parse().unwrap();
            assert!(v >= prev.0 && p >= prev.1 && c >= prev.2, "{row:?}");
            prev = (v, p, c);
        }
        assert_eq!(prev.1, 1.0);
        assert_eq!(prev.2, 10_001);
        assert!(text.contains("Total count    =        10001"));
    }

    fn baseline(rate: f64, p50: u64, p99: u64) -> serde_json::Value {
        serde_json::json!({"achieved_rate": rate, "latency_us": {"p50": p50, "p99": p99}})
    }

    #[test]
    fn baseline_comparison() {
        let mut cur = sample_report();
        cur.achieved_rate = 1000.0;
        cur.latency_us.p50 = 100;
        cur.latency_us.p99 = 1000;
        let regressed = |b: serde_json::Value, pct: f64| -> Vec<&'static str> {
            compare(&b, &cur, pct).unwrap().into_iter().filter(|c| c.regressed).map(|c| c.metric).collect()
        };
        // Identical: nothing regressed.
        assert!(regressed(baseline(1000.0, 100, 1000), 10.0).is_empty());
        // Within tolerance in the bad direction: fine.
        assert!(regressed(baseline(1100.0, 91, 910), 10.0).is_empty());
        // Improvements are never regressions.
        assert!(regressed(baseline(500.0, 1000, 10_000), 0.0).is_empty());
        // Throughput dropped more than 10%.
        assert_eq!(regressed(baseline(1200.0, 100, 1000), 10.0), ["achieved_rate"]);
        // p50 and p99 rose more than 10%.
        assert_eq!(regressed(baseline(1000.0, 90, 900), 10.0), ["latency_us.p50", "latency_us.p99"]);
        // Tighter tolerance catches a smaller change.
        assert_eq!(regressed(baseline(1000.0, 100, 950), 1.0), ["latency_us.p99"]);

        let c = compare(&baseline(2000.0, 50, 500), &cur, 10.0).unwrap();
        assert_eq!(c[0].ratio, 0.5);
        assert_eq!(c[1].ratio, 2.0);
        assert!(c[0].line().contains("REGRESSION"));

        // A zero baseline is skipped, not a regression.
        let c = compare(&baseline(0.0, 0, 0), &cur, 10.0).unwrap();
        assert!(c.iter().all(|c| !c.regressed && c.ratio.is_nan()));

        // Missing fields are an error, not a silent pass.
        assert!(compare(&serde_json::json!({"achieved_rate": 1.0}), &cur, 10.0).is_err());

        // A full report works as a baseline for itself.
        let me: serde_json::Value = serde_json::from_str(&cur.to_json()).unwrap();
        assert!(compare(&me, &cur, 0.0).unwrap().iter().all(|c| !c.regressed));
    }
}
