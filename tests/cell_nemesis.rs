//! The nemesis: a cell of three real processes (`--shards 1`) under
//! concurrent writers while faults come one after another for
//! `NEMESIS_SECS` (default 60): the leader killed (SIGKILL) and restarted,
//! a follower killed and restarted, the leader paused (SIGSTOP) and woken,
//! both followers killed and restarted, the leader and one follower killed
//! and restarted (the other keeps its term), all three killed at once (a
//! rack losing power) and restarted in an order that changes each time,
//! and a rolling restart (each node in turn stopped with SIGTERM and
//! started again, the followers first, as an upgrade does).
//! Inside a private network namespace
//! (`scripts/cell-partition.sh`: nodes on 127.0.0.1, .2 and .3, links cut
//! with nftables) the faults also include network partitions: the leader
//! cut off from both followers (it must step down and acknowledge nothing
//! while the other two elect a leader), a follower cut off, the leader's
//! packets to both followers dropped one way (over TCP that stalls the
//! links both ways: the leader is replaced as if cut off), and the two
//! followers cut from each other. Each partition's effect is checked while
//! it lasts: a cut-off node answers an append 503 within 10 s, the nodes
//! holding a majority acknowledge one within 10 s, and a leader cut off is
//! replaced by one of the other two. `NEMESIS_FAULTS` picks `processes`,
//! `power` (only the two faults that kill two or three nodes), `rolling`
//! (only rolling restarts), `wipe` (a follower killed, its data directory
//! emptied, started again under its id, which copies its peers' sealed
//! segments at boot and must catch up within 60 s, the time and bytes
//! printed; then the leader killed; and again), `partitions`
//! or `all` (the default: `all` inside such a namespace, else
//! `processes`).
//! Then everything heals and the
//! checker reads every node: each acknowledged append served once, at the
//! offset it was acknowledged with, in acknowledgement order per writer;
//! every node serves the same stream; the replicas' segment files are byte
//! for byte the same. Printed: appends acknowledged and attempted, faults,
//! the time from each leader kill to the next acknowledgement, and the
//! longest time without an acknowledgement while faults came.
//!
//! `NEMESIS_RECLAIM=1`: the cell keeps 1 MiB segments, and a stream of
//! 20 MB written before the writers' is deleted a third of the way
//! through the faults; after healing every node must have deleted its
//! segments through the log (the same count on each) and answer 404 for
//! it, besides everything above.
//!
//! Ignored in the test run (minutes long): `scripts/cell-nemesis.sh` and
//! `scripts/cell-partition.sh` run it.

mod common;

use common::{Conn, Server, TempDir};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const STREAM: &str = "/v1/stream/nemesis";
const WRITERS: usize = 4;

/// What the writers and the nemesis share.
#[derive(Default)]
struct Shared {
    ports: [AtomicU16; 3],
    stop: AtomicBool,
    /// Acknowledged appends: (writer, body, end offset).
    acked: Mutex<Vec<(usize, String, u64)>>,
    attempts: AtomicU64,
    /// When the leader was last killed, until the next acknowledgement.
    killed_at: Mutex<Option<Instant>>,
    failovers: Mutex<Vec<Duration>>,
    /// The node that acknowledged last.
    last_leader: AtomicU64,
    /// When each writer's appends were acknowledged (for the longest stall).
    ack_times: Mutex<Vec<Instant>>,
}

fn writer(w: usize, shared: Arc<Shared>) {
    let mut n = 0u64;
    // Writers start on different nodes: followers forward their appends.
    let mut node = w % 3;
    while !shared.stop.load(Ordering::Relaxed) {
        n += 1;
        shared.attempts.fetch_add(1, Ordering::Relaxed);
        let body = format!("<w{w}-{n}>");
        let port = shared.ports[node].load(Ordering::Relaxed);
        let answer = Conn::try_connect(port)
            .and_then(|mut c| c.try_request("POST", STREAM, &[("content-type", "text/plain")], body.as_bytes()));
        match answer {
            Ok(r) if r.status == 200 || r.status == 204 => {
                let end: u64 = r.sno().rsplit('_').next().unwrap().parse().unwrap();
                shared.acked.lock().unwrap().push((w, body, end));
                shared.ack_times.lock().unwrap().push(Instant::now());
                shared.last_leader.store(node as u64, Ordering::Relaxed);
                if let Some(at) = shared.killed_at.lock().unwrap().take() {
                    shared.failovers.lock().unwrap().push(at.elapsed());
                }
            }
            Ok(r) if r.status == 503 => node = (node + 1) % 3,
            Ok(r) => panic!("writer {w}: append answered {}", r.summary()),
            Err(_) => {
                node = (node + 1) % 3;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// One fault of the nemesis, healed before the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillLeader,
    KillFollower,
    PauseLeader,
    KillFollowers,
    KillLeaderAndFollower,
    KillAll,
    RollingRestart,
    IsolateLeader,
    IsolateFollower,
    LeaderOutboundDropped,
    SplitFollowers,
    WipeFollower,
    SplitLeaders,
    ReplaceNode,
}

const PROCESS_FAULTS: [Fault; 7] = [
    Fault::KillLeader,
    Fault::KillFollower,
    Fault::PauseLeader,
    Fault::KillFollowers,
    Fault::KillLeaderAndFollower,
    Fault::KillAll,
    Fault::RollingRestart,
];
/// The whole cell losing power, or two of its nodes: `NEMESIS_FAULTS=power`.
const POWER_FAULTS: [Fault; 2] = [Fault::KillAll, Fault::KillLeaderAndFollower];
/// An upgrade of the cell, one node at a time: `NEMESIS_FAULTS=rolling`.
const ROLLING_FAULTS: [Fault; 1] = [Fault::RollingRestart];
/// A lost disk, replaced, between leader kills: `NEMESIS_FAULTS=wipe`.
const WIPE_FAULTS: [Fault; 2] = [Fault::WipeFollower, Fault::KillLeader];
/// A node replaced through the membership API (the leader every other
/// time), between leader kills: `NEMESIS_FAULTS=replace`.
const REPLACE_FAULTS: [Fault; 2] = [Fault::ReplaceNode, Fault::KillLeader];
const PARTITION_FAULTS: [Fault; 4] =
    [Fault::IsolateLeader, Fault::IsolateFollower, Fault::LeaderOutboundDropped, Fault::SplitFollowers];

/// Whether this process runs in a namespace of `scripts/lib/netns.sh run`.
fn in_private_network() -> bool {
    let ns = std::fs::read_link("/proc/self/ns/net").ok();
    std::env::var_os("RINGSTREAM_NETNS").is_some_and(|want| ns.is_some_and(|ns| ns.as_os_str() == want))
}

/// The faults `NEMESIS_FAULTS` asks for.
fn faults() -> Vec<Fault> {
    let partitions_possible = in_private_network();
    let which = std::env::var("NEMESIS_FAULTS")
        .unwrap_or_else(|_| if partitions_possible { "all" } else { "processes" }.to_string());
    let wants_partitions = which == "all" || which == "partitions";
    // With more than one group, also one that splits the groups' leaders.
    let split_leaders: &[Fault] = if shards() > 1 { &[Fault::SplitLeaders] } else { &[] };
    assert!(
        partitions_possible || !wants_partitions,
        "NEMESIS_FAULTS={which} needs a private network namespace: run scripts/cell-partition.sh"
    );
    match which.as_str() {
        "processes" => PROCESS_FAULTS.to_vec(),
        "partitions" => PARTITION_FAULTS.iter().chain(split_leaders).copied().collect(),
        "power" => POWER_FAULTS.to_vec(),
        "rolling" => ROLLING_FAULTS.to_vec(),
        "wipe" => WIPE_FAULTS.to_vec(),
        "replace" => REPLACE_FAULTS.to_vec(),
        "all" => PROCESS_FAULTS.iter().chain(&PARTITION_FAULTS).chain(split_leaders).copied().collect(),
        other => panic!("NEMESIS_FAULTS={other}: not processes, power, rolling, wipe, replace, partitions or all"),
    }
}

/// NEMESIS_SHARDS: shards a node (groups); the writers' stream is in one.
fn shards() -> u16 {
    std::env::var("NEMESIS_SHARDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// Node `i`'s address for its peers: its own loopback address inside a
/// private network (so links between two nodes can be cut), else 127.0.0.1.
fn peer_ip(i: usize) -> String {
    if in_private_network() {
        format!("127.0.0.{}", i + 1)
    } else {
        "127.0.0.1".to_string()
    }
}

/// `scripts/lib/netns.sh` with `args` (cut, cut_both, heal_all).
fn netns(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/lib/netns.sh");
    let status = std::process::Command::new(script).args(args).status().expect("running netns.sh");
    assert!(status.success(), "netns.sh {args:?} failed");
}

/// Cuts every link between node `i` and the nodes `others`, both ways.
fn isolate(i: usize, others: &[usize]) {
    for &o in others {
        netns(&["cut_both", &peer_ip(i), &peer_ip(o)]);
    }
}

fn signal(server: &Server, sig: i32) {
    // Safety: kill(2) on our own child.
    unsafe { libc::kill(server.pid() as libc::pid_t, sig) };
}

struct Nemesis {
    nodes: Vec<Server>,
    up: [bool; 3],
    shared: Arc<Shared>,
    faults: HashMap<&'static str, u32>,
    /// Each fault's span (from its start to the end of the pause after
    /// it), for where the longest waits fell.
    spans: Vec<(&'static str, Instant, Instant)>,
    /// The faults it cycles through.
    kinds: Vec<Fault>,
    /// Each wiped node's restart to caught up, and the bytes it copied.
    refills: Vec<(Duration, f64)>,
    /// The nodes that start with `--cell-join` (since their first wipe).
    joins: [bool; 3],
    /// Each node's first peer port (group *i* listens on it plus *i*).
    peer_ports: Vec<u16>,
}

impl Nemesis {
    /// The node whose /leaderz answers 200 (up to 10 s), else the node
    /// that acknowledged last (followers acknowledge too: they forward).
    fn leader(&self) -> usize {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            for i in (0..3).filter(|&i| self.up[i]) {
                let Ok(mut c) = Conn::try_connect(self.nodes[i].port()) else { continue };
                if c.try_request("GET", "/leaderz", &[], b"").is_ok_and(|r| r.status == 200) {
                    return i;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.shared.last_leader.load(Ordering::Relaxed) as usize
    }

    fn kill(&mut self, i: usize) {
        self.nodes[i].kill9();
        self.up[i] = false;
    }

    fn restart(&mut self, i: usize) {
        self.nodes[i].start_again();
        self.shared.ports[i].store(self.nodes[i].port(), Ordering::Relaxed);
        self.up[i] = true;
    }

    fn pause(d: Duration) {
        std::thread::sleep(d);
    }

    /// One fault, then healed.
    fn fault(&mut self, which: usize) {
        let began = Instant::now();
        let leader = self.leader();
        let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
        let fault = self.kinds[which % self.kinds.len()];
        match fault {
            Fault::KillLeader => {
                *self.shared.killed_at.lock().unwrap() = Some(Instant::now());
                self.kill(leader);
                Self::pause(Duration::from_millis(1500));
                self.restart(leader);
            }
            Fault::KillFollower => {
                self.kill(others[0]);
                Self::pause(Duration::from_millis(1000));
                self.restart(others[0]);
            }
            Fault::PauseLeader => {
                signal(&self.nodes[leader], libc::SIGSTOP);
                Self::pause(Duration::from_millis(1500));
                signal(&self.nodes[leader], libc::SIGCONT);
            }
            Fault::KillFollowers => {
                self.kill(others[0]);
                self.kill(others[1]);
                Self::pause(Duration::from_millis(1000));
                self.restart(others[0]);
                self.restart(others[1]);
            }
            Fault::KillLeaderAndFollower => {
                // The other follower keeps running, and its term.
                self.kill(leader);
                self.kill(others[0]);
                Self::pause(Duration::from_millis(1000));
                self.restart(others[0]);
                self.restart(leader);
            }
            Fault::KillAll => {
                // Every node at once, as a rack losing power (each write
                // acknowledged was on disk: O_DIRECT, O_DSYNC), then back
                // in an order that changes from one time to the next.
                for i in 0..3 {
                    self.kill(i);
                }
                Self::pause(Duration::from_millis(500));
                let turn = self.faults.get(fault.name()).copied().unwrap_or(0) as usize;
                for k in 0..3 {
                    self.restart((turn + k * (1 + turn % 2)) % 3);
                    Self::pause(Duration::from_millis(100 * (turn % 3) as u64));
                }
            }
            Fault::WipeFollower => {
                // A lost disk: the node comes back empty under its id with
                // `--cell-join` (the runbook's way; it stays set, as a node
                // holding segments starts as always), copies its peers'
                // sealed segments and is caught up; the next fault waits for
                // that (until then the cell survives no second one).
                let i = others[0];
                self.lose_disk(i);
                let back = Instant::now();
                self.restart(i);
                self.caught_up(i, leader, back);
            }
            Fault::ReplaceNode => {
                let turn = self.faults.get(fault.name()).copied().unwrap_or(0);
                let i = if turn % 2 == 0 { leader } else { others[0] };
                self.replace(i, leader);
            }
            Fault::RollingRestart => {
                // As an operator upgrades a cell: one node at a time, the
                // followers first, each stopped gracefully (SIGTERM) and
                // started again, the next once a leader is known again.
                for i in [others[0], others[1], leader] {
                    let (status, took) = self.nodes[i].terminate(Duration::from_secs(30));
                    assert!(status.is_some_and(|s| s.success()), "node {} did not stop in {took:?}: {status:?}", i + 1);
                    self.up[i] = false;
                    self.restart(i);
                    self.leader();
                    Self::pause(Duration::from_millis(500));
                }
            }
            Fault::IsolateLeader => {
                isolate(leader, &others);
                self.leader_replaced(leader, &others);
            }
            Fault::IsolateFollower => {
                let (cut, rest) = (others[0], [leader, others[1]]);
                isolate(cut, &rest);
                self.majority_acknowledges(&rest);
                self.refuses_writes(cut);
            }
            Fault::LeaderOutboundDropped => {
                // Its packets to the followers are lost, theirs reach it;
                // over TCP that stalls each link both ways (nothing it
                // sends is acknowledged), so it is replaced as if cut off.
                for &o in &others {
                    netns(&["cut", &peer_ip(leader), &peer_ip(o)]);
                }
                self.leader_replaced(leader, &others);
            }
            Fault::SplitLeaders => {
                // Group 1's links between the leader and both followers cut,
                // group 0's kept: the followers elect a leader of group 1,
                // the leader keeps group 0, and no node leads both.
                let ports = self.peer_ports.iter().map(|p| (p + 1).to_string()).collect::<Vec<_>>().join(",");
                for &o in &others {
                    netns(&["cut_ports", &peer_ip(leader), &peer_ip(o), &ports]);
                }
                self.spanning_requests_refused(leader);
            }
            Fault::SplitFollowers => {
                // Each follower still hears the leader: the cell goes on.
                netns(&["cut_both", &peer_ip(others[0]), &peer_ip(others[1])]);
                self.majority_acknowledges(&[leader, others[0], others[1]]);
                Self::pause(Duration::from_millis(1000));
            }
        }
        if PARTITION_FAULTS.contains(&fault) || fault == Fault::SplitLeaders {
            netns(&["heal_all"]);
        }
        if fault == Fault::SplitLeaders {
            self.spanning_requests_run_again();
        }
        *self.faults.entry(fault.name()).or_default() += 1;
        Self::pause(Duration::from_millis(1000));
        self.spans.push((fault.name(), began, Instant::now()));
    }

    /// The groups' leaders split (`SplitLeaders`): within 10 s node
    /// `leader` no longer leads both groups, and then for 2 s a request
    /// that spans groups (a bucket's create) is refused through every node
    /// (503: it runs only where one node leads every group), never taken.
    fn spanning_requests_refused(&mut self, leader: usize) {
        let end = Instant::now() + Duration::from_secs(10);
        while self.leads(leader) {
            assert!(Instant::now() < end, "node {} still leads both groups 10 s into the split", leader + 1);
            std::thread::sleep(Duration::from_millis(50));
        }
        let bucket = format!("/ds/split-{}", self.faults.get(Fault::SplitLeaders.name()).copied().unwrap_or(0));
        let end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < end {
            for i in (0..3).filter(|&i| self.up[i]) {
                let Ok(mut c) = Conn::try_connect(self.nodes[i].port()) else { continue };
                if let Ok(r) = c.try_request("PUT", &bucket, &[], b"") {
                    assert_eq!(
                        r.status,
                        503,
                        "node {}: a bucket create while the leaders were split: {}",
                        i + 1,
                        r.summary()
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// After a split of the leaders healed: within 20 s one node leads
    /// both groups again and a request that spans groups runs.
    fn spanning_requests_run_again(&mut self) {
        let bucket = format!("/ds/healed-{}", self.faults.get(Fault::SplitLeaders.name()).copied().unwrap_or(0));
        let began = Instant::now();
        let taken = through_any(&self.shared.ports, "PUT", &bucket, b"", &[201, 200]);
        assert!(
            taken.is_some() && began.elapsed() < Duration::from_secs(20),
            "no node took a bucket create within 20 s of the split's heal ({:?})",
            began.elapsed()
        );
    }

    /// The leader cut off from both followers (however the links were
    /// cut): within 10 s it no longer leads (check-quorum), the other two
    /// elect a leader of their own, an append sent to the old one is
    /// answered 503 and never acknowledged, one through the new majority is.
    /// (Had the lead moved just before the cut, the cut node is a follower
    /// and the same holds.)
    fn leader_replaced(&mut self, leader: usize, others: &[usize]) {
        let end = Instant::now() + Duration::from_secs(10);
        let new_leader = loop {
            let new = others.iter().copied().find(|&o| self.leads(o));
            if let Some(new) = new.filter(|_| !self.leads(leader)) {
                break new;
            }
            assert!(Instant::now() < end, "10 s after the leader was cut off: no new leader, or it still leads");
            std::thread::sleep(Duration::from_millis(50));
        };
        self.refuses_writes(leader);
        self.majority_acknowledges(others);
        // The majority's leader may hand the lead to the other (the
        // preferred voter); the cut-off node must not have it back.
        assert!(!self.leads(leader), "the cut-off node leads again (node {} was elected)", new_leader + 1);
    }

    /// Node `i`, cut off from the majority, answers an append 503 within
    /// 10 s (a follower finds no leader, a deposed leader cannot commit).
    /// It is never acknowledged: were it ever committed, the checker
    /// ignores it, but a 200 here fails at once.
    fn refuses_writes(&self, i: usize) {
        let probe = format!("<refused-{}>", self.shared.attempts.fetch_add(1, Ordering::Relaxed));
        let asked = Instant::now();
        let r = self.nodes[i].conn().request("POST", STREAM, &[("content-type", "text/plain")], probe.as_bytes());
        assert_eq!(r.status, 503, "node {}, cut off, answered an append {}", i + 1, r.summary());
        assert!(asked.elapsed() < Duration::from_secs(10), "node {} took {:?} to refuse", i + 1, asked.elapsed());
    }

    /// An append through one of `nodes` (each in turn, a majority joined)
    /// is acknowledged within 10 s; the checker then looks for it like
    /// any writer's (as writer `WRITERS`).
    fn majority_acknowledges(&self, nodes: &[usize]) {
        let end = Instant::now() + Duration::from_secs(10);
        let body = format!("<majority-{}>", self.shared.attempts.fetch_add(1, Ordering::Relaxed));
        for i in nodes.iter().cycle() {
            assert!(Instant::now() < end, "no node of {nodes:?} acknowledged an append in 10 s");
            let Ok(mut c) = Conn::try_connect(self.nodes[*i].port()) else { continue };
            let Ok(r) = c.try_request("POST", STREAM, &[("content-type", "text/plain")], body.as_bytes()) else {
                continue;
            };
            if r.status == 200 || r.status == 204 {
                let end: u64 = r.sno().rsplit('_').next().unwrap().parse().unwrap();
                self.shared.acked.lock().unwrap().push((WRITERS, body, end));
                return;
            }
            assert_eq!(r.status, 503, "node {}: an append answered {}", i + 1, r.summary());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (60 s at most) until node `i`'s commit index reaches the
    /// leader's; records the time since `back` and the bytes it copied.
    fn caught_up(&mut self, i: usize, leader: usize, back: Instant) {
        let commit = common::cell::commit_index;
        let leader = if self.up[leader] { leader } else { self.leader() };
        loop {
            let target = commit(&self.nodes[leader]);
            if target > 0 && commit(&self.nodes[i]) >= target {
                break;
            }
            if back.elapsed() >= Duration::from_secs(60) {
                let cellz = |n: usize| self.nodes[n].conn().request("GET", "/cellz", &[], b"").text();
                panic!(
                    "node {} wiped: not caught up in 60 s; its /cellz {}; the leader's {}",
                    i + 1,
                    cellz(i),
                    cellz(leader)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let name = "ringstream_cell_shipped_bytes_total{shard=\"0\"}";
        let bytes = self.nodes[i].metrics().into_iter().find(|(k, _)| k == name).map_or(0.0, |(_, v)| v);
        self.refills.push((back.elapsed(), bytes));
    }

    /// Node `i` killed and its data directory emptied, its next start with
    /// `--cell-join` (the runbook's way; the flag stays set, as a node
    /// holding segments starts as always).
    fn lose_disk(&mut self, i: usize) {
        self.kill(i);
        let dir = self.nodes[i].data_dir();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        if !self.joins[i] {
            self.nodes[i].add_args(&["--cell-join"]);
            self.joins[i] = true;
        }
    }

    /// The runbook's replacement of node `i` through the membership API,
    /// each request through another node: removed (a leader hands its lead
    /// over first), killed, its data directory emptied, started under its
    /// id with `--cell-join` (it waits until added), added again; the next
    /// fault waits until it caught up.
    fn replace(&mut self, i: usize, leader: usize) {
        let via = (0..3).find(|&o| o != i && self.up[o]).expect("another node up");
        let id = i + 1;
        membership_call(self.nodes[via].port(), "DELETE", &format!("/_cell/members/{id}"), b"", &[200]);
        self.lose_disk(i);
        let back = Instant::now();
        let (via_port, peer) = (self.nodes[via].port(), format!("{}:{}", peer_ip(i), self.peer_ports[i]));
        let add = format!(r#"{{"peer":"{peer}"}}"#);
        std::thread::scope(|s| {
            let node = &mut self.nodes[i];
            let started = s.spawn(move || node.start_again());
            membership_call(via_port, "POST", &format!("/_cell/members/{id}"), add.as_bytes(), &[200, 202]);
            started.join().expect("the replaced node starts");
        });
        self.shared.ports[i].store(self.nodes[i].port(), Ordering::Relaxed);
        self.up[i] = true;
        // Sent again until every group made it a voter.
        membership_call(via_port, "POST", &format!("/_cell/members/{id}"), add.as_bytes(), &[200]);
        self.caught_up(i, if i == leader { via } else { leader }, back);
    }

    /// Whether node `i` answers /leaderz with 200.
    fn leads(&self, i: usize) -> bool {
        self.up[i]
            && Conn::try_connect(self.nodes[i].port())
                .and_then(|mut c| c.try_request("GET", "/leaderz", &[], b""))
                .is_ok_and(|r| r.status == 200)
    }
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::KillLeader => "leader killed",
            Fault::KillFollower => "follower killed",
            Fault::PauseLeader => "leader paused",
            Fault::KillFollowers => "both followers killed",
            Fault::KillLeaderAndFollower => "leader and a follower killed",
            Fault::KillAll => "all three killed at once",
            Fault::RollingRestart => "rolling restart",
            Fault::IsolateLeader => "leader cut off",
            Fault::IsolateFollower => "follower cut off",
            Fault::LeaderOutboundDropped => "leader's packets to followers dropped (TCP stalls both ways)",
            Fault::SplitFollowers => "followers cut from each other",
            Fault::WipeFollower => "a follower's disk lost and replaced",
            Fault::ReplaceNode => "a node removed, emptied and added again (the leader every other time)",
            Fault::SplitLeaders => "group 1 cut between the leader and the followers (the leaders split)",
        }
    }
}

/// `method path` (a membership request) on `port`, sent again while it
/// answers otherwise than `want` (503s, a 202 while a node catches up),
/// for at most 60 s.
fn membership_call(port: u16, method: &str, path: &str, body: &[u8], want: &[u16]) {
    let end = Instant::now() + Duration::from_secs(60);
    let json = [("content-type", "application/json")];
    loop {
        let r = Conn::try_connect(port).and_then(|mut c| c.try_request(method, path, &json, body));
        match r {
            Ok(r) if want.contains(&r.status) => return,
            Ok(r) if Instant::now() > end => panic!("{method} {path}: {}", r.summary()),
            Err(e) if Instant::now() > end => panic!("{method} {path}: {e}"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The longest time between `from` and `to` in which no append was
/// acknowledged (the writers retry 503s and unreachable nodes on the next
/// node, so this is the longest a retrying client waited).
fn longest_stall(acks: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut times: Vec<Instant> = acks.iter().copied().filter(|t| (from..to).contains(t)).collect();
    times.sort();
    let edges = std::iter::once(from).chain(times).chain(std::iter::once(to)).collect::<Vec<_>>();
    edges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default()
}

/// The whole stream as node `i` serves it, from the start to where it says
/// it is up to date. After healing the lead may still move (to the
/// preferred voter): a read answered 503 meanwhile is asked again, for up
/// to 30 s.
fn read_settled(node: &Server) -> Vec<u8> {
    let (mut body, mut offset) = (Vec::new(), "-1".to_string());
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let r = node.conn().request("GET", &format!("{STREAM}?offset={offset}"), &[], b"");
        if r.status == 503 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        assert!(r.status == 200 || r.status == 204, "GET {STREAM}?offset={offset}: {}", r.summary());
        body.extend_from_slice(&r.body);
        let next = r.sno();
        if r.header("stream-up-to-date") == Some("true") {
            return body;
        }
        assert_ne!(next, offset, "GET {STREAM}?offset={offset} made no progress and is not up to date");
        offset = next;
    }
}

/// The checker on one node's stream: each acknowledged append once, at the
/// offset it was acknowledged with, and each writer's in the order they
/// were acknowledged.
fn check(node: usize, got: &[u8], acked: &[(usize, String, u64)]) -> Result<(), String> {
    let mut seen: HashMap<&[u8], usize> = HashMap::new();
    let mut at = 0;
    for piece in got.split_inclusive(|&b| b == b'>') {
        *seen.entry(piece).or_default() += 1;
        at += piece.len();
    }
    assert_eq!(at, got.len());
    // The writers, and the nemesis's own appends (as writer WRITERS).
    let mut last_end = [0u64; WRITERS + 1];
    for (w, body, end) in acked {
        let start = *end as usize - body.len();
        if got.get(start..*end as usize) != Some(body.as_bytes()) {
            return Err(format!("node {}: {body} is not where it was acknowledged", node + 1));
        }
        if seen.get(body.as_bytes()) != Some(&1) {
            return Err(format!("node {}: {body} served {:?} times", node + 1, seen.get(body.as_bytes())));
        }
        if *end <= last_end[*w] {
            return Err(format!("node {}: writer {w}'s appends out of order at {body}", node + 1));
        }
        last_end[*w] = *end;
    }
    Ok(())
}

/// The segment files of a stopped node, whole, skipping any that is all
/// zeros (made ahead, never written).
fn segments(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files = common::cell::segment_files(dir);
    files.retain(|(_, b)| b.iter().any(|&x| x != 0));
    files
}

const JUNK: &str = "/v1/stream/nemesis-junk";

/// Sends `method` to `path` through the nodes in turn until one answers
/// one of `want` (60 s at most); the answer's status, if one did.
fn through_any(ports: &[AtomicU16; 3], method: &str, path: &str, body: &[u8], want: &[u16]) -> Option<u16> {
    let end = Instant::now() + Duration::from_secs(60);
    let mut k = 0;
    while Instant::now() < end {
        let port = ports[k % 3].load(Ordering::Relaxed);
        k += 1;
        let r = Conn::try_connect(port)
            .and_then(|mut c| c.try_request(method, path, &[("content-type", "text/plain")], body));
        match r {
            Ok(r) if want.contains(&r.status) => return Some(r.status),
            Ok(r) if r.status == 503 => {}
            Ok(r) => panic!("{method} {path} answered {}", r.summary()),
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// 20 MB into the junk stream, before the writers start.
fn write_junk(nem: &Nemesis) {
    let ports = &nem.shared.ports;
    assert!(through_any(ports, "PUT", JUNK, b"", &[200, 201]).is_some(), "no node took the junk stream's create");
    let chunk = vec![b'j'; 512 * 1024];
    for _ in 0..40 {
        assert!(through_any(ports, "POST", JUNK, &chunk, &[200, 204]).is_some(), "no node took a junk append");
    }
}

/// Deletes the junk stream through whichever node takes it.
fn delete_junk(shared: &Shared) -> bool {
    through_any(&shared.ports, "DELETE", JUNK, b"", &[204, 404]).is_some()
}

/// Waits (60 s at most) until every node deleted the junk stream's
/// segments (its oldest segment file is one after them: the junk took 20 of
/// 1 MiB, the writers' stream began in the last or the one after, the same
/// on each node) and answers 404 for it. (The count of segments reclaimed
/// starts again at each restart, so the files tell.)
fn reclaimed_everywhere(nem: &Nemesis) {
    let end = Instant::now() + Duration::from_secs(60);
    let oldest = |i: usize| -> Option<u64> {
        std::fs::read_dir(nem.nodes[i].data_dir().join("shard-0"))
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".seg")?.parse().ok())
            .min()
    };
    loop {
        let firsts: Vec<Option<u64>> = (0..3).map(oldest).collect();
        let gone = (0..3).all(|i| nem.nodes[i].conn().request("GET", JUNK, &[], b"").status == 404);
        if gone && firsts.iter().all(|f| f.is_some_and(|f| f >= 19) && *f == firsts[0]) {
            eprintln!("reclaimed through the log: every node's oldest segment is {:?}", firsts[0]);
            return;
        }
        assert!(Instant::now() < end, "after healing, each node's oldest segment: {firsts:?}; junk gone: {gone}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "minutes long: scripts/cell-nemesis.sh runs it"]
fn nemesis() {
    let secs: u64 = std::env::var("NEMESIS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let dir = TempDir::new("nemesis");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "a nemesis secret of some length\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let shards = shards();
    let shards_flag = shards.to_string();
    let ports = common::cell::free_port_runs(3, shards);
    let voters =
        ports.iter().enumerate().map(|(i, p)| format!("{}@{}:{p}", i + 1, peer_ip(i))).collect::<Vec<_>>().join(",");
    let secret_path = secret.to_str().unwrap().to_string();
    let reclaim = std::env::var_os("NEMESIS_RECLAIM").is_some();
    let nodes: Vec<Server> = (1..=3)
        .map(|id| {
            let id = id.to_string();
            let mut flags =
                vec!["--shards", &shards_flag, "--node-id", &id, "--cell", &voters, "--cell-secret-file", &secret_path];
            if reclaim {
                flags.extend(["--segment-bytes", "1048576"]);
            }
            Server::start_with(&flags)
        })
        .collect();
    let shared = Arc::new(Shared::default());
    for (i, n) in nodes.iter().enumerate() {
        shared.ports[i].store(n.port(), Ordering::Relaxed);
    }
    let kinds = faults();
    let spans = Vec::new();
    let mut nem = Nemesis {
        nodes,
        up: [true; 3],
        shared: shared.clone(),
        faults: HashMap::new(),
        spans,
        kinds,
        refills: Vec::new(),
        joins: [false; 3],
        peer_ports: ports.clone(),
    };
    // NEMESIS_RECLAIM: 20 MB of a stream (40 segments of 1 MiB) before the
    // writers' stream, deleted a third of the way through the faults: its
    // segments go through the log while nodes die and come back.
    if reclaim {
        write_junk(&nem);
    }
    let junk_deleter = reclaim.then(|| {
        let s = shared.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs / 3));
            delete_junk(&s)
        })
    });
    // The stream, through whichever node leads.
    let created = (0..400).any(|k| {
        let i = k % 3;
        let r = Conn::try_connect(nem.nodes[i].port())
            .and_then(|mut c| c.try_request("PUT", STREAM, &[("content-type", "text/plain")], b""));
        std::thread::sleep(Duration::from_millis(50));
        matches!(r, Ok(r) if r.status == 201 || r.status == 200)
    });
    assert!(created, "no node took the create");
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let s = shared.clone();
            std::thread::spawn(move || writer(w, s))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let mut which = 0;
    while started.elapsed() < Duration::from_secs(secs) {
        nem.fault(which);
        which += 1;
    }
    let faults_over = Instant::now();
    // Heal: everyone up, writers stop, every node catches up.
    for i in 0..3 {
        if !nem.up[i] {
            nem.restart(i);
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    shared.stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    if let Some(d) = junk_deleter {
        assert!(d.join().unwrap(), "no node took the delete of the junk stream");
        reclaimed_everywhere(&nem);
    }
    let acked = shared.acked.lock().unwrap().clone();
    let mut streams = Vec::new();
    for i in 0..3 {
        let end = Instant::now() + Duration::from_secs(30);
        let got = loop {
            let mut c = nem.nodes[i].conn();
            let got = if c.request("HEAD", STREAM, &[], b"").status == 404 {
                Vec::new()
            } else {
                read_settled(&nem.nodes[i])
            };
            match check(i, &got, &acked) {
                Ok(()) => break got,
                Err(e) if Instant::now() > end => {
                    for n in 0..3 {
                        let got = read_settled(&nem.nodes[n]);
                        eprintln!("node {}: {} bytes served; {:?}", n + 1, got.len(), check(n, &got, &acked));
                        if let Some((_, body, at)) = acked.iter().find(|(_, b, _)| e.contains(b.as_str())) {
                            let found = common::find(&got, body.as_bytes());
                            eprintln!(
                                "  {body} acknowledged ending at {at}; found at {found:?}; there: {:?}",
                                got.get(*at as usize - body.len()..(*at as usize + 20).min(got.len()))
                                    .map(String::from_utf8_lossy)
                            );
                        }
                        let root = nem.nodes[n].log_path().parent().unwrap().to_path_buf();
                        let mut log = String::new();
                        for e in std::fs::read_dir(&root).unwrap().flatten() {
                            if e.file_name().to_string_lossy().starts_with("stderr-") {
                                log += &std::fs::read_to_string(e.path()).unwrap_or_default();
                            }
                        }
                        let notable: Vec<&str> = log
                            .lines()
                            .filter(|l| l.contains("ERROR") || l.contains("WARN ringstream::cell::replica"))
                            .collect();
                        eprintln!("--- node {} errors:\n{}", n + 1, notable.join("\n"));
                    }
                    eprintln!("faults: {:?}", nem.faults);
                    panic!("{e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        streams.push(got);
    }
    // Every node the same stream, once all have caught up.
    let end = Instant::now() + Duration::from_secs(30);
    while !(streams[0] == streams[1] && streams[1] == streams[2]) {
        assert!(Instant::now() < end, "the nodes serve different streams after healing");
        std::thread::sleep(Duration::from_millis(200));
        streams = (0..3).map(|i| read_settled(&nem.nodes[i])).collect();
    }
    std::thread::sleep(Duration::from_millis(500));
    let dirs: Vec<_> = (0..3).map(|i| nem.nodes[i].data_dir()).collect();
    for i in 0..3 {
        nem.kill(i);
    }
    let segs: Vec<_> = dirs.iter().map(|d| segments(d)).collect();
    assert!(segs[0] == segs[1] && segs[1] == segs[2], "the replicas' segment files differ after healing");
    let mut failovers = shared.failovers.lock().unwrap().clone();
    failovers.sort();
    let median = failovers.get(failovers.len() / 2).copied();
    let stall = longest_stall(&shared.ack_times.lock().unwrap(), started, faults_over);
    let mut by_fault: HashMap<&str, Duration> = HashMap::new();
    for &(name, from, to) in &nem.spans {
        let longest = longest_stall(&shared.ack_times.lock().unwrap(), from, to);
        let worst = by_fault.entry(name).or_default();
        *worst = (*worst).max(longest);
    }
    eprintln!("longest time without an acknowledgement within each kind of fault (to 1 s after it): {by_fault:?}");
    if !nem.refills.is_empty() {
        let mut times: Vec<Duration> = nem.refills.iter().map(|r| r.0).collect();
        times.sort();
        let bytes: Vec<f64> = nem.refills.iter().map(|r| r.1).collect();
        eprintln!(
            "wiped or replaced nodes: {} refills, restart to caught up median {:?} max {:?}; bytes copied at boot {bytes:?}",
            times.len(),
            times[times.len() / 2],
            times.last().unwrap()
        );
    }
    eprintln!(
        "nemesis {secs} s: {} appends acknowledged of {} attempted, 0 lost, 0 duplicated; {} segment files \
         byte-identical on 3 replicas; faults {:?}; leader kill to next acknowledgement: {} kills, median {median:?}, \
         max {:?}; longest time without an acknowledgement while faults came: {stall:?}",
        acked.len(),
        shared.attempts.load(Ordering::Relaxed),
        segs[0].len(),
        nem.faults,
        failovers.len(),
        failovers.last()
    );
    assert!(acked.len() > 100, "too little was acknowledged to tell");
}
