//! Graceful shutdown of one shard, and the main thread waiting for all of them.

use crate::http::gate::Gate;
use crate::latch::Latch;
use crate::limits::SHUTDOWN_DRAIN_MS;
use crate::metrics::EdgeMetrics;
use crate::shard::Shard;
use crate::storage::dma_file::DiskStore;
use std::time::Duration;

/// Graceful shutdown of one shard, once it stopped accepting: wait for its
/// connections to finish (at most SHUTDOWN_DRAIN_MS), then for every other
/// shard to get there (requests still in flight may need this shard's log
/// or mesh), then a final sync of everything appended, and stop the log's
/// tasks.
pub(super) async fn drain(
    id: usize,
    shard: &Shard<DiskStore>,
    edge: &EdgeMetrics,
    gate: &Gate,
    drained: &Latch,
) -> Result<(), String> {
    tracing::info!("shard {id}: stopped accepting; {} connections to finish", edge.connections.get());
    let deadline = glommio::timer::sleep(Duration::from_millis(SHUTDOWN_DRAIN_MS));
    let closed = async {
        while edge.connections.get() > 0 {
            gate.all_closed().await;
        }
        true
    };
    if !futures_lite::future::or(closed, async {
        deadline.await;
        false
    })
    .await
    {
        tracing::warn!(
            "shard {id}: {} connections still open after {SHUTDOWN_DRAIN_MS} ms; closing them",
            edge.connections.get()
        );
    }
    drained.count_down();
    drained.wait(id).await;
    let log = shard.log();
    let tail = log.tail_lsn();
    let r = log.durable(tail).await.map_err(|e| format!("shard {id}: final sync failed: {e}"));
    log.stop();
    if r.is_ok() {
        tracing::info!("shard {id}: drained and synced ({tail} log bytes since boot)");
    }
    r
}

/// Sent when a shard's executor finishes (also on a panic or a failed
/// boot), so that the main thread never waits for a shard that is gone.
pub(super) struct ShardExit {
    pub id: usize,
    pub done: crossbeam_channel::Sender<Result<(), String>>,
    pub result: Option<Result<(), String>>,
}

impl Drop for ShardExit {
    fn drop(&mut self) {
        let r = self.result.take().unwrap_or_else(|| Err(format!("shard {} stopped unexpectedly", self.id)));
        let _ = self.done.send(r);
    }
}
