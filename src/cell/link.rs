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
//! backoff from [`BACKOFF_MIN`] to [`BACKOFF_MAX`]. Dropping [`Links`]
//! ends every task and closes every connection.

use super::auth::{accept_handshake, dial_handshake};
use super::config::Secret;
use super::wire::{self, Frame};
use crate::limits::{CELL_FRAME_BYTES_MAX, CELL_HANDSHAKES_MAX, CELL_LINK_QUEUE_BYTES, CELL_LINK_QUEUE_FRAMES};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use glommio::{GlommioError, Task};
use raft::prelude::Message;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
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
/// What one read from a peer takes at most.
const READ_CHUNK: usize = 64 * 1024;

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
}

impl LinkStats {
    fn bump(counter: &Cell<u64>) {
        counter.set(counter.get() + 1);
    }
}

/// One peer's outgoing queue: frames and the bytes they hold.
struct Queue {
    tx: LocalSender<Vec<u8>>,
    bytes: Rc<Cell<usize>>,
}

/// The outgoing side; the incoming frames come out of the receiver
/// [`Links::start`] returns. Dropping it closes every link.
pub struct Links {
    me: u64,
    group: u32,
    out: HashMap<u64, Queue>,
    stats: Rc<LinkStats>,
    _tasks: Vec<Task<()>>,
}

impl Links {
    /// Listens and starts dialling every peer, on this executor.
    pub fn start(cfg: LinkConfig) -> std::io::Result<(Links, LocalReceiver<Message>)> {
        let listener = TcpListener::bind(cfg.listen)?;
        let stats = Rc::new(LinkStats::default());
        let (arrived, messages) = local_channel::new_bounded(CELL_LINK_QUEUE_FRAMES);
        let mut voters: Vec<u64> = cfg.peers.iter().map(|(id, _)| *id).collect();
        voters.push(cfg.me);
        let acceptor =
            Acceptor { me: cfg.me, group: cfg.group, voters, secret: cfg.secret.clone(), stats: stats.clone() };
        let mut tasks = vec![glommio::spawn_local(acceptor.run(listener, arrived))];
        let mut out = HashMap::new();
        for (peer, addr) in cfg.peers {
            let (tx, rx) = local_channel::new_bounded(CELL_LINK_QUEUE_FRAMES);
            let bytes = Rc::new(Cell::new(0));
            let dialer = Dialer { me: cfg.me, peer, addr, secret: cfg.secret.clone(), bytes: bytes.clone() };
            tasks.push(glommio::spawn_local(dialer.run(rx, stats.clone())));
            out.insert(peer, Queue { tx, bytes });
        }
        Ok((Links { me: cfg.me, group: cfg.group, out, stats, _tasks: tasks }, messages))
    }

    /// Queues `message` for its peer (`message.to`); false when it was
    /// dropped (no such peer, its queue full, or too large for a frame).
    pub fn send(&self, message: Message) -> bool {
        let queued = self.queue(message);
        LinkStats::bump(if queued { &self.stats.queued } else { &self.stats.dropped });
        queued
    }

    fn queue(&self, message: Message) -> bool {
        let Some(q) = self.out.get(&message.to).filter(|_| message.from == self.me) else { return false };
        let mut bytes = Vec::new();
        wire::encode(&Frame::Raft { group: self.group, message }, &mut bytes);
        let len = bytes.len();
        // The length prefix is not counted in a frame's bound.
        if len > CELL_FRAME_BYTES_MAX + 4 || q.bytes.get() + len > CELL_LINK_QUEUE_BYTES {
            return false;
        }
        let queued = q.tx.try_send(bytes).is_ok();
        if queued {
            q.bytes.set(q.bytes.get() + len);
        }
        queued
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }
}

/// The listening side: handshakes, then one reader per peer.
struct Acceptor {
    me: u64,
    group: u32,
    voters: Vec<u64>,
    secret: Rc<Secret>,
    stats: Rc<LinkStats>,
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
                    let reader = glommio::spawn_local({
                        let this = this.clone();
                        async move { this.receive(io, peer, &arrived).await }
                    });
                    // The newest connection of a peer replaces its older one.
                    readers.borrow_mut().insert(peer, reader);
                }
            })
            .detach();
        }
    }

    async fn handshake(&self, mut io: TcpStream, shaking: &Cell<usize>) -> Option<(u64, TcpStream)> {
        let shake = accept_handshake(&mut io, self.me, &self.voters, &self.secret);
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
                let Ok((message, used)) = next else { return };
                at += used;
                match arrived.try_send(message) {
                    Ok(()) => LinkStats::bump(&self.stats.received),
                    Err(GlommioError::Closed(_)) => return,
                    Err(_) => LinkStats::bump(&self.stats.dropped),
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

    /// The next admitted message in `bytes`: None for more bytes, Some(Err)
    /// when the connection must close (refused and counted).
    fn take_frame(&self, bytes: &[u8], peer: u64, io: &TcpStream) -> Option<Result<(Message, usize), ()>> {
        let why = match wire::decode(bytes) {
            Ok(None) => return None,
            Ok(Some((Frame::Raft { group, message }, used))) if group == self.group => {
                match wire::admit(peer, self.me, &message) {
                    Ok(()) => return Some(Ok((message, used))),
                    Err(why) => why,
                }
            }
            Ok(Some((Frame::Raft { group, .. }, _))) => format!("a frame for group {group}, not {}", self.group),
            Err(e) => e.to_string(),
        };
        self.refuse(io, &format!("peer {peer} sent {why}"));
        Some(Err(()))
    }
}

/// This replica's side of its link to one peer.
struct Dialer {
    me: u64,
    peer: u64,
    addr: SocketAddr,
    secret: Rc<Secret>,
    /// The bytes its queue holds, shared with [`Links::send`].
    bytes: Rc<Cell<usize>>,
}

impl Dialer {
    /// Dials, sends the queued frames, dials again when the link breaks.
    async fn run(self, queued: LocalReceiver<Vec<u8>>, stats: Rc<LinkStats>) {
        let mut backoff = BACKOFF_MIN;
        let mut was_up = true; // log the first failure
        loop {
            match self.dial().await {
                Ok(io) => {
                    tracing::info!("peer link to {} at {} up", self.peer, self.addr);
                    let up_at = Instant::now();
                    self.send_all(io, &queued, &stats).await;
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

    /// Writes queued frames until a write fails (that frame dropped).
    async fn send_all(&self, mut io: TcpStream, queued: &LocalReceiver<Vec<u8>>, stats: &LinkStats) {
        while let Some(bytes) = queued.recv().await {
            self.bytes.set(self.bytes.get() - bytes.len());
            if io.write_all(&bytes).await.is_err() {
                LinkStats::bump(&stats.dropped);
                return;
            }
        }
    }

    async fn dial(&self) -> Result<TcpStream, String> {
        let mut io = TcpStream::connect_timeout(self.addr, HANDSHAKE_TIMEOUT).await.map_err(|e| e.to_string())?;
        let _ = io.set_nodelay(true);
        let shake = dial_handshake(&mut io, self.me, self.peer, &self.secret);
        match glommio::timer::timeout(HANDSHAKE_TIMEOUT, async { Ok(shake.await) }).await {
            Ok(Ok(())) => Ok(io),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the handshake timed out".to_string()),
        }
    }
}
