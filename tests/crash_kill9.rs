//! Crash safety under load: writer threads, each on its own connection and
//! its own streams (on /v1 and /ds, spread over both shards), append unique
//! payloads as fast as they can; the server is SIGKILLed mid-flight, started
//! again on the same data directory, and every stream is checked against
//! what was acknowledged:
//!
//! - every acknowledged payload is present, in order, exactly once;
//! - for every acknowledged append, the content before its returned
//!   Stream-Next-Offset is exactly the acknowledged payloads up to it (a read
//!   from that offset returns exactly the rest);
//! - the only thing allowed after the last acknowledged append is the one
//!   request that was in flight when the server died, whole or not at all;
//! - on producer streams, retrying that in-flight request after the restart
//!   with the same (id, epoch, seq) leaves it in the stream exactly once.
//!
//! Lifecycle threads meanwhile create streams, append, close and delete
//! them; after each restart every stream they touched must be as
//! acknowledged (created ones exist, closed ones are closed, deleted ones are
//! gone), with the request in flight at the kill applied whole or not at all.
//!
//! The cycle runs four times on the same data directory, each killing the
//! server at a random moment (seed printed; `RINGSTREAM_KILL_SEED` replays
//! the moments), so data recovered once must survive the next crash too.

mod common;

use common::{read_from, Conn, Server};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const THREADS: usize = 8;
const STREAMS_PER_THREAD: usize = 3;
const CYCLES: usize = 4;
/// Each cycle kills the server a random time in this range (ms) after the
/// cycle's first acknowledged append. Counted from the first ack, not from
/// the restart: on a shared disk the first group commit after a restart
/// (which waits for a fresh, zero-filled segment file) has taken over 300 ms,
/// and a cycle killed before any ack would test nothing.
const WRITE_TIME_MS: std::ops::Range<u64> = 300..1800;
/// The longest a restarted server may take to acknowledge its first append.
const FIRST_ACK_LIMIT: Duration = Duration::from_secs(30);
const BUCKET: &str = "crash-bucket";
const CT: &str = "application/octet-stream";

/// One stream as its writer knows it.
struct Model {
    path: String,
    /// Stream 2 of each thread appends with producer headers.
    producer: Option<String>,
    /// The next producer seq to send (epoch 0).
    next_seq: u64,
    /// The content the stream must start with: everything verified at the
    /// last restart plus every payload acknowledged since.
    expected: Vec<u8>,
    /// (acknowledged Stream-Next-Offset, length of `expected` at that point),
    /// for every acknowledged append over all cycles.
    acks: Vec<(String, usize)>,
    /// A request sent without a response when the server died.
    inflight: Option<(Vec<u8>, Option<u64>)>,
}

fn payload(thread: usize, stream: usize, cycle: usize, n: usize) -> Vec<u8> {
    // Lengths vary from ~40 to ~1000 bytes so records straddle 4 KiB blocks.
    let pad = (n * 37 + thread * 11 + stream * 5) % 960;
    let mut p = format!("<t{thread}.s{stream}.c{cycle}.n{n}:").into_bytes();
    p.extend((0..pad).map(|i| b'a' + ((i + n) % 26) as u8));
    p.extend_from_slice(b">");
    p
}

fn surface_path(thread: usize, stream: usize) -> String {
    if thread.is_multiple_of(2) {
        format!("/v1/stream/crash/t{thread}-s{stream}")
    } else {
        format!("/ds/{BUCKET}/t{thread}-s{stream}")
    }
}

/// Appends until the connection fails (the server died) or `stop`.
/// Returns the models and a list of protocol errors seen.
fn writer(
    port: u16,
    thread: usize,
    cycle: usize,
    mut models: Vec<Model>,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) -> (Vec<Model>, Vec<String>) {
    let mut errors = Vec::new();
    let mut c = match Conn::try_connect(port) {
        Ok(c) => c,
        Err(e) => {
            errors.push(format!("thread {thread}: connect failed: {e}"));
            return (models, errors);
        }
    };
    let mut n = 0usize;
    let mut retry: Option<(usize, Vec<u8>)> = None;
    let mut last_sno: Vec<Option<String>> = models.iter().map(|m| m.acks.last().map(|a| a.0.clone())).collect();
    while !stop.load(Ordering::SeqCst) {
        let (k, body) = match retry.take() {
            Some(x) => x,
            None => {
                let k = n % models.len();
                n += 1;
                (k, payload(thread, k, cycle, n))
            }
        };
        let m = &mut models[k];
        let seq = m.next_seq.to_string();
        let mut headers: Vec<(&str, &str)> = vec![("Content-Type", CT)];
        if let Some(id) = &m.producer {
            headers.extend([("Producer-Id", id.as_str()), ("Producer-Epoch", "0"), ("Producer-Seq", seq.as_str())]);
        }
        match c.try_request("POST", &m.path, &headers, &body) {
            Ok(r) if r.status == 200 || r.status == 204 => {
                let Some(sno) = r.header("stream-next-offset").map(str::to_string) else {
                    errors.push(format!("{}: 2xx append without Stream-Next-Offset: {}", m.path, r.summary()));
                    break;
                };
                if let Some(prev) = &last_sno[k] {
                    if sno <= *prev {
                        errors.push(format!("{}: acknowledged offset {sno} not after the previous {prev}", m.path));
                    }
                }
                if m.producer.is_some() {
                    if r.header("producer-seq") != Some(seq.as_str()) {
                        errors.push(format!("{}: producer append seq {seq} answered {}", m.path, r.summary()));
                    }
                    m.next_seq += 1;
                }
                last_sno[k] = Some(sno.clone());
                m.expected.extend_from_slice(&body);
                m.acks.push((sno, m.expected.len()));
                acked.fetch_add(1, Ordering::SeqCst);
            }
            Ok(r) if r.status == 503 => {
                // Backpressure: nothing was written; retry the same request.
                retry = Some((k, body));
                thread::sleep(Duration::from_millis(5));
            }
            Ok(r) => {
                errors.push(format!("{}: append answered {}", m.path, r.summary()));
                break;
            }
            Err(_) => {
                // The server is gone. This request may or may not have been
                // persisted; nothing after it was sent.
                m.inflight = Some((body, m.producer.as_ref().map(|_| m.next_seq)));
                break;
            }
        }
    }
    (models, errors)
}

/// Which acknowledged offsets `verify` reads from: the last 64 and about 32
/// more spread evenly over the rest.
fn ack_sample(n: usize) -> Vec<usize> {
    let tail = n.saturating_sub(64);
    let step = (tail / 32).max(1);
    (0..tail).step_by(step).chain(tail..n).collect()
}

/// Checks one stream after a restart against its model, then folds what
/// was recovered into the model.
/// Ok(true) when the request in flight at the kill turned out persisted.
fn verify(c: &mut Conn, m: &mut Model, cycle: usize) -> Result<bool, String> {
    let p = m.path.clone();
    // Exactly-once across the crash: retry the in-flight producer request.
    if let (Some((body, Some(seq))), Some(id)) = (&m.inflight, &m.producer) {
        let seq_s = seq.to_string();
        let headers = [
            ("Content-Type", CT),
            ("Producer-Id", id.as_str()),
            ("Producer-Epoch", "0"),
            ("Producer-Seq", seq_s.as_str()),
        ];
        let r = c.request("POST", &p, &headers, body);
        if r.status != 200 && r.status != 204 {
            return Err(format!(
                "cycle {cycle}: {p}: retry of in-flight producer seq {seq} after restart: {}",
                r.summary()
            ));
        }
        m.expected.extend_from_slice(body);
        m.acks.push((r.sno(), m.expected.len()));
        m.next_seq += 1;
        m.inflight = None;
    }
    let (full, tail, _) = read_from(c, &p, "-1");
    let exp = &m.expected;
    if full.len() < exp.len() || full[..exp.len()] != exp[..] {
        let at = full.iter().zip(exp.iter()).position(|(a, b)| a != b).unwrap_or(full.len().min(exp.len()));
        return Err(format!(
            "cycle {cycle}: {p}: acknowledged data lost or changed: recovered {} bytes, acknowledged {} bytes, first difference at byte {at}: recovered {:?} vs acknowledged {:?}",
            full.len(),
            exp.len(),
            String::from_utf8_lossy(&full[at..(at + 60).min(full.len())]),
            String::from_utf8_lossy(&exp[at..(at + 60).min(exp.len())]),
        ));
    }
    let extra = &full[exp.len()..];
    match &m.inflight {
        _ if extra.is_empty() => {
            if let Some((sno, _)) = m.acks.last() {
                if *sno != tail {
                    return Err(format!("cycle {cycle}: {p}: nothing after the last acknowledged append, but the tail is {tail}, not its offset {sno}"));
                }
            }
        }
        Some((body, _)) if extra == &body[..] => {}
        Some((body, _)) => {
            return Err(format!(
                "cycle {cycle}: {p}: {} unacknowledged bytes after the last acknowledged append are not the in-flight request ({} bytes): {:?}",
                extra.len(),
                body.len(),
                String::from_utf8_lossy(&extra[..extra.len().min(120)])
            ))
        }
        None => {
            return Err(format!(
                "cycle {cycle}: {p}: {} bytes after the last acknowledged append, with no request in flight: {:?}",
                extra.len(),
                String::from_utf8_lossy(&extra[..extra.len().min(120)])
            ))
        }
    }
    // Acknowledged offsets still split the content where they did. Reading
    // from an offset returns the whole rest of the stream, so checking every
    // one is quadratic: check the last ones (around the crash) and an even
    // sample of the rest.
    for &i in &ack_sample(m.acks.len()) {
        let (sno, len) = &m.acks[i];
        let (rest, _, _) = read_from(c, &p, sno);
        if rest != full[*len..] {
            return Err(format!(
                "cycle {cycle}: {p}: a read from acknowledged offset {sno} returned {} bytes, expected the last {} bytes",
                rest.len(),
                full.len() - len
            ));
        }
    }
    // What was recovered is now part of the stream for good.
    let persisted = !extra.is_empty();
    if persisted {
        m.expected = full.clone();
        m.acks.push((tail, full.len()));
    }
    m.inflight = None;
    Ok(persisted)
}

#[test]
fn acknowledged_appends_survive_kill9() {
    let mut srv = Server::start_with(&["--segment-bytes", "131072"]);
    let mut setup = srv.conn();
    let r = setup.request("PUT", &format!("/ds/{BUCKET}"), &[], b"");
    assert_eq!(r.status, 201, "PUT bucket: {}", r.summary());
    let mut models: Vec<Vec<Model>> = (0..THREADS)
        .map(|t| {
            (0..STREAMS_PER_THREAD)
                .map(|s| {
                    let path = surface_path(t, s);
                    let r = setup.request("PUT", &path, &[("Content-Type", CT)], b"");
                    assert_eq!(r.status, 201, "PUT {path}: {}", r.summary());
                    Model {
                        path,
                        producer: (s == 2).then(|| format!("writer-{t}")),
                        next_seq: 0,
                        expected: Vec::new(),
                        acks: Vec::new(),
                        inflight: None,
                    }
                })
                .collect()
        })
        .collect();
    drop(setup);
    // The streams are spread over both shards.
    let m = srv.metrics();
    for shard in ["0", "1"] {
        let key = format!("ringstream_streams{{shard=\"{shard}\"}}");
        let n = m.iter().find(|(k, _)| *k == key).map(|(_, v)| *v).unwrap_or(0.0);
        assert!(n > 0.0, "shard {shard} holds none of the {} test streams", THREADS * STREAMS_PER_THREAD);
    }

    let seed = kill_seed();
    eprintln!("kill -9 seed {seed} (replay the kill moments with RINGSTREAM_KILL_SEED={seed})");
    let mut rng = Rng(seed);
    let mut life_models: Vec<LifeModel> = Vec::new();
    let mut life_total = LifeCount::default();
    let mut appends_verified = 0usize;
    for cycle in 0..CYCLES {
        let stop = Arc::new(AtomicBool::new(false));
        let port = srv.port();
        let life_handles: Vec<_> = (0..LIFE_THREADS)
            .map(|t| {
                let stop = stop.clone();
                thread::spawn(move || lifecycle(port, t, cycle, seed, stop))
            })
            .collect();
        let acked_now = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = models
            .drain(..)
            .enumerate()
            .map(|(t, ms)| {
                let (stop, acked_now) = (stop.clone(), acked_now.clone());
                thread::spawn(move || writer(port, t, cycle, ms, stop, acked_now))
            })
            .collect();
        let started = Instant::now();
        while acked_now.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < FIRST_ACK_LIMIT,
                "cycle {cycle}: no append acknowledged within {FIRST_ACK_LIMIT:?}"
            );
            thread::sleep(Duration::from_millis(5));
        }
        let first_ack = started.elapsed();
        let write_time =
            Duration::from_millis(WRITE_TIME_MS.start + rng.below(WRITE_TIME_MS.end - WRITE_TIME_MS.start));
        thread::sleep(write_time);
        // SIGKILL while every writer has a request in flight or about to be.
        srv.kill9();
        let killed_at = Instant::now();
        stop.store(true, Ordering::SeqCst);
        let mut errors = Vec::new();
        for h in handles {
            let (ms, errs) = h.join().expect("writer thread panicked");
            models.push(ms);
            errors.extend(errs);
        }
        let mut life_inflight = Vec::new();
        for h in life_handles {
            let (ms, n, errs) = h.join().expect("lifecycle thread panicked");
            life_inflight.extend(ms.iter().filter_map(|m| m.inflight.clone()).map(|op| match op {
                LifeOp::Append(_) => "append",
                LifeOp::Create => "create",
                LifeOp::Close => "close",
                LifeOp::Delete => "delete",
            }));
            life_models.extend(ms);
            errors.extend(errs);
            life_total.creates += n.creates;
            life_total.appends += n.appends;
            life_total.closes += n.closes;
            life_total.deletes += n.deletes;
        }
        assert!(killed_at.elapsed() < Duration::from_secs(20), "writers took too long to notice the kill");
        assert!(errors.is_empty(), "cycle {cycle}: protocol errors while writing:\n{}", errors.join("\n"));
        let acked = acked_now.load(Ordering::SeqCst);
        appends_verified += acked;
        let inflight = models.iter().flatten().filter(|m| m.inflight.is_some()).count();
        eprintln!(
            "cycle {cycle}: first ack after {first_ack:?}, killed {write_time:?} later: {acked} appends acknowledged, {inflight} in flight; lifecycle ops in flight: {life_inflight:?}"
        );
        assert!(acked > 0, "cycle {cycle}: no append was acknowledged");

        let t = Instant::now();
        srv.restart();
        eprintln!("cycle {cycle}: restarted in {:?}", t.elapsed());
        let t = Instant::now();
        // Verify in parallel, one thread per writer's streams.
        let port = srv.port();
        let handles: Vec<_> = models
            .drain(..)
            .map(|mut ms| {
                thread::spawn(move || {
                    let mut c = Conn::connect(port);
                    let mut persisted = 0;
                    let mut errs = Vec::new();
                    for m in ms.iter_mut() {
                        match verify(&mut c, m, cycle) {
                            Ok(p) => persisted += p as usize,
                            Err(e) => errs.push(e),
                        }
                    }
                    (ms, errs, persisted)
                })
            })
            .collect();
        let mut errors = Vec::new();
        let mut persisted = 0;
        for h in handles {
            let (ms, errs, p) = h.join().expect("verifier thread panicked");
            models.push(ms);
            errors.extend(errs);
            persisted += p;
        }
        // Every lifecycle stream of every cycle so far: deleted ones stay
        // deleted, closed ones closed, across later crashes too.
        let mut c = Conn::connect(port);
        for m in life_models.iter_mut() {
            if let Err(e) = verify_life(&mut c, m, cycle) {
                errors.push(e);
            }
        }
        eprintln!(
            "cycle {cycle}: verified in {:?}; {persisted} unacknowledged in-flight appends were recovered; {} lifecycle streams checked",
            t.elapsed(),
            life_models.len()
        );
        assert!(errors.is_empty(), "after kill -9 number {} (seed {seed}):\n{}", cycle + 1, errors.join("\n"));
    }
    eprintln!(
        "kill -9: {CYCLES} cycles, {appends_verified} acknowledged appends verified, lifecycle {life_total:?} over {} streams",
        life_models.len()
    );
    assert!(life_total.creates > 0 && life_total.closes > 0 && life_total.deletes > 0, "{life_total:?}");

    // The recovered server still takes and serves writes on every stream.
    let mut c = srv.conn();
    for m in models.iter_mut().flatten() {
        let mut h: Vec<(&str, &str)> = vec![("Content-Type", CT)];
        let seq = m.next_seq.to_string();
        if let Some(id) = &m.producer {
            h.extend([("Producer-Id", id.as_str()), ("Producer-Epoch", "0"), ("Producer-Seq", seq.as_str())]);
        }
        let r = c.request("POST", &m.path, &h, b"<final>");
        assert!(r.status == 200 || r.status == 204, "final append to {}: {}", m.path, r.summary());
        m.expected.extend_from_slice(b"<final>");
        let (full, _, _) = read_from(&mut c, &m.path, "-1");
        assert!(full == m.expected, "{}: final content differs ({} vs {} bytes)", m.path, full.len(), m.expected.len());
    }
}

// ---------------------------------------------------------------------------
// Lifecycle threads: create, append, close and delete streams while the
// server is killed, so crashes land in every kind of write.

/// Lifecycle threads per run, alternating /v1 and /ds.
const LIFE_THREADS: usize = 4;

/// splitmix64, for kill moments and lifecycle choices.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// The run's seed: `RINGSTREAM_KILL_SEED` replays one, else the clock.
fn kill_seed() -> u64 {
    match std::env::var("RINGSTREAM_KILL_SEED") {
        Ok(s) => s.parse().expect("RINGSTREAM_KILL_SEED is a u64"),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
    }
}

/// A stream's acknowledged state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    /// Never created, or deleted.
    Absent,
    Open,
    Closed,
}

/// A request sent without a response when the server died.
#[derive(Debug, Clone)]
enum LifeOp {
    Create,
    Append(Vec<u8>),
    Close,
    Delete,
}

#[derive(Debug)]
struct LifeModel {
    path: String,
    state: Life,
    content: Vec<u8>,
    inflight: Option<LifeOp>,
}

/// Acknowledged lifecycle operations, by kind.
#[derive(Debug, Default, Clone, Copy)]
struct LifeCount {
    creates: usize,
    appends: usize,
    closes: usize,
    deletes: usize,
}

/// Runs create → appends → close and/or delete on fresh streams until the
/// server dies or `stop`. Returns the models of every stream it touched.
fn lifecycle(
    port: u16,
    thread: usize,
    cycle: usize,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (Vec<LifeModel>, LifeCount, Vec<String>) {
    let mut rng = Rng(seed ^ ((thread as u64) << 32) ^ cycle as u64);
    let mut models = Vec::new();
    let mut count = LifeCount::default();
    let mut errors = Vec::new();
    let Ok(mut c) = Conn::try_connect(port) else {
        errors.push(format!("lifecycle {thread}: connect failed"));
        return (models, count, errors);
    };
    let base = if thread.is_multiple_of(2) { "/v1/stream/crash-life".to_string() } else { format!("/ds/{BUCKET}") };
    'streams: for i in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let path = format!("{base}/l{thread}-c{cycle}-{i}");
        let mut m = LifeModel { path, state: Life::Absent, content: Vec::new(), inflight: None };
        let appends = rng.below(4);
        // 0: leave open, 1: close, 2: delete, 3: close then delete.
        let end = rng.below(4);
        let mut ops = vec![LifeOp::Create];
        ops.extend((0..appends).map(|n| LifeOp::Append(format!("<l{thread}.c{cycle}.{i}.{n}>").into_bytes())));
        if end & 1 == 1 {
            ops.push(LifeOp::Close);
        }
        if end & 2 == 2 {
            ops.push(LifeOp::Delete);
        }
        for op in ops {
            m.inflight = Some(op.clone());
            let r = match &op {
                LifeOp::Create => c.try_request("PUT", &m.path, &[("Content-Type", CT)], b""),
                LifeOp::Append(b) => c.try_request("POST", &m.path, &[("Content-Type", CT)], b),
                LifeOp::Close => c.try_request("POST", &m.path, &[("Stream-Closed", "true")], b""),
                LifeOp::Delete => c.try_request("DELETE", &m.path, &[], b""),
            };
            let r = match r {
                Ok(r) => r,
                // The server is gone: this request stays in flight.
                Err(_) => {
                    models.push(m);
                    break 'streams;
                }
            };
            m.inflight = None;
            let ok = match (&op, r.status) {
                (LifeOp::Create, 201) => {
                    m.state = Life::Open;
                    count.creates += 1;
                    true
                }
                (LifeOp::Append(b), 200 | 204) => {
                    m.content.extend_from_slice(b);
                    count.appends += 1;
                    true
                }
                (LifeOp::Close, 200 | 204) => {
                    m.state = Life::Closed;
                    count.closes += 1;
                    true
                }
                (LifeOp::Delete, 200 | 204) => {
                    m.state = Life::Absent;
                    m.content.clear();
                    count.deletes += 1;
                    true
                }
                // Backpressure: nothing written; give up on this stream.
                (_, 503) => false,
                (op, _) => {
                    errors.push(format!("{}: {op:?} answered {}", m.path, r.summary()));
                    false
                }
            };
            if !ok {
                break;
            }
        }
        models.push(m);
    }
    (models, count, errors)
}

/// Checks a lifecycle stream after a restart: what was acknowledged holds
/// (created streams exist with their content, closed ones are closed,
/// deleted ones are gone); the request in flight at the kill happened whole
/// or not at all. Then folds what was found into the model.
fn verify_life(c: &mut Conn, m: &mut LifeModel, cycle: usize) -> Result<(), String> {
    let p = m.path.clone();
    let r = c.request("HEAD", &p, &[], b"");
    let found = match r.status {
        404 => None,
        200 => {
            let (content, _, _) = read_from(c, &p, "-1");
            let state = if r.header("stream-closed") == Some("true") { Life::Closed } else { Life::Open };
            Some((state, content))
        }
        _ => return Err(format!("cycle {cycle}: HEAD {p}: {}", r.summary())),
    };
    let acked = match m.state {
        Life::Absent => None,
        s => Some((s, m.content.clone())),
    };
    let mut allowed = vec![acked.clone()];
    match (&m.inflight, &acked) {
        (None, _) => {}
        (Some(LifeOp::Create), None) => allowed.push(Some((Life::Open, Vec::new()))),
        (Some(LifeOp::Append(b)), Some((Life::Open, c))) => {
            allowed.push(Some((Life::Open, [c.as_slice(), b].concat())));
        }
        (Some(LifeOp::Close), Some((Life::Open, c))) => allowed.push(Some((Life::Closed, c.clone()))),
        (Some(LifeOp::Delete), Some(_)) => allowed.push(None),
        (op, _) => return Err(format!("cycle {cycle}: {p}: model error: {op:?} in flight in state {:?}", m.state)),
    }
    if !allowed.contains(&found) {
        let show = |x: &Option<(Life, Vec<u8>)>| match x {
            None => "absent".to_string(),
            Some((s, c)) => format!("{s:?} with {:?}", String::from_utf8_lossy(c)),
        };
        return Err(format!(
            "cycle {cycle}: {p}: found {}, acknowledged {} with {:?} in flight; allowed: {}",
            show(&found),
            show(&acked),
            m.inflight,
            allowed.iter().map(show).collect::<Vec<_>>().join(" | ")
        ));
    }
    // What was found is the acknowledged state from now on.
    (m.state, m.content) = found.unwrap_or((Life::Absent, Vec::new()));
    m.inflight = None;
    Ok(())
}
