//! Cross-core hand-off: typed requests to the owning shard and replies back,
//! over glommio's channel mesh (one bounded lock-free SPSC ring per ordered
//! pair of shards, woken through eventfd).
//!
//! Why glommio's mesh rather than crossbeam queues: it already pairs each
//! ring with the executor's wake-up (the receiver parks in io_uring, the
//! sender rings its eventfd), so a hop costs one ring write plus one eventfd
//! write and needs no polling loop. crossbeam is used at boot, where the main
//! thread and the executors exchange readiness and the bound port.

use super::router::{Reply, ShardRequest};
use crate::protocol::Error;
use futures_channel::oneshot;
use futures_lite::future::FutureExt;
use glommio::channels::channel_mesh::{MeshBuilder, Senders};
use glommio::channels::shared_channel::ConnectedReceiver;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// Something that can run a request on another shard and return its reply.
pub trait Peers {
    fn call(&self, target: usize, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>>;
}

/// What travels between shards.
pub enum Msg {
    Request { id: u64, req: ShardRequest },
    Reply { id: u64, reply: Reply },
}

pub type MeshBuild = MeshBuilder<Msg, glommio::channels::channel_mesh::Full>;

pub fn builder(shards: usize) -> MeshBuild {
    MeshBuilder::full(shards, crate::limits::SHARD_MESH_CHANNEL_CAPACITY)
}

pub struct Mesh {
    me: usize,
    senders: Senders<Msg>,
    next_id: Cell<u64>,
    waiting: RefCell<HashMap<u64, oneshot::Sender<Reply>>>,
    pub hops_out: Cell<u64>,
}

impl Mesh {
    /// Joins the mesh (every shard must call it) and returns the mesh and the
    /// receiving ends, which `serve` drains.
    pub async fn join(b: MeshBuild) -> (Rc<Mesh>, Vec<(usize, ConnectedReceiver<Msg>)>) {
        let (senders, mut receivers) = b.join().await.expect("joining the shard mesh");
        let me = senders.peer_id();
        let streams = receivers.streams();
        let mesh = Rc::new(Mesh {
            me,
            senders,
            next_id: Cell::new(1),
            waiting: RefCell::default(),
            hops_out: Cell::new(0),
        });
        (mesh, streams)
    }

    pub fn id(&self) -> usize {
        self.me
    }

    /// Drains one peer's ring: requests run as their own tasks (so a slow
    /// request never blocks the ring), replies complete their waiters.
    pub async fn serve<H, F>(self: Rc<Self>, from: usize, rx: ConnectedReceiver<Msg>, handler: H)
    where
        H: Fn(ShardRequest) -> F + 'static,
        F: Future<Output = Reply> + 'static,
    {
        let handler = Rc::new(handler);
        while let Some(msg) = rx.recv().await {
            match msg {
                Msg::Request { id, req } => {
                    let mesh = self.clone();
                    let handler = handler.clone();
                    glommio::spawn_local(async move {
                        let reply = handler(req).await;
                        // The peer's ring may be full; waiting here only
                        // delays this one reply.
                        let _ = mesh.senders.send_to(from, Msg::Reply { id, reply }).await;
                    })
                    .detach();
                }
                Msg::Reply { id, reply } => {
                    if let Some(tx) = self.waiting.borrow_mut().remove(&id) {
                        let _ = tx.send(reply);
                    }
                }
            }
        }
    }
}

impl Peers for Mesh {
    fn call(&self, target: usize, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>> {
        debug_assert_ne!(target, self.me);
        async move {
            let id = self.next_id.get();
            self.next_id.set(id + 1);
            let (tx, rx) = oneshot::channel();
            self.waiting.borrow_mut().insert(id, tx);
            self.hops_out.set(self.hops_out.get() + 1);
            if self.senders.send_to(target, Msg::Request { id, req }).await.is_err() {
                self.waiting.borrow_mut().remove(&id);
                return Err(Error::Unavailable(format!("shard {target} is not reachable")));
            }
            rx.await.unwrap_or_else(|_| Err(Error::Unavailable(format!("shard {target} dropped the request"))))
        }
        .boxed_local()
    }
}
