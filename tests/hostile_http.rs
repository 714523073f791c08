//! Hostile HTTP against the real binary over real sockets: malformed request
//! lines, HTTP/0.9, oversized and too many headers, bad Content-Length and
//! chunked framing, bodies over the limit, slowloris heads and bodies, path
//! traversal and NUL / invalid UTF-8 in names, deeply nested JSON, thousands
//! of pipelined requests, thousands of idle connections, and malformed
//! `Authorization` headers against a server with an auth file.
//!
//! Every case checks the answer (status, and that the connection is closed
//! where the byte stream can no longer be trusted), then that the server
//! still serves a normal request: on the same connection where the request
//! was well framed, on a new one otherwise.

mod common;

use common::{Conn, Server, IO_TIMEOUT};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

const OCTET: (&str, &str) = ("Content-Type", "application/octet-stream");
const JSON: (&str, &str) = ("Content-Type", "application/json");

/// What came back for raw bytes on a fresh connection.
struct Exchange {
    status: u16,
    text: String,
    /// The server closed the connection after its answer.
    closed: bool,
}

/// Sends `bytes` on a new connection and reads until the server closes it
/// or nothing more arrives for `quiet`.
fn exchange_for(port: u16, bytes: &[u8], quiet: Duration) -> Exchange {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    // A server may answer and close before taking everything; that is fine.
    let _ = s.write_all(bytes);
    s.set_read_timeout(Some(quiet)).unwrap();
    let mut got = Vec::new();
    let mut tmp = [0u8; 16 * 1024];
    let closed = loop {
        match s.read(&mut tmp) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&tmp[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break false,
            // A reset after the answer also ends the connection.
            Err(_) => break true,
        }
    };
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.strip_prefix("HTTP/1.1 ").and_then(|t| t.get(..3)).and_then(|c| c.parse().ok()).unwrap_or(0);
    Exchange { status, text, closed }
}

fn exchange(port: u16, bytes: &[u8]) -> Exchange {
    exchange_for(port, bytes, Duration::from_secs(5))
}

/// The answer to `bytes` is `want` and the connection is then closed.
fn assert_refused(srv: &Server, bytes: &[u8], want: u16, what: &str) {
    let x = exchange(srv.port(), bytes);
    assert_eq!(x.status, want, "{what}: answer {:?}", x.text);
    assert!(x.closed, "{what}: the connection must be closed after {want}: {:?}", x.text);
    assert!(x.text.contains("Connection: close"), "{what}: the answer must say Connection: close: {:?}", x.text);
    assert_serving(srv, what);
}

/// A normal request on a new connection still works.
fn assert_serving(srv: &Server, after: &str) {
    let mut c = srv.conn();
    let r = c.try_request("GET", "/v1/stream/hostile/probe?offset=-1", &[], b"");
    match r {
        Ok(r) => assert!(r.status == 200 || r.status == 404, "after {after}: GET answered {}", r.summary()),
        Err(e) => panic!("after {after}: the server no longer serves: {e}\n{}", srv.log_tail()),
    }
}

fn head(extra: &str) -> String {
    format!("POST /v1/stream/hostile/s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n{extra}\r\n")
}

fn create(c: &mut Conn, path: &str, ct: (&str, &str)) {
    let r = c.request("PUT", path, &[ct], b"");
    assert!(r.status == 201 || r.status == 200, "PUT {path}: {}", r.summary());
}

/// Raises this process's open-file limit to its hard limit (the server,
/// started afterwards, inherits it) and returns the new soft limit.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // Safety: a valid pointer to a properly sized struct.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = lim.rlim_max;
    // Safety: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    lim.rlim_cur
}

/// How many idle connections a test can open: `want`, or fewer when the
/// open-file limit (raised to its hard limit; the server inherits it) leaves
/// less room, but never under 1000.
fn idle_budget(want: usize) -> usize {
    let limit = raise_fd_limit();
    let n = want.min(limit.saturating_sub(1000) as usize);
    assert!(n >= 1000, "open-file hard limit {limit} too low to open 1000 idle connections");
    n
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

// ---------------------------------------------------------------------------

#[test]
fn malformed_request_lines_and_http09_get_400() {
    let srv = Server::start();
    let cases: &[(&[u8], &str)] = &[
        (b"GARBAGE\r\n\r\n", "a lone token"),
        (b"GET\r\n\r\n", "no target"),
        (b"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n", "extra token after the version"),
        (b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", "two spaces"),
        (b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", "unknown version"),
        (b"GET / FTP/1.1\r\nHost: x\r\n\r\n", "not HTTP"),
        (b"GET noslash HTTP/1.1\r\nHost: x\r\n\r\n", "target neither origin nor absolute form"),
        (b"\x00\x01\x02\x03\r\n\r\n", "binary"),
        (b"GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n", "raw NUL in the target"),
        (b"GET / HTTP/1.1\r\nNo colon here\r\n\r\n", "header without a colon"),
        (b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", "space in a header name"),
        (b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", "NUL in a header value"),
        (b"GET / HTTP/1.1\r\nX: \xff\xfe\r\n\r\n", "header value not UTF-8"),
        (b"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", "bad percent-encoding"),
        (b"GET /\r\n\r\n", "HTTP/0.9 request line"),
    ];
    for (bytes, what) in cases {
        assert_refused(&srv, bytes, 400, what);
    }
    // HTTP/0.9 without even the empty line: answered, not left hanging
    // until a timeout.
    let x = exchange(srv.port(), b"GET /\r\n");
    assert_eq!(x.status, 400, "HTTP/0.9 'GET /' alone: {:?}", x.text);
    assert!(x.closed);
    assert_serving(&srv, "HTTP/0.9");
}

#[test]
fn oversized_heads_get_431() {
    let srv = Server::start();
    // One header value over the 32 KiB head limit.
    let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(40 * 1024));
    assert_refused(&srv, big.as_bytes(), 431, "40 KiB header value");
    // Many small headers adding up past 32 KiB.
    let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..60 {
        many.push_str(&format!("X-H{i}: {}\r\n", "b".repeat(700)));
    }
    many.push_str("\r\n");
    assert_refused(&srv, many.as_bytes(), 431, "60 headers of 700 bytes");
    // More header fields than the count limit (64), each tiny.
    let mut count = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..100 {
        count.push_str(&format!("X-{i}: 1\r\n"));
    }
    count.push_str("\r\n");
    assert_refused(&srv, count.as_bytes(), 431, "100 header fields");
    // A head that never ends: refused once it passes the limit, without the
    // server reading (and buffering) the megabyte that follows.
    let mut endless = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    endless.push_str(&"X-Endless: yes\r\n".repeat(64 * 1024));
    let x = exchange(srv.port(), endless.as_bytes());
    assert_eq!(x.status, 431, "endless head: {:?}", x.text);
    assert_serving(&srv, "endless head");
}

#[test]
fn bad_content_length_and_oversized_bodies() {
    let srv = Server::start();
    let mut c = srv.conn();
    create(&mut c, "/v1/stream/hostile/s", OCTET);
    let cases: &[(&str, u16, &str)] = &[
        ("Content-Length: 5\r\nContent-Length: 6\r\n", 400, "conflicting Content-Length"),
        ("Content-Length: 5, 6\r\n", 400, "a Content-Length list"),
        ("Content-Length: -1\r\n", 400, "negative Content-Length"),
        ("Content-Length: +5\r\n", 400, "signed Content-Length"),
        ("Content-Length: 0x10\r\n", 400, "hex Content-Length"),
        ("Content-Length: \r\n", 400, "empty Content-Length"),
        ("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400, "Content-Length with chunked"),
        ("Content-Length: 99999999999999999999999999\r\n", 413, "Content-Length beyond 64 bits"),
        ("Content-Length: 16777217\r\n", 413, "Content-Length one over the 16 MiB limit"),
        ("Transfer-Encoding: gzip\r\n", 501, "a coding other than chunked"),
        ("Transfer-Encoding: gzip, chunked\r\n", 501, "a coding list"),
    ];
    for (headers, want, what) in cases {
        let mut bytes = head(headers).into_bytes();
        bytes.extend_from_slice(b"hello");
        assert_refused(&srv, &bytes, *want, what);
    }
    // A declared body over the limit is refused before it is sent: the
    // client learns at once and the server holds none of it.
    let mut big = srv.conn();
    big.send_raw(head("Content-Length: 1073741824\r\n").as_bytes()).unwrap();
    big.send_raw(&vec![b'x'; 64 * 1024]).unwrap();
    let r = big.read_response(false).expect("the 413 arrives");
    assert_eq!(r.status, 413, "{}", r.summary());
    // A repeated identical Content-Length is one length.
    let mut ok = head("Content-Length: 5\r\nContent-Length: 5\r\n").into_bytes();
    ok.extend_from_slice(b"hello");
    c.send_raw(&ok).unwrap();
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 204, "identical Content-Length twice: {}", r.summary());
    let r = c.request("GET", "/v1/stream/hostile/s", &[], b"");
    assert_eq!(r.body, b"hello", "only the valid append landed");
}

#[test]
fn bad_chunked_bodies() {
    let srv = Server::start();
    let mut c = srv.conn();
    create(&mut c, "/v1/stream/hostile/s", OCTET);
    let te = "Transfer-Encoding: chunked\r\n";
    let cases: &[(&str, u16, &str)] = &[
        ("zz\r\nhello\r\n0\r\n\r\n", 400, "non-hex chunk size"),
        ("\r\nhello\r\n0\r\n\r\n", 400, "empty chunk size"),
        ("-5\r\nhello\r\n0\r\n\r\n", 400, "negative chunk size"),
        ("5\r\nhelloXX0\r\n\r\n", 400, "no CRLF after chunk data"),
        ("5\nhello\r\n0\r\n\r\n", 400, "bare LF after the size"),
        ("5;ext=\x01\r\nhello\r\n0\r\n\r\n", 400, "control byte in an extension"),
        ("fffffffffffffffffffff\r\n", 400, "chunk size overflowing 64 bits"),
        ("1000001\r\nabc", 413, "one chunk over the 16 MiB limit"),
        ("800000\r\n", 413, "chunks adding up past 16 MiB (first 8 MiB then more)"),
    ];
    for (body, want, what) in cases {
        let mut bytes = head(te).into_bytes();
        bytes.extend_from_slice(body.as_bytes());
        if *what == "chunks adding up past 16 MiB (first 8 MiB then more)" {
            for _ in 0..2 {
                bytes.extend_from_slice(&vec![b'x'; 0x80_0000]);
                bytes.extend_from_slice(b"\r\n800000\r\n");
            }
        }
        assert_refused(&srv, &bytes, *want, what);
    }
    // An endless chunk-size line.
    let mut endless = head(te).into_bytes();
    endless.extend_from_slice(b"5;");
    endless.extend_from_slice(&vec![b'a'; 64 * 1024]);
    assert_refused(&srv, &endless, 400, "endless chunk extension");
    // Valid chunked append on the first connection still works, and nothing
    // of the refused ones landed.
    let mut ok = head(te).into_bytes();
    ok.extend_from_slice(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nTrailer: t\r\n\r\n");
    c.send_raw(&ok).unwrap();
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 204, "valid chunked append: {}", r.summary());
    let r = c.request("GET", "/v1/stream/hostile/s", &[], b"");
    assert_eq!(r.body, b"abcde", "only the valid chunked append landed");
}

#[test]
fn slowloris_heads_and_bodies_get_408() {
    let srv = Server::start_with(&["--header-timeout-ms", "600", "--body-timeout-ms", "600"]);
    let port = srv.port();
    let mut c = srv.conn();
    create(&mut c, "/v1/stream/hostile/s", OCTET);

    // A head trickled one byte per 50 ms never completes in 600 ms.
    let trickle = |prefix: &[u8], drip: &[u8]| -> (Exchange, Duration) {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(prefix).unwrap();
        let t0 = Instant::now();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut got = Vec::new();
        let mut tmp = [0u8; 4096];
        let mut closed = false;
        for b in drip.iter().cycle() {
            if t0.elapsed() > Duration::from_secs(10) {
                break;
            }
            if s.write_all(std::slice::from_ref(b)).is_err() {
                closed = true;
            }
            match s.read(&mut tmp) {
                Ok(0) => closed = true,
                Ok(n) => got.extend_from_slice(&tmp[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => closed = true,
            }
            if closed {
                break;
            }
        }
        let text = String::from_utf8_lossy(&got).into_owned();
        let status = text.strip_prefix("HTTP/1.1 ").and_then(|t| t.get(..3)).and_then(|c| c.parse().ok()).unwrap_or(0);
        (Exchange { status, text, closed }, t0.elapsed())
    };
    let (x, took) = trickle(b"GET /v1/stream/hostile/s HTTP/1.1\r\nHost: x\r\n", b"X-Slow: aaaa\r\n");
    assert_eq!(x.status, 408, "slow head: {:?}", x.text);
    assert!(x.closed, "slow head: closed after 408");
    assert!(took < Duration::from_secs(10), "slow head cut after {took:?}");
    assert_serving(&srv, "slow head");

    // A body trickled one byte per 50 ms.
    let (x, _) = trickle(head("Content-Length: 100000\r\n").as_bytes(), b"x");
    assert_eq!(x.status, 408, "slow body: {:?}", x.text);
    assert!(x.closed, "slow body: closed after 408");
    // Same for a chunked body.
    let (x, _) = trickle(head("Transfer-Encoding: chunked\r\n").as_bytes(), b"1\r\nx\r\n");
    assert_eq!(x.status, 408, "slow chunked body: {:?}", x.text);
    let r = c.request("GET", "/v1/stream/hostile/s", &[], b"");
    assert_eq!(r.status, 200, "{}", r.summary());
    assert!(r.body.is_empty(), "no part of a timed-out body is appended");

    // Idle keep-alive connections are not cut by the head timeout: it runs
    // from a head's first byte.
    let mut idle = srv.conn();
    assert_eq!(idle.request("GET", "/v1/stream/hostile/s", &[], b"").status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    let r = idle.request("POST", "/v1/stream/hostile/s", &[OCTET], b"after idle");
    assert_eq!(r.status, 204, "idle connection still usable: {}", r.summary());
}

#[test]
fn traversal_nul_and_invalid_utf8_names_get_400_and_touch_nothing() {
    let srv = Server::start();
    let data = srv.data_dir();
    let root = data.parent().unwrap().to_path_buf();
    let before_root = list(&root);
    let before_data = walk(&data);
    let mut c = srv.conn();
    let targets = [
        "/v1/stream/../../../../tmp/ringstream-escape",
        "/v1/stream/a/../../escape",
        "/v1/stream/a/%2e%2e/%2e%2e/escape",
        "/v1/stream/%2e%2e%2f%2e%2e%2fescape",
        "/v1/stream/a/./b",
        "/v1/stream/a//b",
        "/v1/stream/a%00b",
        "/v1/stream/a%0ab",
        "/v1/stream/%ff%fe",
        "/v1/stream/a%c0%af",
        "/ds/hostile/..",
        "/ds/hostile/..%2f..%2fescape",
        "/ds/hostile/a%2fb",
        "/ds/hostile/a%00b",
        "/ds/hostile/%ff",
        "/ds/..%2f..%2f/escape",
        "/ds/%2e%2e/escape",
    ];
    create(&mut c, "/ds/hostile", OCTET);
    for t in targets {
        for method in ["PUT", "POST", "GET", "DELETE"] {
            let r = c.request(method, t, &[OCTET], b"x");
            assert_eq!(r.status, 400, "{method} {t}: {}", r.summary());
        }
    }
    // The same as raw bytes (not percent-encoded) in the request line.
    for raw in [&b"/v1/stream/\xff\xfe"[..], b"/ds/hostile/a\xc0\xafb", b"/v1/stream/a\tb"] {
        let mut bytes = b"PUT ".to_vec();
        bytes.extend_from_slice(raw);
        bytes.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
        let x = exchange(srv.port(), &bytes);
        assert_eq!(x.status, 400, "raw target {:?}: {:?}", String::from_utf8_lossy(raw), x.text);
    }
    // The connection that got the 400s is still good.
    let r = c.request("PUT", "/v1/stream/hostile/fine", &[OCTET], b"");
    assert_eq!(r.status, 201, "{}", r.summary());
    assert!(!Path::new("/tmp/ringstream-escape").exists());
    assert_eq!(list(&root), before_root, "nothing new next to the data directory");
    // Inside the data directory only the shards' own files may change, and
    // none is named after a request.
    for p in walk(&data) {
        let rel = p.strip_prefix(&data).unwrap().to_string_lossy().into_owned();
        let own = ["ringstream.meta", "ringstream.lock", "webhook-signing.key"];
        let known = rel.starts_with("shard-") || own.contains(&rel.as_str());
        assert!(known, "unexpected path {rel} in the data directory");
        assert!(!rel.contains("escape") && !rel.contains(".."), "path from a request name: {rel}");
    }
    assert_eq!(walk(&data).len(), before_data.len(), "no file created per stream name");
}

fn list(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn deeply_nested_json_gets_400_with_a_reason() {
    let srv = Server::start();
    let mut c = srv.conn();
    let p = "/v1/stream/hostile/json";
    create(&mut c, p, JSON);
    let deep = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
    for (body, what) in [
        ("[".repeat(1_000_000), "a million unclosed ["),
        (deep(100_000), "100 000 levels, balanced"),
        (deep(129), "129 levels"),
        (format!("{}1{}", "{\"a\":".repeat(200), "}".repeat(200)), "200 levels of objects"),
    ] {
        let r = c.request("POST", p, &[JSON], body.as_bytes());
        assert_eq!(r.status, 400, "{what}: {}", r.summary());
        assert!(r.text().contains("nested deeper than 128"), "{what}: the reason is given: {}", r.summary());
        // Also as the initial body of a new stream.
        let r = c.request("PUT", &format!("{p}-put"), &[JSON], body.as_bytes());
        assert_eq!(r.status, 400, "PUT {what}: {}", r.summary());
    }
    // At the limit it is accepted (the outer array is one level of batching),
    // on the same connection.
    let r = c.request("POST", p, &[JSON], deep(128).as_bytes());
    assert_eq!(r.status, 204, "128 levels: {}", r.summary());
    let r = c.request("GET", &format!("{p}?offset=-1"), &[], b"");
    assert_eq!(r.text(), deep(128), "the one message reads back");
}

#[test]
fn thousands_of_pipelined_requests_are_answered_in_order() {
    const N: usize = 5000;
    let srv = Server::start();
    let mut c = srv.conn();
    let p = "/v1/stream/hostile/pipe";
    create(&mut c, p, OCTET);
    let mut bytes = Vec::new();
    for i in 0..N {
        let body = format!("{:08}", i);
        bytes.extend(common::encode_request(srv.port(), "POST", p, &[OCTET], body.as_bytes()));
        if i % 10 == 9 {
            bytes.extend(common::encode_request(srv.port(), "HEAD", p, &[], b""));
        }
    }
    // Written from another thread while responses are read here, so neither
    // side's socket buffer fills up and stalls the other.
    let mut w = TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
    let r = w.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&bytes));
    let mut resp = Conn::from_stream(srv.port(), r);
    for i in 0..N {
        let r = resp.read_response(false).unwrap_or_else(|e| panic!("response {i}: {e}"));
        assert_eq!(r.status, 204, "append {i}: {}", r.summary());
        assert_eq!(r.sno(), format!("{:016}_{:016}", 0, (i + 1) * 8), "append {i} answered in order");
        if i % 10 == 9 {
            let h = resp.read_response(true).unwrap();
            assert_eq!(h.status, 200, "HEAD after append {i}: {}", h.summary());
            assert_eq!(h.sno(), r.sno());
        }
    }
    writer.join().unwrap().expect("writing the pipeline");
    let (all, _, _) = common::read_all(&mut c, p);
    assert_eq!(all.len(), N * 8);
    assert_eq!(&all[..16], b"0000000000000001");
    assert_serving(&srv, "pipeline");
}

#[test]
fn thousands_of_idle_connections_do_not_lock_out_new_clients() {
    // 2 shards x 100 connections; 3000 idle ones are opened (fewer if the
    // open-file limit is low, but always 1000 or more).
    let idle_count = idle_budget(3000);
    let srv = Server::start_with(&["--max-connections", "100"]);
    let pid = srv.pid();
    let fds_before = open_fds(pid);
    let mut idle: Vec<TcpStream> = Vec::with_capacity(idle_count);
    for i in 0..idle_count {
        match TcpStream::connect(("127.0.0.1", srv.port())) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("idle connection {i}: {e}"),
        }
    }
    // New clients are served, each at once (the oldest idle connection is
    // closed to make room).
    for i in 0..20 {
        let t0 = Instant::now();
        let mut c = srv.conn();
        let r = c.request("PUT", &format!("/v1/stream/hostile/n{i}"), &[OCTET], b"");
        assert_eq!(r.status, 201, "new client {i}: {}", r.summary());
        assert!(t0.elapsed() < IO_TIMEOUT);
    }
    // The server holds at most its bound of connections (plus a few being
    // closed), not the thousands.
    let deadline = Instant::now() + Duration::from_secs(10);
    let held = loop {
        let held = open_fds(pid).saturating_sub(fds_before);
        if held <= 2 * 100 + 10 || Instant::now() > deadline {
            break held;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(held <= 2 * 100 + 10, "server holds {held} sockets, bound is 2 x 100");
    // The oldest idle connections were the ones closed.
    let mut closed_oldest = 0;
    for s in idle.iter_mut().take(100) {
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut b = [0u8; 1];
        if matches!(s.read(&mut b), Ok(0) | Err(_)) {
            closed_oldest += 1;
        }
    }
    assert!(closed_oldest >= 90, "only {closed_oldest} of the 100 oldest idle connections were closed");
    // The newest idle connection is still usable.
    let newest = idle.last_mut().unwrap();
    newest.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    newest.write_all(b"GET /v1/stream/hostile/n0 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut b = [0u8; 12];
    newest.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"HTTP/1.1 200");
}

#[test]
fn default_bound_serves_alongside_thousands_of_idle_connections() {
    let idle_count = idle_budget(4000);
    let srv = Server::start();
    let idle: Vec<TcpStream> = (0..idle_count)
        .map(|i| TcpStream::connect(("127.0.0.1", srv.port())).unwrap_or_else(|e| panic!("{i}: {e}")))
        .collect();
    let mut c = srv.conn();
    for i in 0..20 {
        let r = c.request("PUT", &format!("/v1/stream/hostile/d{i}"), &[OCTET], b"");
        assert_eq!(r.status, 201, "{}", r.summary());
    }
    // Under the default bound (16 384 per shard) none of them was closed.
    let open = idle
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).unwrap();
            let mut b = [0u8; 1];
            matches!((&**s).read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count();
    assert_eq!(open, idle_count, "idle connections under the bound stay open");
}

#[test]
fn connections_over_the_bound_while_all_are_busy_get_503() {
    // 2 shards x 2 connections, each kept busy by a long-poll.
    let srv = Server::start_with(&["--max-connections", "2", "--long-poll-timeout-ms", "3000"]);
    let mut c = srv.conn();
    create(&mut c, "/v1/stream/hostile/lp", OCTET);
    let tail = c.request("GET", "/v1/stream/hostile/lp?offset=-1", &[], b"").sno();
    drop(c);
    let poll = format!("GET /v1/stream/hostile/lp?offset={tail}&live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut busy = Vec::new();
    let mut refused = None;
    for _ in 0..8 {
        let mut s = TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
        s.write_all(poll.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let mut got = Vec::new();
        match s.read_to_end(&mut got) {
            // Answered and closed at once: refused.
            Ok(_) => {
                refused = Some(String::from_utf8_lossy(&got).into_owned());
                break;
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                assert!(got.is_empty(), "a long-poll at the tail answers nothing within 500 ms");
                busy.push(s);
            }
            Err(e) => panic!("long-poll connection: {e}"),
        }
    }
    let text = refused.expect("with every connection busy, a new one is refused");
    assert!(text.starts_with("HTTP/1.1 503"), "refused with 503: {text:?}");
    assert!(busy.len() <= 4, "at most 2 x 2 connections admitted, got {}", busy.len());
    assert!(text.contains("Retry-After: "), "503 carries Retry-After: {text:?}");
    // When the long-polls end, new clients are served again.
    std::thread::sleep(Duration::from_millis(3500));
    assert_serving(&srv, "busy connections");
}

/// A server with one token (`Bearer secret`, admin over every bucket).
fn guarded() -> (Server, common::TempDir) {
    let dir = common::TempDir::new("hostile-auth");
    let file = dir.path().join("auth.toml");
    let admin = common::auth::Grant { name: "admin", token: "secret", buckets: &["*"], rights: &["admin"] };
    common::auth::write(&file, &[admin], &[]);
    (Server::start_with(&["--auth-file", file.to_str().unwrap()]), dir)
}

/// The guarded server still answers the good token, on a new connection.
fn assert_guarded_serving(srv: &Server, after: &str) {
    let mut c = srv.conn();
    match c.try_request("GET", "/v1/stream/hostile/probe?offset=-1", &[("Authorization", "Bearer secret")], b"") {
        Ok(r) => assert!(r.status == 200 || r.status == 404, "after {after}: {}", r.summary()),
        Err(e) => panic!("after {after}: the server no longer serves: {e}\n{}", srv.log_tail()),
    }
}

#[test]
fn malformed_authorization_headers_get_401_and_break_nothing() {
    let (srv, _dir) = guarded();
    let mut c = srv.conn();
    let ok = [("Authorization", "Bearer secret")];
    let p = "/v1/stream/hostile/guarded";
    assert_eq!(c.request("PUT", p, &[OCTET, ok[0]], b"kept").status, 201);
    let long = format!("Bearer {}", "a".repeat(30 * 1024));
    let over = format!("Bearer {}", "b".repeat(1025));
    let many: String = (0..60).map(|i| format!("Authorization: Bearer t{i}\r\n")).collect();
    let values = [
        "".to_string(),
        " ".to_string(),
        "Bearer".to_string(),
        "Bearer ".to_string(),
        "Bearer\tsecret".to_string(),
        "Bearer secret secret".to_string(),
        "Bearer secret,Bearer secret".to_string(),
        "Bearer =====".to_string(),
        "Bearer sec=ret".to_string(),
        "Bearer s\u{e9}cret".to_string(),
        "Bearer \u{1F511}".to_string(),
        "Basic c2VjcmV0Og==".to_string(),
        "Digest username=\"x\"".to_string(),
        "secret".to_string(),
        "Bearer\"secret\"".to_string(),
        "Bearer %73ecret".to_string(),
        over,
        long,
    ];
    for v in &values {
        for (method, body) in [("GET", ""), ("POST", "x")] {
            let len = if body.is_empty() { String::new() } else { format!("Content-Length: {}\r\n", body.len()) };
            let raw = format!("{method} {p}?offset=-1 HTTP/1.1\r\nHost: x\r\nAuthorization: {v}\r\n{len}\r\n{body}");
            let what = format!("{method} with Authorization: {:?}", &v[..v.len().min(40)]);
            // One full answer on a connection of its own, then: closed
            // after a body, kept alive (a next request answered) without.
            let mut k = srv.conn();
            k.send_raw(raw.as_bytes()).unwrap();
            let r = k.read_response(false).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(r.status, 401, "{what}: {}", r.summary());
            assert!(r.must("www-authenticate").starts_with("Bearer"), "{what}: {}", r.summary());
            let closed = r.header("connection") == Some("close");
            assert_eq!(closed, !body.is_empty(), "{what}: a body closes, none keeps alive: {}", r.summary());
            if !closed {
                let next = k.request("GET", &format!("{p}?offset=-1"), &ok, b"");
                assert_eq!(next.status, 200, "{what}: the same connection goes on: {}", next.summary());
            }
        }
    }
    // Many Authorization headers at once.
    let raw = format!("GET {p}?offset=-1 HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    let mut k = srv.conn();
    k.send_raw(raw.as_bytes()).unwrap();
    assert_eq!(k.read_response(false).unwrap().status, 401, "60 Authorization headers");
    // Bytes the HTTP parser refuses never reach the token check: 400, closed.
    for bad in [&b"Bearer \xff\xfe"[..], b"Bearer se\x00cret", b"Bearer se\x01cret"] {
        let mut raw = format!("GET {p}?offset=-1 HTTP/1.1\r\nHost: x\r\nAuthorization: ").into_bytes();
        raw.extend_from_slice(bad);
        raw.extend_from_slice(b"\r\n\r\n");
        let x = exchange(srv.port(), &raw);
        assert_eq!(x.status, 400, "{:?}: {:?}", String::from_utf8_lossy(bad), x.text);
        assert!(x.closed);
    }
    // An unauthenticated upload is refused at its head: the 401 comes
    // before the body is sent, and the connection closes.
    let mut s = TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let head = format!("POST {p} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 16000000\r\nExpect: 100-continue\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 401 "), "{text:?}");
    assert!(!text.contains("100 Continue"), "{text:?}");
    // Pipelined: a refused request and a good one, answered in order.
    let mut w = srv.conn();
    let mut both =
        common::encode_request(srv.port(), "GET", &format!("{p}?offset=-1"), &[("Authorization", "Bearer nope")], b"");
    both.extend(common::encode_request(srv.port(), "GET", &format!("{p}?offset=-1"), &ok, b""));
    w.send_raw(&both).unwrap();
    assert_eq!(w.read_response(false).unwrap().status, 401);
    let r = w.read_response(false).unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "kept"), "nothing was written by the refused requests");
    assert_guarded_serving(&srv, "malformed Authorization headers");
}
