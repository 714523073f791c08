//! A shard's replica in a cell (issue 33), started at boot: the peer links
//! of its group (the node's `--cell` port plus the shard's index), its
//! peers' sealed segments copied first when it has none (segment shipping),
//! its batched log recovered with the replica beside it, the shard
//! recovered from the committed records only, then the replica's loop on
//! this executor. The shard applies what its group commits and writes only
//! while its replica leads; while it does not, what the leader must decide
//! goes to the leader over the group's links (`shard::forward`). While it
//! leads, its answers that claim freshness wait for the replica to confirm
//! the lead (`cell::confirm`, through the replica's `Status`).

use crate::cell::asking::{Asking, NotMade};
use crate::cell::board::{self, Counting, Slot};
use crate::cell::config::CellConfig;
use crate::cell::link::{ForwardHandler, Inbox, LinkConfig, Links};
use crate::cell::members::{self, Change, Membership, Role};
use crate::cell::replica::{self, Applier, Replica, Sleep, Status};
use crate::cell::ship::{self, Source};
use crate::cell::skeletons;
use crate::cell::unity::Unity;
use crate::limits::{
    CELL_CONFIRM_TICKS, CELL_ENTRY_BYTES_MAX, CELL_FORWARD_TIMEOUT_MS, CELL_LEADER_WAIT_MS, CELL_MEMBER_WAIT_MS,
    CELL_SHIP_BOOT_WAIT_MS, CELL_TICK_MS,
};
use crate::protocol::members::{MemberChange, MemberOutcome, MemberRole};
use crate::protocol::Error;
use crate::shard::forward::{Forwarder, Unsent};
use crate::shard::message::{Control, RetellStep};
use crate::shard::Shard;
use crate::storage::dma_file::DiskStore;
use crate::storage::io::SegmentStore;
use crate::storage::slots::Slots;
use crate::storage::{Log, LogConfig, Recovered, RecoveryReport, Tiering};
use futures_util::StreamExt;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
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
    pub joined: Joined,
}

/// The replica and its group's links, for [`start`].
pub(super) struct Joined {
    replica: Replica<DiskStore>,
    links: Links,
    inbox: Inbox,
}

/// The small file that says a segment shipping is under way: a boot that
/// finds it so removes what was copied and ships again.
const SHIP_STATE_FILE: &str = "ship-state";
const SHIPPING: &[u8] = b"shipping";
const SHIPPED: &[u8] = b"done";
/// Copies tried at boot before a replica starts empty.
const SHIP_ATTEMPTS: u32 = 3;

/// Starts shard `id`'s group links (a peer's requests for segments are
/// answered from its log once it is open), gives the log its peers'
/// sealed segments if it has none ([`ship_if_empty`]), recovers the
/// batched log and its replica: the records the shard may apply now are
/// those of committed entries (the rest follow as they commit).
pub(super) async fn open(
    id: usize,
    cell: &CellConfig,
    store: DiskStore,
    cfg: LogConfig,
    tiering: Option<Tiering>,
    slot: &Arc<Slot>,
) -> Result<Opened, String> {
    // What was appended and not yet durable is at most one entry's worth
    // (an entry is proposed from it whole).
    let cfg = LogConfig { pending_bytes_max: cfg.pending_bytes_max.min(CELL_ENTRY_BYTES_MAX as u64 / 2), ..cfg };
    let (links, inbox) = start_links(id, cell)?;
    let source = Rc::new(Source::counted(slot.clone()));
    links.serve_fetches(source.clone());
    ship_if_empty(id, cell, &store, &links, &source, slot).await?;
    let (log, records, _, report) =
        Log::open_batched(store, cfg, tiering).await.map_err(|e| format!("shard {id}: recovery failed: {e}"))?;
    let log = Rc::new(log);
    source.serve(log.local().clone());
    let voters = cell.voters.iter().map(|v| v.id).collect();
    let replica = Replica::open(cell.node_id, id as u32, voters, log.local().clone())
        .await
        .map_err(|e| format!("shard {id}: its replica does not start: {e}"))?;
    let (status, cell_now) = (replica.status(), cell.clone());
    source.serve_members(Box::new(move || addressed(status.members.borrow().clone(), &cell_now)));
    let local = log.local();
    let end = local
        .mark(local.committed_index())
        .map_err(|e| format!("shard {id}: reading the committed entries: {e}"))?
        .map(|m| (m.end.segment, m.end.pos));
    let committed = records.into_iter().filter(|r| end.is_some_and(|e| (r.loc.segment, r.loc.pos) < e)).collect();
    Ok(Opened { log, committed, report, joined: Joined { replica, links, inbox } })
}

/// The group's links: the node's `--cell` port plus the shard's index, the
/// peers' likewise.
fn start_links(id: usize, cell: &CellConfig) -> Result<(Links, Inbox), String> {
    let port = |addr: SocketAddr| -> Result<SocketAddr, String> {
        let p = addr.port().checked_add(id as u16).ok_or(format!("shard {id}: no peer port after {addr}"))?;
        Ok(SocketAddr::new(addr.ip(), p))
    };
    let listen = port(cell.me().addr)?;
    let peers = cell.peers().map(|v| Ok((v.id, port(v.addr)?))).collect::<Result<Vec<_>, String>>()?;
    let secret = Rc::new(cell.secret.clone());
    Links::start(LinkConfig { me: cell.node_id, group: id as u32, listen, peers, secret })
        .map_err(|e| format!("shard {id}: listening for its peers on {listen}: {e}"))
}

/// A replica with no segment (a new node, a lost disk, or a shipping cut
/// short, whose copies are removed first) copies its peers' sealed
/// segments (`cell::ship`) before its log opens: with `--cell-join` it
/// waits however long for an offer or every peer's answer
/// (`ship::manifests`). Where no
/// peer offers any (a new cell), or every copy fails, it starts empty,
/// and its leader sends it entries instead. The `ship-state` file says "shipping" from
/// the first copy until it ends, so a boot that finds it so starts over.
async fn ship_if_empty(
    id: usize,
    cell: &CellConfig,
    store: &DiskStore,
    links: &Links,
    source: &Source<DiskStore>,
    slot: &Slot,
) -> Result<(), String> {
    let io = |what: &'static str| move |e: std::io::Error| format!("shard {id}: {what}: {e}");
    let (mut state, saved) = Slots::open(store, SHIP_STATE_FILE).await.map_err(io("reading the shipping state"))?;
    let held = store.list().await.map_err(io("listing the segments"))?;
    match ship_plan(&held, saved.as_deref()) {
        ShipPlan::Keep => return Ok(()),
        ShipPlan::Ship => {}
        ShipPlan::AgainWithout(doomed) => {
            tracing::warn!(
                "shard {id}: a segment shipping was cut short: its {} segments go, and it ships again",
                doomed.len()
            );
            remove_all(store, &doomed).await.map_err(io("removing the segments of a shipping cut short"))?;
        }
    }
    source.holds_nothing(true);
    let peers: Vec<u64> = cell.peers().map(|v| v.id).collect();
    let sleep: Sleep = Rc::new(|d| Box::pin(glommio::timer::sleep(d)));
    let wait = Duration::from_millis(CELL_SHIP_BOOT_WAIT_MS);
    let mut shipping = saved.as_deref() == Some(SHIPPING);
    // A copy fails when a peer reclaims a segment while it is copied, or
    // goes down: the manifests are asked for again, a few times.
    for attempt in 1..=SHIP_ATTEMPTS {
        let offers = ship::manifests(links, &peers, wait, cell.join, &sleep).await;
        if offers.iter().all(|(_, m)| m.is_empty()) {
            tracing::info!("shard {id}: no segments, and no peer offered any: it starts empty");
            break;
        }
        if !shipping {
            state.write(store, SHIPPING).await.map_err(io("writing the shipping state"))?;
            shipping = true;
        }
        let copied = match ship::copy_best(links, offers, store).await {
            Ok(s) => skeletons::copy_skeletons(links, s.from, store).await.map(|skel| (s, skel)),
            Err(e) => Err(e),
        };
        match copied {
            Ok((s, (skeletons, skel_bytes))) => {
                tracing::info!(
                    "shard {id}: copied {} sealed segments ({} bytes) and {skeletons} skeletons of segments in the \
                     object store ({skel_bytes} bytes) from node {} in {:?}; its leader sends the rest",
                    s.segments,
                    s.bytes,
                    s.from,
                    s.took
                );
                slot.shipped(s.segments, s.bytes + skel_bytes);
                break;
            }
            Err(e) => {
                let held = store.list().await.map_err(io("listing the segments"))?;
                remove_all(store, &held).await.map_err(io("removing the segments of a failed shipping"))?;
                let then = if attempt < SHIP_ATTEMPTS {
                    "it asks again"
                } else {
                    "it starts empty, and its leader sends entries"
                };
                tracing::warn!("shard {id}: segment shipping failed ({e}): {then}");
            }
        }
    }
    source.holds_nothing(false);
    if cell.join {
        seed_members(id, store, links, &peers).await?;
    }
    if shipping {
        state.write(store, SHIPPED).await.map_err(io("writing the shipping state"))?;
    }
    Ok(())
}

/// A node joining a cell (`--cell-join`) opens its log knowing its group's
/// members as its peers applied them (itself among them once added).
async fn seed_members(id: usize, store: &DiskStore, links: &Links, peers: &[u64]) -> Result<(), String> {
    let Some(m) = ship::membership(links, peers).await.filter(|m| m.index > 0) else { return Ok(()) };
    tracing::info!("shard {id}: its group's members, as its peers applied them: {:?} at {:?}", m.conf, m.addresses);
    crate::cell::store::seed_membership(store, &m).await.map_err(|e| format!("shard {id}: {e}"))
}

/// `m` with an address for each member that has none there (one of the
/// cell's first voters: this node's `--cell` names it), so that a node
/// joining knows where every member is, whatever its own `--cell` names.
fn addressed(mut m: Membership, cell: &CellConfig) -> Membership {
    let ids = members::all(&m.conf);
    for v in cell.voters.iter().filter(|v| ids.contains(&v.id)) {
        m.addresses.entry(v.id).or_insert_with(|| v.addr.to_string());
    }
    m
}

/// Links the group's members (`member_links`) once the host names among
/// the addresses their changes carried are resolved: on a blocking thread,
/// never on the executor (a slow resolver would stall the shard). Numeric
/// addresses, the usual case, are linked at once. `latest` counts the
/// calls: a resolution that a newer change overtook is dropped.
fn relink(links: &Rc<Links>, cell: &Rc<CellConfig>, group: usize, m: &Membership, latest: &Rc<Cell<u64>>) {
    let call = latest.get() + 1;
    latest.set(call);
    let names: Vec<(u64, String)> = m
        .addresses
        .iter()
        .filter(|(_, at)| at.parse::<SocketAddr>().is_err())
        .map(|(&id, at)| (id, at.clone()))
        .collect();
    if names.is_empty() {
        return links.link_only(&member_links(cell, group, m, &BTreeMap::new()));
    }
    let (links, cell, m, latest) = (links.clone(), cell.clone(), m.clone(), latest.clone());
    glommio::spawn_local(async move {
        let resolve = move || names.into_iter().filter_map(|(id, at)| Some((id, at.to_socket_addrs().ok()?.next()?)));
        let resolved: BTreeMap<u64, SocketAddr> = glommio::executor().spawn_blocking(move || resolve().collect()).await;
        if latest.get() == call {
            links.link_only(&member_links(&cell, group, &m, &resolved));
        }
    })
    .detach();
}

/// The group's links as its members say: each member but this node, at
/// the address its change carried (numeric, or a host name `resolved`
/// gives; a member added since the cell began) or its `--cell` entry, plus
/// the group's index. A member with neither is left out, and said so.
fn member_links(
    cell: &CellConfig,
    group: usize,
    m: &Membership,
    resolved: &BTreeMap<u64, SocketAddr>,
) -> Vec<(u64, SocketAddr)> {
    let mut out = Vec::new();
    for id in members::all(&m.conf).into_iter().filter(|&id| id != cell.node_id) {
        let carried = m.addresses.get(&id).and_then(|at| at.parse().ok().or_else(|| resolved.get(&id).copied()));
        let base = carried.or_else(|| cell.voters.iter().find(|v| v.id == id).map(|v| v.addr));
        match base.and_then(|a: SocketAddr| Some(SocketAddr::new(a.ip(), a.port().checked_add(group as u16)?))) {
            Some(addr) => out.push((id, addr)),
            None => tracing::warn!("shard {group}: member {id} has no usable peer address: it is not linked"),
        }
    }
    out
}

/// What a boot does about segment shipping.
#[derive(Debug, PartialEq, Eq)]
enum ShipPlan {
    /// It has segments of its own: it opens them.
    Keep,
    /// It has none: it asks its peers.
    Ship,
    /// A copy was cut short (the state says "shipping"): these segments
    /// go first.
    AgainWithout(Vec<(u64, u64)>),
}

/// The plan for a replica holding segments `held`, its shipping state
/// `saved` as the last boot left it.
fn ship_plan(held: &[(u64, u64)], saved: Option<&[u8]>) -> ShipPlan {
    match (saved == Some(SHIPPING), held.is_empty()) {
        (true, _) => ShipPlan::AgainWithout(held.to_vec()),
        (false, true) => ShipPlan::Ship,
        (false, false) => ShipPlan::Keep,
    }
}

async fn remove_all(store: &DiskStore, segments: &[(u64, u64)]) -> std::io::Result<()> {
    for (no, _) in segments {
        store.remove(*no).await?;
    }
    Ok(())
}

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

/// The shard as its replica's applier, which with more than one shard a
/// node also tells the node's unity of each change of its lead.
struct Applies {
    shard: Rc<Shard<DiskStore>>,
    unity: Option<Arc<Unity>>,
}

impl Applier for Applies {
    fn apply(&self, records: &[Recovered]) -> Result<(), String> {
        Applier::apply(&*self.shard, records)
    }
    fn rebuild(&self, committed: &[Recovered]) -> Result<(), String> {
        Applier::rebuild(&*self.shard, committed)
    }
    fn lead_begins(&self) {
        Applier::lead_begins(&*self.shard);
        if let Some(u) = &self.unity {
            u.set_leads(self.shard.id, true);
        }
    }
    fn lead_ends(&self) {
        if let Some(u) = &self.unity {
            u.set_leads(self.shard.id, false);
        }
    }
}

/// The shard's way to its group's leader: the links, to whichever replica
/// the replica knows leads.
struct ToLeader {
    me: u64,
    group: u32,
    links: Rc<Links>,
    status: Rc<Status>,
    unity: Option<Arc<Unity>>,
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

    fn whole(&self) -> bool {
        self.unity.as_ref().is_none_or(|u| u.whole())
    }

    /// `cell::asking`, on this executor's timer.
    fn change_members(&self, change: MemberChange) -> Pin<Box<dyn Future<Output = Result<MemberOutcome, Error>>>> {
        let (status, group, me) = (self.status.clone(), self.group, self.me);
        let sleep: Sleep = Rc::new(|d| Box::pin(glommio::timer::sleep(d)));
        let (tick, deadline) =
            (Duration::from_millis(CELL_TICK_MS), Instant::now() + Duration::from_millis(CELL_MEMBER_WAIT_MS));
        let change = match change {
            MemberChange::Add { id, peer } => Change::Add { id, peer },
            MemberChange::Remove { id } => Change::Remove { id },
        };
        Box::pin(async move {
            let asking = Asking { status: &status, group, me, sleep: &sleep, tick, deadline };
            match asking.change(change).await {
                Ok(made) => Ok(MemberOutcome { group, role: role_named(made.role), index: made.index }),
                Err(NotMade::Conflict(why)) => Err(Error::Conflict(why)),
                Err(NotMade::Retry(why)) => Err(Error::Unavailable(why)),
            }
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

fn role_named(role: Role) -> MemberRole {
    match role {
        Role::Voter => MemberRole::Voter,
        Role::Learner => MemberRole::Learner,
        Role::Gone => MemberRole::Gone,
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

/// Connects the shard and its replica, starts the replica's loop on this
/// executor. Every group is steered to be led by one node: the first voter
/// of `--cell`, or with more than one shard a node (`unity`) the first
/// voter of `--cell` that is up (this node, or one whose link to this
/// replica is up), so that the groups come together again on one node
/// while the first is down. The replica publishes its state, and the bytes
/// its links carry, to `slot`.
pub(super) fn start(
    cell: &CellConfig,
    joined: Joined,
    shard: &Rc<Shard<DiskStore>>,
    slot: Arc<Slot>,
    unity: Option<Arc<Unity>>,
) {
    let Joined { mut replica, links, inbox } = joined;
    replica.set_applier(Rc::new(Applies { shard: shard.clone(), unity: unity.clone() }));
    replica.publish_to(slot.clone());
    replica.prefer(cell.voters[0].id);
    shard.set_writable(replica.status().leading.clone());
    shard.set_held_by_all(replica.status().held_by_all.clone());
    shard.set_lead_term(replica.status().lead_term.clone());
    let links = Rc::new(links);
    let (linked, group, cell_now, latest) = (links.clone(), shard.id, Rc::new(cell.clone()), Rc::new(Cell::new(0)));
    replica.on_members_changed(Box::new(move |m| relink(&linked, &cell_now, group, m, &latest)));
    links.serve_forwards(Rc::new(RunsForwards(Rc::downgrade(shard))));
    if unity.is_some() {
        steer_to_first_up(cell, links.clone(), replica.status());
    }
    let status = replica.status();
    let group = shard.id as u32;
    shard.set_forwarder(Rc::new(ToLeader { me: cell.node_id, group, links: links.clone(), status, unity }));
    let sleep: Sleep = Rc::new(|d| Box::pin(glommio::timer::sleep(d)));
    glommio::spawn_local(async move {
        let stop = Cell::new(false);
        let tick = Duration::from_millis(CELL_TICK_MS);
        let received = inbox.stream().inspect(|m| slot.add_received(board::message_bytes(m)));
        let out = Counting { out: &*links, slot: &slot };
        replica::run(replica, received, &out, &sleep, tick, &stop).await;
    })
    .detach();
}

/// Every tick: the first voter of `--cell` that is up, as this replica
/// sees it, becomes the one its group is steered to.
fn steer_to_first_up(cell: &CellConfig, links: Rc<Links>, status: Rc<Status>) {
    let (me, voters): (u64, Vec<u64>) = (cell.node_id, cell.voters.iter().map(|v| v.id).collect());
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(Duration::from_millis(CELL_TICK_MS)).await;
            let up = voters.iter().copied().find(|&v| v == me || links.is_connected(v));
            status.preferred.set(up);
        }
    })
    .detach();
}

/// On one shard of a node with more than one (`unity`): whenever the node
/// has come to lead every group, every shard goes through each step of
/// the retelling (`Shard::retell`), all through one before any begins the
/// next; then requests that span groups run here again.
pub(super) fn retell_when_whole(shard: Rc<Shard<DiskStore>>, shards: usize, unity: Arc<Unity>) {
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(Duration::from_millis(CELL_TICK_MS)).await;
            let Some(generation) = unity.due() else { continue };
            match retell_all(&shard, shards).await {
                Ok(()) => {
                    unity.told(generation);
                    tracing::info!("this node leads every group: its shards told one another again what they keep");
                }
                Err(e) => tracing::warn!("this node leads every group, and retelling failed ({e}): it tries again"),
            }
        }
    })
    .detach();
}

async fn retell_all(shard: &Shard<DiskStore>, shards: usize) -> Result<(), crate::protocol::Error> {
    for step in RetellStep::ALL {
        for target in 0..shards {
            shard.ask(target, |done| Control::Retell { step, done }).await??;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_linked_at_the_address_their_change_carried_else_their_cell_entry() {
        use crate::cell::config::{Secret, Voter};
        let voter = |id, at: &str| Voter { id, addr: at.parse().unwrap() };
        let cell = CellConfig {
            node_id: 1,
            voters: vec![voter(1, "10.0.0.1:7000"), voter(2, "10.0.0.2:7000"), voter(3, "10.0.0.3:7000")],
            secret: Secret::new(vec![7; 32]).unwrap(),
            join: false,
        };
        let addresses = [(3, "10.0.0.33:7100"), (4, "n4.cell.example:7000"), (5, "10.0.0.5:7000"), (6, "n6:1")];
        let mut m = Membership {
            addresses: addresses.into_iter().map(|(id, at)| (id, at.to_string())).collect(),
            ..Membership::default()
        };
        (m.conf.voters, m.conf.learners) = (vec![1, 2, 3, 4], vec![5, 6]);
        let resolved = BTreeMap::from([(4, "10.0.0.4:7000".parse().unwrap())]);
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        let want = vec![
            (2, at("10.0.0.2:7002")),
            (3, at("10.0.0.33:7102")),
            (4, at("10.0.0.4:7002")),
            (5, at("10.0.0.5:7002")),
        ];
        assert_eq!(member_links(&cell, 2, &m, &resolved), want, "6's name did not resolve: it is left out");
    }

    #[test]
    fn a_replica_ships_only_when_it_has_no_segment_or_a_copy_was_cut_short() {
        let held = [(0, 65_536), (1, 65_536)];
        assert_eq!(ship_plan(&[], None), ShipPlan::Ship, "a new node, or a lost disk");
        assert_eq!(ship_plan(&[], Some(SHIPPED)), ShipPlan::Ship, "shipped once, then its disk was lost");
        assert_eq!(ship_plan(&held, None), ShipPlan::Keep, "a restart on its data");
        assert_eq!(ship_plan(&held, Some(SHIPPED)), ShipPlan::Keep, "a restart after a copy that finished");
        assert_eq!(ship_plan(&held, Some(SHIPPING)), ShipPlan::AgainWithout(held.to_vec()), "a copy cut short");
        assert_eq!(ship_plan(&[], Some(SHIPPING)), ShipPlan::AgainWithout(vec![]));
    }
}
