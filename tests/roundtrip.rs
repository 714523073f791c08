//! End-to-end round trips against the real server binary: the /v1 base
//! protocol, the /ds product surface and its dialect, idempotent producers,
//! Stream-Seq and If-Match, JSON mode, HTTP/1.1 edge cases, and many streams
//! spread over two shards.

mod common;

use common::{read_all, squash_json, Conn, Server, ZERO_OFFSET};
use std::time::Duration;

const OCTET: (&str, &str) = ("Content-Type", "application/octet-stream");
const TEXT: (&str, &str) = ("Content-Type", "text/plain");

fn assert_status(r: &common::Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.summary());
}

// ---------------------------------------------------------------------------
// /v1

#[test]
fn v1_lifecycle() {
    let srv = Server::start();
    let mut c = srv.conn();
    let p = "/v1/stream/rt/life";

    // Create, idempotent create, conflicting create.
    let r = c.request("PUT", p, &[TEXT], b"");
    assert_status(&r, 201, "PUT create");
    let loc = r.must("location");
    assert!(loc.starts_with("http://") && loc.ends_with(p), "Location must be an absolute URL ending in {p}: {loc}");
    assert_eq!(r.sno(), ZERO_OFFSET, "SNO of a new empty stream");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let r = c.request("PUT", p, &[TEXT], b"");
    assert_status(&r, 200, "identical PUT");
    assert_eq!(r.sno(), ZERO_OFFSET);
    let r = c.request("PUT", p, &[("Content-Type", "application/json")], b"");
    assert_status(&r, 409, "PUT with another Content-Type");

    // Appends.
    let r = c.request("POST", p, &[TEXT], b"hello ");
    assert_status(&r, 204, "POST append");
    let sno1 = r.sno();
    assert!(sno1.as_str() > ZERO_OFFSET, "offsets increase: {sno1}");
    let r = c.request("POST", p, &[TEXT], b"world");
    assert_status(&r, 204, "second POST append");
    let sno2 = r.sno();
    assert!(sno2 > sno1, "offsets increase: {sno1} then {sno2}");

    // Reads.
    let r = c.request("GET", p, &[], b"");
    assert_status(&r, 200, "GET");
    assert_eq!(r.body, b"hello world");
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    assert!(r.header("etag").is_some_and(|e| !e.is_empty()), "GET must carry an ETag: {}", r.summary());
    assert_eq!(r.sno(), sno2);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let r = c.request("GET", &format!("{p}?offset=-1"), &[], b"");
    assert_status(&r, 200, "GET offset=-1");
    assert_eq!(r.body, b"hello world");
    let r = c.request("GET", &format!("{p}?offset={sno1}"), &[], b"");
    assert_status(&r, 200, "GET from the first SNO");
    assert_eq!(r.text(), "world");
    assert_eq!(r.sno(), sno2);
    // /v1 catch-up exactly at the tail: 200 with an empty body.
    let r = c.request("GET", &format!("{p}?offset={sno2}"), &[], b"");
    assert_status(&r, 200, "/v1 GET at the tail");
    assert!(r.body.is_empty());
    assert_eq!(r.header("stream-up-to-date"), Some("true"));

    // HEAD.
    let r = c.request("HEAD", p, &[], b"");
    assert_status(&r, 200, "HEAD");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.sno(), sno2);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert!(r.body.is_empty());
    assert_eq!(r.header("stream-closed"), None, "open stream: no Stream-Closed on HEAD");

    // Append errors; none of them may write anything.
    let r = c.request("POST", p, &[("Content-Type", "application/json")], b"{}");
    assert_status(&r, 409, "POST with the wrong Content-Type");
    let r = c.request("POST", p, &[TEXT], b"");
    assert_status(&r, 400, "POST with an empty body");
    let r = c.request("POST", p, &[], b"abc");
    assert_status(&r, 400, "POST with a body and no Content-Type");
    let (body, sno, _) = read_all(&mut c, p);
    assert_eq!(body, b"hello world", "rejected appends wrote nothing");
    assert_eq!(sno, sno2);

    // Close, then append after close.
    let r = c.request("POST", p, &[("Stream-Closed", "true")], b"");
    assert_status(&r, 204, "close-only POST");
    assert_eq!(r.header("stream-closed"), Some("true"));
    assert_eq!(r.sno(), sno2, "close-only does not move the tail");
    let r = c.request("POST", p, &[TEXT], b"late");
    assert_status(&r, 409, "append after close");
    assert_eq!(r.header("stream-closed"), Some("true"));
    assert_eq!(r.sno(), sno2, "409 on a closed stream carries the final offset");
    let r = c.request("POST", p, &[("Stream-Closed", "true")], b"");
    assert_status(&r, 204, "closing twice is idempotent");
    let r = c.request("HEAD", p, &[], b"");
    assert_eq!(r.header("stream-closed"), Some("true"), "HEAD of a closed stream: {}", r.summary());
    let r = c.request("GET", p, &[], b"");
    assert_status(&r, 200, "GET closed stream");
    assert_eq!(r.body, b"hello world");
    assert_eq!(r.header("stream-closed"), Some("true"));

    // Delete and re-create.
    let r = c.request("DELETE", p, &[], b"");
    assert_status(&r, 204, "DELETE");
    let r = c.request("GET", p, &[], b"");
    assert_status(&r, 404, "GET after DELETE");
    let r = c.request("HEAD", p, &[], b"");
    assert_status(&r, 404, "HEAD after DELETE");
    let r = c.request("DELETE", p, &[], b"");
    assert_status(&r, 404, "DELETE twice");
    let r = c.request("PUT", p, &[TEXT], b"");
    assert_status(&r, 201, "re-create after DELETE");
    assert_eq!(r.sno(), ZERO_OFFSET, "a re-created stream starts empty");
    let r = c.request("GET", p, &[], b"");
    assert_status(&r, 200, "GET re-created stream");
    assert!(r.body.is_empty(), "re-created stream must be empty: {}", r.summary());
    assert_eq!(r.header("stream-closed"), None, "re-created stream is open");
    let r = c.request("POST", p, &[TEXT], b"again");
    assert_status(&r, 204, "append to re-created stream");
    assert_eq!(read_all(&mut c, p).0, b"again");

    // Unknown streams and bad offsets.
    assert_status(&c.request("GET", "/v1/stream/rt/nope", &[], b""), 404, "GET unknown stream");
    assert_status(&c.request("HEAD", "/v1/stream/rt/nope", &[], b""), 404, "HEAD unknown stream");
    assert_status(&c.request("POST", "/v1/stream/rt/nope", &[TEXT], b"x"), 404, "POST unknown stream");
    assert_status(&c.request("DELETE", "/v1/stream/rt/nope", &[], b""), 404, "DELETE unknown stream");
    assert_status(&c.request("GET", &format!("{p}?offset=abc"), &[], b""), 400, "offset=abc");
    assert_status(&c.request("GET", &format!("{p}?offset="), &[], b""), 400, "empty offset");
    assert_status(
        &c.request("GET", &format!("{p}?offset=-1&offset={ZERO_OFFSET}"), &[], b""),
        400,
        "two offset parameters",
    );
    let r = c.request("GET", &format!("{p}?offset=-1&foo=bar"), &[], b"");
    assert_status(&r, 200, "unknown query parameters are ignored");
}

#[test]
fn v1_create_with_body_and_closed() {
    let srv = Server::start();
    let mut c = srv.conn();
    let p = "/v1/stream/rt/initial";
    let r = c.request("PUT", p, &[OCTET, ("Stream-Closed", "true")], b"all of it");
    assert_status(&r, 201, "PUT closed with a body");
    assert_eq!(r.header("stream-closed"), Some("true"));
    let r = c.request("GET", p, &[], b"");
    assert_eq!(r.body, b"all of it");
    assert_eq!(r.header("stream-closed"), Some("true"));
    let r = c.request("PUT", p, &[OCTET], b"");
    assert_status(&r, 409, "PUT open over a closed stream");
    // Default content type.
    let r = c.request("PUT", "/v1/stream/rt/default-ct", &[], b"");
    assert_status(&r, 201, "PUT without Content-Type");
    assert!(r.header("content-type").is_some(), "a default Content-Type is reported: {}", r.summary());
}

// ---------------------------------------------------------------------------
// /ds

#[test]
fn ds_buckets_and_streams() {
    let srv = Server::start();
    let mut c = srv.conn();

    // Buckets.
    assert_status(&c.request("PUT", "/ds/acme", &[], b""), 201, "PUT bucket");
    assert_status(&c.request("PUT", "/ds/acme", &[], b""), 409, "PUT bucket again");
    assert_status(&c.request("PUT", "/ds/AB", &[], b""), 400, "bad bucket id AB");
    assert_status(&c.request("PUT", "/ds/abc", &[], b""), 400, "bucket id too short");
    assert_status(&c.request("GET", "/ds/nobucket", &[], b""), 404, "GET missing bucket");
    assert_status(&c.request("DELETE", "/ds/nobucket", &[], b""), 404, "DELETE missing bucket");
    let r = c.request("GET", "/ds/acme", &[], b"");
    assert_status(&r, 200, "GET bucket");
    let j = squash_json(&r.text());
    assert!(j.contains("\"streams\":0"), "empty bucket counts 0 streams: {j}");
    assert!(j.contains("\"bucket_id\":\"acme\""), "bucket_id in {j}");

    // Stream ops in a missing bucket.
    assert_status(&c.request("PUT", "/ds/nobucket/s", &[OCTET], b""), 404, "PUT stream in a missing bucket");
    assert_status(&c.request("POST", "/ds/nobucket/s", &[OCTET], b"x"), 404, "POST stream in a missing bucket");
    assert_status(&c.request("GET", "/ds/nobucket/s", &[], b""), 404, "GET stream in a missing bucket");

    // A stream.
    let p = "/ds/acme/events";
    let r = c.request("PUT", p, &[TEXT], b"");
    assert_status(&r, 201, "PUT /ds stream");
    assert!(r.must("location").starts_with("http://"), "absolute Location");
    assert_eq!(r.sno(), ZERO_OFFSET);
    assert_status(&c.request("PUT", p, &[TEXT], b""), 200, "identical PUT /ds stream");
    assert_status(&c.request("PUT", p, &[OCTET], b""), 409, "PUT /ds stream with another type");
    let r = c.request("POST", p, &[TEXT], b"one,");
    assert_status(&r, 200, "/ds append");
    let sno1 = r.sno();
    let etag1 = r.must("etag").to_string();
    let r = c.request("POST", p, &[TEXT], b"two");
    assert_status(&r, 200, "/ds second append");
    let sno2 = r.sno();
    let etag2 = r.must("etag").to_string();
    assert!(sno2 > sno1);
    assert_ne!(etag1, etag2, "the ETag changes on every append");

    let r = c.request("GET", p, &[], b"");
    assert_status(&r, 200, "/ds GET");
    assert_eq!(r.body, b"one,two");
    assert_eq!(r.sno(), sno2);
    let r = c.request("GET", &format!("{p}?offset={sno1}"), &[], b"");
    assert_status(&r, 200, "/ds GET from sno1");
    assert_eq!(r.body, b"two");
    let r = c.request("GET", &format!("{p}?offset={sno2}"), &[], b"");
    assert_status(&r, 204, "/ds GET at the tail of an open stream");
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    assert_eq!(r.sno(), sno2);
    let r = c.request("HEAD", p, &[], b"");
    assert_status(&r, 200, "/ds HEAD");
    assert_eq!(r.sno(), sno2);
    assert_eq!(r.header("cache-control"), Some("no-store"));

    // The same stream on /v1.
    let v = "/v1/stream/acme/events";
    let r = c.request("GET", v, &[], b"");
    assert_status(&r, 200, "the /ds stream on /v1");
    assert_eq!(r.body, b"one,two");
    let r = c.request("POST", v, &[TEXT], b",three");
    assert_status(&r, 204, "/v1 append to the /ds stream");
    let r = c.request("GET", p, &[], b"");
    assert_eq!(r.body, b"one,two,three");
    let r = c.request("GET", "/ds/acme", &[], b"");
    assert!(squash_json(&r.text()).contains("\"streams\":1"), "bucket counts 1 stream: {}", r.text());

    // Deleting a non-empty bucket, then the stream, then the bucket.
    assert_status(&c.request("DELETE", "/ds/acme", &[], b""), 409, "DELETE non-empty bucket");
    assert_status(&c.request("DELETE", p, &[], b""), 204, "DELETE /ds stream");
    assert_status(&c.request("GET", p, &[], b""), 404, "GET deleted /ds stream");
    assert_status(&c.request("DELETE", "/ds/acme", &[], b""), 204, "DELETE empty bucket");
    assert_status(&c.request("GET", "/ds/acme", &[], b""), 404, "GET deleted bucket");
    assert_status(&c.request("PUT", p, &[TEXT], b""), 404, "PUT stream after its bucket is gone");
}

#[test]
fn ds_stream_ids() {
    let srv = Server::start();
    let mut c = srv.conn();
    assert_status(&c.request("PUT", "/ds/ids-bucket", &[], b""), 201, "PUT bucket");
    assert_status(&c.request("PUT", "/ds/ids-bucket/a..b", &[OCTET], b""), 400, "stream id a..b");
    let long = "x".repeat(123);
    assert_status(&c.request("PUT", &format!("/ds/ids-bucket/{long}"), &[OCTET], b""), 400, "123-byte stream id");
    let ok = "y".repeat(122);
    assert_status(&c.request("PUT", &format!("/ds/ids-bucket/{ok}"), &[OCTET], b""), 201, "122-byte stream id");
    // `streams` is reserved (GET /ds/{bucket}/streams lists the bucket):
    // it can't be created or written as a stream.
    assert_status(&c.request("PUT", "/ds/ids-bucket/streams", &[OCTET], b""), 400, "PUT reserved stream id `streams`");
    assert_status(
        &c.request("POST", "/ds/ids-bucket/streams", &[OCTET], b"x"),
        400,
        "POST to reserved stream id `streams`",
    );
}

// ---------------------------------------------------------------------------
// Idempotent producers, Stream-Seq, If-Match

fn producer(id: &'static str, epoch: &'static str, seq: &'static str) -> [(&'static str, &'static str); 4] {
    [TEXT, ("Producer-Id", id), ("Producer-Epoch", epoch), ("Producer-Seq", seq)]
}

#[test]
fn producers_v1() {
    let srv = Server::start();
    let mut c = srv.conn();
    let p = "/v1/stream/rt/producer";
    assert_status(&c.request("PUT", p, &[TEXT], b""), 201, "PUT");
    let r = c.request("POST", p, &producer("w1", "0", "0"), b"a");
    assert_status(&r, 200, "producer seq 0");
    assert_eq!(r.header("producer-epoch"), Some("0"));
    assert_eq!(r.header("producer-seq"), Some("0"));
    let sno_a = r.sno();
    let r = c.request("POST", p, &producer("w1", "0", "0"), b"a");
    assert_status(&r, 204, "/v1 producer duplicate");
    assert_eq!(r.header("producer-epoch"), Some("0"));
    assert_eq!(r.header("producer-seq"), Some("0"));
    assert_eq!(read_all(&mut c, p).0, b"a", "duplicate not written");
    let r = c.request("POST", p, &producer("w1", "0", "5"), b"gap");
    assert_status(&r, 409, "producer sequence gap");
    assert_eq!(r.header("producer-expected-seq"), Some("1"));
    assert_eq!(r.header("producer-received-seq"), Some("5"));
    let r = c.request("POST", p, &producer("w1", "0", "1"), b"b");
    assert_status(&r, 200, "producer seq 1");
    assert_eq!(r.header("producer-seq"), Some("1"));
    // Duplicate of an older seq reports the highest accepted seq.
    let r = c.request("POST", p, &producer("w1", "0", "0"), b"a");
    assert_status(&r, 204, "duplicate of an older seq");
    assert_eq!(r.header("producer-seq"), Some("1"));
    // New epoch, then the old one is fenced.
    let r = c.request("POST", p, &producer("w1", "1", "0"), b"c");
    assert_status(&r, 200, "epoch bump");
    assert_eq!(r.header("producer-epoch"), Some("1"));
    let r = c.request("POST", p, &producer("w1", "0", "2"), b"zombie");
    assert_status(&r, 403, "/v1 stale producer epoch");
    assert_eq!(r.header("producer-epoch"), Some("1"));
    // An independent producer on the same stream.
    let r = c.request("POST", p, &producer("w2", "0", "0"), b"d");
    assert_status(&r, 200, "second producer seq 0");
    assert_eq!(read_all(&mut c, p).0, b"abcd");
    assert!(sno_a.as_str() > ZERO_OFFSET);
    // Incomplete producer headers.
    let r = c.request("POST", p, &[TEXT, ("Producer-Id", "w3"), ("Producer-Epoch", "0")], b"x");
    assert_status(&r, 400, "producer headers without Producer-Seq");
}

#[test]
fn producers_ds() {
    let srv = Server::start();
    let mut c = srv.conn();
    assert_status(&c.request("PUT", "/ds/prod", &[], b""), 201, "PUT bucket");
    let p = "/ds/prod/s";
    assert_status(&c.request("PUT", p, &[TEXT], b""), 201, "PUT");
    let r = c.request("POST", p, &producer("w1", "0", "0"), b"a");
    assert_status(&r, 200, "producer seq 0");
    assert_eq!(r.header("producer-epoch"), Some("0"));
    assert_eq!(r.header("producer-seq"), Some("0"));
    let sno_a = r.sno();
    assert!(r.header("etag").is_some());
    let r = c.request("POST", p, &producer("w1", "0", "0"), b"a");
    assert_status(&r, 200, "/ds producer duplicate");
    assert_eq!(r.sno(), sno_a, "a /ds duplicate returns the original SNO");
    assert_eq!(r.header("producer-seq"), Some("0"));
    assert_eq!(read_all(&mut c, p).0, b"a", "duplicate not written");
    let r = c.request("POST", p, &producer("w1", "0", "5"), b"gap");
    assert_status(&r, 409, "producer sequence gap");
    assert_eq!(r.header("producer-expected-seq"), Some("1"));
    assert_eq!(r.header("producer-received-seq"), Some("5"));
    let r = c.request("POST", p, &producer("w1", "1", "0"), b"b");
    assert_status(&r, 200, "epoch bump");
    let r = c.request("POST", p, &producer("w1", "0", "1"), b"zombie");
    assert_status(&r, 409, "/ds stale producer epoch");
    assert_eq!(r.header("producer-epoch"), Some("1"));
    assert_eq!(read_all(&mut c, p).0, b"ab");
}

#[test]
fn stream_seq_and_if_match() {
    let srv = Server::start();
    let mut c = srv.conn();
    let p = "/v1/stream/rt/seq";
    assert_status(&c.request("PUT", p, &[TEXT], b""), 201, "PUT");
    assert_status(&c.request("POST", p, &[TEXT, ("Stream-Seq", "2")], b"x"), 204, "Stream-Seq 2");
    assert_status(
        &c.request("POST", p, &[TEXT, ("Stream-Seq", "10")], b"y"),
        409,
        "Stream-Seq 10 after 2 (byte order)",
    );
    assert_status(&c.request("POST", p, &[TEXT, ("Stream-Seq", "2")], b"y"), 409, "repeated Stream-Seq");
    assert_status(&c.request("POST", p, &[TEXT, ("Stream-Seq", "3")], b"z"), 204, "Stream-Seq 3");
    assert_eq!(read_all(&mut c, p).0, b"xz");

    // If-Match.
    let etag = c.request("HEAD", p, &[], b"").must("etag").to_string();
    let r = c.request("POST", p, &[TEXT, ("If-Match", "\"no-such-etag\"")], b"nope");
    assert_status(&r, 412, "POST with a mismatched If-Match");
    assert_eq!(read_all(&mut c, p).0, b"xz", "412 wrote nothing");
    let r = c.request("POST", p, &[TEXT, ("If-Match", &etag)], b"!");
    assert_status(&r, 204, "POST with the current ETag in If-Match");
    assert_eq!(read_all(&mut c, p).0, b"xz!");
    // The old ETag no longer matches.
    let r = c.request("POST", p, &[TEXT, ("If-Match", &etag)], b"?");
    assert_status(&r, 412, "POST with a stale If-Match");
    assert_eq!(read_all(&mut c, p).0, b"xz!");
}

// ---------------------------------------------------------------------------
// JSON mode

#[test]
fn json_mode() {
    let srv = Server::start();
    let mut c = srv.conn();
    let json = ("Content-Type", "application/json");
    for p in ["/v1/stream/rt/json", "/ds/jsonb/json"] {
        if p.starts_with("/ds/") {
            assert_status(&c.request("PUT", "/ds/jsonb", &[], b""), 201, "PUT bucket");
        }
        assert_status(&c.request("PUT", p, &[json], b""), 201, "PUT json");
        // An empty JSON stream reads as [].
        let r = c.request("GET", &format!("{p}?offset=now"), &[], b"");
        assert_eq!(squash_json(&r.text()), if r.status == 204 { "" } else { "[]" }, "empty JSON read: {}", r.summary());
        assert!(c.request("POST", p, &[json], b"[1, 2]").status / 100 == 2, "POST [1,2]");
        assert!(c.request("POST", p, &[json], b"{\"a\": 1}").status / 100 == 2, "POST object");
        let r = c.request("GET", p, &[], b"");
        assert_status(&r, 200, "GET json");
        assert_eq!(squash_json(&r.text()), r#"[1,2,{"a":1}]"#, "{p}");
        assert_status(&c.request("POST", p, &[json], b"[]"), 400, "POST []");
        assert_status(&c.request("POST", p, &[json], b"{\"a\": "), 400, "POST invalid JSON");
        assert_status(&c.request("POST", p, &[json], b"[1, 2"), 400, "POST truncated array");
        let r = c.request("GET", p, &[], b"");
        assert_eq!(squash_json(&r.text()), r#"[1,2,{"a":1}]"#, "rejected JSON wrote nothing ({p})");
    }
}

// ---------------------------------------------------------------------------
// HTTP/1.1 edges

#[test]
fn http_edges() {
    let srv = Server::start();
    let port = srv.port();
    let mut c = srv.conn();
    let p = "/v1/stream/rt/edges";
    assert_status(&c.request("PUT", p, &[TEXT], b""), 201, "PUT");

    // Pipelining: two requests in one write, answered in order.
    let mut two = common::encode_request(port, "POST", p, &[TEXT], b"pipe1,");
    two.extend(common::encode_request(port, "POST", p, &[TEXT], b"pipe2,"));
    c.send_raw(&two).unwrap();
    let r1 = c.read_response(false).unwrap();
    let r2 = c.read_response(false).unwrap();
    assert_status(&r1, 204, "first pipelined POST");
    assert_status(&r2, 204, "second pipelined POST");
    assert!(r2.sno() > r1.sno(), "pipelined answers in order: {} then {}", r1.sno(), r2.sno());
    let mut three = common::encode_request(port, "GET", p, &[], b"");
    three.extend(common::encode_request(port, "HEAD", p, &[], b""));
    three.extend(common::encode_request(port, "GET", &format!("{p}?offset={}", r1.sno()), &[], b""));
    c.send_raw(&three).unwrap();
    let g = c.read_response(false).unwrap();
    let h = c.read_response(true).unwrap();
    let g2 = c.read_response(false).unwrap();
    assert_eq!(g.body, b"pipe1,pipe2,");
    assert_status(&h, 200, "pipelined HEAD");
    assert_eq!(h.sno(), r2.sno());
    assert_eq!(g2.body, b"pipe2,");

    // Chunked request body.
    let mut req = format!(
        "POST {p} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    req.extend_from_slice(b"5\r\nchunk\r\n3;ext=1\r\ned,\r\n0\r\n\r\n");
    c.send_raw(&req).unwrap();
    let r = c.read_response(false).unwrap();
    assert_status(&r, 204, "chunked POST");
    let (body, _, _) = read_all(&mut c, p);
    assert_eq!(body, b"pipe1,pipe2,chunked,");

    // Expect: 100-continue: the server answers 100 before the body is sent.
    let head = format!(
        "POST {p} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\nContent-Length: 9\r\nExpect: 100-continue\r\n\r\n"
    );
    c.send_raw(head.as_bytes()).unwrap();
    let interim = c.read_one(false).expect("reading the interim response");
    assert_status(&interim, 100, "Expect: 100-continue");
    c.send_raw(b"continue,").unwrap();
    let r = c.read_response(false).unwrap();
    assert_status(&r, 204, "POST after 100 Continue");
    assert_eq!(read_all(&mut c, p).0, b"pipe1,pipe2,chunked,continue,");

    // Connection: close is honoured.
    let r = c.request("GET", p, &[("Connection", "close")], b"");
    assert_status(&r, 200, "GET with Connection: close");
    assert_eq!(r.header("connection").map(str::to_ascii_lowercase).as_deref(), Some("close"));

    // Head section over 32 KiB -> 431.
    let mut big = srv.conn();
    let filler = "a".repeat(33 * 1024);
    let r = big.try_request("GET", p, &[("X-Filler", &filler)], b"");
    match r {
        Ok(r) => assert_status(&r, 431, "header section over 32 KiB"),
        Err(e) => panic!("header section over 32 KiB: expected a 431 response, got I/O error {e}"),
    }

    // Body over 16 MiB declared by Content-Length -> 413 (body not sent).
    let mut big = srv.conn();
    let head = format!(
        "POST {p} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        16 * 1024 * 1024 + 1
    );
    big.send_raw(head.as_bytes()).unwrap();
    let r = big.read_response(false).expect("reading the 413");
    assert_status(&r, 413, "declared body over 16 MiB");

    // Unknown method, OPTIONS.
    let mut c = srv.conn();
    let r = c.request("PATCH", p, &[], b"");
    assert_status(&r, 405, "PATCH");
    let mut c = srv.conn();
    let r = c.request("BREW", p, &[], b"");
    assert_status(&r, 405, "unknown method BREW");
    let mut c = srv.conn();
    let r = c.request(
        "OPTIONS",
        p,
        &[
            ("Origin", "http://example.com"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "if-none-match"),
        ],
        b"",
    );
    assert_status(&r, 204, "OPTIONS");
    let allow = r.must("access-control-allow-headers").to_ascii_lowercase();
    assert!(allow.contains('*') || allow.contains("if-none-match"), "preflight allows if-none-match: {allow}");
    // Every response carries nosniff.
    let r = c.request("GET", "/v1/stream/rt/missing", &[], b"");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));

    // The connection is still usable after everything above.
    assert_eq!(read_all(&mut c, p).0, b"pipe1,pipe2,chunked,continue,");
}

// ---------------------------------------------------------------------------
// Many streams over two shards

#[test]
fn many_streams_two_shards() {
    let srv = Server::start();
    const N: usize = 200;
    const CONNS: usize = 4;
    let payload = |i: usize, k: usize| format!("stream-{i}-append-{k};").into_bytes();
    let port = srv.port();
    let workers: Vec<_> = (0..CONNS)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Conn::connect(port);
                for i in (w..N).step_by(CONNS) {
                    let p = format!("/v1/stream/many/s{i}");
                    let r = c.request("PUT", &p, &[OCTET], b"");
                    assert_eq!(r.status, 201, "PUT {p}: {}", r.summary());
                }
                for k in 0..3 {
                    for i in (w..N).step_by(CONNS) {
                        let p = format!("/v1/stream/many/s{i}");
                        let r = c.request("POST", &p, &[OCTET], &payload(i, k));
                        assert_eq!(r.status, 204, "POST {p}: {}", r.summary());
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("writer thread");
    }
    // Read back on other connections than the writers'.
    let mut c = srv.conn();
    for i in 0..N {
        let p = format!("/v1/stream/many/s{i}");
        let want: Vec<u8> = (0..3).flat_map(|k| payload(i, k)).collect();
        let (got, _, _) = read_all(&mut c, &p);
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want), "{p}");
    }
    let m = srv.metrics();
    let streams = |shard: &str| {
        m.iter()
            .find(|(k, _)| k == &format!("ringstream_streams{{shard=\"{shard}\"}}"))
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("metrics lack ringstream_streams for shard {shard}: {m:?}"))
    };
    let (s0, s1) = (streams("0"), streams("1"));
    assert!(s0 > 0.0 && s1 > 0.0, "both shards hold streams: shard 0 = {s0}, shard 1 = {s1}");
    assert_eq!(s0 + s1, N as f64, "200 streams in all");
    // Nothing left hanging: the server still answers quickly.
    let mut c = srv.conn();
    let t = std::time::Instant::now();
    assert_status(&c.request("HEAD", "/v1/stream/many/s0", &[], b""), 200, "HEAD after the load");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn producer_retry_answers_the_original_offset() {
    let mut s = Server::start();
    let mut c = s.conn();
    assert_status(&c.request("PUT", "/ds/retries", &[], b""), 201, "bucket");
    for (surface, path) in [("v1", "/v1/stream/retries/p"), ("ds", "/ds/retries/q")] {
        assert_status(&c.request("PUT", path, &[TEXT], b""), 201, "create");
        let mut snos = Vec::new();
        for seq in ["0", "1", "2"] {
            let r = c.request("POST", path, &producer("w", "0", seq), format!("m{seq}").as_bytes());
            assert_status(&r, 200, "accepted");
            snos.push(r.sno());
        }
        let r = c.request("POST", path, &producer("w", "0", "1"), b"m1");
        assert_status(&r, if surface == "ds" { 200 } else { 204 }, "duplicate");
        assert_eq!(r.sno(), snos[1], "{surface}: a retry of seq 1 answers the offset seq 1 got");
        assert_eq!(r.header("producer-seq"), Some("2"), "{surface}: highest accepted seq");
        assert_eq!(read_all(&mut c, path).0, b"m0m1m2", "{surface}: nothing written twice");
    }
    // The offsets are rebuilt from the log after a restart.
    s.restart();
    let mut c = s.conn();
    for path in ["/v1/stream/retries/p", "/ds/retries/q"] {
        let r = c.request("POST", path, &producer("w", "0", "0"), b"m0");
        assert_eq!(r.sno(), "0000000000000000_0000000000000002", "{path}: seq 0 ended at byte 2");
    }
}
