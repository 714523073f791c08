//! Write backpressure under a flood: with a small per-shard bound on bytes
//! waiting for disk (`--max-pending-bytes`), many connections posting large
//! bodies as fast as they can get some 503 + `Retry-After` answers (on both
//! surfaces), every acknowledged append reads back exactly, in order, and
//! the server's resident memory stays bounded.
//!
//! Each connection writes its own stream, so the stream's content must be
//! exactly the concatenation of that connection's acknowledged bodies (a 503
//! writes nothing), and each acknowledgement's `Stream-Next-Offset` must be
//! the running total.

mod common;

use common::{Conn, Server};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Per-shard bound on bytes waiting for disk in this test.
const PENDING_BYTES: u64 = 1024 * 1024;
/// Small segments keep the in-memory mirror of the active segment small, so
/// the memory bound below is tight; they also make the flood cross many
/// segment rollovers.
const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;
const SHARDS: u64 = 2;
const CONNECTIONS: usize = 64;
const BODY_BYTES: usize = 256 * 1024;
const FLOOD: Duration = Duration::from_secs(3);
const MIB: u64 = 1024 * 1024;

/// The body of attempt `n` on connection `t`: a pattern that differs at
/// every 8 bytes, connection and attempt, so a lost, repeated or misplaced
/// append changes what reads back.
fn body(t: usize, n: u64) -> Vec<u8> {
    let mut b = vec![0u8; BODY_BYTES];
    for (i, w) in b.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(((t as u64) << 48) ^ (n << 24) ^ i as u64 ^ 0x5bd1_e995).to_le_bytes());
    }
    b
}

fn path(t: usize) -> String {
    // Half the connections on each surface.
    if t.is_multiple_of(2) {
        format!("/ds/flood/c{t}")
    } else {
        format!("/v1/stream/flood/c{t}")
    }
}

fn vm_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("reading /proc/<pid>/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value");
    kib * 1024
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    rejected: AtomicU64,
    rejected_ds: AtomicU64,
    rejected_v1: AtomicU64,
    rejected_without_retry_after: AtomicU64,
}

#[test]
fn flood_gets_503_with_retry_after_and_memory_stays_bounded() {
    let srv = Server::start_with(&[
        "--max-pending-bytes",
        &PENDING_BYTES.to_string(),
        "--segment-bytes",
        &SEGMENT_BYTES.to_string(),
    ]);
    let port = srv.port();
    let mut c = srv.conn();
    assert_eq!(c.request("PUT", "/ds/flood", &[], b"").status, 201);
    for t in 0..CONNECTIONS {
        let r = c.request("PUT", &path(t), &[("Content-Type", "application/octet-stream")], b"");
        assert_eq!(r.status, 201, "PUT {}: {}", path(t), r.summary());
    }
    let pid = srv.pid();
    let rss_start = vm_rss_bytes(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(vm_rss_bytes(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak.max(vm_rss_bytes(pid))
        })
    };
    let deadline = Instant::now() + FLOOD;
    let writers: Vec<_> = (0..CONNECTIONS)
        .map(|t| {
            let tally = tally.clone();
            std::thread::spawn(move || {
                let mut conn = Conn::connect(port);
                let p = path(t);
                let mut accepted = Vec::new();
                let mut total = 0u64;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let r = conn.request("POST", &p, &[("Content-Type", "application/octet-stream")], &body(t, n));
                    match r.status {
                        200 | 204 => {
                            assert_eq!(r.status, if t.is_multiple_of(2) { 200 } else { 204 }, "{p}: {}", r.summary());
                            total += BODY_BYTES as u64;
                            let want = format!("{:016}_{total:016}", 0);
                            assert_eq!(r.sno(), want, "{p}: acknowledged offsets are the running total");
                            accepted.push(n);
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        503 => {
                            tally.rejected.fetch_add(1, Ordering::Relaxed);
                            let by = if t.is_multiple_of(2) { &tally.rejected_ds } else { &tally.rejected_v1 };
                            by.fetch_add(1, Ordering::Relaxed);
                            if r.header("retry-after").is_none_or(|v| v.parse::<u64>().is_err()) {
                                tally.rejected_without_retry_after.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ => panic!("{p}: unexpected answer to a flood append: {}", r.summary()),
                    }
                    n += 1;
                }
                accepted
            })
        })
        .collect();
    let accepted: Vec<Vec<u64>> = writers.into_iter().map(|w| w.join().expect("writer thread")).collect();
    stop.store(true, Ordering::Relaxed);
    let rss_peak = sampler.join().expect("sampler thread");
    let rss_end = vm_rss_bytes(pid);

    let ok = tally.ok.load(Ordering::Relaxed);
    let rejected = tally.rejected.load(Ordering::Relaxed);
    eprintln!(
        "flood: {CONNECTIONS} connections x {} KiB bodies for {FLOOD:?}, --max-pending-bytes {PENDING_BYTES}, \
         --segment-bytes {SEGMENT_BYTES}: {ok} appends acknowledged ({} MiB), {rejected} answered 503 \
         ({} on /ds, {} on /v1)",
        BODY_BYTES / 1024,
        ok * BODY_BYTES as u64 / MIB,
        tally.rejected_ds.load(Ordering::Relaxed),
        tally.rejected_v1.load(Ordering::Relaxed),
    );
    eprintln!(
        "server VmRSS: start {} MiB, peak {} MiB (sampled every 20 ms), end {} MiB",
        rss_start / MIB,
        rss_peak / MIB,
        rss_end / MIB
    );
    assert!(rejected > 0, "a flood over a {PENDING_BYTES}-byte bound must see some 503s");
    assert_eq!(tally.rejected_without_retry_after.load(Ordering::Relaxed), 0, "every 503 carries Retry-After");
    assert!(ok > 0, "the flood must also get appends through");

    // The memory bound. Per shard: the active segment's mirror (a Vec that
    // may reach twice the segment size in capacity while it grows) plus
    // one sealed mirror waiting for its last flush; the flush's copy of
    // what is pending (<= the bound plus one body, since one append is
    // always admitted); per connection one request held up to three times
    // (read buffer, body, framed record). Everything else (code, executor
    // I/O memory, tables) is in the start figure; 64 MiB covers allocator
    // slack.
    let per_shard = 3 * SEGMENT_BYTES + 2 * (PENDING_BYTES + BODY_BYTES as u64);
    let per_conn = 3 * BODY_BYTES as u64;
    let bound = rss_start + SHARDS * per_shard + CONNECTIONS as u64 * per_conn + 64 * MIB;
    eprintln!("memory bound: {} MiB", bound / MIB);
    assert!(rss_peak < bound, "peak RSS {} MiB is over the bound of {} MiB", rss_peak / MIB, bound / MIB);

    // Every acknowledged append reads back, in order, nothing else.
    let mut c = srv.conn();
    for (t, acc) in accepted.iter().enumerate() {
        let p = path(t);
        let mut offset = "-1".to_string();
        let mut got = Vec::new();
        loop {
            let r = c.request("GET", &format!("{p}?offset={offset}"), &[], b"");
            assert!(r.status == 200 || r.status == 204, "GET {p}: {}", r.summary());
            got.extend_from_slice(&r.body);
            if r.header("stream-up-to-date") == Some("true") {
                break;
            }
            offset = r.sno();
        }
        assert_eq!(got.len(), acc.len() * BODY_BYTES, "{p}: length is the acknowledged appends'");
        for (i, &n) in acc.iter().enumerate() {
            assert!(got[i * BODY_BYTES..(i + 1) * BODY_BYTES] == body(t, n), "{p}: append {i} (attempt {n}) differs");
        }
    }
    eprintln!("server VmRSS after reading everything back: {} MiB", vm_rss_bytes(pid) / MIB);
}
