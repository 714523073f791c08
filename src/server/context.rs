//! What the server owns and a connection needs: the metrics of every
//! shard, readiness, the stop signal, the grants in force, and the wiring of
//! connection moves. Requests go from the edge to the shard directly (the
//! shard is the edge's `Dispatch`), not through here.

use super::access::Auth;
use super::{Process, SERVING};
use crate::auth::access::Access;
use crate::http::conn::{self, ConnContext};
use crate::http::gate::Gate;
use crate::http::stop::Stop;
use crate::limits::CONN_MOVES_MAX;
use crate::metrics::{EdgeMetrics, Family, Samples};
use crate::shard::mesh::{Mesh, Served};
use crate::shard::message::{Control, MovedConnection, Reply, ShardRequest};
use crate::shard::Shard;
use crate::storage::dma_file::DiskStore;
use std::cell::RefCell;
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
    pub trust_proxy: bool,
    /// For the disk-space gauges.
    pub data_dir: std::path::PathBuf,
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
    /// Where moved connections are served; set once this shard serves HTTP.
    pub http: RefCell<Option<(Rc<Ctx>, Rc<Gate>)>>,
    pub auth: Option<Arc<Auth>>,
}

impl Served for Remote {
    fn request(&self, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply>>> {
        let shard = self.shard.clone();
        Box::pin(async move {
            shard.stats.borrow_mut().requests_remote_in += 1;
            shard.run_owned(req).await
        })
    }

    fn control(&self, c: Control) -> Pin<Box<dyn Future<Output = ()>>> {
        let shard = self.shard.clone();
        Box::pin(async move {
            shard.stats.borrow_mut().requests_remote_in += 1;
            shard.control(c).await
        })
    }

    fn adopt(&self, mut c: MovedConnection) {
        if let Some((cx, gate)) = self.http.borrow().as_ref() {
            return conn::adopt(c, cx.clone(), gate);
        }
        // Not serving HTTP yet (still booting): back to where it came from,
        // to stay there. Closed only if that shard is gone too.
        c.moves = CONN_MOVES_MAX;
        let _ = self.mesh.move_connection(c.from, c);
    }

    /// The whole of this shard's metrics: shard, edge and mesh.
    fn stats(&self) -> Vec<String> {
        shard_metrics(&self.shard, &self.edge, &self.mesh, self.auth.as_deref()).into_blocks()
    }
}

impl ConnContext for Ctx {
    type Shard = Shard<DiskStore>;

    fn shard(&self) -> &Shard<DiskStore> {
        &self.shard
    }

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
            if let Some(board) = &self.process.cell {
                board.render(&mut all);
            }
            crate::procstat::render(&self.data_dir, &mut all);
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

    fn degraded(&self) -> Option<&'static str> {
        let down = self.process.tier.as_ref().is_some_and(|t| !t.is_up());
        down.then_some("degraded: the object store does not answer (cold reads 503, uploads retry)")
    }

    fn leaderz(&self) -> (bool, String) {
        crate::cell::observe::leaderz(self.process.cell.as_deref())
    }

    fn cellz(&self) -> Option<String> {
        let unity = self.process.unity.as_deref();
        self.process.cell.as_deref().map(|board| crate::cell::observe::cellz(board, unity))
    }

    fn move_to(&self, to: usize, c: MovedConnection) -> Result<(), MovedConnection> {
        self.mesh.move_connection(to, c)
    }

    fn trust_proxy(&self) -> bool {
        self.trust_proxy
    }

    fn access(&self) -> Option<&Access> {
        self.process.auth.as_deref().map(|a| &a.access)
    }

    fn shard_id(&self) -> usize {
        self.me
    }

    fn shards(&self) -> usize {
        self.shards
    }
}
