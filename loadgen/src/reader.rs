//! Live readers: `--readers K` connections, all on one thread (mio), each
//! following one stream from `offset=now` by long-poll or SSE, decoding the
//! send timestamp of every delivered message and recording now − sent into
//! the delivery-latency histogram.
//!
//! Long-poll: `GET {stream}?offset=<next>&live=long-poll` in a loop; 200 →
//! decode the body, 204 → nothing arrived before the server's timeout; either
//! way continue from `Stream-Next-Offset`.
//!
//! SSE: `GET {stream}?offset=<next>&live=sse`; `event: data` payloads are
//! decoded (base64 when the response says `Stream-SSE-Data-Encoding:
//! base64`), `event: control` updates the offset to resume from
//! (`streamNextOffset`). When the server ends the response (it does so
//! periodically), the reader reconnects from that offset.
//!
//! Only messages sent inside the measured window are recorded.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::Deserialize;

use crate::client::ResponseParser;
use crate::model::{new_histogram, Config, Progress, ReadMode, Timing, IO_ERROR};
use crate::payload::{decode_json_array, wall_us, BinaryScanner};

/// Pause before retrying after a failed read request.
const RETRY: Duration = Duration::from_millis(100);
/// Longest SSE line accepted (a base64 data line of a 1 MiB read is ~1.4 MB).
const MAX_SSE_LINE: usize = 16 * 1024 * 1024;
/// Read buffer for reader connections.
const READ_BUF: usize = 64 * 1024;

/// What the readers measured.
pub struct ReaderResult {
    /// now − send time (µs) of messages sent in the measured window.
    pub hist: Histogram<u64>,
    /// Messages recorded in `hist`.
    pub deliveries: u64,
    /// All messages decoded (warmup and late ones included).
    pub deliveries_total: u64,
    /// Failed read requests by status (`IO_ERROR` for I/O).
    pub errors: BTreeMap<u16, u64>,
    /// Delivered data that did not decode as loadgen messages.
    pub parse_errors: u64,
}

/// Server-sent events, parsed incrementally (lines may arrive in pieces).
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    event: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
}

impl SseParser {
    /// Feed body bytes; `on_event(event_type, data)` runs for every complete
    /// event (data lines joined with '\n').
    pub fn feed(&mut self, mut buf: &[u8], on_event: &mut impl FnMut(&[u8], &[u8])) -> io::Result<()> {
        while let Some(i) = buf.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&buf[..i]);
            buf = &buf[i + 1..];
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            self.process_line(on_event);
        }
        self.line.extend_from_slice(buf);
        if self.line.len() > MAX_SSE_LINE {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "SSE line too long"));
        }
        Ok(())
    }

    fn process_line(&mut self, on_event: &mut impl FnMut(&[u8], &[u8])) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if self.has_data || !self.event.is_empty() {
                if self.data.last() == Some(&b'\n') {
                    self.data.pop();
                }
                on_event(&self.event, &self.data);
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
        } else if line[0] != b':' {
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(c) => (&line[..c], &line[c + 1..]),
                None => (&line[..], &b""[..]),
            };
            let value = value.strip_prefix(b" ").unwrap_or(value);
            match field {
                b"event" => {
                    self.event.clear();
                    self.event.extend_from_slice(value);
                }
                b"data" => {
                    self.data.extend_from_slice(value);
                    self.data.push(b'\n');
                    self.has_data = true;
                }
                _ => {}
            }
        }
        self.line = line;
        self.line.clear();
    }
}

#[derive(Deserialize)]
struct Control {
    #[serde(rename = "streamNextOffset")]
    next_offset: Option<String>,
    #[serde(rename = "streamClosed", default)]
    closed: bool,
}

/// Decoding and recording shared by all reader connections.
struct Sink<'a> {
    json: bool,
    timing: Option<Timing>,
    progress: &'a Progress,
    res: ReaderResult,
}

impl Sink<'_> {
    fn record(&mut self, ts: u64, now_us: u64) {
        self.res.deliveries_total += 1;
        let Some(t) = self.timing else { return };
        if ts >= t.wall_warm_end_us && ts < t.wall_end_us {
            self.res.hist.saturating_record(now_us.saturating_sub(ts));
            self.res.deliveries += 1;
            self.progress.deliveries.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Decode delivered stream data (a read body or an SSE data payload).
    fn data(&mut self, scanner: &mut BinaryScanner, data: &[u8]) {
        let now_us = wall_us();
        if self.json {
            match decode_json_array(data) {
                Ok(ts) => ts.into_iter().for_each(|t| self.record(t, now_us)),
                Err(_) => self.res.parse_errors += 1,
            }
        } else {
            let mut found = Vec::new();
            if !scanner.scan(data, |t| found.push(t)) {
                self.res.parse_errors += 1;
            }
            found.into_iter().for_each(|t| self.record(t, now_us));
        }
    }

    fn error(&mut self, key: u16) {
        *self.res.errors.entry(key).or_insert(0) += 1;
    }
}

struct RConn {
    path: String,
    sock: Option<TcpStream>,
    connected: bool,
    next_offset: String,
    wbuf: Vec<u8>,
    wpos: usize,
    parser: ResponseParser,
    /// Some while streaming an SSE body.
    sse: Option<(SseParser, bool)>,
    scanner: BinaryScanner,
    /// A request is out and its response not finished.
    awaiting: bool,
    retry_at: Option<Instant>,
    /// The stream was closed: nothing more will come.
    finished: bool,
    /// Responses completed on the current socket.
    served: u32,
}

struct RCtx<'a> {
    cfg: &'a Config,
    addrs: &'a [SocketAddr],
    host: String,
    registry: mio::Registry,
    sink: Sink<'a>,
    rbuf: Vec<u8>,
}

impl RConn {
    fn drop_sock(&mut self, cx: &mut RCtx) {
        if let Some(mut s) = self.sock.take() {
            let _ = cx.registry.deregister(&mut s);
        }
        self.connected = false;
        self.awaiting = false;
        self.served = 0;
        self.sse = None;
        self.wbuf.clear();
        self.wpos = 0;
    }

    fn retry_later(&mut self, cx: &mut RCtx, key: u16) {
        cx.sink.error(key);
        self.drop_sock(cx);
        self.retry_at = Some(Instant::now() + RETRY);
    }

    /// Connect if needed and send the next read request.
    fn begin(&mut self, idx: usize, cx: &mut RCtx) {
        self.retry_at = None;
        if self.finished || self.awaiting {
            return;
        }
        if self.sock.is_none() {
            let addr = cx.addrs[0];
            let s = TcpStream::connect(addr).and_then(|mut s| {
                s.set_nodelay(true)?;
                cx.registry.register(&mut s, Token(idx), Interest::READABLE | Interest::WRITABLE)?;
                Ok(s)
            });
            match s {
                Ok(s) => {
                    self.sock = Some(s);
                    self.connected = false;
                }
                Err(_) => {
                    self.retry_later(cx, IO_ERROR);
                    return;
                }
            }
        }
        self.awaiting = true;
        let live = match cx.cfg.read_mode {
            ReadMode::LongPoll => "long-poll",
            ReadMode::Sse => "sse",
        };
        self.wbuf.clear();
        let _ = write!(
            self.wbuf,
            "GET {}?offset={}&live={live} HTTP/1.1\r\nHost: {}\r\n\r\n",
            self.path, self.next_offset, cx.host
        );
        self.wpos = 0;
        match cx.cfg.read_mode {
            ReadMode::LongPoll => self.parser.reset(false),
            ReadMode::Sse => self.parser.reset_head_only(),
        }
        if self.connected {
            self.flush(cx);
        }
    }

    fn flush(&mut self, cx: &mut RCtx) {
        let Some(s) = self.sock.as_mut() else { return };
        while self.wpos < self.wbuf.len() {
            match s.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return self.retry_later(cx, IO_ERROR),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.retry_later(cx, IO_ERROR),
            }
        }
    }

    fn on_event(&mut self, idx: usize, ev: &mio::event::Event, cx: &mut RCtx) {
        let Some(s) = self.sock.as_ref() else { return };
        if !self.connected {
            if !(ev.is_writable() || ev.is_error() || ev.is_write_closed()) {
                return;
            }
            let ok = match s.take_error() {
                Ok(Some(_)) | Err(_) => Err(()),
                Ok(None) => match s.peer_addr() {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                    Err(_) => Err(()),
                },
            };
            match ok {
                Ok(true) => {
                    self.connected = true;
                    self.flush(cx);
                }
                Ok(false) => {}
                Err(()) => self.retry_later(cx, IO_ERROR),
            }
            return;
        }
        if ev.is_writable() && self.wpos < self.wbuf.len() {
            self.flush(cx);
        }
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            self.read(idx, cx);
        }
    }

    fn read(&mut self, idx: usize, cx: &mut RCtx) {
        loop {
            let Some(s) = self.sock.as_mut() else { return };
            let n = match s.read(&mut cx.rbuf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.retry_later(cx, IO_ERROR),
            };
            if n == 0 {
                if self.sse.is_some() || (self.parser.is_idle() && (!self.awaiting || self.served > 0)) {
                    // The server ended the SSE response, or closed a reused
                    // keep-alive connection before answering: resume from
                    // the last offset.
                    self.drop_sock(cx);
                    self.begin(idx, cx);
                } else if self.parser.eof().is_ok() && self.parser.is_done() {
                    self.drop_sock(cx);
                    self.on_response(idx, cx, false);
                } else {
                    self.retry_later(cx, IO_ERROR);
                }
                return;
            }
            let rbuf = std::mem::take(&mut cx.rbuf);
            self.on_bytes(idx, &rbuf[..n], cx);
            cx.rbuf = rbuf;
            if n < cx.rbuf.len() {
                return;
            }
        }
    }

    fn on_bytes(&mut self, idx: usize, mut data: &[u8], cx: &mut RCtx) {
        if self.sse.is_none() {
            if !self.awaiting {
                // Bytes nobody asked for.
                return self.retry_later(cx, IO_ERROR);
            }
            let used = match self.parser.feed(data) {
                Ok(u) => u,
                Err(_) => return self.retry_later(cx, IO_ERROR),
            };
            data = &data[used..];
            if !self.parser.is_done() {
                return;
            }
            if cx.cfg.read_mode == ReadMode::Sse {
                let r = self.parser.response();
                if r.status != 200 {
                    return self.retry_later(cx, r.status);
                }
                let b64 = r.header("stream-sse-data-encoding").is_some_and(|v| v.eq_ignore_ascii_case("base64"));
                self.sse = Some((SseParser::default(), b64));
            } else {
                let keep = self.parser.keep_alive() && data.is_empty();
                self.on_response(idx, cx, keep);
                return;
            }
        }
        // Streaming SSE body.
        let Some((mut sse, b64)) = self.sse.take() else { return };
        let mut bad = false;
        let mut closed = false;
        let mut next = None;
        let fed = sse.feed(data, &mut |event: &[u8], payload: &[u8]| match event {
            b"data" | b"" | b"message" => {
                if b64 {
                    match base64::engine::general_purpose::STANDARD.decode(payload) {
                        Ok(bytes) => cx.sink.data(&mut self.scanner, &bytes),
                        Err(_) => bad = true,
                    }
                } else {
                    cx.sink.data(&mut self.scanner, payload);
                }
            }
            b"control" => match serde_json::from_slice::<Control>(payload) {
                Ok(c) => {
                    if let Some(o) = c.next_offset {
                        next = Some(o);
                    }
                    closed |= c.closed;
                }
                Err(_) => bad = true,
            },
            _ => {}
        });
        if bad {
            cx.sink.res.parse_errors += 1;
        }
        if let Some(o) = next {
            self.next_offset = o;
        }
        if fed.is_err() {
            return self.retry_later(cx, IO_ERROR);
        }
        if closed {
            self.finished = true;
            self.drop_sock(cx);
            return;
        }
        self.sse = Some((sse, b64));
    }

    /// A complete long-poll response.
    fn on_response(&mut self, idx: usize, cx: &mut RCtx, keep: bool) {
        self.awaiting = false;
        self.served += 1;
        let resp = self.parser.take_response();
        match resp.status {
            200 | 204 => {
                if resp.status == 200 && !resp.body.is_empty() {
                    cx.sink.data(&mut self.scanner, &resp.body);
                }
                if let Some(o) = resp.header("stream-next-offset") {
                    self.next_offset.clear();
                    self.next_offset.push_str(o);
                }
                if resp.header("stream-closed").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                    self.finished = true;
                }
                if !keep {
                    self.drop_sock(cx);
                }
                self.begin(idx, cx);
            }
            s => self.retry_later(cx, s),
        }
    }
}

/// Run the readers until `stop` is set. Sends `()` on `ready` once the
/// connections are set up, then waits for the schedule on `start`.
pub fn run_readers(
    cfg: &Config,
    addrs: &[SocketAddr],
    progress: &Progress,
    ready: mpsc::Sender<()>,
    start: mpsc::Receiver<Timing>,
    stop: &AtomicBool,
) -> anyhow::Result<ReaderResult> {
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(256);
    let mut cx = RCtx {
        cfg,
        addrs,
        host: cfg.reader_target().host_header(),
        registry: poll.registry().try_clone()?,
        sink: Sink {
            json: cfg.json,
            timing: None,
            progress,
            res: ReaderResult {
                hist: new_histogram(),
                deliveries: 0,
                deliveries_total: 0,
                errors: BTreeMap::new(),
                parse_errors: 0,
            },
        },
        rbuf: vec![0; READ_BUF],
    };
    let mut conns: Vec<RConn> = (0..cfg.readers)
        .map(|i| RConn {
            path: cfg.read_path(i % cfg.streams),
            sock: None,
            connected: false,
            next_offset: "now".to_string(),
            wbuf: Vec::with_capacity(256),
            wpos: 0,
            parser: ResponseParser::new(),
            sse: None,
            scanner: BinaryScanner::default(),
            awaiting: false,
            retry_at: None,
            finished: false,
            served: 0,
        })
        .collect();

    // Connect and send the first requests (from `now`) before the writers
    // start, so the first appends are seen.
    for (i, c) in conns.iter_mut().enumerate() {
        c.begin(i, &mut cx);
    }
    let deadline = Instant::now() + cfg.timeout;
    while conns.iter().any(|c| c.sock.is_some() && (!c.connected || c.wpos < c.wbuf.len())) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        poll.poll(&mut events, Some((deadline - now).min(Duration::from_millis(50))))?;
        for ev in events.iter() {
            let i = ev.token().0;
            conns[i].on_event(i, ev, &mut cx);
        }
    }
    let _ = ready.send(());
    let Ok(timing) = start.recv() else {
        return Ok(cx.sink.res);
    };
    cx.sink.timing = Some(timing);

    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut wait = Duration::from_millis(50);
        for (i, c) in conns.iter_mut().enumerate() {
            match c.retry_at {
                Some(at) if at <= now => c.begin(i, &mut cx),
                Some(at) => wait = wait.min(at - now),
                None => {}
            }
        }
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
        for ev in events.iter() {
            let i = ev.token().0;
            conns[i].on_event(i, ev, &mut cx);
        }
    }
    Ok(cx.sink.res)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut |e: &[u8], d: &[u8]| {
                out.push((String::from_utf8_lossy(e).into_owned(), String::from_utf8_lossy(d).into_owned()))
            })
            .unwrap();
        }
        out
    }

    #[test]
    fn sse_events_across_any_split() {
        let raw: &[u8] = b": comment\n\nevent: data\ndata:AP8K\n\nevent: control\r\ndata:{\"streamNextOffset\":\"1\"}\r\n\r\nevent: data\ndata: a\ndata:b\n\nretry: 5\n\n";
        let want = vec![
            ("data".to_string(), "AP8K".to_string()),
            ("control".to_string(), "{\"streamNextOffset\":\"1\"}".to_string()),
            ("data".to_string(), "a\nb".to_string()),
        ];
        assert_eq!(events(&[raw]), want);
        for cut in 1..raw.len() {
            assert_eq!(events(&[&raw[..cut], &raw[cut..]]), want, "cut {cut}");
        }
        let bytes: Vec<&[u8]> = raw.chunks(1).collect();
        assert_eq!(events(&bytes), want);
    }
}
