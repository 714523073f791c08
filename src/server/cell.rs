//! A shard's replica in a cell (issue 33), started at boot: its batched
//! log recovered with the replica beside it, the shard recovered from the
//! committed records only, then the peer links of its group (the node's
//! `--cell` port plus the shard's index) and the replica's loop on this
//! executor. The shard applies what its group commits and writes only
//! while its replica leads; while it does not, what the leader must decide
//! goes to the leader over the group's links (`shard::forward`). While it
//! leads, its answers that claim freshness wait for the replica to confirm
//! the lead (`cell::confirm`, through the replica's `Status`).

use crate::cell::board::{self, Counting, Slot};
use crate::cell::config::CellConfig;
use crate::cell::link::{ForwardHandler, LinkConfig, Links};
use crate::cell::replica::{self, Applier, Replica, Sleep, Status};
use crate::limits::{
    CELL_CONFIRM_TICKS, CELL_ENTRY_BYTES_MAX, CELL_FORWARD_TIMEOUT_MS, CELL_LEADER_WAIT_MS, CELL_TICK_MS,
};
use crate::shard::forward::{Forwarder, Unsent};
use crate::shard::Shard;
use crate::storage::dma_file::DiskStore;
use crate::storage::io::SegmentStore;
use crate::storage::{Log, LogConfig, Recovered, RecoveryReport};
use futures_util::StreamExt;
use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A shard's log in a cell, recovered, with what its shard is rebuilt from.
pub(super) struct Opened {
    pub log: Rc<Log<DiskStore>>,
    /// The records of the committed entries, in log order.
    pub committed: Vec<Recovered>,
    pub report: RecoveryReport,
    pub replica: Replica<DiskStore>,
}

/// Recovers shard `id`'s batched log and its replica: the records the
/// shard may apply now are those of committed entries (the rest follow as
/// they commit).
pub(super) async fn open(id: usize, cell: &CellConfig, store: DiskStore, cfg: LogConfig) -> Result<Opened, String> {
    // What was appended and not yet durable is at most one entry's worth
    // (an entry is proposed from it whole).
    let cfg = LogConfig { pending_bytes_max: cfg.pending_bytes_max.min(CELL_ENTRY_BYTES_MAX as u64 / 2), ..cfg };
    let (log, records, _, report) =
        Log::open_batched(store, cfg).await.map_err(|e| format!("shard {id}: recovery failed: {e}"))?;
    let log = Rc::new(log);
    let voters = cell.voters.iter().map(|v| v.id).collect();
    let replica = Replica::open(cell.node_id, id as u32, voters, log.local().clone())
        .await
        .map_err(|e| format!("shard {id}: its replica does not start: {e}"))?;
    let local = log.local();
    let end = local
        .mark(local.committed_index())
        .map_err(|e| format!("shard {id}: reading the committed entries: {e}"))?
        .map(|m| (m.end.segment, m.end.pos));
    let committed = records.into_iter().filter(|r| end.is_some_and(|e| (r.loc.segment, r.loc.pos) < e)).collect();
    Ok(Opened { log, committed, report, replica })
}

/// The shard as its replica's applier.
/// The shard is its replica's applier: here, where the cell and the shard
/// meet (neither knows the other).
impl<S: SegmentStore> Applier for Shard<S> {
    fn apply(&self, records: &[Recovered]) -> Result<(), String> {
        Shard::apply_committed(self, records)
    }
    fn rebuild(&self, committed: &[Recovered]) -> Result<(), String> {
        Shard::rebuild(self, committed)
    }
    fn lead_begins(&self) {
        Shard::lead_begins(self);
    }
}

/// The shard's way to its group's leader: the links, to whichever replica
/// the replica knows leads.
struct ToLeader {
    me: u64,
    links: Rc<Links>,
    status: Rc<Status>,
}

impl Forwarder for ToLeader {
    /// While no leader is reachable (none known, this node taking over, or
    /// the known one not connected) the request waits, looking again every
    /// tick, up to CELL_LEADER_WAIT_MS: an election usually ends sooner.
    /// Once this replica leads and writes, the request runs here instead.
    fn forward(&self, request: Vec<u8>, timeout: Duration) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, Unsent>>>> {
        let (links, status, me) = (self.links.clone(), self.status.clone(), self.me);
        Box::pin(async move {
            let give_up = Instant::now() + Duration::from_millis(CELL_LEADER_WAIT_MS);
            loop {
                let why = match status.leader.get() {
                    None => "no leader is known now (an election is under way)".to_string(),
                    Some(l) if l == me && status.leading.get() => return Err(Unsent::LeadsHere),
                    Some(l) if l == me => "this node is taking over the lead".to_string(),
                    Some(l) if !links.is_connected(l) => format!("the leader, node {l}, is not connected to this one"),
                    Some(l) => {
                        let answer = links.forward(l, request, timeout).await;
                        return answer.map_err(|e| Unsent::Failed(e.to_string()));
                    }
                };
                if Instant::now() >= give_up {
                    return Err(Unsent::Failed(why));
                }
                glommio::timer::sleep(Duration::from_millis(CELL_TICK_MS)).await;
            }
        })
    }

    /// The replica's read index round (`cell::confirm`): the lead noted
    /// now, the request queued for a round when awaited. A round ends by
    /// its deadline in ticks; should the replica's loop itself stall (a
    /// disk that does not answer), the wait ends by the clock as well.
    fn confirmation(&self) -> Pin<Box<dyn Future<Output = bool>>> {
        let (status, ticket) = (self.status.clone(), self.status.confirms.ticket());
        let limit = Duration::from_millis(2 * CELL_CONFIRM_TICKS * CELL_TICK_MS);
        Box::pin(async move {
            let timed_out = async {
                glommio::timer::sleep(limit).await;
                false
            };
            futures_lite::future::or(status.confirms.confirm(ticket), timed_out).await
        })
    }

    /// The replica's catch-up (`cell::catch_up`): a read index round
    /// through the leader, then the apply; bounded by the clock too, as
    /// `confirmation` is.
    fn caught_up(&self) -> Pin<Box<dyn Future<Output = bool>>> {
        let status = self.status.clone();
        let limit = Duration::from_millis(2 * CELL_CONFIRM_TICKS * CELL_TICK_MS);
        Box::pin(async move {
            let timed_out = async {
                glommio::timer::sleep(limit).await;
                false
            };
            futures_lite::future::or(status.catch_ups.caught_up(), timed_out).await
        })
    }

    /// Fire and forget, to the leader if it is connected now.
    fn notify(&self, request: Vec<u8>) {
        let Some(leader) = self.status.leader.get().filter(|&l| l != self.me && self.links.is_connected(l)) else {
            return;
        };
        let links = self.links.clone();
        let timeout = Duration::from_millis(CELL_FORWARD_TIMEOUT_MS);
        glommio::spawn_local(async move {
            let _ = links.forward(leader, request, timeout).await;
        })
        .detach();
    }
}

/// The leader's side: its shard runs what followers forward. Weak: the
/// shard holds the links (through its forwarder) and the links hold this.
struct RunsForwards(Weak<Shard<DiskStore>>);

impl ForwardHandler for RunsForwards {
    fn handle(&self, request: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>>>> {
        let shard = self.0.upgrade();
        Box::pin(async move {
            match shard {
                Some(shard) => shard.run_forwarded(request).await,
                // Gone: an empty answer, which the sender reads as a 503.
                None => Vec::new(),
            }
        })
    }
}

/// Connects the shard and its replica, starts the group's links and the
/// replica's loop on this executor. The first voter of `--cell` is the one
/// every group is steered to be led by, so one node leads them all. The
/// replica publishes its state, and the bytes its links carry, to `slot`.
pub(super) fn start(
    id: usize,
    cell: &CellConfig,
    mut replica: Replica<DiskStore>,
    shard: &Rc<Shard<DiskStore>>,
    slot: Arc<Slot>,
) -> Result<(), String> {
    replica.set_applier(shard.clone());
    replica.publish_to(slot.clone());
    replica.prefer(cell.voters[0].id);
    shard.set_writable(replica.status().leading.clone());
    let port = |addr: SocketAddr| -> Result<SocketAddr, String> {
        let p = addr.port().checked_add(id as u16).ok_or(format!("shard {id}: no peer port after {addr}"))?;
        Ok(SocketAddr::new(addr.ip(), p))
    };
    let listen = port(cell.me().addr)?;
    let peers = cell.peers().map(|v| Ok((v.id, port(v.addr)?))).collect::<Result<Vec<_>, String>>()?;
    let secret = Rc::new(cell.secret.clone());
    let (links, inbox) = Links::start(LinkConfig { me: cell.node_id, group: id as u32, listen, peers, secret })
        .map_err(|e| format!("shard {id}: listening for its peers on {listen}: {e}"))?;
    let links = Rc::new(links);
    links.serve_forwards(Rc::new(RunsForwards(Rc::downgrade(shard))));
    shard.set_forwarder(Rc::new(ToLeader { me: cell.node_id, links: links.clone(), status: replica.status() }));
    let sleep: Sleep = Rc::new(|d| Box::pin(glommio::timer::sleep(d)));
    glommio::spawn_local(async move {
        let stop = Cell::new(false);
        let tick = Duration::from_millis(CELL_TICK_MS);
        let received = inbox.stream().inspect(|m| slot.add_received(board::message_bytes(m)));
        let out = Counting { out: &*links, slot: &slot };
        replica::run(replica, received, &out, &sleep, tick, &stop).await;
    })
    .detach();
    Ok(())
}
