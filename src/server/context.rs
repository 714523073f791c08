//! What a connection sees of its shard: the one road to a request's owner
//! (`Dispatch`), the metrics of every shard, readiness, the stop signal and
//! the grants in force.

use super::access::Auth;
use super::{Process, SERVING};
use crate::auth::access::Access;
use crate::http::conn::ConnContext;
use crate::http::stop::Stop;
use crate::metrics::{EdgeMetrics, Family, Samples};
use crate::shard::mesh::{Mesh, Served};
use crate::shard::message::{Control, Dispatch, Reply, ShardRequest};
use crate::shard::Shard;
use crate::storage::dma_file::DiskStore;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(super) struct Ctx {
    pub me: usize,
    pub shards: usize,
    pub shard: Rc<Shard<DiskStore>>,
    pub mesh: Rc<Mesh>,
    pub edge: Rc<EdgeMetrics>,
    pub stop: Rc<Stop>,
    pub process: Arc<Process>,
}

impl Dispatch for Ctx {
    fn dispatch(&self, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>> {
        Box::pin(async move {
            let owner = req.owner(self.shards);
            if owner != self.me {
                self.edge.handoffs.set(self.edge.handoffs.get() + 1);
            } else {
                self.shard.stats.borrow_mut().requests_local += 1;
            }
            self.shard.call(owner, req).await
        })
    }
}

/// One shard's metrics: its streams and log, its HTTP edge (its counts of
/// each token included), its mesh end.
pub(super) fn shard_metrics(shard: &Shard<DiskStore>, edge: &EdgeMetrics, mesh: &Mesh, auth: Option<&Auth>) -> Samples {
    let mut s = shard.metrics();
    edge.render(shard.id, &mut s);
    if let Some(a) = auth {
        a.access.render(shard.id, &mut s);
    }
    s.sample(Family::MeshCalls, shard.id, "", mesh.hops_out.get());
    s.sample(Family::MeshWakeups, shard.id, "", mesh.wakeups());
    s
}

/// What this shard does with what other shards hand it over the mesh.
pub(super) struct Remote {
    pub shard: Rc<Shard<DiskStore>>,
    pub edge: Rc<EdgeMetrics>,
    pub mesh: Rc<Mesh>,
    pub auth: Option<Arc<Auth>>,
}

impl Served for Remote {
    fn request(&self, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply>>> {
        let shard = self.shard.clone();
        Box::pin(async move {
            shard.stats.borrow_mut().requests_remote_in += 1;
            shard.handle(req).await
        })
    }

    fn control(&self, c: Control) -> Pin<Box<dyn Future<Output = ()>>> {
        let shard = self.shard.clone();
        Box::pin(async move {
            shard.stats.borrow_mut().requests_remote_in += 1;
            shard.control(c).await
        })
    }

    /// The whole of this shard's metrics: shard, edge and mesh.
    fn stats(&self) -> Vec<String> {
        shard_metrics(&self.shard, &self.edge, &self.mesh, self.auth.as_deref()).into_blocks()
    }
}

impl ConnContext for Ctx {
    fn metrics(&self) -> Pin<Box<dyn Future<Output = String> + '_>> {
        Box::pin(async move {
            let mut all = Samples::default();
            for s in 0..self.shards {
                if s == self.me {
                    let mine = shard_metrics(&self.shard, &self.edge, &self.mesh, self.process.auth.as_deref());
                    all.merge(&mine.into_blocks());
                } else if let Ok(blocks) = self.mesh.stats(s).await {
                    all.merge(&blocks);
                }
            }
            all.render()
        })
    }

    fn edge(&self) -> &EdgeMetrics {
        &self.edge
    }

    fn stop(&self) -> &Rc<Stop> {
        &self.stop
    }

    fn ready(&self) -> bool {
        self.process.state.load(Ordering::Acquire) == SERVING
    }

    fn access(&self) -> Option<&Access> {
        self.process.auth.as_deref().map(|a| &a.access)
    }

    fn shard_id(&self) -> usize {
        self.me
    }
}
