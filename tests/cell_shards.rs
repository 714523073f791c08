//! A cell of three real processes with two shards a node (two groups),
//! with a bucket owned by one shard holding streams on the other and a
//! fork whose source is on the other shard, so that every request below
//! spans groups. Through followers, then after the leader is killed (the
//! two groups come together on the first node up), then after it is back
//! (they come back to it):
//! - a create in the bucket is taken, one in a bucket that does not exist
//!   is 404, a delete of the non-empty bucket is 409, the listing holds
//!   every stream: the new leader's shards know the bucket its other shard
//!   applied as a follower;
//! - the fork's source, deleted, is soft (410) while the fork reads it, and
//!   gone once the fork is deleted: the source's shard counts the reference
//!   of a fork on the other shard.
//!
//! Also through a leader kill: a bucket quota over streams of both shards
//! holds (every shard counts its streams into the counters again), and a
//! webhook subscription selecting streams of both shards is delivered the
//! appends of both (every shard holds its matcher and tells the owner its
//! tails). Each of these fails with the matching part of the retelling
//! left out (`shard/retell.rs`).

mod common;

use common::{Response, Server};
use ringstream::protocol::StreamKey;
use ringstream::shard::router::{shard_for, shard_for_bucket};
use std::time::{Duration, Instant};

const SHARDS: usize = 2;

/// A name with `prefix` whose stream in `bucket` is on shard `shard`.
fn stream_on(bucket: &str, prefix: &str, shard: usize) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|s| shard_for(&StreamKey { bucket: bucket.into(), stream: s.clone() }, SHARDS) == shard)
        .unwrap()
}

/// `method path` through node `i`, sent again while it answers 503 (a
/// failover under way), for at most 20 s.
fn call(nodes: &[Server], i: usize, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let r = nodes[i].conn().try_request(method, path, headers, body);
        match r {
            Ok(r) if r.status != 503 || Instant::now() > end => return r,
            Err(e) if Instant::now() > end => panic!("node {}: {method} {path}: {e}", i + 1),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Waits (at most 20 s) until node `i`'s /leaderz is 200: it leads both
/// groups, as the steering brings about.
fn leads_both(nodes: &[Server], i: usize) {
    let end = Instant::now() + Duration::from_secs(20);
    while !nodes[i].conn().try_request("GET", "/leaderz", &[], b"").is_ok_and(|r| r.status == 200) {
        assert!(Instant::now() < end, "node {} did not lead both groups in 20 s", i + 1);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_cell_of_two_shards_a_node_keeps_what_spans_groups_through_failovers() {
    let (_dir, mut nodes) = common::cell::start_sharded(3, SHARDS as u16, &[]);
    let bucket = (0..).map(|i| format!("bucket{i}")).find(|b| shard_for_bucket(b, SHARDS) == 0).unwrap();
    let (source, fork) = (stream_on(&bucket, "src", 1), stream_on(&bucket, "fork", 0));
    let (late, later) = (stream_on(&bucket, "late", 1), stream_on(&bucket, "later", 1));
    let path = |s: &str| format!("/ds/{bucket}/{s}");
    let text = [("content-type", "text/plain")];
    leads_both(&nodes, 0);

    // Through followers.
    let r = call(&nodes, 1, "PUT", &format!("/ds/{bucket}"), &[], b"");
    assert_eq!(r.status, 201, "the bucket: {}", r.summary());
    assert_eq!(call(&nodes, 2, "PUT", &path(&source), &text, b"").status, 201);
    let r = call(&nodes, 1, "POST", &path(&source), &text, b"inherited");
    assert!(matches!(r.status, 200 | 204), "the append: {}", r.summary());
    let from = path(&source);
    let forked = [("content-type", "text/plain"), ("stream-forked-from", from.as_str())];
    let r = call(&nodes, 2, "PUT", &path(&fork), &forked, b"");
    assert_eq!(r.status, 201, "the fork: {}", r.summary());
    for i in 0..3 {
        let end = Instant::now() + Duration::from_secs(10);
        while call(&nodes, i, "GET", &format!("{}?offset=-1", path(&fork)), &[], b"").status != 200 {
            assert!(Instant::now() < end, "node {} never served the fork", i + 1);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    // The leader killed: the groups come together on node 2.
    nodes[0].kill9();
    // Node 3 may win an election first; the groups are steered to node 2.
    leads_both(&nodes, 1);
    let r = call(&nodes, 2, "PUT", &path(&late), &text, b"");
    assert_eq!(r.status, 201, "a create in the bucket of the other group: {}", r.summary());
    let whole = |i: usize| {
        let cellz = call(&nodes, i, "GET", "/cellz", &[], b"");
        serde_json::from_slice::<serde_json::Value>(&cellz.body).unwrap()["whole"].as_bool()
    };
    assert_eq!((whole(1), whole(2)), (Some(true), Some(false)), "/cellz: spanning requests run on node 2 only");
    let r = call(&nodes, 2, "PUT", "/ds/nobucket/x", &text, b"");
    assert_eq!(r.status, 404, "a create in no bucket: {}", r.summary());
    let r = call(&nodes, 2, "DELETE", &format!("/ds/{bucket}"), &[], b"");
    assert_eq!(r.status, 409, "the bucket holds streams on the other group: {}", r.summary());
    let listed = call(&nodes, 2, "GET", &format!("/ds/{bucket}/streams"), &[], b"").text();
    for s in [&source, &fork, &late] {
        assert!(listed.contains(s.as_str()), "the listing lacks {s}: {listed}");
    }
    assert_eq!(call(&nodes, 2, "DELETE", &path(&source), &[], b"").status, 204);
    let r = call(&nodes, 2, "GET", &format!("{}?offset=-1", path(&source)), &[], b"");
    assert_eq!(r.status, 410, "the source a fork on the other group reads was not soft-deleted: {}", r.summary());
    let r = call(&nodes, 1, "GET", &format!("{}?offset=-1", path(&fork)), &[], b"");
    assert_eq!((r.status, r.text()), (200, "inherited".to_string()), "the fork reads what it inherited");

    // Node 1 back: the groups go back to it, and it knows all of the above.
    nodes[0].restart();
    leads_both(&nodes, 0); // the first voter leads both groups again
    let end = Instant::now() + Duration::from_secs(20);
    while nodes[1].conn().try_request("GET", "/leaderz", &[], b"").is_ok_and(|r| r.status == 200) {
        assert!(Instant::now() < end, "node 2 still leads a group");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = call(&nodes, 0, "PUT", &path(&later), &text, b"");
    assert_eq!(r.status, 201, "a create through the first voter again: {}", r.summary());
    assert_eq!(call(&nodes, 2, "DELETE", &path(&fork), &[], b"").status, 204);
    let end = Instant::now() + Duration::from_secs(10);
    while call(&nodes, 0, "GET", &format!("{}?offset=-1", path(&source)), &[], b"").status != 404 {
        assert!(Instant::now() < end, "the source outlived its last fork by 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A bucket's `max_streams` quota over streams on both shards holds
/// through a failover: the new leader's shards count every stream of the
/// bucket, whichever group applied it as a follower.
#[test]
fn a_quota_over_both_shards_holds_through_a_failover() {
    use common::auth::{bearer, Grant, Quota};
    const ADMIN: Grant = Grant { name: "admin", token: "cell-shards-token", buckets: &["*"], rights: &["admin"] };
    let dir = common::TempDir::new("cell-shards-quota");
    let file = dir.path().join("auth.toml");
    common::auth::write(&file, &[ADMIN], &[Quota { bucket: "cellq", max_streams: Some(4), max_bytes: None }]);
    let (_dir, mut nodes) = common::cell::start_sharded(3, SHARDS as u16, &["--auth-file", file.to_str().unwrap()]);
    let auth = bearer(ADMIN.token);
    let (bare, text) =
        ([("authorization", auth.as_str())], [("authorization", auth.as_str()), ("content-type", "text/plain")]);
    leads_both(&nodes, 0);
    assert_eq!(call(&nodes, 1, "PUT", "/ds/cellq", &bare, b"").status, 201);
    let names: Vec<String> =
        [0, 1, 0, 1, 0].iter().enumerate().map(|(i, &sh)| stream_on("cellq", &format!("q{i}x"), sh)).collect();
    for n in &names[..4] {
        assert_eq!(call(&nodes, 2, "PUT", &format!("/ds/cellq/{n}"), &text, b"").status, 201, "stream {n}");
    }
    let fifth = format!("/ds/cellq/{}", names[4]);
    assert_eq!(call(&nodes, 2, "PUT", &fifth, &text, b"").status, 429, "the fifth stream through the first leader");
    nodes[0].kill9();
    leads_both(&nodes, 1);
    let r = call(&nodes, 2, "PUT", &fifth, &text, b"");
    assert_eq!(r.status, 429, "the fifth stream through the new leader: {}", r.summary());
    assert_eq!(call(&nodes, 2, "DELETE", &format!("/ds/cellq/{}", names[1]), &bare, b"").status, 204);
    assert_eq!(
        call(&nodes, 2, "PUT", &fifth, &text, b"").status,
        201,
        "the room a delete on the other shard gave back"
    );
    let sixth = format!("/ds/cellq/{}", stream_on("cellq", "q6x", 1));
    assert_eq!(call(&nodes, 2, "PUT", &sixth, &text, b"").status, 429, "and no more");
}

/// Whether some delivery `receiver` got names stream `path` at `tail`,
/// waiting up to 20 s.
fn delivered_at(receiver: &common::webhook::Receiver, path: &str, tail: &str) -> bool {
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        let got = receiver.got.lock().unwrap().clone();
        let names = |d: &common::webhook::Delivered| {
            d.json()["streams"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["path"] == path && s["tail_offset"] == tail))
        };
        if got.iter().any(names) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// A webhook subscription selecting streams of both shards is delivered
/// the appends of both by the node that leads, before and after a leader
/// kill: the new leader's shards hold every subscription's matcher and
/// tell its owner their streams' tails.
#[test]
fn a_subscription_over_both_shards_is_delivered_through_a_failover() {
    let receiver = common::webhook::Receiver::start(r#"{"done":true}"#);
    let (_dir, mut nodes) = common::cell::start_sharded(3, SHARDS as u16, &[]);
    leads_both(&nodes, 0);
    let sub =
        format!(r#"{{"type":"webhook","pattern":"*","webhook":{{"url":"{}"}},"lease_ttl_ms":1000}}"#, receiver.url);
    let r = call(&nodes, 1, "PUT", "/v1/stream/__ds/subscriptions/s1", &[], sub.as_bytes());
    assert_eq!(r.status, 201, "the subscription through a follower: {}", r.summary());
    let text = [("content-type", "text/plain")];
    let streams = [stream_on("_default", "w", 0), stream_on("_default", "w", 1)];
    let append = |nodes: &[Server], s: &str, body: &[u8]| {
        let r = call(nodes, 2, "POST", &format!("/v1/stream/{s}"), &text, body);
        assert!(matches!(r.status, 200 | 204), "an append to {s}: {}", r.summary());
        r.sno()
    };
    for s in &streams {
        assert_eq!(call(&nodes, 2, "PUT", &format!("/v1/stream/{s}"), &text, b"").status, 201);
        let tail = append(&nodes, s, b"<before>");
        assert!(delivered_at(&receiver, s, &tail), "no delivery of {s} at {tail} from the first leader");
    }
    nodes[0].kill9();
    leads_both(&nodes, 1);
    // A create spans groups: taken once the new leader's shards retold.
    let r = call(&nodes, 2, "PUT", &format!("/v1/stream/{}", stream_on("_default", "x", 0)), &text, b"");
    assert_eq!(r.status, 201, "{}", r.summary());
    for s in &streams {
        let tail = append(&nodes, s, b"<after>");
        assert!(delivered_at(&receiver, s, &tail), "no delivery of {s} at {tail} from the new leader");
    }
}

/// Each group's commit index as node `i`'s `/cellz` shows it (0 while it
/// does not answer).
fn commits(nodes: &[Server], i: usize) -> Vec<u64> {
    (0..SHARDS).map(|g| common::cell::group_commit(&nodes[i], g)).collect()
}

/// A node of two shards whose disk is lost, back with `--cell-join` while
/// one group takes appends and the other is quiet, catches up in both.
#[test]
fn a_node_of_two_shards_that_lost_its_disk_catches_up_in_both_groups() {
    let (_dir, mut nodes) = common::cell::start_sharded(3, SHARDS as u16, &[]);
    leads_both(&nodes, 0);
    let text = [("content-type", "text/plain")];
    let stream = format!("/v1/stream/{}", stream_on("_default", "busy", 1));
    assert_eq!(call(&nodes, 0, "PUT", &stream, &text, b"").status, 201);
    for i in 0..20 {
        assert!(matches!(call(&nodes, 0, "POST", &stream, &text, format!("<{i}>").as_bytes()).status, 200 | 204));
    }
    lose_disk_and_rejoin(&mut nodes[1]);
    let _ = call(&nodes, 0, "POST", &stream, &text, b"<more>");
    wait_caught_up(&nodes, 1, Duration::from_secs(15));
}

/// A cell whose group 0 wrote a 800 KB stream in 64 KiB segments, deleted
/// it, and reclaimed at least five of its segments on node 2.
fn start_with_reclaimed_segments() -> (common::TempDir, Vec<Server>) {
    let (dir, nodes) = common::cell::start_sharded(3, SHARDS as u16, &["--segment-bytes", "65536"]);
    leads_both(&nodes, 0);
    let text = [("content-type", "text/plain")];
    let big = format!("/v1/stream/{}", stream_on("_default", "big", 0));
    assert_eq!(call(&nodes, 0, "PUT", &big, &text, b"").status, 201);
    let block = vec![b'x'; 4096];
    for _ in 0..200 {
        assert!(matches!(call(&nodes, 0, "POST", &big, &text, &block).status, 200 | 204));
    }
    assert_eq!(call(&nodes, 0, "DELETE", &big, &[], b"").status, 204);
    let reclaimed = |i: usize| -> f64 {
        let name = "ringstream_segments_reclaimed_total{shard=\"0\"}";
        nodes[i].metrics().iter().filter(|(k, _)| k == name).map(|(_, v)| v).sum()
    };
    let end = Instant::now() + Duration::from_secs(30);
    while reclaimed(1) < 5.0 {
        assert!(Instant::now() < end, "node 2 reclaimed {} segments of group 0 in 30 s", reclaimed(1));
        std::thread::sleep(Duration::from_millis(100));
    }
    (dir, nodes)
}

/// In a group whose every sealed segment but the newest went through
/// reclamation, a node whose disk is lost still catches up in it (the
/// newest sealed segment stays for it to copy; with all of them gone it
/// would have needed entries no log held any more: found by the nemesis,
/// `--shards 2 --wipe --reclaim`).
#[test]
fn a_node_that_lost_its_disk_catches_up_in_a_group_whose_segments_went() {
    let (_dir, mut nodes) = start_with_reclaimed_segments();
    lose_disk_and_rejoin(&mut nodes[1]);
    wait_caught_up(&nodes, 1, Duration::from_secs(20));
}

/// A node whose disk is lost, started without `--cell-join` while both
/// its peers are down, starts empty (it cannot tell a new cell from one
/// whose nodes are down) and, once they are up, needs entries their logs
/// no longer hold: the leader's `/cellz` says it needs a copy, and the
/// runbook's way (emptied, started with `--cell-join`) brings it back.
#[test]
fn a_node_started_empty_while_its_peers_were_down_is_shown_to_need_a_copy() {
    let (_dir, mut nodes) = start_with_reclaimed_segments();
    for node in nodes.iter_mut() {
        node.kill9();
    }
    let dir = nodes[2].data_dir();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    nodes[2].start_again();
    nodes[0].start_again();
    nodes[1].start_again();
    let needs_copy = |nodes: &[Server]| {
        let cellz = call(nodes, 0, "GET", "/cellz", &[], b"");
        let v: serde_json::Value = serde_json::from_slice(&cellz.body).unwrap_or_default();
        let followers = v["groups"][0]["followers"].as_array().cloned().unwrap_or_default();
        followers.iter().any(|f| f["id"] == 3 && f["needs_copy"] == true)
    };
    leads_both(&nodes, 0);
    let end = Instant::now() + Duration::from_secs(20);
    while !needs_copy(&nodes) {
        assert!(Instant::now() < end, "node 1's /cellz never said node 3 needs a copy");
        std::thread::sleep(Duration::from_millis(100));
    }
    lose_disk_and_rejoin(&mut nodes[2]);
    wait_caught_up(&nodes, 2, Duration::from_secs(20));
    // The leader publishes its followers at its next tick.
    let end = Instant::now() + Duration::from_secs(2);
    while needs_copy(&nodes) {
        assert!(Instant::now() < end, "node 3 caught up, still shown needing a copy");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `node` killed, its data directory emptied, started again with
/// `--cell-join` (the runbook's way).
fn lose_disk_and_rejoin(node: &mut Server) {
    node.kill9();
    let dir = node.data_dir();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    node.add_args(&["--cell-join"]);
    node.start_again();
}

/// Waits until node `i`'s commit index in every group reaches node 1's.
fn wait_caught_up(nodes: &[Server], i: usize, limit: Duration) {
    let end = Instant::now() + limit;
    loop {
        let (leader, wiped) = (commits(nodes, 0), commits(nodes, i));
        // Node 1 answering (0 while it does not), and the other as far.
        if leader.iter().all(|&l| l > 0) && wiped.iter().zip(&leader).all(|(w, l)| w >= l) {
            return;
        }
        assert!(
            Instant::now() < end,
            "node {} not caught up in {limit:?}: its commits {wiped:?}, node 1's {leader:?}",
            i + 1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
