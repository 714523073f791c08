//! Bucket quotas of the auth file (`[[bucket]]` with `max_streams`,
//! `max_bytes`) through the real binary: past `max_streams` a create gets
//! 429, past `max_bytes` a write gets 507, each with a JSON body naming the
//! quota, and nothing is written; both surfaces; streams on both shards
//! counted together; concurrent writers never pass a limit; deletes,
//! snapshots and trims give room back; usage is recounted after a restart
//! and counted when a reload adds a quota to a bucket that holds data.

mod common;

use common::auth::{bearer, eventually, hang_up, write, AuthedServer, Grant, Quota};
use common::{Conn, Response, Server};
use ringstream::protocol::StreamKey;
use ringstream::shard::router::shard_for;
use serde_json::Value;

const OCTET: (&str, &str) = ("Content-Type", "application/octet-stream");
const ADMIN: Grant = Grant { name: "admin", token: "quota-admin-token", buckets: &["*"], rights: &["admin"] };
/// Shards of the test server (`Server::start` runs 2).
const SHARDS: usize = 2;

/// A server with an admin token and these quotas.
fn start(quotas: &[Quota]) -> AuthedServer {
    AuthedServer::start(&[ADMIN], quotas)
}

fn req(c: &mut Conn, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let auth = bearer(ADMIN.token);
    let mut h = headers.to_vec();
    h.push(("Authorization", &auth));
    c.request(method, path, &h, body)
}

fn st(r: &Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.summary());
}

fn tail(c: &mut Conn, path: &str) -> u64 {
    let r = req(c, "HEAD", path, &[], b"");
    st(&r, 200, &format!("HEAD {path}"));
    r.sno().rsplit_once('_').unwrap().1.parse().unwrap()
}

/// A refusal names its quota in a JSON body; returns the body.
fn refused(r: &Response, status: u16, quota: &str, bucket: &str, what: &str) -> Value {
    st(r, status, what);
    assert_eq!(r.header("content-type"), Some("application/json"), "{what}");
    let v: Value = serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{what}: {e}: {}", r.text()));
    assert_eq!(v["error"], "quota exceeded", "{what}: {v}");
    assert_eq!(v["quota"], quota, "{what}: {v}");
    assert_eq!(v["bucket"], bucket, "{what}: {v}");
    v
}

/// `n` stream names of `bucket` owned by `shard`.
fn names_on(bucket: &str, shard: usize, n: usize, tag: &str) -> Vec<String> {
    (0..)
        .map(|i| format!("{tag}{i}"))
        .filter(|s| shard_for(&StreamKey { bucket: bucket.into(), stream: s.clone() }, SHARDS) == shard)
        .take(n)
        .collect()
}

fn listed(c: &mut Conn, bucket: &str) -> u64 {
    let r = req(c, "GET", &format!("/ds/{bucket}"), &[], b"");
    st(&r, 200, "bucket info");
    serde_json::from_slice::<Value>(&r.body).unwrap()["streams"].as_u64().unwrap()
}

#[test]
fn max_streams_counts_both_shards_and_both_surfaces_and_refuses_with_429() {
    let q = start(&[Quota { bucket: "orders", max_streams: Some(4), max_bytes: None }]);
    let mut c = q.srv.conn();
    st(&req(&mut c, "PUT", "/ds/orders", &[], b""), 201, "bucket");
    let on0 = names_on("orders", 0, 3, "a");
    let on1 = names_on("orders", 1, 3, "b");
    st(&req(&mut c, "PUT", &format!("/ds/orders/{}", on0[0]), &[OCTET], b""), 201, "shard 0");
    st(&req(&mut c, "PUT", &format!("/ds/orders/{}", on1[0]), &[OCTET], b""), 201, "shard 1");
    st(&req(&mut c, "PUT", &format!("/v1/stream/orders/{}", on0[1]), &[OCTET], b""), 201, "v1, shard 0");
    st(&req(&mut c, "PUT", &format!("/ds/orders/{}", on1[1]), &[OCTET], b"data"), 201, "shard 1 again");
    // Full: on either shard, through either surface.
    for path in [format!("/ds/orders/{}", on0[2]), format!("/v1/stream/orders/{}", on1[2])] {
        let r = req(&mut c, "PUT", &path, &[OCTET], b"never");
        let v = refused(&r, 429, "max_streams", "orders", &path);
        assert_eq!((v["limit"].as_u64(), v["used"].as_u64(), v["requested"].as_u64()), (Some(4), Some(4), Some(1)));
        st(&req(&mut c, "HEAD", &path, &[], b""), 404, "nothing was created");
    }
    // A fork is a stream too; its source keeps no reference to a refused fork.
    let source = format!("/ds/orders/{}", on1[0]);
    let fork = [OCTET, ("Stream-Forked-From", source.as_str())];
    let r = req(&mut c, "PUT", "/ds/orders/forked", &fork, b"");
    refused(&r, 429, "max_streams", "orders", "fork");
    assert_eq!(listed(&mut c, "orders"), 4);
    // Re-creating one that exists is no new stream: still 200.
    st(&req(&mut c, "PUT", &format!("/ds/orders/{}", on0[0]), &[OCTET], b""), 200, "idempotent re-create");
    // A delete gives its slot back (a hard delete: no fork holds the source).
    st(&req(&mut c, "DELETE", &source, &[], b""), 204, "delete");
    st(&req(&mut c, "GET", &format!("{source}?offset=-1"), &[], b""), 404, "gone for good, not soft-deleted");
    st(&req(&mut c, "PUT", &format!("/ds/orders/{}", on0[2]), &[OCTET], b""), 201, "room again");
    refused(&req(&mut c, "PUT", "/ds/orders/one-more", &[OCTET], b""), 429, "max_streams", "orders", "full again");
    // Other buckets are not limited.
    st(&req(&mut c, "PUT", "/ds/others", &[], b""), 201, "bucket");
    for i in 0..6 {
        st(&req(&mut c, "PUT", &format!("/ds/others/s{i}"), &[OCTET], b""), 201, "unlimited");
    }
    let m = req(&mut c, "GET", "/metrics", &[], b"").text();
    let refusals: f64 = m
        .lines()
        .filter(|l| l.starts_with("ringstream_quota_refusals_total{") && l.contains("max_streams"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum();
    assert!(refusals >= 3.0, "{m}");
}

#[test]
fn max_bytes_refuses_with_507_and_nothing_past_it_is_written() {
    let q = start(&[Quota { bucket: "capped", max_streams: None, max_bytes: Some(20) }]);
    let mut c = q.srv.conn();
    st(&req(&mut c, "PUT", "/ds/capped", &[], b""), 201, "bucket");
    let a = format!("/ds/capped/{}", names_on("capped", 0, 1, "a")[0]);
    let b = format!("/ds/capped/{}", names_on("capped", 1, 1, "b")[0]);
    st(&req(&mut c, "PUT", &a, &[OCTET], b"12345"), 201, "5 bytes on shard 0");
    st(&req(&mut c, "PUT", &b, &[OCTET], b"1234567"), 201, "7 bytes on shard 1");
    st(&req(&mut c, "POST", &a, &[OCTET], b"123"), 200, "15 in all");
    let r = req(&mut c, "POST", &b, &[OCTET], b"123456");
    let v = refused(&r, 507, "max_bytes", "capped", "21 > 20");
    assert_eq!((v["limit"].as_u64(), v["used"].as_u64(), v["requested"].as_u64()), (Some(20), Some(15), Some(6)));
    assert!(r.header("retry-after").is_none(), "retrying does not help: {}", r.summary());
    assert_eq!(tail(&mut c, &b), 7, "the refused append wrote nothing");
    let r = req(&mut c, "POST", &format!("/v1/stream/capped/{}", &b["/ds/capped/".len()..]), &[OCTET], b"123456");
    refused(&r, 507, "max_bytes", "capped", "the same through /v1");
    // A create with data counts; one without does not.
    refused(&req(&mut c, "PUT", "/ds/capped/new", &[OCTET], b"123456"), 507, "max_bytes", "capped", "create");
    st(&req(&mut c, "HEAD", "/ds/capped/new", &[], b""), 404, "the refused create made nothing");
    st(&req(&mut c, "PUT", "/ds/capped/empty", &[OCTET], b""), 201, "an empty stream takes no bytes");
    // Exactly to the limit is fine; a close takes no bytes.
    st(&req(&mut c, "POST", &b, &[OCTET], b"12345"), 200, "20 of 20");
    st(&req(&mut c, "POST", &b, &[("Stream-Closed", "true")], b""), 200, "close-only");
    refused(&req(&mut c, "POST", "/ds/capped/empty", &[OCTET], b"x"), 507, "max_bytes", "capped", "1 byte more");
    let (data, _, _) = read(&mut c, &b);
    assert_eq!(data, b"123456712345", "exactly the accepted appends");
    // A delete frees its stream's bytes.
    st(&req(&mut c, "DELETE", &b, &[], b""), 204, "delete");
    st(&req(&mut c, "POST", "/ds/capped/empty", &[OCTET], b"123456789012"), 200, "12 freed bytes reused");
    refused(&req(&mut c, "POST", &a, &[OCTET], b"1"), 507, "max_bytes", "capped", "full again");
}

fn read(c: &mut Conn, path: &str) -> (Vec<u8>, u16, String) {
    let r = req(c, "GET", &format!("{path}?offset=-1"), &[], b"");
    (r.body.clone(), r.status, r.text())
}

fn off(pos: u64) -> String {
    format!("{:016}_{pos:016}", 0)
}

#[test]
fn snapshots_count_and_trims_give_bytes_back() {
    let q = start(&[Quota { bucket: "docs", max_streams: None, max_bytes: Some(30) }]);
    let mut c = q.srv.conn();
    st(&req(&mut c, "PUT", "/ds/docs", &[], b""), 201, "bucket");
    st(&req(&mut c, "PUT", "/ds/docs/d", &[OCTET], b"0123456789"), 201, "10");
    st(&req(&mut c, "POST", "/ds/docs/d", &[OCTET], b"0123456789"), 200, "20");
    // A snapshot at 10 trims 10 bytes and holds 25: 10 + 25 = 35 > 30.
    let big = req(&mut c, "PUT", &format!("/ds/docs/d/snapshot/{}", off(10)), &[OCTET], &[b'x'; 25]);
    refused(&big, 507, "max_bytes", "docs", "snapshot past the quota");
    st(&req(&mut c, "HEAD", "/ds/docs/d", &[], b""), 200, "stream");
    assert!(req(&mut c, "HEAD", "/ds/docs/d", &[], b"").header("stream-snapshot-offset").is_none(), "not published");
    // 4 bytes at 20 trim all 20: the stream then holds 4.
    st(&req(&mut c, "PUT", &format!("/ds/docs/d/snapshot/{}", off(20)), &[OCTET], b"abcd"), 204, "snapshot");
    st(&req(&mut c, "POST", "/ds/docs/d", &[OCTET], &[b'y'; 26]), 200, "26 + 4 = 30");
    refused(&req(&mut c, "POST", "/ds/docs/d", &[OCTET], b"z"), 507, "max_bytes", "docs", "31");
}

#[test]
fn concurrent_writers_on_both_shards_never_pass_a_limit() {
    let q = start(&[
        Quota { bucket: "race", max_streams: None, max_bytes: Some(1000) },
        Quota { bucket: "many", max_streams: Some(20), max_bytes: None },
    ]);
    let mut c = q.srv.conn();
    st(&req(&mut c, "PUT", "/ds/race", &[], b""), 201, "bucket");
    st(&req(&mut c, "PUT", "/ds/many", &[], b""), 201, "bucket");
    let streams: Vec<String> = names_on("race", 0, 2, "a").into_iter().chain(names_on("race", 1, 2, "b")).collect();
    for s in &streams {
        st(&req(&mut c, "PUT", &format!("/ds/race/{s}"), &[OCTET], b""), 201, "stream");
    }
    let port = q.srv.port();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let path = format!("/ds/race/{}", streams[t % streams.len()]);
            std::thread::spawn(move || {
                let mut c = Conn::connect(port);
                let (mut ok, mut full) = (0, 0);
                for _ in 0..40 {
                    let r = req(&mut c, "POST", &path, &[OCTET], b"0123456789");
                    match r.status {
                        200 => ok += 1,
                        507 => full += 1,
                        _ => panic!("{}", r.summary()),
                    }
                }
                let mut made = 0;
                for i in 0..10 {
                    let r = req(&mut c, "PUT", &format!("/ds/many/t{t}-{i}"), &[OCTET], b"");
                    match r.status {
                        201 => made += 1,
                        429 => {}
                        _ => panic!("{}", r.summary()),
                    }
                }
                (ok, full, made)
            })
        })
        .collect();
    let results: Vec<(u64, u64, u64)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let ok: u64 = results.iter().map(|r| r.0).sum();
    let made: u64 = results.iter().map(|r| r.2).sum();
    assert_eq!(ok, 100, "exactly 1000 / 10 appends fit: {results:?}");
    let stored: u64 = streams.iter().map(|s| tail(&mut c, &format!("/ds/race/{s}"))).sum();
    assert_eq!(stored, 1000, "what the streams hold is what was acknowledged");
    assert_eq!(made, 20, "exactly max_streams creates succeed");
    assert_eq!(listed(&mut c, "many"), 20);
}

#[test]
fn usage_is_recounted_after_a_restart_and_counted_when_a_reload_adds_a_quota() {
    let mut q = start(&[]);
    let mut c = q.srv.conn();
    st(&req(&mut c, "PUT", "/ds/orders", &[], b""), 201, "bucket");
    let (a, b) = (names_on("orders", 0, 1, "a").remove(0), names_on("orders", 1, 1, "b").remove(0));
    st(&req(&mut c, "PUT", &format!("/ds/orders/{a}"), &[OCTET], &[b'a'; 30]), 201, "30 on shard 0");
    st(&req(&mut c, "PUT", &format!("/ds/orders/{b}"), &[OCTET], &[b'b'; 20]), 201, "20 on shard 1");
    st(&req(&mut c, "POST", &format!("/ds/orders/{b}"), &[OCTET], &[b'b'; 10]), 200, "60 in all");
    // A reload limits the bucket: what both shards already hold counts.
    write(&q.file, &[ADMIN], &[Quota { bucket: "orders", max_streams: Some(2), max_bytes: Some(70) }]);
    hang_up(q.srv.pid());
    eventually("the reload", || q.srv.log_tail().contains("SIGHUP: reloaded"));
    let r = req(&mut c, "PUT", "/ds/orders/third", &[OCTET], b"");
    refused(&r, 429, "max_streams", "orders", "two streams existed before the quota");
    let r = req(&mut c, "POST", &format!("/ds/orders/{a}"), &[OCTET], &[b'x'; 11]);
    let v = refused(&r, 507, "max_bytes", "orders", "60 existed before the quota");
    assert_eq!(v["used"].as_u64(), Some(60), "{v}");
    st(&req(&mut c, "POST", &format!("/ds/orders/{a}"), &[OCTET], &[b'x'; 10]), 200, "70 of 70");
    // After a restart the shards count again from what they recover.
    q.srv.restart();
    let mut c = q.srv.conn();
    refused(&req(&mut c, "POST", &format!("/ds/orders/{b}"), &[OCTET], b"1"), 507, "max_bytes", "orders", "restart");
    refused(&req(&mut c, "PUT", "/ds/orders/third", &[OCTET], b""), 429, "max_streams", "orders", "restart");
    st(&req(&mut c, "DELETE", &format!("/ds/orders/{a}"), &[], b""), 204, "delete 40");
    st(&req(&mut c, "POST", &format!("/ds/orders/{b}"), &[OCTET], &[b'y'; 40]), 200, "70 again");
    // A reload that drops the quota lifts it; one that brings it back
    // finds the count kept. (A reload is complete once it is logged: its
    // limits and tokens are set one after another.)
    let reloads = |srv: &Server| srv.log_tail().matches("SIGHUP: reloaded").count();
    write(&q.file, &[ADMIN], &[]);
    hang_up(q.srv.pid());
    eventually("the reload that lifts the quota", || reloads(&q.srv) >= 1);
    st(&req(&mut c, "PUT", "/ds/orders/third", &[OCTET], b""), 201, "3 streams, unlimited");
    st(&req(&mut c, "POST", "/ds/orders/third", &[OCTET], b"12345"), 200, "75 bytes, unlimited");
    write(&q.file, &[ADMIN], &[Quota { bucket: "orders", max_streams: None, max_bytes: Some(75) }]);
    hang_up(q.srv.pid());
    eventually("the reload that limits it again", || reloads(&q.srv) >= 2);
    refused(&req(&mut c, "POST", "/ds/orders/third", &[OCTET], b"1"), 507, "max_bytes", "orders", "the count was kept");
    st(&req(&mut c, "PUT", "/ds/orders/fourth", &[OCTET], b""), 201, "no max_streams now");
}
