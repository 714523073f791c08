//! Micro-benchmark of the consensus layer a replicated append will pay for:
//! three `cell::group::Group`s (raft-rs) over raft-rs's in-memory store and
//! instant, lossless links in one thread, so the figure is Raft's own CPU
//! per committed entry (propose, append on three replicas, acknowledge,
//! commit, apply), without disks or sockets. An entry stands for one
//! group-commit batch, so the cost is paid once per batch, not per append.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use raft::prelude::Message;
use raft::StateRole;
use ringstream::cell::group::{self, Answer, Group};

mod common;
#[path = "../tests/common/raft_mem.rs"]
mod raft_mem;

use raft::storage::MemStorage;

fn replicas() -> Vec<Group<MemStorage>> {
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    (1..=3)
        .map(|id| {
            let store = raft_mem::store(&[1, 2, 3], &[], &Default::default());
            Group::new(&group::config(id, 0), store, &logger).unwrap()
        })
        .collect()
}

/// Runs the replicas until no message is left; counts committed answers.
fn settle(gs: &mut [Group<MemStorage>]) -> usize {
    let mut committed = 0;
    loop {
        let mut inflight: Vec<Message> = Vec::new();
        for g in gs.iter_mut() {
            while let Some(w) = g.ready() {
                inflight.extend(w.send);
                g.persisted(w.number);
                inflight.extend(w.send_when_durable);
                committed += w.answers.iter().filter(|a| matches!(a, Answer::Committed { .. })).count();
            }
        }
        if inflight.is_empty() {
            return committed;
        }
        for m in inflight {
            gs[(m.to - 1) as usize].step(m).unwrap();
        }
    }
}

fn elected() -> Vec<Group<MemStorage>> {
    let mut gs = replicas();
    for _ in 0..100 {
        for g in gs.iter_mut() {
            g.tick();
        }
        settle(&mut gs);
        if gs.iter().any(|g| g.role() == StateRole::Leader) {
            return gs;
        }
    }
    panic!("no leader");
}

fn bench_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("raft_group");
    for size in [1024usize, 64 * 1024] {
        let mut gs = elected();
        let leader = gs.iter().position(|g| g.role() == StateRole::Leader).unwrap();
        let data = vec![0x5a; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::new("commit_3_replicas", format!("{size}B")), |b| {
            b.iter(|| {
                gs[leader].propose(data.clone()).unwrap();
                assert_eq!(settle(&mut gs), 1);
            })
        });
    }
    g.finish();
}

criterion_group! { name = benches; config = common::short(); targets = bench_commit }
criterion_main!(benches);
