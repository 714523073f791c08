//! The cell secret rotated on three real processes without cutting a node
//! off (docs/operations.md): each node has its own secret file; in three
//! steps, one node restarted at a time, each node first also accepts the
//! new secret (`PATH.next`), then proves itself with it and still accepts
//! the old one (`PATH` new, `PATH.previous` old), then holds the new one
//! alone. After every restart an append through every node is
//! acknowledged, which needs that node's link to the leader (a follower
//! forwards it), so no node was cut off at any point.

mod common;

use common::cell::free_ports;
use common::{Conn, Server, TempDir};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const STREAM: &str = "/v1/stream/rotation";
const OLD: &str = "the cell secret before the rotation\n";
const NEW: &str = "the cell secret after the rotation, longer\n";

/// What one step of the rotation does to a node's secret file.
type Change = dyn Fn(&Path);

fn write_secret(path: &Path, secret: &str) {
    std::fs::write(path, secret).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn sibling(path: &Path, ext: &str) -> PathBuf {
    PathBuf::from(format!("{}.{ext}", path.display()))
}

/// Appends through node `i` until it is acknowledged (503s retried), at
/// most 10 s; panics naming `when` otherwise.
fn append_through(nodes: &[Server], i: usize, when: &str) {
    let end = Instant::now() + Duration::from_secs(10);
    let mut last = String::new();
    while Instant::now() < end {
        if let Ok(mut c) = Conn::try_connect(nodes[i].port()) {
            let body = format!("<{when}, through node {}>", i + 1);
            match c.try_request("POST", STREAM, &[("content-type", "text/plain")], body.as_bytes()) {
                Ok(r) if r.status == 204 || r.status == 200 => return,
                Ok(r) => last = r.summary(),
                Err(e) => last = e.to_string(),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{when}: no append acknowledged through node {} in 10 s (last: {last})", i + 1);
}

fn every_node_appends(nodes: &[Server], when: &str) {
    for i in 0..nodes.len() {
        append_through(nodes, i, when);
    }
}

#[test]
fn the_cell_secret_rotates_with_no_node_cut_off() {
    let dir = TempDir::new("rotation");
    let secrets: Vec<PathBuf> = (1..=3).map(|i| dir.path().join(format!("secret-{i}"))).collect();
    for s in &secrets {
        write_secret(s, OLD);
    }
    let voters: Vec<String> =
        free_ports(3).iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect();
    let voters = voters.join(",");
    let mut nodes: Vec<Server> = (0..3)
        .map(|i| {
            let id = (i + 1).to_string();
            let secret = secrets[i].to_str().unwrap();
            Server::start_with(&["--shards", "1", "--node-id", &id, "--cell", &voters, "--cell-secret-file", secret])
        })
        .collect();
    let end = Instant::now() + Duration::from_secs(20);
    while !(0..3).any(|i| nodes[i].conn().request("PUT", STREAM, &[("content-type", "text/plain")], b"").status < 300) {
        assert!(Instant::now() < end, "no node took the stream's create");
        std::thread::sleep(Duration::from_millis(50));
    }
    every_node_appends(&nodes, "before the rotation");
    let steps: [(&str, &Change); 3] = [
        ("step 1 (the new secret accepted too)", &|s: &Path| write_secret(&sibling(s, "next"), NEW)),
        ("step 2 (proving with the new secret)", &|s: &Path| {
            std::fs::rename(s, sibling(s, "previous")).unwrap();
            std::fs::rename(sibling(s, "next"), s).unwrap();
        }),
        ("step 3 (the new secret alone)", &|s: &Path| std::fs::remove_file(sibling(s, "previous")).unwrap()),
    ];
    for (step, change) in steps {
        for i in 0..3 {
            change(&secrets[i]);
            nodes[i].restart();
            every_node_appends(&nodes, &format!("{step}, node {} restarted", i + 1));
        }
    }
    for s in &secrets {
        assert_eq!(std::fs::read_to_string(s).unwrap(), NEW);
        assert!(!sibling(s, "next").exists() && !sibling(s, "previous").exists());
    }
}
