//! Cross-core hand-off: typed requests to the owning shard and replies back.
//!
//! Each shard has one inbox (a lock-free `crossbeam_channel`) and one
//! doorbell (a Unix socket pair). A sender pushes its message into the
//! target's inbox and rings the doorbell only if the target said it is about
//! to sleep (`armed`), so a busy shard drains many messages per wake-up. The
//! receiving shard waits for its doorbell with an io_uring read like any
//! socket, so an idle shard costs nothing and is woken at once.
//!
//! The arm / push / re-check protocol below is the classic one and its
//! ordering is explicit (SeqCst fences on both sides); a doorbell is written
//! only to a shard that is about to sleep.

use super::message::{Control, MovedConnection, Reply, ShardRequest};
use crate::protocol::Error;
use crossbeam_channel::{Receiver, Sender};
use futures_channel::oneshot;
use futures_lite::AsyncReadExt;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Something that can run a request on another shard and return its reply.
pub trait Peers {
    fn call(&self, target: usize, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>>;
    /// Hands a control request to `target`; false if that shard is gone
    /// (the request, and with it its answer channel, is then dropped).
    fn control(&self, target: usize, c: Control) -> bool;
}

/// What a shard does with what the mesh brings it.
pub trait Served {
    fn request(&self, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply>>>;
    fn control(&self, c: Control) -> Pin<Box<dyn Future<Output = ()>>>;
    /// Takes over a client connection another shard moved here.
    fn adopt(&self, c: MovedConnection);
    /// The shard's metrics, one block of sample lines per family.
    fn stats(&self) -> Vec<String>;
}

/// What travels between shards.
pub enum Msg {
    Request {
        id: u64,
        from: usize,
        req: ShardRequest,
    },
    Reply {
        id: u64,
        reply: Reply,
    },
    /// Answered on the channel inside.
    Control(Control),
    Stats(oneshot::Sender<Vec<String>>),
    /// A client connection, to be served here from now on.
    Connection(MovedConnection),
}

/// The sending side of one shard's inbox, shared by every other shard.
struct Door {
    inbox: Sender<Msg>,
    /// Set by the owner just before it waits for the bell.
    armed: AtomicBool,
    bell: StdUnixStream,
    rings: AtomicU64,
}

impl Door {
    /// Queues a message for the owner; false if its inbox is gone.
    fn deliver(&self, msg: Msg) -> bool {
        self.try_deliver(msg).is_ok()
    }

    /// Queues a message for the owner, or gives it back if its inbox is gone.
    fn try_deliver(&self, msg: Msg) -> Result<(), Box<Msg>> {
        self.inbox.send(msg).map_err(|e| Box::new(e.into_inner()))?;
        // Pairs with the fence in `Inbox::wait`: either the owner sees the
        // message when it re-checks after arming, or we see `armed` and ring.
        fence(Ordering::SeqCst);
        if self.armed.swap(false, Ordering::SeqCst) {
            self.rings.fetch_add(1, Ordering::Relaxed);
            // A full socket buffer means a wake-up is already pending.
            let _ = (&self.bell).write(&[1]);
        }
        Ok(())
    }
}

/// Built once at boot; each shard takes its own [`Link`].
pub struct Plan {
    doors: Arc<Vec<Door>>,
    links: Vec<Option<(Receiver<Msg>, StdUnixStream)>>,
}

impl Plan {
    pub fn new(shards: usize) -> std::io::Result<Plan> {
        let mut doors = Vec::with_capacity(shards);
        let mut links = Vec::with_capacity(shards);
        for _ in 0..shards {
            // Unbounded in type, bounded in practice: a shard sends a request
            // only for a connection waiting on it (one request in flight per
            // connection, SHARD_CONNECTIONS_MAX connections) plus boot-time
            // bookkeeping, and a reply only for a request it received.
            let (tx, rx) = crossbeam_channel::unbounded();
            let (ring, listen) = StdUnixStream::pair()?;
            ring.set_nonblocking(true)?;
            listen.set_nonblocking(true)?;
            doors.push(Door { inbox: tx, armed: AtomicBool::new(false), bell: ring, rings: AtomicU64::new(0) });
            links.push(Some((rx, listen)));
        }
        Ok(Plan { doors: Arc::new(doors), links })
    }

    /// The link for shard `id`, to move into its executor.
    pub fn link(&mut self, id: usize) -> Link {
        let (inbox, bell) = self.links[id].take().expect("each shard takes its link once");
        Link { id, doors: self.doors.clone(), inbox, bell }
    }
}

/// One shard's end of the mesh, before it joins on its executor.
pub struct Link {
    id: usize,
    doors: Arc<Vec<Door>>,
    inbox: Receiver<Msg>,
    bell: StdUnixStream,
}

pub struct Mesh {
    me: usize,
    doors: Arc<Vec<Door>>,
    next_id: Cell<u64>,
    waiting: RefCell<HashMap<u64, oneshot::Sender<Reply>>>,
    pub hops_out: Cell<u64>,
}

/// The receiving side, driven by [`Mesh::serve`].
pub struct Inbox {
    inbox: Receiver<Msg>,
    bell: glommio::net::UnixStream,
}

impl Link {
    /// Must run on the shard's own executor (the bell becomes an io_uring socket there).
    pub fn join(self) -> (Rc<Mesh>, Inbox) {
        // Safety: the fd comes from a socket we own and hand over here; no
        // other owner keeps it.
        let bell = unsafe { glommio::net::UnixStream::from_raw_fd(self.bell.into_raw_fd()) };
        let mesh = Rc::new(Mesh {
            me: self.id,
            doors: self.doors,
            next_id: Cell::new(1),
            waiting: RefCell::default(),
            hops_out: Cell::new(0),
        });
        (mesh, Inbox { inbox: self.inbox, bell })
    }
}

impl Mesh {
    pub fn id(&self) -> usize {
        self.me
    }

    /// Doorbell writes this shard has received (wake-ups, not messages).
    pub fn wakeups(&self) -> u64 {
        self.doors[self.me].rings.load(Ordering::Relaxed)
    }

    /// Drains the inbox forever: requests run as their own tasks (a slow
    /// request never holds up the others), replies complete their waiters.
    pub async fn serve(self: Rc<Self>, mut inbox: Inbox, handler: Rc<dyn Served>) {
        let door = &self.doors[self.me];
        let mut scratch = [0u8; 64];
        loop {
            while let Ok(msg) = inbox.inbox.try_recv() {
                self.dispatch(msg, &handler);
            }
            door.armed.store(true, Ordering::SeqCst);
            // Pairs with the fence in `Door::deliver`.
            fence(Ordering::SeqCst);
            if !inbox.inbox.is_empty() {
                door.armed.store(false, Ordering::SeqCst);
                continue;
            }
            match inbox.bell.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    fn dispatch(self: &Rc<Self>, msg: Msg, handler: &Rc<dyn Served>) {
        match msg {
            Msg::Request { id, from, req } => {
                let mesh = self.clone();
                let reply = handler.request(req);
                glommio::spawn_local(async move {
                    let reply = reply.await;
                    let _ = mesh.doors[from].deliver(Msg::Reply { id, reply });
                })
                .detach();
            }
            Msg::Control(c) => {
                glommio::spawn_local(handler.control(c)).detach();
            }
            Msg::Stats(tx) => {
                let _ = tx.send(handler.stats());
            }
            Msg::Connection(c) => handler.adopt(c),
            Msg::Reply { id, reply } => {
                if let Some(tx) = self.waiting.borrow_mut().remove(&id) {
                    let _ = tx.send(reply);
                }
            }
        }
    }
}

impl Mesh {
    /// Another shard's metrics.
    pub async fn stats(&self, target: usize) -> Result<Vec<String>, Error> {
        let (tx, rx) = oneshot::channel();
        if !self.doors[target].deliver(Msg::Stats(tx)) {
            return Err(Error::Unavailable(format!("shard {target} is not reachable")));
        }
        rx.await.map_err(|_| Error::Unavailable(format!("shard {target} dropped the request")))
    }
}

impl Mesh {
    /// Hands a client connection to `target`; gives it back when that
    /// shard's inbox is gone.
    pub fn move_connection(&self, target: usize, c: MovedConnection) -> Result<(), MovedConnection> {
        debug_assert_ne!(target, self.me);
        match self.doors[target].try_deliver(Msg::Connection(c)).map_err(|m| *m) {
            Err(Msg::Connection(c)) => Err(c),
            _ => Ok(()),
        }
    }
}

impl Peers for Mesh {
    fn control(&self, target: usize, c: Control) -> bool {
        debug_assert_ne!(target, self.me);
        self.hops_out.set(self.hops_out.get() + 1);
        self.doors[target].deliver(Msg::Control(c))
    }

    fn call(&self, target: usize, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>> {
        debug_assert_ne!(target, self.me);
        Box::pin(async move {
            let id = self.next_id.get();
            self.next_id.set(id + 1);
            let (tx, rx) = oneshot::channel();
            self.waiting.borrow_mut().insert(id, tx);
            self.hops_out.set(self.hops_out.get() + 1);
            if !self.doors[target].deliver(Msg::Request { id, from: self.me, req }) {
                self.waiting.borrow_mut().remove(&id);
                return Err(Error::Unavailable(format!("shard {target} is not reachable")));
            }
            rx.await.unwrap_or_else(|_| Err(Error::Unavailable(format!("shard {target} dropped the request"))))
        })
    }
}
