//! Auth files for the tests: tokens with their grants and rights, bucket
//! quotas, written as the TOML the server reads; the SHA-256 of each token
//! computed here independently of the server's code.

use super::{Server, TempDir};
use sha2::{Digest, Sha256};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A server started with an auth file, kept beside it for reloads.
pub struct AuthedServer {
    pub srv: Server,
    pub file: PathBuf,
    _dir: TempDir,
}

impl AuthedServer {
    /// A server whose auth file has these tokens and quotas.
    pub fn start(grants: &[Grant], quotas: &[Quota]) -> AuthedServer {
        let dir = TempDir::new("auth");
        let file = dir.path().join("auth.toml");
        write(&file, grants, quotas);
        let srv = Server::start_with(&["--auth-file", file.to_str().unwrap()]);
        AuthedServer { srv, file, _dir: dir }
    }
}

/// One `[[token]]` entry.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    pub name: &'static str,
    pub token: &'static str,
    pub buckets: &'static [&'static str],
    pub rights: &'static [&'static str],
}

/// One `[[bucket]]` entry.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    pub bucket: &'static str,
    pub max_streams: Option<u64>,
    pub max_bytes: Option<u64>,
}

/// Lower-case hex SHA-256, as `sha256sum` prints it.
pub fn sha256_hex(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

pub fn toml(grants: &[Grant], quotas: &[Quota]) -> String {
    let mut out = String::new();
    for g in grants {
        let _ = writeln!(out, "[[token]]\nname = {:?}\nsha256 = {:?}", g.name, sha256_hex(g.token));
        let _ = writeln!(out, "buckets = {}\nrights = {}\n", list(g.buckets), list(g.rights));
    }
    for q in quotas {
        let _ = writeln!(out, "[[bucket]]\nname = {:?}", q.bucket);
        if let Some(n) = q.max_streams {
            let _ = writeln!(out, "max_streams = {n}");
        }
        if let Some(n) = q.max_bytes {
            let _ = writeln!(out, "max_bytes = {n}");
        }
        out.push('\n');
    }
    out
}

/// Writes the auth file at `path` (replacing it whole, as an editor's save would).
pub fn write(path: &Path, grants: &[Grant], quotas: &[Quota]) {
    write_text(path, &toml(grants, quotas));
}

pub fn write_text(path: &Path, text: &str) {
    let tmp: PathBuf = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("writing the auth file");
    std::fs::rename(&tmp, path).expect("replacing the auth file");
}

/// The `Authorization` header for a token.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Sends SIGHUP to the server.
pub fn hang_up(pid: u32) {
    // Safety: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0, "sending SIGHUP: {}", std::io::Error::last_os_error());
}

/// Polls `ok` until it holds, for at most 10 s.
pub fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}
