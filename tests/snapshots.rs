//! Snapshots and bootstrap on /ds (snakream.md): publish / redirect / read /
//! delete with every status the spec lists, trimming (410 below the
//! snapshot), `multipart/mixed` bootstrap for JSON and byte streams,
//! durability across restarts, and reclamation of the segment files that
//! trimmed and deleted data leave behind — after which recovery must still
//! rebuild every stream exactly.

mod common;

use common::{read_from, Conn, Response, Server, ZERO_OFFSET};
use ringstream::protocol::StreamKey;
use ringstream::shard::router::{shard_for, shard_for_bucket};
use std::time::{Duration, Instant};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const OCTET: (&str, &str) = ("Content-Type", "application/octet-stream");

fn st(r: &Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.summary());
}

fn off(pos: u64) -> String {
    format!("{:016}_{pos:016}", 0)
}

/// The parts of a `multipart/mixed` body: (Content-Type, body) each.
fn parts(r: &Response) -> Vec<(String, Vec<u8>)> {
    let ct = r.must("content-type");
    let boundary = ct.strip_prefix("multipart/mixed; boundary=").unwrap_or_else(|| panic!("content type {ct}"));
    let delim = format!("--{boundary}");
    let body = &r.body;
    let find = |from: usize, pat: &[u8]| body[from..].windows(pat.len()).position(|w| w == pat).map(|p| p + from);
    let mut out = Vec::new();
    let mut at = find(0, delim.as_bytes()).expect("first boundary");
    assert_eq!(at, 0, "body starts with the boundary");
    loop {
        at += delim.len();
        if body[at..].starts_with(b"--") {
            assert_eq!(&body[at..], b"--\r\n", "nothing after the close delimiter");
            return out;
        }
        assert!(body[at..].starts_with(b"\r\n"));
        let head_end = find(at, b"\r\n\r\n").expect("part head");
        let head = String::from_utf8(body[at + 2..head_end].to_vec()).unwrap();
        let ctype = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Type: "))
            .unwrap_or_else(|| panic!("part without Content-Type: {head:?}"))
            .to_string();
        let next = find(head_end + 4, format!("\r\n{delim}").as_bytes()).expect("next boundary");
        out.push((ctype, body[head_end + 4..next].to_vec()));
        at = next + 2;
    }
}

fn create_json_stream(c: &mut Conn, bucket: &str, stream: &str) -> String {
    st(&c.request("PUT", &format!("/ds/{bucket}"), &[], b""), 201, "create bucket");
    let path = format!("/ds/{bucket}/{stream}");
    st(&c.request("PUT", &path, &[JSON], b""), 201, "create stream");
    path
}

#[test]
fn publish_read_delete_and_every_status() {
    let srv = Server::start();
    let mut c = srv.conn();
    let s = create_json_stream(&mut c, "snapb", "doc");
    let mut ends = Vec::new();
    for i in 0..4 {
        let r = c.request("POST", &s, &[JSON], format!(r#"[{{"op":{i}}},{{"op":{i},"b":true}}]"#).as_bytes());
        st(&r, 200, "append");
        ends.push(r.sno());
    }
    let snap = |o: &str| format!("{s}/snapshot/{o}");

    st(&c.request("GET", &format!("{s}/snapshot"), &[], b""), 404, "no snapshot yet");
    st(&c.request("PUT", &snap("nonsense"), &[], b"x"), 400, "bad offset");
    st(&c.request("PUT", &snap(&off(3)), &[], b"x"), 400, "not a message boundary");
    st(&c.request("PUT", &snap(&off(10_000)), &[], b"x"), 409, "past the tail");
    st(&c.request("PUT", "/ds/snapb/nope/snapshot/", &[], b"x"), 400, "empty offset");
    st(&c.request("PUT", &format!("/ds/snapb/nope/snapshot/{}", ends[0]), &[], b"x"), 404, "missing stream");
    st(&c.request("PUT", &format!("/ds/nobucket/doc/snapshot/{}", ends[0]), &[], b"x"), 404, "missing bucket");
    st(&c.request("POST", &snap(&ends[0]), &[], b"x"), 405, "POST on a snapshot");
    let head = c.request("HEAD", &s, &[], b"");
    assert_eq!(head.header("stream-snapshot-offset"), None, "HEAD before any snapshot");

    // Publish at the end of the second append.
    let r = c.request("PUT", &snap(&ends[1]), &[("Content-Type", "application/x-crdt")], b"STATE-1");
    st(&r, 204, "publish");
    assert_eq!(r.sno(), ends[3], "SNO is the stream's tail");
    assert_eq!(r.header("stream-snapshot-offset"), Some(ends[1].as_str()));
    assert!(r.header("etag").is_some());

    let r = c.request("GET", &format!("{s}/snapshot"), &[], b"");
    st(&r, 307, "latest snapshot");
    assert!(r.must("location").ends_with(&snap(&ends[1])), "{}", r.summary());

    let r = c.request("GET", &snap(&ends[1]), &[], b"");
    st(&r, 200, "read snapshot");
    assert_eq!(r.body, b"STATE-1");
    assert_eq!(r.header("content-type"), Some("application/x-crdt"));
    assert_eq!(r.header("stream-snapshot-offset"), Some(ends[1].as_str()));
    assert_eq!(r.sno(), ends[3]);
    assert_eq!(r.header("stream-up-to-date"), None, "messages follow the snapshot");
    st(&c.request("GET", &snap(&ends[0]), &[], b""), 404, "no snapshot at that offset");
    assert_eq!(c.request("HEAD", &s, &[], b"").header("stream-snapshot-offset"), Some(ends[1].as_str()));

    // Trimmed: reads below the snapshot are gone, from it they work.
    for from in ["-1", ZERO_OFFSET, ends[0].as_str()] {
        st(&c.request("GET", &format!("{s}?offset={from}"), &[], b""), 410, &format!("read from {from}"));
    }
    let (body, _, _) = read_from(&mut c, &s, &ends[1]);
    assert_eq!(String::from_utf8(body).unwrap(), r#"[{"op":2},{"op":2,"b":true},{"op":3},{"op":3,"b":true}]"#);
    st(&c.request("PUT", &snap(&ends[0]), &[], b"old"), 409, "older than the current snapshot");

    // A newer one; the older can then be deleted, the current never.
    st(&c.request("PUT", &snap(&ends[2]), &[], b"STATE-2"), 204, "publish newer");
    st(&c.request("DELETE", &snap(&ends[2]), &[], b""), 409, "delete the current snapshot");
    st(&c.request("DELETE", &snap(&ends[1]), &[], b""), 204, "delete an older snapshot");
    st(&c.request("DELETE", &snap(&ends[1]), &[], b""), 404, "delete it again");
    st(&c.request("GET", &snap(&ends[1]), &[], b""), 404, "deleted snapshot");
    // Republishing at the current offset replaces the blob.
    st(&c.request("PUT", &snap(&ends[2]), &[], b"STATE-2b"), 204, "republish");
    assert_eq!(c.request("GET", &snap(&ends[2]), &[], b"").body, b"STATE-2b");

    // Bootstrap: the snapshot, then each message after it as its own part.
    let r = c.request("GET", &format!("{s}/bootstrap"), &[], b"");
    st(&r, 200, "bootstrap");
    assert_eq!(r.header("stream-snapshot-offset"), Some(ends[2].as_str()));
    assert_eq!(r.sno(), ends[3]);
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    assert_eq!(r.header("stream-closed"), None);
    let p = parts(&r);
    assert_eq!(p.len(), 3, "{p:?}");
    assert_eq!(p[0], ("application/octet-stream".to_string(), b"STATE-2b".to_vec()));
    assert_eq!(p[1], ("application/json".to_string(), br#"{"op":3}"#.to_vec()));
    assert_eq!(p[2], ("application/json".to_string(), br#"{"op":3,"b":true}"#.to_vec()));
    st(&c.request("GET", &format!("{s}/bootstrap?live=long-poll"), &[], b""), 400, "live bootstrap");
    st(&c.request("PUT", &format!("{s}/bootstrap"), &[], b""), 405, "PUT bootstrap");
    st(&c.request("GET", &format!("{s}/other"), &[], b""), 404, "unknown sub-resource");

    // A snapshot at the tail of a closed stream: bootstrap says so.
    let r = c.request("POST", &s, &[("Stream-Closed", "true")], b"");
    st(&r, 200, "close");
    let tail = r.sno();
    st(&c.request("PUT", &snap(&tail), &[], b"FINAL"), 204, "snapshot of a closed stream");
    let r = c.request("GET", &format!("{s}/bootstrap"), &[], b"");
    assert_eq!(r.header("stream-closed"), Some("true"), "{}", r.summary());
    assert_eq!(parts(&r).len(), 1);
    let r = c.request("GET", &snap(&tail), &[], b"");
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    assert_eq!(r.header("stream-closed"), Some("true"));
}

#[test]
fn bootstrap_of_byte_streams_and_without_snapshot() {
    let srv = Server::start();
    let mut c = srv.conn();
    st(&c.request("PUT", "/ds/bytesb", &[], b""), 201, "bucket");
    let s = "/ds/bytesb/raw";
    st(&c.request("PUT", s, &[("Content-Type", "text/plain")], b""), 201, "create");
    let r = c.request("GET", &format!("{s}/bootstrap"), &[], b"");
    st(&r, 200, "empty bootstrap");
    assert_eq!(r.header("stream-snapshot-offset"), Some("-1"));
    assert_eq!(r.sno(), ZERO_OFFSET);
    assert_eq!(parts(&r), vec![("application/octet-stream".to_string(), Vec::new())]);
    // A part body that contains what looks like a boundary.
    let tricky = format!("line\r\n--{}\r\n", "ringstream-");
    for body in ["alpha", tricky.as_str(), "gamma"] {
        st(&c.request("POST", s, &[("Content-Type", "text/plain")], body.as_bytes()), 200, "append");
    }
    let r = c.request("GET", &format!("{s}/bootstrap"), &[], b"");
    let p = parts(&r);
    let bodies: Vec<&[u8]> = p.iter().map(|(_, b)| b.as_slice()).collect();
    assert_eq!(bodies, vec![&b""[..], b"alpha", tricky.as_bytes(), b"gamma"]);
    assert!(p[1..].iter().all(|(t, _)| t == "text/plain"));
    // /v1 sees the same stream, without the /ds-only sub-resources.
    st(&c.request("GET", "/v1/stream/bytesb/raw/bootstrap", &[], b""), 404, "/v1 has no bootstrap");
}

fn segment_files(srv: &Server, shard: usize) -> usize {
    std::fs::read_dir(srv.data_dir().join(format!("shard-{shard}")))
        .expect("shard dir")
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".seg"))
        .count()
}

fn metric(srv: &Server, name: &str) -> f64 {
    srv.metrics().iter().filter(|(k, _)| k.starts_with(name)).map(|(_, v)| v).sum()
}

/// Waits until the reclaim pass deleted some segments (it runs every second).
fn wait_reclaimed(srv: &Server, at_least: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = metric(srv, "ringstream_segments_reclaimed_total");
        if n >= at_least {
            return n;
        }
        assert!(Instant::now() < deadline, "no segment reclaimed after 20 s ({n})");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn payload(i: usize) -> Vec<u8> {
    format!("{i:06}:").bytes().chain(std::iter::repeat_n(b'a' + (i % 26) as u8, 1017)).collect()
}

/// Many segments of one stream's data, trimmed by a snapshot in the middle:
/// the segments before it are deleted although they also held other streams'
/// creates, a bucket, a close and a deleted stream — which are re-logged or no
/// longer needed. After a restart (twice), every stream is exactly as before.
#[test]
fn trimmed_segments_are_reclaimed_and_recovery_rebuilds_every_stream() {
    reclaim_scenario(true);
}

/// As above, but a stream keeps data in the first segment: the segments in
/// the middle go, the first stays, and recovery meets the trimmed stream's
/// create record followed by a gap that its snapshot record explains.
#[test]
fn middle_segments_are_reclaimed_around_a_pinned_one() {
    reclaim_scenario(false);
}

fn reclaim_scenario(delete_quiet: bool) {
    let mut srv = Server::start_with(&["--segment-bytes", "65536"]);
    let mut c = srv.conn();
    // Everything on one shard, so that its records share segments.
    let bucket = (0..).map(|i| format!("reclaim{i}")).find(|b| shard_for_bucket(b, 2) == 0).unwrap();
    let name = |base: &str| {
        (0..)
            .map(|i| format!("{base}{i}"))
            .find(|s| shard_for(&StreamKey { bucket: bucket.clone(), stream: s.clone() }, 2) == 0)
            .map(|s| format!("/ds/{bucket}/{s}"))
            .unwrap()
    };
    let (big, quiet, closed, gone) = (&name("big"), &name("quiet"), &name("closed"), &name("gone"));
    st(&c.request("PUT", &format!("/ds/{bucket}"), &[], b""), 201, "bucket");
    st(&c.request("PUT", big, &[OCTET], b""), 201, "create big");
    st(&c.request("PUT", quiet, &[OCTET], b"early"), 201, "create quiet");
    st(&c.request("PUT", closed, &[OCTET], b""), 201, "create closed");
    st(&c.request("POST", closed, &[("Stream-Closed", "true")], b""), 200, "close");
    st(&c.request("PUT", gone, &[OCTET], b"bye"), 201, "create gone");
    st(&c.request("DELETE", gone, &[], b""), 204, "delete gone");
    let producer = |seq: usize| {
        [
            OCTET,
            ("Producer-Id", "writer"),
            ("Producer-Epoch", "1"),
            ("Producer-Seq", Box::leak(seq.to_string().into_boxed_str()) as &str),
        ]
    };
    let mut ends = Vec::new();
    for i in 0..400 {
        let r = c.request("POST", big, &producer(i), &payload(i));
        st(&r, 200, "append");
        ends.push(r.sno());
    }
    let before = segment_files(&srv, 0);
    assert!(before >= 6, "400 KiB in 64 KiB segments: {before} files");

    // "quiet" keeps its early data: the first segment must stay.
    st(&c.request("PUT", &format!("{big}/snapshot/{}", ends[299]), &[], b"S@300"), 204, "snapshot");
    // The data of "quiet" pins segment 0; deleted, the whole prefix can go.
    if delete_quiet {
        st(&c.request("DELETE", quiet, &[], b""), 204, "delete quiet");
    }
    wait_reclaimed(&srv, 1.0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while segment_files(&srv, 0) > 3 + !delete_quiet as usize {
        assert!(Instant::now() < deadline, "still {} segment files (had {before})", segment_files(&srv, 0));
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = segment_files(&srv, 0);

    let expected: Vec<u8> = (300..400).flat_map(payload).collect();
    let check = |c: &mut Conn, round: &str| {
        let (body, tail, _) = read_from(c, big, &ends[299]);
        assert_eq!(tail, ends[399], "{round}: tail");
        assert!(body == expected, "{round}: data after the snapshot differs ({} bytes)", body.len());
        st(&c.request("GET", &format!("{big}?offset={}", ends[298]), &[], b""), 410, round);
        assert_eq!(c.request("GET", &format!("{big}/snapshot/{}", ends[299]), &[], b"").body, b"S@300", "{round}");
        let r = c.request("HEAD", closed, &[], b"");
        st(&r, 200, round);
        assert_eq!(r.header("stream-closed"), Some("true"), "{round}: closed stays closed");
        st(&c.request("HEAD", gone, &[], b""), 404, &format!("{round}: gone stays gone"));
        if delete_quiet {
            st(&c.request("HEAD", quiet, &[], b""), 404, &format!("{round}: quiet stays gone"));
        } else {
            assert_eq!(c.request("GET", quiet, &[], b"").body, b"early", "{round}: quiet keeps its data");
        }
        st(&c.request("GET", &format!("/ds/{bucket}"), &[], b""), 200, &format!("{round}: bucket"));
        // Producer state survived: a retry is a duplicate, a gap is refused.
        let r = c.request("POST", big, &producer(399), &payload(399));
        st(&r, 200, &format!("{round}: duplicate"));
        assert_eq!(r.sno(), ends[399], "{round}: a duplicate writes nothing");
        st(&c.request("POST", big, &producer(401), b"x"), 409, &format!("{round}: sequence gap"));
    };
    check(&mut c, "live");
    srv.restart();
    let mut c = srv.conn();
    check(&mut c, "after restart");
    // The trimmed stream keeps working, then is trimmed again at its tail.
    let r = c.request("POST", big, &producer(400), &payload(400));
    st(&r, 200, "append after restart");
    let tail = r.sno();
    st(&c.request("PUT", &format!("{big}/snapshot/{tail}"), &[], b"S@401"), 204, "second snapshot");
    srv.restart();
    let mut c = srv.conn();
    let r = c.request("GET", &format!("{big}/bootstrap"), &[], b"");
    st(&r, 200, "bootstrap after second restart");
    assert_eq!(parts(&r), vec![("application/octet-stream".to_string(), b"S@401".to_vec())]);
    assert_eq!(r.sno(), tail);
    assert_eq!(r.header("stream-snapshot-offset"), Some(tail.as_str()));
    // The older snapshot is still listed and readable until deleted.
    assert_eq!(c.request("GET", &format!("{big}/snapshot/{}", ends[299]), &[], b"").body, b"S@300");
    eprintln!("segment files: {before} before, {after} after reclamation");
}
