//! Micro-benchmarks of JSON-mode appends and reads: `protocol::json::normalize`
//! (validate, compact, flatten one array level) and `wrap_array` (stored chunks
//! back to a response body). Throughput is in input bytes.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringstream::protocol::json::{normalize, wrap_array};
use std::fmt::Write;
use std::hint::black_box;

mod common;

/// One event as a client would pretty-print it: strings, integers, a float,
/// a nested object and an array, so every scanner path is exercised.
fn event(i: usize, indent: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\n{indent}  \"id\": {id},\n{indent}  \"type\": \"order.created\",\n\
         {indent}  \"customer\": {{ \"name\": \"Customer \\\"{i}\\\"\", \"tier\": \"gold\" }},\n\
         {indent}  \"amount\": {amount}.{cents:02},\n{indent}  \"tags\": [\"web\", \"eu\", {i}],\n\
         {indent}  \"paid\": {paid},\n{indent}  \"coupon\": null\n{indent}}}",
        id = 1_700_000_000_000u64 + i as u64,
        amount = i * 7 % 1000,
        cents = i % 100,
        paid = i.is_multiple_of(2),
    );
    s
}

fn array_of(n: usize) -> String {
    let items: Vec<String> = (0..n).map(|i| format!("  {}", event(i, "  "))).collect();
    format!("[\n{}\n]", items.join(",\n"))
}

/// A single (non-array) object of at least `min_bytes`: stored as one message,
/// so this measures validation and compaction without the flattening split.
fn big_object(min_bytes: usize) -> String {
    let mut items = Vec::new();
    let mut len = 0;
    while len < min_bytes {
        let e = format!("    {}", event(items.len(), "    "));
        len += e.len() + 2;
        items.push(e);
    }
    format!("{{\n  \"batch\": \"nightly-export\",\n  \"items\": [\n{}\n  ]\n}}", items.join(",\n"))
}

fn bench_normalize(c: &mut Criterion) {
    let docs =
        [("small_object", event(1, "")), ("array_100_objects", array_of(100)), ("object_64KiB", big_object(64 * 1024))];
    let mut g = c.benchmark_group("json/normalize");
    for (name, doc) in &docs {
        let expected = if name.starts_with("array") { 100 } else { 1 };
        let (_, n) = normalize(doc.as_bytes(), false).expect("benchmark document is valid JSON");
        assert_eq!(n, expected, "{name}");
        g.throughput(Throughput::Bytes(doc.len() as u64));
        g.bench_function(BenchmarkId::new(*name, doc.len()), |b| {
            b.iter(|| normalize(black_box(doc.as_bytes()), false))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("json/wrap_array");
    for (name, doc) in &docs {
        let (stored, _) = normalize(doc.as_bytes(), false).expect("checked above");
        g.throughput(Throughput::Bytes(stored.len() as u64));
        g.bench_function(BenchmarkId::new(*name, stored.len()), |b| b.iter(|| wrap_array(black_box(&stored))));
    }
    g.finish();
}

criterion_group! {
    name = group;
    config = common::short();
    targets = bench_normalize
}
criterion_main!(group);
