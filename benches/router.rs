//! Micro-benchmark of shard ownership: `shard_for` runs on every stream request
//! (and `shard_for_bucket` on bucket requests) before it is dispatched.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringstream::protocol::StreamKey;
use ringstream::shard::router::{shard_for, shard_for_bucket};
use std::hint::black_box;

mod common;

/// A common deployment size; the hash cost does not depend on it.
const SHARDS: usize = 16;

fn key(bucket: &str, stream: &str) -> StreamKey {
    StreamKey { bucket: bucket.to_string(), stream: stream.to_string() }
}

/// Keys shaped like real traffic: the /v1 default bucket with hierarchical
/// paths, and /ds buckets with short ids.
fn typical_keys() -> Vec<StreamKey> {
    let mut keys = Vec::new();
    for i in 0..128 {
        keys.push(key("_default", &format!("orders/eu-west/2024-06/{i}")));
        keys.push(key("chat-prod", &format!("room-{:05}", i * 37)));
    }
    keys
}

fn bench_router(c: &mut Criterion) {
    let mut g = c.benchmark_group("router");

    let short = key("_default", "orders");
    g.bench_function(BenchmarkId::new("shard_for", "short_key"), |b| {
        b.iter(|| shard_for(black_box(&short), black_box(SHARDS)))
    });

    let long = key("_default", &"tenant-4711/service/checkout/".repeat(8));
    g.bench_function(BenchmarkId::new("shard_for", format!("key_{}B", long.stream.len())), |b| {
        b.iter(|| shard_for(black_box(&long), black_box(SHARDS)))
    });

    let keys = typical_keys();
    // Reported per key, so it compares directly with the single-key cases.
    g.throughput(Throughput::Elements(keys.len() as u64));
    g.bench_function(BenchmarkId::new("shard_for", format!("mix_of_{}", keys.len())), |b| {
        b.iter(|| {
            let mut acc = 0usize;
            for k in black_box(&keys) {
                acc = acc.wrapping_add(shard_for(k, SHARDS));
            }
            acc
        })
    });

    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("shard_for_bucket", "chat-prod"), |b| {
        b.iter(|| shard_for_bucket(black_box("chat-prod"), black_box(SHARDS)))
    });
    g.finish();
}

criterion_group! {
    name = group;
    config = common::short();
    targets = bench_router
}
criterion_main!(group);
