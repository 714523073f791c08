//! A tiny blocking HTTP/1.1 keep-alive client over `std::net::TcpStream`.
//!
//! It is deliberately minimal: one request at a time on one connection, no
//! pipelining, no TLS, no redirects. It understands exactly what a load
//! generator needs from responses: the status line, headers, and a body framed
//! by `Content-Length`, `Transfer-Encoding: chunked`, or connection close.
//!
//! A failed request (any I/O or protocol error) drops the connection; the next
//! request transparently reconnects.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Longest status/header line we accept before declaring the peer broken.
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
            let end = after
                .find(']')
                .ok_or_else(|| anyhow::anyhow!("unterminated IPv6 literal in {url:?}"))?;
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
                Some((h, p)) => (
                    h.to_string(),
                    p.parse()
                        .map_err(|e| anyhow::anyhow!("bad port {p:?} in {url:?}: {e}"))?,
                ),
                None => (authority.to_string(), 80),
            }
        };
        Ok(Target {
            host,
            port,
            base_path: path.trim_end_matches('/').to_string(),
        })
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
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} resolved to no addresses", self.host),
            ));
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

/// A complete HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header names are lower-cased; values are trimmed.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// First header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One keep-alive connection to a target, reconnecting on demand.
pub struct Client {
    addrs: Vec<SocketAddr>,
    host_header: String,
    timeout: Duration,
    conn: Option<BufReader<TcpStream>>,
    /// Reused request buffer (head + body written with one syscall).
    req: Vec<u8>,
    /// Reused line buffer for parsing.
    line: Vec<u8>,
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
            line: Vec::with_capacity(256),
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
        write!(
            self.req,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n",
            self.host_header
        )?;
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

        let (resp, keep_alive) = read_response(conn, &mut self.line, method == "HEAD")?;
        if !keep_alive {
            self.conn = None;
        }
        Ok(resp)
    }
}

fn proto_err(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Read one CRLF (or LF) terminated line into `buf`, without the terminator.
fn read_line<R: BufRead>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    let n = r.by_ref().take(MAX_LINE as u64).read_until(b'\n', buf)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by peer",
        ));
    }
    if buf.last() != Some(&b'\n') {
        if n >= MAX_LINE {
            return Err(proto_err("response line too long"));
        }
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed mid-line",
        ));
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(())
}

/// Read one response. Returns the response and whether the connection may be
/// reused.
pub fn read_response<R: BufRead>(
    r: &mut R,
    line: &mut Vec<u8>,
    head_request: bool,
) -> io::Result<(Response, bool)> {
    loop {
        // Status line: HTTP/1.x SP 3DIGIT [SP reason]
        read_line(r, line)?;
        let text = std::str::from_utf8(line).map_err(|_| proto_err("non-UTF-8 status line"))?;
        let mut parts = text.splitn(3, ' ');
        let version = parts.next().unwrap_or("");
        let http10 = match version {
            "HTTP/1.1" => false,
            "HTTP/1.0" => true,
            _ => return Err(proto_err(format!("bad status line {text:?}"))),
        };
        let status: u16 = parts
            .next()
            .and_then(|s| (s.len() == 3).then_some(s))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| proto_err(format!("bad status code in {text:?}")))?;

        let mut headers = Vec::new();
        loop {
            read_line(r, line)?;
            if line.is_empty() {
                break;
            }
            if headers.len() >= MAX_HEADERS {
                return Err(proto_err("too many response headers"));
            }
            let text = std::str::from_utf8(line).map_err(|_| proto_err("non-UTF-8 header"))?;
            let (k, v) = text
                .split_once(':')
                .ok_or_else(|| proto_err(format!("bad header line {text:?}")))?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }

        // Interim 1xx responses (e.g. 100 Continue) are skipped, except 101
        // which we do not support.
        if (100..200).contains(&status) && status != 101 {
            continue;
        }

        let mut resp = Response {
            status,
            headers,
            body: Vec::new(),
        };
        let conn_hdr = resp.header("connection").map(|v| v.to_ascii_lowercase());
        let mut keep_alive = match conn_hdr.as_deref() {
            Some(v) if v.split(',').any(|t| t.trim() == "close") => false,
            Some(v) if v.split(',').any(|t| t.trim() == "keep-alive") => true,
            _ => !http10,
        };

        let no_body = head_request || status == 204 || status == 304 || status == 101;
        if !no_body {
            let chunked = resp
                .header("transfer-encoding")
                .map(|v| {
                    v.rsplit(',')
                        .next()
                        .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"))
                })
                .unwrap_or(false);
            if chunked {
                read_chunked(r, line, &mut resp.body)?;
            } else if let Some(cl) = resp.header("content-length") {
                let n: usize = cl
                    .parse()
                    .map_err(|_| proto_err(format!("bad Content-Length {cl:?}")))?;
                resp.body.resize(n, 0);
                r.read_exact(&mut resp.body)?;
            } else {
                // Body delimited by connection close.
                r.read_to_end(&mut resp.body)?;
                keep_alive = false;
            }
        }
        return Ok((resp, keep_alive));
    }
}

fn read_chunked<R: BufRead>(r: &mut R, line: &mut Vec<u8>, body: &mut Vec<u8>) -> io::Result<()> {
    loop {
        read_line(r, line)?;
        let text = std::str::from_utf8(line).map_err(|_| proto_err("non-UTF-8 chunk size"))?;
        let size_str = text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_str, 16)
            .map_err(|_| proto_err(format!("bad chunk size {text:?}")))?;
        if size == 0 {
            // Trailer section, terminated by an empty line.
            loop {
                read_line(r, line)?;
                if line.is_empty() {
                    return Ok(());
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        read_line(r, line)?;
        if !line.is_empty() {
            return Err(proto_err("missing CRLF after chunk data"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
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
        assert_eq!(
            (t.host.as_str(), t.port, t.base_path.as_str()),
            ("127.0.0.1", 4437, "")
        );
        let t = Target::parse("http://example.com/api/").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.base_path.as_str()),
            ("example.com", 80, "/api")
        );
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
        assert!(
            head.contains(&format!("Host: 127.0.0.1:{}\r\n", t.port)),
            "{head}"
        );

        let r = c.request("GET", "/b", None, b"").unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"Wikipedia");

        let r = c
            .request("POST", "/c", Some("application/octet-stream"), b"payload")
            .unwrap();
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
        let (resp, keep) = read_response(&mut r, &mut Vec::new(), false).unwrap();
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
            assert!(
                read_response(&mut r, &mut Vec::new(), false).is_err(),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
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
}
