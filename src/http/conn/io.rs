//! A connection's socket within its deadlines: reading a head (idle, then
//! the header timeout), reading a body (the body timeout, from the first
//! read it needs), writing an answer (the write timeout), and closing after
//! an error answer without destroying it (the linger).

use super::super::encode::{encode, plain, Response};
use super::super::gate::Slot;
use super::super::parse::{parse_head, BodyKind, ChunkProgress, ChunkedDecoder, ParseError, ParseLimits, RequestHead};
use super::super::stop::StopSlot;
use crate::limits::{
    CONN_IDLE_TIMEOUT_MS, CONN_LINGER_BYTES_MAX, CONN_LINGER_MS, CONN_READ_CHUNK_BYTES, CONN_READ_TIMEOUT_MS,
    CONN_WRITE_TIMEOUT_MS, REQUEST_BODY_BYTES_MAX, REQUEST_HEADER_BYTES_MAX, REQUEST_HEADER_COUNT_MAX,
};
use crate::notify::Notify;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use std::time::{Duration, Instant};

const LIMITS: ParseLimits = ParseLimits {
    header_bytes_max: REQUEST_HEADER_BYTES_MAX,
    header_count_max: REQUEST_HEADER_COUNT_MAX,
    body_bytes_max: REQUEST_BODY_BYTES_MAX,
};

/// A connection's receive side: bytes not yet consumed, and read space.
pub(super) struct Reader {
    pub buf: Vec<u8>,
    scratch: Box<[u8]>,
}

impl Reader {
    /// Read space for a connection that has already received `pending`.
    pub fn new(mut pending: Vec<u8>) -> Reader {
        pending.reserve(CONN_READ_CHUNK_BYTES.saturating_sub(pending.len()));
        Reader { buf: pending, scratch: vec![0; CONN_READ_CHUNK_BYTES].into() }
    }

    /// Gives back the memory of one large request before waiting on the next.
    pub fn shrink(&mut self) {
        if self.buf.capacity() > 4 * CONN_READ_CHUNK_BYTES && self.buf.len() < CONN_READ_CHUNK_BYTES {
            self.buf.shrink_to(CONN_READ_CHUNK_BYTES);
        }
    }
}

enum ReadMore {
    Got,
    Eof,
    /// The gate closed this connection to make room for a new one, or the
    /// shard stopped (graceful shutdown) while the connection was idle.
    Evicted,
}

/// Waits for `evict` or `stop`, whichever is given and comes first.
async fn ended(evict: Option<&Notify>, stop: Option<&StopSlot>) {
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
    futures_lite::future::or(evicted, stopped).await
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
    let n = if evict.is_none() && stop.is_none() {
        stream.read(&mut rd.scratch).await?
    } else {
        let read = async { stream.read(&mut rd.scratch).await.map(Some) };
        let ended = async {
            ended(evict, stop).await;
            Ok(None)
        };
        match futures_lite::future::or(ended, read).await? {
            Some(n) => n,
            None => return Ok(ReadMore::Evicted),
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

/// Time left before `deadline` (as of `now`), capped at the per-read
/// timeout; None when the deadline has passed.
fn until(deadline: Instant, now: Instant) -> Option<Duration> {
    let left = deadline.checked_duration_since(now)?;
    (!left.is_zero()).then(|| left.min(Duration::from_millis(CONN_READ_TIMEOUT_MS)))
}

/// A deadline that starts when first asked for: a head's from its first
/// byte, a body's from the first read it needs (one that came with its head
/// needs no clock read).
pub(super) struct Deadline {
    after: Duration,
    at: Option<Instant>,
}

impl Deadline {
    pub fn after(after: Duration) -> Deadline {
        Deadline { after, at: None }
    }

    fn at(&mut self) -> Instant {
        *self.at.get_or_insert_with(|| Instant::now() + self.after)
    }

    /// How long the next read may wait; a 408 once the deadline has passed.
    fn next_wait(&mut self) -> Result<Duration, RecvError> {
        until(self.at(), Instant::now()).ok_or_else(|| RecvError::Answer(request_timeout()))
    }
}

/// Ends a connection after an answer that closes it: stops sending, then
/// reads and drops what the client still sends, within CONN_LINGER_MS and
/// CONN_LINGER_BYTES_MAX, so that closing with unread bytes (which sends a
/// TCP reset) does not destroy the answer before the client has read it.
async fn linger_close(stream: &mut TcpStream) {
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

pub(super) async fn write_all(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_millis(CONN_WRITE_TIMEOUT_MS)))?;
    stream.write_all(bytes).await
}

/// Writes a final error answer and ends the connection (the caller drops
/// the stream after).
pub(super) async fn fail(stream: &mut TcpStream, resp: &Response, out: &mut Vec<u8>) {
    out.clear();
    encode(resp, false, false, out);
    if write_all(stream, out).await.is_ok() {
        linger_close(stream).await;
    }
}

fn parse_error_response(e: &ParseError) -> Response {
    let mut r = match e {
        ParseError::HeadersTooLarge => plain(431, "request head too large"),
        ParseError::TooManyHeaders => plain(431, "too many header fields"),
        ParseError::BodyTooLarge => plain(413, "request body too large"),
        ParseError::UnsupportedTransferEncoding => plain(501, "only chunked transfer-encoding is supported"),
        ParseError::Bad(why) => plain(400, why),
        ParseError::Incomplete => plain(400, "incomplete request"),
    };
    r.close = true;
    r
}

fn request_timeout() -> Response {
    let mut r = plain(408, "request not received in time");
    r.close = true;
    r
}

/// Why a request could not be received.
pub(super) enum RecvError {
    /// Answer this and close.
    Answer(Response),
    /// Close without an answer (peer gone, idle timeout, evicted).
    Close,
}

/// Reads until `rd.buf` starts with a complete head. Idle (nothing of a
/// head yet): CONN_IDLE_TIMEOUT_MS per read; from a head's first byte the
/// whole head must come within `timeouts.header`.
/// While idle, the read also ends when the shard stops (graceful shutdown).
pub(super) async fn read_head(
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
        let idle = rd.buf.is_empty();
        let timeout = if idle { Duration::from_millis(CONN_IDLE_TIMEOUT_MS) } else { deadline.next_wait()? };
        match read_more(stream, rd, timeout, Some(&slot.evict), idle.then_some(stop)).await {
            Ok(ReadMore::Got) => {}
            Ok(ReadMore::Eof | ReadMore::Evicted) => return Err(RecvError::Close),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut && !idle => {
                return Err(RecvError::Answer(request_timeout()))
            }
            Err(_) => return Err(RecvError::Close),
        }
    }
}

/// One read of body bytes before `deadline`.
async fn read_body_more(stream: &mut TcpStream, rd: &mut Reader, deadline: &mut Deadline) -> Result<(), RecvError> {
    let timeout = deadline.next_wait()?;
    match read_more(stream, rd, timeout, None, None).await {
        Ok(ReadMore::Got) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(RecvError::Answer(request_timeout())),
        _ => Err(RecvError::Close),
    }
}

/// Reads the body after a head of `head_len` bytes, all of it before
/// `deadline` (counted from the first read the body needs), and removes the
/// request from `rd.buf` (what follows it, a pipelined request, stays).
pub(super) async fn read_body(
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
        BodyKind::Length(n) => read_sized(stream, rd, head_len, head_len + n as usize, deadline).await,
        BodyKind::Chunked => read_chunked(stream, rd, head_len, deadline).await,
    }
}

/// A body of known length, ending at `end` in the read buffer.
async fn read_sized(
    stream: &mut TcpStream,
    rd: &mut Reader,
    head_len: usize,
    end: usize,
    deadline: &mut Deadline,
) -> Result<Vec<u8>, RecvError> {
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

async fn read_chunked(
    stream: &mut TcpStream,
    rd: &mut Reader,
    head_len: usize,
    deadline: &mut Deadline,
) -> Result<Vec<u8>, RecvError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_starts_when_first_asked_for_and_then_stays() {
        let mut d = Deadline::after(Duration::from_secs(5));
        assert!(d.at.is_none(), "no clock read before a read needs one");
        let before = Instant::now();
        let at = d.at();
        assert!(at >= before + Duration::from_secs(5) && at <= Instant::now() + Duration::from_secs(5));
        assert_eq!(d.at(), at, "asked again, the same instant");
    }

    #[test]
    fn waits_are_capped_per_read_and_end_at_the_deadline() {
        let now = Instant::now();
        let cap = Duration::from_millis(CONN_READ_TIMEOUT_MS);
        assert_eq!(until(now + cap * 3, now), Some(cap));
        assert_eq!(until(now + Duration::from_millis(7), now), Some(Duration::from_millis(7).min(cap)));
        assert_eq!(until(now, now), None, "a deadline reached leaves no wait");
        assert_eq!(until(now, now + Duration::from_millis(1)), None, "nor one passed");
        let mut passed = Deadline::after(Duration::ZERO);
        match passed.next_wait() {
            Err(RecvError::Answer(r)) => assert_eq!((r.status, r.close), (408, true)),
            _ => panic!("a passed deadline answers 408"),
        }
    }

    #[test]
    fn parse_errors_answer_and_close() {
        for (e, status) in [
            (ParseError::HeadersTooLarge, 431),
            (ParseError::TooManyHeaders, 431),
            (ParseError::BodyTooLarge, 413),
            (ParseError::UnsupportedTransferEncoding, 501),
            (ParseError::Bad("x"), 400),
        ] {
            let r = parse_error_response(&e);
            assert_eq!((r.status, r.close), (status, true), "{e:?}");
        }
    }

    #[test]
    fn a_reader_keeps_what_came_before_and_gives_back_large_buffers() {
        let rd = Reader::new(b"GET / HTTP/1.1\r\n".to_vec());
        assert_eq!(rd.buf, b"GET / HTTP/1.1\r\n");
        assert!(rd.buf.capacity() >= CONN_READ_CHUNK_BYTES);
        let mut rd = Reader::new(Vec::with_capacity(8 * CONN_READ_CHUNK_BYTES));
        rd.buf.extend_from_slice(b"rest");
        rd.shrink();
        assert!(rd.buf.capacity() < 4 * CONN_READ_CHUNK_BYTES && rd.buf == b"rest");
    }
}
