//! A connection whose requests keep going to another shard moves there
//! (http::affinity): nothing of what it sent is lost or reordered, pipelined
//! bytes received before the move included, and afterwards its requests run
//! without crossing cores.

mod common;

use common::{encode_request, read_all, Server};
use ringstream::limits::CONN_MOVE_STREAK;
use ringstream::protocol::names::split_v1_path;
use ringstream::protocol::StreamKey;
use ringstream::shard::router::shard_for;

const SHARDS: usize = 2;
const OCT: (&str, &str) = ("Content-Type", "application/octet-stream");

fn owner(path: &str) -> usize {
    let (bucket, stream) = split_v1_path(path).expect("valid path");
    shard_for(&StreamKey { bucket, stream }, SHARDS)
}

/// The first stream name `moves/{prefix}-N` that shard `shard` owns.
fn stream_on(shard: usize, prefix: &str) -> String {
    (0..).map(|i| format!("moves/{prefix}-{i}")).find(|p| owner(p) == shard).expect("some name hashes there")
}

/// The sum of a counter over its samples that carry `label` (e.g.
/// `direction="out"`; "" for all).
fn sum(s: &Server, name: &str, label: &str) -> f64 {
    let family = format!("{name}{{");
    s.metrics().iter().filter(|(k, _)| k.starts_with(&family) && k.contains(label)).map(|(_, v)| v).sum()
}

#[test]
fn pipelined_requests_survive_a_move_in_order() {
    let s = Server::start();
    // One stream per shard per round, each written by its own connection
    // with every request sent in one write: on each connection the kernel
    // gave to the shard that does not own its stream (one in two), the move
    // happens with requests still unread. 12 connections: all 12 landing on
    // their stream's owner has odds of 1 in 4,096.
    for (round, shard) in (0..6).flat_map(|r| (0..SHARDS).map(move |s| (r, s))) {
        let path = format!("/v1/stream/{}", stream_on(shard, &format!("pipe{round}")));
        let mut wire = encode_request(s.port(), "PUT", &path, &[OCT], b"");
        let appends: Vec<String> = (0..20).map(|i| format!("[append {i}]")).collect();
        for a in &appends {
            wire.extend(encode_request(s.port(), "POST", &path, &[OCT], a.as_bytes()));
        }
        wire.extend(encode_request(s.port(), "GET", &format!("{path}?offset=-1"), &[], b""));
        let mut c = s.conn();
        c.send_raw(&wire).unwrap();
        assert_eq!(c.read_response(false).unwrap().status, 201);
        let mut last = String::new();
        for a in &appends {
            let r = c.read_response(false).unwrap();
            assert_eq!(r.status, 204, "append {a}: {}", r.summary());
            assert!(r.sno() > last, "offsets grow in request order");
            last = r.sno();
        }
        let r = c.read_response(false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), appends.concat(), "every append once, in order");
        // The connection still serves after the move.
        assert_eq!(c.request("POST", &path, &[OCT], b"[after]").status, 204);
        assert!(read_all(&mut c, &path).0.ends_with(b"[after]"));
    }
    let out = sum(&s, "ringstream_connections_moved_total", "direction=\"out\"");
    let into = sum(&s, "ringstream_connections_moved_total", "direction=\"in\"");
    assert_eq!(out, into, "every connection moved out was taken in");
    assert!(out >= 1.0, "the connection accepted by the shard that does not own its stream moved");
}

#[test]
fn one_stream_per_connection_stops_crossing_cores() {
    let s = Server::start();
    const CONNECTIONS: usize = 16;
    const APPENDS: usize = 30;
    let handoffs_before = sum(&s, "ringstream_handoffs_total", "");
    // Each scrape is a connection of its own, counted when accepted.
    let accepted_before = sum(&s, "ringstream_connections_accepted_total", "");
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|k| {
            let mut c = s.conn();
            std::thread::spawn(move || {
                let path = format!("/v1/stream/moves/conn-{k}");
                assert_eq!(c.request("PUT", &path, &[OCT], b"").status, 201);
                let mut want = Vec::new();
                for i in 0..APPENDS {
                    let body = format!("<{k}:{i}>");
                    assert_eq!(c.request("POST", &path, &[OCT], body.as_bytes()).status, 204);
                    want.extend_from_slice(body.as_bytes());
                }
                assert_eq!(read_all(&mut c, &path).0, want, "connection {k} reads back what it wrote");
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // A connection accepted by the stream's owner never crosses; one accepted
    // by the other shard crosses for its first CONN_MOVE_STREAK requests and
    // then moves. Requests per connection: 1 + APPENDS + the reads.
    let moved = sum(&s, "ringstream_connections_moved_total", "direction=\"out\"");
    let handoffs = sum(&s, "ringstream_handoffs_total", "") - handoffs_before;
    assert!(moved <= CONNECTIONS as f64);
    assert_eq!(handoffs, moved * f64::from(CONN_MOVE_STREAK), "hand-offs stop once a connection moved");
    assert!(moved >= 1.0, "with {CONNECTIONS} connections some were accepted by the other shard");
    // A moved connection is not accepted twice: the workers' connections and
    // the three scrapes since (this one included).
    let accepted = sum(&s, "ringstream_connections_accepted_total", "") - accepted_before;
    assert_eq!(accepted, (CONNECTIONS + 3) as f64);
}
