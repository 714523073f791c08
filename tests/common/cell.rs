//! A cell of real server processes on loopback: the secret file (mode
//! 600), free peer ports and the `--cell` flags (`--shards 1`, so one
//! group, unless started with more). Shared by `tests/cell_process.rs` and `tests/cell_observe.rs`.

use super::{Conn, Server, TempDir};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// `n` distinct ports free now (bound and let go), for peer listeners:
/// picked at random below Linux's ephemeral range (32768 up), which the
/// nodes' own `--listen 127.0.0.1:0` draws from. A port picked from that
/// range could be given to a node's HTTP listener as well, and both bind
/// with SO_REUSEPORT: the kernel then split connections between them (seen
/// once in CI). Another process may still take one meanwhile, rarely.
pub fn free_ports(n: usize) -> Vec<u16> {
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        ^ u64::from(std::process::id()) << 32;
    let mut held: Vec<TcpListener> = Vec::new();
    while held.len() < n {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let port = 20_000 + (seed >> 33) as u16 % 12_000;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    held.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// `n` ports free now, each with the `run - 1` ports after it free too
/// (a node of `run` shards listens for its groups on consecutive ports),
/// no two runs overlapping; picked as [`free_ports`] picks.
pub fn free_port_runs(n: usize, run: u16) -> Vec<u16> {
    let mut picked: Vec<u16> = Vec::new();
    while picked.len() < n {
        let first = free_ports(1)[0];
        let Some(last) = first.checked_add(run - 1) else { continue };
        let overlaps = picked.iter().any(|&p| first < p + run && p <= last);
        if !overlaps && (first..=last).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            picked.push(first);
        }
    }
    picked
}

/// Starts nodes 1..=n of a cell; the directory holds the secret file.
pub fn start(n: usize) -> (TempDir, Vec<Server>) {
    start_with(n, &[])
}

/// Starts nodes 1..=n of a cell, each with the flags `extra` too.
pub fn start_with(n: usize, extra: &[&str]) -> (TempDir, Vec<Server>) {
    start_sharded(n, 1, extra)
}

/// Starts nodes 1..=n of a cell of `shards` shards a node (so `shards`
/// groups), each with the flags `extra` too.
pub fn start_sharded(n: usize, shards: u16, extra: &[&str]) -> (TempDir, Vec<Server>) {
    let dir = TempDir::new("cell");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "a cell secret of some length\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let voters: Vec<String> =
        free_port_runs(n, shards).iter().enumerate().map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1)).collect();
    let voters = voters.join(",");
    let nodes = (1..=n).map(|id| start_node(id, shards, &voters, &secret, extra)).collect();
    (dir, nodes)
}

fn start_node(id: usize, shards: u16, voters: &str, secret: &Path, extra: &[&str]) -> Server {
    let (id, shards) = (id.to_string(), shards.to_string());
    let secret = secret.to_str().unwrap();
    let mut flags = vec!["--shards", &shards, "--node-id", &id, "--cell", voters, "--cell-secret-file", secret];
    flags.extend_from_slice(extra);
    Server::start_with(&flags)
}

/// Group 0's commit index as `node`'s `/cellz` shows it; 0 while it does
/// not answer (down, or booting).
pub fn commit_index(node: &Server) -> u64 {
    group_commit(node, 0)
}

/// Group `group`'s commit index as `node`'s `/cellz` shows it; 0 while it
/// does not answer (down, or booting).
pub fn group_commit(node: &Server, group: usize) -> u64 {
    let Ok(mut c) = Conn::try_connect(node.port()) else { return 0 };
    let Ok(r) = c.try_request("GET", "/cellz", &[], b"") else { return 0 };
    let cellz: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    cellz["groups"][group]["commit"].as_u64().unwrap_or(0)
}

/// The segment files of shard 0 under data directory `dir`, by name,
/// sorted, with their bytes (one deleted while they are read is left out).
pub fn segment_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("shard-0"))
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .filter_map(|p| Some((p.file_name()?.to_string_lossy().into_owned(), std::fs::read(&p).ok()?)))
        .collect();
    files.sort();
    files
}
