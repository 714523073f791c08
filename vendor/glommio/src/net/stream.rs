// Unless explicitly stated otherwise all files in this repository are licensed
// under the MIT/Apache-2.0 License, at your convenience
//
// This product includes software developed at Datadog (https://www.datadoghq.com/). Copyright 2020 Datadog, Inc.
//
use crate::{
    reactor::Reactor,
    sys::{self, DmaBuffer, Source, SourceType},
};
use futures_lite::ready;
use nix::sys::socket::MsgFlags;
use std::{
    cell::Cell,
    io,
    net::Shutdown,
    os::unix::io::{AsRawFd, FromRawFd, RawFd},
    rc::{Rc, Weak},
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

type Result<T> = crate::Result<T, ()>;

/// Root trait for socket stream receive buffer
pub trait RxBuf {
    fn read(&mut self, buf: &mut [u8]) -> usize;
    fn peek(&self, buf: &mut [u8]) -> usize;
    fn is_empty(&self) -> bool;
    fn as_bytes(&self) -> &[u8];
    fn consume(&mut self, amt: usize);
    fn buffer_size(&self) -> usize;
    fn handle_result(&mut self, result: usize);
    fn unfilled(&mut self) -> &mut [u8];
}

#[derive(Debug, Default)]
pub struct NonBuffered;

impl RxBuf for NonBuffered {
    fn read(&mut self, _buf: &mut [u8]) -> usize {
        0
    }

    fn peek(&self, _buf: &mut [u8]) -> usize {
        0
    }

    fn is_empty(&self) -> bool {
        true
    }

    fn as_bytes(&self) -> &[u8] {
        &[]
    }

    fn consume(&mut self, _amt: usize) {}

    fn buffer_size(&self) -> usize {
        0
    }

    fn handle_result(&mut self, _result: usize) {}

    fn unfilled(&mut self) -> &mut [u8] {
        &mut []
    }
}

/// Trait for receive buffer implementations
pub trait Buffered: RxBuf {}

/// Non-shared fixed sized receive buffer allocated
/// when buffered stream is created
#[derive(Debug)]
pub struct Preallocated {
    buf: Vec<u8>,
    head: usize,
    tail: usize,
    cap: usize,
}

impl Preallocated {
    const DEFAULT_BUFFER_SIZE: usize = 8192;

    /// Creates a fixed sized receive buffer
    pub fn new(size: usize) -> Self {
        Self {
            buf: vec![0; size],
            tail: 0,
            head: 0,
            cap: size,
        }
    }
}

impl Default for Preallocated {
    fn default() -> Self {
        Self::new(Self::DEFAULT_BUFFER_SIZE)
    }
}

impl Preallocated {
    fn len(&self) -> usize {
        self.tail - self.head
    }
}

impl Buffered for Preallocated {}

impl RxBuf for Preallocated {
    fn read(&mut self, buf: &mut [u8]) -> usize {
        let sz = std::cmp::min(self.len(), buf.len());
        if sz > 0 {
            buf[..sz].copy_from_slice(&self.buf[self.head..self.head + sz]);
            self.head += sz;
        }
        sz
    }

    fn peek(&self, buf: &mut [u8]) -> usize {
        let sz = std::cmp::min(self.len(), buf.len());
        if sz > 0 {
            buf[..sz].copy_from_slice(&self.buf[self.head..self.head + sz]);
        }
        sz
    }

    fn is_empty(&self) -> bool {
        self.head >= self.tail
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.head..self.tail]
    }

    fn consume(&mut self, amt: usize) {
        self.head += std::cmp::min(self.len(), amt);
    }

    fn buffer_size(&self) -> usize {
        self.cap
    }

    fn handle_result(&mut self, result: usize) {
        self.tail += result;
    }

    fn unfilled(&mut self) -> &mut [u8] {
        if self.len() == 0 {
            self.head = 0;
            self.tail = 0;
        }
        &mut self.buf[self.tail..]
    }
}

/// A stream's read or write timeout. The timer registered with the reactor
/// outlives the operation it was armed for: the next operation keeps it
/// while it fires no later than its own deadline (most operations end long
/// before their timeout, so this saves registering and removing a timer
/// each time). A timer that fires for an earlier operation is re-armed at
/// the current one's deadline.
#[derive(Debug)]
struct Timeout {
    id: u64,
    timeout: Cell<Option<Duration>>,
    /// When the operation now waiting times out.
    deadline: Cell<Option<Instant>>,
    /// When the timer registered with the reactor fires.
    armed: Cell<Option<Instant>>,
}

impl Timeout {
    fn new(id: u64) -> Self {
        Self {
            id,
            timeout: Cell::new(None),
            deadline: Cell::new(None),
            armed: Cell::new(None),
        }
    }

    fn get(&self) -> Option<Duration> {
        self.timeout.get()
    }

    fn set(&self, dur: Option<Duration>) -> Result<()> {
        if let Some(dur) = dur.as_ref() {
            if dur.as_nanos() == 0 {
                return Err(io::Error::from_raw_os_error(libc::EINVAL).into());
            }
        }
        self.timeout.set(dur);
        Ok(())
    }

    fn maybe_set_timer(&self, reactor: &Reactor, waker: &Waker) {
        let Some(timeout) = self.timeout.get() else {
            return;
        };
        let deadline = match self.deadline.get() {
            Some(d) => d,
            None => {
                let d = Instant::now() + timeout;
                self.deadline.set(Some(d));
                d
            }
        };
        if let Some(at) = self.armed.get() {
            if at <= deadline && reactor.rewake_timer(self.id, at, waker) {
                return;
            }
        }
        // Replaces the registered timer, if any.
        reactor.insert_timer(self.id, deadline, waker.clone());
        self.armed.set(Some(deadline));
    }

    /// The operation ended; its timer stays registered for the next one.
    fn cancel_timer(&self) {
        self.deadline.set(None);
    }

    /// Removes the registered timer (the stream goes away).
    fn remove(&self, reactor: &Reactor) {
        self.deadline.set(None);
        if self.armed.take().is_some() {
            reactor.try_remove_timer(self.id);
        }
    }

    fn check(&self, reactor: &Reactor) -> io::Result<()> {
        let (Some(deadline), Some(at)) = (self.deadline.get(), self.armed.get()) else {
            return Ok(());
        };
        if reactor.timer_exists(&(at, self.id)) {
            return Ok(());
        }
        reactor.remove_timer(self.id);
        self.armed.set(None);
        if at < deadline {
            // An earlier operation's timer: `maybe_set_timer` arms this one's.
            return Ok(());
        }
        self.deadline.set(None);
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "Operation timed out",
        ))
    }
}

/// Bytes a completed receive brought beyond what the read that took it
/// had room for; the next reads (and peeks) are served from them first.
#[derive(Debug)]
struct HeldRx {
    data: DmaBuffer,
    pos: usize,
    end: usize,
}

impl HeldRx {
    fn bytes(&self) -> &[u8] {
        &self.data.as_bytes()[self.pos..self.end]
    }
}

#[derive(Debug)]
pub(crate) struct NonBufferedStream<S> {
    reactor: Weak<Reactor>,
    stream: S,
    source_tx: Option<Source>,
    /// An io_uring receive in flight (or completed and not yet taken).
    source_rx: Option<Source>,
    held_rx: Option<HeldRx>,
    /// The receive buffer, between receives (one per stream, reused).
    spare_rx: Option<DmaBuffer>,
    /// Whether a direct `recv` likely answers at once (a fresh connection,
    /// the last receive filled its buffer, or it found the end of the
    /// stream or an error): then a read tries one first instead of
    /// submitting a receive.
    rx_maybe_ready: bool,
    /// How many bytes the receive in flight may take.
    rx_size: usize,
    write_timeout: Timeout,
    read_timeout: Timeout,
}

/// The most bytes one io_uring receive takes. A request or message that
/// fits is received whole; a receive that fills the buffer makes the next
/// read a direct `recv` into the caller's buffer, so large transfers do not
/// go through it. Each stream holds one such buffer.
const RECV_BYTES_MAX: usize = 4096;

/// Whether, after a receive of at most `asked` bytes ended with `result`, a
/// direct `recv` likely answers at once: it filled its buffer (more may be
/// waiting), or found the end of the stream or an error (which a direct
/// call reports again at once; `fill_buf` relies on that).
fn recv_may_be_ready(result: &io::Result<usize>, asked: usize) -> bool {
    !matches!(result, Ok(n) if *n > 0 && *n < asked)
}

/// Copies what fits of `src` into `buf`; how many bytes that was.
fn copy_prefix(src: &[u8], buf: &mut [u8]) -> usize {
    let n = src.len().min(buf.len());
    buf[..n].copy_from_slice(&src[..n]);
    n
}

impl<S> Drop for NonBufferedStream<S> {
    fn drop(&mut self) {
        // The timeouts' timers outlive operations, not the stream.
        if let Some(reactor) = self.reactor.upgrade() {
            self.read_timeout.remove(&reactor);
            self.write_timeout.remove(&reactor);
        }
    }
}

impl<S: AsRawFd> NonBufferedStream<S> {
    fn init(&mut self) {
        self.rx_maybe_ready = true;
    }

    /// The bytes of a receive that completed and was not taken yet, if any.
    fn peek_completed(&self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let source = self.source_rx.as_ref()?;
        let n = match source.result()? {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        match &*source.source_type_mut() {
            SourceType::SockRecv(Some(data)) => Some(Ok(copy_prefix(&data.as_bytes()[..n], buf))),
            _ => unreachable!("a stream's receive source is a SockRecv with its buffer"),
        }
    }

    pub(crate) fn try_peek(&self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        if let Some(held) = &self.held_rx {
            return Some(Ok(copy_prefix(held.bytes(), buf)));
        }
        if self.source_rx.is_some() {
            // The socket's next bytes are the receive's, once it completes.
            return self.peek_completed(buf);
        }
        super::yolo_peek(self.stream.as_raw_fd(), buf)
    }

    pub(crate) async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(source) = self.source_rx.as_ref() {
            source.collect_rw().await?;
            return self.peek_completed(buf).expect("the receive completed");
        }
        let source = self.reactor.upgrade().unwrap().recv(
            self.stream.as_raw_fd(),
            buf.len(),
            MsgFlags::MSG_PEEK,
        );

        let sz = source.collect_rw().await?;
        match source.extract_source_type() {
            SourceType::SockRecv(mut src) => {
                buf[0..sz].copy_from_slice(&src.take().unwrap().as_bytes()[0..sz]);
            }
            _ => unreachable!(),
        }
        Ok(sz)
    }

    /// Takes a completed receive's bytes: what fits into `buf`, the rest
    /// held for the next reads.
    fn take_completed(&mut self, source: Source, n: usize, buf: &mut [u8]) -> usize {
        let SourceType::SockRecv(Some(data)) = source.extract_source_type() else {
            unreachable!("a stream's receive source is a SockRecv with its buffer")
        };
        let copied = copy_prefix(&data.as_bytes()[..n], buf);
        if copied < n {
            self.held_rx = Some(HeldRx { data, pos: copied, end: n });
        } else {
            self.spare_rx = Some(data);
        }
        copied
    }

    fn read_held(&mut self, buf: &mut [u8]) -> Option<usize> {
        let held = self.held_rx.as_mut()?;
        let n = copy_prefix(held.bytes(), buf);
        held.pos += n;
        if held.pos == held.end {
            self.spare_rx = self.held_rx.take().map(|h| h.data);
        }
        Some(n)
    }

    /// Reads from the socket. Bytes are received by an io_uring receive
    /// (`IORING_OP_RECV`) submitted when the socket has none yet: the kernel
    /// copies them in as they arrive, so a read that waits costs one
    /// submission and one completion, where polling for readiness and then
    /// calling `recv` cost a submission, a completion and a system call. A
    /// direct `recv` comes first only when bytes are likely waiting already.
    /// A receive stays armed across a timed-out or abandoned read, so no
    /// byte it takes is lost: the next read returns them.
    pub(crate) fn poll_read(
        &mut self,
        cx: &Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if let Some(n) = self.read_held(buf) {
            return Poll::Ready(Ok(n));
        }
        let reactor = self.reactor.upgrade().unwrap();
        let reactor = reactor.as_ref();
        if let Some(result) = self.source_rx.as_ref().and_then(Source::result) {
            let source = self.source_rx.take().unwrap();
            self.read_timeout.cancel_timer();
            self.rx_maybe_ready = recv_may_be_ready(&result, self.rx_size);
            let n = poll_err!(result);
            return Poll::Ready(Ok(self.take_completed(source, n, buf)));
        }
        if self.source_rx.is_none() && self.rx_maybe_ready {
            if let Some(result) = super::yolo_recv(self.stream.as_raw_fd(), buf) {
                self.read_timeout.cancel_timer();
                self.rx_maybe_ready = recv_may_be_ready(&result, buf.len());
                return Poll::Ready(result);
            }
            self.rx_maybe_ready = false;
        }

        poll_err!(self.read_timeout.check(reactor));

        if self.source_rx.is_none() {
            let data = match self.spare_rx.take() {
                Some(data) => data,
                None => DmaBuffer::new(RECV_BYTES_MAX).expect("failed to allocate buffer"),
            };
            self.rx_size = buf.len().min(data.len());
            let fd = self.stream.as_raw_fd();
            self.source_rx = Some(reactor.recv_into(fd, data, self.rx_size, MsgFlags::empty()));
        }
        let source = self.source_rx.as_ref().unwrap();
        source.add_waiter_single(cx.waker());
        self.read_timeout.maybe_set_timer(reactor, cx.waker());
        Poll::Pending
    }

    pub(crate) fn poll_write(&mut self, cx: &Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        // On the write path, we always start with calling `yolo_send`, because
        // it is very likely to success. It could be a waste if it already timed
        // out since the last `poll_write`, but it would not cost much more to
        // give it one last chance in this case.
        if let Some(result) = super::yolo_send(self.stream.as_raw_fd(), buf) {
            self.write_timeout.cancel_timer();
            self.source_tx.take();
            return Poll::Ready(result);
        }

        let reactor = self.reactor.upgrade().unwrap();
        let reactor = reactor.as_ref();
        poll_err!(self.write_timeout.check(reactor));

        let no_pending_poll = self
            .source_tx
            .as_ref()
            .map(|src| src.result().is_some())
            .unwrap_or(true);

        if no_pending_poll {
            self.source_tx = Some(reactor.poll_write_ready(self.stream.as_raw_fd()));
        }

        let source = self.source_tx.as_ref().unwrap();
        source.add_waiter_single(cx.waker());
        self.write_timeout.maybe_set_timer(reactor, cx.waker());
        Poll::Pending
    }

    pub(crate) fn poll_close(&mut self, _: &Context<'_>) -> Poll<io::Result<()>> {
        self.source_tx.take();
        Poll::Ready(sys::shutdown(self.stream.as_raw_fd(), Shutdown::Write))
    }

    /// io_uring has support for shutdown now, but it is not in any released
    /// kernel. Even with my "let's use latest" policy it would be crazy to
    /// mandate a kernel that doesn't even exist. So in preparation for that
    /// we'll sync-emulate this but already on an async wrapper
    pub(crate) fn poll_shutdown(
        &self,
        _cx: &mut Context<'_>,
        how: Shutdown,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(sys::shutdown(self.stream.as_raw_fd(), how))
    }
}

#[derive(Debug)]
pub(crate) struct GlommioStream<S, B> {
    stream: NonBufferedStream<S>,
    rx_buf: B,
    rx_done: Cell<bool>,
}

impl<S> From<socket2::Socket> for GlommioStream<S, NonBuffered>
where
    S: AsRawFd + From<socket2::Socket> + Unpin,
{
    fn from(socket: socket2::Socket) -> Self {
        let reactor = crate::executor().reactor();
        let mut stream = NonBufferedStream {
            reactor: Rc::downgrade(&reactor),
            stream: socket.into(),
            source_tx: None,
            source_rx: None,
            held_rx: None,
            spare_rx: None,
            rx_maybe_ready: false,
            rx_size: 0,
            write_timeout: Timeout::new(reactor.register_timer()),
            read_timeout: Timeout::new(reactor.register_timer()),
        };
        stream.init();
        GlommioStream {
            stream,
            rx_buf: NonBuffered,
            rx_done: Cell::new(false),
        }
    }
}

impl<S: AsRawFd> AsRawFd for GlommioStream<S, NonBuffered> {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.stream.as_raw_fd()
    }
}

impl<S> FromRawFd for GlommioStream<S, NonBuffered>
where
    S: AsRawFd + FromRawFd + From<socket2::Socket> + Unpin,
{
    unsafe fn from_raw_fd(fd: RawFd) -> Self {
        let socket = socket2::Socket::from_raw_fd(fd);
        GlommioStream::from(socket)
    }
}

impl<S> GlommioStream<S, NonBuffered> {
    pub(crate) fn buffered_with<B: Buffered>(self, rx_buf: B) -> GlommioStream<S, B> {
        GlommioStream {
            stream: self.stream,
            rx_buf,
            rx_done: self.rx_done,
        }
    }
}

impl<S: AsRawFd, B: RxBuf> GlommioStream<S, B> {
    /// Receives data on the socket from the remote address to which it is
    /// connected, without removing that data from the queue.
    ///
    /// On success, returns the number of bytes peeked.
    /// Successive calls return the same data. This is accomplished by passing
    /// `MSG_PEEK` as a flag to the underlying `recv` system call.
    pub(crate) async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut pos = self.rx_buf.peek(buf);
        if pos < buf.len() && !self.rx_done.get() {
            if let Some(result) = self.stream.try_peek(&mut buf[pos..]) {
                match result {
                    Err(e) => return Err(e),
                    Ok(len) => {
                        pos += len;
                        if len == 0 {
                            self.rx_done.set(true);
                        }
                    }
                }
            }
        }
        if pos > 0 || self.rx_done.get() {
            return Ok(pos);
        }
        self.stream.peek(buf).await
    }

    pub(crate) fn poll_read(
        &mut self,
        cx: &Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if self.rx_buf.is_empty() {
            if buf.len() >= self.rx_buf.buffer_size() {
                return self.stream.poll_read(cx, buf);
            }
            if !self.rx_done.get() {
                poll_err!(ready!(self.poll_replenish_buffer(cx)));
            }
        }
        Poll::Ready(Ok(self.rx_buf.read(buf)))
    }

    fn poll_replenish_buffer(&mut self, cx: &Context<'_>) -> Poll<io::Result<usize>> {
        let result = poll_err!(ready!(self.stream.poll_read(cx, self.rx_buf.unfilled())));
        self.rx_buf.handle_result(result);
        if result == 0 {
            self.rx_done.set(true);
        }
        Poll::Ready(Ok(result))
    }

    pub(crate) fn poll_write(&mut self, cx: &Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.stream.poll_write(cx, buf)
    }

    pub(crate) fn poll_flush(&self, _cx: &Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    pub(crate) fn poll_close(&mut self, cx: &Context<'_>) -> Poll<io::Result<()>> {
        self.stream.poll_close(cx)
    }

    pub(crate) fn poll_shutdown(
        &self,
        cx: &mut Context<'_>,
        how: Shutdown,
    ) -> Poll<io::Result<()>> {
        self.stream.poll_shutdown(cx, how)
    }

    pub(crate) fn set_write_timeout(&self, dur: Option<Duration>) -> Result<()> {
        self.stream.write_timeout.set(dur)
    }

    pub(crate) fn set_read_timeout(&self, dur: Option<Duration>) -> Result<()> {
        self.stream.read_timeout.set(dur)
    }

    pub(crate) fn write_timeout(&self) -> Option<Duration> {
        self.stream.write_timeout.get()
    }

    pub(crate) fn read_timeout(&self) -> Option<Duration> {
        self.stream.read_timeout.get()
    }

    pub(crate) fn stream(&self) -> &S {
        &self.stream.stream
    }
}

impl<S: AsRawFd, B: Buffered> GlommioStream<S, B> {
    pub(crate) fn poll_fill_buf(&mut self, cx: &Context<'_>) -> Poll<io::Result<&[u8]>> {
        if self.rx_buf.is_empty() {
            poll_err!(ready!(self.poll_replenish_buffer(cx)));
        }
        Poll::Ready(Ok(self.rx_buf.as_bytes()))
    }

    pub(crate) fn consume(&mut self, amt: usize) {
        self.rx_buf.consume(amt);
    }
}
