//! Restart recovery: build up state on both surfaces (plain, closed, JSON,
//! producer, deleted and re-created streams, buckets), with segments small
//! enough (64 KiB) that ~300 KiB of appends rolls over several of them,
//! SIGKILL the server, start it again on the same data directory, and check
//! that everything reads back exactly: content, offsets, content type,
//! closed state, deletions, buckets and producer state. Then append more and
//! do it once more, so recovered data is itself recovered.

mod common;

use common::{read_all, read_from, squash_json, Conn, Response, Server, ZERO_OFFSET};

const OCTET: (&str, &str) = ("Content-Type", "application/octet-stream");
const TEXT: (&str, &str) = ("Content-Type", "text/plain");
const JSON: (&str, &str) = ("Content-Type", "application/json");

fn ok(r: &Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.summary());
}

/// Deterministic bytes that differ per (stream, append).
fn chunk(stream: usize, n: usize, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ ((stream as u64) << 32) ^ n as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// What a stream must look like after a restart.
struct Expect {
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
    closed: bool,
    /// Offsets returned by earlier appends, with the body length before them:
    /// a read from there must return exactly the rest.
    marks: Vec<(String, usize)>,
    json: bool,
}

impl Expect {
    fn new(path: &str, content_type: &'static str) -> Expect {
        Expect {
            path: path.to_string(),
            content_type,
            body: Vec::new(),
            closed: false,
            marks: Vec::new(),
            json: content_type == "application/json",
        }
    }

    fn append(&mut self, c: &mut Conn, data: &[u8]) {
        let r = c.request("POST", &self.path, &[("Content-Type", self.content_type)], data);
        assert!(r.status == 200 || r.status == 204, "POST {}: {}", self.path, r.summary());
        self.body.extend_from_slice(data);
        self.marks.push((r.sno(), self.body.len()));
    }

    fn check(&self, c: &mut Conn, when: &str) {
        let p = &self.path;
        let h = c.request("HEAD", p, &[], b"");
        ok(&h, 200, &format!("{when}: HEAD {p}"));
        assert_eq!(h.header("content-type"), Some(self.content_type), "{when}: content type of {p}");
        assert_eq!(
            h.header("stream-closed") == Some("true"),
            self.closed,
            "{when}: closed state of {p}: {}",
            h.summary()
        );
        let (body, tail, last) = read_all(c, p);
        assert_eq!(h.sno(), tail, "{when}: HEAD and GET agree on the tail of {p}");
        if self.json {
            assert_eq!(
                squash_json(&String::from_utf8_lossy(&body)),
                String::from_utf8_lossy(&self.body),
                "{when}: JSON content of {p}"
            );
        } else {
            assert!(
                body == self.body,
                "{when}: content of {p}: {} bytes, expected {} bytes; first difference at {:?}",
                body.len(),
                self.body.len(),
                first_diff(&body, &self.body)
            );
        }
        assert_eq!(
            last.header("stream-closed") == Some("true"),
            self.closed,
            "{when}: Stream-Closed on the last read of {p}"
        );
        if let Some((sno, _)) = self.marks.last() {
            assert_eq!(&tail, sno, "{when}: the tail of {p} is the offset of its last append");
        }
        if !self.json {
            for (sno, len) in &self.marks {
                let (rest, _, _) = read_from(c, p, sno);
                assert!(
                    rest == self.body[*len..],
                    "{when}: {p} read from {sno} must return the last {} bytes, got {}",
                    self.body.len() - len,
                    rest.len()
                );
            }
        }
    }
}

/// Segment files (`*.seg`) under the data directory's shard directories.
fn segment_files(srv: &Server) -> usize {
    let mut n = 0;
    for shard in std::fs::read_dir(srv.data_dir()).expect("reading the data dir").flatten() {
        if shard.path().is_dir() {
            for f in std::fs::read_dir(shard.path()).expect("reading a shard dir").flatten() {
                if f.path().extension().is_some_and(|e| e == "seg") {
                    n += 1;
                }
            }
        }
    }
    eprintln!("{n} segment files in {}", srv.data_dir().display());
    n
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or(if a.len() != b.len() { Some(a.len().min(b.len())) } else { None })
}

fn producer<'a>(ct: &'a str, id: &'a str, epoch: &'a str, seq: &'a str) -> [(&'a str, &'a str); 4] {
    [("Content-Type", ct), ("Producer-Id", id), ("Producer-Epoch", epoch), ("Producer-Seq", seq)]
}

#[test]
fn restart_recovers_everything() {
    let mut srv = Server::start_with(&["--segment-bytes", "65536"]);
    let mut c = srv.conn();
    let mut all: Vec<Expect> = Vec::new();

    // Buckets: one kept, one created and deleted.
    ok(&c.request("PUT", "/ds/keep-bucket", &[], b""), 201, "PUT bucket");
    ok(&c.request("PUT", "/ds/gone-bucket", &[], b""), 201, "PUT bucket");
    ok(&c.request("DELETE", "/ds/gone-bucket", &[], b""), 204, "DELETE bucket");

    // Large binary streams: 3 x 25 x 4 KiB = 300 KiB, several 64 KiB segments.
    for s in 0..3 {
        let path = if s == 2 { "/ds/keep-bucket/big".to_string() } else { format!("/v1/stream/r/big{s}") };
        let mut e = Expect::new(&path, "application/octet-stream");
        let r = c.request("PUT", &path, &[OCTET], b"");
        ok(&r, 201, "PUT big");
        for n in 0..25 {
            e.append(&mut c, &chunk(s, n, 4096 - 7 * n));
        }
        all.push(e);
    }

    // Closed text stream, created with a body, then appended and closed.
    let mut e = Expect::new("/v1/stream/r/closed", "text/plain");
    let r = c.request("PUT", &e.path, &[TEXT], b"first;");
    ok(&r, 201, "PUT closed");
    e.body.extend_from_slice(b"first;");
    e.marks.push((r.sno(), e.body.len()));
    e.append(&mut c, b"second;");
    let r = c.request("POST", &e.path, &[TEXT, ("Stream-Closed", "true")], b"last");
    ok(&r, 204, "append-and-close");
    e.body.extend_from_slice(b"last");
    e.marks.push((r.sno(), e.body.len()));
    e.closed = true;
    all.push(e);

    // A stream created closed and empty.
    let mut e = Expect::new("/ds/keep-bucket/born-closed", "text/plain");
    ok(&c.request("PUT", &e.path, &[TEXT, ("Stream-Closed", "true")], b""), 201, "PUT closed empty");
    e.closed = true;
    all.push(e);

    // JSON streams on both surfaces, one closed.
    for (path, close) in [("/v1/stream/r/json", false), ("/ds/keep-bucket/json", true)] {
        let mut e = Expect::new(path, "application/json");
        ok(&c.request("PUT", path, &[JSON], b""), 201, "PUT json");
        for m in [&b"[1, 2]"[..], b"{\"k\": \"v w\"}", b"[[3], \"four\"]"] {
            let r = c.request("POST", path, &[JSON], m);
            assert!(r.status / 100 == 2, "POST json: {}", r.summary());
        }
        e.body = br#"[1,2,{"k":"v w"},[3],"four"]"#.to_vec();
        if close {
            // Close-only: 200 on /ds, 204 on /v1.
            ok(
                &c.request("POST", path, &[("Stream-Closed", "true")], b""),
                if path.starts_with("/ds/") { 200 } else { 204 },
                "close json",
            );
            e.closed = true;
        }
        all.push(e);
    }

    // Producer streams: /v1 (epoch 2, seqs 0..=4) and /ds (epoch 0, seqs 0..=2).
    let mut pv = Expect::new("/v1/stream/r/producer", "text/plain");
    ok(&c.request("PUT", &pv.path, &[TEXT], b""), 201, "PUT producer stream");
    let r = c.request("POST", &pv.path, &producer("text/plain", "p1", "1", "0"), b"e1;");
    ok(&r, 200, "producer epoch 1");
    pv.body.extend_from_slice(b"e1;");
    for seq in 0..5 {
        let s = seq.to_string();
        let data = format!("p{seq};");
        let r = c.request("POST", &pv.path, &producer("text/plain", "p1", "2", &s), data.as_bytes());
        ok(&r, 200, "producer append");
        pv.body.extend_from_slice(data.as_bytes());
        pv.marks.push((r.sno(), pv.body.len()));
    }
    let mut pd = Expect::new("/ds/keep-bucket/producer", "text/plain");
    ok(&c.request("PUT", &pd.path, &[TEXT], b""), 201, "PUT /ds producer stream");
    for seq in 0..3 {
        let s = seq.to_string();
        let data = format!("d{seq};");
        let r = c.request("POST", &pd.path, &producer("text/plain", "w", "0", &s), data.as_bytes());
        ok(&r, 200, "/ds producer append");
        pd.body.extend_from_slice(data.as_bytes());
        pd.marks.push((r.sno(), pd.body.len()));
    }

    // Deleted, and deleted then re-created with another type.
    ok(&c.request("PUT", "/v1/stream/r/deleted", &[TEXT], b"doomed"), 201, "PUT deleted");
    ok(&c.request("DELETE", "/v1/stream/r/deleted", &[], b""), 204, "DELETE");
    ok(&c.request("PUT", "/ds/keep-bucket/deleted", &[TEXT], b"doomed"), 201, "PUT /ds deleted");
    ok(&c.request("DELETE", "/ds/keep-bucket/deleted", &[], b""), 204, "DELETE /ds");
    ok(&c.request("PUT", "/v1/stream/r/recreated", &[TEXT], b"old incarnation"), 201, "PUT recreated");
    ok(&c.request("POST", "/v1/stream/r/recreated", &[TEXT], b" more old"), 204, "append old");
    ok(&c.request("DELETE", "/v1/stream/r/recreated", &[], b""), 204, "DELETE recreated");
    let mut e = Expect::new("/v1/stream/r/recreated", "application/octet-stream");
    let r = c.request("PUT", &e.path, &[OCTET], b"");
    ok(&r, 201, "re-create");
    assert_eq!(r.sno(), ZERO_OFFSET);
    e.append(&mut c, b"new incarnation");
    all.push(e);

    let check_all = |srv: &Server, all: &[Expect], pv: &Expect, pd: &Expect, when: &str| {
        let mut c = srv.conn();
        for e in all.iter().chain([pv, pd]) {
            e.check(&mut c, when);
        }
        for p in ["/v1/stream/r/deleted", "/ds/keep-bucket/deleted", "/v1/stream/r/never"] {
            ok(&c.request("GET", p, &[], b""), 404, &format!("{when}: GET deleted {p}"));
            ok(&c.request("HEAD", p, &[], b""), 404, &format!("{when}: HEAD deleted {p}"));
        }
        let r = c.request("GET", "/ds/keep-bucket", &[], b"");
        ok(&r, 200, &format!("{when}: GET bucket"));
        // big, born-closed, json, producer.
        assert!(squash_json(&r.text()).contains("\"streams\":4"), "{when}: bucket holds 4 streams: {}", r.text());
        ok(&c.request("GET", "/ds/gone-bucket", &[], b""), 404, &format!("{when}: deleted bucket"));
        ok(&c.request("PUT", "/ds/keep-bucket", &[], b""), 409, &format!("{when}: the bucket still exists"));
        ok(
            &c.request("PUT", "/ds/gone-bucket/s", &[TEXT], b""),
            404,
            &format!("{when}: no streams in a deleted bucket"),
        );
    };

    check_all(&srv, &all, &pv, &pd, "before restart");
    // ~300 KiB went through 64 KiB segments: several per shard.
    let segs = segment_files(&srv);
    assert!(segs >= 6, "expected the appends to roll over several segments, found {segs} segment files");

    // ---- first restart
    srv.restart();
    check_all(&srv, &all, &pv, &pd, "after restart 1");
    let mut c = srv.conn();

    // Producer state survived: duplicates are deduplicated, the next seq is
    // accepted, the old epoch is still fenced.
    let r = c.request("POST", &pv.path, &producer("text/plain", "p1", "2", "4"), b"p4;");
    ok(&r, 204, "after restart: /v1 duplicate of the last producer seq");
    assert_eq!(r.header("producer-seq"), Some("4"));
    let r = c.request("POST", &pv.path, &producer("text/plain", "p1", "2", "6"), b"gap");
    ok(&r, 409, "after restart: producer gap");
    assert_eq!(r.header("producer-expected-seq"), Some("5"));
    let r = c.request("POST", &pv.path, &producer("text/plain", "p1", "1", "1"), b"zombie");
    ok(&r, 403, "after restart: stale epoch");
    assert_eq!(r.header("producer-epoch"), Some("2"));
    let r = c.request("POST", &pv.path, &producer("text/plain", "p1", "2", "5"), b"p5;");
    ok(&r, 200, "after restart: next producer seq");
    pv.body.extend_from_slice(b"p5;");
    pv.marks.push((r.sno(), pv.body.len()));
    let last_ds = pd.marks.last().unwrap().0.clone();
    let r = c.request("POST", &pd.path, &producer("text/plain", "w", "0", "2"), b"d2;");
    ok(&r, 200, "after restart: /ds duplicate of the last producer seq");
    assert_eq!(r.sno(), last_ds, "a /ds duplicate returns the original offset");
    let r = c.request("POST", &pd.path, &producer("text/plain", "w", "0", "3"), b"d3;");
    ok(&r, 200, "after restart: next /ds producer seq");
    pd.body.extend_from_slice(b"d3;");
    pd.marks.push((r.sno(), pd.body.len()));

    // Closed streams stay closed.
    let r = c.request("POST", "/v1/stream/r/closed", &[TEXT], b"more");
    ok(&r, 409, "after restart: append to a closed stream");
    assert_eq!(r.header("stream-closed"), Some("true"));

    // The log keeps working: append more to the big streams (more segments).
    for (s, e) in all.iter_mut().take(3).enumerate() {
        for n in 25..40 {
            e.append(&mut c, &chunk(s, n, 3000 + n));
        }
    }
    // A stream created after the restart.
    let mut e = Expect::new("/v1/stream/r/after", "text/plain");
    ok(&c.request("PUT", &e.path, &[TEXT], b""), 201, "PUT after restart");
    e.append(&mut c, b"born after the first restart");
    all.push(e);
    check_all(&srv, &all, &pv, &pd, "after restart 1 + appends");

    // ---- second restart: recovered data is recovered again.
    srv.restart();
    check_all(&srv, &all, &pv, &pd, "after restart 2");
    let mut c = srv.conn();
    let r = c.request("POST", &pv.path, &producer("text/plain", "p1", "2", "5"), b"p5;");
    ok(&r, 204, "after restart 2: duplicate of the last producer seq");
    let r = c.request("POST", &pv.path, &producer("text/plain", "p1", "2", "6"), b"p6;");
    ok(&r, 200, "after restart 2: next producer seq");
    pv.body.extend_from_slice(b"p6;");
    pv.marks.push((r.sno(), pv.body.len()));
    pv.check(&mut c, "after restart 2 + append");
}
