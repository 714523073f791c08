//! Headers every response carries, through the real binary: `Date` (RFC
//! 9110 §6.6.1) on answers of every kind, current and refreshed each
//! second; `Location` as the client addressed the server, from a proxy's
//! `Forwarded` / `X-Forwarded-*` headers only with `--trust-proxy`.

mod common;

use common::{Conn, Server};
use std::io::Read;
use std::time::Duration;

const TEXT: (&str, &str) = ("Content-Type", "text/plain");

/// The `Date` of `r`: an IMF-fixdate within 2 s of now. Returns its second.
fn date_of(r: &common::Response, what: &str) -> i64 {
    let v = r.header("date").unwrap_or_else(|| panic!("{what}: no Date header: {}", r.summary()));
    let t = chrono::DateTime::parse_from_rfc2822(v).unwrap_or_else(|e| panic!("{what}: Date {v:?}: {e}"));
    // IMF-fixdate exactly: the form RFC 9110 requires senders to use.
    assert_eq!(t.format("%a, %d %b %Y %H:%M:%S GMT").to_string(), v, "{what}: not an IMF-fixdate");
    let skew = (t.timestamp() - chrono::Utc::now().timestamp()).abs();
    assert!(skew <= 2, "{what}: Date {v} is {skew} s off");
    t.timestamp()
}

/// (method, path, headers, body, expected status).
type Check<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, &'a [u8], u16);

#[test]
fn every_kind_of_answer_has_a_current_date() {
    let s = Server::start();
    let mut c = s.conn();
    let checks: Vec<Check> = vec![
        ("PUT", "/v1/stream/d", vec![TEXT], b"", 201),
        ("POST", "/v1/stream/d", vec![TEXT], b"x", 204),
        ("GET", "/v1/stream/d?offset=-1", vec![], b"", 200),
        ("HEAD", "/v1/stream/d", vec![], b"", 200),
        ("GET", "/v1/stream/missing?offset=-1", vec![], b"", 404),
        ("POST", "/v1/stream/d", vec![("Content-Type", "application/json")], b"x", 409),
        ("PATCH", "/v1/stream/d", vec![], b"", 405),
        ("PUT", "/ds/bkt1", vec![], b"", 201),
        ("GET", "/ds/bkt1", vec![], b"", 200),
        ("GET", "/metrics", vec![], b"", 200),
        ("GET", "/healthz", vec![], b"", 200),
        ("OPTIONS", "/v1/stream/d", vec![], b"", 204),
    ];
    for (method, path, headers, body, status) in checks {
        let r = c.request(method, path, &headers, body);
        assert_eq!(r.status, status, "{method} {path}: {}", r.summary());
        date_of(&r, &format!("{method} {path}"));
    }
    // A head that does not parse: the 400 written before closing has one too.
    let mut bad = s.conn();
    bad.send_raw(b"GET /v1/stream/d HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n").unwrap();
    let r = bad.read_response(false).unwrap();
    assert_eq!(r.status, 400);
    date_of(&r, "unparsable head");
    // The head of an SSE response.
    let mut sse = std::net::TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    sse.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(&mut sse, b"GET /v1/stream/d?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 4096];
    let n = sse.read(&mut buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("\r\nDate: "), "{head}");
}

#[test]
fn the_cached_date_moves_with_the_clock() {
    let s = Server::start();
    let mut c = s.conn();
    let first = date_of(&c.request("GET", "/healthz", &[], b""), "first");
    std::thread::sleep(Duration::from_millis(2100));
    let later = date_of(&c.request("GET", "/healthz", &[], b""), "2 s later");
    assert!(later >= first + 2, "Date did not advance: {first} then {later}");
}

fn created_location(c: &mut Conn, path: &str, extra: &[(&str, &str)]) -> String {
    let mut headers = vec![TEXT];
    headers.extend_from_slice(extra);
    let r = c.request("PUT", path, &headers, b"");
    assert_eq!(r.status, 201, "{}", r.summary());
    r.must("location").to_string()
}

#[test]
fn location_follows_the_proxy_only_when_trusted() {
    let proxy = [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "streams.example.com")];
    let plain = Server::start();
    let mut c = plain.conn();
    let host = format!("127.0.0.1:{}", plain.port());
    assert_eq!(created_location(&mut c, "/v1/stream/a", &proxy), format!("http://{host}/v1/stream/a"));

    let trusted = Server::start_with(&["--trust-proxy"]);
    let mut c = trusted.conn();
    assert_eq!(created_location(&mut c, "/v1/stream/a", &proxy), "https://streams.example.com/v1/stream/a");
    let forwarded = [("Forwarded", "for=192.0.2.1;proto=https;host=\"edge.example:8443\"")];
    assert_eq!(c.request("PUT", "/ds/bkt2", &[], b"").status, 201);
    assert_eq!(created_location(&mut c, "/ds/bkt2/s", &proxy), "https://streams.example.com/ds/bkt2/s");
    assert_eq!(created_location(&mut c, "/v1/stream/f", &forwarded), "https://edge.example:8443/v1/stream/f");
    // No proxy headers: as without the flag.
    assert_eq!(
        created_location(&mut c, "/v1/stream/n", &[]),
        format!("http://127.0.0.1:{}/v1/stream/n", trusted.port())
    );
}
