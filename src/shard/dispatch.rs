//! The one road from a request to its owner: which shard owns it (the
//! router's hash of its stream or bucket), then this shard runs it, or the
//! mesh hands it to the shard that owns it. Connections (the HTTP edge, as
//! [`Dispatch`]), operations that need another shard, and boot all take it:
//! `run` for data-plane requests, `ask` for control requests.

use super::message::{Control, Reply, ShardRequest};
use super::message::{Dispatch, Owner};
use super::router::{shard_for, shard_for_bucket};
use super::Shard;
use crate::protocol::Error;
use crate::storage::io::SegmentStore;
use futures_channel::oneshot;

impl ShardRequest {
    /// The shard that must run this request.
    pub fn owner(&self, shards: usize) -> usize {
        match self {
            ShardRequest::Stream { key, .. } => shard_for(key, shards),
            ShardRequest::Bucket { bucket, .. } | ShardRequest::ListBucket { bucket, .. } => {
                shard_for_bucket(bucket, shards)
            }
            ShardRequest::Subs(r) => shard_for(&r.root.owner_key(&r.id), shards),
            // Shard i's replica is of group i.
            ShardRequest::Members { group, .. } => (*group as usize).min(shards.saturating_sub(1)),
        }
    }
}

impl Control {
    /// The shard a request about a stream must go to; None for those sent
    /// to chosen shards (replication, counts, listing parts).
    pub fn owner(&self, shards: usize) -> Option<usize> {
        match self {
            Control::ForkSnapshot { source, .. } | Control::ForkRef { source, .. } => Some(shard_for(source, shards)),
            Control::SubTail { id, .. } => Some(shard_for(&id.0.owner_key(&id.1), shards)),
            _ => None,
        }
    }
}

impl<S: SegmentStore> Dispatch for Shard<S> {
    /// The one local-or-remote comparison of a request's road.
    fn owner(&self, req: &ShardRequest) -> Owner {
        match req.owner(self.shards) {
            n if n == self.id => Owner::Here,
            n => Owner::Peer(n),
        }
    }

    async fn run(&self, owner: Owner, req: ShardRequest) -> Reply {
        match owner {
            Owner::Here => {
                self.stats.borrow_mut().requests_local += 1;
                self.run_owned(req).await
            }
            Owner::Peer(n) => {
                debug_assert_eq!(n, req.owner(self.shards));
                let peers = self.peers.borrow().clone();
                match peers {
                    Some(p) => p.call(n, req).await,
                    None => Err(Error::Unavailable("no mesh".into())),
                }
            }
        }
    }
}

impl<S: SegmentStore> Shard<S> {
    /// Sends the control request `make` builds around an answer channel to
    /// `target` (this shard included) and waits for the typed answer.
    pub async fn ask<R>(&self, target: usize, make: impl FnOnce(oneshot::Sender<R>) -> Control) -> Result<R, Error> {
        let (tx, rx) = oneshot::channel();
        self.answer(target, make(tx), rx).await
    }

    /// `ask` of the shard that owns the stream the request is about.
    pub async fn ask_owner<R>(&self, make: impl FnOnce(oneshot::Sender<R>) -> Control) -> Result<R, Error> {
        let (tx, rx) = oneshot::channel();
        let c = make(tx);
        let target = c.owner(self.shards).unwrap_or(self.id);
        self.answer(target, c, rx).await
    }

    /// Delivers `c` to `target` and waits for the answer on `rx`.
    async fn answer<R>(&self, target: usize, c: Control, rx: oneshot::Receiver<R>) -> Result<R, Error> {
        self.deliver(target, c).await?;
        rx.await.map_err(|_| Error::Unavailable(format!("shard {target} dropped the request")))
    }

    async fn deliver(&self, target: usize, c: Control) -> Result<(), Error> {
        if target == self.id {
            // Boxed: a control request may lead to another (a released fork
            // releasing its own source).
            Box::pin(self.control(c)).await;
            return Ok(());
        }
        let peers = self.peers.borrow().clone();
        match peers {
            Some(p) if p.control(target, c) => Ok(()),
            _ => Err(Error::Unavailable(format!("shard {target} is not reachable"))),
        }
    }

    /// Sends a control request to every other shard and waits for all answers.
    pub(super) async fn broadcast<R>(&self, make: impl Fn(oneshot::Sender<R>) -> Control) -> Result<Vec<R>, Error> {
        let mut out = Vec::new();
        for target in (0..self.shards).filter(|&t| t != self.id) {
            out.push(self.ask(target, &make).await?);
        }
        Ok(out)
    }
}
