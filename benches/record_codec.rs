//! Micro-benchmarks of the segment record frame: `record::encode` on the append
//! path and `record::decode` on recovery and mapped reads. Both run CRC32C over
//! the header and the whole body, so throughput is reported in body bytes.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringstream::storage::record::{self, RecordHeader};
use std::hint::black_box;

mod common;

const SEGMENT_NO: u64 = 7;
const BODY_BYTES: [usize; 3] = [64, 1024, 64 * 1024];

fn header(body_len: usize) -> RecordHeader {
    RecordHeader { kind: 1, stream_id: 42, incarnation: 1, stream_offset: 1 << 20, body_len: body_len as u32 }
}

/// Not all one value, so nothing can shortcut the checksum.
fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(131) % 251) as u8).collect()
}

fn bench_encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("record/encode");
    for len in BODY_BYTES {
        let body = body(len);
        let h = header(len);
        let mut out = Vec::with_capacity(record::framed_len(len));
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::from_parameter(len), |b| {
            b.iter(|| {
                // The log appends into a long-lived mirror buffer: reuse capacity.
                out.clear();
                record::encode(black_box(SEGMENT_NO), black_box(&h), black_box(&body), &mut out)
            })
        });
    }
    g.finish();
}

fn bench_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("record/decode");
    for len in BODY_BYTES {
        let body = body(len);
        let mut framed = Vec::new();
        record::encode(SEGMENT_NO, &header(len), &body, &mut framed);
        let (h, range, _) = record::decode(SEGMENT_NO, &framed).expect("fresh record verifies");
        assert_eq!((h, &framed[range]), (header(len), &body[..]));
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::from_parameter(len), |b| {
            b.iter(|| record::decode(black_box(SEGMENT_NO), black_box(&framed)))
        });
    }
    g.finish();
}

criterion_group! {
    name = group;
    config = common::short();
    targets = bench_encode, bench_decode
}
criterion_main!(group);
