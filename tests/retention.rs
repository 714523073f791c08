//! Explicit retention on /ds (issue 35): `PUT .../retention/{offset}` moves
//! a stream's retained start forward, over the real binary. Reads below it
//! answer 410 naming it, `-1` starts at it, it never moves back, it lands
//! on an append's start, it survives restarts, it leaves forks their data,
//! it agrees with snapshots, and the segments it frees are deleted.

mod common;

use common::{read_all, read_from, Conn, Response, Server, ZERO_OFFSET};
use ringstream::protocol::StreamKey;
use ringstream::shard::router::shard_for;
use std::time::{Duration, Instant};

const TEXT: (&str, &str) = ("Content-Type", "text/plain");
const JSON: (&str, &str) = ("Content-Type", "application/json");

fn st(r: &Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.summary());
}

fn off(pos: u64) -> String {
    format!("{:016}_{pos:016}", 0)
}

/// `PUT {stream}/retention/{offset}`.
fn retain(c: &mut Conn, stream: &str, offset: &str) -> Response {
    c.request("PUT", &format!("{stream}/retention/{offset}"), &[], b"")
}

/// Asserts a 204 retention answer naming `want` as the retained start.
fn retained_at(r: &Response, want: &str, what: &str) {
    st(r, 204, what);
    assert_eq!(r.header("stream-retained-offset"), Some(want), "{what}: {}", r.summary());
}

/// Asserts that reading from `from` is gone, and that the 410 says where
/// the retained data starts.
fn gone_below(c: &mut Conn, stream: &str, from: &str, retained: &str) {
    let r = c.request("GET", &format!("{stream}?offset={from}"), &[], b"");
    st(&r, 410, &format!("read {stream} from {from}"));
    assert_eq!(r.header("stream-retained-offset"), Some(retained), "410 from {from}");
}

/// A bucket and a stream of `content_type` in it with `appends` appended;
/// returns the stream's path and the tail after each append.
fn stream_with(c: &mut Conn, bucket: &str, ct: (&str, &str), appends: &[&[u8]]) -> (String, Vec<String>) {
    st(&c.request("PUT", &format!("/ds/{bucket}"), &[], b""), 201, "bucket");
    let path = format!("/ds/{bucket}/s");
    st(&c.request("PUT", &path, &[ct], b""), 201, "stream");
    let ends = appends.iter().map(|body| c.request("POST", &path, &[ct], body).sno()).collect();
    (path, ends)
}

#[test]
fn reads_below_are_gone_and_a_read_from_the_start_begins_at_the_retained_start() {
    let srv = Server::start();
    let mut c = srv.conn();
    let (s, ends) = stream_with(&mut c, "retb", TEXT, &[b"one,", b"two,", b"three"]);
    assert_eq!(c.request("HEAD", &s, &[], b"").header("stream-retained-offset"), None, "nothing retained away yet");
    st(&retain(&mut c, "/ds/retb/nope", &ends[0]), 404, "missing stream");
    st(&retain(&mut c, &s, "yesterday"), 400, "malformed offset");
    st(&c.request("GET", &format!("{s}/retention/{}", ends[0]), &[], b""), 405, "GET of a retention");

    let r = retain(&mut c, &s, &ends[0]);
    retained_at(&r, &ends[0], "retain after the first append");
    assert_eq!(r.sno(), ends[2], "Stream-Next-Offset is the tail");
    assert!(r.header("etag").is_some() && r.header("stream-incarnation").is_some(), "{}", r.summary());

    gone_below(&mut c, &s, ZERO_OFFSET, &ends[0]);
    gone_below(&mut c, &s, &off(3), &ends[0]);
    gone_below(&mut c, "/v1/stream/retb/s", ZERO_OFFSET, &ends[0]);
    assert_eq!(read_from(&mut c, &s, &ends[0]).0, b"two,three", "at the retained start");
    assert_eq!(read_from(&mut c, &s, &ends[1]).0, b"three", "above it");
    assert_eq!(read_all(&mut c, &s).0, b"two,three", "-1 starts at it");
    assert_eq!(read_all(&mut c, "/v1/stream/retb/s").0, b"two,three", "on /v1 too");
    let head = c.request("HEAD", &s, &[], b"");
    assert_eq!(head.header("stream-retained-offset"), Some(ends[0].as_str()));
    assert_eq!(head.header("stream-snapshot-offset"), None);

    retained_at(&retain(&mut c, &s, ZERO_OFFSET), &ends[0], "a lower offset: the current start");
    retained_at(&retain(&mut c, &s, &ends[0]), &ends[0], "the same offset");
    st(&retain(&mut c, &s, &off(99)), 409, "past the tail");
    retained_at(&retain(&mut c, &s, &off(10)), &ends[1], "inside an append: its start");
    retained_at(&retain(&mut c, &s, &ends[2]), &ends[2], "up to the tail");
    let r = c.request("GET", &format!("{s}?offset=-1"), &[], b"");
    assert_eq!((r.status, r.body.as_slice(), r.sno()), (204, &b""[..], ends[2].clone()), "empty at the tail");
    let r = c.request("POST", &s, &[TEXT], b"four");
    st(&r, 200, "appends go on");
    assert_eq!(read_all(&mut c, &s).0, b"four");
}

#[test]
fn a_json_stream_keeps_whole_messages() {
    let srv = Server::start();
    let mut c = srv.conn();
    let appends: [&[u8]; 3] = [br#"[{"n":1},{"n":2}]"#, br#"[{"n":3},{"n":4}]"#, br#"{"n":5}"#];
    let (s, ends) = stream_with(&mut c, "retjson", JSON, &appends);
    // Inside the second append, between its two messages: the append stays whole.
    let inside = off(ends[0][17..].parse::<u64>().unwrap() + 3);
    retained_at(&retain(&mut c, &s, &inside), &ends[0], "inside the second append");
    let (body, _, _) = read_all(&mut c, &s);
    let got: serde_json::Value = serde_json::from_slice(&body).expect("a JSON array");
    assert_eq!(got, serde_json::json!([{"n":3},{"n":4},{"n":5}]));
    let r = c.request("GET", &format!("{s}/bootstrap"), &[], b"");
    st(&r, 200, "bootstrap of a retained stream");
    assert_eq!(r.header("stream-snapshot-offset"), Some("-1"), "no snapshot");
    assert!(!String::from_utf8_lossy(&r.body).contains(r#"{"n":2}"#), "nothing below the retained start");
}

#[test]
fn the_retained_start_survives_restarts() {
    let mut srv = Server::start();
    let mut c = srv.conn();
    let (s, ends) = stream_with(&mut c, "retrestart", TEXT, &[b"old", b"new", b"newer"]);
    retained_at(&retain(&mut c, &s, &ends[1]), &ends[1], "retain");
    for round in ["first restart", "second restart"] {
        srv.restart();
        let mut c = srv.conn();
        gone_below(&mut c, &s, &ends[0], &ends[1]);
        assert_eq!(read_all(&mut c, &s).0, b"newer", "{round}");
        let head = c.request("HEAD", &s, &[], b"");
        assert_eq!(head.header("stream-retained-offset"), Some(ends[1].as_str()), "{round}");
        retained_at(&retain(&mut c, &s, &ends[0]), &ends[1], &format!("{round}: never back"));
    }
}

#[test]
fn forks_keep_what_they_inherited() {
    let srv = Server::start();
    let mut c = srv.conn();
    let (src, ends) = stream_with(&mut c, "retfork", TEXT, &[b"a1,", b"a2,", b"a3"]);
    let fork = "/ds/retfork/f";
    let from = [TEXT, ("Stream-Forked-From", src.as_str()), ("Stream-Fork-Offset", ends[1].as_str())];
    st(&c.request("PUT", fork, &from, b""), 201, "fork at the second append");
    st(&c.request("POST", fork, &[TEXT], b"f3"), 200, "the fork's own append");

    // The source drops everything, its tail included; the fork loses nothing.
    retained_at(&retain(&mut c, &src, &ends[2]), &ends[2], "retain the source to its tail");
    assert_eq!(read_all(&mut c, fork).0, b"a1,a2,f3", "the fork reads what it inherited");
    let again = [TEXT, ("Stream-Forked-From", src.as_str())];
    st(&c.request("PUT", "/ds/retfork/g", &again, b""), 410, "a source without its start cannot be forked");

    // The fork has a retained start of its own; what it inherited is one
    // append to it (its create record).
    retained_at(&retain(&mut c, fork, &ends[0]), ZERO_OFFSET, "inside what the fork inherited");
    retained_at(&retain(&mut c, fork, &ends[1]), &ends[1], "retain the fork");
    assert_eq!(read_all(&mut c, fork).0, b"f3");
    st(&c.request("DELETE", &src, &[], b""), 204, "delete the source");
    assert_eq!(read_all(&mut c, fork).0, b"f3", "the fork outlives its source");
}

#[test]
fn retention_and_snapshots_share_one_boundary() {
    let srv = Server::start();
    let mut c = srv.conn();
    let (s, ends) = stream_with(&mut c, "retsnap", TEXT, &[b"m1,", b"m2,", b"m3,", b"m4"]);
    let snap = |o: &str| format!("{s}/snapshot/{o}");
    retained_at(&retain(&mut c, &s, &ends[0]), &ends[0], "retain first");
    st(&c.request("PUT", &snap(ZERO_OFFSET), &[], b"S0"), 410, "a snapshot below the retained start");
    st(&c.request("PUT", &snap(&ends[1]), &[], b"S2"), 204, "a snapshot above it");

    // The snapshot now stands for the data before it: -1 is gone, the bootstrap is the way in.
    let head = c.request("HEAD", &s, &[], b"");
    assert_eq!(head.header("stream-retained-offset"), Some(ends[1].as_str()), "the snapshot's trim");
    assert_eq!(head.header("stream-snapshot-offset"), Some(ends[1].as_str()));
    gone_below(&mut c, &s, "-1", &ends[1]);
    gone_below(&mut c, &s, &ends[0], &ends[1]);
    retained_at(&retain(&mut c, &s, &ends[0]), &ends[1], "below the snapshot: the current start");
    retained_at(&retain(&mut c, &s, &ends[1]), &ends[1], "at the snapshot");
    st(&retain(&mut c, &s, &ends[2]), 409, "past the current snapshot");
    let r = c.request("GET", &format!("{s}/bootstrap"), &[], b"");
    assert!(String::from_utf8_lossy(&r.body).contains("m3,"), "the bootstrap is whole: {}", r.summary());

    // A newer snapshot lets retention go on up to it.
    st(&c.request("PUT", &snap(&ends[2]), &[], b"S3"), 204, "a newer snapshot");
    retained_at(&retain(&mut c, &s, &ends[2]), &ends[2], "up to the newer snapshot");
    assert_eq!(c.request("GET", &snap(&ends[1]), &[], b"").body, b"S2", "older snapshots stay until deleted");
}

fn segment_files(srv: &Server) -> usize {
    let dir = srv.data_dir().join("shard-0");
    let files = std::fs::read_dir(dir).expect("shard dir");
    files.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".seg")).count()
}

/// A path of bucket `bucket` whose stream lives on shard 0 (of 2).
fn on_shard_zero(bucket: &str) -> String {
    let name = (0..)
        .map(|i| format!("big{i}"))
        .find(|s| shard_for(&StreamKey { bucket: bucket.into(), stream: s.clone() }, 2) == 0)
        .unwrap();
    format!("/ds/{bucket}/{name}")
}

#[test]
fn segments_holding_only_retained_away_data_are_deleted() {
    let mut srv = Server::start_with(&["--segment-bytes", "65536"]);
    let mut c = srv.conn();
    st(&c.request("PUT", "/ds/retspace", &[], b""), 201, "bucket");
    let s = on_shard_zero("retspace");
    st(&c.request("PUT", &s, &[TEXT], b""), 201, "stream");
    let payload = |i: usize| format!("{i:05}{}", "x".repeat(1019)).into_bytes();
    let ends: Vec<String> = (0..400).map(|i| c.request("POST", &s, &[TEXT], &payload(i)).sno()).collect();
    let before = segment_files(&srv);
    assert!(before >= 6, "400 KiB in 64 KiB segments: {before} files");

    retained_at(&retain(&mut c, &s, &ends[299]), &ends[299], "retain the last hundred");
    let deadline = Instant::now() + Duration::from_secs(20);
    while segment_files(&srv) > 3 {
        assert!(Instant::now() < deadline, "still {} segment files (had {before})", segment_files(&srv));
        std::thread::sleep(Duration::from_millis(100));
    }
    let expected: Vec<u8> = (300..400).flat_map(payload).collect();
    assert!(read_all(&mut c, &s).0 == expected, "the retained data is whole");
    srv.restart();
    let mut c = srv.conn();
    assert!(read_all(&mut c, &s).0 == expected, "and after a restart");
    gone_below(&mut c, &s, &ends[298], &ends[299]);
    eprintln!("segment files: {before} before retention, {} after", segment_files(&srv));
}
