//! Micro-benchmarks of the HTTP edge's CPU work per request: `parse_head`, `route`,
//! both together, and chunked body decoding.
//!
//! The requests are the two the server sees most: a producer's POST append and a
//! reader's GET with an offset. Neither touches a socket, so the numbers are the
//! per-request overhead before a shard gets the operation.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringstream::http::parse::{parse_head, BodyKind, ChunkProgress, ChunkedDecoder, ParseLimits};
use ringstream::http::route::{route, Route};
use ringstream::limits::{REQUEST_BODY_BYTES_MAX, REQUEST_HEADER_BYTES_MAX, REQUEST_HEADER_COUNT_MAX};
use std::hint::black_box;

mod common;

const LIMITS: ParseLimits = ParseLimits {
    header_bytes_max: REQUEST_HEADER_BYTES_MAX,
    header_count_max: REQUEST_HEADER_COUNT_MAX,
    body_bytes_max: REQUEST_BODY_BYTES_MAX,
};

/// An idempotent-producer append with the headers a typical client library sends.
const POST_APPEND: &[u8] = b"POST /v1/stream/orders/eu-west/2024-06 HTTP/1.1\r\n\
Host: ringstream.internal:8080\r\n\
User-Agent: durable-streams-client/0.4.2\r\n\
Accept: */*\r\n\
Accept-Encoding: gzip, deflate\r\n\
Content-Type: application/json\r\n\
Content-Length: 1024\r\n\
Connection: keep-alive\r\n\
Producer-Id: checkout-service-7f3a\r\n\
Producer-Epoch: 3\r\n\
Producer-Seq: 184467\r\n\
X-Request-Id: 5b1e6f0c-2d4a-4e8b-9c71-0a3f5d2e8b44\r\n\
\r\n";

/// A catch-up read from a known offset.
const GET_READ: &[u8] = b"GET /v1/stream/orders/eu-west/2024-06?offset=0000000000000003_0000000000183296 HTTP/1.1\r\n\
Host: ringstream.internal:8080\r\n\
User-Agent: durable-streams-client/0.4.2\r\n\
Accept: application/json\r\n\
Accept-Encoding: gzip, deflate\r\n\
Connection: keep-alive\r\n\
If-None-Match: \"0000000000000003_0000000000183296\"\r\n\
\r\n";

/// A body of `len` bytes framed as chunks of at most `chunk` bytes, with the final
/// zero-size chunk; returns the encoding and the plain body it decodes to.
fn chunked(len: usize, chunk: usize) -> (Vec<u8>, Vec<u8>) {
    let body: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
    let mut enc = Vec::with_capacity(len + len / chunk * 8 + 8);
    for piece in body.chunks(chunk) {
        enc.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        enc.extend_from_slice(piece);
        enc.extend_from_slice(b"\r\n");
    }
    enc.extend_from_slice(b"0\r\n\r\n");
    (enc, body)
}

fn is_shard_route(r: &Route) -> bool {
    matches!(r, Route::Shard(_))
}

fn bench_parse_and_route(c: &mut Criterion) {
    // Check once, outside the timed loops, that each request takes the path meant
    // to be measured: an error path would make the numbers meaningless.
    for req in [POST_APPEND, GET_READ] {
        let (head, used) = parse_head(req, &LIMITS).expect("benchmark request parses");
        assert_eq!(used, req.len());
        assert_eq!(head.body, if req == POST_APPEND { BodyKind::Length(1024) } else { BodyKind::None });
        assert!(is_shard_route(&route(&head, Vec::new()).expect("benchmark request routes")));
    }

    let mut g = c.benchmark_group("http");
    for (name, req) in [("post_append", POST_APPEND), ("get_read", GET_READ)] {
        g.bench_function(BenchmarkId::new("parse_head", name), |b| b.iter(|| parse_head(black_box(req), &LIMITS)));

        let (head, _) = parse_head(req, &LIMITS).expect("checked above");
        // The body is moved into the operation, never copied, so an empty Vec
        // stands in for the 1 KiB the POST announces without skewing the route cost.
        g.bench_function(BenchmarkId::new("route", name), |b| b.iter(|| route(black_box(&head), Vec::new())));

        g.bench_function(BenchmarkId::new("parse_and_route", name), |b| {
            b.iter(|| {
                let (head, _) = parse_head(black_box(req), &LIMITS).expect("checked above");
                route(&head, Vec::new())
            })
        });
    }
    g.finish();
}

fn bench_chunked(c: &mut Criterion) {
    const BODY_BYTES: usize = 16 * 1024;
    let mut g = c.benchmark_group("http/chunked_decode_16KiB");
    g.throughput(Throughput::Bytes(BODY_BYTES as u64));
    // One big chunk is the bulk-copy path; 256 B chunks make the byte-wise
    // framing state machine a large share of the work.
    for chunk in [BODY_BYTES, 1024, 256] {
        let (enc, body) = chunked(BODY_BYTES, chunk);
        {
            let mut dec = ChunkedDecoder::new(LIMITS.body_bytes_max);
            let mut out = Vec::new();
            assert_eq!(dec.decode(&enc, &mut out), Ok((enc.len(), ChunkProgress::Done)));
            assert_eq!(out, body);
        }
        let mut out = Vec::with_capacity(BODY_BYTES);
        g.bench_function(BenchmarkId::new("chunk_bytes", chunk), |b| {
            b.iter(|| {
                // The connection reuses its body buffer, so keep the capacity.
                out.clear();
                let mut dec = ChunkedDecoder::new(LIMITS.body_bytes_max);
                let r = dec.decode(black_box(&enc), &mut out);
                black_box(&out);
                r
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_parse_and_route(c);
    bench_chunked(c);
}

criterion_group! {
    name = group;
    config = common::short();
    targets = benches
}
criterion_main!(group);
