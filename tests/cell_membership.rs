//! Membership through the API, on a cell of three real processes of two
//! shards each (two groups), under a writer appending to a stream of each
//! group through a follower:
//! - a fourth node started with an empty data directory and `--cell-join`
//!   waits to be added, is added through a follower (`POST
//!   /_cell/members/4`), copies its peers' sealed segments, catches up, and
//!   is made a voter in both groups;
//! - the leader of both groups is removed through another follower
//!   (`DELETE /_cell/members/1`), and the others go on without it;
//! - every append the writer saw acknowledged is read back, once each and
//!   in order, through the new node.
//!
//! And a node whose data directory was deleted is replaced the runbook's
//! way (removed, emptied, started with `--cell-join`, added again under its
//! id), under the writer; it serves every acknowledged append.
//!
//! Also: a change already made is answered as made (idempotent), and a
//! body without a peer address is refused.

mod common;

use common::{Response, Server};
use ringstream::protocol::StreamKey;
use ringstream::shard::router::shard_for;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHARDS: usize = 2;

/// A name with `prefix` whose stream is on shard `shard`.
fn stream_on(prefix: &str, shard: usize) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|s| shard_for(&StreamKey { bucket: "_default".into(), stream: s.clone() }, SHARDS) == shard)
        .unwrap()
}

/// `method path` on port `port`, sent again while it answers 503 or does
/// not answer, for at most 30 s.
fn call(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    call_via(&Mutex::new(port), method, path, headers, body)
}

/// [`call`] through whichever port `via` holds at each try (the writer's
/// node may be changed, and the one it used killed, meanwhile).
fn call_via(via: &Mutex<u16>, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let port = *via.lock().unwrap();
        let r = common::Conn::try_connect(port).and_then(|mut c| c.try_request(method, path, headers, body));
        match r {
            Ok(r) if r.status != 503 || Instant::now() > end => return r,
            Err(e) if Instant::now() > end => panic!("{method} {path} on {port}: {e}"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn cellz(port: u16) -> serde_json::Value {
    serde_json::from_slice(&call(port, "GET", "/cellz", &[], b"").body).unwrap_or_default()
}

/// Each group's voters and learners as `port`'s `/cellz` shows them.
fn members(port: u16) -> Vec<(Vec<u64>, Vec<u64>)> {
    let v = cellz(port);
    let ids = |x: &serde_json::Value| x.as_array().map(|a| a.iter().filter_map(|i| i.as_u64()).collect());
    (0..SHARDS)
        .map(|g| {
            (ids(&v["groups"][g]["voters"]).unwrap_or_default(), ids(&v["groups"][g]["learners"]).unwrap_or_default())
        })
        .collect()
}

/// Waits up to `limit` until every group's voters on `port` are `voters`.
fn wait_voters(port: u16, voters: &[u64], limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let now = members(port);
        if now.iter().all(|(v, l)| v == voters && l.is_empty()) {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "voters on {port} are {now:?}, not {voters:?}, after {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Appends `<w N>` to each of `streams` in turn through `port` until
/// `stop`, as an idempotent producer (one per stream), retrying 503s (an
/// append answered 503 may have been taken: its retry is then known as a
/// duplicate); the bodies acknowledged, by stream.
fn write_until(port: Arc<Mutex<u16>>, streams: Vec<String>, stop: Arc<AtomicBool>) -> Vec<Vec<String>> {
    let mut acked = vec![Vec::new(); streams.len()];
    let text = [("content-type", "text/plain")];
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (i, body) = (n % streams.len(), format!("<w{n}>"));
        let (id, seq) = (format!("writer-{i}"), acked[i].len().to_string());
        let headers = [text[0], ("Producer-Id", id.as_str()), ("Producer-Epoch", "0"), ("Producer-Seq", seq.as_str())];
        let r = call_via(&port, "POST", &format!("/v1/stream/{}", streams[i]), &headers, body.as_bytes());
        assert!(matches!(r.status, 200 | 204), "append {n}: {}", r.summary());
        acked[i].push(body);
        std::thread::sleep(Duration::from_millis(5));
    }
    acked
}

/// A cell of three nodes of two shards, a stream in each group holding
/// 60 blocks of 4 KiB (sealed segments to copy), and a writer on both
/// through node 2 (the port it writes through can be changed).
struct Loaded {
    dir: common::TempDir,
    nodes: Vec<Server>,
    streams: Vec<String>,
    stop: Arc<AtomicBool>,
    via: Arc<Mutex<u16>>,
    writer: std::thread::JoinHandle<Vec<Vec<String>>>,
}

const SEGMENTS: [&str; 2] = ["--segment-bytes", "65536"];

fn loaded() -> Loaded {
    let (dir, nodes) = common::cell::start_sharded(3, SHARDS as u16, &SEGMENTS);
    wait_voters(nodes[0].port(), &[1, 2, 3], Duration::from_secs(20));
    let streams: Vec<String> = (0..SHARDS).map(|g| stream_on("joined", g)).collect();
    let text = [("content-type", "text/plain")];
    let block = vec![b'x'; 4096];
    for s in &streams {
        assert_eq!(call(nodes[1].port(), "PUT", &format!("/v1/stream/{s}"), &text, b"").status, 201);
        for _ in 0..60 {
            let r = call(nodes[1].port(), "POST", &format!("/v1/stream/{s}"), &text, &block);
            assert!(matches!(r.status, 200 | 204), "{}", r.summary());
        }
    }
    let (stop, via) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(nodes[1].port())));
    let writer = {
        let (streams, stop, via) = (streams.clone(), stop.clone(), via.clone());
        std::thread::spawn(move || write_until(via, streams, stop))
    };
    std::thread::sleep(Duration::from_secs(1));
    Loaded { dir, nodes, streams, stop, via, writer }
}

impl Loaded {
    /// Stops the writer; checks that every append it saw acknowledged is
    /// read back through `port` once, in order.
    fn check_read_back(self, port: u16) {
        self.stop.store(true, Ordering::Relaxed);
        let acked = self.writer.join().unwrap();
        for (s, acked) in self.streams.iter().zip(&acked) {
            let text = call(port, "GET", &format!("/v1/stream/{s}?offset=-1"), &[], b"").text();
            let mut at = 0;
            for body in acked {
                let found = text[at..].find(body.as_str()).unwrap_or_else(|| panic!("{body} not read back in order"));
                at += found + body.len();
                assert!(!text[at..].contains(body.as_str()), "{body} read back twice");
            }
            assert!(acked.len() > 20, "the writer acknowledged only {} appends to {s}", acked.len());
        }
    }
}

/// Starts `server` (its flags given) in a thread: a joining node says it
/// listens only once added and caught up.
fn start_in_background(mut server: Server) -> std::thread::JoinHandle<Server> {
    std::thread::spawn(move || {
        server.start_again();
        server
    })
}

/// A joining node (flags `args`), started in a thread.
fn join_in_background(args: Vec<String>) -> std::thread::JoinHandle<Server> {
    std::thread::spawn(move || Server::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>()))
}

/// Segments and bytes `node` copied from its peers at boot.
fn shipped(node: &Server) -> (f64, f64) {
    let sum = |what: &str| -> f64 {
        let name = format!("ringstream_cell_shipped_{what}_total");
        node.metrics().iter().filter(|(k, _)| k.starts_with(&name)).map(|(_, v)| v).sum()
    };
    (sum("segments"), sum("bytes"))
}

/// `POST /_cell/members/{id}` through `port`: 200 or 202.
fn add(port: u16, id: u64, peer: &str) {
    let body = format!(r#"{{"peer":"{peer}"}}"#);
    let r =
        call(port, "POST", &format!("/_cell/members/{id}"), &[("content-type", "application/json")], body.as_bytes());
    assert!(matches!(r.status, 200 | 202), "{}", r.summary());
}

#[test]
fn a_node_is_added_through_a_follower_and_the_leader_removed_under_writes() {
    let cell = loaded();
    let ports: Vec<u16> = cell.nodes.iter().map(Server::port).collect();
    let peer = format!("127.0.0.1:{}", common::cell::free_port_runs(1, SHARDS as u16)[0]);
    // It names only node 2 and itself: it learns the others from node 2.
    let node2 = cell.nodes[0].arg("--cell").unwrap().split(',').nth(1).unwrap();
    let secret = cell.dir.path().join("secret").to_str().unwrap().to_string();
    let mut args: Vec<String> = ["--shards", "2", "--node-id", "4", "--cell", &format!("{node2},4@{peer}")]
        .into_iter()
        .map(String::from)
        .collect();
    args.extend(SEGMENTS.iter().map(|a| a.to_string()));
    args.extend(["--cell-secret-file".into(), secret, "--cell-join".into()]);
    let joining = join_in_background(args);
    // It waits to be added: no peer lets it in before.
    std::thread::sleep(Duration::from_secs(1));
    assert!(!joining.is_finished(), "node 4 started before it was added");
    let bad = call(ports[1], "POST", "/_cell/members/4", &[("content-type", "application/json")], b"{}");
    assert_eq!(bad.status, 400, "{}", bad.summary());
    let added_at = Instant::now();
    add(ports[1], 4, &peer);
    let node4 = joining.join().unwrap();
    wait_voters(ports[0], &[1, 2, 3, 4], Duration::from_secs(60));
    let (segments, bytes) = shipped(&node4);
    eprintln!(
        "node 4 a voter in both groups {:?} after the request; it copied {segments} segments, {bytes} bytes",
        added_at.elapsed()
    );
    assert!(segments >= 2.0 && bytes > 65_536.0, "node 4 copied {segments} segments ({bytes} bytes)");
    let again = call(
        ports[2],
        "POST",
        "/_cell/members/4",
        &[("content-type", "application/json")],
        format!(r#"{{"peer":"{peer}"}}"#).as_bytes(),
    );
    assert_eq!(again.status, 200, "an add made already: {}", again.summary());
    // The leader of both groups goes, through node 3; the writer moves to node 4.
    let r = call(ports[2], "DELETE", "/_cell/members/1", &[], b"");
    assert_eq!(r.status, 200, "{}", r.summary());
    *cell.via.lock().unwrap() = node4.port();
    wait_voters(ports[1], &[2, 3, 4], Duration::from_secs(20));
    wait_voters(node4.port(), &[2, 3, 4], Duration::from_secs(20));
    assert_eq!(call(node4.port(), "DELETE", "/_cell/members/1", &[], b"").status, 200, "a removal made already");
    std::thread::sleep(Duration::from_secs(1));
    cell.check_read_back(node4.port());
}

/// The runbook's replacement of a node whose data directory was deleted:
/// removed, emptied, started with `--cell-join` under its id, added again.
#[test]
fn a_node_whose_data_directory_was_deleted_is_replaced_under_writes() {
    let mut cell = loaded();
    let ports: Vec<u16> = cell.nodes.iter().map(Server::port).collect();
    let mut node3 = cell.nodes.pop().unwrap();
    node3.kill9();
    let r = call(ports[0], "DELETE", "/_cell/members/3", &[], b"");
    assert_eq!(r.status, 200, "{}", r.summary());
    wait_voters(ports[1], &[1, 2], Duration::from_secs(20));
    let dir = node3.data_dir();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    node3.add_args(&["--cell-join"]);
    let joining = start_in_background(node3);
    std::thread::sleep(Duration::from_secs(1));
    let peer = cell.nodes[0].arg("--cell").unwrap().split(',').nth(2).unwrap().trim_start_matches("3@").to_string();
    let added_at = Instant::now();
    add(ports[1], 3, &peer);
    let node3 = joining.join().unwrap();
    wait_voters(ports[0], &[1, 2, 3], Duration::from_secs(60));
    let (segments, bytes) = shipped(&node3);
    eprintln!(
        "node 3 replaced: a voter in both groups {:?} after the request; it copied {segments} segments, {bytes} bytes",
        added_at.elapsed()
    );
    assert!(segments >= 2.0 && bytes > 65_536.0, "node 3 copied {segments} segments ({bytes} bytes)");
    cell.check_read_back(node3.port());
    eprintln!("node 3 served every acknowledged append {:?} after the request", added_at.elapsed());
}

/// A node joining with flags `--node-id id`, named in `--cell` with node 1,
/// at a fresh peer address; started in a thread. Its peer address too.
fn start_joining(cell: &Loaded, id: u64) -> (std::thread::JoinHandle<Server>, String) {
    let peer = format!("127.0.0.1:{}", common::cell::free_port_runs(1, SHARDS as u16)[0]);
    let node1 = cell.nodes[0].arg("--cell").unwrap().split(',').next().unwrap();
    let secret = cell.dir.path().join("secret").to_str().unwrap().to_string();
    let (id, cell_flag) = (id.to_string(), format!("{node1},{id}@{peer}"));
    let mut args: Vec<String> =
        ["--shards", "2", "--node-id", &id, "--cell", &cell_flag].into_iter().map(String::from).collect();
    args.extend(SEGMENTS.iter().map(|a| a.to_string()));
    args.extend(["--cell-secret-file".into(), secret, "--cell-join".into()]);
    (join_in_background(args), peer)
}

/// `127.0.0.1:PORT` as `localhost:PORT` where this machine resolves
/// localhost to 127.0.0.1 first (the node listens there only), else as it is.
fn by_name(peer: &str) -> String {
    use std::net::ToSocketAddrs;
    let port = peer.rsplit(':').next().unwrap();
    let first = ("localhost", 1).to_socket_addrs().ok().and_then(|mut a| a.next());
    if first.is_some_and(|a| a.ip() == std::net::Ipv4Addr::LOCALHOST) {
        format!("localhost:{port}")
    } else {
        eprintln!("localhost is not 127.0.0.1 first here: node 5 is named by its address");
        peer.to_string()
    }
}

/// A cell grown from three voters to five, one node at a time, under the
/// writer, then two of the five killed: the other three, a majority of
/// five, go on acknowledging.
#[test]
fn a_cell_grown_to_five_voters_survives_two_down() {
    let mut cell = loaded();
    let ports: Vec<u16> = cell.nodes.iter().map(Server::port).collect();
    let mut added = Vec::new();
    for id in [4, 5] {
        let (joining, peer) = start_joining(&cell, id);
        // Node 5's change names it by host name (resolved off the executor).
        let peer = if id == 5 { by_name(&peer) } else { peer };
        std::thread::sleep(Duration::from_millis(300));
        add(ports[2], id, &peer);
        added.push(joining.join().unwrap());
        // Sent again until it is a voter in every group.
        let body = format!(r#"{{"peer":"{peer}"}}"#);
        let end = Instant::now() + Duration::from_secs(60);
        let json = [("content-type", "application/json")];
        while call(ports[2], "POST", &format!("/_cell/members/{id}"), &json, body.as_bytes()).status != 200 {
            assert!(Instant::now() < end, "node {id} not a voter in 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    wait_voters(added[1].port(), &[1, 2, 3, 4, 5], Duration::from_secs(20));
    *cell.via.lock().unwrap() = added[0].port();
    cell.nodes[0].kill9();
    cell.nodes[1].kill9();
    for s in &cell.streams {
        let path = format!("/v1/stream/{s}");
        let r = call(added[1].port(), "POST", &path, &[("content-type", "text/plain")], b"<two of five down>");
        assert!(matches!(r.status, 200 | 204), "with two of five down: {}", r.summary());
    }
    cell.check_read_back(added[1].port());
}
