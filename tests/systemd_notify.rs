//! systemd's notify protocol, through the real binary: the test binds its
//! own datagram socket, names it in NOTIFY_SOCKET (and asks for a watchdog
//! with WATCHDOG_USEC), starts the server, and checks that READY=1 comes
//! only once the server serves, that WATCHDOG=1 pings follow at about half
//! the interval, and that SIGTERM sends STOPPING=1 before a clean exit.

mod common;

use common::{Conn, TempDir};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A port that was free a moment ago (the server must be reachable the
/// instant READY=1 arrives, before its stdout is read).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn recv(sock: &UnixDatagram, within: Duration) -> Option<String> {
    sock.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn ready_only_once_serving_then_watchdog_then_stopping() {
    let root = TempDir::new("notify");
    let sock_path = root.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let port = free_port();
    let data = root.path().join("data");
    let mut child = Command::new(common::server_binary())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--shards", "2", "--no-pin", "--data-dir"])
        .arg(&data)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "400000")
        .env_remove("WATCHDOG_PID")
        .env_remove("RINGSTREAM_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(root.path().join("stderr.log")).unwrap_or_default();

    let first = recv(&sock, Duration::from_secs(20)).unwrap_or_else(|| panic!("no notification; stderr:\n{}", log()));
    assert!(first.lines().any(|l| l == "READY=1"), "the first notification is READY=1: {first:?}");
    assert!(first.contains("STATUS=serving on http://127.0.0.1:"), "{first:?}");
    // The instant READY=1 arrived, the server answers: recovery is done and
    // every shard listens (readyz says so).
    let mut c = Conn::connect(port);
    let r = c.request("GET", "/readyz", &[], b"");
    assert_eq!(r.status, 200, "{}", r.summary());
    assert_eq!(c.request("PUT", "/v1/stream/after-ready", &[("Content-Type", "text/plain")], b"").status, 201);

    // Watchdog pings every ~200 ms (half of 400 ms) while the shards beat.
    let started = Instant::now();
    let mut pings = 0;
    while started.elapsed() < Duration::from_millis(1500) {
        match recv(&sock, Duration::from_millis(1000)) {
            Some(m) if m.trim() == "WATCHDOG=1" => pings += 1,
            Some(m) => panic!("unexpected notification while serving: {m:?}"),
            None => break,
        }
    }
    assert!((4..=10).contains(&pings), "{pings} watchdog pings in 1.5 s (expected ~7)");

    // Safety: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let mut stopping = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match recv(&sock, Duration::from_millis(500)) {
            Some(m) if m.lines().any(|l| l == "STOPPING=1") => {
                stopping = true;
                break;
            }
            Some(m) => assert_eq!(m.trim(), "WATCHDOG=1", "unexpected notification: {m:?}"),
            None => break,
        }
    }
    assert!(stopping, "no STOPPING=1 after SIGTERM; stderr:\n{}", log());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "stderr:\n{}", log());
}

#[test]
fn without_notify_socket_nothing_is_sent_and_the_server_runs() {
    // The common harness starts servers without NOTIFY_SOCKET; that every
    // other test passes shows the no-op path. Here: a socket that does not
    // exist is a warning, not a failure.
    let root = TempDir::new("notify-missing");
    let mut child = Command::new(common::server_binary())
        .args(["--listen", "127.0.0.1:0", "--shards", "1", "--no-pin", "--data-dir"])
        .arg(root.path().join("data"))
        .env("NOTIFY_SOCKET", root.path().join("nobody-listens.sock"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(root.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert!(line.starts_with("ringstream listening on"), "{line:?}");
    // READY=1 follows the listening line; its failure is a warning.
    let read_log = || std::fs::read_to_string(root.path().join("stderr.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !read_log().contains("telling systemd") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(child.try_wait().unwrap().is_none(), "the server keeps running");
    let _ = child.kill();
    let _ = child.wait();
    let log = read_log();
    assert!(log.contains("WARN") && log.contains("telling systemd"), "the failed notification is logged:\n{log}");
}
