//! With tiered storage on, SIGTERM still drains and exits 0. The tier
//! client runs a thread of its own; if it started before the stop signals
//! were blocked, the kernel could hand SIGTERM to that thread, whose
//! default action ends the process at once (exit 143, no drain, no final
//! sync). The store need not answer: the server boots without it.

mod common;

use common::TempDir;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigterm_drains_and_exits_zero_with_tiered_storage() {
    let dir = TempDir::new("tier-signals");
    let err = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let mut child = Command::new(common::server_binary())
        .args(["--listen", "127.0.0.1:0", "--shards", "2", "--no-pin", "--segment-bytes", "1048576"])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        // Port 9 on loopback: nothing listens, every request is refused.
        .args(["--tier", "s3", "--tier-endpoint", "http://127.0.0.1:9", "--tier-bucket", "b"])
        .args(["--hot-bytes", "8388608"])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test-secret")
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .expect("starting the server");
    let log = || std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "no listening line: {line:?}; stderr:\n{}", log());
    // Safety: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("still running 15 s after SIGTERM; stderr:\n{}", log());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "SIGTERM with --tier s3 ended the server with {status}; stderr:\n{}", log());
    assert!(log().contains("shutdown complete"), "no clean shutdown in the log:\n{}", log());
}
