//! Segment reclamation against a model: seeded random workloads of creates,
//! appends (plain and idempotent-producer), closes, deletes, snapshots
//! (publish, delete older), retention and bucket create/delete run on one shard over the
//! in-memory backend with small segments; the reclaim pass runs often and
//! deletes segment files; restarts recover from what is left. After every
//! restart each stream must be exactly what the model says: existence,
//! closed state, tail, the data after the trim point byte for byte, 410 below
//! it (naming it), where a read from the start begins, every snapshot's blob, the bootstrap, and producer state (a retried
//! append is a duplicate). The seed is in every failure message.

mod common;

use common::rng::Rng;
use common::sim::{spawn_log_tasks, try_open};
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use ringstream::limits::{SEGMENT_BYTES_MIN, SNAPSHOTS_PER_STREAM_MAX};
use ringstream::protocol::headers::{Lifetime, ProducerHeaders};
use ringstream::protocol::offset::ReadFrom;
use ringstream::protocol::rules::ProducerPolicy;
use ringstream::protocol::{
    AppendReq, BucketOp, CreateReq, Error, ForkReq, Live, Offset, Outcome, ReadReq, SnapshotReq, StreamKey, StreamOp,
    Surface,
};
use ringstream::shard::{Reply, Shard, ShardRequest};
use ringstream::storage::io::SegmentStore;
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::LogConfig;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

const BUCKET: &str = "model";
const OTHER_BUCKET: &str = "other";
const STREAMS: usize = 5;
const OCTET: &str = "application/octet-stream";
/// Workloads per run (each 600 steps, ~20 restarts): seconds in all. Set
/// `RECLAIM_MODEL_SEEDS` for a longer campaign.
const SEEDS: u64 = 60;

struct Rig {
    store: SimStore,
    shard: Rc<Shard<SimStore>>,
    pool: LocalPool,
}

fn boot(store: SimStore, seed: u64) -> Rig {
    boot_with_clock(store, seed, None)
}

/// [`boot`], the shard reading `clock` (ms since the epoch) instead of the wall clock.
fn boot_with_clock(store: SimStore, seed: u64, clock: Option<Box<dyn Fn() -> i64>>) -> Rig {
    let cfg = LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: 16 * 1024 * 1024 };
    let (log, recovered, _) = try_open(store.clone(), cfg).unwrap_or_else(|e| panic!("seed {seed}: open: {e}"));
    let mut shard = Shard::recover(0, 1, log.clone(), &recovered, ProducerPolicy::default())
        .unwrap_or_else(|e| panic!("seed {seed}: recover: {e}"));
    if let Some(clock) = clock {
        shard.set_clock(clock);
    }
    let pool = LocalPool::new();
    spawn_log_tasks(&pool.spawner(), &log);
    Rig { store, shard: Rc::new(shard), pool }
}

impl Rig {
    fn call(&mut self, req: ShardRequest) -> Reply {
        let out = Rc::new(RefCell::new(None));
        let (o, shard) = (out.clone(), self.shard.clone());
        self.pool.spawner().spawn_local(async move { *o.borrow_mut() = Some(shard.handle(req).await) }).unwrap();
        self.pool.run_until_stalled();
        let r = out.borrow_mut().take();
        r.expect("the shard answered")
    }

    fn op(&mut self, stream: usize, op: StreamOp) -> Reply {
        let key = StreamKey { bucket: BUCKET.into(), stream: format!("s{stream}") };
        self.call(ShardRequest::Stream { key, surface: Surface::Ds, if_incarnation: None, op })
    }

    fn reclaim(&mut self) {
        let shard = self.shard.clone();
        self.pool.spawner().spawn_local(async move { shard.reclaim().await }).unwrap();
        self.pool.run_until_stalled();
    }

    fn segment_files(&self) -> usize {
        block_on(self.store.list()).unwrap().len()
    }
}

#[derive(Default, Clone)]
struct Model {
    data: Vec<u8>,
    trim: usize,
    closed: bool,
    snaps: BTreeMap<usize, Vec<u8>>,
    /// Message boundaries (valid snapshot offsets).
    bounds: Vec<usize>,
    /// Producer "p": last accepted seq and the append's bytes.
    producer: Option<(u64, Vec<u8>)>,
}

fn at(pos: usize) -> Offset {
    Offset::new(0, pos as u64)
}

fn append(body: Vec<u8>, close: bool, producer: Option<u64>) -> StreamOp {
    StreamOp::Append(AppendReq {
        content_type: (!body.is_empty()).then(|| OCTET.to_string()),
        body,
        close,
        stream_seq: None,
        producer: producer.map(|seq| ProducerHeaders { id: "p".into(), epoch: 1, seq }),
        if_match: None,
    })
}

fn read(from: ReadFrom) -> StreamOp {
    StreamOp::Read(ReadReq { from, live: Live::No, cursor: None, if_none_match: None })
}

fn check(rig: &mut Rig, models: &[Option<Model>], ctx: &str) {
    for (i, m) in models.iter().enumerate() {
        let ctx = format!("{ctx}, stream s{i}");
        let head = rig.op(i, StreamOp::Head { if_none_match: None });
        let Some(m) = m else {
            assert_eq!(head, Err(Error::NotFound), "{ctx}: deleted stream came back");
            continue;
        };
        let Ok(Outcome::Head { info, .. }) = head else { panic!("{ctx}: HEAD: {head:?}") };
        assert_eq!(info.next_offset, at(m.data.len()), "{ctx}: tail");
        assert_eq!(info.closed, m.closed, "{ctx}: closed");
        assert_eq!(info.snapshot_offset, m.snaps.keys().next_back().map(|&o| at(o)), "{ctx}: current snapshot");
        // The data from the trim point, byte for byte.
        let mut got = Vec::new();
        let mut pos = m.trim;
        loop {
            let r = rig.op(i, read(ReadFrom::At(at(pos))));
            let Ok(Outcome::Read(r)) = r else { panic!("{ctx}: read at {pos}: {r:?}") };
            got.extend_from_slice(&r.body);
            pos = r.next_offset.pos as usize;
            if r.up_to_date {
                break;
            }
        }
        assert!(got == m.data[m.trim..], "{ctx}: data after the trim point differs");
        assert_eq!(info.retained_offset, (m.trim > 0).then(|| at(m.trim)), "{ctx}: retained start");
        if m.trim > 0 {
            let gone = |r: Reply| matches!(r, Err(Error::Trimmed { retained, .. }) if retained == at(m.trim));
            assert!(gone(rig.op(i, read(ReadFrom::At(at(m.trim - 1))))), "{ctx}: below trim");
            let from_start = rig.op(i, read(ReadFrom::Start));
            if m.snaps.keys().next_back() == Some(&m.trim) {
                assert!(gone(from_start), "{ctx}: read from start, a snapshot at the trim point");
            } else {
                let Ok(Outcome::Read(r)) = from_start else { panic!("{ctx}: read from start: {from_start:?}") };
                assert!(m.data[m.trim..].starts_with(&r.body), "{ctx}: a read from start begins at the trim");
            }
        }
        for (&o, blob) in &m.snaps {
            let r = rig.op(i, StreamOp::SnapshotRead { offset: at(o) });
            let Ok(Outcome::Snapshot { body, .. }) = r else { panic!("{ctx}: snapshot {o}: {r:?}") };
            assert!(body == *blob, "{ctx}: snapshot {o} blob differs");
        }
        let r = rig.op(i, StreamOp::Bootstrap);
        let Ok(Outcome::Bootstrap(b)) = r else { panic!("{ctx}: bootstrap: {r:?}") };
        assert_eq!(b.snapshot.map(|s| s.2), m.snaps.values().next_back().cloned(), "{ctx}: bootstrap snapshot");
        assert!(b.messages.concat() == m.data[m.trim..], "{ctx}: bootstrap messages");
    }
}

fn run(seed: u64, ops: usize) -> (u64, usize) {
    let mut rng = Rng::from_seed(seed);
    let mut rig = boot(SimStore::new(), seed);
    let ok = |r: &Reply, what: &str, ctx: &str| assert!(r.is_ok(), "{ctx}: {what}: {r:?}");
    let r = rig.call(ShardRequest::Bucket { bucket: BUCKET.into(), op: BucketOp::Create });
    ok(&r, "bucket", "setup");
    let mut models: Vec<Option<Model>> = vec![None; STREAMS];
    let mut other_bucket = false;
    let (mut restarts, mut reclaimed) = (0, 0);
    for step in 0..ops {
        let ctx = format!("seed {seed} step {step}");
        let i = rng.below(STREAMS as u64) as usize;
        let choice = rng.below(100);
        match (&mut models[i], choice) {
            (None, _) => {
                let body = if rng.below(2) == 0 { Vec::new() } else { rng.bytes(2000, false) };
                let r = rig.op(
                    i,
                    StreamOp::Create(CreateReq {
                        content_type: Some(OCTET.into()),
                        lifetime: Lifetime::Forever,
                        closed: false,
                        body: body.clone(),
                        if_match: None,
                        fork: None,
                    }),
                );
                ok(&r, "create", &ctx);
                let mut bounds = vec![0];
                if !body.is_empty() {
                    bounds.push(body.len());
                }
                models[i] = Some(Model { data: body, bounds, ..Model::default() });
            }
            (Some(m), 0..=49) if !m.closed => {
                let body = rng.bytes(3000, false);
                let producer = (rng.below(2) == 0).then(|| m.producer.as_ref().map_or(0, |p| p.0 + 1));
                let r = rig.op(i, append(body.clone(), false, producer));
                ok(&r, "append", &ctx);
                m.data.extend_from_slice(&body);
                m.bounds.push(m.data.len());
                if let Some(seq) = producer {
                    m.producer = Some((seq, body));
                }
            }
            (Some(m), 50..=54) if !m.closed => {
                ok(&rig.op(i, append(Vec::new(), true, None)), "close", &ctx);
                m.closed = true;
            }
            (Some(_), 55..=61) => {
                ok(&rig.op(i, StreamOp::Delete), "delete", &ctx);
                models[i] = None;
            }
            (Some(m), 62..=79) => {
                let current = m.snaps.keys().next_back().copied().unwrap_or(0);
                let candidates: Vec<usize> = m.bounds.iter().copied().filter(|&b| b >= current).collect();
                let o = candidates[rng.below(candidates.len() as u64) as usize];
                let blob = rng.bytes(3000, true);
                let r = rig.op(
                    i,
                    StreamOp::SnapshotPublish(SnapshotReq { offset: at(o), content_type: None, body: blob.clone() }),
                );
                ok(&r, "snapshot", &ctx);
                m.trim = o;
                m.snaps.insert(o, blob);
                while m.snaps.len() > SNAPSHOTS_PER_STREAM_MAX {
                    m.snaps.pop_first();
                }
                m.bounds.retain(|&b| b >= o);
            }
            (Some(m), 80..=84) if m.snaps.len() > 1 => {
                let older: Vec<usize> = m.snaps.keys().copied().collect();
                let o = older[rng.below(older.len() as u64 - 1) as usize];
                ok(&rig.op(i, StreamOp::SnapshotDelete { offset: at(o) }), "snapshot delete", &ctx);
                m.snaps.remove(&o);
            }
            (Some(m), 88..=93) => {
                // Retention anywhere up to the tail: the start of the append
                // holding the offset, never backwards, never past the snapshot.
                let asked = rng.below(m.data.len() as u64 + 1) as usize;
                let want = m.bounds.iter().copied().filter(|&b| b <= asked).max().unwrap_or(0).max(m.trim);
                let r = rig.op(i, StreamOp::Retain { offset: at(asked) });
                match m.snaps.keys().next_back() {
                    Some(&s) if want > s => assert!(matches!(r, Err(Error::Conflict(_))), "{ctx}: retain: {r:?}"),
                    _ => {
                        let Ok(Outcome::Retained { offset, .. }) = r else { panic!("{ctx}: retain: {r:?}") };
                        assert_eq!(offset, at(want), "{ctx}: retained start");
                        m.trim = want;
                        m.bounds.retain(|&b| b >= want);
                    }
                }
            }
            (_, 85..=87) => {
                let op = if other_bucket { BucketOp::Delete } else { BucketOp::Create };
                ok(&rig.call(ShardRequest::Bucket { bucket: OTHER_BUCKET.into(), op }), "other bucket", &ctx);
                other_bucket = !other_bucket;
            }
            _ => {}
        }
        if rng.below(5) == 0 {
            rig.reclaim();
        }
        if rng.below(40) == 0 || step + 1 == ops {
            reclaimed += rig.shard.stats.borrow().segments_reclaimed;
            // A crash now: only what was synced survives (every answer
            // above waited for its sync).
            let image = rig.store.crash_image(None);
            drop(rig);
            rig = boot(image, seed);
            restarts += 1;
            check(&mut rig, &models, &format!("{ctx}, after restart {restarts}"));
            let r = rig.call(ShardRequest::Bucket { bucket: OTHER_BUCKET.into(), op: BucketOp::Get });
            assert_eq!(r.is_ok(), other_bucket, "{ctx}: the other bucket's existence");
            // Producer state survived: the last append retried is a duplicate.
            for (i, m) in models.iter().enumerate() {
                if let Some(Model { producer: Some((seq, body)), closed: false, .. }) = m {
                    let r = rig.op(i, append(body.clone(), false, Some(*seq)));
                    let Ok(Outcome::Appended { duplicate, .. }) = r else { panic!("{ctx}: retry: {r:?}") };
                    assert!(duplicate, "{ctx}: stream s{i}: a retried append was written again");
                }
            }
        }
    }
    // Everything left behind: with the data gone, few segments remain.
    for (i, m) in models.iter().enumerate() {
        if m.is_some() {
            assert!(rig.op(i, StreamOp::Delete).is_ok(), "seed {seed}: final delete");
        }
    }
    for _ in 0..3 {
        rig.reclaim();
    }
    reclaimed += rig.shard.stats.borrow().segments_reclaimed;
    let left = rig.segment_files();
    let image = rig.store.crash_image(None);
    drop(rig);
    let mut rig = boot(image, seed);
    check(&mut rig, &vec![None; STREAMS], &format!("seed {seed}: after deleting everything"));
    (reclaimed, left)
}

#[test]
fn reclamation_keeps_exactly_what_the_model_keeps() {
    let mut total = 0;
    let seeds = std::env::var("RECLAIM_MODEL_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(SEEDS);
    for seed in 1..=seeds {
        let (reclaimed, left) = run(seed, 600);
        assert!(reclaimed >= 5, "seed {seed}: only {reclaimed} segments reclaimed");
        // The active segment, one prepared ahead, and the segment holding the
        // latest bucket records and deletes.
        assert!(left <= 4, "seed {seed}: {left} segment files left after deleting every stream");
        total += reclaimed;
    }
    eprintln!("segments reclaimed over {seeds} seeds: {total}");
}

/// A fork that expires when it is accessed releases its source there and
/// then, as an explicit delete does (not only at the next reclaim pass or
/// restart): its soft-deleted source, held only by that fork, is removed and
/// its path can be created again. No reclaim pass runs here.
#[test]
fn a_fork_expiring_on_access_releases_its_source() {
    let now = Rc::new(std::cell::Cell::new(1_800_000_000_000i64));
    let clock = now.clone();
    let mut rig = boot_with_clock(SimStore::new(), 0, Some(Box::new(move || clock.get())));
    let r = rig.call(ShardRequest::Bucket { bucket: BUCKET.into(), op: BucketOp::Create });
    assert!(r.is_ok(), "{r:?}");
    let create = |lifetime, fork| {
        StreamOp::Create(CreateReq {
            content_type: Some(OCTET.into()),
            lifetime,
            closed: false,
            body: b"abc".to_vec(),
            if_match: None,
            fork,
        })
    };
    let (src, fork) = (0, 1);
    let source = StreamKey { bucket: BUCKET.into(), stream: format!("s{src}") };
    assert!(rig.op(src, create(Lifetime::Forever, None)).is_ok());
    let fork_of = ForkReq { source, offset: None, sub_offset: 0 };
    let r = rig.op(fork, create(Lifetime::Ttl { secs: 1 }, Some(fork_of)));
    assert!(r.is_ok(), "fork: {r:?}");
    assert!(rig.op(src, StreamOp::Delete).is_ok());
    let r = rig.op(src, create(Lifetime::Forever, None));
    assert!(matches!(r, Err(Error::Conflict(_))), "the fork holds the deleted source: {r:?}");

    now.set(now.get() + 2_000);
    let r = rig.op(fork, StreamOp::Head { if_none_match: None });
    assert!(matches!(r, Err(Error::NotFound)), "the fork expired: {r:?}");
    let r = rig.op(src, create(Lifetime::Forever, None));
    assert!(matches!(r, Ok(Outcome::Created { new: true, .. })), "the source was released: {r:?}");
}
