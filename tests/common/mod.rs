//! Shared harness for the end-to-end tests: a temporary directory, the
//! server binary as a child process, and a small HTTP/1.1 client written
//! over `std::net::TcpStream` (keep-alive, Content-Length and chunked
//! response bodies, 1xx responses skipped).
//!
//! Every socket has read and write timeouts and every wait on the child is
//! bounded, so a misbehaving server fails a test instead of hanging it.

#![allow(dead_code)]

pub mod auth;
pub mod cell;
pub mod requests;
pub mod rng;
pub mod sim;
pub mod webhook;

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Socket read/write timeout for every client connection.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server may take to print its "listening" line.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The offset of an empty stream (the conformance suite hard-codes it).
pub const ZERO_OFFSET: &str = "0000000000000000_0000000000000000";

// ---------------------------------------------------------------------------
// Temporary directory

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("ringstream-it-{tag}-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        TempDir { path }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------
// Server process

/// The server binary running as a child process on its own data directory.
/// Killed (SIGKILL) when dropped.
pub struct Server {
    child: Option<Child>,
    port: u16,
    root: TempDir,
    args: Vec<String>,
    starts: usize,
    pin: bool,
    /// Environment variables the process gets besides the test's own.
    env: Vec<(String, String)>,
}

impl Server {
    /// Starts a server with 2 shards (unless the flags give `--shards`) on
    /// a fresh data directory.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Like [`Server::start`], with extra command-line flags.
    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_opts(extra, false)
    }

    /// Like [`Server::start_with`], with executors pinned to CPUs as in
    /// production (other tests pass `--no-pin` so parallel servers on a
    /// small machine do not all pile onto CPU 0).
    pub fn start_pinned(extra: &[&str]) -> Server {
        Server::start_opts(extra, true)
    }

    /// Like [`Server::start_with`], with these environment variables too.
    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_full(extra, false, env)
    }

    fn start_opts(extra: &[&str], pin: bool) -> Server {
        Server::start_full(extra, pin, &[])
    }

    fn start_full(extra: &[&str], pin: bool, env: &[(&str, &str)]) -> Server {
        let root = TempDir::new("srv");
        std::fs::create_dir_all(root.path().join("data")).expect("creating data dir");
        let args = extra.iter().map(|s| s.to_string()).collect();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut s = Server { child: None, port: 0, root, args, starts: 0, pin, env };
        s.spawn();
        s
    }

    /// Process id of the running server.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// A new keep-alive connection to this server.
    pub fn conn(&self) -> Conn {
        Conn::connect(self.port)
    }

    /// SIGKILL (what `Child::kill` sends on Unix), then reap the process.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills the running server (SIGKILL) and starts a new one on the same
    /// data directory and flags. The port usually changes.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Sends SIGTERM and waits (at most `limit`) for the process to exit.
    /// Returns its exit status (None: still running at the limit, then
    /// killed) and how long it took.
    pub fn terminate(&mut self, limit: Duration) -> (Option<std::process::ExitStatus>, Duration) {
        let mut c = self.child.take().expect("server running");
        let started = Instant::now();
        // Safety: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "sending SIGTERM: {}", io::Error::last_os_error());
        loop {
            if let Some(status) = c.try_wait().expect("waiting for the server") {
                return (Some(status), started.elapsed());
            }
            if started.elapsed() > limit {
                let _ = c.kill();
                let _ = c.wait();
                return (None, started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts the server again (same data directory and flags) after it
    /// exited; the port usually changes.
    /// Flags every later start gets too.
    pub fn add_args(&mut self, extra: &[&str]) {
        self.args.extend(extra.iter().map(|s| s.to_string()));
    }

    /// The value given to `flag` (the argument after it), if it is given.
    pub fn arg(&self, flag: &str) -> Option<&str> {
        let at = self.args.iter().position(|a| a == flag)?;
        self.args.get(at + 1).map(String::as_str)
    }

    /// Gives `flag` the value `value` from the next start on (it must be
    /// given already).
    pub fn set_arg(&mut self, flag: &str, value: &str) {
        let at = self.args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("no {flag} to change"));
        self.args[at + 1] = value.to_string();
    }

    pub fn start_again(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// The stderr log of the latest start.
    pub fn log_path(&self) -> PathBuf {
        self.root.path().join(format!("stderr-{}.log", self.starts))
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "server already running");
        self.starts += 1;
        let log = File::create(self.log_path()).expect("creating stderr log");
        let mut cmd = Command::new(server_binary());
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(
                if self.args.iter().any(|a| a == "--shards") { None } else { Some(["--shards", "2"]) }
                    .into_iter()
                    .flatten(),
            )
            .args(if self.pin { None } else { Some("--no-pin") })
            .args(&self.args)
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = cmd.spawn().expect("spawning ringstream");
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, rx) = mpsc::channel::<String>();
        // Reads stdout until EOF so the pipe never fills; the first lines go
        // to the channel.
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let _ = tx.send(line.trim_end().to_string());
                    }
                }
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let port = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(line) => {
                    if let Some(p) = parse_listen_port(&line) {
                        break p;
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait();
                    panic!(
                        "ringstream did not report a listening address within {START_TIMEOUT:?} (exit: {status:?}); stderr:\n{}",
                        self.log_tail()
                    );
                }
            }
        };
        self.port = port;
        self.child = Some(child);
    }

    /// The last few KiB of the current stderr log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read(self.log_path()).unwrap_or_default();
        let from = text.len().saturating_sub(8192);
        String::from_utf8_lossy(&text[from..]).into_owned()
    }

    /// GET /metrics, parsed into (name-with-labels, value) pairs.
    pub fn metrics(&self) -> Vec<(String, f64)> {
        let r = self.conn().request("GET", "/metrics", &[], b"");
        assert_eq!(r.status, 200, "GET /metrics");
        r.text()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.trim().to_string(), v.trim().parse().ok()?))
            })
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            eprintln!("--- ringstream stderr (tail) ---\n{}\n--- end ---", self.log_tail());
            // Debugging aid: keep the failed server alive for a while (to
            // attach a debugger) before it is killed.
            if let Some(secs) = std::env::var("RINGSTREAM_TEST_HOLD_SECS").ok().and_then(|s| s.parse().ok()) {
                let pid = self.child.as_ref().map(|c| c.id()).unwrap_or(0);
                eprintln!("holding failed server pid {pid} (port {}) for {secs} s", self.port);
                std::thread::sleep(Duration::from_secs(secs));
            }
        }
        self.kill9();
    }
}

/// The server binary under test: this package's `ringstream`, or the path in
/// `RINGSTREAM_TEST_BIN` (to run the suite against another build, e.g. a
/// release binary).
pub fn server_binary() -> PathBuf {
    match std::env::var_os("RINGSTREAM_TEST_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_ringstream")),
    }
}

/// `ringstream listening on http://127.0.0.1:PORT (...)` -> PORT.
fn parse_listen_port(line: &str) -> Option<u16> {
    let rest = line.strip_prefix("ringstream listening on http://")?;
    let addr = rest.split_whitespace().next()?;
    addr.rsplit_once(':')?.1.parse().ok()
}

// ---------------------------------------------------------------------------
// HTTP client

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }
    /// The header's value, or a panic naming the response.
    pub fn must(&self, name: &str) -> &str {
        self.header(name).unwrap_or_else(|| panic!("response has no {name} header: {}", self.summary()))
    }
    /// `Stream-Next-Offset`, which must be present.
    pub fn sno(&self) -> String {
        self.must("stream-next-offset").to_string()
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// Status, headers and the start of the body, for assertion messages.
    pub fn summary(&self) -> String {
        let mut s = format!("{} [", self.status);
        for (k, v) in &self.headers {
            if k.starts_with("access-control-expose") {
                continue;
            }
            s.push_str(&format!("{k}: {v}; "));
        }
        let body = String::from_utf8_lossy(&self.body[..self.body.len().min(200)]).into_owned();
        s.push_str(&format!("] body({}): {body:?}", self.body.len()));
        s
    }
    fn wants_close(&self) -> bool {
        self.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// One HTTP/1.1 connection. Reconnects on the next request after the server
/// answered `Connection: close`.
pub struct Conn {
    port: u16,
    stream: Option<TcpStream>,
    /// Bytes read past the end of the previous response (pipelining).
    buf: Vec<u8>,
}

impl Conn {
    pub fn connect(port: u16) -> Conn {
        Conn::try_connect(port).unwrap_or_else(|e| panic!("connecting to 127.0.0.1:{port}: {e}"))
    }

    pub fn try_connect(port: u16) -> io::Result<Conn> {
        let mut c = Conn { port, stream: None, buf: Vec::new() };
        c.ensure()?;
        Ok(c)
    }

    /// A connection over an already connected socket (for example the
    /// reading half of one that another thread writes to).
    pub fn from_stream(port: u16, s: TcpStream) -> Conn {
        s.set_read_timeout(Some(IO_TIMEOUT)).expect("set_read_timeout");
        Conn { port, stream: Some(s), buf: Vec::new() }
    }

    fn ensure(&mut self) -> io::Result<&mut TcpStream> {
        if self.stream.is_none() {
            let s = TcpStream::connect(("127.0.0.1", self.port))?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            s.set_nodelay(true)?;
            self.buf.clear();
            self.stream = Some(s);
        }
        Ok(self.stream.as_mut().unwrap())
    }

    /// Sends a request and reads its response; panics on I/O errors.
    pub fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        self.try_request(method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: I/O error: {e}"))
    }

    /// Sends a request and reads its response.
    pub fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        let bytes = encode_request(self.port, method, path, headers, body);
        self.send_raw(&bytes)?;
        self.read_response(method == "HEAD")
    }

    /// Writes raw bytes on the connection (for pipelining and edge cases).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        let s = self.ensure()?;
        let r = s.write_all(bytes).and_then(|_| s.flush());
        if r.is_err() {
            self.stream = None;
        }
        r
    }

    /// Reads one final response (1xx responses are skipped). `head`: the
    /// request was HEAD, so the response has no body.
    pub fn read_response(&mut self, head: bool) -> io::Result<Response> {
        loop {
            let r = self.read_one(head);
            match r {
                Ok(resp) if (100..200).contains(&resp.status) => continue,
                Ok(resp) => {
                    if resp.wants_close() {
                        self.close();
                    }
                    return Ok(resp);
                }
                Err(e) => {
                    self.close();
                    return Err(e);
                }
            }
        }
    }

    /// Reads exactly one response head + body, which may be a 1xx.
    pub fn read_one(&mut self, head: bool) -> io::Result<Response> {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            if self.buf.len() > 1 << 20 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "response head over 1 MiB"));
            }
            self.fill()?;
        };
        let head_text = String::from_utf8(self.buf[..end].to_vec())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "response head is not UTF-8"))?;
        self.buf.drain(..end + 4);
        let mut lines = head_text.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        if !version.starts_with("HTTP/1.") {
            return Err(bad_data(format!("bad status line {status_line:?}")));
        }
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_data(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        for l in lines {
            let (k, v) = l.split_once(':').ok_or_else(|| bad_data(format!("bad header line {l:?}")))?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let mut resp = Response { status, headers, body: Vec::new() };
        if head || status == 204 || status == 304 || (100..200).contains(&status) {
            return Ok(resp);
        }
        let chunked = resp.header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if chunked {
            resp.body = self.read_chunked()?;
        } else if let Some(n) = resp.header("content-length") {
            let n: usize = n.parse().map_err(|_| bad_data(format!("bad Content-Length {n:?}")))?;
            while self.buf.len() < n {
                self.fill()?;
            }
            resp.body = self.buf.drain(..n).collect();
        } else {
            // Delimited by the end of the connection.
            loop {
                match self.fill() {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e),
                }
            }
            resp.body = std::mem::take(&mut self.buf);
            self.close();
        }
        Ok(resp)
    }

    fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = find(&self.buf, b"\r\n") {
                    break i;
                }
                self.fill()?;
            };
            let line = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
            let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad_data(format!("bad chunk size {line:?}")))?;
            self.buf.drain(..line_end + 2);
            if size == 0 {
                // Trailers, then an empty line.
                loop {
                    let e = loop {
                        if let Some(i) = find(&self.buf, b"\r\n") {
                            break i;
                        }
                        self.fill()?;
                    };
                    self.buf.drain(..e + 2);
                    if e == 0 {
                        return Ok(body);
                    }
                }
            }
            while self.buf.len() < size + 2 {
                self.fill()?;
            }
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
        }
    }

    /// Reads more bytes into the buffer; EOF is an `UnexpectedEof` error.
    fn fill(&mut self) -> io::Result<()> {
        let s = self.stream.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "connection closed"))?;
        let mut tmp = [0u8; 64 * 1024];
        let n = s.read(&mut tmp)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection"));
        }
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(())
    }

    /// Drops the socket; the next request reconnects.
    pub fn close(&mut self) {
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.buf.clear();
    }

    /// Whether the server's side of the connection is known to be closed:
    /// waits up to `wait` for EOF.
    pub fn peer_closed_within(&mut self, wait: Duration) -> bool {
        let Some(s) = self.stream.as_mut() else {
            return true;
        };
        let _ = s.set_read_timeout(Some(wait));
        let mut tmp = [0u8; 1024];
        let r = s.read(&mut tmp);
        let _ = s.set_read_timeout(Some(IO_TIMEOUT));
        match r {
            Ok(0) => true,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                false
            }
            Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
        }
    }
}

/// The bytes of one request. Adds `Host`, and `Content-Length` for a body
/// (and for PUT/POST) unless the caller set `Content-Length` or
/// `Transfer-Encoding` itself.
pub fn encode_request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("host") {
        out.extend_from_slice(format!("Host: 127.0.0.1:{port}\r\n").as_bytes());
    }
    for (k, v) in headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    if !has("content-length") && !has("transfer-encoding") && (!body.is_empty() || method == "PUT" || method == "POST")
    {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

fn bad_data(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------------------
// Helpers shared by the tests

/// Reads a whole stream from `-1` by following `Stream-Next-Offset` until
/// `Stream-Up-To-Date` (the server cuts long reads into chunks). Returns
/// the bytes, the final next offset, and the last response. Panics on a
/// status other than 200/204.
pub fn read_all(c: &mut Conn, path: &str) -> (Vec<u8>, String, Response) {
    read_from(c, path, "-1")
}

/// Like [`read_all`], starting at `offset`.
pub fn read_from(c: &mut Conn, path: &str, offset: &str) -> (Vec<u8>, String, Response) {
    let mut body = Vec::new();
    let mut offset = offset.to_string();
    for _ in 0..100_000 {
        let r = c.request("GET", &format!("{path}?offset={offset}"), &[], b"");
        assert!(r.status == 200 || r.status == 204, "GET {path}?offset={offset}: {}", r.summary());
        body.extend_from_slice(&r.body);
        let next = r.sno();
        let done = r.header("stream-up-to-date") == Some("true");
        if done {
            return (body, next, r);
        }
        assert_ne!(next, offset, "GET {path}?offset={offset} made no progress and is not up to date");
        offset = next;
    }
    panic!("reading {path} did not reach the tail");
}

/// JSON text without insignificant whitespace (outside strings), for loose
/// comparison.
pub fn squash_json(s: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut esc = false;
    for ch in s.chars() {
        if in_str {
            out.push(ch);
            if esc {
                esc = false;
            } else if ch == '\\' {
                esc = true;
            } else if ch == '"' {
                in_str = false;
            }
        } else if ch == '"' {
            in_str = true;
            out.push(ch);
        } else if !ch.is_whitespace() {
            out.push(ch);
        }
    }
    out
}

/// Reads an SSE response until `pred` holds on the text so far.
pub fn read_sse_until(s: &mut TcpStream, pred: impl Fn(&str) -> bool) -> String {
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                text.extend_from_slice(&buf[..n]);
                if pred(&String::from_utf8_lossy(&text)) {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                continue
            }
            Err(e) => panic!("reading SSE: {e}"),
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}
