//! One HTTP/1.1 connection: read bytes, parse, hand the request to its
//! owning shard, write the answer. Keep-alive and pipelining (requests are
//! answered one after another, in order), bounded buffers, timeouts.

use super::parse::{parse_head, BodyKind, ChunkProgress, ChunkedDecoder, Method, ParseError, ParseLimits, RequestHead};
use super::respond::{self, Response};
use super::route::{route, route_label, surface_of, Route, RouteError};
use super::sse;
use super::stop::{Stop, StopSlot};
use crate::limits::SSE_CONNECTION_MS_MAX;
use crate::limits::{
    CONN_IDLE_TIMEOUT_MS, CONN_READ_CHUNK_BYTES, CONN_READ_TIMEOUT_MS, CONN_WRITE_TIMEOUT_MS, REQUEST_BODY_BYTES_MAX,
    REQUEST_HEADER_BYTES_MAX, REQUEST_HEADER_COUNT_MAX,
};
use crate::metrics::{EdgeMetrics, Held, RouteLabel};
use crate::protocol::headers::sse_is_text;
use crate::protocol::offset::ReadFrom;
use crate::protocol::{Live, Outcome, ReadReq, StreamKey, StreamOp, Surface};
use crate::shard::router::{Dispatch, ShardRequest};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use std::rc::Rc;
use std::time::Duration;

/// What the connection loop needs from the server besides dispatch.
pub trait ConnContext: Dispatch {
    /// Text for GET /metrics (gathered from every shard).
    fn metrics(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + '_>>;
    /// This shard's HTTP counters.
    fn edge(&self) -> &EdgeMetrics;
    /// This shard's stop broadcast (graceful shutdown).
    fn stop(&self) -> &Rc<Stop>;
    /// For GET /readyz: recovery finished, every shard serves, and the
    /// server is not shutting down.
    fn ready(&self) -> bool;
}

const LIMITS: ParseLimits = ParseLimits {
    header_bytes_max: REQUEST_HEADER_BYTES_MAX,
    header_count_max: REQUEST_HEADER_COUNT_MAX,
    body_bytes_max: REQUEST_BODY_BYTES_MAX,
};

enum ReadMore {
    Got,
    Eof,
}

/// Reads once from the socket into `rd.scratch` and appends what came to
/// `buf`. The scratch space is zeroed once per connection, not per read.
/// `idle`: None = decide from the buffer (empty means between requests).
/// An idle read ends as EOF when the shard stops (graceful shutdown); a
/// request already begun is read to its end.
async fn read_more(
    stream: &mut TcpStream,
    rd: &mut Reader,
    idle: Option<bool>,
    stop: &StopSlot,
) -> std::io::Result<ReadMore> {
    let idle = idle.unwrap_or(rd.buf.is_empty());
    let timeout = if idle { CONN_IDLE_TIMEOUT_MS } else { CONN_READ_TIMEOUT_MS };
    stream.set_read_timeout(Some(Duration::from_millis(timeout)))?;
    let read = async {
        match stream.read(&mut rd.scratch).await? {
            0 => Ok(ReadMore::Eof),
            n => {
                rd.buf.extend_from_slice(&rd.scratch[..n]);
                Ok(ReadMore::Got)
            }
        }
    };
    if !idle {
        return read.await;
    }
    if stop.is_stopped() {
        return Ok(ReadMore::Eof);
    }
    futures_lite::future::or(read, async {
        stop.wait().await;
        Ok(ReadMore::Eof)
    })
    .await
}

/// A connection's receive side: bytes not yet consumed, and read space.
struct Reader {
    buf: Vec<u8>,
    scratch: Box<[u8]>,
}

async fn write_all(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_millis(CONN_WRITE_TIMEOUT_MS)))?;
    stream.write_all(bytes).await
}

fn parse_error_response(e: &ParseError) -> Response {
    let mut r = match e {
        ParseError::HeadersTooLarge => respond::plain(431, "request head too large"),
        ParseError::TooManyHeaders => respond::plain(431, "too many header fields"),
        ParseError::BodyTooLarge => respond::plain(413, "request body too large"),
        ParseError::UnsupportedTransferEncoding => respond::plain(501, "only chunked transfer-encoding is supported"),
        ParseError::Bad(why) => respond::plain(400, why),
        ParseError::Incomplete => respond::plain(400, "incomplete request"),
    };
    r.close = true;
    r
}

/// Serves one connection until the peer closes it, a timeout, or an error
/// that makes the byte stream unusable.
pub async fn serve<C: ConnContext + ?Sized>(mut stream: TcpStream, cx: Rc<C>) {
    let _ = stream.set_nodelay(true);
    let stop = cx.stop().slot();
    let mut rd =
        Reader { buf: Vec::with_capacity(CONN_READ_CHUNK_BYTES), scratch: vec![0; CONN_READ_CHUNK_BYTES].into() };
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    loop {
        // 1. A complete head.
        let (head, head_len) = loop {
            match parse_head(&rd.buf, &LIMITS) {
                Ok(x) => break x,
                Err(ParseError::Incomplete) => match read_more(&mut stream, &mut rd, None, &stop).await {
                    Ok(ReadMore::Got) => continue,
                    Ok(ReadMore::Eof) | Err(_) => return,
                },
                Err(e) => {
                    out.clear();
                    let resp = parse_error_response(&e);
                    cx.edge().count_request(RouteLabel::Other, resp.status);
                    respond::encode(&resp, false, false, &mut out);
                    let _ = write_all(&mut stream, &out).await;
                    return;
                }
            }
        };
        if head.expect_continue
            && head.body != BodyKind::None
            && write_all(&mut stream, b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            return;
        }
        // 2. Its body.
        let (body, consumed) = match read_body(&mut stream, &mut rd, &head, head_len, &stop).await {
            Ok(x) => x,
            Err(Some(e)) => {
                out.clear();
                let resp = parse_error_response(&e);
                cx.edge().count_request(route_label(&head.path), resp.status);
                respond::encode(&resp, false, false, &mut out);
                let _ = write_all(&mut stream, &out).await;
                return;
            }
            Err(None) => return,
        };
        rd.buf.drain(..consumed);
        // 3. Run it and answer.
        if head.method == Method::Get && head.query_param("live") == Some("sse") {
            if let Ok(Route::Shard(r)) = route(&head, Vec::new()) {
                if let ShardRequest::Stream { key, surface, op: StreamOp::Read(req) } = *r {
                    let label = route_label(&head.path);
                    serve_sse(&mut stream, &*cx, &stop, label, key, surface, req).await;
                    return;
                }
            }
        }
        let resp = handle(&*cx, &head, body).await;
        cx.edge().count_request(route_label(&head.path), resp.status);
        // Shutting down: this answer is the connection's last.
        let keep_alive = head.keep_alive && !stop.is_stopped();
        out.clear();
        respond::encode(&resp, head.method == Method::Head, keep_alive, &mut out);
        if write_all(&mut stream, &out).await.is_err() || !keep_alive || resp.close {
            return;
        }
        if rd.buf.capacity() > 4 * CONN_READ_CHUNK_BYTES && rd.buf.len() < CONN_READ_CHUNK_BYTES {
            // Give back the memory of one large request.
            rd.buf.shrink_to(CONN_READ_CHUNK_BYTES);
        }
    }
}

/// Reads the body after a head of `head_len` bytes. Returns the body and the
/// number of bytes of `buf` the request used. `Err(None)`: connection gone.
async fn read_body(
    stream: &mut TcpStream,
    rd: &mut Reader,
    head: &RequestHead,
    head_len: usize,
    stop: &StopSlot,
) -> Result<(Vec<u8>, usize), Option<ParseError>> {
    match head.body {
        BodyKind::None => Ok((Vec::new(), head_len)),
        BodyKind::Length(n) => {
            let n = n as usize;
            while rd.buf.len() < head_len + n {
                match read_more(stream, rd, Some(false), stop).await {
                    Ok(ReadMore::Got) => {}
                    _ => return Err(None),
                }
            }
            Ok((rd.buf[head_len..head_len + n].to_vec(), head_len + n))
        }
        BodyKind::Chunked => {
            let mut dec = ChunkedDecoder::new(LIMITS.body_bytes_max);
            let mut body = Vec::new();
            let mut pos = head_len;
            loop {
                let (used, progress) = dec.decode(&rd.buf[pos..], &mut body).map_err(Some)?;
                pos += used;
                if progress == ChunkProgress::Done {
                    return Ok((body, pos));
                }
                // Decoded bytes are in `body`; drop them from the read buffer
                // so a long chunked upload is held once, not twice.
                rd.buf.drain(head_len..pos);
                pos = head_len;
                match read_more(stream, rd, Some(false), stop).await {
                    Ok(ReadMore::Got) => {}
                    _ => return Err(None),
                }
            }
        }
    }
}

async fn handle<C: ConnContext + ?Sized>(cx: &C, head: &RequestHead, body: Vec<u8>) -> Response {
    let surface = surface_of(&head.path);
    match route(head, body) {
        Ok(Route::Options) => respond::preflight(),
        Ok(Route::Metrics) => {
            let mut r = Response::new(200).header("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            r.body = cx.metrics().await.into_bytes();
            r
        }
        Ok(Route::Health) => respond::plain(200, "ok"),
        Ok(Route::Ready) if cx.ready() => respond::plain(200, "ready"),
        Ok(Route::Ready) => respond::plain(503, "not ready (starting or shutting down)"),
        Ok(Route::Shard(req)) => {
            let long_poll =
                matches!(&*req, ShardRequest::Stream { op: StreamOp::Read(r), .. } if r.live == Live::LongPoll);
            let _held = long_poll.then(|| Held::new(&cx.edge().long_polls));
            match cx.dispatch(*req).await {
                Ok(o) => respond::outcome(surface, o, || location(head)),
                Err(e) => respond::error(surface, &e),
            }
        }
        Err(RouteError::Protocol(e)) => respond::error(surface, &e),
        Err(RouteError::MethodNotAllowed(allow)) => respond::plain(405, "method not allowed").header("Allow", allow),
    }
}

/// Absolute URL of the request (F10: Location must be absolute).
fn location(head: &RequestHead) -> String {
    let host = head.header("host").unwrap_or("localhost");
    format!("http://{host}{}", head.raw_path)
}

/// An SSE connection (F63–F73): catch-up reads, then long-polls on the
/// owning shard (over the mesh when it is another core), each answer sent as
/// a data event followed by a control event. Ends after the stream closes,
/// on a write error, after SSE_CONNECTION_MS_MAX so that clients
/// reconnect (and CDNs can collapse requests), or when the shard stops
/// (graceful shutdown: after the event that answers the read in flight).
async fn serve_sse<C: ConnContext + ?Sized>(
    stream: &mut TcpStream,
    cx: &C,
    stop: &StopSlot,
    label: RouteLabel,
    key: StreamKey,
    surface: Surface,
    req: ReadReq,
) {
    let _live = Held::new(&cx.edge().sse);
    let started = std::time::Instant::now();
    let client_cursor = req.cursor.clone();
    let read = |from: ReadFrom, live: Live| ShardRequest::Stream {
        key: key.clone(),
        surface,
        op: StreamOp::Read(ReadReq { from, live, cursor: client_cursor.clone(), if_none_match: None }),
    };
    let mut r = match cx.dispatch(read(req.from, Live::No)).await {
        Ok(Outcome::Read(r)) => r,
        Ok(_) => return,
        Err(e) => {
            let mut out = Vec::new();
            let resp = respond::error(surface, &e);
            cx.edge().count_request(label, resp.status);
            respond::encode(&resp, false, false, &mut out);
            let _ = write_all(stream, &out).await;
            return;
        }
    };
    cx.edge().count_request(label, 200);
    let json = crate::protocol::headers::is_json(&r.info.content_type);
    let base64 = !sse_is_text(&r.info.content_type);
    let mut out = Vec::with_capacity(4096);
    respond::sse_head(base64, &mut out);
    loop {
        let has_data = !(r.body.is_empty() || (json && r.body == b"[]"));
        if has_data {
            sse::data_event(&mut out, &r.body, base64);
        }
        let cursor = crate::protocol::cursor::next_cursor(wall_ms(), client_cursor.as_deref(), jitter_secs());
        sse::control_event(&mut out, r.next_offset, Some(cursor), r.up_to_date, r.closed_at_end);
        if write_all(stream, &out).await.is_err() || r.closed_at_end || stop.is_stopped() {
            return;
        }
        out.clear();
        if started.elapsed() >= std::time::Duration::from_millis(SSE_CONNECTION_MS_MAX) {
            return;
        }
        let live = if r.up_to_date { Live::LongPoll } else { Live::No };
        r = match cx.dispatch(read(ReadFrom::At(r.next_offset), live)).await {
            Ok(Outcome::Read(next)) => next,
            _ => return,
        };
    }
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// 1..=3600, spread enough for cursor jitter (F88); not cryptographic.
fn jitter_secs() -> u64 {
    let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos() as u64);
    1 + (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % 3600
}
