//! A cell of three real server processes on loopback (`--shards 1`, so one
//! group), with concurrent appends through whichever node leads:
//!
//! - appends sent to any node are acknowledged: a follower forwards them to
//!   the leader over the peer link (counted on both sides in /metrics);
//! - every node serves every acknowledged append, in order, at the offset
//!   it was acknowledged at;
//! - the leader killed (SIGKILL): a survivor acknowledges appends within
//!   seconds (the time is printed); the killed node restarts, catches up
//!   and serves the same stream;
//! - both followers killed: the leader acknowledges nothing (503 within
//!   the append timeout) and still serves what was committed;
//! - a follower whose leader and other follower are killed answers a write
//!   503 with `Retry-After` within 10 s;
//! - a stream past its TTL, never touched, is expired by the leader's sweep
//!   and gone from every node;
//! - streams in use outlive their TTL window: one read only through a
//!   follower (which tells the leader), one written through a failover (the
//!   new leader counts from the writes it applied, and from its takeover);
//! - a stream's `Stream-Incarnation` is the same on every node, and a write
//!   naming a deleted creation is refused (412) through any node;
//! - a client that appends through a follower and reads there at once, by
//!   long-poll or SSE from the start, gets its append and the tail as the
//!   leader acknowledged it;
//! - a fork's source deleted through a new leader is soft-deleted while
//!   the fork lives (the new leader counted the fork's reference), and
//!   collected once the fork goes;
//! - a bucket's stream quota (an auth file) holds through a failover: the
//!   new leader counts what it applied as a follower;
//! - the lead handed back to the first voter once it caught up fails no
//!   write sent meanwhile to the node that hands it over;
//! - a voter that lost its data directory elects no stale leader, and is
//!   caught up (and votes again) when it comes back to a running cell;
//! - one that comes back to a log of many sealed segments copies them
//!   whole from a peer at boot (segment shipping; the time and bytes are
//!   printed), byte for byte the same, and serves everything;
//! - a snapshot deleted through the leader leaves the stream's other
//!   snapshot readable on the followers;
//! - a deleted stream's segments go on every node through the log (the
//!   leader's reclaim record), the same files everywhere; the cell serves
//!   everything after a restart of all three, and a node whose disk is
//!   lost then copies the segments left and catches up;
//! - a webhook subscription made through a follower is delivered by the
//!   leader, signed with the key every node publishes, and after the leader
//!   is killed, by the new leader under the same key id.

mod common;

use common::{Conn, Server, TempDir};
use std::time::{Duration, Instant};

const STREAM: &str = "/v1/stream/cell";

/// One acknowledged append: its body and the offset after it.
#[derive(Debug, Clone)]
struct Acked {
    body: Vec<u8>,
    next: String,
}

struct Cell {
    _dir: TempDir,
    nodes: Vec<Server>,
    up: Vec<bool>,
    acked: Vec<Acked>,
    attempts: u64,
    /// Appends acknowledged through each node.
    through: Vec<usize>,
}

impl Cell {
    fn start() -> Cell {
        Cell::start_with(&[])
    }

    /// A cell whose nodes get the flags `extra` too.
    fn start_with(extra: &[&str]) -> Cell {
        Cell::of(3, extra)
    }

    /// A cell of `n` nodes (3 or 5) with the flags `extra`.
    fn of(n: usize, extra: &[&str]) -> Cell {
        let (dir, nodes) = common::cell::start_with(n, extra);
        Cell { _dir: dir, nodes, up: vec![true; n], acked: Vec::new(), attempts: 0, through: vec![0; n] }
    }

    /// Creates the stream through the nodes in turn until one (the leader)
    /// takes it; returns that node.
    fn create(&mut self) -> usize {
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            for i in 0..self.nodes.len() {
                let Ok(mut c) = Conn::try_connect(self.nodes[i].port()) else { continue };
                let Ok(r) = c.try_request("PUT", STREAM, &[("content-type", "text/plain")], b"") else { continue };
                match r.status {
                    200 | 201 => return i,
                    503 => {}
                    s => panic!("node {}: create answered {s}: {}", i + 1, r.summary()),
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no node took the create in 20 s");
    }

    /// Appends `body` through the nodes in turn (each append starting at
    /// the next node) until one acknowledges it (at most `limit`); returns
    /// the node that did. Each attempt sends its own bytes (`body` and the
    /// attempt's number): an attempt answered 503 may still be committed,
    /// so only acknowledged bytes are counted.
    fn append(&mut self, body: &str, limit: Duration) -> Option<usize> {
        let end = Instant::now() + limit;
        let first = self.acked.len();
        while Instant::now() < end {
            let n = self.nodes.len();
            for i in (first..first + n).map(|i| i % n).filter(|&i| self.up[i]) {
                self.attempts += 1;
                let bytes = format!("<{body}#{}>", self.attempts).into_bytes();
                let Ok(mut c) = Conn::try_connect(self.nodes[i].port()) else { continue };
                let Ok(r) = c.try_request("POST", STREAM, &[("content-type", "text/plain")], &bytes) else { continue };
                match r.status {
                    200 | 204 => {
                        self.acked.push(Acked { body: bytes, next: r.sno() });
                        self.through[i] += 1;
                        return Some(i);
                    }
                    503 => {}
                    s => panic!("node {}: append answered {s}: {}", i + 1, r.summary()),
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// What node `i` serves of the stream, read from the start until it
    /// says it reached the tail, or answers 503 there (a node without a
    /// leader serves its committed data but cannot confirm the tail); empty
    /// while it does not know the stream.
    fn stream_of(&self, i: usize) -> Vec<u8> {
        let mut c = self.nodes[i].conn();
        let (mut body, mut offset) = (Vec::new(), "-1".to_string());
        for _ in 0..10_000 {
            let r = c.request("GET", &format!("{STREAM}?offset={offset}"), &[], b"");
            match r.status {
                404 | 503 => return body,
                200 | 204 => body.extend_from_slice(&r.body),
                s => panic!("node {}: a read answered {s}: {}", i + 1, r.summary()),
            }
            let next = r.sno();
            if r.header("stream-up-to-date") == Some("true") || next == offset {
                return body;
            }
            offset = next;
        }
        panic!("node {}: reading did not reach the tail", i + 1);
    }

    /// Node `i` serves every acknowledged append once, in the order they
    /// were acknowledged, each ending at the offset it was acknowledged
    /// with (it is given 10 s to catch up).
    fn serves_all(&self, i: usize) {
        let end = Instant::now() + Duration::from_secs(10);
        let mut last = String::new();
        while Instant::now() < end {
            let got = self.stream_of(i);
            match self.check(&got) {
                Ok(()) => return,
                Err(why) => last = why,
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for n in (0..self.nodes.len()).filter(|&n| self.up[n]) {
            eprintln!("--- node {} log:\n{}", n + 1, self.nodes[n].log_tail());
        }
        panic!("node {}: {last}", i + 1);
    }

    /// The node that leads (its /leaderz answers 200), if one does.
    fn leader(&self) -> Option<usize> {
        (0..self.nodes.len()).filter(|&i| self.up[i]).find(|&i| {
            let Ok(mut c) = Conn::try_connect(self.nodes[i].port()) else { return false };
            c.try_request("GET", "/leaderz", &[], b"").is_ok_and(|r| r.status == 200)
        })
    }

    /// A cell holding the stream with `n` appends acknowledged, and the
    /// node that leads it once settled (the first).
    fn with_appends(n: usize) -> (Cell, usize) {
        let mut cell = Cell::start();
        cell.create();
        for i in 0..n {
            cell.append(&format!("{i}"), Duration::from_secs(10)).expect("append");
        }
        cell.settle();
        (cell, 0)
    }

    /// A cell of 64 KiB segments holding the stream with `n` appends of
    /// 4 KB (so about `n / 16` sealed segments), settled.
    fn with_segments(n: usize) -> Cell {
        let mut cell = Cell::start_with(&["--segment-bytes", "65536"]);
        cell.create();
        let big = "x".repeat(4000);
        for i in 0..n {
            cell.append(&format!("{i} {big}"), Duration::from_secs(10)).expect("append");
        }
        cell.settle();
        cell
    }

    /// Waits (up to 30 s) until the first voter leads and every node knows
    /// it: the cell steers its lead there once that node has caught up, and
    /// until then the lead may still move.
    fn settle(&self) {
        let end = Instant::now() + Duration::from_secs(30);
        while !(self.leader() == Some(0) && (1..self.nodes.len()).all(|i| self.knows_leader(i, 1))) {
            assert!(Instant::now() < end, "the first voter did not come to lead in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether node `i`'s /leaderz names node `id` as its group's leader.
    fn knows_leader(&self, i: usize, id: usize) -> bool {
        let Ok(mut c) = Conn::try_connect(self.nodes[i].port()) else { return false };
        c.try_request("GET", "/leaderz", &[], b"").is_ok_and(|r| r.text().contains(&format!("leader is node {id}")))
    }

    /// The node that leads, waiting up to 10 s for one.
    fn wait_leader(&self) -> usize {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(i) = self.leader() {
                return i;
            }
            assert!(Instant::now() < end, "no leader in 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The checker: each acknowledged append once, at its place.
    fn check(&self, got: &[u8]) -> Result<(), String> {
        let mut prev_end = 0;
        for a in &self.acked {
            let end: usize = a.next.rsplit('_').next().unwrap().parse().unwrap();
            let start = end - a.body.len();
            if got.get(start..end) != Some(&a.body[..]) {
                return Err(format!(
                    "{} is not at {start}..{end} ({} bytes served)",
                    String::from_utf8_lossy(&a.body),
                    got.len()
                ));
            }
            if start < prev_end {
                return Err("acknowledgements out of order".into());
            }
            prev_end = end;
            if common::find(&got[end..], &a.body).is_some() || common::find(&got[..start], &a.body).is_some() {
                return Err(format!("{} served twice", String::from_utf8_lossy(&a.body)));
            }
        }
        Ok(())
    }
}

#[test]
fn a_cell_acknowledges_through_its_leader_survives_a_kill_and_catches_up() {
    let mut cell = Cell::start();
    cell.create();
    // Once a leader is known to every node, each append starts at the next
    // node, so followers forward theirs (leadership may still move once,
    // to the first voter, which every group is steered to be led by).
    let end = Instant::now() + Duration::from_secs(30);
    while !cell.leader().is_some_and(|l| (0..3).filter(|&i| i != l).all(|i| cell.knows_leader(i, l + 1))) {
        if Instant::now() >= end {
            for i in 0..3 {
                let r = cell.nodes[i].conn().request("GET", "/leaderz", &[], b"");
                eprintln!("node {}: /leaderz {}", i + 1, r.summary());
            }
            panic!("no leader known to every node after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for i in 0..99 {
        cell.append(&format!("{i}"), Duration::from_secs(10)).expect("append");
    }
    assert!(cell.through.iter().all(|&n| n >= 20), "acknowledged through each node: {:?}", cell.through);
    let forwarded = |direction: &str| -> f64 {
        let name = format!("ringstream_cell_forwarded_requests_total{{shard=\"0\",direction=\"{direction}\"}}");
        (0..3).map(|i| cell.nodes[i].metrics().into_iter().find(|(k, _)| *k == name).map_or(0.0, |(_, v)| v)).sum()
    };
    // About 2 in 3 appends start at a follower (and a follower's reads at
    // its tail are forwarded too).
    let (sent, ran) = (forwarded("to_leader"), forwarded("from_follower"));
    assert!(sent >= 50.0 && ran >= 50.0, "forwarded {sent}, run for followers {ran}");
    let leader = cell.wait_leader();
    for i in 0..3 {
        cell.serves_all(i);
    }
    // The leader killed: a survivor acknowledges within seconds.
    cell.nodes[leader].kill9();
    cell.up[leader] = false;
    let killed = Instant::now();
    let new = cell.append("after the kill", Duration::from_secs(20)).expect("no survivor acknowledged in 20 s");
    let failover = killed.elapsed();
    eprintln!("leader {} killed; first acknowledgement through node {} after {failover:?}", leader + 1, new + 1);
    assert!(failover < Duration::from_secs(5), "failover took {failover:?}");
    for i in 0..50 {
        if cell.append(&format!("then {i}"), Duration::from_secs(10)).is_none() {
            for n in (0..3).filter(|&n| cell.up[n]) {
                eprintln!("--- node {} log:\n{}", n + 1, cell.nodes[n].log_tail());
            }
            panic!("append {i} after the kill not acknowledged in 10 s");
        }
    }
    // The killed node comes back and catches up.
    cell.nodes[leader].start_again();
    cell.up[leader] = true;
    for i in 0..3 {
        cell.serves_all(i);
    }
}

/// Five real nodes: the leader and another killed, the other three go on
/// acknowledging; a third killed, and the two left answer an append 503
/// with `Retry-After` within the timeout while still serving what was
/// committed. The disk of one of the three down is lost: the appends made
/// while two were down are then held by two of five only; it comes back
/// with `--cell-join` (copying from the two running), the other two
/// (stale) come back too, and no acknowledged append is lost: every node
/// serves every one (the stale pair cannot elect one of theirs without
/// the two holding them, and the node that lost its data votes for no
/// one holding a log before it caught up).
#[test]
fn a_cell_of_five_survives_two_down_and_acknowledges_nothing_with_three_down() {
    let mut cell = Cell::of(5, &["--segment-bytes", "65536"]);
    cell.create();
    let big = "f".repeat(2000);
    for i in 0..50 {
        cell.append(&format!("{i} {big}"), Duration::from_secs(10)).expect("append");
    }
    cell.settle();
    for i in [0, 1] {
        cell.nodes[i].kill9();
        cell.up[i] = false;
    }
    let killed = Instant::now();
    let by = cell.append("two of five down", Duration::from_secs(20)).expect("three of five acknowledge");
    eprintln!("nodes 1 and 2 (the leader) killed: node {} acknowledged after {:?}", by + 1, killed.elapsed());
    for i in 0..20 {
        cell.append(&format!("on three of five {i} {big}"), Duration::from_secs(10)).expect("append");
    }
    cell.nodes[2].kill9();
    cell.up[2] = false;
    let asked = Instant::now();
    let r = cell.nodes[3].conn().request("POST", STREAM, &[("content-type", "text/plain")], b"no majority");
    assert_eq!(r.status, 503, "two of five: {}", r.summary());
    assert!(r.header("retry-after").is_some(), "a 503 without Retry-After");
    assert!(asked.elapsed() < Duration::from_secs(12), "answered after {:?}", asked.elapsed());
    for i in [3, 4] {
        cell.serves_all(i);
    }
    wipe(&cell, 2);
    cell.nodes[2].add_args(&["--cell-join"]);
    for i in [2, 0, 1] {
        cell.nodes[i].start_again();
        cell.up[i] = true;
    }
    cell.append("all five back", Duration::from_secs(30)).expect("no acknowledgement in 30 s with all five back");
    for i in 0..5 {
        cell.serves_all(i);
    }
}

#[test]
fn a_leader_without_its_followers_acknowledges_nothing_and_serves_what_was_committed() {
    let (mut cell, leader) = Cell::with_appends(20);
    for i in (0..3).filter(|&i| i != leader) {
        cell.nodes[i].kill9();
        cell.up[i] = false;
    }
    let asked = Instant::now();
    let mut c = cell.nodes[leader].conn();
    let r = c.request("POST", STREAM, &[("content-type", "text/plain")], b"<alone>");
    assert_eq!(r.status, 503, "a leader alone acknowledged: {}", r.summary());
    assert!(r.header("retry-after").is_some(), "503 without Retry-After");
    assert!(asked.elapsed() < Duration::from_secs(10), "the 503 took {:?}", asked.elapsed());
    cell.serves_all(leader);
}

#[test]
fn a_follower_cut_off_from_its_leader_answers_writes_503_within_10_s() {
    let (mut cell, leader) = Cell::with_appends(20);
    let alone = (0..3).find(|&i| i != leader).unwrap();
    for i in (0..3).filter(|&i| i != alone) {
        cell.nodes[i].kill9();
        cell.up[i] = false;
    }
    for attempt in 0..2 {
        let asked = Instant::now();
        let r = cell.nodes[alone].conn().request("POST", STREAM, &[("content-type", "text/plain")], b"<cut off>");
        assert_eq!(r.status, 503, "attempt {attempt}: a lone follower acknowledged: {}", r.summary());
        assert!(r.header("retry-after").is_some(), "503 without Retry-After");
        assert!(asked.elapsed() < Duration::from_secs(10), "attempt {attempt}: the 503 took {:?}", asked.elapsed());
    }
    cell.serves_all(alone);
}

/// The streams a node holds, from its `ringstream_streams` gauges.
fn streams_held(node: &Server) -> f64 {
    node.metrics().iter().filter(|(k, _)| k.starts_with("ringstream_streams{")).map(|(_, v)| v).sum()
}

#[test]
fn a_stream_past_its_ttl_is_expired_by_the_leader_and_on_every_node_untouched() {
    let (cell, leader) = Cell::with_appends(5);
    let mut c = cell.nodes[leader].conn();
    let r = c.request("PUT", "/v1/stream/short-lived", &[("content-type", "text/plain"), ("stream-ttl", "1")], b"x");
    assert_eq!(r.status, 201, "{}", r.summary());
    // Every node holds both streams once it has applied the create.
    let end = Instant::now() + Duration::from_secs(10);
    while (0..3).any(|i| streams_held(&cell.nodes[i]) != 2.0) {
        assert!(Instant::now() < end, "the create did not reach every node");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing touches the stream: its expiry comes from the leader's sweep,
    // a delete record every replica applies.
    let end = Instant::now() + Duration::from_secs(15);
    while (0..3).any(|i| streams_held(&cell.nodes[i]) != 1.0) {
        let held: Vec<f64> = (0..3).map(|i| streams_held(&cell.nodes[i])).collect();
        assert!(Instant::now() < end, "15 s after a 1 s TTL the nodes hold {held:?} streams, not 1 each");
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = cell.nodes[(leader + 1) % 3].conn().request("GET", "/v1/stream/short-lived?offset=-1", &[], b"");
    assert_eq!(r.status, 404, "an expired stream read through a follower: {}", r.summary());
    cell.serves_all((leader + 2) % 3);
}

/// Until `limit`: `method` on `path` through the nodes that are up, each
/// try starting at the next node, until one answers other than 503 (or
/// cannot be reached); that answer's status.
fn through_any(cell: &Cell, method: &str, path: &str, body: &[u8], limit: Duration) -> u16 {
    let end = Instant::now() + limit;
    let mut tries = 0usize;
    while Instant::now() < end {
        tries += 1;
        let i = tries % 3;
        if !cell.up[i] {
            continue;
        }
        let Ok(mut c) = Conn::try_connect(cell.nodes[i].port()) else { continue };
        let Ok(r) = c.try_request(method, path, &[("content-type", "text/plain")], body) else { continue };
        if r.status != 503 {
            return r.status;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    503
}

#[test]
fn streams_in_use_outlive_their_ttl_through_follower_reads_and_a_failover() {
    let (mut cell, leader) = Cell::with_appends(1);
    let follower = (leader + 1) % 3;
    let mut c = cell.nodes[leader].conn();
    for name in ["written", "read"] {
        let r = c.request(
            "PUT",
            &format!("/v1/stream/{name}"),
            &[("content-type", "text/plain"), ("stream-ttl", "4")],
            b"x",
        );
        assert_eq!(r.status, 201, "{}", r.summary());
    }
    // For 6 s (past the 4 s window): "written" is appended to through any
    // node, "read" only read, live, through a follower (served there, never
    // forwarded): the leader must hear of those reads.
    let end = Instant::now() + Duration::from_secs(6);
    while Instant::now() < end {
        let status = through_any(&cell, "POST", "/v1/stream/written", b"w", Duration::from_secs(5));
        assert!(status == 200 || status == 204, "an append to a stream in use answered {status}");
        let r = cell.nodes[follower].conn().request("GET", "/v1/stream/read?offset=-1&live=long-poll", &[], b"");
        assert_eq!(r.status, 200, "a stream read through a follower every 300 ms: {}", r.summary());
        std::thread::sleep(Duration::from_millis(300));
    }
    // The leader dies. Its successor knew "written" only from the records
    // it applied: their write times, not its creation, say when it was used.
    cell.nodes[leader].kill9();
    cell.up[leader] = false;
    let status = through_any(&cell, "POST", "/v1/stream/written", b"after", Duration::from_secs(20));
    assert!(status == 200 || status == 204, "the first append after the failover answered {status}");
    let status = through_any(&cell, "GET", "/v1/stream/read?offset=-1", b"", Duration::from_secs(10));
    assert_eq!(status, 200, "the stream read through a follower, after the failover");
}

/// `method` on `path` through node `i`, with `Stream-Incarnation: token`
/// if given, retried while it answers 503 (no leader yet, or it moved).
fn send(cell: &Cell, i: usize, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> common::Response {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let mut headers = vec![("content-type", "text/plain")];
        headers.extend(token.map(|t| ("stream-incarnation", t)));
        let r = cell.nodes[i].conn().request(method, path, &headers, body);
        if r.status != 503 || Instant::now() > end {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_stream_incarnation_is_one_token_on_every_node_and_checked_on_the_leader() {
    let (cell, leader) = Cell::with_appends(2);
    let path = "/v1/stream/again";
    let old = send(&cell, leader, "PUT", path, None, b"first").must("stream-incarnation").to_string();
    // Every node names the stream alike, from the records it applied (a
    // live read is served by the node itself).
    let live = format!("{path}?offset=-1&live=long-poll");
    for i in 0..3 {
        let r = send(&cell, i, "GET", &live, Some(&old), b"");
        assert_eq!((r.status, r.header("stream-incarnation")), (200, Some(old.as_str())), "node {}", i + 1);
    }
    assert_eq!(send(&cell, leader, "DELETE", path, None, b"").status, 204);
    let new = send(&cell, leader, "PUT", path, None, b"second").must("stream-incarnation").to_string();
    assert_ne!(new, old, "a re-created path is a new creation");
    for i in 0..3 {
        // At once, through any node: a follower that has not applied the
        // re-create yet must not refuse the current token (the leader decides).
        let r = send(&cell, i, "GET", &format!("{path}?offset=-1"), Some(&new), b"");
        assert!(r.status == 200 && r.text().starts_with("second"), "node {}: {}", i + 1, r.summary());
        // A write naming the old creation is refused wherever it is sent,
        // and writes nothing; one naming the current creation is taken.
        let r = send(&cell, i, "POST", path, Some(&old), b"lost");
        assert_eq!(r.status, 412, "node {}: {}", i + 1, r.summary());
        let r = send(&cell, i, "POST", path, Some(&new), b"+");
        assert_eq!(r.status, 204, "node {}: {}", i + 1, r.summary());
    }
    let r = send(&cell, leader, "GET", &format!("{path}?offset=-1"), None, b"");
    assert_eq!(r.text(), "second+++", "only the appends naming the current creation were written");
}

/// The cell steers its lead to the first voter once that voter holds the
/// whole log. Writes that reach the old leader while it hands the lead over
/// are discarded unproposed; the old leader runs them again on the new one,
/// so a client sending only to it sees no failure.
#[test]
fn a_hand_over_of_the_lead_fails_no_write() {
    let (mut cell, first) = Cell::with_appends(1);
    cell.nodes[first].kill9();
    cell.up[first] = false;
    cell.append("after the kill", Duration::from_secs(20)).expect("no survivor acknowledged in 20 s");
    let interim = cell.wait_leader();
    cell.nodes[first].start_again();
    cell.up[first] = true;
    let mut c = cell.nodes[interim].conn();
    let (end, mut handed, mut failed) = (Instant::now() + Duration::from_secs(30), None, Vec::new());
    for n in 0.. {
        let body = format!("<{n}>").into_bytes();
        let r = c.request("POST", STREAM, &[("content-type", "text/plain")], &body);
        match r.status {
            200 | 204 => cell.acked.push(Acked { body, next: r.sno() }),
            _ => failed.push(r.summary()),
        }
        if handed.is_none() && n % 10 == 0 && cell.knows_leader(interim, first + 1) {
            handed = Some(Instant::now());
        }
        if handed.is_some_and(|t| t.elapsed() > Duration::from_secs(1)) {
            break;
        }
        assert!(Instant::now() < end, "the lead did not go back to node {} in 30 s", first + 1);
    }
    eprintln!("{} appends through node {} across the hand-over", cell.acked.len(), interim + 1);
    assert!(failed.is_empty(), "{} appends failed across the hand-over, the first: {}", failed.len(), failed[0]);
    for i in 0..3 {
        cell.serves_all(i);
    }
}

/// Empties node `i`'s data directory while it is down: a lost disk.
fn wipe(cell: &Cell, i: usize) {
    let dir = cell.nodes[i].data_dir();
    std::fs::remove_dir_all(&dir).expect("removing the data directory");
    std::fs::create_dir_all(&dir).expect("creating it empty");
}

/// Node 2 falls behind while node 1 and node 3 acknowledge appends; then
/// node 1 dies and node 3 comes back with its data lost. Node 3 could give
/// node 2 (stale) the vote it forgot it owes nobody: no leader may come of
/// the two, or the appends only node 1 holds would be lost. Node 1 returns,
/// leads, and every node serves every acknowledged append.
#[test]
fn a_voter_that_lost_its_data_elects_no_stale_leader() {
    let (mut cell, _) = Cell::with_appends(10);
    cell.nodes[1].kill9();
    cell.up[1] = false;
    for i in 0..20 {
        cell.append(&format!("while node 2 is down {i}"), Duration::from_secs(10)).expect("append");
    }
    cell.nodes[0].kill9();
    cell.up[0] = false;
    cell.nodes[2].kill9();
    wipe(&cell, 2);
    for i in [1, 2] {
        cell.nodes[i].start_again();
        cell.up[i] = true;
    }
    // Twenty election timeouts and more.
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if let Some(l) = cell.leader() {
            panic!("node {} leads without node 1: the 20 appends only node 1 holds are lost", l + 1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cell.nodes[0].start_again();
    cell.up[0] = true;
    cell.append("node 1 is back", Duration::from_secs(20)).expect("no acknowledgement in 20 s");
    for i in 0..3 {
        cell.serves_all(i);
    }
}

/// Node 3 comes back with its data lost while node 1 leads: the leader's
/// record of node 3 says it holds entries it no longer has. The node does
/// not stop (raft-rs would, told to commit entries it lacks), it is caught
/// up (the lead goes elsewhere for it), and it votes again once caught up.
#[test]
fn a_voter_that_lost_its_data_while_the_cell_runs_is_caught_up() {
    let (mut cell, _) = Cell::with_appends(30);
    cell.nodes[2].kill9();
    wipe(&cell, 2);
    cell.nodes[2].start_again();
    for i in 0..30 {
        cell.append(&format!("after the wipe {i}"), Duration::from_secs(10)).expect("append");
    }
    // Node 3 holds the log again (serving it is not enough: a follower's
    // reads at the tail are confirmed by the leader, which sends its data).
    assert!(caught_up(&cell, 2) < Duration::from_secs(10), "node 3 has not caught up in 10 s");
    for i in 0..3 {
        cell.serves_all(i);
    }
    votes_again(&mut cell);
}

/// Node 3 votes again: with node 1 killed, nodes 2 and 3 elect a leader,
/// which acknowledges an append, and both serve every acknowledged one.
fn votes_again(cell: &mut Cell) {
    cell.nodes[0].kill9();
    cell.up[0] = false;
    cell.append("without node 1", Duration::from_secs(20)).expect("no acknowledgement in 20 s");
    for i in [1, 2] {
        cell.serves_all(i);
    }
}

/// Waits (60 s at most) until node `node`'s commit index reaches the
/// highest of the others' up; the time it took.
fn caught_up(cell: &Cell, node: usize) -> Duration {
    let started = Instant::now();
    let commit = |i: usize| common::cell::commit_index(&cell.nodes[i]);
    loop {
        let others = (0..3).filter(|&i| i != node && cell.up[i]).map(commit).max().unwrap_or(0);
        if others > 0 && commit(node) >= others {
            return started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(60) {
            eprintln!("--- node {} log:\n{}", node + 1, cell.nodes[node].log_tail());
            panic!("node {} has not caught up in 60 s", node + 1);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The sealed segments, and their bytes, `node` copied at boot.
fn shipped(node: &Server) -> (f64, f64) {
    let segments = metric(node, "ringstream_cell_shipped_segments_total{shard=\"0\"}");
    (segments, metric(node, "ringstream_cell_shipped_bytes_total{shard=\"0\"}"))
}

fn metric(node: &Server, name: &str) -> f64 {
    node.metrics().into_iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no {name}")).1
}

/// Node 3 loses its disk while the cell holds a log of many sealed
/// segments (64 KiB each): it comes back empty and, before its log opens,
/// copies its peers' sealed segments whole (segment shipping) instead of
/// having every entry replayed to it, while appends go on. It counts what
/// it copied, its segment files are byte for byte its peers', it serves
/// every acknowledged append, and it votes again once caught up.
#[test]
fn a_voter_that_lost_its_disk_gets_its_peers_sealed_segments_whole() {
    let mut cell = Cell::with_segments(300);
    cell.nodes[2].kill9();
    wipe(&cell, 2);
    let restarted = Instant::now();
    cell.nodes[2].start_again();
    for i in 0..20 {
        cell.append(&format!("while node 3 comes back {i}"), Duration::from_secs(10)).expect("append");
    }
    let took = caught_up(&cell, 2);
    let (segments, bytes) = shipped(&cell.nodes[2]);
    eprintln!(
        "node 3 copied {segments} sealed segments ({bytes} bytes) at boot and caught up {:?} after its restart ({took:?} after the 20 appends)",
        restarted.elapsed()
    );
    assert!(segments >= 10.0, "{segments} segments shipped: it replayed instead");
    assert!(bytes >= segments * 60_000.0, "{bytes} bytes for {segments} segments");
    // The copies, the first segment files, are its peers' bytes.
    let mine = segment_files(&cell, 2);
    for other in [0, 1] {
        let theirs = segment_files(&cell, other);
        let common: Vec<_> = mine.iter().filter(|(n, _)| theirs.iter().any(|(m, _)| m == n)).collect();
        assert!(common.len() as f64 >= segments, "node 3 and node {} share {} segment files", other + 1, common.len());
        for (name, bytes) in common.iter().take(segments as usize) {
            let theirs = &theirs.iter().find(|(m, _)| m == name).unwrap().1;
            assert!(bytes == theirs, "segment {name} differs between node 3 and node {}", other + 1);
        }
    }
    for i in 0..3 {
        cell.serves_all(i);
    }
    votes_again(&mut cell);
}

/// Node `i`'s segment files (shard 0), by name, sorted.
fn segment_files(cell: &Cell, i: usize) -> Vec<(String, Vec<u8>)> {
    common::cell::segment_files(&cell.nodes[i].data_dir())
}

/// A node's host is lost and its replacement, under the same id, listens
/// for its peers on another address (here another port): the peers are
/// restarted one at a time with the new `--cell` list (followers first,
/// appends going on between), and the replacement starts empty with
/// `--cell-join`: it copies its peers' sealed segments, catches up, serves
/// every acknowledged append, and votes again. The time and the bytes
/// copied are printed.
#[test]
fn a_node_replaced_on_another_address_under_its_id_catches_up() {
    let mut cell = Cell::with_segments(100);
    cell.nodes[2].kill9();
    cell.up[2] = false;
    wipe(&cell, 2);
    let voters = cell.nodes[0].arg("--cell").expect("a --cell list").to_string();
    let old = voters.split(',').find(|v| v.starts_with("3@")).expect("node 3 in --cell").to_string();
    let moved = format!("3@127.0.0.1:{}", common::cell::free_ports(1)[0]);
    let voters = voters.replace(&old, &moved);
    for i in [1, 0] {
        let (status, took) = cell.nodes[i].terminate(Duration::from_secs(30));
        assert!(status.is_some_and(|s| s.success()), "node {} did not stop in {took:?}", i + 1);
        cell.nodes[i].set_arg("--cell", &voters);
        cell.nodes[i].start_again();
        for k in 0..10 {
            cell.append(&format!("node {} restarted {k}", i + 1), Duration::from_secs(20)).expect("append");
        }
    }
    cell.nodes[2].set_arg("--cell", &voters);
    cell.nodes[2].add_args(&["--cell-join"]);
    let restarted = Instant::now();
    cell.nodes[2].start_again();
    cell.up[2] = true;
    for k in 0..20 {
        cell.append(&format!("while node 3 joins {k}"), Duration::from_secs(20)).expect("append");
    }
    caught_up(&cell, 2);
    let (segments, bytes) = shipped(&cell.nodes[2]);
    eprintln!(
        "node 3 moved from {old} to {moved}: copied {segments} segments ({bytes} bytes) and caught up {:?} after its start",
        restarted.elapsed()
    );
    assert!(segments >= 5.0, "node 3 copied {segments} segments");
    for i in 0..3 {
        cell.serves_all(i);
    }
    votes_again(&mut cell);
}

/// A stream of 300 appends of 4 KB (in 64 KiB segments) is deleted, then
/// the cell's stream is written, while node 3 is down: no segment goes
/// while it lacks their entries (it would need them). Once it is back the
/// deleted stream's segments, the oldest, go on every node when the
/// leader's reclaim record commits, and
/// every node holds the same segment files, byte for byte. The cell
/// serves every acknowledged append, also after all three restart (their
/// replay sees the record; no stream comes back), and a node whose disk
/// is lost afterwards copies the segments left (from a later one than
/// the first) and catches up.
#[test]
fn a_deleted_streams_segments_go_on_every_node_through_the_log() {
    let mut cell = Cell::start_with(&["--segment-bytes", "65536"]);
    cell.settle();
    // Node 3 is down while the stream is written and deleted: what it
    // lacks holds reclamation back until it is back and caught up.
    cell.nodes[2].kill9();
    cell.up[2] = false;
    let mut c = cell.nodes[0].conn();
    let junk = "/v1/stream/junk";
    assert_eq!(c.request("PUT", junk, &[("content-type", "text/plain")], b"").status, 201);
    let big = "y".repeat(4000);
    for i in 0..300 {
        let r = c.request("POST", junk, &[("content-type", "text/plain")], format!("{i} {big}").as_bytes());
        assert_eq!(r.status, 204, "{}", r.summary());
    }
    assert_eq!(c.request("DELETE", junk, &[], b"").status, 204);
    cell.create();
    for i in 0..30 {
        cell.append(&format!("{i} {big}"), Duration::from_secs(10)).expect("append");
    }
    std::thread::sleep(Duration::from_secs(3));
    for i in [0, 1] {
        let first = segment_files(&cell, i)[0].0.clone();
        assert!(first.starts_with("0000000000000000"), "node {} deleted segment 0 while node 3 lacked it", i + 1);
    }
    cell.nodes[2].start_again();
    cell.up[2] = true;
    let end = Instant::now() + Duration::from_secs(30);
    let gone = |cell: &Cell| {
        (0..3).all(|i| segment_files(cell, i).first().is_some_and(|(n, _)| !n.starts_with("0000000000000000")))
    };
    while !gone(&cell) {
        assert!(Instant::now() < end, "segment 0 is still on some node after 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    caught_up(&cell, 2);
    // Every node deletes what the records named, each in its own pass.
    let names = |f: &[(String, Vec<u8>)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    let end = Instant::now() + Duration::from_secs(15);
    let files = loop {
        let files: Vec<_> = (0..3).map(|i| segment_files(&cell, i)).collect();
        if files.iter().all(|f| names(f) == names(&files[0])) {
            break files;
        }
        assert!(
            Instant::now() < end,
            "the nodes hold other segments: {:?}",
            files.iter().map(|f| names(f)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("after the delete every node holds {:?}", names(&files[0]));
    let reclaimed: Vec<f64> =
        (0..3).map(|i| metric(&cell.nodes[i], "ringstream_segments_reclaimed_total{shard=\"0\"}")).collect();
    assert!(reclaimed.iter().all(|&n| n >= 10.0), "segments reclaimed per node: {reclaimed:?}");
    assert!(reclaimed.iter().all(|&n| n == reclaimed[0]), "segments reclaimed per node: {reclaimed:?}");
    for other in [1, 2] {
        for ((name, a), (_, b)) in files[0].iter().zip(&files[other]).take(files[0].len() - 2) {
            assert!(a == b, "segment {name} differs between node 1 and node {}", other + 1);
        }
    }
    for i in 0..3 {
        cell.serves_all(i);
        let r = cell.nodes[i].conn().request("GET", junk, &[], b"");
        assert_eq!(r.status, 404, "node {}: the deleted stream answers {}", i + 1, r.status);
    }
    // All three restart: the replay sees the reclaim record, nothing comes back.
    for i in 0..3 {
        cell.nodes[i].kill9();
    }
    for i in 0..3 {
        cell.nodes[i].start_again();
    }
    cell.append("after the restart", Duration::from_secs(20)).expect("no acknowledgement in 20 s");
    for i in 0..3 {
        cell.serves_all(i);
        assert_eq!(cell.nodes[i].conn().request("GET", junk, &[], b"").status, 404);
    }
    // A lost disk now: the copy starts after the reclaimed segments.
    cell.nodes[2].kill9();
    wipe(&cell, 2);
    cell.nodes[2].start_again();
    if cell.append("after the wipe", Duration::from_secs(20)).is_none() {
        for n in 0..3 {
            eprintln!("--- node {} log:\n{}", n + 1, cell.nodes[n].log_tail());
        }
        panic!("no acknowledgement in 20 s after node 3's wipe");
    }
    caught_up(&cell, 2);
    let copied = metric(&cell.nodes[2], "ringstream_cell_shipped_segments_total{shard=\"0\"}");
    assert!(copied >= 1.0, "node 3 copied {copied} segments");
    assert!(!segment_files(&cell, 2)[0].0.starts_with("0000000000000000"), "node 3 holds segment 0 again");
    for i in 0..3 {
        cell.serves_all(i);
    }
    lost_disk_while_the_peers_are_down(&mut cell);
}

/// All three down, node 3's disk lost, node 3 started first with
/// `--cell-join`: it waits for a peer to answer instead of starting empty
/// (its peers reclaimed the entries it would need: nothing could give
/// them to it). Nodes 1 and 2 started 3 s later: it copies their segments
/// and catches up.
fn lost_disk_while_the_peers_are_down(cell: &mut Cell) {
    for i in 0..3 {
        cell.nodes[i].kill9();
    }
    wipe(cell, 2);
    cell.nodes[2].add_args(&["--cell-join"]);
    let (first_two, third) = cell.nodes.split_at_mut(2);
    std::thread::scope(|s| {
        let alone = s.spawn(|| third[0].start_again());
        std::thread::sleep(Duration::from_secs(3));
        assert!(!alone.is_finished(), "node 3 started empty with no peer up (it could never be caught up)");
        for n in first_two.iter_mut() {
            n.start_again();
        }
        alone.join().expect("node 3 starts once a peer answers");
    });
    cell.append("after the peers came back", Duration::from_secs(20)).expect("no acknowledgement in 20 s");
    caught_up(cell, 2);
    let copied = metric(&cell.nodes[2], "ringstream_cell_shipped_segments_total{shard=\"0\"}");
    assert!(copied >= 1.0, "node 3 copied {copied} segments");
    for i in 0..3 {
        cell.serves_all(i);
    }
}

/// The cell's stream is created, another stream fills the first segments
/// (1 MiB each), the cell's stream gets 18 MB, then the other stream is
/// deleted: the oldest segments go, the cell stream's create moved by a
/// state record re-logged after its appends. A node whose disk is lost then copies the segments
/// left and applies them in more than one batch of committed records
/// (CELL_APPLY_BYTES_PER_TURN): the appends of the first batch wait for
/// the state record in a later one, and it serves every append.
#[test]
fn a_node_given_reclaimed_segments_keeps_appends_whose_create_is_gone() {
    let mut cell = Cell::start_with(&["--segment-bytes", "1048576"]);
    cell.create();
    cell.settle();
    let mut c = cell.nodes[0].conn();
    let junk = "/v1/stream/junk";
    assert_eq!(c.request("PUT", junk, &[("content-type", "text/plain")], b"").status, 201);
    let big = "z".repeat(200_000);
    for _ in 0..12 {
        assert_eq!(c.request("POST", junk, &[("content-type", "text/plain")], big.as_bytes()).status, 204);
    }
    for i in 0..90 {
        cell.append(&format!("{i} {big}"), Duration::from_secs(10)).expect("append");
    }
    // Only now are the first segments free: the create is re-logged after
    // the appends.
    assert_eq!(c.request("DELETE", junk, &[], b"").status, 204);
    let end = Instant::now() + Duration::from_secs(30);
    while !(0..3).all(|i| segment_files(&cell, i).first().is_some_and(|(n, _)| !n.starts_with("0000000000000000"))) {
        assert!(Instant::now() < end, "segment 0 is still on some node after 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    caught_up(&cell, 2);
    cell.nodes[2].kill9();
    wipe(&cell, 2);
    cell.nodes[2].start_again();
    let took = caught_up(&cell, 2);
    let bytes = metric(&cell.nodes[2], "ringstream_cell_shipped_bytes_total{shard=\"0\"}");
    eprintln!("node 3 copied {bytes} bytes and caught up in {took:?}");
    assert!(bytes > 17e6, "node 3 copied {bytes} bytes");
    cell.serves_all(2);
}

/// Two snapshots published through the leader, the followers caught up,
/// then the older one deleted: its state record lists the newer one, whose
/// blob a follower applied in an earlier batch of committed records. The
/// leader killed, the two followers still serve it (they kept what they
/// held), the new leader included.
#[test]
fn a_snapshot_deleted_leaves_the_other_on_every_follower() {
    let mut cell = Cell::start();
    cell.create();
    cell.settle();
    let mut c = cell.nodes[0].conn();
    let octet = ("content-type", "application/octet-stream");
    assert_eq!(c.request("PUT", "/ds/snapb", &[], b"").status, 201);
    let path = "/ds/snapb/s";
    assert_eq!(c.request("PUT", path, &[octet], b"").status, 201);
    let publish = |c: &mut Conn, data: &[u8], snap: &[u8]| -> String {
        let offset = c.request("POST", path, &[octet], data).sno();
        let r = c.request("PUT", &format!("{path}/snapshot/{offset}"), &[octet], snap);
        assert_eq!(r.status, 204, "publish: {}", r.summary());
        offset
    };
    let first = publish(&mut c, b"aaaa", b"snapshot one");
    let second = publish(&mut c, b"bbbb", b"snapshot two");
    caught_up(&cell, 1);
    caught_up(&cell, 2);
    let r = c.request("DELETE", &format!("{path}/snapshot/{first}"), &[], b"");
    assert_eq!(r.status, 204, "delete: {}", r.summary());
    caught_up(&cell, 1);
    caught_up(&cell, 2);
    // A follower's 404 would go to the leader: without it, one of them
    // leads and answers from what it applied.
    cell.nodes[0].kill9();
    cell.up[0] = false;
    cell.append("without node 1", Duration::from_secs(20)).expect("no acknowledgement in 20 s");
    for i in [1, 2] {
        let r = cell.nodes[i].conn().request("GET", &format!("{path}/snapshot/{second}"), &[], b"");
        assert_eq!((r.status, &r.body[..]), (200, &b"snapshot two"[..]), "node {}: {}", i + 1, r.summary());
        let r = cell.nodes[i].conn().request("GET", &format!("{path}/snapshot/{first}"), &[], b"");
        assert_eq!(r.status, 404, "node {}: the deleted snapshot: {}", i + 1, r.summary());
    }
}

/// The tail a webhook delivery names for the cell's stream, and its key id.
fn delivered(d: &common::webhook::Delivered) -> (String, String) {
    let b = d.json();
    let stream = b["streams"].as_array().unwrap().iter().find(|s| s["path"] == "cell").expect("the stream");
    let kid = d.header("webhook-signature").unwrap().split(',').nth(1).unwrap().to_string();
    (stream["tail_offset"].as_str().unwrap().to_string(), kid)
}

/// The first delivery that names `tail` for the cell's stream, waiting up
/// to `limit` for it.
fn delivery_of(receiver: &common::webhook::Receiver, tail: &str, limit: Duration) -> common::webhook::Delivered {
    let end = Instant::now() + limit;
    let mut seen = 0;
    loop {
        let got = receiver.got.lock().unwrap().clone();
        if let Some(d) = got[seen..].iter().find(|d| delivered(d).0 == tail) {
            return d.clone();
        }
        seen = got.len();
        assert!(Instant::now() < end, "no delivery names the tail {tail} in {limit:?} ({seen} deliveries)");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The JWK set node `i` publishes.
fn jwks(cell: &Cell, i: usize) -> serde_json::Value {
    let r = send(cell, i, "GET", "/v1/stream/__ds/jwks.json", None, b"");
    assert_eq!(r.status, 200, "node {}: {}", i + 1, r.summary());
    serde_json::from_slice(&r.body).unwrap()
}

/// Subscriptions in a cell: one made through a follower (forwarded to the
/// leader) is delivered by the leader, signed with the key every node
/// publishes; once the leader is killed, an append through a survivor is
/// delivered by the new leader, under the same key id (every node derives
/// the key from the cell secret).
#[test]
fn a_webhook_subscription_is_delivered_by_whichever_node_leads() {
    let (mut cell, leader) = Cell::with_appends(1);
    let receiver = common::webhook::Receiver::start(r#"{"done":true}"#);
    let follower = (leader + 1) % 3;
    let sub =
        format!(r#"{{"type":"webhook","pattern":"*","webhook":{{"url":"{}"}},"lease_ttl_ms":1000}}"#, receiver.url);
    let r = send(&cell, follower, "PUT", "/v1/stream/__ds/subscriptions/s1", None, sub.as_bytes());
    assert_eq!(r.status, 201, "through node {}: {}", follower + 1, r.summary());
    let r = send(&cell, follower, "POST", STREAM, None, b"<to deliver>");
    assert!(r.status == 200 || r.status == 204, "{}", r.summary());
    let acked = r.sno();
    let first = delivery_of(&receiver, &acked, Duration::from_secs(10));
    let kid = delivered(&first).1;
    for i in 0..3 {
        assert!(common::webhook::verify(&jwks(&cell, i), &first), "node {}'s JWK set does not verify it", i + 1);
    }
    cell.nodes[leader].kill9();
    cell.up[leader] = false;
    let survivor = cell.append("after the kill", Duration::from_secs(20)).expect("no survivor acknowledged");
    let acked = cell.acked.last().unwrap().next.clone();
    let last = delivery_of(&receiver, &acked, Duration::from_secs(20));
    assert_eq!(delivered(&last).1, kid, "the new leader signs under the same key id");
    assert!(common::webhook::verify(&jwks(&cell, survivor), &last), "the survivors' JWK set verifies it");
}

/// Appends `body` through node `i`, then at once reads from the start
/// there, by long-poll and by SSE (both connected before the append, both
/// sent as soon as it is acknowledged): the append's answer, the
/// long-poll's, and the SSE catch-up's text up to its first "up to date".
fn append_then_read_live(cell: &Cell, i: usize, body: &str) -> (common::Response, common::Response, String) {
    let port = cell.nodes[i].port();
    let mut long_poll = cell.nodes[i].conn();
    let mut sse = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    sse.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let appended = send(cell, i, "POST", STREAM, None, body.as_bytes());
    let sse_head = format!("GET {STREAM}?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\n\r\n");
    std::io::Write::write_all(&mut sse, sse_head.as_bytes()).expect("send");
    let poll = common::encode_request(port, "GET", &format!("{STREAM}?offset=-1&live=long-poll"), &[], b"");
    long_poll.send_raw(&poll).expect("send");
    let polled = long_poll.read_response(false).expect("the long-poll's answer");
    let text = common::read_sse_until(&mut sse, |t| t.contains("\"upToDate\":true") || t.contains(" 503 "));
    (appended, polled, text)
}

#[test]
fn a_client_reads_its_own_append_live_through_a_follower() {
    let (cell, leader) = Cell::with_appends(2);
    for round in 0..20 {
        let follower = (leader + 1 + round % 2) % 3;
        let body = format!("<mine {round}>");
        let (r, long_poll, sse) = append_then_read_live(&cell, follower, &body);
        assert!(r.status == 200 || r.status == 204, "round {round}: the append: {}", r.summary());
        let acked = r.sno();
        assert_eq!(long_poll.status, 200, "round {round}: {}", long_poll.summary());
        assert_eq!(
            (long_poll.sno(), long_poll.header("stream-up-to-date")),
            (acked.clone(), Some("true")),
            "round {round}: a long-poll through node {} claims the tail short of its own append",
            follower + 1
        );
        assert!(long_poll.text().ends_with(&body), "round {round}: the long-poll lacks the append");
        let tail = format!("\"streamNextOffset\":\"{acked}\"");
        assert!(
            sse.contains(&body) && sse.contains(&tail) && sse.contains("\"upToDate\":true"),
            "round {round}: the SSE catch-up through node {} lacks its own append:\n{sse}",
            follower + 1
        );
    }
    let rounds = |i: usize, outcome: &str| -> f64 {
        let name = format!("ringstream_cell_catch_up_rounds_total{{shard=\"0\",outcome=\"{outcome}\"}}");
        cell.nodes[i].metrics().iter().filter(|(k, _)| *k == name).map(|(_, v)| v).sum()
    };
    for i in (0..3).filter(|&i| i != leader) {
        assert!(rounds(i, "caught_up") >= 10.0, "node {}: {} catch-up rounds", i + 1, rounds(i, "caught_up"));
        assert_eq!(rounds(i, "failed"), 0.0, "node {}: a catch-up failed", i + 1);
    }
    assert_eq!(rounds(leader, "started"), 0.0, "the leader caught up with itself");
}

/// Reads that claim freshness through a follower (a catch-up read that
/// reaches the tail, HEAD, a stream the leader created a moment ago) are
/// answered by the follower itself once it caught up with the leader's
/// commit (a read index round), not forwarded: right after an append
/// acknowledged by the leader, each shows it, and after a create through
/// the leader, a HEAD through a follower finds the stream. The followers
/// forward none of them, and count a catch-up round for each.
#[test]
fn a_follower_answers_fresh_reads_itself_once_caught_up() {
    let (cell, leader) = Cell::with_appends(2);
    let forwarded = |i: usize| -> f64 {
        let name = "ringstream_cell_forwarded_requests_total{shard=\"0\",direction=\"to_leader\"}";
        metric(&cell.nodes[i], name)
    };
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let before: Vec<f64> = followers.iter().map(|&i| forwarded(i)).collect();
    let mut writer = cell.nodes[leader].conn();
    let mut readers: Vec<Conn> = followers.iter().map(|&i| cell.nodes[i].conn()).collect();
    for round in 0..20 {
        let body = format!("<fresh {round}>");
        let r = writer.request("POST", STREAM, &[("content-type", "text/plain")], body.as_bytes());
        assert!(r.status == 200 || r.status == 204, "round {round}: {}", r.summary());
        let acked = r.sno();
        let reader = &mut readers[round % 2];
        let read = reader.request("GET", &format!("{STREAM}?offset=-1"), &[], b"");
        assert_eq!(read.status, 200, "round {round}: {}", read.summary());
        assert_eq!(
            (read.sno(), read.header("stream-up-to-date"), read.text().ends_with(&body)),
            (acked.clone(), Some("true"), true),
            "round {round}: a read at the tail through node {} misses the acknowledged append",
            followers[round % 2] + 1
        );
        let head = reader.request("HEAD", STREAM, &[], b"");
        assert_eq!((head.status, head.sno()), (200, acked), "round {round}: HEAD through a follower");
        let fresh = format!("/v1/stream/fresh-{round}");
        assert_eq!(writer.request("PUT", &fresh, &[("content-type", "text/plain")], b"").status, 201);
        let head = reader.request("HEAD", &fresh, &[], b"");
        assert_eq!(head.status, 200, "round {round}: a stream just created: {}", head.summary());
    }
    for (k, &i) in followers.iter().enumerate() {
        assert_eq!(forwarded(i), before[k], "node {} forwarded reads to the leader", i + 1);
        let caught_up =
            metric(&cell.nodes[i], "ringstream_cell_catch_up_rounds_total{shard=\"0\",outcome=\"caught_up\"}");
        assert!(caught_up >= 10.0, "node {}: {caught_up} catch-up rounds for 30 fresh reads", i + 1);
    }
}

/// A fork's source deleted through a new leader is soft-deleted (F43): the
/// new leader counted the fork's reference from the records it applied as
/// a follower (references are not logged). Once the fork goes, the source
/// goes too.
#[test]
fn a_new_leader_knows_which_sources_forks_still_read() {
    let (mut cell, leader) = Cell::with_appends(2);
    let fork = "/v1/stream/cell-fork";
    let headers = [("content-type", "text/plain"), ("stream-forked-from", STREAM)];
    let r = cell.nodes[leader].conn().request("PUT", fork, &headers, b"");
    assert_eq!(r.status, 201, "the fork: {}", r.summary());
    let inherited = cell.nodes[leader].conn().request("GET", &format!("{fork}?offset=-1"), &[], b"").body;
    // Every node applied the fork's create (a read there serves it).
    for i in 0..3 {
        let end = Instant::now() + Duration::from_secs(10);
        while cell.nodes[i].conn().request("GET", &format!("{fork}?offset=-1"), &[], b"").status != 200 {
            assert!(Instant::now() < end, "node {} never served the fork", i + 1);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    cell.nodes[leader].kill9();
    cell.up[leader] = false;
    let new = cell.wait_leader();
    let r = send(&cell, new, "DELETE", STREAM, None, b"");
    assert_eq!(r.status, 204, "the source's delete through node {}: {}", new + 1, r.summary());
    let r = send(&cell, new, "GET", &format!("{STREAM}?offset=-1"), None, b"");
    assert_eq!(r.status, 410, "the source with a fork was not soft-deleted: {}", r.summary());
    let r = send(&cell, new, "PUT", STREAM, None, b"");
    assert_eq!(r.status, 409, "its path was free while a fork reads it: {}", r.summary());
    let r = send(&cell, new, "GET", &format!("{fork}?offset=-1"), None, b"");
    assert_eq!((r.status, r.body), (200, inherited), "the fork reads what it inherited");
    assert_eq!(send(&cell, new, "DELETE", fork, None, b"").status, 204);
    let end = Instant::now() + Duration::from_secs(10);
    while send(&cell, new, "GET", &format!("{STREAM}?offset=-1"), None, b"").status != 404 {
        assert!(Instant::now() < end, "the source outlived its last fork by 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A bucket's `max_streams` quota holds through a failover: the new leader
/// counts the streams it applied as a follower (they were created through
/// the old one), and a delete through it gives room back.
#[test]
fn a_bucket_quota_holds_through_a_failover() {
    use common::auth::{bearer, Grant, Quota};
    const ADMIN: Grant = Grant { name: "admin", token: "cell-quota-token", buckets: &["*"], rights: &["admin"] };
    let dir = TempDir::new("cell-quota");
    let file = dir.path().join("auth.toml");
    common::auth::write(&file, &[ADMIN], &[Quota { bucket: "cellq", max_streams: Some(3), max_bytes: None }]);
    let mut cell = Cell::start_with(&["--auth-file", file.to_str().unwrap()]);
    cell.settle();
    let auth = bearer(ADMIN.token);
    let call = |cell: &Cell, i: usize, method: &str, path: &str| {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let mut h = vec![("authorization", auth.as_str())];
            if method == "PUT" && path.matches('/').count() > 2 {
                h.push(("content-type", "text/plain"));
            }
            let r = cell.nodes[i].conn().request(method, path, &h, b"");
            if r.status != 503 || Instant::now() > end {
                return r;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(call(&cell, 0, "PUT", "/ds/cellq").status, 201);
    for i in 0..3 {
        assert_eq!(call(&cell, 0, "PUT", &format!("/ds/cellq/s{i}")).status, 201, "stream {i}");
    }
    assert_eq!(call(&cell, 0, "PUT", "/ds/cellq/s3").status, 429, "the fourth stream through the first leader");
    // Every node applied the three creates.
    for i in 1..3 {
        let end = Instant::now() + Duration::from_secs(10);
        while call(&cell, i, "GET", "/ds/cellq/s2?offset=-1").status != 204 {
            assert!(Instant::now() < end, "node {} never served stream s2", i + 1);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    cell.nodes[0].kill9();
    cell.up[0] = false;
    let new = cell.wait_leader();
    let r = call(&cell, new, "PUT", "/ds/cellq/s3");
    assert_eq!(r.status, 429, "the fourth stream through the new leader, node {}: {}", new + 1, r.summary());
    assert_eq!(call(&cell, new, "DELETE", "/ds/cellq/s0").status, 204);
    assert_eq!(call(&cell, new, "PUT", "/ds/cellq/s3").status, 201, "the room a delete gave back");
    assert_eq!(call(&cell, new, "PUT", "/ds/cellq/s4").status, 429, "and no more");
}
