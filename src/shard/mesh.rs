//! Cross-core hand-off: typed requests to the owning shard and replies back.
//!
//! Each shard has one inbox (a lock-free `crossbeam_channel`) drained by one
//! task, its mesh task. A sender pushes its message into the target's inbox
//! and wakes that task only if it is parked waiting for mail (its waker sits
//! in the door's `AtomicWaker`), so a busy shard drains many messages per
//! wake-up. The wake-up is glommio's own from another thread: the waker goes
//! into the target executor's foreign queue, which it sweeps on every turn
//! of its loop, and the executor's eventfd is written only when it is about
//! to sleep or asleep. A message to a shard that is running costs no system
//! call at all; an idle shard costs nothing and is woken at once.
//!
//! `AtomicWaker` orders the register / push / re-check protocol: the mesh
//! task registers its waker, then looks at the inbox once more; a sender
//! pushes, then takes the waker. Either the task sees the message or the
//! sender sees the waker.

use super::message::{Control, MovedConnection, Reply, ShardRequest};
use crate::protocol::Error;
use crossbeam_channel::{Receiver, Sender};
use futures_channel::oneshot;
use futures_util::task::AtomicWaker;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

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
    /// The owner's mesh task while it is parked waiting for mail.
    parked: AtomicWaker,
    /// Times a sender woke the parked mesh task.
    wakeups: AtomicU64,
}

impl Door {
    /// Queues a message for the owner; false if its inbox is gone.
    fn deliver(&self, msg: Msg) -> bool {
        self.try_deliver(msg).is_ok()
    }

    /// Queues a message for the owner, or gives it back if its inbox is gone.
    fn try_deliver(&self, msg: Msg) -> Result<(), Box<Msg>> {
        self.inbox.send(msg).map_err(|e| Box::new(e.into_inner()))?;
        // After the push: either the owner's re-check after registering
        // sees the message, or this finds its waker.
        if let Some(w) = self.parked.take() {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            w.wake();
        }
        Ok(())
    }
}

/// Built once at boot; each shard takes its own [`Link`].
pub struct Plan {
    doors: Arc<Vec<Door>>,
    links: Vec<Option<Receiver<Msg>>>,
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
            doors.push(Door { inbox: tx, parked: AtomicWaker::new(), wakeups: AtomicU64::new(0) });
            links.push(Some(rx));
        }
        Ok(Plan { doors: Arc::new(doors), links })
    }

    /// The link for shard `id`, to move into its executor.
    pub fn link(&mut self, id: usize) -> Link {
        let inbox = self.links[id].take().expect("each shard takes its link once");
        Link { id, doors: self.doors.clone(), inbox }
    }
}

/// One shard's end of the mesh, before it joins on its executor.
pub struct Link {
    id: usize,
    doors: Arc<Vec<Door>>,
    inbox: Receiver<Msg>,
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
}

impl Link {
    /// Must run on the shard's own executor (its mesh task is woken there).
    pub fn join(self) -> (Rc<Mesh>, Inbox) {
        let mesh = Rc::new(Mesh {
            me: self.id,
            doors: self.doors,
            next_id: Cell::new(1),
            waiting: RefCell::default(),
            hops_out: Cell::new(0),
        });
        (mesh, Inbox { inbox: self.inbox })
    }
}

impl Mesh {
    pub fn id(&self) -> usize {
        self.me
    }

    /// Times other shards woke this shard's parked mesh task (wake-ups,
    /// not messages).
    pub fn wakeups(&self) -> u64 {
        self.doors[self.me].wakeups.load(Ordering::Relaxed)
    }

    /// Drains the inbox forever: requests run as their own tasks (a slow
    /// request never holds up the others), replies complete their waiters.
    pub async fn serve(self: Rc<Self>, inbox: Inbox, handler: Rc<dyn Served>) {
        let door = &self.doors[self.me];
        loop {
            while let Ok(msg) = inbox.inbox.try_recv() {
                self.dispatch(msg, &handler);
            }
            std::future::poll_fn(|cx| {
                door.parked.register(cx.waker());
                // Pairs with the push-then-take in `Door::try_deliver`.
                if inbox.inbox.is_empty() {
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
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
