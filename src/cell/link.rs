//! A replica's links to the other replicas of its group, on its shard's
//! executor: one TCP connection dialled to each peer carries this
//! replica's frames to it, and the connections the peers dial carry
//! theirs here. Each connection starts with the handshake of
//! [`super::auth`] (a peer that fails it is refused and logged), then
//! carries [`super::wire`] frames one way; a frame for another group, or a
//! message [`wire::admit`] refuses, closes the connection.
//!
//! Raft tolerates lost messages and resends what matters, so the links
//! drop rather than wait: a frame for a peer whose queue holds
//! [`CELL_LINK_QUEUE_FRAMES`] or [`CELL_LINK_QUEUE_BYTES`] (the link down,
//! or the peer slow) is dropped and counted, and so is an arriving frame
//! the replica has no room for. At most [`CELL_HANDSHAKES_MAX`] handshakes
//! run at once, each within [`HANDSHAKE_TIMEOUT`]; a peer keeps one
//! accepted connection (its newest). A broken link is dialled again with a
//! backoff from [`BACKOFF_MIN`] to [`BACKOFF_MAX`]; one whose data goes
//! unacknowledged for [`CELL_LINK_STALL_MS`] (a broken path) counts as
//! broken (TCP_USER_TIMEOUT), and so does one the peer closed, found while
//! the link is idle (a replica that never writes to a peer still redials
//! it once it restarts). Dropping [`Links`]
//! ends every task and closes every connection. A node dials from its own
//! peer address (when it names one: not `0.0.0.0`), so a link between two
//! nodes is always between their two addresses, as firewalls see it.
//!
//! Beside Raft's messages the links carry requests a replica that does not
//! lead forwards to its leader ([`Links::forward`]) and their answers,
//! opaque bytes here. At most [`CELL_FORWARDS_MAX`] wait for an answer at
//! once, each until its deadline; the leader's side runs each through the
//! [`ForwardHandler`] it was given (at most [`CELL_FORWARDS_MAX`] of each
//! peer's at once; past that it answers "refused" at once) and answers on
//! its own link back, trying a full queue again for about 100 ms.
//!
//! The same exchange carries segment shipping's fetches ([`Links::fetch`]):
//! a replica asks its leader for bytes of a sealed segment, and the
//! leader's [`FetchHandler`] answers at once from what its log holds.

use super::auth::{accept_handshake, dial_handshake};
use super::config::Secret;
use super::wire::{self, Frame};
use crate::limits::{CELL_FORWARDS_MAX, CELL_FRAME_BYTES_MAX, CELL_HANDSHAKES_MAX};
use crate::limits::{CELL_LINK_QUEUE_BYTES, CELL_LINK_QUEUE_FRAMES, CELL_LINK_STALL_MS};
use futures_channel::oneshot;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use glommio::{GlommioError, Task};
use raft::prelude::Message;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How long a dial or a handshake may take before the attempt is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait before dialling a broken link again; doubled up to
/// [`BACKOFF_MAX`], and reset only by a link that stayed up that long.
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The pause after a failed accept (out of descriptors, say).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// How often an answer finding its link's queue full is queued again, and
/// how long apart (it waits at most ~100 ms, far below a forward's deadline).
const ANSWER_TRIES: u32 = 10;
const ANSWER_RETRY: Duration = Duration::from_millis(10);
/// How long a dialled link stays idle before [`closed`] watches it for the
/// peer closing it (a watch armed only when idle costs a busy link nothing).
const IDLE_WATCH: Duration = Duration::from_millis(500);
/// What one read from a peer takes at most.
const READ_CHUNK: usize = 64 * 1024;

/// The Raft messages peers send this replica, as they arrive.
pub type Inbox = LocalReceiver<Message>;

/// Where this replica listens, whom it dials, its group, and the secret.
pub struct LinkConfig {
    pub me: u64,
    pub group: u32,
    pub listen: SocketAddr,
    pub peers: Vec<(u64, SocketAddr)>,
    pub secret: Rc<Secret>,
}

/// What the links did, for metrics.
#[derive(Debug, Default)]
pub struct LinkStats {
    /// Frames queued for a peer.
    pub queued: Cell<u64>,
    /// Frames arrived and handed to the replica.
    pub received: Cell<u64>,
    /// Frames dropped: a full queue either way, a write that failed, a
    /// peer not in the cell, a frame too large to send.
    pub dropped: Cell<u64>,
    /// Connections refused or closed: a failed handshake, too many at once,
    /// a frame that does not decode or is not admitted.
    pub refused: Cell<u64>,
    /// Requests forwarded to the leader, and those of them answered.
    pub forwarded: Cell<u64>,
    pub forward_answers: Cell<u64>,
    /// Forwarded requests this replica ran for a peer.
    pub forwards_served: Cell<u64>,
    /// Segment fetches this replica answered for a peer.
    pub fetches_served: Cell<u64>,
}

/// The leader's side of forwarding: runs a forwarded request (opaque bytes)
/// and gives the answer to send back.
pub trait ForwardHandler {
    fn handle(&self, request: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>>>>;
}

/// The leader's side of segment shipping: answers a fetch (opaque bytes,
/// `cell::ship` encodes both) from what its log holds, at once.
pub trait FetchHandler {
    fn fetch(&self, request: &[u8]) -> Vec<u8>;
}

/// Why a forwarded request got no answer. Whether it ran is unknown.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("{CELL_FORWARDS_MAX} requests already wait for the leader's answer")]
    Busy,
    #[error("the link to node {0} is full or not a peer")]
    NotSent(u64),
    #[error("node {0} is not connected to this one")]
    NotConnected(u64),
    #[error("the link from node {0} broke before its answer came")]
    Broke(u64),
    #[error("node {0} did not answer within {1:?}")]
    TimedOut(u64, Duration),
    #[error("the links closed")]
    Closed,
}

impl LinkStats {
    fn bump(counter: &Cell<u64>) {
        counter.set(counter.get() + 1);
    }
}

/// One peer's outgoing queue: frames and the bytes they hold.
struct Queue {
    tx: LocalSender<Queued>,
    bytes: Rc<Cell<usize>>,
}

/// A frame's bytes, waiting for its link; for a forwarded request its id,
/// so that one whose sender stopped waiting is never sent (it would run
/// after its client was answered 503).
struct Queued {
    bytes: Vec<u8>,
    forward: Option<u64>,
}

/// The queues of frames to each peer.
struct Outgoing {
    group: u32,
    out: RefCell<HashMap<u64, Queue>>,
}

impl Outgoing {
    /// Queues `frame` for `to`; false when it was dropped (no such peer,
    /// its queue full, or too large for a frame).
    fn queue(&self, to: u64, frame: &Frame) -> bool {
        let out = self.out.borrow();
        let Some(q) = out.get(&to) else { return false };
        let mut bytes = Vec::new();
        wire::encode(frame, &mut bytes);
        let len = bytes.len();
        // The length prefix is not counted in a frame's bound.
        if len > CELL_FRAME_BYTES_MAX + 4 || q.bytes.get() + len > CELL_LINK_QUEUE_BYTES {
            return false;
        }
        let forward = match frame {
            Frame::Forward { id, .. } | Frame::Fetch { id, .. } => Some(*id),
            _ => None,
        };
        let queued = q.tx.try_send(Queued { bytes, forward }).is_ok();
        if queued {
            q.bytes.set(q.bytes.get() + len);
        }
        queued
    }
}

/// A forwarded request's wait: the peer asked, and where its answer goes.
type Waiter = (u64, oneshot::Sender<Vec<u8>>);

/// Forwarded requests: those this replica waits on, by id, and what runs
/// those peers forward to it.
struct Exchange {
    /// By id: the peer asked, and where its answer goes.
    waiting: RefCell<HashMap<u64, Waiter>>,
    /// The peers whose connection to this replica is up (answers come on
    /// it), each with the number of its newest connection.
    connected: RefCell<HashMap<u64, u64>>,
    connections: Cell<u64>,
    /// Random at start, so that an answer meant for an earlier run of this
    /// process (still queued at the leader) matches nothing.
    next_id: Cell<u64>,
    handler: RefCell<Option<Rc<dyn ForwardHandler>>>,
    fetcher: RefCell<Option<Rc<dyn FetchHandler>>>,
    /// Each peer this replica dialled: whether its link from here is up
    /// (false: the last dial failed, or the link broke).
    dialled: RefCell<HashMap<u64, bool>>,
    /// Each peer's forwarded requests running here now (at most
    /// [`CELL_FORWARDS_MAX`] a peer, as many as it may wait on: one busy
    /// follower cannot take another's share).
    serving: RefCell<HashMap<u64, usize>>,
}

/// The outgoing side; the incoming frames come out of the receiver
/// [`Links::start`] returns. Dropping it closes every link.
pub struct Links {
    me: u64,
    listen: SocketAddr,
    secret: Rc<Secret>,
    outgoing: Rc<Outgoing>,
    exchange: Rc<Exchange>,
    stats: Rc<LinkStats>,
    /// Who may connect: the peers and this replica, shared with the
    /// acceptor.
    members: Rc<RefCell<Vec<u64>>>,
    /// Each peer's dialler (dropped: cancelled), and the address it dials.
    dialers: RefCell<HashMap<u64, Task<()>>>,
    addresses: RefCell<HashMap<u64, SocketAddr>>,
    _acceptor: Task<()>,
}

impl Links {
    /// Listens and starts dialling every peer, on this executor.
    pub fn start(cfg: LinkConfig) -> std::io::Result<(Links, LocalReceiver<Message>)> {
        let listener = TcpListener::bind(cfg.listen)?;
        let stats = Rc::new(LinkStats::default());
        let (arrived, messages) = local_channel::new_bounded(CELL_LINK_QUEUE_FRAMES);
        let members = Rc::new(RefCell::new(vec![cfg.me]));
        let exchange = Rc::new(Exchange {
            waiting: RefCell::default(),
            connected: RefCell::default(),
            connections: Cell::new(0),
            next_id: Cell::new(random_u64()),
            handler: RefCell::default(),
            fetcher: RefCell::default(),
            dialled: RefCell::default(),
            serving: RefCell::default(),
        });
        let outgoing = Rc::new(Outgoing { group: cfg.group, out: RefCell::default() });
        let acceptor = Acceptor {
            me: cfg.me,
            group: cfg.group,
            members: members.clone(),
            secret: cfg.secret.clone(),
            stats: stats.clone(),
            outgoing: outgoing.clone(),
            exchange: exchange.clone(),
        };
        let links = Links {
            me: cfg.me,
            listen: cfg.listen,
            secret: cfg.secret,
            outgoing,
            exchange,
            stats,
            members,
            dialers: RefCell::default(),
            addresses: RefCell::default(),
            _acceptor: glommio::spawn_local(acceptor.run(listener, arrived)),
        };
        for (peer, addr) in cfg.peers {
            links.add_peer(peer, addr);
        }
        Ok((links, messages))
    }

    /// Links `peer` at `addr` (one of the cell's at the start, or a member
    /// added since): dials it, and lets it connect. A link it had (at
    /// another address) goes first.
    pub fn add_peer(&self, peer: u64, addr: SocketAddr) {
        if peer == self.me {
            return;
        }
        self.remove_peer(peer);
        let (tx, rx) = local_channel::new_bounded(CELL_LINK_QUEUE_FRAMES);
        let bytes = Rc::new(Cell::new(0));
        let from = dial_from(self.listen, addr);
        let secret = self.secret.clone();
        let dialer =
            Dialer { me: self.me, peer, addr, from, secret, bytes: bytes.clone(), exchange: self.exchange.clone() };
        self.dialers.borrow_mut().insert(peer, glommio::spawn_local(dialer.run(rx, self.stats.clone())));
        self.outgoing.out.borrow_mut().insert(peer, Queue { tx, bytes });
        self.members.borrow_mut().push(peer);
        self.addresses.borrow_mut().insert(peer, addr);
    }

    /// Links exactly `peers` (a group's members after a change): those it
    /// lacks or dials at another address are linked, those not among them
    /// unlinked; a link that stays is left as it is.
    pub fn link_only(&self, peers: &[(u64, SocketAddr)]) {
        let linked: Vec<(u64, SocketAddr)> = self.addresses.borrow().iter().map(|(p, a)| (*p, *a)).collect();
        for (peer, _) in linked.iter().filter(|(p, _)| !peers.iter().any(|(q, _)| q == p)) {
            self.remove_peer(*peer);
        }
        for (peer, addr) in peers.iter().filter(|l| !linked.contains(l)) {
            self.add_peer(*peer, *addr);
        }
    }

    /// Unlinks `peer` (a member removed): what is queued for it or sent to
    /// it from now on is dropped, its dialler ends, and it may no longer
    /// connect (a connection it holds lasts until it closes).
    pub fn remove_peer(&self, peer: u64) {
        if peer == self.me {
            return;
        }
        self.outgoing.out.borrow_mut().remove(&peer);
        self.dialers.borrow_mut().remove(&peer);
        self.members.borrow_mut().retain(|&m| m != peer);
        self.exchange.dialled.borrow_mut().remove(&peer);
        self.addresses.borrow_mut().remove(&peer);
    }

    /// Queues `message` for its peer (`message.to`); false when it was
    /// dropped (no such peer, its queue full, or too large for a frame).
    pub fn send(&self, message: Message) -> bool {
        let to = message.to;
        let queued =
            message.from == self.me && self.outgoing.queue(to, &Frame::Raft { group: self.outgoing.group, message });
        LinkStats::bump(if queued { &self.stats.queued } else { &self.stats.dropped });
        queued
    }

    /// What runs the requests peers forward to this replica (none: they
    /// get no answer, and their senders time out).
    pub fn serve_forwards(&self, handler: Rc<dyn ForwardHandler>) {
        *self.exchange.handler.borrow_mut() = Some(handler);
    }

    /// What answers the segment fetches of peers (none: they get an empty
    /// answer, which `cell::ship` refuses).
    pub fn serve_fetches(&self, handler: Rc<dyn FetchHandler>) {
        *self.exchange.fetcher.borrow_mut() = Some(handler);
    }

    /// Whether this replica's link to `peer` is up: None until its first
    /// dial ended, false once a dial failed (the peer down, say) or the
    /// link broke.
    pub fn dialled(&self, peer: u64) -> Option<bool> {
        self.exchange.dialled.borrow().get(&peer).copied()
    }

    /// Whether `to`'s connection to this replica is up (a forward to it
    /// fails at once otherwise).
    pub fn is_connected(&self, to: u64) -> bool {
        self.exchange.connected.borrow().contains_key(&to)
    }

    /// Sends `request` to replica `to` (its group's leader) and waits at
    /// most `timeout` for its answer. Fails at once when `to`'s connection
    /// to this replica is down (a leader's heartbeats keep it up), and as
    /// soon as it breaks.
    pub async fn forward(&self, to: u64, request: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, ForwardError> {
        let group = self.outgoing.group;
        let answer = self.ask(to, timeout, |id| Frame::Forward { group, id, body: request }).await;
        if answer.is_ok() {
            LinkStats::bump(&self.stats.forward_answers);
        }
        answer
    }

    /// Sends a segment fetch (`cell::ship`) to replica `to` and waits at
    /// most `timeout` for its answer; fails as [`Links::forward`] does.
    pub async fn fetch(&self, to: u64, request: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, ForwardError> {
        let group = self.outgoing.group;
        self.ask(to, timeout, |id| Frame::Fetch { group, id, body: request }).await
    }

    /// Sends the frame `frame(id)` makes to `to` and waits for the answer
    /// of that id.
    async fn ask(&self, to: u64, timeout: Duration, frame: impl FnOnce(u64) -> Frame) -> Result<Vec<u8>, ForwardError> {
        let ex = &self.exchange;
        if ex.waiting.borrow().len() >= CELL_FORWARDS_MAX {
            return Err(ForwardError::Busy);
        }
        if !ex.connected.borrow().contains_key(&to) {
            return Err(ForwardError::NotConnected(to));
        }
        let id = ex.next_id.get();
        ex.next_id.set(id.wrapping_add(1));
        let (tx, rx) = oneshot::channel();
        ex.waiting.borrow_mut().insert(id, (to, tx));
        // However this future ends (answered, timed out, dropped), the
        // entry goes.
        let _forget = Forget(ex, id);
        let frame = frame(id);
        let forwarding = matches!(frame, Frame::Forward { .. });
        if !self.outgoing.queue(to, &frame) {
            LinkStats::bump(&self.stats.dropped);
            return Err(ForwardError::NotSent(to));
        }
        if forwarding {
            LinkStats::bump(&self.stats.forwarded);
        }
        match glommio::timer::timeout(timeout, async { Ok(rx.await) }).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) if ex.connected.borrow().contains_key(&to) => Err(ForwardError::Closed),
            Ok(Err(_)) => Err(ForwardError::Broke(to)),
            Err(_) => Err(ForwardError::TimedOut(to, timeout)),
        }
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }
}

impl Exchange {
    fn serving_for(&self, peer: u64) -> usize {
        self.serving.borrow().get(&peer).copied().unwrap_or(0)
    }

    /// One more (or one fewer) of `peer`'s requests running here.
    fn count_serving(&self, peer: u64, started: bool) {
        let mut serving = self.serving.borrow_mut();
        let n = serving.entry(peer).or_default();
        *n = if started { *n + 1 } else { n.saturating_sub(1) };
        if *n == 0 {
            serving.remove(&peer);
        }
    }

    /// `peer`'s newest connection is up: its number.
    fn connect(&self, peer: u64) -> u64 {
        let n = self.connections.get() + 1;
        self.connections.set(n);
        self.connected.borrow_mut().insert(peer, n);
        n
    }

    /// Connection `n` of `peer` ended. If it was the newest, the answers
    /// still awaited from `peer` will not come: their waits end.
    fn disconnect(&self, peer: u64, n: u64) {
        if self.connected.borrow().get(&peer) != Some(&n) {
            return;
        }
        self.connected.borrow_mut().remove(&peer);
        // Dropping a sender ends its wait.
        self.waiting.borrow_mut().retain(|_, (to, _)| *to != peer);
    }
}

/// Ends a peer's connection in the exchange when its reader ends (also
/// when the reader is dropped for a newer connection).
struct Connection {
    exchange: Rc<Exchange>,
    peer: u64,
    number: u64,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.exchange.disconnect(self.peer, self.number);
    }
}

/// Drops a forward's wait entry when its future ends.
struct Forget<'a>(&'a Exchange, u64);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.waiting.borrow_mut().remove(&self.1);
    }
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // Without the kernel's randomness the clock is unique enough per run.
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return t.as_nanos() as u64;
    }
    u64::from_le_bytes(b)
}

/// The listening side: handshakes, then one reader per peer.
struct Acceptor {
    me: u64,
    group: u32,
    /// Who may connect (`Links::add_peer`, `Links::remove_peer`).
    members: Rc<RefCell<Vec<u64>>>,
    secret: Rc<Secret>,
    stats: Rc<LinkStats>,
    /// Where the answers to peers' forwarded requests go.
    outgoing: Rc<Outgoing>,
    exchange: Rc<Exchange>,
}

impl Acceptor {
    /// Accepts peers for as long as the links live. The readers' tasks are
    /// held in a map this future owns (and each handshake in flight, at
    /// most HANDSHAKE_TIMEOUT), so they end with it.
    async fn run(self, listener: TcpListener, arrived: LocalSender<Message>) {
        let this = Rc::new(self);
        let arrived = Rc::new(arrived);
        let shaking = Rc::new(Cell::new(0usize));
        let readers: Rc<RefCell<HashMap<u64, Task<()>>>> = Rc::default();
        loop {
            let io = match listener.accept().await {
                Ok(io) => io,
                Err(e) => {
                    tracing::warn!("peer link: accept failed: {e}; pausing");
                    glommio::timer::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            };
            if shaking.get() >= CELL_HANDSHAKES_MAX {
                this.refuse(&io, "too many handshakes at once");
                continue;
            }
            let (this, arrived, shaking, readers) = (this.clone(), arrived.clone(), shaking.clone(), readers.clone());
            shaking.set(shaking.get() + 1);
            glommio::spawn_local(async move {
                let peer = this.handshake(io, &shaking).await;
                if let Some((peer, io)) = peer {
                    let number = this.exchange.connect(peer);
                    let connection = Connection { exchange: this.exchange.clone(), peer, number };
                    let reader = glommio::spawn_local({
                        let this = this.clone();
                        async move {
                            let _connection = connection;
                            this.receive(io, peer, &arrived).await
                        }
                    });
                    // The newest connection of a peer replaces its older one.
                    readers.borrow_mut().insert(peer, reader);
                }
            })
            .detach();
        }
    }

    async fn handshake(&self, mut io: TcpStream, shaking: &Cell<usize>) -> Option<(u64, TcpStream)> {
        let members = self.members.borrow().clone();
        let shake = accept_handshake(&mut io, self.me, &members, &self.secret);
        let result = glommio::timer::timeout(HANDSHAKE_TIMEOUT, async { Ok(shake.await) }).await;
        shaking.set(shaking.get() - 1);
        match result {
            Ok(Ok(peer)) => Some((peer, io)),
            Ok(Err(e)) => {
                self.refuse(&io, &e.to_string());
                None
            }
            Err(_) => {
                self.refuse(&io, "the handshake timed out");
                None
            }
        }
    }

    fn refuse(&self, io: &TcpStream, why: &str) {
        LinkStats::bump(&self.stats.refused);
        let from = io.peer_addr().map_or_else(|_| "?".to_string(), |a| a.to_string());
        tracing::warn!("peer link from {from} refused: {why}");
    }

    /// Reads frames from `peer` until it closes, sends what is not
    /// admitted, or the replica is gone.
    async fn receive(&self, mut io: TcpStream, peer: u64, arrived: &LocalSender<Message>) {
        let (mut buf, mut at) = (Vec::new(), 0);
        let mut chunk = vec![0; READ_CHUNK];
        loop {
            while let Some(next) = self.take_frame(&buf[at..], peer, &io) {
                let Ok((frame, used)) = next else { return };
                at += used;
                if !self.deliver(frame, peer, arrived) {
                    return;
                }
            }
            buf.drain(..at);
            at = 0;
            match io.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Hands an arrived frame on: a Raft message to the replica, a
    /// forwarded request to the handler, an answer to its waiter. False
    /// once the replica is gone.
    fn deliver(&self, frame: Frame, peer: u64, arrived: &LocalSender<Message>) -> bool {
        match frame {
            Frame::Raft { message, .. } => match arrived.try_send(message) {
                Ok(()) => LinkStats::bump(&self.stats.received),
                Err(GlommioError::Closed(_)) => return false,
                Err(_) => LinkStats::bump(&self.stats.dropped),
            },
            Frame::Forward { id, body, .. } => self.serve(peer, id, body),
            Frame::Fetch { id, body, .. } => self.serve_fetch(peer, id, &body),
            Frame::Answer { id, body, .. } => {
                // Only the peer asked answers (an id is no secret).
                let mut waiting = self.exchange.waiting.borrow_mut();
                if waiting.get(&id).is_some_and(|(to, _)| *to == peer) {
                    let (_, waiter) = waiting.remove(&id).expect("checked");
                    let _ = waiter.send(body);
                }
            }
        }
        true
    }

    /// Runs a peer's forwarded request and queues the answer back to it;
    /// dropped (counted) past the bound or without a handler.
    fn serve(&self, peer: u64, id: u64, request: Vec<u8>) {
        let ex = self.exchange.clone();
        let handler = ex.handler.borrow().clone();
        let Some(handler) = handler.filter(|_| ex.serving_for(peer) < CELL_FORWARDS_MAX) else {
            // An empty answer: the sender's decoder refuses it, so its
            // client is answered 503 at once instead of at its deadline.
            LinkStats::bump(&self.stats.dropped);
            self.outgoing.queue(peer, &Frame::Answer { group: self.outgoing.group, id, body: Vec::new() });
            return;
        };
        LinkStats::bump(&self.stats.forwards_served);
        ex.count_serving(peer, true);
        let outgoing = self.outgoing.clone();
        let stats = self.stats.clone();
        glommio::spawn_local(async move {
            let body = handler.handle(request).await;
            ex.count_serving(peer, false);
            answer(&outgoing, peer, Frame::Answer { group: outgoing.group, id, body }, &stats).await;
        })
        .detach();
    }

    /// Answers a peer's segment fetch at once (empty without a handler).
    fn serve_fetch(&self, peer: u64, id: u64, request: &[u8]) {
        let handler = self.exchange.fetcher.borrow().clone();
        let body = handler.map_or_else(Vec::new, |h| h.fetch(request));
        LinkStats::bump(&self.stats.fetches_served);
        let (outgoing, stats) = (self.outgoing.clone(), self.stats.clone());
        glommio::spawn_local(async move {
            answer(&outgoing, peer, Frame::Answer { group: outgoing.group, id, body }, &stats).await;
        })
        .detach();
    }

    /// The next admitted frame in `bytes`: None for more bytes, Some(Err)
    /// when the connection must close (refused and counted).
    fn take_frame(&self, bytes: &[u8], peer: u64, io: &TcpStream) -> Option<Result<(Frame, usize), ()>> {
        let why = match wire::decode(bytes) {
            Ok(None) => return None,
            Ok(Some((frame, _))) if frame.group() != self.group => {
                format!("a frame for group {}, not {}", frame.group(), self.group)
            }
            Ok(Some((Frame::Raft { group, message }, used))) => match wire::admit(peer, self.me, &message) {
                Ok(()) => return Some(Ok((Frame::Raft { group, message }, used))),
                Err(why) => why,
            },
            Ok(Some((frame, used))) => return Some(Ok((frame, used))),
            Err(e) => e.to_string(),
        };
        self.refuse(io, &format!("peer {peer} sent {why}"));
        Some(Err(()))
    }
}

/// Queues the answer to a peer's forwarded request. A queue full for a
/// moment (a burst of Raft traffic) is tried again a few times before the
/// answer is dropped, which would leave the peer's client waiting to its
/// deadline.
async fn answer(outgoing: &Outgoing, peer: u64, frame: Frame, stats: &LinkStats) {
    for _ in 0..ANSWER_TRIES {
        if outgoing.queue(peer, &frame) {
            return;
        }
        glommio::timer::sleep(ANSWER_RETRY).await;
    }
    LinkStats::bump(&stats.dropped);
}

/// Where a node listening at `listen` dials the peer at `peer` from: the
/// same address, any port; none when it listens on every address, or when
/// the two are of different families (an IPv4 source cannot reach an IPv6
/// peer: binding it would fail every dial).
fn dial_from(listen: SocketAddr, peer: SocketAddr) -> Option<SocketAddr> {
    let usable = !listen.ip().is_unspecified() && listen.is_ipv4() == peer.is_ipv4();
    usable.then(|| SocketAddr::new(listen.ip(), 0))
}

/// This replica's side of its link to one peer.
struct Dialer {
    me: u64,
    peer: u64,
    addr: SocketAddr,
    /// The address it dials from: this node's own peer address with any
    /// port, so that a peer (and a firewall between them) sees the
    /// connection come from the address this node is known by; none when
    /// it listens on every address.
    from: Option<SocketAddr>,
    secret: Rc<Secret>,
    /// The bytes its queue holds, shared with [`Links::send`].
    bytes: Rc<Cell<usize>>,
    /// Which forwarded requests are still waited on.
    exchange: Rc<Exchange>,
}

impl Dialer {
    /// Dials, sends the queued frames, dials again when the link breaks.
    async fn run(self, queued: LocalReceiver<Queued>, stats: Rc<LinkStats>) {
        let mut backoff = BACKOFF_MIN;
        let mut was_up = true; // log the first failure
        loop {
            let dialled = self.dial().await;
            self.exchange.dialled.borrow_mut().insert(self.peer, dialled.is_ok());
            match dialled {
                Ok(io) => {
                    tracing::info!("peer link to {} at {} up", self.peer, self.addr);
                    let up_at = Instant::now();
                    self.send_all(io, &queued, &stats).await;
                    self.exchange.dialled.borrow_mut().insert(self.peer, false);
                    tracing::warn!("peer link to {} at {} broke; dialling again", self.peer, self.addr);
                    was_up = true;
                    if up_at.elapsed() >= BACKOFF_MAX {
                        backoff = BACKOFF_MIN;
                    }
                }
                Err(why) if was_up => {
                    tracing::warn!("peer link to {} at {} down: {why}; dialling again", self.peer, self.addr);
                    was_up = false;
                }
                Err(_) => {}
            }
            glommio::timer::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Writes queued frames until a write fails (that frame dropped) or
    /// the peer closes the link.
    async fn send_all(&self, mut io: TcpStream, queued: &LocalReceiver<Queued>, stats: &LinkStats) {
        loop {
            let next = futures_lite::future::or(async { Some(queued.recv().await) }, async {
                closed(&io).await;
                None
            })
            .await;
            let Some(Some(Queued { bytes, forward })) = next else { return };
            self.bytes.set(self.bytes.get() - bytes.len());
            if forward.is_some_and(|id| !self.exchange.waiting.borrow().contains_key(&id)) {
                LinkStats::bump(&stats.dropped);
                continue;
            }
            if io.write_all(&bytes).await.is_err() {
                LinkStats::bump(&stats.dropped);
                return;
            }
        }
    }

    async fn dial(&self) -> Result<TcpStream, String> {
        let connecting = match self.from {
            Some(from) => TcpStream::connect_timeout_from(from, self.addr, HANDSHAKE_TIMEOUT).await,
            None => TcpStream::connect_timeout(self.addr, HANDSHAKE_TIMEOUT).await,
        };
        let mut io = connecting.map_err(|e| e.to_string())?;
        let _ = io.set_nodelay(true);
        stall_limit(&io, Duration::from_millis(CELL_LINK_STALL_MS)).map_err(|e| format!("TCP_USER_TIMEOUT: {e}"))?;
        let shake = dial_handshake(&mut io, self.me, self.peer, &self.secret);
        match glommio::timer::timeout(HANDSHAKE_TIMEOUT, async { Ok(shake.await) }).await {
            Ok(Ok(())) => Ok(io),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the handshake timed out".to_string()),
        }
    }
}

/// Ends when the peer has closed `io` (its process gone, say), looked for
/// once the link has been idle for [`IDLE_WATCH`]. The peer never sends on
/// a link this replica dialled, so anything to read means it is closed. A
/// replica that never writes to a peer (a follower to another follower)
/// would otherwise never find out that the peer restarted, keep the dead
/// link, and never carry the answers the new process asks for.
async fn closed(io: &TcpStream) {
    glommio::timer::sleep(IDLE_WATCH).await;
    let mut byte = [0u8; 1];
    let _ = io.peek(&mut byte).await;
}

/// Makes the kernel drop `io` once data written to it goes unacknowledged
/// for `limit` (TCP_USER_TIMEOUT): the next write fails and the link is
/// dialled afresh, instead of waiting out TCP's retransmission backoff.
fn stall_limit(io: &TcpStream, limit: Duration) -> std::io::Result<()> {
    let ms = libc::c_uint::try_from(limit.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: a valid descriptor, and a pointer to a c_uint of that size.
    let rc = unsafe {
        libc::setsockopt(
            io.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::{dial_from, Exchange};
    use std::cell::{Cell, RefCell};

    #[test]
    fn forwards_served_are_counted_per_peer() {
        let ex = Exchange {
            waiting: RefCell::default(),
            connected: RefCell::default(),
            connections: Cell::new(0),
            next_id: Cell::new(1),
            handler: RefCell::default(),
            fetcher: RefCell::default(),
            dialled: RefCell::default(),
            serving: RefCell::default(),
        };
        for _ in 0..3 {
            ex.count_serving(2, true);
        }
        ex.count_serving(3, true);
        assert_eq!((ex.serving_for(2), ex.serving_for(3), ex.serving_for(4)), (3, 1, 0));
        ex.count_serving(3, false);
        ex.count_serving(3, false);
        assert_eq!(ex.serving_for(3), 0, "never below zero");
        assert!(!ex.serving.borrow().contains_key(&3), "a peer with none running holds no entry");
    }

    #[test]
    fn a_node_dials_from_its_own_address_unless_it_listens_on_all() {
        let v4: std::net::SocketAddr = "127.0.0.3:7002".parse().unwrap();
        let v6: std::net::SocketAddr = "[::1]:7002".parse().unwrap();
        let from = |listen: &str, peer| dial_from(listen.parse().unwrap(), peer).map(|a| a.to_string());
        assert_eq!(from("127.0.0.2:7001", v4).as_deref(), Some("127.0.0.2:0"));
        assert_eq!(from("[::1]:7001", v6).as_deref(), Some("[::1]:0"));
        assert_eq!(from("0.0.0.0:7001", v4), None);
        assert_eq!(from("[::]:7001", v6), None);
        assert_eq!(from("127.0.0.2:7001", v6), None, "an IPv4 source for an IPv6 peer");
        assert_eq!(from("[::1]:7001", v4), None, "an IPv6 source for an IPv4 peer");
    }
}
