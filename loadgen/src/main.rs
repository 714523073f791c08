//! `loadgen`: durable-append latency and throughput of a Durable Streams
//! server, open-loop and free of coordinated omission, recorded in
//! HdrHistogram. It speaks plain HTTP/1.1 and knows nothing of the server's
//! internals.

mod client;
mod engine;
mod model;
mod payload;
mod plot;
mod reader;
mod report;
mod workload;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

use client::Target;
use model::{Config, ReadMode, Spread, Surface};
use payload::PayloadDist;
use report::Report;

/// Exit status when the run could not be made (setup, connecting, I/O,
/// unreadable reports for `plot`).
const EXIT_FAILED: u8 = 1;
/// Exit status of a usage error: clap's own for a malformed command line,
/// and loadgen's for a value it rejects.
const EXIT_USAGE: u8 = 2;
/// Exit status when a metric regressed beyond --max-regression.
const EXIT_REGRESSION: u8 = 3;
/// Exit status when the run saw failed requests (without --allow-errors).
const EXIT_ERRORS: u8 = 4;

/// A version with the build's git commit (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BUILD_GIT_COMMIT"),
    ", rustc ",
    env!("BUILD_RUSTC"),
    ", ",
    env!("BUILD_PROFILE"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "loadgen",
    version = VERSION,
    args_conflicts_with_subcommands = true,
    about = "Open-loop load generator for durable-streams appends (HdrHistogram latencies).",
    long_about = "Open-loop load generator for durable-streams appends.\n\n\
        Creates --streams streams, then appends bodies over --connections keep-alive HTTP/1.1 \
        connections for --warmup + --duration seconds. The connections are driven by --threads \
        event-loop threads (non-blocking sockets; one outstanding request per connection, no \
        pipelining); each thread keeps its own histogram, merged at the end.\n\n\
        With --rate R (open loop) connection k sends request n at t0 + (n*C + k)/R and latency \
        is measured from that intended time, so stalls are not hidden (no coordinated \
        omission); a connection that falls behind sends as soon as it can and never skips \
        requests. With --rate 0 (closed loop) each connection sends as soon as the previous \
        response arrives and latency is measured from the actual send. Errors drop the \
        connection; the next request reconnects.\n\n\
        The canonical workload (only --target given): v1 surface, 64 streams, 1 KiB bodies, \
        16 connections on 1 thread, closed loop, 10 s measured after 1 s warmup.\n\n\
        Body format. Every binary body (any --content-type but JSON) is self-delimiting: 16 \
        lower-case hex digits of the send time (wall clock, µs since the UNIX epoch), 8 hex \
        digits of the body's total length L, then L-24 filler bytes 'abc...z'. Bodies shorter \
        than 24 bytes are filler only (no timestamp); with --readers sizes are raised to 24. \
        With --json every body is one JSON message of about the drawn size: \
        {\"t\":<send µs>,\"i\":<request number>,\"pad\":\"xxx...\"}.\n\n\
        Live readers (--readers K) follow streams 0..K-1 from offset=now by long-poll or SSE, \
        decode the timestamp of every delivered message and record delivered-minus-sent in a \
        separate delivery_latency_us histogram (messages sent in the measured window only; \
        readers keep collecting for 0.5 s after the writers finish).\n\n\
        `loadgen plot A.json [B.json ...] --out chart.svg` draws reports (see `loadgen plot \
        --help`); loadgen/README.md documents the JSON report.\n\n\
        Exit status: 0 ok; 1 the run (or plot) failed: setup, connecting, I/O; 2 usage error \
        (a malformed or rejected argument); 3 a metric regressed against --baseline; 4 the \
        run had failed appends (unless --allow-errors). If both 3 and 4 apply, 4 wins."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: Args,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Draw reports as one SVG: the latency percentile curve (log x axis of
    /// 1/(1-q), HdrHistogram style), the achieved rate per second and p50/p99
    /// per second, every report overlaid in its own colour with a legend.
    Plot(plot::PlotArgs),
}

#[derive(Parser, Debug)]
struct Args {
    /// Base URL of the server (http only; a path prefix is allowed).
    #[arg(long, default_value = "http://127.0.0.1:4437")]
    target: String,

    /// HTTP surface to drive: `v1` = /v1/stream/{prefix}-{i} (append answers 204);
    /// `ds` = /ds/{bucket}/{prefix}-{i} (bucket created first; append answers 200).
    #[arg(long, value_enum, default_value = "v1")]
    surface: Surface,

    /// Bucket name for the `ds` surface (created if missing; 409 is fine).
    #[arg(long, default_value = "loadgen")]
    bucket: String,

    /// Stream name prefix; streams are named {prefix}-0 .. {prefix}-{N-1}.
    #[arg(long, default_value = "lg")]
    prefix: String,

    /// Number of streams to create and append to.
    #[arg(long, default_value_t = 64)]
    streams: usize,

    /// Which streams each connection appends to: rotate (request n of
    /// connection k goes to stream (n*C + k) mod N) or pinned (connection k
    /// appends only to stream k mod N: one writer per stream).
    #[arg(long, value_enum, default_value_t = Spread::Rotate)]
    spread: Spread,

    /// Number of concurrent keep-alive connections (one outstanding request each).
    #[arg(long, default_value_t = 16)]
    connections: usize,

    /// Event-loop threads driving the connections (connection k runs on
    /// thread k mod T; at most --connections).
    #[arg(long, default_value_t = 1)]
    threads: usize,

    /// Length of the measured window in seconds (fractions allowed).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,

    /// Seconds of load before the measured window; latencies are not recorded
    /// and requests are not counted in achieved_rate.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,

    /// Append body size in bytes (the size of --payload-dist fixed).
    #[arg(long, default_value_t = 1024)]
    payload: usize,

    /// Body size distribution: `fixed` (always --payload), `uniform:MIN:MAX`
    /// (inclusive) or `exp:MEAN` (exponential, 1 ..= 20*MEAN). Drawn per
    /// connection from a generator seeded by --seed, so runs repeat.
    #[arg(long, value_name = "DIST", default_value = "fixed")]
    payload_dist: String,

    /// Seed for the body-size generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Content type of the streams and appends [default: application/octet-stream,
    /// or application/json with --json].
    #[arg(long, value_name = "TYPE")]
    content_type: Option<String>,

    /// Bodies are JSON messages of about the drawn size,
    /// `{"t":<send µs>,"i":<n>,"pad":"xxx..."}`; streams are application/json.
    #[arg(long)]
    json: bool,

    /// Send idempotent-producer headers: connection k is producer
    /// `lg-<run>-<k>` (epoch 0) with its own Producer-Seq per stream, from 0.
    /// Success is then 200; a 204 (v1) is a duplicate, counted separately.
    #[arg(long)]
    producer: bool,

    /// Live readers measuring append->delivery latency: reader i follows
    /// stream i mod --streams from offset=now (one thread for all readers).
    #[arg(long, value_name = "K", default_value_t = 0)]
    readers: usize,

    /// Base URL the live readers read from [default: --target]: a
    /// replicated cell's follower, say, while the writers go to its leader.
    #[arg(long, value_name = "URL")]
    read_target: Option<String>,

    /// How live readers read: `long-poll` (GET ...&live=long-poll in a loop)
    /// or `sse` (GET ...&live=sse, reconnecting from the last control offset).
    #[arg(long, value_enum, default_value = "long-poll")]
    read_mode: ReadMode,

    /// Total intended requests/second across all connections (open loop).
    /// 0 = closed loop: each connection sends as fast as responses arrive.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,

    /// Per-request timeout in seconds (connect + send + response); a timeout
    /// counts as an "io" error and the connection is re-established. Live
    /// readers' long-polls are not subject to it.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,

    /// Write the JSON report to this file.
    #[arg(long, value_name = "FILE.json")]
    out: Option<String>,

    /// Write the latency percentile distribution (HdrHistogram .hgrm text:
    /// Value(us) Percentile TotalCount 1/(1-Percentile)) to this file for plotting.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<String>,

    /// Compare against this earlier JSON report: achieved_rate, latency p50
    /// and p99. Exit status 3 if any regressed by more than --max-regression.
    #[arg(long, value_name = "FILE.json")]
    baseline: Option<String>,

    /// Allowed regression against --baseline, in percent.
    #[arg(long, value_name = "PCT", default_value_t = 10.0)]
    max_regression: f64,

    /// Exit 0 even if some requests failed (errors are still reported).
    #[arg(long)]
    allow_errors: bool,

    /// Skip the stream/bucket creation step (streams must already exist).
    #[arg(long)]
    no_setup: bool,

    /// Only create the streams (over min(--connections, 64) connections),
    /// print how long that took and the creates per second, and exit.
    #[arg(long, conflicts_with = "no_setup")]
    setup_only: bool,

    /// No per-second progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,

    /// A name for this run, stored in the report (`label`) and used as its
    /// legend by `loadgen plot`.
    #[arg(long, default_value = "")]
    label: String,
}

fn secs(name: &str, v: f64, allow_zero: bool) -> anyhow::Result<Duration> {
    if !v.is_finite() || v < 0.0 || (!allow_zero && v == 0.0) {
        bail!(
            "--{name} must be a {} number of seconds (got {v})",
            if allow_zero { "non-negative" } else { "positive" }
        );
    }
    Ok(Duration::from_secs_f64(v))
}

fn config_from(args: &Args) -> anyhow::Result<Config> {
    if args.streams == 0 {
        bail!("--streams must be at least 1");
    }
    if args.connections == 0 {
        bail!("--connections must be at least 1");
    }
    if !args.rate.is_finite() || args.rate < 0.0 {
        bail!("--rate must be >= 0 (got {})", args.rate);
    }
    if !args.max_regression.is_finite() || args.max_regression < 0.0 {
        bail!("--max-regression must be >= 0");
    }
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let content_type = match (&args.content_type, args.json) {
        (Some(ct), _) if ct.trim().is_empty() || ct.contains(['\r', '\n']) => {
            bail!("--content-type must be a non-empty header value")
        }
        (Some(ct), true) if !ct.trim().to_ascii_lowercase().starts_with("application/json") => {
            bail!("--json needs an application/json content type (got {ct:?})")
        }
        (Some(ct), _) => ct.trim().to_string(),
        (None, true) => "application/json".to_string(),
        (None, false) => "application/octet-stream".to_string(),
    };
    let payload_dist = PayloadDist::parse(&args.payload_dist, args.payload)?;
    for (what, v) in [("bucket", &args.bucket), ("prefix", &args.prefix)] {
        if v.is_empty() || v.contains(['/', '?', '#', ' ', '%']) {
            bail!("--{what} must be a non-empty name without '/', '?', '#', '%' or spaces");
        }
    }
    Ok(Config {
        target: Target::parse(&args.target)?,
        surface: args.surface,
        bucket: args.bucket.clone(),
        prefix: args.prefix.clone(),
        streams: args.streams,
        spread: args.spread,
        connections: args.connections,
        threads: args.threads.min(args.connections),
        duration: secs("duration", args.duration, false)?,
        warmup: secs("warmup", args.warmup, true)?,
        payload: args.payload,
        payload_dist,
        seed: args.seed,
        content_type,
        json: args.json,
        producer: args.producer,
        run_id: workload::new_run_id(),
        rate: args.rate,
        timeout: secs("timeout", args.timeout, false)?,
        readers: args.readers,
        read_target: args.read_target.as_deref().map(Target::parse).transpose()?,
        read_mode: args.read_mode,
        progress: !args.quiet,
    })
}

/// How `main` ends: a usage error (exit 2) or a failure (exit 1).
enum Failure {
    Usage(anyhow::Error),
    Failed(anyhow::Error),
}

fn run_load(args: &Args) -> Result<u8, Failure> {
    let cfg = config_from(args).map_err(Failure::Usage)?;
    real_main(args, &cfg).map_err(Failure::Failed)
}

fn real_main(args: &Args, cfg: &Config) -> anyhow::Result<u8> {
    // Read the baseline before spending time on a run.
    let baseline: Option<serde_json::Value> = match &args.baseline {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading baseline {path}"))?;
            Some(serde_json::from_str(&text).with_context(|| format!("parsing baseline {path}"))?)
        }
        None => None,
    };

    if !args.no_setup {
        let started = std::time::Instant::now();
        workload::setup(cfg).context("setup (creating streams)")?;
        if args.setup_only {
            let secs = started.elapsed().as_secs_f64();
            println!("created {} streams in {secs:.2} s: {:.0} creates/s", cfg.streams, cfg.streams as f64 / secs);
            return Ok(0);
        }
    }
    let result = workload::run(cfg)?;
    let mut rep = Report::new(cfg, &result);
    rep.label = args.label.clone();

    print!("{}", rep.summary());

    if let Some(path) = &args.out {
        std::fs::write(path, rep.to_json() + "\n").with_context(|| format!("writing {path}"))?;
    }
    if let Some(path) = &args.hgrm {
        let f = File::create(path).with_context(|| format!("creating {path}"))?;
        let mut w = BufWriter::new(f);
        report::write_hgrm(&result.hist, &mut w).with_context(|| format!("writing {path}"))?;
        w.flush().with_context(|| format!("writing {path}"))?;
    }

    let mut code = 0u8;
    if let Some(b) = &baseline {
        println!("baseline comparison (max regression {}%):", args.max_regression);
        let comps = report::compare(b, &rep, args.max_regression)?;
        for c in &comps {
            println!("  {}", c.line());
        }
        if comps.iter().any(|c| c.regressed) {
            println!("RESULT: regression against baseline");
            code = EXIT_REGRESSION;
        }
    }
    let total_errors = rep.errors + rep.warmup_errors;
    if total_errors > 0 {
        println!(
            "{} failed requests ({} in the measured window, {} during warmup){}",
            total_errors,
            rep.errors,
            rep.warmup_errors,
            if args.allow_errors { "; allowed by --allow-errors" } else { "" }
        );
        if !args.allow_errors {
            code = EXIT_ERRORS;
        }
    }
    Ok(code)
}

fn main() -> ExitCode {
    // A malformed command line exits 2 here (clap).
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Some(Command::Plot(p)) => plot::check_args(p)
            .map_err(Failure::Usage)
            .and_then(|()| plot::plot(p).map(|()| 0).map_err(Failure::Failed)),
        None => run_load(&cli.run),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Failure::Usage(e)) => {
            eprintln!("loadgen: usage error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Failed(e)) => {
            eprintln!("loadgen: error: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn plot_is_a_subcommand_and_run_flags_stay_top_level() {
        Cli::command().debug_assert();
        let c = Cli::try_parse_from(["loadgen", "plot", "a.json", "b.json", "--out", "x.svg"]).unwrap();
        let Some(Command::Plot(p)) = c.command else { panic!("not plot") };
        assert_eq!(p.reports.len(), 2);
        plot::check_args(&p).unwrap();
        let p = plot::PlotArgs { out: "x.png".into(), ..p };
        assert!(plot::check_args(&p).is_err(), "PNG is refused as a usage error");
        let c = Cli::try_parse_from(["loadgen", "--rate", "10", "--label", "x"]).unwrap();
        assert!(c.command.is_none() && c.run.rate == 10.0 && c.run.label == "x");
        assert!(Cli::try_parse_from(["loadgen", "plot"]).is_err(), "plot needs a report");
        assert!(Cli::try_parse_from(["loadgen", "--rate", "10", "plot", "a.json", "--out", "x.svg"]).is_err());
    }

    #[test]
    fn readers_read_from_the_read_target_and_writers_write_to_the_target() {
        let a = Args::try_parse_from(["loadgen", "--target", "http://127.0.0.1:1", "--readers", "2"]).unwrap();
        let cfg = config_from(&a).unwrap();
        assert_eq!(cfg.reader_target().host_header(), cfg.target.host_header(), "by default, the target");
        let a = Args::try_parse_from([
            "loadgen",
            "--target",
            "http://127.0.0.1:1",
            "--read-target",
            "http://127.0.0.2:2/base",
            "--readers",
            "2",
        ])
        .unwrap();
        let cfg = config_from(&a).unwrap();
        assert_eq!(cfg.reader_target().host_header(), "127.0.0.2:2");
        assert_eq!(cfg.read_path(1), "/base/v1/stream/lg-1");
        assert_eq!(cfg.stream_path(1), "/v1/stream/lg-1", "the writers' path is the target's");
        let bad = Args::try_parse_from(["loadgen", "--read-target", "https://x"]).unwrap();
        assert!(config_from(&bad).is_err(), "http only");
    }

    #[test]
    fn cli_defaults_and_help() {
        Args::command().debug_assert();
        let a = Args::try_parse_from(["loadgen"]).unwrap();
        assert_eq!(a.target, "http://127.0.0.1:4437");
        assert_eq!(a.surface, Surface::V1);
        assert_eq!(a.bucket, "loadgen");
        assert_eq!((a.streams, a.connections, a.payload), (64, 16, 1024));
        assert_eq!((a.duration, a.warmup, a.rate, a.max_regression), (10.0, 1.0, 0.0, 10.0));
        assert!(!a.quiet && !a.allow_errors);
        assert_eq!((a.threads, a.readers, a.read_mode), (1, 0, ReadMode::LongPoll));
        assert!(!a.json && !a.producer && a.content_type.is_none());
        let cfg = config_from(&a).unwrap();
        assert!(!cfg.open_loop());
        assert_eq!(cfg.content_type, "application/octet-stream");
        assert_eq!(cfg.payload_dist, PayloadDist::Fixed(1024));
        assert_eq!(cfg.threads, 1);

        let a = Args::try_parse_from([
            "loadgen",
            "--json",
            "--producer",
            "--payload-dist",
            "exp:300",
            "--readers",
            "4",
            "--read-mode",
            "sse",
            "--threads",
            "64",
        ])
        .unwrap();
        let cfg = config_from(&a).unwrap();
        assert_eq!(cfg.content_type, "application/json");
        assert!(cfg.json && cfg.producer);
        assert_eq!(cfg.payload_dist, PayloadDist::Exp(300.0));
        assert_eq!((cfg.readers, cfg.read_mode), (4, ReadMode::Sse));
        assert_eq!(cfg.threads, 16, "capped at --connections");
        let a = Args::try_parse_from(["loadgen", "--content-type", "text/plain", "--payload", "8"]).unwrap();
        assert_eq!(config_from(&a).unwrap().content_type, "text/plain");

        let a = Args::try_parse_from(["loadgen", "--surface", "ds", "--duration", "0.5", "--rate", "2500", "--quiet"])
            .unwrap();
        let cfg = config_from(&a).unwrap();
        assert_eq!(cfg.surface, Surface::Ds);
        assert_eq!(cfg.duration, Duration::from_millis(500));
        assert!(cfg.open_loop() && !cfg.progress);

        for bad in [
            &["loadgen", "--connections", "0"][..],
            &["loadgen", "--duration", "0"],
            &["loadgen", "--rate=-1"],
            &["loadgen", "--bucket", "a/b"],
            &["loadgen", "--target", "https://x"],
            &["loadgen", "--threads", "0"],
            &["loadgen", "--payload-dist", "uniform:9:1"],
            &["loadgen", "--json", "--content-type", "text/plain"],
        ] {
            let a = Args::try_parse_from(bad).unwrap();
            assert!(config_from(&a).is_err(), "{bad:?}");
        }
        assert!(Args::try_parse_from(["loadgen", "--surface", "grpc"]).is_err());
    }
}
