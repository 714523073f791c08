//! A cell's observability on three real processes (`--shards 1`, one
//! group): `/leaderz` is 200 on the leader and 503 on its followers (which
//! name it); the leader's `/cellz` shows both followers, whose lag reaches
//! 0 after appends; the leader killed (SIGKILL), a survivor's `/leaderz`
//! turns 200 within 5 s, its `/cellz` shows a higher term, and its metrics
//! the election and the leader change.

mod common;

use common::{Conn, Server};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const STREAM: &str = "/v1/stream/observed";

/// `/leaderz` of `node`: its status and line, or None when it does not answer.
fn leaderz(node: &Server) -> Option<(u16, String)> {
    let mut c = Conn::try_connect(node.port()).ok()?;
    let r = c.try_request("GET", "/leaderz", &[], b"").ok()?;
    Some((r.status, r.text()))
}

fn cellz(node: &Server) -> Value {
    let r = node.conn().request("GET", "/cellz", &[], b"");
    assert_eq!(r.status, 200, "/cellz: {}", r.summary());
    serde_json::from_str(&r.text()).expect("/cellz is JSON")
}

/// A sample of `node`'s metrics by its full name with labels.
fn metric(node: &Server, name: &str) -> f64 {
    node.metrics().into_iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no {name}")).1
}

/// Waits (at most `limit`) until exactly one of `nodes` answers
/// `/leaderz` 200 and every other one 503 naming it; returns its index.
fn the_leader(nodes: &[&Server], limit: Duration) -> usize {
    let end = Instant::now() + limit;
    let mut last = Vec::new();
    while Instant::now() < end {
        last = nodes.iter().map(|n| leaderz(n)).collect::<Vec<_>>();
        let leaders: Vec<usize> = (0..nodes.len()).filter(|&i| matches!(&last[i], Some((200, _)))).collect();
        if let [l] = leaders[..] {
            let id = cellz(nodes[l])["node"].as_u64().unwrap();
            let named = format!("follower, leader is node {id}");
            let others_name_it = (0..nodes.len())
                .filter(|&i| i != l)
                .all(|i| matches!(&last[i], Some((503, why)) if why.contains(&named)));
            if others_name_it {
                return l;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no single leader in {limit:?}: {last:?}");
}

fn append(node: &Server, body: &[u8]) -> u16 {
    node.conn().request("POST", STREAM, &[("content-type", "text/plain")], body).status
}

#[test]
fn leaderz_cellz_and_metrics_follow_the_leader_through_a_kill() {
    let (_dir, mut nodes) = common::cell::start(3);
    let all: Vec<&Server> = nodes.iter().collect();
    // Every group is steered to be led by the first voter: wait for it, so
    // leadership does not move under the appends.
    let end = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        let l = the_leader(&all, Duration::from_secs(20));
        if l == 0 || Instant::now() > end {
            break l;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(leader, 0, "node 1 does not lead");
    let l = &nodes[leader];
    assert_eq!(l.conn().request("PUT", STREAM, &[("content-type", "text/plain")], b"").status, 201);
    for i in 0..20 {
        let status = append(l, format!("<{i}>").as_bytes());
        assert!(matches!(status, 200 | 204), "append {i} through the leader: {status}");
    }
    // Both followers, caught up: their lag reaches 0 (published once a tick).
    let end = Instant::now() + Duration::from_secs(5);
    let view = loop {
        let v = cellz(l);
        let g = &v["groups"][0];
        let followers = g["followers"].as_array().cloned().unwrap_or_default();
        if followers.len() == 2 && followers.iter().all(|f| f["lag"] == 0 && f["match"] == g["last_index"]) {
            break v;
        }
        assert!(Instant::now() < end, "the followers did not catch up in 5 s: {v}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let g = &view["groups"][0];
    let (leader_id, term) = (view["node"].as_u64().unwrap(), g["term"].as_u64().unwrap());
    assert_eq!(
        (g["role"].as_str(), g["leader"].as_u64(), g["writable"].as_bool()),
        (Some("leader"), Some(leader_id), Some(true))
    );
    assert!(g["commit"].as_u64().unwrap() >= 20, "{g}");
    assert!((20..=g["commit"].as_u64().unwrap()).contains(&g["applied"].as_u64().unwrap()), "{g}");
    let ids: Vec<u64> = g["followers"].as_array().unwrap().iter().map(|f| f["id"].as_u64().unwrap()).collect();
    assert!(!ids.contains(&leader_id) && ids.len() == 2, "{ids:?}");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let fg = &cellz(&nodes[follower])["groups"][0];
    assert_eq!((fg["role"].as_str(), fg["leader"].as_u64()), (Some("follower"), Some(leader_id)), "{fg}");
    assert!(fg.get("followers").is_none(), "a follower lists no followers: {fg}");
    for group in [g, fg] {
        assert_eq!((&group["voters"], &group["learners"]), (&json!([1, 2, 3]), &json!([])), "{group}");
    }
    assert_eq!(metric(l, "ringstream_cell_leading{shard=\"0\"}"), 1.0);
    assert_eq!(metric(&nodes[follower], "ringstream_cell_leading{shard=\"0\"}"), 0.0);
    assert!(metric(l, "ringstream_cell_commit_seconds_count{shard=\"0\"}") >= 20.0, "each append is an entry here");
    assert!(metric(l, "ringstream_cell_sent_bytes_total{shard=\"0\"}") > 0.0);
    assert!(metric(&nodes[follower], "ringstream_cell_received_bytes_total{shard=\"0\"}") > 0.0);
    // A HEAD on the leader claims the tail: one read index round, confirmed.
    let rounds = |outcome: &str| {
        metric(l, &format!("ringstream_cell_read_index_rounds_total{{shard=\"0\",outcome=\"{outcome}\"}}"))
    };
    let (started, confirmed) = (rounds("started"), rounds("confirmed"));
    let head = l.conn().request("HEAD", "/v1/stream/nothing-here", &[], b"");
    assert_eq!(head.status, 404, "{}", head.summary());
    assert!(rounds("started") > started && rounds("confirmed") > confirmed, "no confirmed round counted");
    assert_eq!(
        metric(&nodes[follower], "ringstream_cell_read_index_rounds_total{shard=\"0\",outcome=\"started\"}"),
        0.0
    );
    assert_eq!(metric(l, &format!("ringstream_cell_follower_lag_entries{{shard=\"0\",peer=\"{}\"}}", ids[0])), 0.0);

    // The leader killed: a survivor leads within 5 s, in a higher term.
    nodes[leader].kill9();
    let killed = Instant::now();
    let survivors: Vec<&Server> = (0..3).filter(|&i| i != leader).map(|i| &nodes[i]).collect();
    let new = survivors[the_leader(&survivors, Duration::from_secs(5))];
    eprintln!("leader {leader_id} killed; /leaderz 200 on a survivor after {:?}", killed.elapsed());
    let g = &cellz(new)["groups"][0];
    assert!(g["term"].as_u64().unwrap() > term, "term {} after {term}: {g}", g["term"]);
    assert_eq!(g["role"], "leader");
    assert!(metric(new, "ringstream_cell_elections_total{shard=\"0\"}") >= 1.0, "the new leader ran an election");
    assert!(metric(new, "ringstream_cell_leader_changes_total{shard=\"0\"}") >= 2.0, "the old leader, then itself");
    assert!(metric(new, "ringstream_cell_term{shard=\"0\"}") > term as f64);
}
