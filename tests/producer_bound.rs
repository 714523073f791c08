//! Bounded producer state over the real binary: `--max-producers-per-stream`
//! refuses a new producer with a JSON 429 (on /v1 and /ds) and writes
//! nothing while the producers it knows go on, the bound and the
//! de-duplication hold across a restart on the same data directory,
//! `--producer-idle-expiry-secs` frees the slot of an idle producer (from
//! the times its records carry, also after a restart), a restart rebuilds
//! no more producers than the bound however many came and went (so its
//! state records still fit a segment), and a Producer-Id or Stream-Seq over
//! 256 bytes gets 400.

mod common;

use common::{Conn, Response, Server};
use serde_json::Value;
use std::time::Duration;

const TEXT: (&str, &str) = ("Content-Type", "text/plain");

fn st(r: &Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.summary());
}

/// An append of `body` by producer `id` (epoch 0) at `seq`.
fn append(c: &mut Conn, path: &str, id: &str, seq: u64, body: &[u8]) -> Response {
    let seq = seq.to_string();
    let h = [TEXT, ("Producer-Id", id), ("Producer-Epoch", "0"), ("Producer-Seq", seq.as_str())];
    c.request("POST", path, &h, body)
}

fn tail(c: &mut Conn, path: &str) -> String {
    let r = c.request("HEAD", path, &[], b"");
    st(&r, 200, &format!("HEAD {path}"));
    r.must("stream-next-offset").to_string()
}

/// The 429 of a producer past the bound: JSON naming the limit.
fn refused(r: &Response, limit: u64, what: &str) {
    st(r, 429, what);
    assert_eq!(r.header("content-type"), Some("application/json"), "{what}");
    let v: Value = serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", r.text()));
    assert_eq!(v["error"], "producer_limit", "{what}: {v}");
    assert_eq!(v["limit"], limit, "{what}: {v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {v}");
}

/// Three producers fill `path`; a fourth is refused and writes nothing.
fn fill_three_then_refuse_a_fourth(c: &mut Conn, path: &str) {
    for i in 0..3 {
        st(&append(c, path, &format!("p{i}"), 0, b"a"), 200, &format!("{path}: p{i} first append"));
    }
    let before = tail(c, path);
    refused(&append(c, path, "p3", 0, b"b"), 3, &format!("{path}: a fourth producer"));
    assert_eq!(tail(c, path), before, "{path}: the refused append wrote something");
    for i in 0..3 {
        st(&append(c, path, &format!("p{i}"), 1, b"c"), 200, &format!("{path}: p{i} goes on"));
    }
}

#[test]
fn the_bound_refuses_a_new_producer_and_holds_across_a_restart() {
    let mut srv = Server::start_with(&["--max-producers-per-stream", "3"]);
    let mut c = srv.conn();
    let v1 = "/v1/stream/bound";
    st(&c.request("PUT", v1, &[TEXT], b""), 201, "create on /v1");
    fill_three_then_refuse_a_fourth(&mut c, v1);
    st(&c.request("PUT", "/ds/bkt1", &[], b""), 201, "create a bucket");
    let ds = "/ds/bkt1/bound";
    st(&c.request("PUT", ds, &[TEXT], b""), 201, "create on /ds");
    fill_three_then_refuse_a_fourth(&mut c, ds);
    // Appends without a producer do not count.
    st(&c.request("POST", v1, &[TEXT], b"plain"), 204, "an append without a producer");

    srv.restart();
    let mut c = srv.conn();
    for path in [v1, ds] {
        let before = tail(&mut c, path);
        refused(&append(&mut c, path, "p3", 0, b"b"), 3, &format!("{path}: a fourth producer after the restart"));
        // The known producers still de-duplicate: a retry of seq 1 writes nothing.
        let dup = append(&mut c, path, "p0", 1, b"c");
        assert!(dup.status == 200 || dup.status == 204, "{path}: retry of p0 seq 1: {}", dup.summary());
        assert_eq!(dup.header("producer-seq"), Some("1"), "{path}: {}", dup.summary());
        assert_eq!(tail(&mut c, path), before, "{path}: the retry or the refusal wrote something");
        st(&append(&mut c, path, "p1", 2, b"d"), 200, &format!("{path}: p1 goes on after the restart"));
    }
}

#[test]
fn an_idle_producer_frees_its_slot_after_the_expiry() {
    // 3 s: long enough that a restart fits inside the window of the
    // producers that wrote just before it.
    let mut srv = Server::start_with(&["--max-producers-per-stream", "3", "--producer-idle-expiry-secs", "3"]);
    let mut c = srv.conn();
    let path = "/v1/stream/expiry";
    st(&c.request("PUT", path, &[TEXT], b""), 201, "create");
    for i in 0..3 {
        st(&append(&mut c, path, &format!("p{i}"), 0, b"a"), 200, &format!("p{i}"));
    }
    refused(&append(&mut c, path, "p3", 0, b"b"), 3, "a fourth producer inside the window");
    std::thread::sleep(Duration::from_millis(3_300));
    st(&append(&mut c, path, "p3", 0, b"b"), 200, "a fourth producer once the others are idle");
    // p0 was forgotten: its old sequence is gone and it starts anew at 0.
    let gap = append(&mut c, path, "p0", 1, b"c");
    st(&gap, 409, "a forgotten producer's next seq");
    assert_eq!(gap.header("producer-expected-seq"), Some("0"), "{}", gap.summary());
    st(&append(&mut c, path, "p0", 0, b"c"), 200, "a forgotten producer starting anew");

    // After a restart the table is rebuilt with the records' times: p1 and
    // p2 are still idle (a rebuild stamped with the restart's clock would
    // count them), so p4 finds a slot next to p3 and p0.
    srv.restart();
    let mut c = srv.conn();
    st(&append(&mut c, path, "p4", 0, b"e"), 200, "a new producer after the restart");
    refused(&append(&mut c, path, "p5", 0, b"f"), 3, "past the bound after the restart");
    let dup = append(&mut c, path, "p3", 0, b"b");
    assert_eq!(dup.status, 204, "p3's retry is a duplicate: {}", dup.summary());
}

#[test]
fn a_restart_after_many_producers_went_idle_rebuilds_a_bounded_table() {
    // 6 waves of 40 producers with 256-byte ids, each wave idle (1 s) by
    // the next: the server never holds more than 40, but its log names 240,
    // whose table (about 77 KB in a state record) no 64 KiB segment holds.
    let args = ["--segment-bytes", "65536", "--max-producers-per-stream", "40", "--producer-idle-expiry-secs", "1"];
    let mut srv = Server::start_with(&args);
    let mut c = srv.conn();
    st(&c.request("PUT", "/ds/bkt3", &[], b""), 201, "create a bucket");
    let path = "/ds/bkt3/many";
    st(&c.request("PUT", path, &[TEXT], b""), 201, "create");
    for wave in 0..6 {
        if wave > 0 {
            std::thread::sleep(Duration::from_millis(1_100));
        }
        for i in 0..40 {
            let id = format!("{wave}-{i:02}-{}", "x".repeat(250));
            st(&append(&mut c, path, &id, 0, b"a"), 200, &format!("wave {wave}, producer {i}"));
        }
    }
    srv.restart();
    let mut c = srv.conn();
    // A snapshot writes the stream's state record, producers included: it
    // fits only if recovery held the table to the bound.
    let at = tail(&mut c, path);
    let r = c.request("PUT", &format!("{path}/snapshot/{at}"), &[TEXT], b"state");
    st(&r, 204, "a snapshot (a state record) after the restart");
    srv.restart();
    let mut c = srv.conn();
    assert_eq!(tail(&mut c, path), at, "the stream after a restart that read the state record");
    // The last wave may still count (the bound held it); once idle, not.
    std::thread::sleep(Duration::from_millis(1_100));
    st(&append(&mut c, path, "after", 0, b"b"), 200, "a new producer after the second restart");
}

#[test]
fn producer_ids_and_stream_seqs_over_256_bytes_are_refused() {
    let srv = Server::start();
    let mut c = srv.conn();
    let path = "/v1/stream/long-headers";
    st(&c.request("PUT", path, &[TEXT], b""), 201, "create");
    let long_id = "i".repeat(257);
    let r = append(&mut c, path, &long_id, 0, b"x");
    st(&r, 400, "a 257-byte Producer-Id");
    assert!(r.text().contains("Producer-Id"), "the reason names the header: {}", r.text());
    st(&append(&mut c, path, &"i".repeat(256), 0, b"x"), 200, "a 256-byte Producer-Id");
    let before = tail(&mut c, path);
    let long_seq = "9".repeat(257);
    let r = c.request("POST", path, &[TEXT, ("Stream-Seq", long_seq.as_str())], b"y");
    st(&r, 400, "a 257-byte Stream-Seq");
    assert!(r.text().contains("Stream-Seq"), "the reason names the header: {}", r.text());
    assert_eq!(tail(&mut c, path), before, "a refused append wrote something");
    let seq = "9".repeat(256);
    st(&c.request("POST", path, &[TEXT, ("Stream-Seq", seq.as_str())], b"y"), 204, "a 256-byte Stream-Seq");
    st(&c.request("PUT", "/ds/bkt2", &[], b""), 201, "create a bucket");
    st(&c.request("PUT", "/ds/bkt2/s", &[TEXT], b""), 201, "create on /ds");
    st(&append(&mut c, "/ds/bkt2/s", &long_id, 0, b"x"), 400, "a 257-byte Producer-Id on /ds");
}
