//! HTTP/1.1 on the wire: a response before serialisation, its status line,
//! headers (Date, the headers every answer carries), Content-Length and
//! body. Knows no protocol: which status an outcome gets is `respond`'s.
//!
//! The `Date` header (RFC 9110 §6.6.1: an origin server with a clock sends
//! one on every response) is an IMF-fixdate such as
//! `Sun, 06 Nov 1994 08:49:37 GMT`, cheap on the hot path: each shard
//! thread keeps the last formatted value and the second it is for; a
//! response reads the wall clock (vDSO, no syscall) and formats again only
//! when the second has changed.

use crate::protocol::digits;
use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// A response before serialisation.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub close: bool,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response { status, headers: Vec::new(), body: Vec::new(), close: false }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// A one-line text body.
    pub fn text(mut self, msg: &str) -> Self {
        self.body = format!("{msg}\n").into_bytes();
        self.header("Content-Type", "text/plain; charset=utf-8")
    }
}

/// A response with a one-line text body.
pub fn plain(status: u16, msg: &str) -> Response {
    Response::new(status).text(msg)
}

/// The response headers a browser may read (CORS), on every answer.
const EXPOSE: &str = "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, \
Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, \
Producer-Received-Seq, ETag, Content-Type, Location, Retry-After, Stream-Snapshot-Offset, Stream-Retained-Offset, \
Stream-Incarnation, WWW-Authenticate";

/// On every response, errors included (F107-F109).
const EVERY_ANSWER: &[u8] = b"X-Content-Type-Options: nosniff\r\nCross-Origin-Resource-Policy: cross-origin\r\n\
Access-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: ";

/// The reason phrases of the statuses this server sends.
const REASONS: &[(u16, &str)] = &[
    (100, "Continue"),
    (200, "OK"),
    (201, "Created"),
    (204, "No Content"),
    (304, "Not Modified"),
    (307, "Temporary Redirect"),
    (400, "Bad Request"),
    (401, "Unauthorized"),
    (403, "Forbidden"),
    (404, "Not Found"),
    (405, "Method Not Allowed"),
    (408, "Request Timeout"),
    (409, "Conflict"),
    (410, "Gone"),
    (412, "Precondition Failed"),
    (413, "Content Too Large"),
    (429, "Too Many Requests"),
    (431, "Request Header Fields Too Large"),
    (500, "Internal Server Error"),
    (501, "Not Implemented"),
    (503, "Service Unavailable"),
    (507, "Insufficient Storage"),
];

fn reason(status: u16) -> &'static str {
    REASONS.iter().find(|(s, _)| *s == status).map_or("", |(_, r)| r)
}

/// Whether a response of this status carries a body (and so a length).
fn has_body(status: u16) -> bool {
    status >= 200 && status != 204 && status != 304
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` is always 29 bytes.
const IMF_FIXDATE_LEN: usize = 29;

thread_local! {
    /// (second since the epoch, its IMF-fixdate); second u64::MAX: none yet.
    static CACHE: Cell<(u64, [u8; IMF_FIXDATE_LEN])> = const { Cell::new((u64::MAX, [0; IMF_FIXDATE_LEN])) };
}

/// The IMF-fixdate of `secs` seconds after the UNIX epoch.
pub fn imf_fixdate(secs: u64) -> [u8; IMF_FIXDATE_LEN] {
    let t = chrono::DateTime::from_timestamp(i64::try_from(secs).unwrap_or(i64::MAX), 0).unwrap_or_default();
    let text = t.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let mut out = [b' '; IMF_FIXDATE_LEN];
    // Years 0-9999 give exactly 29 bytes; anything else (a clock far off) is cut.
    let n = text.len().min(IMF_FIXDATE_LEN);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// Appends `Date: <now>\r\n`, formatting at most once per second per thread.
fn write_date(out: &mut Vec<u8>) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let date = CACHE.with(|c| {
        let (secs, bytes) = c.get();
        if secs == now {
            return bytes;
        }
        let bytes = imf_fixdate(now);
        c.set((now, bytes));
        bytes
    });
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(&date);
    out.extend_from_slice(b"\r\n");
}

fn encode_head(r: &Response, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    digits::push_decimal(out, u64::from(r.status));
    out.push(b' ');
    out.extend_from_slice(reason(r.status).as_bytes());
    out.extend_from_slice(b"\r\n");
    write_date(out);
    for (k, v) in &r.headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(EVERY_ANSWER);
    out.extend_from_slice(EXPOSE.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The head of an SSE response: no Content-Length, the body ends when the
/// connection closes (F64). `incarnation`: the `Stream-Incarnation` of the
/// stream the session follows.
pub fn sse_head(base64: bool, incarnation: &str, out: &mut Vec<u8>) {
    let mut r = Response::new(200)
        .header("Content-Type", "text/event-stream")
        .header("Cache-Control", "no-cache")
        .header("Stream-Incarnation", incarnation);
    if base64 {
        r = r.header("Stream-SSE-Data-Encoding", "base64");
    }
    encode_head(&r.header("Connection", "close"), out);
    out.extend_from_slice(b"\r\n");
}

/// Serialises a response. `head_only`: a HEAD request, whose answer has
/// GET's headers (its Content-Length included) and no body bytes.
pub fn encode(r: &Response, head_only: bool, keep_alive: bool, out: &mut Vec<u8>) {
    encode_head(r, out);
    if has_body(r.status) {
        out.extend_from_slice(b"Content-Length: ");
        digits::push_decimal(out, r.body.len() as u64);
        out.extend_from_slice(b"\r\n");
    }
    if !keep_alive || r.close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only && has_body(r.status) {
        out.extend_from_slice(&r.body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_the_rfc_example() {
        // RFC 9110 §5.6.7.
        assert_eq!(&imf_fixdate(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&imf_fixdate(1_709_251_199), b"Thu, 29 Feb 2024 23:59:59 GMT");
    }

    #[test]
    fn the_header_is_now_and_cached_per_second() {
        let mut a = Vec::new();
        write_date(&mut a);
        let text = String::from_utf8(a.clone()).unwrap();
        let value = text.strip_prefix("Date: ").and_then(|v| v.strip_suffix("\r\n")).unwrap();
        let parsed = chrono::DateTime::parse_from_rfc2822(value).unwrap();
        let now = chrono::Utc::now().timestamp();
        assert!((parsed.timestamp() - now).abs() <= 1, "{value} is not now");
        let (secs, cached) = CACHE.with(Cell::get);
        assert_eq!(secs as i64, parsed.timestamp());
        assert_eq!(&cached[..], value.as_bytes());
    }

    fn wire(r: &Response, head_only: bool, keep_alive: bool) -> String {
        let mut out = Vec::new();
        encode(r, head_only, keep_alive, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_response_on_the_wire() {
        let text = wire(&plain(404, "not found").header("ETag", "\"e\""), false, true);
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\nDate: "), "{text}");
        assert!(text.contains("\r\nETag: \"e\"\r\n"), "{text}");
        assert!(text.contains("\r\nAccess-Control-Allow-Origin: *\r\n"), "{text}");
        assert!(text.ends_with("\r\nContent-Length: 10\r\n\r\nnot found\n"), "{text}");
        assert!(!text.contains("Connection: close"), "{text}");
    }

    #[test]
    fn head_answers_keep_the_length_and_drop_the_body() {
        let text = wire(&plain(200, "ok"), true, false);
        assert!(text.ends_with("\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"), "{text}");
    }

    #[test]
    fn no_length_nor_body_on_204_and_304() {
        for status in [204, 304] {
            let text = wire(&plain(status, "ignored"), false, true);
            assert!(!text.contains("Content-Length") && text.ends_with("\r\n\r\n"), "{text}");
        }
        assert_eq!(reason(599), "");
        assert_eq!(reason(503), "Service Unavailable");
    }

    #[test]
    fn sse_heads_have_no_length_and_close() {
        let mut out = Vec::new();
        sse_head(true, "0000000000000abc00000001", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\r\nStream-Incarnation: 0000000000000abc00000001\r\n"), "{text}");
        assert!(text.contains("Stream-SSE-Data-Encoding: base64\r\n"), "{text}");
        assert!(text.contains("\r\nConnection: close\r\n") && text.ends_with("\r\n\r\n"), "{text}");
        assert!(!text.contains("Content-Length"), "{text}");
    }
}
