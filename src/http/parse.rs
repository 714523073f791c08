//! Incremental HTTP/1.1 request parsing.
//!
//! The connection loop owns the read buffer and calls [`parse_head`] after every read.
//! A head that has not fully arrived yet is reported as [`ParseError::Incomplete`] so the
//! loop simply reads more; every other error maps to a final response and a closed
//! connection. All work and all buffering is bounded by [`ParseLimits`], because the
//! bytes come straight from untrusted clients.

use httparse::{Header, Status, EMPTY_HEADER};

/// Bounds applied while parsing; taken as a value so this module does not depend on
/// where the server keeps its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    pub header_bytes_max: usize,
    pub header_count_max: usize,
    pub body_bytes_max: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Put,
    Post,
    Delete,
    Options,
    Other(String),
}

impl Method {
    // Method names are case-sensitive (RFC 9110 §9.1), so "get" is not GET.
    fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "PUT" => Method::Put,
            "POST" => Method::Post,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            other => Method::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Other(s) => s,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: Method,
    /// Request-target exactly as received.
    pub target: String,
    /// Percent-decoded path (before '?').
    pub path: String,
    /// Path as received (before '?'), still percent-encoded.
    pub raw_path: String,
    /// Decoded query pairs in the order they appeared.
    pub query: Vec<(String, String)>,
    pub minor_version: u8,
    /// Lower-cased names, trimmed values, in the order received.
    pub headers: Headers,
    pub keep_alive: bool,
    pub body: BodyKind,
    pub expect_continue: bool,
}

/// A request's header fields, all names and values in one string (one
/// allocation per request instead of two per field).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Headers {
    text: String,
    /// Per field: where its name ends in `text` (its value starts there),
    /// and where its value ends (the next name starts there).
    ends: Vec<(u32, u32)>,
}

impl Headers {
    fn with_capacity(fields: usize, bytes: usize) -> Self {
        Headers { text: String::with_capacity(bytes), ends: Vec::with_capacity(fields) }
    }

    /// Adds a field; `name` is lower-cased on the way in.
    fn push(&mut self, name: &str, value: &str) {
        let start = self.text.len();
        self.text.push_str(name);
        self.text[start..].make_ascii_lowercase();
        let name_end = self.text.len() as u32;
        self.text.push_str(value);
        self.ends.push((name_end, self.text.len() as u32));
    }

    /// (name, value) pairs in the order received.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut start = 0usize;
        self.ends.iter().map(move |&(n, v)| {
            let field = (&self.text[start..n as usize], &self.text[n as usize..v as usize]);
            start = v as usize;
            field
        })
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl RequestHead {
    /// First header with this (lower-case) name.
    pub fn header(&self, name_lowercase: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| *n == name_lowercase).map(|(_, v)| v)
    }

    pub fn header_count(&self, name_lowercase: &str) -> usize {
        self.headers.iter().filter(|(n, _)| *n == name_lowercase).count()
    }

    /// First query value for this key.
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn query_count(&self, key: &str) -> usize {
        self.query.iter().filter(|(k, _)| k == key).count()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    Chunked,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// More bytes are needed; not a failure.
    Incomplete,
    /// Answer 431.
    HeadersTooLarge,
    /// Answer 431.
    TooManyHeaders,
    /// Answer 413.
    BodyTooLarge,
    /// Answer 400 with this reason.
    Bad(&'static str),
    /// Answer 501.
    UnsupportedTransferEncoding,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Incomplete => f.write_str("incomplete request"),
            ParseError::HeadersTooLarge => f.write_str("request header section too large"),
            ParseError::TooManyHeaders => f.write_str("too many request headers"),
            ParseError::BodyTooLarge => f.write_str("request body too large"),
            ParseError::Bad(reason) => write!(f, "bad request: {reason}"),
            ParseError::UnsupportedTransferEncoding => f.write_str("unsupported transfer-encoding"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Typical requests carry a handful of headers; up to this many slots live on the stack
/// so the common case does not allocate for httparse's scratch space.
const STACK_HEADER_SLOTS: usize = 64;

/// Parse the request head at the start of `buf`. On success returns the head and the
/// number of bytes it used.
///
/// Returns `HeadersTooLarge` as soon as `buf.len() > header_bytes_max` while the head is
/// still incomplete (so a client cannot make us buffer unbounded headers), and also if a
/// complete head is longer than the limit.
pub fn parse_head(buf: &[u8], limits: &ParseLimits) -> Result<(RequestHead, usize), ParseError> {
    // A legal head must end within the first header_bytes_max bytes. Parsing only that
    // window bounds the work per call and turns an over-long head into a Partial result,
    // while pipelined bytes beyond a short head stay out of the way.
    let window = &buf[..buf.len().min(limits.header_bytes_max)];
    let mut stack_slots = [EMPTY_HEADER; STACK_HEADER_SLOTS];
    let mut heap_slots: Vec<Header<'_>>;
    let slots: &mut [Header<'_>] = if limits.header_count_max <= STACK_HEADER_SLOTS {
        &mut stack_slots[..limits.header_count_max]
    } else {
        heap_slots = vec![EMPTY_HEADER; limits.header_count_max];
        &mut heap_slots
    };
    let mut req = httparse::Request::new(slots);
    let used = match req.parse(window) {
        Ok(Status::Complete(n)) => n,
        Ok(Status::Partial) if buf.len() > limits.header_bytes_max => return Err(ParseError::HeadersTooLarge),
        Ok(Status::Partial) => return Err(ParseError::Incomplete),
        Err(e) => return Err(map_httparse_error(e)),
    };
    // httparse fills all three on Complete; the fallbacks only avoid a panic path.
    let method_token = req.method.ok_or(ParseError::Bad("missing method"))?;
    let target = req.path.ok_or(ParseError::Bad("missing request-target"))?;
    let minor_version = req.version.ok_or(ParseError::Bad("missing HTTP version"))?;
    let Target { raw_path, path, query } = target_parts(target)?;
    let headers = collect_headers(req.headers, used)?;
    let framing = Framing::scan(&headers)?;
    let head = RequestHead {
        method: Method::from_token(method_token),
        target: target.to_owned(),
        path,
        raw_path: raw_path.to_owned(),
        query,
        minor_version,
        body: framing.body(limits)?,
        keep_alive: framing.keep_alive(minor_version),
        // HTTP/1.0 clients cannot understand an interim 100 response, so the expectation
        // is ignored for them (RFC 9110 §10.1.1).
        expect_continue: framing.expect && minor_version >= 1,
        headers,
    };
    Ok((head, used))
}

/// A request-target's parts.
struct Target<'a> {
    /// The path as sent.
    raw_path: &'a str,
    /// The path decoded.
    path: String,
    query: Vec<(String, String)>,
}

/// The request-target's path as sent, decoded, and its query.
fn target_parts(target: &str) -> Result<Target<'_>, ParseError> {
    let path_and_query = origin_part(target)?;
    let (raw_path, query_str) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    // Absolute-form without a path ("http://host") means the root (RFC 9112 §3.2.2).
    let raw_path = if raw_path.is_empty() { "/" } else { raw_path };
    let path = percent_decode(raw_path, false)?;
    if path.contains('\0') {
        return Err(ParseError::Bad("path contains NUL"));
    }
    let query = match query_str {
        Some(q) => parse_query(q)?,
        None => Vec::new(),
    };
    Ok(Target { raw_path, path, query })
}

/// The header fields as UTF-8, values trimmed.
fn collect_headers(fields: &[Header<'_>], head_len: usize) -> Result<Headers, ParseError> {
    let mut headers = Headers::with_capacity(fields.len(), head_len);
    for h in fields {
        let value = std::str::from_utf8(h.value).map_err(|_| ParseError::Bad("header value is not valid UTF-8"))?;
        headers.push(h.name, value.trim_matches([' ', '\t']));
    }
    Ok(headers)
}

/// What the headers say about the message's framing and the connection.
#[derive(Debug, Default, PartialEq, Eq)]
struct Framing {
    content_length: Option<u64>,
    te_headers: usize,
    te_is_chunked: bool,
    conn_close: bool,
    conn_keep_alive: bool,
    expect: bool,
}

impl Framing {
    fn scan(headers: &Headers) -> Result<Framing, ParseError> {
        let mut f = Framing::default();
        for (name, value) in headers.iter() {
            match name {
                "content-length" => {
                    let n = parse_content_length(value)?;
                    match f.content_length {
                        // Differing lengths are the classic request-smuggling vector.
                        Some(prev) if prev != n => return Err(ParseError::Bad("conflicting Content-Length headers")),
                        _ => f.content_length = Some(n),
                    }
                }
                "transfer-encoding" => {
                    f.te_headers += 1;
                    f.te_is_chunked = value.eq_ignore_ascii_case("chunked");
                }
                "connection" => {
                    for token in value.split(',').map(|t| t.trim_matches([' ', '\t'])) {
                        f.conn_close |= token.eq_ignore_ascii_case("close");
                        f.conn_keep_alive |= token.eq_ignore_ascii_case("keep-alive");
                    }
                }
                "expect" if value.eq_ignore_ascii_case("100-continue") => f.expect = true,
                _ => {}
            }
        }
        Ok(f)
    }

    fn body(&self, limits: &ParseLimits) -> Result<BodyKind, ParseError> {
        if self.te_headers > 0 {
            if self.content_length.is_some() {
                return Err(ParseError::Bad("both Content-Length and Transfer-Encoding present"));
            }
            // Several TE headers form a list of codings (e.g. "gzip" then "chunked"); only a
            // lone "chunked" is something we can decode.
            return if self.te_headers == 1 && self.te_is_chunked {
                Ok(BodyKind::Chunked)
            } else {
                Err(ParseError::UnsupportedTransferEncoding)
            };
        }
        match self.content_length {
            Some(n) if n > limits.body_bytes_max => Err(ParseError::BodyTooLarge),
            Some(n) => Ok(BodyKind::Length(n)),
            None => Ok(BodyKind::None),
        }
    }

    fn keep_alive(&self, minor_version: u8) -> bool {
        if minor_version >= 1 {
            !self.conn_close
        } else {
            // HTTP/1.0 framing with Transfer-Encoding is untrustworthy, so the connection
            // must not be reused afterwards (RFC 9112 §6.1).
            self.conn_keep_alive && !self.conn_close && self.te_headers == 0
        }
    }
}

fn map_httparse_error(e: httparse::Error) -> ParseError {
    match e {
        httparse::Error::TooManyHeaders => ParseError::TooManyHeaders,
        httparse::Error::HeaderName => ParseError::Bad("invalid header name"),
        httparse::Error::HeaderValue => ParseError::Bad("invalid header value"),
        httparse::Error::NewLine => ParseError::Bad("invalid line ending"),
        httparse::Error::Token => ParseError::Bad("invalid request line"),
        httparse::Error::Version => ParseError::Bad("unsupported HTTP version"),
        _ => ParseError::Bad("malformed request head"),
    }
}

/// Reduce a request-target to its path-and-query part.
fn origin_part(target: &str) -> Result<&str, ParseError> {
    if target.starts_with('/') {
        return Ok(target);
    }
    // Absolute-form must be accepted by servers (RFC 9112 §3.2.2) even though only
    // proxies are expected to receive it; the authority is ignored.
    let rest = strip_prefix_ignore_case(target, "http://")
        .or_else(|| strip_prefix_ignore_case(target, "https://"))
        .ok_or(ParseError::Bad("request-target must be origin-form or absolute-form"))?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    if authority_end == 0 {
        return Err(ParseError::Bad("absolute-form target without authority"));
    }
    Ok(&rest[authority_end..])
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        Some(&s[prefix.len()..])
    } else {
        None
    }
}

fn parse_query(q: &str) -> Result<Vec<(String, String)>, ParseError> {
    q.split('&')
        // "a=1&&b=2" and a trailing '&' carry no parameter.
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(k, true)?, percent_decode(v, true)?))
        })
        .collect()
}

fn parse_content_length(value: &str) -> Result<u64, ParseError> {
    // Strict 1*DIGIT: signs, spaces and list forms like "5, 5" are all rejected so that
    // we never disagree with another hop about where the body ends.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::Bad("invalid Content-Length"));
    }
    // Only overflow can fail here; such a length is certainly over any body limit.
    value.parse::<u64>().map_err(|_| ParseError::BodyTooLarge)
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decode (used for path and query); `plus_as_space` for query strings.
pub fn percent_decode(s: &str, plus_as_space: bool) -> Result<String, ParseError> {
    let bytes = s.as_bytes();
    if !bytes.iter().any(|&b| b == b'%' || (plus_as_space && b == b'+')) {
        return Ok(s.to_owned());
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = bytes.get(i + 1).copied().and_then(hex_val);
                let lo = bytes.get(i + 2).copied().and_then(hex_val);
                match (hi, lo) {
                    (Some(hi), Some(lo)) => out.push((hi << 4) | lo),
                    _ => return Err(ParseError::Bad("invalid percent-encoding")),
                }
                i += 3;
            }
            b'+' if plus_as_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| ParseError::Bad("percent-decoded text is not valid UTF-8"))
}

/// Longest chunk-size line (size plus extensions) we accept; real clients send a few
/// bytes, and an unbounded line would let a client stall us without sending data.
const CHUNK_LINE_MAX: usize = 1024;
/// Trailers are discarded, so there is no reason to accept many of them.
const TRAILER_BYTES_MAX: usize = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Hex digits of a chunk size.
    Size,
    /// After the digits: whitespace and extensions up to CR.
    SizeTail,
    /// CR of the size line seen.
    SizeLf,
    /// Inside chunk data.
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line or of the final empty line.
    TrailerStart,
    TrailerLine,
    TrailerLf,
    /// CR of the final empty line seen.
    FinalLf,
    Done,
    /// An earlier call failed; the stream position is meaningless from here on.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkProgress {
    NeedMore,
    Done,
}

/// Incremental chunked transfer-coding decoder. Feed it bytes that follow the head;
/// it appends decoded data to `out` and reports how many input bytes it consumed.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// Size being parsed, then the data bytes still expected of the current chunk.
    size: u64,
    size_digits: usize,
    line_len: usize,
    trailer_len: usize,
    /// Sum of all declared chunk sizes so far; never exceeds `limit`.
    declared: u64,
    limit: u64,
}

impl ChunkedDecoder {
    pub fn new(body_bytes_max: u64) -> Self {
        ChunkedDecoder {
            state: ChunkState::Size,
            size: 0,
            size_digits: 0,
            line_len: 0,
            trailer_len: 0,
            declared: 0,
            limit: body_bytes_max,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Body bytes announced by chunk-size lines so far.
    pub fn decoded_len(&self) -> u64 {
        self.declared
    }

    /// Consumes as much of `input` as possible. Returns (consumed, progress).
    ///
    /// `Done` means the terminating 0-size chunk, trailers (ignored) and the final CRLF
    /// were consumed; bytes after `consumed` belong to the next pipelined request.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(usize, ChunkProgress), ParseError> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                ChunkState::Done => break,
                ChunkState::Failed => return Err(ParseError::Bad("chunked body already failed")),
                ChunkState::Data => {
                    // Copy data in bulk; only the framing is walked byte by byte.
                    let avail = input.len() - i;
                    let take = usize::try_from(self.size).map_or(avail, |s| s.min(avail));
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    self.size -= take as u64;
                    if self.size == 0 {
                        self.state = ChunkState::DataCr;
                    }
                }
                _ => {
                    let b = input[i];
                    i += 1;
                    if let Err(e) = self.step(b) {
                        self.state = ChunkState::Failed;
                        return Err(e);
                    }
                }
            }
        }
        match self.state {
            ChunkState::Done => Ok((i, ChunkProgress::Done)),
            ChunkState::Failed => Err(ParseError::Bad("chunked body already failed")),
            _ => Ok((i, ChunkProgress::NeedMore)),
        }
    }

    fn step(&mut self, b: u8) -> Result<(), ParseError> {
        match self.state {
            ChunkState::Size => self.size_byte(b),
            ChunkState::SizeTail => self.extension_byte(b),
            ChunkState::SizeLf => self.size_line_end(b),
            ChunkState::DataCr | ChunkState::DataLf => {
                let expected = if self.state == ChunkState::DataCr { b'\r' } else { b'\n' };
                if b != expected {
                    return Err(ParseError::Bad("missing CRLF after chunk data"));
                }
                self.state = if b == b'\r' { ChunkState::DataLf } else { ChunkState::Size };
                Ok(())
            }
            ChunkState::TrailerStart | ChunkState::TrailerLine | ChunkState::TrailerLf | ChunkState::FinalLf => {
                self.trailer_byte(b)
            }
            // decode() handles these without calling step().
            ChunkState::Data | ChunkState::Done | ChunkState::Failed => Ok(()),
        }
    }

    /// A byte of a chunk-size line's hex digits, or what ends them.
    fn size_byte(&mut self, b: u8) -> Result<(), ParseError> {
        self.count_line_byte()?;
        if let Some(d) = hex_val(b) {
            self.size = self
                .size
                .checked_mul(16)
                .and_then(|s| s.checked_add(u64::from(d)))
                .ok_or(ParseError::Bad("chunk size overflows"))?;
            self.size_digits += 1;
            return Ok(());
        }
        if self.size_digits == 0 {
            return Err(ParseError::Bad("missing chunk size"));
        }
        // Refuse before any data of an oversized chunk is buffered.
        if self.size > self.limit - self.declared {
            return Err(ParseError::BodyTooLarge);
        }
        self.state = match b {
            b'\r' => ChunkState::SizeLf,
            b';' | b' ' | b'\t' => ChunkState::SizeTail,
            _ => return Err(ParseError::Bad("invalid chunk size")),
        };
        Ok(())
    }

    /// A byte of a chunk extension (skipped up to the line's CR).
    fn extension_byte(&mut self, b: u8) -> Result<(), ParseError> {
        self.count_line_byte()?;
        match b {
            b'\r' => self.state = ChunkState::SizeLf,
            b'\t' => {}
            // Bare LF and other controls are where lenient parsers disagree.
            0..=0x1f | 0x7f => return Err(ParseError::Bad("invalid byte in chunk extension")),
            _ => {}
        }
        Ok(())
    }

    /// The LF ending a chunk-size line: the chunk's data, or the trailer
    /// after the last chunk.
    fn size_line_end(&mut self, b: u8) -> Result<(), ParseError> {
        if b != b'\n' {
            return Err(ParseError::Bad("expected LF after chunk size"));
        }
        self.line_len = 0;
        self.size_digits = 0;
        if self.size == 0 {
            self.state = ChunkState::TrailerStart;
        } else {
            self.declared += self.size;
            self.state = ChunkState::Data;
        }
        Ok(())
    }

    /// A byte of the trailer section, up to the final CRLF.
    fn trailer_byte(&mut self, b: u8) -> Result<(), ParseError> {
        self.count_trailer_byte()?;
        self.state = match (self.state, b) {
            (ChunkState::TrailerStart | ChunkState::TrailerLine, b'\n') => {
                return Err(ParseError::Bad("bare LF in chunked trailer"))
            }
            (ChunkState::TrailerStart, b'\r') => ChunkState::FinalLf,
            (ChunkState::TrailerStart, _) => ChunkState::TrailerLine,
            (ChunkState::TrailerLine, b'\r') => ChunkState::TrailerLf,
            (ChunkState::TrailerLine, _) => ChunkState::TrailerLine,
            (ChunkState::TrailerLf, b'\n') => ChunkState::TrailerStart,
            (ChunkState::TrailerLf, _) => return Err(ParseError::Bad("expected LF in chunked trailer")),
            (ChunkState::FinalLf, b'\n') => ChunkState::Done,
            (ChunkState::FinalLf, _) => return Err(ParseError::Bad("expected LF at end of chunked body")),
            (other, _) => other,
        };
        Ok(())
    }

    fn count_line_byte(&mut self) -> Result<(), ParseError> {
        self.line_len += 1;
        if self.line_len > CHUNK_LINE_MAX {
            return Err(ParseError::Bad("chunk size line too long"));
        }
        Ok(())
    }

    fn count_trailer_byte(&mut self) -> Result<(), ParseError> {
        self.trailer_len += 1;
        if self.trailer_len > TRAILER_BYTES_MAX {
            return Err(ParseError::Bad("chunked trailers too large"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ParseLimits {
        ParseLimits { header_bytes_max: 8 * 1024, header_count_max: 32, body_bytes_max: 1024 * 1024 }
    }

    fn parse(s: &str) -> Result<(RequestHead, usize), ParseError> {
        parse_head(s.as_bytes(), &limits())
    }

    fn head(s: &str) -> RequestHead {
        let (h, used) = parse(s).expect("head should parse");
        assert_eq!(used, s.len(), "whole input is the head");
        h
    }

    fn err(s: &str) -> ParseError {
        parse(s).expect_err("head should be rejected")
    }

    #[test]
    fn simple_get() {
        let h = head("GET /v1/stream/a HTTP/1.1\r\nHost: example\r\nAccept: */*\r\n\r\n");
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.target, "/v1/stream/a");
        assert_eq!(h.path, "/v1/stream/a");
        assert_eq!(h.raw_path, "/v1/stream/a");
        assert!(h.query.is_empty());
        assert_eq!(h.minor_version, 1);
        assert!(h.keep_alive);
        assert_eq!(h.body, BodyKind::None);
        assert!(!h.expect_continue);
        assert_eq!(h.header("host"), Some("example"));
        assert_eq!(h.header("accept"), Some("*/*"));
        assert_eq!(h.header("missing"), None);
    }

    #[test]
    fn post_with_content_length() {
        let h = head("POST /v1/stream/x HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n");
        assert_eq!(h.method, Method::Post);
        assert_eq!(h.body, BodyKind::Length(11));
    }

    #[test]
    fn header_names_lowercased_values_trimmed() {
        let h =
            head("PUT /s HTTP/1.1\r\nX-Thing:   spaced value \t\r\nx-thing: second\r\nContent-Type:text/plain\r\n\r\n");
        assert_eq!(h.method, Method::Put);
        assert_eq!(h.header("x-thing"), Some("spaced value"));
        assert_eq!(h.header_count("x-thing"), 2);
        assert_eq!(h.header_count("nope"), 0);
        assert_eq!(h.header("content-type"), Some("text/plain"));
        assert_eq!(h.headers.iter().next(), Some(("x-thing", "spaced value")));
        assert_eq!(h.headers.iter().nth(2), Some(("content-type", "text/plain")));
    }

    #[test]
    fn methods() {
        assert_eq!(head("HEAD / HTTP/1.1\r\n\r\n").method, Method::Head);
        assert_eq!(head("DELETE / HTTP/1.1\r\n\r\n").method, Method::Delete);
        assert_eq!(head("OPTIONS / HTTP/1.1\r\n\r\n").method, Method::Options);
        assert_eq!(head("PATCH / HTTP/1.1\r\n\r\n").method, Method::Other("PATCH".into()));
        // Case-sensitive: lower-case "get" is a different (unknown) method.
        assert_eq!(head("get / HTTP/1.1\r\n\r\n").method, Method::Other("get".into()));
        assert_eq!(Method::Other("PATCH".into()).as_str(), "PATCH");
        assert_eq!(Method::Delete.as_str(), "DELETE");
    }

    #[test]
    fn pipelined_requests() {
        let buf = b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /b?x=1 HTTP/1.1\r\nHost: h\r\n\r\nGET";
        let (first, used) = parse_head(buf, &limits()).unwrap();
        assert_eq!(first.path, "/a");
        assert_eq!(first.body, BodyKind::Length(5));
        assert_eq!(&buf[used..used + 5], b"hello");
        let rest = &buf[used + 5..];
        let (second, used2) = parse_head(rest, &limits()).unwrap();
        assert_eq!(second.method, Method::Get);
        assert_eq!(second.path, "/b");
        assert_eq!(second.query_param("x"), Some("1"));
        assert_eq!(&rest[used2..], b"GET");
        assert_eq!(parse_head(&rest[used2..], &limits()).unwrap_err(), ParseError::Incomplete);
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let full = b"POST /v1/stream/a%20b?offset=-1 HTTP/1.1\r\nHost: example\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n";
        for n in 0..full.len() {
            assert_eq!(parse_head(&full[..n], &limits()).unwrap_err(), ParseError::Incomplete, "prefix of {n} bytes");
        }
        let (h, used) = parse_head(full, &limits()).unwrap();
        assert_eq!(used, full.len());
        assert_eq!(h.path, "/v1/stream/a b");
        assert!(h.expect_continue);
    }

    #[test]
    fn leading_empty_lines_are_skipped_and_counted() {
        let s = "\r\nGET / HTTP/1.1\r\n\r\n";
        let (h, used) = parse(s).unwrap();
        assert_eq!(h.path, "/");
        assert_eq!(used, s.len());
    }

    #[test]
    fn header_bytes_limit() {
        let lim = ParseLimits { header_bytes_max: 64, ..limits() };
        // Incomplete and already longer than the limit: stop buffering now.
        let long_incomplete = format!("GET / HTTP/1.1\r\nX-Long: {}", "a".repeat(100));
        assert_eq!(parse_head(long_incomplete.as_bytes(), &lim).unwrap_err(), ParseError::HeadersTooLarge);
        // Incomplete but exactly at the limit: still allowed to grow by one more read.
        let at_limit = &long_incomplete.as_bytes()[..64];
        assert_eq!(parse_head(at_limit, &lim).unwrap_err(), ParseError::Incomplete);
        // Complete, but the head itself is longer than the limit.
        let long_complete = format!("GET / HTTP/1.1\r\nX-Long: {}\r\n\r\n", "a".repeat(100));
        assert_eq!(parse_head(long_complete.as_bytes(), &lim).unwrap_err(), ParseError::HeadersTooLarge);
        // A head of exactly the limit is fine.
        let pad = 64 - "GET / HTTP/1.1\r\nX: \r\n\r\n".len();
        let exact = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "b".repeat(pad));
        assert_eq!(exact.len(), 64);
        let (_, used) = parse_head(exact.as_bytes(), &lim).unwrap();
        assert_eq!(used, 64);
        // A short head followed by lots of body bytes is not "too large".
        let with_body = format!("POST / HTTP/1.1\r\nContent-Length: 200\r\n\r\n{}", "z".repeat(200));
        let (h, used) = parse_head(with_body.as_bytes(), &lim).unwrap();
        assert_eq!(h.body, BodyKind::Length(200));
        assert_eq!(with_body.len() - used, 200);
    }

    #[test]
    fn header_count_limit() {
        let lim = ParseLimits { header_count_max: 3, ..limits() };
        let three = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        assert_eq!(parse_head(three, &lim).unwrap().0.headers.len(), 3);
        let four = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
        assert_eq!(parse_head(four, &lim).unwrap_err(), ParseError::TooManyHeaders);
        // Exactly at the limit but the terminating blank line has not arrived yet.
        assert_eq!(parse_head(&three[..three.len() - 2], &lim).unwrap_err(), ParseError::Incomplete);

        // Past the stack-allocated slot count.
        let big = ParseLimits { header_count_max: 100, ..limits() };
        let mut s = String::from("GET / HTTP/1.1\r\n");
        for i in 0..100 {
            s.push_str(&format!("H{i}: v\r\n"));
        }
        let ok = format!("{s}\r\n");
        assert_eq!(parse_head(ok.as_bytes(), &big).unwrap().0.headers.len(), 100);
        let too_many = format!("{s}H100: v\r\n\r\n");
        assert_eq!(parse_head(too_many.as_bytes(), &big).unwrap_err(), ParseError::TooManyHeaders);
    }

    #[test]
    fn content_length_and_transfer_encoding_is_bad() {
        assert!(matches!(
            err("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            ParseError::Bad(_)
        ));
        assert!(matches!(
            err("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"),
            ParseError::Bad(_)
        ));
    }

    #[test]
    fn duplicate_content_length() {
        assert!(matches!(err("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"), ParseError::Bad(_)));
        let h = head("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(h.body, BodyKind::Length(5));
    }

    #[test]
    fn invalid_content_length() {
        for v in ["abc", "5a", "+5", "-1", "5, 5", "0x10", "1 2"] {
            let req = format!("POST / HTTP/1.1\r\nContent-Length: {v}\r\n\r\n");
            assert!(matches!(err(&req), ParseError::Bad(_)), "Content-Length {v:?} accepted");
        }
        assert!(matches!(err("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n"), ParseError::Bad(_)));
    }

    #[test]
    fn content_length_over_limit() {
        let max = limits().body_bytes_max;
        let at = format!("PUT / HTTP/1.1\r\nContent-Length: {max}\r\n\r\n");
        assert_eq!(head(&at).body, BodyKind::Length(max));
        let over = format!("PUT / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", max + 1);
        assert_eq!(err(&over), ParseError::BodyTooLarge);
        assert_eq!(err("PUT / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"), ParseError::BodyTooLarge);
    }

    #[test]
    fn transfer_encoding_variants() {
        assert_eq!(head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").body, BodyKind::Chunked);
        assert_eq!(head("POST / HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\n\r\n").body, BodyKind::Chunked);
        for te in ["gzip", "gzip, chunked", "chunked, gzip", "identity", ""] {
            let req = format!("POST / HTTP/1.1\r\nTransfer-Encoding: {te}\r\n\r\n");
            assert_eq!(err(&req), ParseError::UnsupportedTransferEncoding, "TE {te:?}");
        }
        assert_eq!(
            err("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"),
            ParseError::UnsupportedTransferEncoding
        );
    }

    #[test]
    fn no_framing_headers_means_no_body() {
        assert_eq!(head("POST /x HTTP/1.1\r\n\r\n").body, BodyKind::None);
        assert_eq!(head("PUT /x HTTP/1.1\r\n\r\n").body, BodyKind::None);
    }

    #[test]
    fn keep_alive_rules() {
        assert!(head("GET / HTTP/1.1\r\n\r\n").keep_alive);
        assert!(!head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!head("GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n").keep_alive);
        assert!(head("GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n").keep_alive);

        let h10 = head("GET / HTTP/1.0\r\n\r\n");
        assert_eq!(h10.minor_version, 0);
        assert!(!h10.keep_alive);
        assert!(head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(!head("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keep_alive);
        // HTTP/1.0 with Transfer-Encoding: framing is suspect, never reuse.
        let te10 = head("POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(te10.body, BodyKind::Chunked);
        assert!(!te10.keep_alive);
    }

    #[test]
    fn expect_continue() {
        assert!(head("PUT / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n").expect_continue);
        assert!(!head("PUT / HTTP/1.1\r\nExpect: something\r\n\r\n").expect_continue);
        assert!(!head("PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expect_continue);
    }

    #[test]
    fn bad_versions_and_request_lines() {
        assert!(matches!(err("GET / HTTP/2.0\r\n\r\n"), ParseError::Bad(_)));
        assert!(matches!(err("GET / FOO/1.1\r\n\r\n"), ParseError::Bad(_)));
        assert!(matches!(err("GET  / HTTP/1.1\r\n\r\n"), ParseError::Bad(_)));
        assert!(matches!(err("GET /a b HTTP/1.1\r\n\r\n"), ParseError::Bad(_)));
        assert!(matches!(err("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"), ParseError::Bad(_)));
    }

    #[test]
    fn non_utf8_header_value_is_bad() {
        let buf = b"GET / HTTP/1.1\r\nX-Bin: caf\xe9\r\n\r\n";
        assert!(matches!(parse_head(buf, &limits()).unwrap_err(), ParseError::Bad(_)));
        let ok = "GET / HTTP/1.1\r\nX-Utf8: café\r\n\r\n";
        assert_eq!(head(ok).header("x-utf8"), Some("café"));
    }

    #[test]
    fn query_decoding() {
        let h = head("GET /s?a=1&b=x+y&a=2&flag&d=%2F%20z&e=&&k%3D=v%26w HTTP/1.1\r\n\r\n");
        assert_eq!(h.raw_path, "/s");
        assert_eq!(
            h.query,
            vec![
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "x y".to_string()),
                ("a".to_string(), "2".to_string()),
                ("flag".to_string(), String::new()),
                ("d".to_string(), "/ z".to_string()),
                ("e".to_string(), String::new()),
                ("k=".to_string(), "v&w".to_string()),
            ]
        );
        assert_eq!(h.query_param("a"), Some("1"));
        assert_eq!(h.query_count("a"), 2);
        assert_eq!(h.query_count("zzz"), 0);
        assert_eq!(h.query_param("flag"), Some(""));
        assert_eq!(h.query_param("zzz"), None);
        // '=' inside a value stays part of the value.
        let h = head("GET /s?cursor=a=b HTTP/1.1\r\n\r\n");
        assert_eq!(h.query_param("cursor"), Some("a=b"));
        // Empty query after '?'.
        let h = head("GET /s? HTTP/1.1\r\n\r\n");
        assert!(h.query.is_empty());
        assert_eq!(h.path, "/s");
        assert!(matches!(err("GET /s?a=%zz HTTP/1.1\r\n\r\n"), ParseError::Bad(_)));
    }

    #[test]
    fn path_decoding() {
        let h = head("GET /v1/stream/a%2Fb%20c+d HTTP/1.1\r\n\r\n");
        assert_eq!(h.path, "/v1/stream/a/b c+d", "'+' is literal in paths");
        assert_eq!(h.raw_path, "/v1/stream/a%2Fb%20c+d");
        assert_eq!(h.target, "/v1/stream/a%2Fb%20c+d");
        let h = head("GET /caf%C3%A9 HTTP/1.1\r\n\r\n");
        assert_eq!(h.path, "/café");
        for bad in ["/a%zz", "/a%4", "/a%", "/a%g0", "/a%00b", "/a%ff"] {
            let req = format!("GET {bad} HTTP/1.1\r\n\r\n");
            assert!(matches!(err(&req), ParseError::Bad(_)), "path {bad:?}");
        }
    }

    #[test]
    fn percent_decode_direct() {
        assert_eq!(percent_decode("a+b%2b", true).unwrap(), "a b+");
        assert_eq!(percent_decode("a+b%2B", false).unwrap(), "a+b+");
        assert_eq!(percent_decode("plain", false).unwrap(), "plain");
        assert_eq!(percent_decode("", true).unwrap(), "");
        assert_eq!(percent_decode("%41%62", false).unwrap(), "Ab");
        assert!(percent_decode("%4", false).is_err());
        assert!(percent_decode("%%41", false).is_err());
        assert!(percent_decode("%C3", false).is_err());
    }

    #[test]
    fn absolute_form_target() {
        let h = head("GET http://example.com:8080/v1/stream/x?offset=5 HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(h.target, "http://example.com:8080/v1/stream/x?offset=5");
        assert_eq!(h.path, "/v1/stream/x");
        assert_eq!(h.raw_path, "/v1/stream/x");
        assert_eq!(h.query_param("offset"), Some("5"));

        let h = head("GET HTTPS://example.com HTTP/1.1\r\n\r\n");
        assert_eq!(h.path, "/");
        let h = head("GET http://example.com?a=1 HTTP/1.1\r\n\r\n");
        assert_eq!(h.path, "/");
        assert_eq!(h.query_param("a"), Some("1"));

        for bad in ["*", "example.com/x", "ftp://h/x", "http:///x", "v1/stream"] {
            let req = format!("OPTIONS {bad} HTTP/1.1\r\n\r\n");
            assert!(matches!(err(&req), ParseError::Bad(_)), "target {bad:?}");
        }
    }

    // ---- chunked ----

    fn decode_all(dec: &mut ChunkedDecoder, input: &[u8]) -> Result<(usize, ChunkProgress, Vec<u8>), ParseError> {
        let mut out = Vec::new();
        let (n, p) = dec.decode(input, &mut out)?;
        Ok((n, p, out))
    }

    const CHUNKED: &[u8] =
        b"5;name=value\r\nhello\r\n7 ; ext\r\n, world\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: t\r\nX-Other: u\r\n\r\n";
    const CHUNKED_DECODED: &[u8] = b"hello, world0123456789abcdef";

    const WIKI: &[u8] = b"4\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\n";

    #[test]
    fn chunked_whole() {
        let mut dec = ChunkedDecoder::new(1024);
        let (n, p, out) = decode_all(&mut dec, WIKI).unwrap();
        assert_eq!(p, ChunkProgress::Done);
        assert_eq!(n, WIKI.len());
        assert_eq!(out, b"wikipedia");
        assert!(dec.is_done());
        assert_eq!(dec.decoded_len(), 9);
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let mut dec = ChunkedDecoder::new(1024);
        let (n, p, out) = decode_all(&mut dec, CHUNKED).unwrap();
        assert_eq!(p, ChunkProgress::Done);
        assert_eq!(n, CHUNKED.len());
        assert_eq!(out, CHUNKED_DECODED);
    }

    #[test]
    fn chunked_byte_by_byte() {
        let mut dec = ChunkedDecoder::new(1024);
        let mut out = Vec::new();
        for (i, b) in CHUNKED.iter().enumerate() {
            let (n, p) = dec.decode(std::slice::from_ref(b), &mut out).unwrap();
            assert_eq!(n, 1, "byte {i} consumed");
            let last = i == CHUNKED.len() - 1;
            assert_eq!(p == ChunkProgress::Done, last, "progress at byte {i}");
        }
        assert_eq!(out, CHUNKED_DECODED);
        // After Done nothing more is consumed.
        assert_eq!(dec.decode(b"GET", &mut out).unwrap(), (0, ChunkProgress::Done));
    }

    #[test]
    fn chunked_every_split_point() {
        for split in 0..=CHUNKED.len() {
            let mut dec = ChunkedDecoder::new(1024);
            let mut out = Vec::new();
            let (a, p) = dec.decode(&CHUNKED[..split], &mut out).unwrap();
            assert_eq!(a, split);
            if split < CHUNKED.len() {
                assert_eq!(p, ChunkProgress::NeedMore);
            }
            let (b, p) = dec.decode(&CHUNKED[split..], &mut out).unwrap();
            assert_eq!(a + b, CHUNKED.len());
            assert_eq!(p, ChunkProgress::Done);
            assert_eq!(out, CHUNKED_DECODED, "split at {split}");
        }
    }

    #[test]
    fn chunked_then_pipelined_request() {
        let mut buf = b"POST /s HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        buf.extend_from_slice(b"3\r\nabc\r\n0\r\n\r\n");
        buf.extend_from_slice(b"GET /next HTTP/1.1\r\n\r\n");
        let (h, used) = parse_head(&buf, &limits()).unwrap();
        assert_eq!(h.body, BodyKind::Chunked);
        let mut dec = ChunkedDecoder::new(limits().body_bytes_max);
        let mut out = Vec::new();
        let (n, p) = dec.decode(&buf[used..], &mut out).unwrap();
        assert_eq!(p, ChunkProgress::Done);
        assert_eq!(out, b"abc");
        let rest = &buf[used + n..];
        let (next, used2) = parse_head(rest, &limits()).unwrap();
        assert_eq!(next.path, "/next");
        assert_eq!(used2, rest.len());
    }

    #[test]
    fn chunked_over_limit() {
        // A single chunk announcing more than the limit is refused before its data.
        let mut dec = ChunkedDecoder::new(10);
        assert_eq!(decode_all(&mut dec, b"b\r\n").unwrap_err(), ParseError::BodyTooLarge);
        // The total across chunks counts.
        let mut dec = ChunkedDecoder::new(10);
        assert_eq!(decode_all(&mut dec, b"6\r\nabcdef\r\n5\r\nghijk\r\n").unwrap_err(), ParseError::BodyTooLarge);
        // Exactly at the limit is fine.
        let mut dec = ChunkedDecoder::new(10);
        let (_, p, out) = decode_all(&mut dec, b"6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n").unwrap();
        assert_eq!(p, ChunkProgress::Done);
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn chunked_malformed() {
        let cases: &[&[u8]] = &[
            b"zz\r\n",
            b"\r\n",
            b";ext\r\n",
            b"5x\r\nhello\r\n",
            b"5\nhello\r\n",
            b"5\r\rhello\r\n",
            b"5;a\nb\r\n",
            b"5\r\nhelloXX",
            b"5\r\nhello\rX",
            b"5\r\nhello\n",
            b"0\r\nX: y\n",
            b"0\r\n\n",
            b"0\r\n\rX",
            b"ffffffffffffffffff\r\n",
        ];
        for case in cases {
            let mut dec = ChunkedDecoder::new(u64::MAX);
            let r = decode_all(&mut dec, case);
            assert!(matches!(r, Err(ParseError::Bad(_))), "{:?} gave {r:?}", String::from_utf8_lossy(case));
            // A failed decoder stays failed.
            assert!(decode_all(&mut dec, b"0\r\n\r\n").is_err());
        }
    }

    #[test]
    fn chunked_size_line_too_long() {
        let mut dec = ChunkedDecoder::new(1024);
        let mut line = b"1;".to_vec();
        line.extend_from_slice(&[b'x'; CHUNK_LINE_MAX]);
        assert!(matches!(decode_all(&mut dec, &line), Err(ParseError::Bad(_))));
        // Leading zeros do not overflow but still count toward the line bound.
        let mut dec = ChunkedDecoder::new(1024);
        let zeros = vec![b'0'; CHUNK_LINE_MAX + 1];
        assert!(matches!(decode_all(&mut dec, &zeros), Err(ParseError::Bad(_))));
        // Under the bound is accepted.
        let mut dec = ChunkedDecoder::new(1024);
        let mut ok = b"0000000003;".to_vec();
        ok.extend_from_slice(&[b'e'; 500]);
        ok.extend_from_slice(b"\r\nabc\r\n0\r\n\r\n");
        let (_, p, out) = decode_all(&mut dec, &ok).unwrap();
        assert_eq!(p, ChunkProgress::Done);
        assert_eq!(out, b"abc");
    }

    #[test]
    fn chunked_trailers_bounded() {
        let mut dec = ChunkedDecoder::new(1024);
        let mut body = b"0\r\n".to_vec();
        for i in 0..1000 {
            body.extend_from_slice(format!("X-T{i}: some trailer value\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        assert!(matches!(decode_all(&mut dec, &body), Err(ParseError::Bad(_))));
    }

    #[test]
    fn chunked_large_chunk_streams_in_pieces() {
        let data = vec![7u8; 100_000];
        let mut input = format!("{:x}\r\n", data.len()).into_bytes();
        input.extend_from_slice(&data);
        input.extend_from_slice(b"\r\n0\r\n\r\n");
        let mut dec = ChunkedDecoder::new(1 << 20);
        let mut out = Vec::new();
        let mut pos = 0;
        let mut done = false;
        while pos < input.len() {
            let end = (pos + 4096).min(input.len());
            let (n, p) = dec.decode(&input[pos..end], &mut out).unwrap();
            assert_eq!(n, end - pos);
            pos = end;
            done = p == ChunkProgress::Done;
        }
        assert!(done);
        assert_eq!(out, data);
    }
}
