//! HTTP/1.1 client pieces: the target URL, an incremental response parser,
//! and a tiny blocking keep-alive client used for setup.
//!
//! The parser ([`ResponseParser`]) is push-based: the event loops feed it
//! whatever bytes a non-blocking read returned, in pieces of any size, and it
//! says when a response is complete. The status line, headers and chunk-size
//! lines are parsed by `httparse`; this file adds what a push parser needs
//! around it: interim 1xx responses, and a body framed by `Content-Length`,
//! `Transfer-Encoding: chunked`, connection close, or absent (HEAD, 204,
//! 304). It keeps its buffers between responses, so a steady stream of small
//! responses allocates nothing.
//!
//! The blocking [`Client`] (one request at a time, no pipelining, no TLS, no
//! redirects) drives the same parser over a `BufReader<TcpStream>`. A failed
//! request drops its connection; the next request transparently reconnects.

use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Longest response head (status line + headers), and longest chunk-size or
/// trailer line, we accept before declaring the peer broken.
const MAX_LINE: usize = 64 * 1024;
/// Most header lines we accept in one response.
const MAX_HEADERS: usize = 256;

/// A parsed `http://host[:port][/base/path]` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host as written (IPv6 literals keep their brackets), used for `Host:`.
    pub host: String,
    pub port: u16,
    /// Path prefix without a trailing slash ("" for the root).
    pub base_path: String,
}

impl Target {
    pub fn parse(url: &str) -> anyhow::Result<Target> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("target must start with http:// (got {url:?})"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            anyhow::bail!("target {url:?} has no host");
        }
        let (host, port) = if let Some(after) = authority.strip_prefix('[') {
            // IPv6 literal: [addr]:port
            let end = after.find(']').ok_or_else(|| anyhow::anyhow!("unterminated IPv6 literal in {url:?}"))?;
            let host = &authority[..end + 2];
            let tail = &after[end + 1..];
            let port = match tail.strip_prefix(':') {
                Some(p) => p.parse()?,
                None if tail.is_empty() => 80,
                None => anyhow::bail!("bad authority in {url:?}"),
            };
            (host.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => {
                    (h.to_string(), p.parse().map_err(|e| anyhow::anyhow!("bad port {p:?} in {url:?}: {e}"))?)
                }
                None => (authority.to_string(), 80),
            }
        };
        Ok(Target { host, port, base_path: path.trim_end_matches('/').to_string() })
    }

    /// Value for the `Host:` request header.
    pub fn host_header(&self) -> String {
        if self.port == 80 {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Resolve to socket addresses (done once, not per connection).
    pub fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = (host, self.port).to_socket_addrs()?.collect();
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{} resolved to no addresses", self.host)));
        }
        Ok(addrs)
    }

    /// Full request path for `suffix` (which must start with '/').
    pub fn path(&self, suffix: &str) -> String {
        format!("{}{}", self.base_path, suffix)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.base_path)
    }
}

/// A complete HTTP response. Headers are kept as received (one string plus
/// spans), so parsing one allocates nothing once the buffers have grown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header lines after the status line, as received.
    head: String,
    /// (name start, name end, value start, value end) in `head`; names and
    /// values trimmed.
    spans: Vec<[u32; 4]>,
    pub body: Vec<u8>,
}

impl Response {
    /// First header named `name` (case-insensitive); the value is trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    /// All headers in order, names as received.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.spans.iter().map(|s| (&self.head[s[0] as usize..s[1] as usize], &self.head[s[2] as usize..s[3] as usize]))
    }

    fn clear(&mut self) {
        self.status = 0;
        self.head.clear();
        self.spans.clear();
        self.body.clear();
    }
}

fn proto_err(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Where the parser is within one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Collecting the status line and headers.
    Head,
    /// Body with this many bytes still to come.
    Length(u64),
    /// Waiting for a chunk-size line.
    ChunkSize,
    /// Inside a chunk with this many bytes still to come.
    ChunkData(u64),
    /// The CRLF after chunk data.
    ChunkEnd,
    /// Trailer lines after the last chunk, up to an empty line.
    Trailer,
    /// Body delimited by connection close.
    UntilEof,
    /// A response is complete.
    Done,
}

/// Incremental (push) parser for one HTTP/1.x response at a time.
#[derive(Debug)]
pub struct ResponseParser {
    stage: Stage,
    /// The request was HEAD: no body whatever the headers say.
    head_request: bool,
    /// Stop after the head of a final response (the caller streams the body).
    head_only: bool,
    /// Bytes of the head received so far.
    raw: Vec<u8>,
    /// Chunk-size and trailer line accumulator.
    line: Vec<u8>,
    resp: Response,
    keep_alive: bool,
}

impl Default for ResponseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseParser {
    pub fn new() -> Self {
        ResponseParser {
            stage: Stage::Head,
            head_request: false,
            head_only: false,
            raw: Vec::with_capacity(512),
            line: Vec::new(),
            resp: Response::default(),
            keep_alive: true,
        }
    }

    /// Prepare for the response to the next request (`head_request`: it was
    /// a HEAD). Buffers keep their capacity.
    pub fn reset(&mut self, head_request: bool) {
        self.stage = Stage::Head;
        self.head_request = head_request;
        self.head_only = false;
        self.raw.clear();
        self.line.clear();
        self.resp.clear();
        self.keep_alive = true;
    }

    /// Like [`reset`](Self::reset), but the parser stops right after the
    /// head of the final (non-1xx) response; the bytes after it are left
    /// unconsumed for the caller (used for streamed SSE bodies).
    pub fn reset_head_only(&mut self) {
        self.reset(false);
        self.head_only = true;
    }

    /// Whether a response (or, in head-only mode, a head) is complete.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// Whether the parser is between responses: nothing of the next one
    /// has arrived yet.
    pub fn is_idle(&self) -> bool {
        self.stage == Stage::Head && self.raw.is_empty()
    }

    /// The response parsed so far (complete once [`is_done`](Self::is_done)).
    pub fn response(&self) -> &Response {
        &self.resp
    }

    /// Move the completed response out (the parser's body buffer goes with it).
    pub fn take_response(&mut self) -> Response {
        std::mem::take(&mut self.resp)
    }

    /// Whether the connection may carry another request after this response.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// Feed received bytes. Returns how many were used: all of them unless a
    /// response completed, in which case the rest belongs to whatever follows.
    pub fn feed(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut pos = 0;
        loop {
            match self.stage {
                Stage::Done => return Ok(pos),
                Stage::Head => {
                    let used = self.feed_head(&buf[pos..])?;
                    pos += used;
                    if self.stage == Stage::Head {
                        return Ok(pos);
                    }
                }
                Stage::Length(left) => {
                    let take = left.min((buf.len() - pos) as u64) as usize;
                    self.resp.body.extend_from_slice(&buf[pos..pos + take]);
                    pos += take;
                    let left = left - take as u64;
                    if left == 0 {
                        self.stage = Stage::Done;
                    } else {
                        self.stage = Stage::Length(left);
                        return Ok(pos);
                    }
                }
                Stage::ChunkSize => {
                    if !self.take_line(buf, &mut pos)? {
                        return Ok(pos);
                    }
                    // httparse wants the line with its CRLF.
                    self.line.extend_from_slice(b"\r\n");
                    let size = match httparse::parse_chunk_size(&self.line) {
                        Ok(httparse::Status::Complete((_, size))) => size,
                        _ => {
                            return Err(proto_err(format!("bad chunk size {:?}", String::from_utf8_lossy(&self.line))))
                        }
                    };
                    self.line.clear();
                    self.stage = if size == 0 { Stage::Trailer } else { Stage::ChunkData(size) };
                }
                Stage::ChunkData(left) => {
                    let take = left.min((buf.len() - pos) as u64) as usize;
                    self.resp.body.extend_from_slice(&buf[pos..pos + take]);
                    pos += take;
                    let left = left - take as u64;
                    if left == 0 {
                        self.stage = Stage::ChunkEnd;
                    } else {
                        self.stage = Stage::ChunkData(left);
                        return Ok(pos);
                    }
                }
                Stage::ChunkEnd => {
                    if !self.take_line(buf, &mut pos)? {
                        return Ok(pos);
                    }
                    if !self.line.is_empty() {
                        return Err(proto_err("missing CRLF after chunk data"));
                    }
                    self.stage = Stage::ChunkSize;
                }
                Stage::Trailer => {
                    if !self.take_line(buf, &mut pos)? {
                        return Ok(pos);
                    }
                    if self.line.is_empty() {
                        self.stage = Stage::Done;
                    }
                    self.line.clear();
                }
                Stage::UntilEof => {
                    self.resp.body.extend_from_slice(&buf[pos..]);
                    return Ok(buf.len());
                }
            }
        }
    }

    /// The peer closed the connection. Completes a close-delimited body;
    /// anywhere else inside a response it is an error.
    pub fn eof(&mut self) -> io::Result<()> {
        match self.stage {
            Stage::Done => Ok(()),
            Stage::UntilEof => {
                self.stage = Stage::Done;
                Ok(())
            }
            Stage::Head if self.raw.is_empty() => {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by peer"))
            }
            _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-response")),
        }
    }

    /// Append up to and including the next '\n' of `buf[*pos..]` to
    /// `self.line`. Returns true when a whole line (terminator stripped) is
    /// in `self.line`.
    fn take_line(&mut self, buf: &[u8], pos: &mut usize) -> io::Result<bool> {
        let rest = &buf[*pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.line.extend_from_slice(&rest[..i]);
                *pos += i + 1;
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                if self.line.len() > MAX_LINE {
                    return Err(proto_err("response line too long"));
                }
                Ok(true)
            }
            None => {
                self.line.extend_from_slice(rest);
                *pos = buf.len();
                if self.line.len() > MAX_LINE {
                    return Err(proto_err("response line too long"));
                }
                Ok(false)
            }
        }
    }

    /// Collect head bytes from `rest` and try to parse the head (httparse);
    /// once complete, move to the body stage. Returns the bytes of `rest`
    /// used: all of them while the head is incomplete, else up to its end.
    fn feed_head(&mut self, rest: &[u8]) -> io::Result<usize> {
        let old = self.raw.len();
        self.raw.extend_from_slice(rest);
        // Out of `self` while httparse's headers borrow it.
        let raw = std::mem::take(&mut self.raw);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut headers);
        let done = match parsed.parse(&raw) {
            Ok(httparse::Status::Complete(len)) => {
                self.take_head(parsed.code.unwrap_or(0), parsed.version == Some(0), parsed.headers).map(|()| Some(len))
            }
            Ok(httparse::Status::Partial) if raw.len() > MAX_LINE => Err(proto_err("response head too long")),
            Ok(httparse::Status::Partial) => Ok(None),
            Err(e) => Err(proto_err(format!("bad response head: {e}"))),
        };
        self.raw = raw;
        match done? {
            Some(len) => {
                self.raw.clear();
                Ok(len - old)
            }
            None => Ok(rest.len()),
        }
    }

    /// A complete head: keep a final response's headers (skipping interim
    /// 1xx responses) and choose how the body is framed.
    fn take_head(&mut self, status: u16, http10: bool, headers: &[httparse::Header<'_>]) -> io::Result<()> {
        // Interim 1xx responses (e.g. 100 Continue) are skipped, except 101
        // which we do not support (it ends the response without a body).
        if (100..200).contains(&status) && status != 101 {
            return Ok(());
        }
        let resp = &mut self.resp;
        resp.clear();
        resp.status = status;
        for &httparse::Header { name, value } in headers {
            let value = std::str::from_utf8(value).map_err(|_| proto_err("non-UTF-8 header value"))?.trim();
            let at = resp.head.len();
            resp.head.push_str(name);
            resp.head.push_str(": ");
            resp.head.push_str(value);
            resp.head.push('\n');
            let (name_end, value_at) = (at + name.len(), at + name.len() + 2);
            resp.spans.push([at as u32, name_end as u32, value_at as u32, (value_at + value.len()) as u32]);
        }
        let has_token = |v: &str, tok: &str| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(tok));
        self.keep_alive = match resp.header("connection") {
            Some(v) if has_token(v, "close") => false,
            Some(v) if has_token(v, "keep-alive") => true,
            _ => !http10,
        };
        if self.head_only {
            self.stage = Stage::Done;
            return Ok(());
        }
        let no_body = self.head_request || matches!(status, 101 | 204 | 304);
        self.stage = if no_body {
            Stage::Done
        } else if resp
            .header("transfer-encoding")
            .is_some_and(|v| v.rsplit(',').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked")))
        {
            Stage::ChunkSize
        } else if let Some(cl) = resp.header("content-length") {
            let n: u64 = cl.parse().map_err(|_| proto_err(format!("bad Content-Length {cl:?}")))?;
            if n == 0 {
                Stage::Done
            } else {
                Stage::Length(n)
            }
        } else {
            // Body delimited by connection close.
            self.keep_alive = false;
            Stage::UntilEof
        };
        Ok(())
    }
}

/// Read one response from a blocking reader. Returns the response and
/// whether the connection may be reused.
pub fn read_response<R: BufRead>(r: &mut R, head_request: bool) -> io::Result<(Response, bool)> {
    let mut p = ResponseParser::new();
    p.reset(head_request);
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            p.eof()?;
        } else {
            let n = p.feed(buf)?;
            r.consume(n);
        }
        if p.is_done() {
            let keep = p.keep_alive();
            return Ok((p.take_response(), keep));
        }
    }
}

/// One blocking keep-alive connection to a target, reconnecting on demand
/// (used for setup; the load itself runs on the event loops).
pub struct Client {
    addrs: Vec<SocketAddr>,
    host_header: String,
    timeout: Duration,
    conn: Option<BufReader<TcpStream>>,
    /// Reused request buffer (head + body written with one syscall).
    req: Vec<u8>,
    /// Number of TCP connections opened so far (for diagnostics/tests).
    pub connects: u64,
}

impl Client {
    pub fn new(target: &Target, timeout: Duration) -> io::Result<Client> {
        Ok(Client {
            addrs: target.resolve()?,
            host_header: target.host_header(),
            timeout,
            conn: None,
            req: Vec::with_capacity(4096),
            connects: 0,
        })
    }

    /// Establish the connection now if there is none (otherwise a no-op).
    pub fn ensure_connected(&mut self) -> io::Result<()> {
        if self.conn.is_some() {
            return Ok(());
        }
        let mut last_err = None;
        for addr in &self.addrs {
            match TcpStream::connect_timeout(addr, self.timeout) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    s.set_read_timeout(Some(self.timeout))?;
                    s.set_write_timeout(Some(self.timeout))?;
                    self.conn = Some(BufReader::with_capacity(16 * 1024, s));
                    self.connects += 1;
                    return Ok(());
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")))
    }

    /// Send one request and read the full response. On any error the
    /// connection is dropped so the next call starts fresh.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> io::Result<Response> {
        let r = self.request_inner(method, path, content_type, body);
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    fn request_inner(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> io::Result<Response> {
        self.ensure_connected()?;

        self.req.clear();
        write!(self.req, "{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host_header)?;
        if let Some(ct) = content_type {
            write!(self.req, "Content-Type: {ct}\r\n")?;
        }
        let sends_body = !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH");
        if sends_body {
            write!(self.req, "Content-Length: {}\r\n", body.len())?;
        }
        self.req.extend_from_slice(b"\r\n");
        self.req.extend_from_slice(body);

        let conn = self.conn.as_mut().expect("connected above");
        conn.get_mut().write_all(&self.req)?;

        let (resp, keep_alive) = read_response(conn, method == "HEAD")?;
        if !keep_alive {
            self.conn = None;
        }
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::thread;

    /// Read one request (head + Content-Length body) from a raw stream.
    fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
        let mut head = String::new();
        loop {
            let mut l = String::new();
            if r.read_line(&mut l).ok()? == 0 {
                return None;
            }
            if l == "\r\n" {
                break;
            }
            head.push_str(&l);
        }
        let cl = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; cl];
        r.read_exact(&mut body).ok()?;
        Some((head, body))
    }

    /// Serve canned responses, one per request, across however many
    /// connections the client opens. Sends each request head to `tx`.
    fn canned_server(responses: Vec<&'static str>) -> (Target, mpsc::Receiver<(String, Vec<u8>)>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut responses = responses.into_iter();
            for s in l.incoming() {
                let s = s.unwrap();
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                while let Some(req) = read_request(&mut r) {
                    let _ = tx.send(req);
                    let Some(resp) = responses.next() else { return };
                    w.write_all(resp.as_bytes()).unwrap();
                    if resp.contains("Connection: close") {
                        break;
                    }
                }
            }
        });
        let t = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        (t, rx)
    }

    #[test]
    fn parses_target_urls() {
        let t = Target::parse("http://127.0.0.1:4437").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.base_path.as_str()), ("127.0.0.1", 4437, ""));
        let t = Target::parse("http://example.com/api/").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.base_path.as_str()), ("example.com", 80, "/api"));
        assert_eq!(t.path("/v1/stream/x"), "/api/v1/stream/x");
        assert_eq!(t.host_header(), "example.com");
        let t = Target::parse("http://[::1]:8080/").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("[::1]", 8080));
        assert_eq!(t.host_header(), "[::1]:8080");
        assert!(Target::parse("https://x").is_err());
        assert!(Target::parse("http://x:notaport").is_err());
    }

    #[test]
    fn content_length_chunked_and_204_on_one_keepalive_connection() {
        let (t, rx) = canned_server(vec![
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Foo: bar\r\n\r\nhello",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
             4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n",
            "HTTP/1.1 204 No Content\r\nStream-Next-Offset: 42\r\n\r\n",
            "HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n",
        ]);
        let mut c = Client::new(&t, Duration::from_secs(5)).unwrap();

        let r = c.request("GET", "/a", None, b"").unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"hello");
        assert_eq!(r.header("X-FOO"), Some("bar"));
        let (head, _) = rx.recv().unwrap();
        assert!(head.starts_with("GET /a HTTP/1.1\r\n"), "{head}");
        assert!(head.contains(&format!("Host: 127.0.0.1:{}\r\n", t.port)), "{head}");

        let r = c.request("GET", "/b", None, b"").unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"Wikipedia");

        let r = c.request("POST", "/c", Some("application/octet-stream"), b"payload").unwrap();
        assert_eq!(r.status, 204);
        assert!(r.body.is_empty());
        assert_eq!(r.header("stream-next-offset"), Some("42"));
        rx.recv().unwrap();
        let (head, body) = rx.recv().unwrap();
        assert!(head.starts_with("POST /c HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("Content-Type: application/octet-stream\r\n"));
        assert!(head.contains("Content-Length: 7\r\n"));
        assert_eq!(body, b"payload");

        // A PUT with an empty body still declares Content-Length: 0.
        let r = c.request("PUT", "/d", None, b"").unwrap();
        assert_eq!(r.status, 201);
        let (head, _) = rx.recv().unwrap();
        assert!(head.contains("Content-Length: 0\r\n"), "{head}");

        assert_eq!(c.connects, 1, "all four requests must share one connection");
    }

    #[test]
    fn connection_close_and_eof_body_reconnect() {
        let (t, _rx) = canned_server(vec![
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy",
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ]);
        let mut c = Client::new(&t, Duration::from_secs(5)).unwrap();
        let r = c.request("POST", "/x", None, b"1").unwrap();
        assert_eq!(r.status, 503);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(r.body, b"busy");
        let r = c.request("POST", "/x", None, b"2").unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(c.connects, 2);
    }

    #[test]
    fn parses_close_delimited_body_and_skips_100_continue() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil eof";
        let mut r = BufReader::new(&raw[..]);
        let (resp, keep) = read_response(&mut r, false).unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, b"until eof");
        assert!(!keep);
    }

    #[test]
    fn protocol_errors_are_reported() {
        for raw in [
            &b"HTTP/1.1 2x0 OK\r\n\r\n"[..],
            b"SPDY/9 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Le",
            b"",
        ] {
            let mut r = BufReader::new(raw);
            assert!(read_response(&mut r, false).is_err(), "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn io_error_then_reconnect() {
        // A server that closes the first connection without answering, then
        // answers on the next one.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s);
            let _ = read_request(&mut r);
            drop(r);
            let (s, _) = l.accept().unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            let _ = read_request(&mut r);
            w.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
        });
        let t = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let mut c = Client::new(&t, Duration::from_secs(5)).unwrap();
        assert!(c.request("POST", "/x", None, b"a").is_err());
        assert_eq!(c.request("POST", "/x", None, b"a").unwrap().status, 204);
        assert_eq!(c.connects, 2);
    }

    /// Feed `raw` in the given piece sizes (cycled) and collect every
    /// complete response, then EOF. Returns responses (with keep-alive) and
    /// whether EOF was clean.
    fn parse_pieces(raw: &[u8], sizes: &[usize]) -> (Vec<(Response, bool)>, io::Result<()>) {
        let mut p = ResponseParser::new();
        p.reset(false);
        let mut out = Vec::new();
        let mut at = 0;
        let mut si = 0;
        while at < raw.len() {
            let n = sizes[si % sizes.len()].max(1).min(raw.len() - at);
            si += 1;
            let piece = &raw[at..at + n];
            at += n;
            let mut used = 0;
            while used < piece.len() {
                match p.feed(&piece[used..]) {
                    Ok(k) => used += k,
                    Err(e) => return (out, Err(e)),
                }
                if p.is_done() {
                    out.push((p.take_response(), p.keep_alive()));
                    p.reset(false);
                }
            }
        }
        let end = p.eof();
        if end.is_ok() && p.is_done() {
            out.push((p.take_response(), p.keep_alive()));
        }
        (out, end)
    }

    const STREAM: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Foo:  bar \r\n\r\nhello\
HTTP/1.1 100 Continue\r\n\r\n\
HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n\
HTTP/1.1 204 No Content\r\nStream-Next-Offset: 42\r\n\r\n\
HTTP/1.1 304 Not Modified\nETag: x\n\n\
HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: keep-alive, close\r\n\r\nbusy\
HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil eof\r\n\r\nstill body";

    fn check_stream(rs: &[(Response, bool)]) {
        let got: Vec<(u16, &[u8], bool)> = rs.iter().map(|(r, k)| (r.status, r.body.as_slice(), *k)).collect();
        assert_eq!(
            got,
            vec![
                (200, &b"hello"[..], true),
                (200, b"Wikipedia", true),
                (204, b"", true),
                (304, b"", true),
                (503, b"busy", false),
                (200, b"until eof\r\n\r\nstill body", false),
            ]
        );
        assert_eq!(rs[0].0.header("x-FOO"), Some("bar"));
        assert_eq!(rs[2].0.header("stream-next-offset"), Some("42"));
        assert_eq!(rs[3].0.header("etag"), Some("x"));
        assert_eq!(rs[5].0.header("content-type"), Some("text/plain"));
        let names: Vec<&str> = rs[0].0.headers().map(|(k, _)| k).collect();
        assert_eq!(names, ["Content-Length", "X-Foo"]);
    }

    #[test]
    fn incremental_parse_at_every_split_point() {
        // One shot.
        let (rs, end) = parse_pieces(STREAM, &[STREAM.len()]);
        end.unwrap();
        check_stream(&rs);
        // Every two-piece split, and every three-piece split with a gap of
        // up to 40 bytes between the cuts.
        for cut in 1..STREAM.len() {
            let (rs, end) = parse_pieces(STREAM, &[cut, STREAM.len()]);
            end.unwrap();
            check_stream(&rs);
            for gap in 1..40 {
                let (rs, end) = parse_pieces(STREAM, &[cut, gap, STREAM.len()]);
                end.unwrap();
                check_stream(&rs);
            }
        }
        // Byte by byte, and assorted piece sizes.
        for sizes in [&[1][..], &[2], &[3, 1, 7], &[13, 2], &[64, 5, 1]] {
            let (rs, end) = parse_pieces(STREAM, sizes);
            end.unwrap();
            check_stream(&rs);
        }
    }

    #[test]
    fn incremental_parse_errors_at_every_split_point() {
        for raw in [
            &b"HTTP/1.1 2x0 OK\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        ] {
            for cut in 1..raw.len() {
                let (rs, end) = parse_pieces(raw, &[cut, raw.len()]);
                assert!(end.is_err() && rs.is_empty(), "{:?} cut at {cut}", String::from_utf8_lossy(raw));
            }
        }
    }

    #[test]
    fn head_only_mode_leaves_the_body() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\nevent: data\n";
        for cut in 1..raw.len() {
            let mut p = ResponseParser::new();
            p.reset_head_only();
            let mut used = p.feed(&raw[..cut]).unwrap();
            assert_eq!(used, cut.min(raw.len() - 12));
            if !p.is_done() {
                used += p.feed(&raw[cut..]).unwrap();
            }
            assert!(p.is_done());
            assert_eq!(&raw[used..], b"event: data\n");
            assert_eq!(p.response().status, 200);
            assert_eq!(p.response().header("content-type"), Some("text/event-stream"));
            assert!(!p.keep_alive());
        }
    }

    #[test]
    fn head_too_long_is_an_error() {
        let mut p = ResponseParser::new();
        p.reset(false);
        let mut raw = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        raw.resize(MAX_LINE + 100, b'a');
        assert!(p.feed(&raw).is_err());
    }
}
