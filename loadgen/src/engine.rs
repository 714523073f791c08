//! The append event loop: one worker thread drives its share of the
//! connections over non-blocking sockets (mio), with one outstanding request
//! per connection (no pipelining) and its own histogram.
//!
//! Open loop: connection `k` of `C` sends request `n` at the intended time
//! `t0 + (n*C + k)/R` (a timer, precise to the microsecond through a
//! timerfd); latency is measured from that intended time, so a stall shows
//! up instead of being hidden (no coordinated omission). A connection that
//! is behind sends as soon as its previous response completes and never
//! skips a request; requests due inside the run that could not be sent
//! before it ended are reported as `unsent`.
//!
//! Closed loop: the next request goes out as soon as the previous response
//! completes; latency is measured from the actual send.
//!
//! Any I/O or protocol error (or a request older than the timeout) counts as
//! an "io" error and drops the connection; the next request reconnects, and
//! its latency includes the connect.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};

use crate::client::ResponseParser;
use crate::model::{
    intended_offset, new_histogram, stream_index, AppendOutcome, Config, Progress, Series, Timing, IO_ERROR,
};
use crate::payload::{wall_us, Format, PayloadGen, Rng};

/// Token of the worker's timerfd.
const TIMER: Token = Token(usize::MAX);
/// How often in-flight requests are checked against the timeout.
const TIMEOUT_CHECK: Duration = Duration::from_millis(20);
/// Closed loop: pause after an I/O error before the next attempt, so a dead
/// server does not turn into a hot reconnect loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(1);
/// Read buffer per connection. The parser copies what it needs, so one
/// read of any size can be parsed in place.
const READ_BUF: usize = 16 * 1024;

/// What the workers share, read-only.
pub struct Shared<'a> {
    pub cfg: &'a Config,
    pub addrs: Vec<SocketAddr>,
    /// Per stream: "POST {path} HTTP/1.1\r\nHost: …\r\nContent-Type: …\r\n".
    pub heads: Vec<Vec<u8>>,
    pub progress: &'a Progress,
}

impl<'a> Shared<'a> {
    pub fn new(cfg: &'a Config, addrs: Vec<SocketAddr>, progress: &'a Progress) -> Shared<'a> {
        let host = cfg.target.host_header();
        let heads = (0..cfg.streams)
            .map(|i| {
                format!(
                    "POST {} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {}\r\n",
                    cfg.stream_path(i),
                    cfg.content_type
                )
                .into_bytes()
            })
            .collect();
        Shared { cfg, addrs, heads, progress }
    }
}

/// One worker's outcome; merged by the caller.
pub struct WorkerResult {
    pub hist: Histogram<u64>,
    pub ok: u64,
    pub ok_bytes: u64,
    /// Open loop: how late requests in the window went out (actual send −
    /// intended time, µs): the load tool's own lag, included in `hist`.
    pub send_lag: Histogram<u64>,
    pub duplicates: u64,
    /// By status; `IO_ERROR` for I/O and protocol failures.
    pub errors: BTreeMap<u16, u64>,
    pub warmup_requests: u64,
    pub warmup_errors: BTreeMap<u16, u64>,
    pub unsent: u64,
    pub connects: u64,
    /// The measured window second by second.
    pub series: Series,
}

impl WorkerResult {
    fn new(measured: Duration) -> WorkerResult {
        WorkerResult {
            hist: new_histogram(),
            ok: 0,
            ok_bytes: 0,
            send_lag: new_histogram(),
            duplicates: 0,
            errors: BTreeMap::new(),
            warmup_requests: 0,
            warmup_errors: BTreeMap::new(),
            unsent: 0,
            connects: 0,
            series: Series::new(measured),
        }
    }
}

/// A precise one-shot timer registered with the poll (timerfd). Without
/// it (creation failed), poll timeouts are used, which round up to whole
/// milliseconds.
struct Timer {
    fd: OwnedFd,
    armed: Option<Instant>,
}

impl Timer {
    fn new(registry: &Registry) -> Option<Timer> {
        use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
        let fd = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC).ok()?;
        registry.register(&mut SourceFd(&fd.as_raw_fd()), TIMER, Interest::READABLE).ok()?;
        Some(Timer { fd, armed: None })
    }

    /// Make the timer fire at `at` (no syscall if it already will).
    fn arm(&mut self, at: Instant, now: Instant) {
        use rustix::time::{timerfd_settime, Itimerspec, TimerfdTimerFlags, Timespec};
        if self.armed == Some(at) {
            return;
        }
        // A zero value would disarm the timer; fire "now" as 1 ns instead.
        let rel = at.saturating_duration_since(now).max(Duration::from_nanos(1));
        let spec = Itimerspec {
            it_interval: Timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: Timespec { tv_sec: rel.as_secs() as _, tv_nsec: rel.subsec_nanos() as _ },
        };
        if timerfd_settime(self.fd.as_fd(), TimerfdTimerFlags::empty(), &spec).is_ok() {
            self.armed = Some(at);
        }
    }
}

/// The request a connection is working on.
struct Inflight {
    /// Latency is measured from here: the intended send time (open loop) or
    /// the actual start (closed loop).
    start_ref: Instant,
    /// Inside the measured window (else warmup).
    measured: bool,
    stream: usize,
    bytes: usize,
    deadline: Instant,
    /// The request bytes are in `wbuf` (built once connected).
    built: bool,
}

struct Conn {
    /// Global connection number.
    k: usize,
    sock: Option<TcpStream>,
    connected: bool,
    /// Address being tried (index into `Shared::addrs`).
    addr: usize,
    inflight: Option<Inflight>,
    wbuf: Vec<u8>,
    wpos: usize,
    body: Vec<u8>,
    parser: ResponseParser,
    /// Number of the current (or next) request.
    n: u64,
    /// No more requests will be started.
    done: bool,
    /// Pending wake-up (open-loop due time, or closed-loop start/backoff).
    timer: Option<Instant>,
    gen: PayloadGen,
    /// Producer mode: next Producer-Seq per stream.
    seqs: Vec<u64>,
    producer_id: String,
}

/// Worker state other than the connections (split out for borrowing).
struct Ctx<'a, 'b> {
    sh: &'a Shared<'b>,
    registry: Registry,
    timing: Timing,
    res: WorkerResult,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    rbuf: Vec<u8>,
}

impl Ctx<'_, '_> {
    fn set_timer(&mut self, c: &mut Conn, idx: usize, at: Instant) {
        c.timer = Some(at);
        self.timers.push(Reverse((at, idx)));
    }

    fn count_error(&mut self, measured: bool, key: u16) {
        self.sh.progress.done.fetch_add(1, Ordering::Relaxed);
        self.sh.progress.errors.fetch_add(1, Ordering::Relaxed);
        if measured {
            *self.res.errors.entry(key).or_insert(0) += 1;
            self.res.series.record_error(Instant::now().saturating_duration_since(self.timing.warm_end));
        } else {
            self.res.warmup_requests += 1;
            *self.res.warmup_errors.entry(key).or_insert(0) += 1;
        }
    }
}

impl Conn {
    fn new(sh: &Shared, k: usize) -> Conn {
        let cfg = sh.cfg;
        let format = if cfg.json { Format::Json } else { Format::Binary };
        Conn {
            k,
            sock: None,
            connected: false,
            addr: 0,
            inflight: None,
            wbuf: Vec::with_capacity(cfg.payload_dist.max() + 512),
            wpos: 0,
            body: Vec::with_capacity(cfg.payload_dist.max() + 64),
            parser: ResponseParser::new(),
            n: 0,
            done: false,
            timer: None,
            gen: PayloadGen::new(format, cfg.payload_dist, cfg.min_payload(), Rng::derived(cfg.seed, k as u64)),
            seqs: if cfg.producer { vec![0; cfg.streams] } else { Vec::new() },
            producer_id: format!("lg-{}-{k}", cfg.run_id),
        }
    }

    /// Begin a non-blocking connect to the current address.
    fn connect(&mut self, idx: usize, cx: &mut Ctx) -> io::Result<()> {
        self.drop_sock(cx);
        let addr = cx.sh.addrs[self.addr % cx.sh.addrs.len()];
        let mut s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        cx.registry.register(&mut s, Token(idx), Interest::READABLE | Interest::WRITABLE)?;
        cx.res.connects += 1;
        self.sock = Some(s);
        self.connected = false;
        Ok(())
    }

    fn drop_sock(&mut self, cx: &mut Ctx) {
        if let Some(mut s) = self.sock.take() {
            let _ = cx.registry.deregister(&mut s);
        }
        self.connected = false;
        self.wpos = 0;
        self.wbuf.clear();
    }

    /// Start request `self.n` now (`now` is at or after its due time).
    fn start(&mut self, idx: usize, now: Instant, cx: &mut Ctx) {
        let cfg = cx.sh.cfg;
        let t = &cx.timing;
        let start_ref =
            if cfg.open_loop() { t.t0 + intended_offset(self.n, self.k, cfg.connections, cfg.rate) } else { now };
        self.inflight = Some(Inflight {
            start_ref,
            measured: start_ref >= t.warm_end,
            stream: stream_index(cfg.spread, self.n, self.k, cfg.connections, cfg.streams),
            bytes: 0,
            deadline: now + cfg.timeout,
            built: false,
        });
        if self.sock.is_none() {
            self.addr = 0;
            if self.connect(idx, cx).is_err() {
                self.fail(idx, now, cx);
                return;
            }
        }
        if self.connected {
            self.send(idx, now, cx);
        }
    }

    /// Build (if not yet) and write the in-flight request.
    fn send(&mut self, idx: usize, now: Instant, cx: &mut Ctx) {
        let Some(inf) = self.inflight.as_mut() else {
            return;
        };
        if !inf.built {
            let body_len = self.gen.build(&mut self.body, self.n, wall_us());
            inf.bytes = body_len;
            inf.built = true;
            if inf.measured && cx.sh.cfg.open_loop() {
                let lag = now.saturating_duration_since(inf.start_ref).as_micros();
                cx.res.send_lag.saturating_record(u64::try_from(lag).unwrap_or(u64::MAX));
            }
            self.wbuf.clear();
            self.wbuf.extend_from_slice(&cx.sh.heads[inf.stream]);
            if cx.sh.cfg.producer {
                let _ = write!(
                    self.wbuf,
                    "Producer-Id: {}\r\nProducer-Epoch: 0\r\nProducer-Seq: {}\r\n",
                    self.producer_id, self.seqs[inf.stream]
                );
            }
            let _ = write!(self.wbuf, "Content-Length: {body_len}\r\n\r\n");
            self.wbuf.extend_from_slice(&self.body);
            self.wpos = 0;
            self.parser.reset(false);
        }
        self.flush(idx, now, cx);
    }

    /// Write as much of the request as the socket takes.
    fn flush(&mut self, idx: usize, now: Instant, cx: &mut Ctx) {
        let Some(s) = self.sock.as_mut() else {
            return;
        };
        while self.wpos < self.wbuf.len() {
            match s.write(&self.wbuf[self.wpos..]) {
                Ok(0) => {
                    self.fail(idx, now, cx);
                    return;
                }
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.fail(idx, now, cx);
                    return;
                }
            }
        }
    }

    /// Readiness on this connection's socket.
    fn on_event(&mut self, idx: usize, ev: &mio::event::Event, cx: &mut Ctx) {
        if self.sock.is_none() {
            return;
        }
        let now = Instant::now();
        if !self.connected {
            if !(ev.is_writable() || ev.is_error() || ev.is_write_closed()) {
                return;
            }
            let s = self.sock.as_ref().expect("checked above");
            let state = match s.take_error() {
                Ok(Some(e)) | Err(e) => Err(e),
                Ok(None) => match s.peer_addr() {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                    Err(e) => Err(e),
                },
            };
            match state {
                Ok(false) => return,
                Ok(true) => {
                    self.connected = true;
                    self.send(idx, now, cx);
                }
                Err(_) => {
                    // Try the next address, then give up on this attempt.
                    self.addr += 1;
                    if self.addr < cx.sh.addrs.len() && self.connect(idx, cx).is_ok() {
                        return;
                    }
                    self.drop_sock(cx);
                    if self.inflight.is_some() {
                        self.fail(idx, now, cx);
                    }
                }
            }
            return;
        }
        if ev.is_writable() && self.inflight.is_some() && self.wpos < self.wbuf.len() {
            self.flush(idx, now, cx);
        }
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            self.read(idx, cx);
        }
    }

    fn read(&mut self, idx: usize, cx: &mut Ctx) {
        loop {
            let Some(s) = self.sock.as_mut() else {
                return;
            };
            match s.read(&mut cx.rbuf) {
                Ok(0) => {
                    let now = Instant::now();
                    if self.inflight.is_some() && self.wpos == self.wbuf.len() {
                        if self.parser.eof().is_ok() && self.parser.is_done() {
                            self.complete(idx, now, false, cx);
                            self.drop_sock(cx);
                        } else {
                            self.fail(idx, now, cx);
                        }
                    } else if self.inflight.is_some() {
                        self.fail(idx, now, cx);
                    } else {
                        // The server closed an idle keep-alive connection.
                        self.drop_sock(cx);
                    }
                    return;
                }
                Ok(n) => {
                    let now = Instant::now();
                    if self.inflight.is_none() {
                        // Bytes nobody asked for: the connection is broken.
                        self.drop_sock(cx);
                        return;
                    }
                    let rbuf = std::mem::take(&mut cx.rbuf);
                    let parsed = self.parser.feed(&rbuf[..n]);
                    cx.rbuf = rbuf;
                    match parsed {
                        Ok(used) if self.parser.is_done() => {
                            // Anything after the response is a protocol error.
                            let clean = used == n;
                            self.complete(idx, now, clean, cx);
                            if !clean {
                                self.drop_sock(cx);
                            }
                        }
                        Ok(_) => {}
                        Err(_) => {
                            self.fail(idx, now, cx);
                            return;
                        }
                    }
                    if n < cx.rbuf.len() {
                        // Short read: the socket is drained.
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    let now = Instant::now();
                    if self.inflight.is_some() {
                        self.fail(idx, now, cx);
                    } else {
                        self.drop_sock(cx);
                    }
                    return;
                }
            }
        }
    }

    /// The in-flight request got a complete response at `now`.
    fn complete(&mut self, idx: usize, now: Instant, keep: bool, cx: &mut Ctx) {
        let inf = self.inflight.take().expect("a request is in flight");
        let resp = self.parser.response();
        let status = resp.status;
        let cfg = cx.sh.cfg;
        let outcome = cfg.append_outcome(status);
        if cfg.producer {
            let seq = &mut self.seqs[inf.stream];
            match outcome {
                AppendOutcome::Ok | AppendOutcome::Duplicate => *seq += 1,
                AppendOutcome::Error => {
                    // Resynchronise on the server's word (gap or restart);
                    // otherwise retry this seq on the stream's next append.
                    if let Some(e) = resp.header("producer-expected-seq").and_then(|v| v.parse().ok()) {
                        *seq = e;
                    }
                }
            }
        }
        // A response before the whole request was written (an early error
        // answer) leaves the connection out of step: drop it.
        let keep = keep && self.parser.keep_alive() && self.wpos >= self.wbuf.len();
        match outcome {
            AppendOutcome::Ok | AppendOutcome::Duplicate => {
                cx.sh.progress.done.fetch_add(1, Ordering::Relaxed);
                if !inf.measured {
                    cx.res.warmup_requests += 1;
                } else if outcome == AppendOutcome::Duplicate {
                    cx.res.duplicates += 1;
                } else {
                    let us =
                        u64::try_from(now.saturating_duration_since(inf.start_ref).as_micros()).unwrap_or(u64::MAX);
                    cx.res.hist.saturating_record(us);
                    cx.res.series.record_ok(now.saturating_duration_since(cx.timing.warm_end), us);
                    cx.res.ok += 1;
                    cx.res.ok_bytes += inf.bytes as u64;
                }
            }
            AppendOutcome::Error => cx.count_error(inf.measured, status),
        }
        if !keep {
            self.drop_sock(cx);
        }
        self.next(idx, now, false, cx);
    }

    /// The in-flight request failed (I/O, protocol, timeout).
    fn fail(&mut self, idx: usize, now: Instant, cx: &mut Ctx) {
        self.drop_sock(cx);
        let Some(inf) = self.inflight.take() else {
            return;
        };
        cx.count_error(inf.measured, IO_ERROR);
        self.next(idx, now, true, cx);
    }

    /// Schedule the request after the one that just finished.
    fn next(&mut self, idx: usize, now: Instant, after_error: bool, cx: &mut Ctx) {
        self.n += 1;
        let cfg = cx.sh.cfg;
        let t = cx.timing;
        if cfg.open_loop() {
            let due = t.t0 + intended_offset(self.n, self.k, cfg.connections, cfg.rate);
            if due >= t.end {
                self.done = true;
            } else if now >= t.end {
                self.give_up(cx);
            } else {
                // Due now or later; the timer loop starts it (never
                // recursively from here).
                cx.set_timer(self, idx, due.max(now));
            }
        } else if now >= t.end {
            self.done = true;
        } else if after_error {
            cx.set_timer(self, idx, now + ERROR_BACKOFF);
        } else {
            cx.set_timer(self, idx, now);
        }
    }

    /// Open loop, out of time: count what was due in the window but unsent.
    fn give_up(&mut self, cx: &mut Ctx) {
        let cfg = cx.sh.cfg;
        let t = cx.timing;
        let mut m = self.n;
        loop {
            let due = t.t0 + intended_offset(m, self.k, cfg.connections, cfg.rate);
            if due >= t.end {
                break;
            }
            if due >= t.warm_end {
                cx.res.unsent += 1;
            }
            m += 1;
        }
        self.done = true;
    }

    /// This connection's timer fired at `now`.
    fn on_timer(&mut self, idx: usize, now: Instant, cx: &mut Ctx) {
        if self.done || self.inflight.is_some() {
            return;
        }
        let (open, end) = (cx.sh.cfg.open_loop(), cx.timing.end);
        if now >= end {
            if open {
                self.give_up(cx);
            } else {
                self.done = true;
            }
            return;
        }
        self.start(idx, now, cx);
    }
}

/// Run one worker over connections `ks` (global numbers). Sends `()` on
/// `ready` once its connections are established (or failed), then waits for
/// the schedule on `start`.
pub fn run_worker(
    sh: &Shared,
    ks: Vec<usize>,
    ready: mpsc::Sender<()>,
    start: mpsc::Receiver<Timing>,
) -> anyhow::Result<WorkerResult> {
    let mut poll = Poll::new()?;
    let registry = poll.registry().try_clone()?;
    let mut timer = Timer::new(&registry);
    let mut events = Events::with_capacity(1024);
    let mut conns: Vec<Conn> = ks.iter().map(|&k| Conn::new(sh, k)).collect();
    let placeholder = Instant::now();
    let mut cx = Ctx {
        sh,
        registry,
        timing: Timing {
            t0: placeholder,
            warm_end: placeholder,
            end: placeholder,
            wall_warm_end_us: 0,
            wall_end_us: 0,
        },
        res: WorkerResult::new(sh.cfg.duration),
        timers: BinaryHeap::new(),
        rbuf: vec![0; READ_BUF],
    };

    // Pre-connect, so connection setup is not in the first latency samples.
    // Failures are left to the run, which reconnects per request.
    for (i, c) in conns.iter_mut().enumerate() {
        if c.connect(i, &mut cx).is_err() {
            c.drop_sock(&mut cx);
        }
    }
    let connect_deadline = Instant::now() + sh.cfg.timeout;
    while conns.iter().any(|c| c.sock.is_some() && !c.connected) {
        let now = Instant::now();
        if now >= connect_deadline {
            break;
        }
        poll.poll(&mut events, Some(connect_deadline - now))?;
        for ev in events.iter() {
            if let Some(c) = conns.get_mut(ev.token().0) {
                c.on_event(ev.token().0, ev, &mut cx);
            }
        }
    }
    for c in conns.iter_mut() {
        if !c.connected {
            c.drop_sock(&mut cx);
        }
    }
    let _ = ready.send(());
    let Ok(timing) = start.recv() else {
        // The run was called off.
        return Ok(cx.res);
    };
    cx.timing = timing;

    // First request of each connection.
    let cfg = sh.cfg;
    for (i, c) in conns.iter_mut().enumerate() {
        let at =
            if cfg.open_loop() { timing.t0 + intended_offset(0, c.k, cfg.connections, cfg.rate) } else { timing.t0 };
        if at >= timing.end {
            c.done = true;
        } else {
            cx.set_timer(c, i, at);
        }
    }

    let mut next_timeout_check = Instant::now() + TIMEOUT_CHECK;
    loop {
        let now = Instant::now();
        // Due timers (entries whose connection moved on are stale).
        while let Some(&Reverse((at, i))) = cx.timers.peek() {
            if at > now {
                break;
            }
            cx.timers.pop();
            let c = &mut conns[i];
            if c.timer == Some(at) {
                c.timer = None;
                c.on_timer(i, now, &mut cx);
            }
        }
        if now >= next_timeout_check {
            next_timeout_check = now + TIMEOUT_CHECK;
            for (i, c) in conns.iter_mut().enumerate() {
                if c.inflight.as_ref().is_some_and(|f| f.deadline <= now) {
                    c.fail(i, now, &mut cx);
                }
            }
        }
        if conns.iter().all(|c| c.done && c.inflight.is_none()) {
            break;
        }

        let mut wait = next_timeout_check.saturating_duration_since(now);
        if let Some(&Reverse((at, _))) = cx.timers.peek() {
            if at <= now {
                wait = Duration::ZERO;
            } else if let Some(t) = timer.as_mut() {
                t.arm(at, now);
            } else {
                wait = wait.min(at - now);
            }
        }
        match poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
        for ev in events.iter() {
            let i = ev.token().0;
            if let Some(c) = conns.get_mut(i) {
                c.on_event(i, ev, &mut cx);
            }
            // TIMER: nothing to do, the loop head fires due timers.
        }
    }
    for c in conns.iter_mut() {
        c.drop_sock(&mut cx);
    }
    Ok(cx.res)
}
