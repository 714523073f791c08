//! The shard: where protocol rules meet storage. Every mutation of this
//! shard's streams is serialised through here, on this shard's thread.
//!
//! Rule for every answer: it describes only durable state. Writes are
//! acknowledged after their record's flush; reads first wait for the
//! stream's last record to be durable and never show a record past the
//! log's durable point.
//!
//! `router` picks the owner, `message` is what travels to it (data plane
//! and control plane), `dispatch` is the one road there, `mesh` carries it
//! between cores, `control` answers other shards. The shard's tables are a
//! `state::State` (synchronous, unit-tested); `records` builds every
//! record and applies it to the state, for the operations in `ops` (one
//! concern a file: plan on the state, append, apply, await durability) and
//! for `recover`; `stream` is a stream's state model; `tiering` moves
//! segments to the object store and runs reads that need cold blocks.

mod control;
mod dispatch;
pub mod forward;
pub mod mesh;
pub mod message;
mod ops;
mod producers;
mod records;
mod recover;
mod retell;
pub mod router;
mod state;
mod stream;
pub mod subs;
pub mod tiering;
mod tiering_cell;

use crate::metrics::{Family, Histo, Samples};
use crate::protocol::rules::{self, ProducerPolicy};
use crate::protocol::{Error, Incarnation, Live, Outcome, StreamKey, StreamOp, Surface};
use crate::quota::BucketUsage;
use crate::storage::io::SegmentStore;
use crate::storage::{self, Log};
use mesh::Peers;
pub use message::{Reply, ShardRequest};
use state::State;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters for /metrics and the benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShardStats {
    pub requests_local: u64,
    pub requests_remote_in: u64,
    pub appends: u64,
    pub append_bytes: u64,
    pub rejected_backpressure: u64,
    /// Segment files deleted because no record in them was needed any more.
    pub segments_reclaimed: u64,
    /// State or bucket records re-logged so that an old segment could go.
    pub relogged: u64,
    /// Creates refused by a bucket's max_streams (429).
    pub quota_refused_streams: u64,
    /// Writes refused by a bucket's max_bytes (507).
    pub quota_refused_bytes: u64,
    /// In a cell: requests sent to the group's leader, and those a
    /// follower sent here.
    pub requests_forwarded: u64,
    pub requests_forwarded_in: u64,
    /// Webhook POSTs made for the subscriptions this shard owns, and those
    /// that failed (no answer, or not 2xx: retried).
    pub webhook_deliveries: u64,
    pub webhook_failures: u64,
}

pub struct Shard<S: SegmentStore> {
    pub id: usize,
    pub shards: usize,
    log: Rc<Log<S>>,
    /// The tables every operation plans on and applies its records to.
    state: RefCell<State>,
    peers: RefCell<Option<Rc<dyn Peers>>>,
    pub stats: RefCell<ShardStats>,
    /// Microseconds from an append reaching this shard to its durable ack.
    append_us: RefCell<Histo>,
    /// Shutting down: live reads answer at once instead of waiting.
    stopping: Cell<bool>,
    now_ms: Box<dyn Fn() -> i64>,
    /// Timer for live reads, injected by the executor (keeps this file free
    /// of glommio). None: live reads answer at once as if timed out.
    sleep: RefCell<Option<Sleep>>,
    long_poll_timeout: Cell<Duration>,
    /// How many producers' state a stream may hold, and for how long an
    /// idle one is kept (`--max-producers-per-stream`, `--producer-idle-expiry-secs`).
    producer_policy: Cell<ProducerPolicy>,
    rng: Cell<u64>,
    /// Something may have freed a segment since the last reclaim pass.
    reclaim_due: Cell<bool>,
    /// Sealed segments at the end of the last reclaim pass.
    reclaim_sealed: Cell<usize>,
    /// In a cell: the newest segment a committed reclaim record named (its
    /// replica deletes every sealed segment up to it).
    reclaim_through: Cell<Option<u64>>,
    /// In a cell, on the leader: the segments a reclaim record it appended
    /// names, until it is committed (or not).
    reclaim_pending: Cell<Option<u64>>,
    /// In a cell, while its replica leads: the newest entry every voter
    /// holds (`cell::replica::Status::held_by_all`).
    held_by_all: RefCell<Option<Rc<Cell<u64>>>>,
    /// In a cell: the term of its replica's lead (`cell::replica::Status::lead_term`).
    lead_term: RefCell<Option<Rc<Cell<u64>>>>,
    /// In a cell: finishing the moves to the object store its replica
    /// applied failed last time (logged once until it works again).
    finish_failing: Cell<bool>,
    /// In a cell: the entry every voter must hold before free segments the
    /// last pass found can go (the pass runs again once they do).
    reclaim_waits_for: Cell<Option<u64>>,
    /// Appends replayed whose stream's create was reclaimed, waiting for
    /// the state record that adopts them: in a cell it may come in a later
    /// batch of committed records than they did.
    orphans: RefCell<HashMap<u64, stream::Stream>>,
    /// The quota counters this shard counts its streams into, by bucket.
    counted: RefCell<HashMap<String, Arc<BucketUsage>>>,
    /// This shard's share of `--hot-bytes` (0 without tiering).
    hot_budget: Cell<u64>,
    /// In a cell: whether this replica may write now (it leads its group);
    /// None for a single node, which always may.
    writable: RefCell<Option<Rc<Cell<bool>>>>,
    /// In a cell: the way to the group's leader (`forward`).
    forwarder: RefCell<Option<Rc<dyn forward::Forwarder>>>,
    /// Subscriptions: what every shard shares (None: the API answers 503).
    subs_env: RefCell<Option<Rc<subs::SubsEnv>>>,
    /// What every subscription selects (every shard holds all of them).
    registry: RefCell<subs::Registry>,
    /// Set when a subscription this shard owns may have work to hand out.
    subs_due: crate::notify::Notify,
    /// Webhook deliveries of the subscriptions this shard owns.
    deliveries: RefCell<HashMap<subs::SubId, subs::Attempt>>,
    /// In a cell: this replica began to lead, and its subscriptions have
    /// not yet heard the tails of the streams they select (a follower notes
    /// none): the delivery loop tells them before it hands out work.
    subs_resync: Cell<bool>,
}

/// An executor's timer: resolves after the duration.
pub type Sleep = Rc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()>>>>;

/// Whether a request writes to the log.
fn writes(req: &ShardRequest) -> bool {
    use crate::protocol::{BucketOp, StreamOp};
    match req {
        ShardRequest::Stream { op, .. } => matches!(
            op,
            StreamOp::Create(_)
                | StreamOp::Append(_)
                | StreamOp::Delete
                | StreamOp::SnapshotPublish(_)
                | StreamOp::SnapshotDelete { .. }
                | StreamOp::Retain { .. }
        ),
        ShardRequest::Bucket { op, .. } => matches!(op, BucketOp::Create | BucketOp::Delete),
        ShardRequest::ListBucket { .. } => false,
        ShardRequest::Subs(r) => r.op.writes(),
        // Through the group's replica, not the shard's records.
        ShardRequest::Members { .. } => false,
    }
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl<S: SegmentStore> Shard<S> {
    /// A storage failure as the client sees it, naming this shard and
    /// where its segments are (the storage error names the operation and
    /// the segment).
    pub(super) fn storage_err(&self, e: storage::Error) -> Error {
        let at = || format!("shard {} ({}): {e}", self.id, self.log.store().location());
        match e {
            storage::Error::Full => Error::Overloaded { retry_after_secs: crate::limits::RETRY_AFTER_SECS },
            storage::Error::TooLarge(_) => Error::TooLarge,
            storage::Error::NoSpace { .. } => Error::InsufficientStorage(at()),
            storage::Error::CutBack => Error::Discarded(at()),
            _ => Error::Unavailable(at()),
        }
    }

    /// Turns the subscription API on (the server loads the signing key and
    /// starts the delivery thread).
    pub fn set_subs(&self, env: Rc<subs::SubsEnv>) {
        *self.subs_env.borrow_mut() = Some(env);
    }

    pub fn set_peers(&self, peers: Rc<dyn Peers>) {
        *self.peers.borrow_mut() = Some(peers);
    }

    /// Gives the shard a timer and the long-poll timeout for live reads.
    pub fn set_live(&self, sleep: Sleep, long_poll_timeout: Duration) {
        *self.sleep.borrow_mut() = Some(sleep);
        self.long_poll_timeout.set(long_poll_timeout);
    }

    pub fn log(&self) -> &Rc<Log<S>> {
        &self.log
    }

    pub fn owned_buckets(&self) -> Vec<String> {
        self.state.borrow().buckets_owned.iter().cloned().collect()
    }

    pub fn stream_count(&self) -> usize {
        self.state.borrow().len()
    }

    /// Replaces the wall clock (milliseconds since the epoch): for tests of
    /// expiry, which would otherwise wait real seconds.
    #[doc(hidden)]
    pub fn set_clock(&mut self, f: Box<dyn Fn() -> i64>) {
        self.now_ms = f;
    }

    /// In a cell: the flag saying whether this replica leads its group, so
    /// may write; a write while it does not is refused (503).
    pub fn set_writable(&self, flag: Rc<Cell<bool>>) {
        *self.writable.borrow_mut() = Some(flag);
    }

    /// In a cell: where its replica publishes the newest entry every voter
    /// holds, which bounds what reclamation may delete.
    pub fn set_held_by_all(&self, held: Rc<Cell<u64>>) {
        *self.held_by_all.borrow_mut() = Some(held);
    }

    /// In a cell: where its replica publishes the term of its lead.
    pub fn set_lead_term(&self, term: Rc<Cell<u64>>) {
        *self.lead_term.borrow_mut() = Some(term);
    }

    /// Whether this shard may write: a single node's always may, a
    /// replica's while it leads its group.
    fn leads(&self) -> bool {
        self.writable.borrow().as_ref().is_none_or(|f| f.get())
    }

    /// Whether `req` may run here now: reads always; writes unless this is
    /// a replica of a cell that does not lead its group.
    fn admits(&self, req: &ShardRequest) -> Result<(), Error> {
        if self.leads() || !writes(req) {
            return Ok(());
        }
        Err(Error::Unavailable(format!(
            "shard {} does not lead its group on this node: writes go to the leader (retry there or later)",
            self.id
        )))
    }

    /// Whether `key`'s bucket exists, as this shard knows. In a cell of
    /// more than one shard a node that does not lead every group (a
    /// follower), a shard learns of no bucket another group created since
    /// its boot, but it applies its own streams' records: one it holds
    /// (even soft-deleted) was created in a bucket that existed.
    fn bucket_holds(&self, key: &StreamKey) -> bool {
        let st = self.state.borrow();
        st.buckets_known.contains(&key.bucket) || (!self.whole() && st.get(key).is_some())
    }

    /// Handles one request owned by this shard.
    pub async fn handle(&self, req: ShardRequest) -> Reply {
        self.admits(&req)?;
        match req {
            ShardRequest::Stream { key, surface, if_incarnation, op } => {
                if surface == Surface::Ds && !self.bucket_holds(&key) {
                    return Err(Error::NotFound);
                }
                self.stream_op(key, if_incarnation, op).await
            }
            ShardRequest::Bucket { bucket, op } => self.bucket_op(bucket, op).await,
            ShardRequest::ListBucket { bucket, list } => self.list_bucket(bucket, list).await,
            ShardRequest::Subs(r) => self.subs_op(r).await,
            ShardRequest::Members { change, .. } => self.change_members(change).await,
        }
    }

    /// This shard's storage and stream metrics (the HTTP edge adds its own).
    pub fn metrics(&self) -> Samples {
        let s = *self.stats.borrow();
        let l = self.log.stats();
        let id = self.id;
        let mut out = Samples::default();
        out.sample(Family::ShardRequests, id, "origin=\"local\"", s.requests_local);
        out.sample(Family::ShardRequests, id, "origin=\"remote\"", s.requests_remote_in);
        if self.forwarder.borrow().is_some() {
            out.sample(Family::CellForwarded, id, "direction=\"to_leader\"", s.requests_forwarded);
            out.sample(Family::CellForwarded, id, "direction=\"from_follower\"", s.requests_forwarded_in);
        }
        out.sample(Family::Appends, id, "", s.appends);
        out.sample(Family::AppendedBytes, id, "", s.append_bytes);
        out.histogram(Family::AppendSeconds, id, &self.append_us.borrow());
        out.sample(Family::BackpressureRejections, id, "", s.rejected_backpressure);
        out.sample(Family::Flushes, id, "", l.flushes);
        out.sample(Family::FlushedRecords, id, "", l.records_flushed);
        out.sample(Family::FlushedBytes, id, "", l.bytes_flushed);
        out.sample(Family::PaddedBytes, id, "", l.bytes_padded);
        out.histogram(Family::FlushBatchRecords, id, &l.batch_records);
        out.histogram(Family::FlushSeconds, id, &l.flush_io_us);
        out.histogram(Family::WriteSeconds, id, &l.write_us);
        out.histogram(Family::FdatasyncSeconds, id, &l.sync_us);
        out.sample(Family::PendingBytes, id, "", self.log.pending_bytes());
        out.sample(Family::Streams, id, "", self.state.borrow().len() as u64);
        out.sample(Family::DirectIo, id, "", self.log.store().write_is_durable() as u64);
        out.sample(Family::Segments, id, "", self.log.sealed_segments().len() as u64 + 1);
        out.sample(Family::SegmentsReclaimed, id, "", s.segments_reclaimed);
        out.sample(Family::LogPoisoned, id, "", u64::from(self.log.is_poisoned()));
        out.sample(Family::QuotaRefusals, id, "quota=\"max_streams\"", s.quota_refused_streams);
        out.sample(Family::QuotaRefusals, id, "quota=\"max_bytes\"", s.quota_refused_bytes);
        out.sample(Family::WebhookDeliveries, id, "outcome=\"ok\"", s.webhook_deliveries - s.webhook_failures);
        out.sample(Family::WebhookDeliveries, id, "outcome=\"failed\"", s.webhook_failures);
        let (subs, pending) = {
            let st = self.state.borrow();
            let pending = st.subs.values().flat_map(|e| e.sub.streams.values()).filter(|c| c.pending()).count();
            (st.subs.len() as u64, pending as u64)
        };
        out.sample(Family::Subscriptions, id, "", subs);
        out.sample(Family::SubscriptionPendingStreams, id, "", pending);
        if self.log.tiering().is_some() {
            self.tier_metrics(&mut out, &l.tier);
        }
        out
    }

    /// Graceful shutdown: live reads waiting here answer now (as at their
    /// timeout), and new ones answer at once.
    pub fn begin_shutdown(&self) {
        self.stopping.set(true);
        for (_, s) in self.state.borrow_mut().iter_mut() {
            for w in s.waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// Runs `op` on the stream at `key` if it is the creation
    /// `if_incarnation` names (when it names one).
    pub(super) async fn stream_op(&self, key: StreamKey, if_incarnation: Option<Incarnation>, op: StreamOp) -> Reply {
        let arrived = Instant::now();
        // Let any in-flight record of this stream land first, so what we
        // check and report is what the disk holds.
        let pending = self.state.borrow().get(&key).map(|s| s.last_lsn);
        if let Some(lsn) = pending {
            if let Err(e) = self.log.durable(lsn).await {
                // A failed write poisoned the log: writes fail from now on,
                // but reads still serve the durable part of a stream whose
                // create is durable.
                let read = matches!(op, StreamOp::Read(_) | StreamOp::Head { .. });
                let created = self.state.borrow().get(&key).is_some_and(|s| s.created_lsn <= self.log.durable_lsn());
                if !(read && created) {
                    return Err(self.storage_err(e));
                }
            }
        }
        self.expire_if_due(&key).await;
        if self.state.borrow().get(&key).is_some_and(|s| s.soft_deleted) {
            return Err(match op {
                StreamOp::Create(_) => Error::Conflict("a deleted stream with live forks still holds this path".into()),
                _ => Error::Gone("the stream was deleted; its forks still read its data".into()),
            });
        }
        // Checked here, once for every op, with no await between it and
        // the op's own plan: each op decides (and logs) before it first
        // yields, so a passed check still holds when it writes.
        let creates = matches!(op, StreamOp::Create(_));
        rules::check_incarnation(if_incarnation, self.state.borrow().incarnation(&key), creates)?;
        // Subscriptions hear of new data once it is acknowledged.
        let watched = (!self.registry.borrow().is_empty()).then(|| key.clone());
        let reply = match op {
            StreamOp::Create(c) => self.create(key, c).await,
            StreamOp::Append(a) => {
                let r = self.append(key, a).await;
                if r.is_ok() {
                    self.append_us.borrow_mut().record(arrived.elapsed().as_micros() as u64);
                }
                r
            }
            StreamOp::Read(r) if r.live == Live::No => {
                self.with_cold(|| self.read(&key, r.clone())).await.map(Outcome::Read)
            }
            StreamOp::Read(r) if r.live == Live::Sse => {
                self.with_cold(|| self.read_sse(&key, r.clone())).await.map(Outcome::Read)
            }
            StreamOp::Read(r) => self.read_live(&key, r, if_incarnation).await,
            StreamOp::Head { if_none_match } => {
                ops::head(&self.state.borrow(), &key, if_none_match.as_deref(), self.log.durable_lsn())
            }
            StreamOp::Delete => self.delete(key).await,
            StreamOp::SnapshotPublish(r) => self.snapshot_publish(key, r).await,
            StreamOp::SnapshotLatest => ops::latest_snapshot(&self.state.borrow(), &key),
            StreamOp::SnapshotRead { offset } => self.with_cold(|| self.snapshot_read(&key, offset)).await,
            StreamOp::SnapshotDelete { offset } => self.snapshot_delete(key, offset).await,
            StreamOp::Bootstrap => self.with_cold(|| self.bootstrap(&key)).await,
            StreamOp::Retain { offset } => self.retain(key, offset).await,
        };
        if let (Some(key), Ok(o)) = (watched, &reply) {
            if let Some((tail, creation)) = new_data_tail(o) {
                self.notify_subs(&key, tail, &creation.token()).await;
            }
        }
        reply
    }
}

/// The tail after an answer that added data (an append that wrote, a new
/// stream created with data), which subscriptions hear of, and the
/// creation it is of.
fn new_data_tail(o: &Outcome) -> Option<(crate::protocol::Offset, Incarnation)> {
    match o {
        Outcome::Appended { info, duplicate: false, close_only: false, .. } => {
            Some((info.next_offset, info.incarnation))
        }
        Outcome::Created { info, new: true } if info.next_offset > crate::protocol::Offset::ZERO => {
            Some((info.next_offset, info.incarnation))
        }
        _ => None,
    }
}
