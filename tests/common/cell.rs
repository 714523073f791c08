//! A cell of real server processes on loopback: the secret file (mode
//! 600), free peer ports and the `--cell` flags (`--shards 1`, so one
//! group). Shared by `tests/cell_process.rs` and `tests/cell_observe.rs`.

use super::{Server, TempDir};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// `n` ports free now (bound and let go; a race with another process is
/// possible but rare on loopback).
pub fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<_> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Starts nodes 1..=n of a cell; the directory holds the secret file.
pub fn start(n: usize) -> (TempDir, Vec<Server>) {
    start_with(n, &[])
}

/// Starts nodes 1..=n of a cell, each with the flags `extra` too.
pub fn start_with(n: usize, extra: &[&str]) -> (TempDir, Vec<Server>) {
    let dir = TempDir::new("cell");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "a cell secret of some length\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let voters: Vec<String> =
        free_ports(n).iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect();
    let voters = voters.join(",");
    let nodes = (1..=n).map(|id| start_node(id, &voters, &secret, extra)).collect();
    (dir, nodes)
}

fn start_node(id: usize, voters: &str, secret: &Path, extra: &[&str]) -> Server {
    let id = id.to_string();
    let secret = secret.to_str().unwrap();
    let mut flags = vec!["--shards", "1", "--node-id", &id, "--cell", voters, "--cell-secret-file", secret];
    flags.extend_from_slice(extra);
    Server::start_with(&flags)
}
