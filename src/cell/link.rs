//! A replica's links to the other replicas of its group, on its shard's
//! executor: one TCP connection dialled to each peer carries this
//! replica's frames to it, and the connections the peers dial carry
//! theirs here. Each connection starts with the handshake of
//! [`super::auth`] (a peer that fails it is refused and logged), then
//! carries [`super::wire`] frames one way.
//!
//! Raft tolerates lost messages and resends what matters, so nothing here
//! waits or grows without bound: a frame for a peer whose queue is full
//! (the link down, or the peer too slow) is dropped and counted, and so is
//! an arriving frame the replica has no room for. A broken link is dialled
//! again with a backoff from [`BACKOFF_MIN`] to [`BACKOFF_MAX`]; while it
//! is down the peer's queue keeps at most [`CELL_LINK_QUEUE_FRAMES`].

use super::auth::{accept_handshake, dial_handshake};
use super::config::Secret;
use super::wire::{self, Frame};
use crate::limits::CELL_LINK_QUEUE_FRAMES;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use glommio::{GlommioError, Task};
use raft::prelude::Message;
use std::cell::Cell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

/// How long a dial or a handshake may take before the attempt is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait before dialling a broken link again; doubled up to
/// [`BACKOFF_MAX`], reset by a handshake that succeeds.
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// What one read from a peer takes at most.
const READ_CHUNK: usize = 64 * 1024;

/// Where this replica listens, whom it dials, and the cell's secret.
pub struct LinkConfig {
    pub me: u64,
    pub listen: SocketAddr,
    pub peers: Vec<(u64, SocketAddr)>,
    pub secret: Rc<Secret>,
}

/// What the links did, for metrics.
#[derive(Debug, Default)]
pub struct LinkStats {
    pub sent: Cell<u64>,
    pub received: Cell<u64>,
    /// Frames dropped: a full queue either way.
    pub dropped: Cell<u64>,
    /// Connections refused: a failed handshake or a frame that would not decode.
    pub refused: Cell<u64>,
}

/// The outgoing side; the incoming frames come out of the receiver
/// [`Links::start`] returns. Dropping it closes every link.
pub struct Links {
    out: HashMap<u64, LocalSender<Vec<u8>>>,
    stats: Rc<LinkStats>,
    _accepting: Task<()>,
}

impl Links {
    /// Listens and starts dialling every peer, on this executor.
    pub fn start(cfg: LinkConfig) -> std::io::Result<(Links, LocalReceiver<Frame>)> {
        let listener = TcpListener::bind(cfg.listen)?;
        let stats = Rc::new(LinkStats::default());
        let (arrived, frames) = local_channel::new_bounded(CELL_LINK_QUEUE_FRAMES);
        let mut voters: Vec<u64> = cfg.peers.iter().map(|(id, _)| *id).collect();
        voters.push(cfg.me);
        let accepting =
            glommio::spawn_local(accept_loop(listener, cfg.me, voters, cfg.secret.clone(), arrived, stats.clone()));
        let mut out = HashMap::new();
        for (peer, addr) in cfg.peers {
            let (tx, rx) = local_channel::new_bounded(CELL_LINK_QUEUE_FRAMES);
            let dialer = Dialer { me: cfg.me, peer, addr, secret: cfg.secret.clone() };
            glommio::spawn_local(dialer.run(rx)).detach();
            out.insert(peer, tx);
        }
        Ok((Links { out, stats, _accepting: accepting }, frames))
    }

    /// Queues `message` for its peer (`message.to`) as a frame of `group`;
    /// false when it was dropped (no such peer, or its queue is full).
    pub fn send(&self, group: u32, message: Message) -> bool {
        let Some(tx) = self.out.get(&message.to) else { return false };
        let mut bytes = Vec::new();
        wire::encode(&Frame::Raft { group, message }, &mut bytes);
        let queued = tx.try_send(bytes).is_ok();
        let counter = if queued { &self.stats.sent } else { &self.stats.dropped };
        counter.set(counter.get() + 1);
        queued
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }
}

/// Accepts peers for as long as the links live.
async fn accept_loop(
    listener: TcpListener,
    me: u64,
    voters: Vec<u64>,
    secret: Rc<Secret>,
    arrived: LocalSender<Frame>,
    stats: Rc<LinkStats>,
) {
    let arrived = Rc::new(arrived);
    loop {
        let Ok(mut io) = listener.accept().await else { continue };
        let (voters, secret, arrived, stats) = (voters.clone(), secret.clone(), arrived.clone(), stats.clone());
        glommio::spawn_local(async move {
            let shake = accept_handshake(&mut io, me, &voters, &secret);
            let peer = match glommio::timer::timeout(HANDSHAKE_TIMEOUT, async { Ok(shake.await) }).await {
                Ok(Ok(peer)) => peer,
                Ok(Err(e)) => return refuse(&stats, &io, &e.to_string()),
                Err(_) => return refuse(&stats, &io, "the handshake timed out"),
            };
            receive(io, peer, &arrived, &stats).await;
        })
        .detach();
    }
}

fn refuse(stats: &LinkStats, io: &TcpStream, why: &str) {
    stats.refused.set(stats.refused.get() + 1);
    let from = io.peer_addr().map_or_else(|_| "?".to_string(), |a| a.to_string());
    tracing::warn!("peer link from {from} refused: {why}");
}

/// Reads frames from `peer` until it closes, sends garbage, or the
/// replica is gone.
async fn receive(mut io: TcpStream, peer: u64, arrived: &LocalSender<Frame>, stats: &LinkStats) {
    let mut buf = Vec::new();
    let mut chunk = vec![0; READ_CHUNK];
    loop {
        loop {
            match wire::decode(&buf) {
                Ok(Some((frame, used))) => {
                    buf.drain(..used);
                    match arrived.try_send(frame) {
                        Ok(()) => stats.received.set(stats.received.get() + 1),
                        Err(GlommioError::Closed(_)) => return,
                        Err(_) => stats.dropped.set(stats.dropped.get() + 1),
                    }
                }
                Ok(None) => break,
                Err(e) => return refuse(stats, &io, &format!("peer {peer} sent a bad frame: {e}")),
            }
        }
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// This replica's side of its link to one peer.
struct Dialer {
    me: u64,
    peer: u64,
    addr: SocketAddr,
    secret: Rc<Secret>,
}

impl Dialer {
    /// Dials, sends the queued frames, dials again when the link breaks;
    /// ends when the links are dropped.
    async fn run(self, queued: LocalReceiver<Vec<u8>>) {
        let mut backoff = BACKOFF_MIN;
        let mut was_up = true; // log the first failure
        loop {
            match self.dial().await {
                Ok(mut io) => {
                    tracing::info!("peer link to {} at {} up", self.peer, self.addr);
                    (backoff, was_up) = (BACKOFF_MIN, true);
                    loop {
                        let Some(bytes) = queued.recv().await else { return };
                        if io.write_all(&bytes).await.is_err() {
                            break;
                        }
                    }
                    tracing::warn!("peer link to {} at {} broke; dialling again", self.peer, self.addr);
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
