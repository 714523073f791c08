//! `Stream-Incarnation` over the real binary, on both surfaces: every
//! successful answer about a stream names the creation it is about; a
//! deleted and re-created path is a new creation with a new token; a request
//! sending a token is refused (412, nothing written) unless the stream at
//! its path is that creation; a malformed token is a bad request; and a
//! token is the same after a restart.

mod common;

use common::{read_all, Conn, Response, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const TEXT: (&str, &str) = ("Content-Type", "text/plain");
const FLAGS: &[&str] = &["--long-poll-timeout-ms", "300"];

/// The token of a successful answer, checked to be of the documented form.
fn token(r: &Response, what: &str) -> String {
    assert!(r.status < 400, "{what}: {}", r.summary());
    let t = r.must("stream-incarnation").to_string();
    assert!(t.len() == 24 && t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')), "{what}: {t:?}");
    t
}

fn with<'a>(t: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![("Stream-Incarnation", t)];
    h.extend_from_slice(more);
    h
}

/// The head of an SSE answer (the session goes on; the socket is dropped).
fn sse_head(s: &Server, path: &str, headers: &str) -> String {
    let mut t = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    t.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    write!(t, "GET {path}?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\n{headers}\r\n").unwrap();
    let (mut text, mut buf) = (Vec::new(), [0u8; 4096]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && !String::from_utf8_lossy(&text).contains("\r\n\r\n") {
        match t.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(_) => continue,
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Every successful answer about one stream carries the same token.
fn answers_name_the_creation(s: &Server, c: &mut Conn, path: &str, t: &str) {
    let same = |r: Response, what: &str| assert_eq!(token(&r, what), t, "{what} on {path}");
    same(c.request("POST", path, &[TEXT], b"a"), "append");
    let producer = [TEXT, ("Producer-Id", "p"), ("Producer-Epoch", "0"), ("Producer-Seq", "0")];
    same(c.request("POST", path, &producer, b"b"), "producer append");
    same(c.request("POST", path, &producer, b"b"), "producer duplicate");
    same(c.request("GET", &format!("{path}?offset=-1"), &[], b""), "catch-up read");
    same(c.request("GET", &format!("{path}?offset=now"), &[], b""), "offset=now");
    same(c.request("GET", &format!("{path}?offset=now&live=long-poll"), &[], b""), "long-poll timeout");
    same(c.request("HEAD", path, &[], b""), "HEAD");
    let etag = c.request("HEAD", path, &[], b"").must("etag").to_string();
    same(c.request("HEAD", path, &[("If-None-Match", &etag)], b""), "HEAD 304");
    same(c.request("PUT", path, &[TEXT], b""), "idempotent re-create");
    let head = sse_head(s, path, "");
    assert!(head.starts_with("HTTP/1.1 200") && head.contains(&format!("\r\nStream-Incarnation: {t}\r\n")), "{head}");
    assert!(head.contains("Stream-Incarnation, "), "exposed to browsers (CORS): {head}");
}

#[test]
fn every_answer_about_a_stream_names_its_creation_on_both_surfaces() {
    let s = Server::start_with(FLAGS);
    let mut c = s.conn();
    let t = token(&c.request("PUT", "/v1/stream/inc/plain", &[TEXT], b""), "create");
    answers_name_the_creation(&s, &mut c, "/v1/stream/inc/plain", &t);
    assert_eq!(token(&c.request("DELETE", "/v1/stream/inc/plain", &[], b""), "delete"), t, "the creation deleted");

    assert_eq!(c.request("PUT", "/ds/incb", &[], b"").status, 201);
    assert!(c.request("PUT", "/ds/incb", &[], b"").header("stream-incarnation").is_none(), "not a stream");
    let t = token(&c.request("PUT", "/ds/incb/s", &[TEXT], b""), "create");
    answers_name_the_creation(&s, &mut c, "/ds/incb/s", &t);
    assert_eq!(token(&c.request("HEAD", "/v1/stream/incb/s", &[], b""), "HEAD"), t, "one stream, two surfaces");
    let fork = c.request("PUT", "/ds/incb/fork", &[TEXT, ("Stream-Forked-From", "/ds/incb/s")], b"");
    assert_ne!(token(&fork, "fork"), t, "a fork is a creation of its own");
    let snap = "/ds/incb/s/snapshot/0000000000000000_0000000000000002";
    assert_eq!(token(&c.request("PUT", snap, &[TEXT], b"ab"), "snapshot"), t);
    assert_eq!(token(&c.request("GET", snap, &[], b""), "snapshot read"), t);
    assert_eq!(token(&c.request("GET", "/ds/incb/s/bootstrap", &[], b""), "bootstrap"), t);
    let errors = c.request("POST", "/ds/incb/nope", &[TEXT], b"x");
    assert!(errors.status == 404 && errors.header("stream-incarnation").is_none(), "{}", errors.summary());
}

#[test]
fn a_stale_token_is_refused_and_writes_nothing() {
    let s = Server::start_with(FLAGS);
    let mut c = s.conn();
    let path = "/v1/stream/inc/again";
    let old = token(&c.request("PUT", path, &[TEXT], b"first "), "create");
    assert_eq!(c.request("DELETE", path, &with(&old, &[]), b"").status, 204, "a matching token deletes");
    let new = token(&c.request("PUT", path, &[TEXT], b"second "), "re-create");
    assert_ne!(new, old, "a re-created path is a new creation");
    let (body, tail, _) = read_all(&mut c, path);

    // Stale: 412 on every method, and nothing written.
    let r = c.request("POST", path, &with(&old, &[TEXT]), b"lost");
    assert_eq!(r.status, 412, "{}", r.summary());
    assert!(r.text().contains("Stream-Incarnation"), "the reason says why: {}", r.text());
    let r = c.request("POST", path, &with(&old, &[("Stream-Closed", "true")]), b"");
    assert_eq!(r.status, 412, "a close is a write too: {}", r.summary());
    for (method, target) in [
        ("GET", format!("{path}?offset=-1")),
        ("GET", format!("{path}?offset=now&live=long-poll")),
        ("HEAD", path.to_string()),
        ("PUT", path.to_string()),
        ("DELETE", path.to_string()),
    ] {
        let r = c.request(method, &target, &with(&old, &[TEXT]), b"");
        assert_eq!(r.status, 412, "{method} {target}: {}", r.summary());
    }
    assert!(sse_head(&s, path, &format!("Stream-Incarnation: {old}\r\n")).starts_with("HTTP/1.1 412"));
    let (after, after_tail, last) = read_all(&mut c, path);
    assert_eq!((after, after_tail.as_str()), (body.clone(), tail.as_str()), "the tail did not move");
    assert_ne!(last.header("stream-closed"), Some("true"), "nor was it closed");

    // Malformed: 400, nothing written.
    // An upper-case digit (a token may hold none to upper-case), one digit
    // short, quoted.
    for bad in [format!("A{}", &new[1..]), new[1..].to_string(), format!("\"{new}\"")] {
        let r = c.request("POST", path, &with(&bad, &[TEXT]), b"lost");
        assert_eq!(r.status, 400, "{bad}: {}", r.summary());
    }
    assert_eq!(read_all(&mut c, path).1, tail);

    // Current: every method goes on.
    assert_eq!(c.request("POST", path, &with(&new, &[TEXT]), b"third").status, 204);
    let (body, _, r) = read_all(&mut c, path);
    assert_eq!((body.as_slice(), token(&r, "read")), (&b"second third"[..], new.clone()));
    assert_eq!(c.request("HEAD", path, &with(&new, &[]), b"").status, 200);
    assert_eq!(c.request("PUT", path, &with(&new, &[TEXT]), b"").status, 200, "the same configuration");

    // Gone: 404 where the method answers 404 without the header; a PUT
    // naming a creation never creates one (412).
    assert_eq!(c.request("DELETE", path, &[], b"").status, 204);
    assert_eq!(c.request("POST", path, &with(&new, &[TEXT]), b"x").status, 404);
    assert_eq!(c.request("GET", &format!("{path}?offset=-1"), &with(&new, &[]), b"").status, 404);
    assert_eq!(c.request("PUT", path, &with(&new, &[TEXT]), b"").status, 412);
    assert_eq!(c.request("HEAD", path, &[], b"").status, 404, "nothing was created");
}

#[test]
fn a_stale_token_is_refused_on_the_product_surface_too() {
    let s = Server::start_with(FLAGS);
    let mut c = s.conn();
    assert_eq!(c.request("PUT", "/ds/incb", &[], b"").status, 201);
    let old = token(&c.request("PUT", "/ds/incb/s", &[TEXT], b"ab"), "create");
    assert_eq!(c.request("DELETE", "/ds/incb/s", &[], b"").status, 204);
    let new = token(&c.request("PUT", "/ds/incb/s", &[TEXT], b"cd"), "re-create");
    let tail = c.request("HEAD", "/ds/incb/s", &[], b"").sno();
    let snap = "/ds/incb/s/snapshot/0000000000000000_0000000000000002";
    for (method, target, body) in [
        ("POST", "/ds/incb/s", &b"lost"[..]),
        ("PUT", snap, b"blob"),
        ("GET", "/ds/incb/s/bootstrap", b""),
        ("GET", "/ds/incb/s?offset=-1", b""),
    ] {
        let r = c.request(method, target, &with(&old, &[TEXT]), body);
        assert_eq!(r.status, 412, "{method} {target}: {}", r.summary());
    }
    let r = c.request("HEAD", "/ds/incb/s", &[], b"");
    assert_eq!((r.sno(), r.header("stream-snapshot-offset")), (tail, None), "nothing written");
    assert_eq!(c.request("POST", "/ds/incb/s", &with(&new, &[TEXT]), b"ef").status, 200);
}

#[test]
fn a_token_is_the_same_after_a_restart() {
    let mut s = Server::start();
    let mut c = s.conn();
    // Enough streams that both shards hold some.
    let paths: Vec<String> = (0..8).map(|i| format!("/v1/stream/inc/r{i}")).collect();
    let mut tokens = Vec::new();
    for p in &paths {
        token(&c.request("PUT", p, &[TEXT], b"x"), "create");
        assert_eq!(c.request("DELETE", p, &[], b"").status, 204);
        tokens.push(token(&c.request("PUT", p, &[TEXT], b"y"), "re-create"));
    }
    s.restart();
    let mut c = s.conn();
    for (p, t) in paths.iter().zip(&tokens) {
        assert_eq!(&token(&c.request("HEAD", p, &[], b""), "HEAD"), t, "{p} after a restart");
        assert_eq!(c.request("POST", p, &with(t, &[TEXT]), b"z").status, 204, "{p}: the token still matches");
    }
    // Created again after the restart: new tokens, the old ones refused.
    for (p, t) in paths.iter().zip(&tokens) {
        assert_eq!(c.request("DELETE", p, &[], b"").status, 204);
        assert_ne!(&token(&c.request("PUT", p, &[TEXT], b""), "re-create"), t, "{p}");
        assert_eq!(c.request("POST", p, &with(t, &[TEXT]), b"lost").status, 412, "{p}");
    }
}
