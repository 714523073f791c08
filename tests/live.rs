//! Live reads across cores: long-poll and SSE readers held on one shard for
//! streams owned by another are woken by message passing when data arrives.

mod common;

use common::Server;
use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

const OCT: (&str, &str) = ("Content-Type", "application/octet-stream");

fn remote_requests(s: &Server) -> f64 {
    s.metrics().iter().filter(|(k, _)| k.starts_with("ringstream_handoffs_total{")).map(|(_, v)| v).sum()
}

#[test]
fn long_polls_on_any_shard_wake_on_append() {
    // Long timeout: a reader that is not woken fails the test instead of
    // passing on a 204.
    let s = Server::start_with(&["--long-poll-timeout-ms", "20000"]);
    let n = 16;
    let mut c = s.conn();
    let mut tails = Vec::new();
    for i in 0..n {
        let path = format!("/v1/stream/live/lp-{i}");
        assert_eq!(c.request("PUT", &path, &[OCT], b"").status, 201);
        tails.push(c.request("POST", &path, &[OCT], b"before").sno());
    }
    let remote_before = remote_requests(&s);
    // One connection per reader: SO_REUSEPORT spreads them over the shards,
    // so with 16 streams over 2 shards some readers wait on another core.
    let readers: Vec<_> = (0..n)
        .map(|i| {
            let port = s.port();
            let tail = tails[i].clone();
            thread::spawn(move || {
                let mut c = common::Conn::connect(port);
                let t = Instant::now();
                let r = c.request("GET", &format!("/v1/stream/live/lp-{i}?offset={tail}&live=long-poll"), &[], b"");
                (r, t.elapsed())
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    for i in 0..n {
        let r = c.request("POST", &format!("/v1/stream/live/lp-{i}"), &[OCT], format!("after-{i}").as_bytes());
        assert_eq!(r.status, 204);
    }
    for (i, h) in readers.into_iter().enumerate() {
        let (r, waited) = h.join().unwrap();
        assert_eq!(r.status, 200, "reader {i}: {}", r.summary());
        assert_eq!(r.text(), format!("after-{i}"), "reader {i} got exactly the new data");
        assert!(r.header("stream-cursor").is_some_and(|c| c.chars().all(|x| x.is_ascii_digit())));
        assert_eq!(r.header("stream-up-to-date"), Some("true"));
        assert!(waited < Duration::from_secs(15), "reader {i} was not woken by the append ({waited:?})");
    }
    assert!(remote_requests(&s) > remote_before, "no request crossed shards; the test did not exercise the mesh");
}

#[test]
fn long_poll_wakes_on_close_and_delete() {
    let s = Server::start_with(&["--long-poll-timeout-ms", "20000"]);
    let mut c = s.conn();
    for name in ["closing", "deleting"] {
        assert_eq!(c.request("PUT", &format!("/v1/stream/live/{name}"), &[OCT], b"").status, 201);
    }
    let port = s.port();
    let closing = thread::spawn(move || {
        common::Conn::connect(port).request("GET", "/v1/stream/live/closing?offset=now&live=long-poll", &[], b"")
    });
    let deleting = thread::spawn(move || {
        common::Conn::connect(port).request("GET", "/v1/stream/live/deleting?offset=now&live=long-poll", &[], b"")
    });
    thread::sleep(Duration::from_millis(300));
    assert_eq!(c.request("POST", "/v1/stream/live/closing", &[("Stream-Closed", "true")], b"").status, 204);
    assert_eq!(c.request("DELETE", "/v1/stream/live/deleting", &[], b"").status, 204);
    let r = closing.join().unwrap();
    assert_eq!(r.status, 204, "{}", r.summary());
    assert_eq!(r.header("stream-closed"), Some("true"));
    let r = deleting.join().unwrap();
    assert_eq!(r.status, 404, "a reader of a deleted stream ends with 404: {}", r.summary());
}

#[test]
fn long_poll_times_out_with_204_and_cursor() {
    let s = Server::start_with(&["--long-poll-timeout-ms", "300"]);
    let mut c = s.conn();
    assert_eq!(c.request("PUT", "/v1/stream/live/idle", &[OCT], b"").status, 201);
    let r = c.request("GET", "/v1/stream/live/idle?offset=now&live=long-poll&cursor=5", &[], b"");
    assert_eq!(r.status, 204);
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    let cursor: u64 = r.must("stream-cursor").parse().unwrap();
    assert!(cursor > 5);
    assert_eq!(r.sno(), "0000000000000000_0000000000000000");
}

#[test]
fn sse_readers_on_any_shard_receive_appends_then_closure() {
    let s = Server::start_with(&["--long-poll-timeout-ms", "20000"]);
    let mut c = s.conn();
    let n = 8;
    for i in 0..n {
        let r = c.request("PUT", &format!("/v1/stream/live/sse-{i}"), &[("Content-Type", "text/plain")], b"first\n");
        assert_eq!(r.status, 201);
    }
    let mut readers: Vec<TcpStream> = (0..n)
        .map(|i| {
            let mut t = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
            t.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            write!(t, "GET /v1/stream/live/sse-{i}?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            t
        })
        .collect();
    for (i, t) in readers.iter_mut().enumerate() {
        let text = common::read_sse_until(t, |x| x.contains("\"upToDate\":true"));
        assert!(text.starts_with("HTTP/1.1 200"), "reader {i}: {text}");
        assert!(text.contains("content-type: text/event-stream") || text.contains("Content-Type: text/event-stream"));
        assert!(!text.to_ascii_lowercase().contains("content-length"), "SSE has no Content-Length");
        assert!(text.contains("event: data\ndata:first\ndata:\n\n"), "reader {i} catch-up: {text}");
    }
    for i in 0..n {
        let r = c.request(
            "POST",
            &format!("/v1/stream/live/sse-{i}"),
            &[("Content-Type", "text/plain"), ("Stream-Closed", "true")],
            format!("last {i}").as_bytes(),
        );
        assert_eq!(r.status, 204);
    }
    for (i, t) in readers.iter_mut().enumerate() {
        let text = common::read_sse_until(t, |x| x.contains("\"streamClosed\":true"));
        let data_at =
            text.find(&format!("data:last {i}")).unwrap_or_else(|| panic!("reader {i} missed the final data: {text}"));
        let closed_at = text.find("\"streamClosed\":true").expect("closure control event");
        assert!(data_at < closed_at, "final data comes before the closure signal");
        assert!(!text[closed_at..].contains("streamCursor"), "no cursor once closed");
    }
}
