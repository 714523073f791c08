//! Micro-benchmark of group commit: `storage::Log` over the in-memory
//! `SimStore`, so it needs no NVMe and measures the log's own CPU cost per
//! durable record (framing, copy-out, waking waiters), not a device's.
//!
//! N appender tasks each loop "append one 1 KiB record, await `durable`", on a
//! single-threaded executor next to the log's writer and preparer, as on one
//! shard. One benchmark iteration is one record made durable, so the reported
//! time is per record; as N grows, more records share each flush.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{Log, LogConfig, RecordHeader};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

const BODY_BYTES: usize = 1024;
/// Bigger than the 64 KiB minimum so that rollover (seal, sync, swap to the
/// mapping) stays a minor share, yet small enough that the simulator's
/// whole-file copy on every sync does not dominate the numbers.
const SEGMENT_BYTES: u64 = 256 * 1024;
/// Far above what 64 appenders can have in flight, so `Full` never happens.
const PENDING_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Records written to one log before a fresh one replaces it: the simulator
/// keeps every segment in memory, so a long run would otherwise grow without
/// bound. Opening the fresh log is not timed.
const RECORDS_PER_LOG: u64 = 8 * 1024;

/// Runs `records` appends spread over `appenders` tasks on a fresh log and
/// returns the time until every one of them was durable.
fn run(appenders: u64, records: u64, body: &Rc<Vec<u8>>) -> Duration {
    let cfg = LogConfig { segment_bytes: SEGMENT_BYTES, pending_bytes_max: PENDING_BYTES_MAX };
    let (log, recovered, _) = block_on(Log::open(SimStore::new(), cfg)).expect("open empty log");
    assert!(recovered.is_empty());
    let log = Rc::new(log);

    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    let l = log.clone();
    spawner.spawn_local(async move { l.run_writer().await }).expect("spawn writer");
    let l = log.clone();
    spawner.spawn_local(async move { l.run_preparer().await }).expect("spawn preparer");

    let done = Rc::new(Cell::new(0u64));
    for a in 0..appenders {
        // Spread the remainder so the task counts add up to exactly `records`.
        let mine = records / appenders + u64::from(a < records % appenders);
        let (log, body, done) = (log.clone(), body.clone(), done.clone());
        spawner
            .spawn_local(async move {
                let mut offset = 0u64;
                for _ in 0..mine {
                    let h = RecordHeader {
                        kind: 1,
                        stream_id: a,
                        incarnation: 1,
                        stream_offset: offset,
                        body_len: body.len() as u32,
                    };
                    let (_, lsn) = log.append(h, &body).expect("append");
                    log.durable(lsn).await.expect("durable");
                    offset += body.len() as u64;
                }
                done.set(done.get() + mine);
            })
            .expect("spawn appender");
    }

    let start = Instant::now();
    pool.run_until_stalled();
    let elapsed = start.elapsed();

    // A stall here is a lost wake-up in the log, not a slow run: fail loudly.
    assert_eq!(done.get(), records, "log stalled with appenders still waiting");
    assert_eq!(log.durable_lsn(), log.tail_lsn());
    log.stop();
    pool.run_until_stalled();
    elapsed
}

fn bench_group_commit(c: &mut Criterion) {
    let body = Rc::new((0..BODY_BYTES).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let mut g = c.benchmark_group("group_commit/1KiB_record");
    g.throughput(Throughput::Elements(1));
    for appenders in [1u64, 16, 64] {
        g.bench_function(BenchmarkId::new("appenders", appenders), |b| {
            b.iter_custom(|records| {
                let mut total = Duration::ZERO;
                let mut left = records;
                while left > 0 {
                    let n = left.min(RECORDS_PER_LOG);
                    total += run(appenders, n, &body);
                    left -= n;
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = group;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = bench_group_commit
}
criterion_main!(group);
