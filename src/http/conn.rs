//! One HTTP/1.1 connection: read bytes, parse, hand the request to its
//! owning shard, write the answer. Keep-alive and pipelining (requests are
//! answered one after another, in order), bounded buffers, timeouts.

use super::affinity::Affinity;
use super::gate::{Gate, Slot};
use super::guard;
use super::parse::{parse_head, BodyKind, ChunkProgress, ChunkedDecoder, Method, ParseError, ParseLimits, RequestHead};
use super::respond::{self, Response};
use super::route::{route, route_label, set_body, surface_of, Route, RouteError};
use super::sse;
use super::stop::{Stop, StopSlot};
use crate::auth::access::Access;
use crate::limits::{
    CONN_IDLE_TIMEOUT_MS, CONN_LINGER_BYTES_MAX, CONN_LINGER_MS, CONN_READ_CHUNK_BYTES, CONN_READ_TIMEOUT_MS,
    CONN_WRITE_TIMEOUT_MS, REQUEST_BODY_BYTES_MAX, REQUEST_HEADER_BYTES_MAX, REQUEST_HEADER_COUNT_MAX,
    RETRY_AFTER_SECS, SHARD_REFUSALS_IN_FLIGHT_MAX, SSE_CONNECTION_MS_MAX,
};
use crate::metrics::{EdgeMetrics, Held, RouteLabel};
use crate::notify::Notify;
use crate::protocol::headers::sse_is_text;
use crate::protocol::offset::ReadFrom;
use crate::protocol::{Live, Outcome, ReadReq, StreamKey, StreamOp, Surface};
use crate::shard::message::{Dispatch, MovedConnection, ShardRequest};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

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
    /// Why the server serves only in part (tiered storage: the object store
    /// is down), for GET /readyz; None when whole.
    fn degraded(&self) -> Option<&'static str> {
        None
    }
    /// Hands a connection to shard `to`, which serves it from then on; gives
    /// it back when that shard cannot take it.
    fn move_to(&self, to: usize, c: MovedConnection) -> Result<(), MovedConnection>;
    /// `--trust-proxy`: absolute URLs follow `Forwarded` / `X-Forwarded-*`.
    fn trust_proxy(&self) -> bool;
    /// The grants in force; None when access control is off.
    fn access(&self) -> Option<&Access>;
    /// This shard's id (its slot in per-token counters).
    fn shard_id(&self) -> usize;
}

const LIMITS: ParseLimits = ParseLimits {
    header_bytes_max: REQUEST_HEADER_BYTES_MAX,
    header_count_max: REQUEST_HEADER_COUNT_MAX,
    body_bytes_max: REQUEST_BODY_BYTES_MAX,
};

enum ReadMore {
    Got,
    Eof,
    /// The gate closed this connection to make room for a new one, or the
    /// shard stopped (graceful shutdown) while the connection was idle.
    Evicted,
}

/// Reads once from the socket into `rd.scratch` and appends what came to
/// `buf`, waiting at most `timeout` (an error of kind `TimedOut` after it).
/// The scratch space is zeroed once per connection, not per read. With
/// `evict`, the read also ends when the gate evicts this connection, and
/// with `stop` when the shard stops (an idle connection during shutdown).
async fn read_more(
    stream: &mut TcpStream,
    rd: &mut Reader,
    timeout: Duration,
    evict: Option<&Notify>,
    stop: Option<&StopSlot>,
) -> std::io::Result<ReadMore> {
    stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    if stop.is_some_and(StopSlot::is_stopped) {
        return Ok(ReadMore::Evicted);
    }
    let n = match (evict, stop) {
        (None, None) => stream.read(&mut rd.scratch).await?,
        (evict, stop) => {
            let read = async { stream.read(&mut rd.scratch).await.map(Some) };
            let ended = async {
                let evicted = async {
                    match evict {
                        Some(e) => e.wait().await,
                        None => std::future::pending().await,
                    }
                };
                let stopped = async {
                    match stop {
                        Some(s) => s.wait().await,
                        None => std::future::pending().await,
                    }
                };
                futures_lite::future::or(evicted, stopped).await;
                Ok(None)
            };
            match futures_lite::future::or(ended, read).await? {
                Some(n) => n,
                None => return Ok(ReadMore::Evicted),
            }
        }
    };
    match n {
        0 => Ok(ReadMore::Eof),
        n => {
            rd.buf.extend_from_slice(&rd.scratch[..n]);
            Ok(ReadMore::Got)
        }
    }
}

/// Time left before `deadline`, capped at the per-read timeout; None when
/// the deadline has passed.
fn until(deadline: Instant) -> Option<Duration> {
    let left = deadline.checked_duration_since(Instant::now())?;
    (!left.is_zero()).then(|| left.min(Duration::from_millis(CONN_READ_TIMEOUT_MS)))
}

/// Takes a freshly accepted connection: serves it on its own task, or, when
/// the shard is full of busy connections, answers 503 and closes it (just
/// closes it when SHARD_REFUSALS_IN_FLIGHT_MAX refusals are already going out).
pub fn admit<C: ConnContext + ?Sized + 'static>(stream: TcpStream, cx: Rc<C>, gate: &Rc<Gate>) {
    let edge = cx.edge();
    edge.accepted.set(edge.accepted.get() + 1);
    admit_carried(stream, cx, gate, Reader::new(Vec::new()), Affinity::default());
}

/// Takes a connection another shard moved here (see [`Affinity`]): served
/// like a new one, starting with the bytes it had already received.
pub fn adopt<C: ConnContext + ?Sized + 'static>(c: MovedConnection, cx: Rc<C>, gate: &Rc<Gate>) {
    // Safety: the descriptor is the connection's socket, owned by `c` alone.
    let stream = unsafe { TcpStream::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(c.socket)) };
    cx.edge().moved_in.set(cx.edge().moved_in.get() + 1);
    admit_carried(stream, cx, gate, Reader::new(c.pending), Affinity::moved(c.moves));
}

fn admit_carried<C: ConnContext + ?Sized + 'static>(
    stream: TcpStream,
    cx: Rc<C>,
    gate: &Rc<Gate>,
    rd: Reader,
    affinity: Affinity,
) {
    let edge = cx.edge();
    let Some(slot) = gate.admit(edge.connections.get()) else {
        edge.refused.set(edge.refused.get() + 1);
        if gate.refusing.get() < SHARD_REFUSALS_IN_FLIGHT_MAX {
            let gate = gate.clone();
            gate.refusing.set(gate.refusing.get() + 1);
            glommio::spawn_local(async move {
                let resp = respond::plain(503, "too many open connections")
                    .header("Retry-After", RETRY_AFTER_SECS.to_string());
                fail(stream, &resp, &mut Vec::new()).await;
                gate.refusing.set(gate.refusing.get() - 1);
            })
            .detach();
        }
        return;
    };
    // Counted open until served: the gate bounds this gauge, shutdown waits for it.
    edge.connections.set(edge.connections.get() + 1);
    glommio::spawn_local(async move {
        let gate = slot.gate.clone();
        serve(stream, cx.clone(), slot, rd, affinity).await;
        let open = cx.edge().connections.get() - 1;
        cx.edge().connections.set(open);
        if open == 0 {
            gate.none_open.notify();
        }
    })
    .detach();
}

/// Ends a connection after an answer that closes it: stops sending, then
/// reads and drops what the client still sends, within CONN_LINGER_MS and
/// CONN_LINGER_BYTES_MAX, so that closing with unread bytes (which sends a
/// TCP reset) does not destroy the answer before the client has read it.
async fn linger_close(mut stream: TcpStream) {
    if stream.shutdown(std::net::Shutdown::Write).await.is_err() {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(CONN_LINGER_MS);
    let mut scratch = vec![0u8; CONN_READ_CHUNK_BYTES];
    let mut dropped = 0;
    while dropped < CONN_LINGER_BYTES_MAX {
        let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            return;
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(n) => dropped += n,
        }
    }
}

/// A connection's receive side: bytes not yet consumed, and read space.
struct Reader {
    buf: Vec<u8>,
    scratch: Box<[u8]>,
}

impl Reader {
    /// Read space for a connection that has already received `pending`.
    fn new(mut pending: Vec<u8>) -> Reader {
        pending.reserve(CONN_READ_CHUNK_BYTES.saturating_sub(pending.len()));
        Reader { buf: pending, scratch: vec![0; CONN_READ_CHUNK_BYTES].into() }
    }
}

/// Moves the connection to shard `to` at a request boundary: the socket (a
/// duplicate of its descriptor; this end's copy closes when `stream` drops)
/// and the unread bytes go over the mesh. Gives the stream back when the
/// move cannot be made, to keep serving here. Called between requests,
/// after the last read returned: glommio (patch 6) keeps an io_uring
/// receive armed only while a read waits, or after a read that was given
/// up (which this loop does only to close), so none can take the moved
/// socket's next bytes here.
fn move_connection<C: ConnContext + ?Sized>(
    cx: &C,
    stream: TcpStream,
    rd: &mut Reader,
    to: usize,
    moves: u8,
    from: usize,
) -> Option<TcpStream> {
    // Safety: fcntl on a descriptor we own; a new descriptor or -1 comes back.
    let fd = unsafe { libc::fcntl(stream.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Some(stream);
    }
    // Safety: `fd` was just created and nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let c = MovedConnection { socket, pending: std::mem::take(&mut rd.buf), moves, from };
    match cx.move_to(to, c) {
        Ok(()) => {
            cx.edge().moved_out.set(cx.edge().moved_out.get() + 1);
            None
        }
        Err(c) => {
            rd.buf = c.pending;
            Some(stream)
        }
    }
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

/// Writes a final error answer and ends the connection.
async fn fail(stream: TcpStream, resp: &Response, out: &mut Vec<u8>) {
    let mut stream = stream;
    out.clear();
    respond::encode(resp, false, false, out);
    if write_all(&mut stream, out).await.is_ok() {
        linger_close(stream).await;
    }
}

fn request_timeout() -> Response {
    let mut r = respond::plain(408, "request not received in time");
    r.close = true;
    r
}

/// Why a request could not be received.
enum RecvError {
    /// Answer this and close.
    Answer(Response),
    /// Close without an answer (peer gone, idle timeout, evicted).
    Close,
}

/// Reads until `rd.buf` starts with a complete head. Idle (nothing of a
/// head yet): CONN_IDLE_TIMEOUT_MS per read; from a head's first byte the
/// whole head must come within `timeouts.header`.
/// While idle, the read also ends when the shard stops (graceful shutdown).
async fn read_head(
    stream: &mut TcpStream,
    rd: &mut Reader,
    slot: &Slot,
    stop: &StopSlot,
) -> Result<(RequestHead, usize), RecvError> {
    let _waiting = slot.gate.waiting(slot);
    let mut deadline = Deadline::after(slot.gate.timeouts.header);
    loop {
        match parse_head(&rd.buf, &LIMITS) {
            Ok(x) => return Ok(x),
            Err(ParseError::Incomplete) => {}
            Err(e) => return Err(RecvError::Answer(parse_error_response(&e))),
        }
        let timeout = if rd.buf.is_empty() {
            Duration::from_millis(CONN_IDLE_TIMEOUT_MS)
        } else {
            until(deadline.at()).ok_or(RecvError::Answer(request_timeout()))?
        };
        let idle_stop = rd.buf.is_empty().then_some(stop);
        match read_more(stream, rd, timeout, Some(&slot.evict), idle_stop).await {
            Ok(ReadMore::Got) => {}
            Ok(ReadMore::Eof | ReadMore::Evicted) => return Err(RecvError::Close),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut && !rd.buf.is_empty() => {
                return Err(RecvError::Answer(request_timeout()))
            }
            Err(_) => return Err(RecvError::Close),
        }
    }
}

/// Serves one connection until the peer closes it, a timeout, or an error
/// that makes the byte stream unusable.
async fn serve<C: ConnContext + ?Sized>(
    mut stream: TcpStream,
    cx: Rc<C>,
    slot: Slot,
    mut rd: Reader,
    mut affinity: Affinity,
) {
    if affinity.moves() == 0 {
        let _ = stream.set_nodelay(true);
    }
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let stop = cx.stop().slot();
    loop {
        // 1. A complete head.
        let (head, head_len) = match read_head(&mut stream, &mut rd, &slot, &stop).await {
            Ok(x) => x,
            Err(RecvError::Answer(r)) => {
                cx.edge().count_request(RouteLabel::Other, r.status);
                return fail(stream, &r, &mut out).await;
            }
            Err(RecvError::Close) => return,
        };
        // 2. Where it goes, and whether its sender may send it.
        let label = route_label(&head.path);
        let mut routed = route(&head, Vec::new());
        let refused = match cx.access().and_then(|a| guard::check(a, cx.shard_id(), cx.edge(), &head, &routed)) {
            Some(mut r) if r.status == 401 && !matches!(head.body, BodyKind::None | BodyKind::Length(0)) => {
                // Nobody known sends it: its body is not worth receiving.
                cx.edge().count_request(label, r.status);
                r.close = true;
                return fail(stream, &r, &mut out).await;
            }
            other => other,
        };
        if head.expect_continue
            && head.body != BodyKind::None
            && write_all(&mut stream, b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            return;
        }
        // 3. Its body.
        let mut deadline = Deadline::after(slot.gate.timeouts.body);
        let body = match read_body(&mut stream, &mut rd, &head, head_len, &mut deadline).await {
            Ok(x) => x,
            Err(RecvError::Answer(r)) => {
                cx.edge().count_request(label, r.status);
                return fail(stream, &r, &mut out).await;
            }
            Err(RecvError::Close) => return,
        };
        if rd.buf.capacity() > 4 * CONN_READ_CHUNK_BYTES && rd.buf.len() < CONN_READ_CHUNK_BYTES {
            // Give back the memory of one large request before waiting on it.
            rd.buf.shrink_to(CONN_READ_CHUNK_BYTES);
        }
        // 4. Run it (or refuse it) and answer.
        let (resp, remote) = match refused {
            Some(r) => (r, None),
            None => {
                if let Ok(r) = &mut routed {
                    set_body(r, body);
                }
                let routed = match next(routed) {
                    Next::Sse(key, surface, req) => {
                        return serve_sse(&mut stream, &*cx, &stop, label, key, surface, req).await;
                    }
                    Next::Answer(routed) => routed,
                };
                handle(&*cx, &head, routed).await
            }
        };
        cx.edge().count_request(label, resp.status);
        // Shutting down: this answer is the connection's last.
        let keep_alive = head.keep_alive && !stop.is_stopped();
        out.clear();
        respond::encode(&resp, head.method == Method::Head, keep_alive, &mut out);
        if write_all(&mut stream, &out).await.is_err() || !keep_alive || resp.close {
            return;
        }
        // 5. Serve it where its requests go, once they keep going there.
        affinity.observe(remote);
        if let Some(to) = affinity.take_move() {
            stream = match move_connection(&*cx, stream, &mut rd, to, affinity.moves(), cx.shard_id()) {
                Some(s) => s,
                None => return,
            };
        }
    }
}

/// What the connection does with a request that may run.
enum Next {
    /// An SSE read: the connection runs the SSE loop.
    Sse(StreamKey, Surface, ReadReq),
    /// Anything else: one answer.
    Answer(Result<Route, RouteError>),
}

fn next(routed: Result<Route, RouteError>) -> Next {
    let sse = matches!(&routed, Ok(Route::Shard(req))
        if matches!(&**req, ShardRequest::Stream { op: StreamOp::Read(read), .. } if read.live == Live::Sse));
    if !sse {
        return Next::Answer(routed);
    }
    let Ok(Route::Shard(req)) = routed else { unreachable!("matched above") };
    let ShardRequest::Stream { key, surface, op: StreamOp::Read(read) } = *req else { unreachable!("matched above") };
    Next::Sse(key, surface, read)
}

/// A deadline that starts when first asked for: a head's from its first
/// byte, a body's from the first read it needs (one that came with its head
/// needs no clock read).
struct Deadline {
    after: Duration,
    at: Option<Instant>,
}

impl Deadline {
    fn after(after: Duration) -> Deadline {
        Deadline { after, at: None }
    }

    fn at(&mut self) -> Instant {
        *self.at.get_or_insert_with(|| Instant::now() + self.after)
    }
}

/// One read of body bytes before `deadline`.
async fn read_body_more(stream: &mut TcpStream, rd: &mut Reader, deadline: &mut Deadline) -> Result<(), RecvError> {
    let timeout = until(deadline.at()).ok_or(RecvError::Answer(request_timeout()))?;
    match read_more(stream, rd, timeout, None, None).await {
        Ok(ReadMore::Got) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(RecvError::Answer(request_timeout())),
        _ => Err(RecvError::Close),
    }
}

/// Reads the body after a head of `head_len` bytes, all of it before
/// `deadline` (counted from the first read the body needs), and removes the
/// request from `rd.buf` (what follows it, a pipelined request, stays).
async fn read_body(
    stream: &mut TcpStream,
    rd: &mut Reader,
    head: &RequestHead,
    head_len: usize,
    deadline: &mut Deadline,
) -> Result<Vec<u8>, RecvError> {
    match head.body {
        BodyKind::None => {
            rd.buf.drain(..head_len);
            Ok(Vec::new())
        }
        BodyKind::Length(n) => {
            let end = head_len + n as usize;
            if end <= rd.buf.capacity() {
                // Small: copied out, the read buffer stays as it is.
                while rd.buf.len() < end {
                    read_body_more(stream, rd, deadline).await?;
                }
                let body = rd.buf[head_len..end].to_vec();
                rd.buf.drain(..end);
                return Ok(body);
            }
            // Large: received into one allocation of exactly this request's
            // size, which becomes the body (held once, not twice).
            rd.buf.reserve_exact(end - rd.buf.len());
            while rd.buf.len() < end {
                read_body_more(stream, rd, deadline).await?;
            }
            let rest = rd.buf.split_off(end);
            let mut body = std::mem::replace(&mut rd.buf, rest);
            body.drain(..head_len);
            Ok(body)
        }
        BodyKind::Chunked => {
            let mut dec = ChunkedDecoder::new(LIMITS.body_bytes_max);
            let mut body = Vec::new();
            let mut pos = head_len;
            loop {
                let (used, progress) =
                    dec.decode(&rd.buf[pos..], &mut body).map_err(|e| RecvError::Answer(parse_error_response(&e)))?;
                pos += used;
                if progress == ChunkProgress::Done {
                    rd.buf.drain(..pos);
                    return Ok(body);
                }
                // Decoded bytes are in `body`; drop them from the read buffer
                // so a long chunked upload is held once, not twice.
                rd.buf.drain(head_len..pos);
                pos = head_len;
                read_body_more(stream, rd, deadline).await?;
            }
        }
    }
}

/// Runs one request; also says which other shard ran it, if one did.
async fn handle<C: ConnContext + ?Sized>(
    cx: &C,
    head: &RequestHead,
    routed: Result<Route, RouteError>,
) -> (Response, Option<usize>) {
    let surface = surface_of(&head.path);
    let mut remote = None;
    let resp = match routed {
        Ok(Route::Options) => respond::preflight(),
        Ok(Route::Metrics) => {
            let mut r = Response::new(200).header("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            r.body = cx.metrics().await.into_bytes();
            r
        }
        Ok(Route::Health) => respond::plain(200, "ok"),
        Ok(Route::Ready) if cx.ready() => respond::plain(200, cx.degraded().unwrap_or("ready")),
        Ok(Route::Ready) => respond::plain(503, "not ready (starting or shutting down)"),
        Ok(Route::Shard(req)) => {
            let owner = cx.owner(&req);
            remote = (owner != cx.shard_id()).then_some(owner);
            let long_poll =
                matches!(&*req, ShardRequest::Stream { op: StreamOp::Read(r), .. } if r.live == Live::LongPoll);
            let _held = long_poll.then(|| Held::new(&cx.edge().long_polls));
            match cx.dispatch_to(owner, *req).await {
                Ok(o) => respond::outcome(surface, o, || location(head, cx.trust_proxy())),
                Err(e) => respond::error(surface, &e),
            }
        }
        Err(RouteError::Protocol(e)) => respond::error(surface, &e),
        Err(RouteError::MethodNotAllowed(allow)) => respond::plain(405, "method not allowed").header("Allow", allow),
    };
    (resp, remote)
}

/// Absolute URL of the request (F10: Location must be absolute), as the
/// client addressed it (see `forwarded`).
fn location(head: &RequestHead, trust_proxy: bool) -> String {
    let o = super::forwarded::origin(head, trust_proxy);
    format!("{}://{}{}", o.scheme, o.host, head.raw_path)
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
    let started = std::time::Instant::now();
    let _live = Held::new(&cx.edge().sse);
    let client_cursor = req.cursor.clone();
    let read = |from: ReadFrom, live: Live| ShardRequest::Stream {
        key: key.clone(),
        surface,
        op: StreamOp::Read(ReadReq { from, live, cursor: client_cursor.clone(), if_none_match: None }),
    };
    let mut r = match cx.dispatch(read(req.from, Live::Sse)).await {
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
    let base64 = !sse_is_text(&r.info.content_type);
    let mut out = Vec::with_capacity(4096);
    respond::sse_head(base64, &mut out);
    loop {
        if r.has_data() {
            sse::data_event(&mut out, &r.body, base64);
        }
        // The cursor comes from the stream's shard (its clock, its jitter).
        sse::control_event(&mut out, r.next_offset, r.cursor, r.up_to_date, r.closed_at_end);
        if write_all(stream, &out).await.is_err() || r.closed_at_end || stop.is_stopped() {
            return;
        }
        out.clear();
        if started.elapsed() >= std::time::Duration::from_millis(SSE_CONNECTION_MS_MAX) {
            return;
        }
        let live = if r.up_to_date { Live::LongPoll } else { Live::Sse };
        r = match cx.dispatch(read(ReadFrom::At(r.next_offset), live)).await {
            Ok(Outcome::Read(next)) => next,
            _ => return,
        };
    }
}
