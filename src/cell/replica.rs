//! One group's replica at work on its shard's executor: the loop that
//! steps peers' messages, ticks, proposes what the shard appended, hands
//! each turn to the log and reports what became durable.
//!
//! The shard appends records to the group's batched log as a single node
//! does; the replica, when it leads, closes what was appended since the
//! last proposal as one entry ([`Replica::propose`]). A record is
//! acknowledged and served once its batch is durable here and committed
//! ([`LocalLog::commit_to`], from each turn's committed entries). A replica
//! that stops leading discards what it appended but never proposed: those
//! waiters fail (the client retries), entries it proposed are either
//! committed by the next leader or cut back when they conflict.
//!
//! While it leads, the replica also confirms that it still does for the
//! shard's answers that claim freshness ([`super::confirm`]): each turn it
//! starts one read index round for every waiter queued (a heartbeat to each
//! follower), and settles the round when raft-rs confirms it, the lead ends
//! or its deadline (in ticks) passes.
//!
//! While it follows, it holds the shard's live reads until it applied
//! what the leader had committed when they came ([`super::catch_up`]): a
//! read index round asked through the leader, then the apply.
//!
//! No glommio here: the owner gives the loop its inbox (a stream of
//! messages), its outbox and a timer.

use super::board::{Members, Scalars, Slot};
use super::catch_up::CatchUps;
use super::confirm::Confirms;
use super::group::{self, FollowerView, Group, Refused};
use super::members::{self, Membership};
use super::store::{LogStore, StoreError};
use crate::storage::io::SegmentStore;
use crate::storage::log::{BatchEnd, LocalLog};
use crate::storage::record::KIND_CONF;
use crate::storage::RecordHeader;
use crate::storage::Recovered;
use futures_channel::oneshot;
use futures_util::stream::{Stream, StreamExt};
use raft::prelude::{ConfChangeV2, ConfState, Message};
use raft::StateRole;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a replica's messages go (the peer links).
pub trait Outbox {
    /// Queues `message` for `message.to`; false if it was dropped (Raft
    /// resends what matters).
    fn send(&self, message: Message) -> bool;
}

impl Outbox for super::link::Links {
    fn send(&self, message: Message) -> bool {
        super::link::Links::send(self, message)
    }
}

/// A timer the owner provides: resolves after the duration.
pub type Sleep = Rc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()>>>>;

/// A turn written to the log: once the log is durable to `lsn`, raft-rs
/// is told (`persisted`) and `after` is sent (votes, a follower's acks).
struct Written {
    number: u64,
    lsn: u64,
    after: Vec<Message>,
}

/// What the replica's shard does with records once committed (the server
/// connects the two: the cell knows no shard).
pub trait Applier {
    /// Committed records the shard did not write itself, in log order.
    fn apply(&self, records: &[Recovered]) -> Result<(), String>;
    /// The shard's state again from these committed records alone (it
    /// stopped leading holding records it wrote that may never commit).
    fn rebuild(&self, committed: &[Recovered]) -> Result<(), String>;
    /// The shard is about to write as its group's leader, every committed
    /// record applied: what it decides alone from then on (expiry) must not
    /// rest on what it could not see as a follower.
    fn lead_begins(&self);
    /// The shard stopped writing: its replica no longer leads (called
    /// before a rebuild, if there is one).
    fn lead_ends(&self) {}
}

/// What others on the executor may read of the replica.
#[derive(Debug, Default)]
pub struct Status {
    /// The shard's answers waiting for the replica to confirm it leads.
    pub confirms: Confirms,
    /// The shard's live reads waiting, while this replica follows, until
    /// it applied what the leader had committed when they came.
    pub catch_ups: CatchUps,
    /// It leads, and its term's first entry is committed (so every entry
    /// before it is applied): the shard may write (`Shard::set_writable`).
    pub leading: Rc<Cell<bool>>,
    /// The leader this replica knows of (itself included), where requests
    /// it may not run itself go.
    pub leader: Cell<Option<u64>>,
    /// While it leads: the newest entry every voter holds, as of its last
    /// tick (0 otherwise). Reclamation deletes no segment an entry after it
    /// began in.
    pub held_by_all: Rc<Cell<u64>>,
    /// The term of its lead, set as `leading` is (0 before it first leads):
    /// the shard names it in what only this term's leader may do (the key
    /// of a segment it moves to the object store).
    pub lead_term: Rc<Cell<u64>>,
    /// The replica every group of the cell is steered to be led by (its
    /// owner may change it as peers come and go).
    pub preferred: Cell<Option<u64>>,
    /// The members as this replica applied them.
    pub members: RefCell<Membership>,
    /// Membership changes asked of this replica (`cell::asking`), each
    /// proposed at its loop's next wake and answered with its index.
    pub asked: RefCell<VecDeque<Asked>>,
    /// While it leads: the learners that caught up, as of its last tick.
    pub caught_up: RefCell<Vec<u64>>,
}

/// A membership change asked of the leader, and where its index goes (or
/// why it was refused).
#[derive(Debug)]
pub struct Asked {
    pub change: ConfChangeV2,
    pub answer: oneshot::Sender<Result<u64, Refused>>,
}

/// What the replica's owner does when the members change (links them).
pub type OnMembers = Box<dyn Fn(&Membership)>;

pub struct Replica<S: SegmentStore> {
    id: u64,
    group: Group<LogStore<S>>,
    log: Rc<LocalLog<S>>,
    written: VecDeque<Written>,
    status: Rc<Status>,
    applier: Option<Rc<dyn Applier>>,
    /// The shard's state holds the log's records up to here: committed
    /// ones applied, and while it leads, all it wrote.
    applied_to: BatchEnd,
    /// Where it publishes its state for `/cellz`, `/leaderz` and metrics.
    board: Option<Arc<Slot>>,
    /// On a leader with a board: its proposals not yet committed, with
    /// when they were made (for the commit latency).
    proposed: VecDeque<(u64, Instant)>,
    /// Ticks so far: the clock of confirmation rounds' deadlines.
    ticks: u64,
    /// On a leader: the followers it said need a copy of the segments
    /// (said once each, until they no longer do).
    need_copy: Vec<u64>,
    on_members: Option<OnMembers>,
}

impl<S: SegmentStore> Replica<S> {
    /// The replica `id` of group `group` (its shard's index), of `voters`,
    /// over its recovered batched log. Entries the saved commit index
    /// covers count as applied.
    pub async fn open(id: u64, group: u32, voters: Vec<u64>, log: Rc<LocalLog<S>>) -> Result<Self, StoreError> {
        let store = LogStore::open(log.clone(), voters).await?;
        let commit = raft::Storage::initial_state(&store).map(|s| s.hard_state.commit).unwrap_or(0);
        log.commit_to(commit);
        let group = Group::new(&group::config(id, commit), store, &super::log::logger(group, id))
            .map_err(|e| StoreError::Batch(format!("the Raft group does not start: {e}")))?;
        let applied_to = committed_end(&log)?;
        // The shard writes only once this replica leads.
        log.set_appendable(false);
        Ok(Replica {
            id,
            group,
            log,
            written: VecDeque::new(),
            status: Rc::default(),
            applier: None,
            applied_to,
            board: None,
            proposed: VecDeque::new(),
            ticks: 0,
            need_copy: Vec::new(),
            on_members: None,
        }
        .with_members_published())
    }

    /// Calls `f` with the members now, and again whenever a change is
    /// applied.
    pub fn on_members_changed(&mut self, f: OnMembers) {
        f(&self.status.members.borrow());
        self.on_members = Some(f);
    }

    fn with_members_published(self) -> Self {
        self.members_changed();
        self
    }

    /// The members to `Status::members`, and to the owner.
    fn members_changed(&self) {
        let now = Membership {
            conf: self.group.members(),
            addresses: self.group.addresses().clone(),
            index: self.group.conf_applied(),
        };
        if members::role(&now.conf, self.id) == members::Role::Gone {
            tracing::warn!("replica {}: this node is no member of its group (members: {:?})", self.id, now.conf);
        }
        if let Some(f) = &self.on_members {
            f(&now);
        }
        *self.status.members.borrow_mut() = now;
    }

    /// Proposes the membership changes asked since the last wake.
    pub async fn propose_asked(&mut self) {
        loop {
            let Some(asked) = self.status.asked.borrow_mut().pop_front() else { return };
            let proposed = self.propose_conf_change(asked.change).await;
            let _ = asked.answer.send(proposed);
        }
    }

    /// Gives the replica its shard, which applies committed records (at
    /// boot the shard recovered the committed ones).
    pub fn set_applier(&mut self, applier: Rc<dyn Applier>) {
        self.applier = Some(applier);
    }

    /// Publishes the replica's state to `slot`: scalars each turn, the
    /// followers once a tick.
    pub fn publish_to(&mut self, slot: Arc<Slot>) {
        self.board = Some(slot);
    }

    pub fn status(&self) -> Rc<Status> {
        self.status.clone()
    }

    pub fn log(&self) -> &Rc<LocalLog<S>> {
        &self.log
    }

    pub fn step(&mut self, message: Message) {
        if let Err(e) = self.group.step(message) {
            tracing::debug!("replica {}: a message was not stepped: {e}", self.id);
        }
    }

    /// Steers leadership to replica `id` whenever it is up to date (so the
    /// groups of a cell are led by one node where they can be).
    pub fn prefer(&mut self, id: u64) {
        self.status.preferred.set(Some(id));
    }

    pub fn tick(&mut self) {
        self.group.tick();
        self.ticks += 1;
        self.status.confirms.expire(self.ticks);
        self.status.catch_ups.expire(self.ticks);
        if let Some(id) = self.status.preferred.get() {
            self.group.lead_toward(id);
        }
        self.status.held_by_all.set(self.group.held_by_all());
        *self.status.caught_up.borrow_mut() = self.group.caught_up_learners();
        let followers = match self.group.role() {
            StateRole::Leader => self.group.view().followers,
            _ => Vec::new(),
        };
        self.say_who_needs_a_copy(&followers);
        if let Some(board) = &self.board {
            board.publish_followers(&followers);
            let cs = self.group.members();
            let sorted = |mut ids: Vec<u64>| {
                ids.sort_unstable();
                ids
            };
            board.publish_members(&Members { voters: sorted(cs.voters), learners: sorted(cs.learners) });
        }
    }

    /// On a leader, says once (an error in the log; `/cellz` shows it as
    /// `needs_copy`) when a follower needs entries this log no longer
    /// holds: started with no data while its peers were down, it did not
    /// copy their segments, and no entry can bring it back. Emptied and
    /// started with `--cell-join` while they are up, it copies them.
    fn say_who_needs_a_copy(&mut self, followers: &[FollowerView]) {
        self.need_copy.retain(|id| followers.iter().any(|f| f.id == *id && f.needs_copy));
        for f in followers {
            if !f.needs_copy || self.need_copy.contains(&f.id) {
                continue;
            }
            tracing::error!(
                "replica {}: replica {} needs entries older than this log holds (their segments were reclaimed): \
                 it started with no data while its peers were down, so it copied none; stop node {}, empty its \
                 data directory and start it with --cell-join, and it copies their sealed segments \
                 (docs/operations.md, a node that lost its disk)",
                self.id,
                f.id,
                f.id
            );
            self.need_copy.push(f.id);
        }
    }

    /// On the leader, proposes what was appended since the last proposal
    /// as one entry, once the log holds every entry before it. Refused
    /// (not leading, too much in flight), the records wait; a replica that
    /// stops leading discards them at its next turn.
    pub fn propose(&mut self) -> Result<(), Refused> {
        if self.group.role() != StateRole::Leader
            || !self.log.has_unclosed()
            || self.group.last_index() != self.log.last_index()
        {
            return Ok(());
        }
        let end = self.log.tail_position();
        let batch = self.log.pending_batch().map_err(|_| Refused::Busy)?;
        let p = self.group.propose(batch.encode())?;
        if self.board.is_some() {
            self.proposed.push_back((p.index, Instant::now()));
        }
        if let Err(e) = self.log.close_batch(p.term, p.index, end) {
            // Raft holds an entry the log cannot close: stop writing.
            self.log.poison(e);
        }
        Ok(())
    }

    /// On the leader, proposes a membership change, one at a time: what the
    /// shard appended before it is proposed first, as its own entry, then
    /// the change goes into the log as one record (`KIND_CONF`), its own
    /// batch. Returns the change's index (answered, like any entry, once
    /// committed; applied by every replica as it is, `Group::ready`).
    /// Refused, nothing left in the log, when it does not lead, an earlier
    /// change is not yet applied, or the shard's records cannot be proposed
    /// now (busy).
    pub async fn propose_conf_change(&mut self, cc: ConfChangeV2) -> Result<u64, Refused> {
        if !self.group.may_change_members() {
            return Err(match self.group.role() {
                StateRole::Leader => Refused::Busy,
                _ => Refused::NotLeader { leader: self.group.leader() },
            });
        }
        self.propose()?;
        if self.log.has_unclosed() {
            return Err(Refused::Busy);
        }
        let header = RecordHeader { kind: KIND_CONF, stream_id: 0, incarnation: 0, stream_offset: 0, body_len: 0 };
        self.log.append(header, &prost::Message::encode_to_vec(&cc)).map_err(|_| Refused::Busy)?;
        let end = self.log.tail_position();
        let proposed = match self.log.pending_batch() {
            Ok(batch) => self.group.propose_conf_change(batch.encode(), cc),
            Err(_) => Err(Refused::Busy),
        };
        match proposed {
            Ok(p) => {
                if let Err(e) = self.log.close_batch(p.term, p.index, end) {
                    self.log.poison(e);
                }
                Ok(p.index)
            }
            Err(refused) => {
                // The record must not go out in the shard's next batch.
                if let Err(e) = self.log.cut_back(self.log.last_mark()).await {
                    self.log.poison(e);
                }
                Err(refused)
            }
        }
    }

    /// The members as this replica applied them.
    pub fn members(&self) -> ConfState {
        self.group.members()
    }

    /// One turn: hands every ready piece of work to the log, commits what
    /// the group committed, and reports the turns that became durable.
    pub async fn turn(&mut self, out: &impl Outbox) -> Result<(), StoreError> {
        if let Some(ctx) = self.status.confirms.start(self.id, self.ticks) {
            self.group.read_index(ctx);
        }
        // A leader's catch-ups need no round: `caught_up` below answers them.
        if !self.status.leading.get() {
            if let Some(ctx) = self.status.catch_ups.start(self.id, self.ticks) {
                self.group.read_index(ctx);
            }
        }
        let mut reads = Vec::new();
        while let Some(w) = self.group.ready() {
            reads.extend(w.reads);
            self.role_seen(w.role);
            if let Some(rc) = w.role {
                tracing::info!("replica {}: {:?} in term {}, leader {:?}", self.id, rc.role, rc.term, rc.leader);
                self.status.leader.set(rc.leader);
                if rc.role != StateRole::Leader {
                    // The shard first, so that no read sees a record the
                    // cut-back below discards.
                    self.stop_writing()?;
                    if self.log.has_unclosed() {
                        self.log.cut_back(self.log.last_mark()).await?;
                    }
                    self.log.abandon_waits();
                }
            }
            for m in w.send {
                out.send(m);
            }
            let lsn = self.group.store_mut().persist().await?;
            // Durability is cumulative: after a cut-back an earlier turn's
            // lsn may name discarded bytes; this turn's covers it.
            for earlier in &mut self.written {
                earlier.lsn = earlier.lsn.min(lsn);
            }
            self.written.push_back(Written { number: w.number, lsn, after: w.send_when_durable });
            if let Some(last) = w.apply.last() {
                self.log.commit_to(last.index);
                self.committed(last.index);
            }
        }
        if self.group.take_members_changed() {
            self.members_changed();
        }
        self.report_durable(out);
        self.apply(self.group.leads_committed())?;
        self.confirmed(&reads);
        self.caught_up();
        self.publish();
        Ok(())
    }

    /// Settles the confirmation rounds raft-rs answered. The read index is
    /// the commit index when the round began; a shard that writes holds
    /// every entry of the log in its state, so it holds that one: the
    /// check guards the claim, it never waits. A replica that stopped
    /// leading meanwhile refused its waiters already (`stop_writing`).
    fn confirmed(&self, reads: &[group::ReadIndex]) {
        for r in reads {
            if self.status.catch_ups.answered(&r.ctx, r.index) {
                continue;
            }
            let holds = self.status.leading.get() && r.index <= self.log.last_index();
            self.status.confirms.answered(&r.ctx, holds);
        }
    }

    /// Settles the follower's catch-up reads the replica has applied far
    /// enough for (the shard holds every committed entry once `apply` ran);
    /// once it leads, all of them.
    fn caught_up(&self) {
        if self.status.leading.get() {
            self.status.catch_ups.leads();
        } else {
            self.status.catch_ups.applied(self.log.committed_index());
        }
    }

    /// Counts a role change on the board; a replica that stops leading
    /// times none of its proposals any more.
    fn role_seen(&mut self, change: Option<group::RoleChange>) {
        let (Some(rc), Some(board)) = (change, &self.board) else { return };
        board.role_changed(rc.role, rc.leader);
        if rc.role != StateRole::Leader {
            self.proposed.clear();
        }
    }

    /// Records how long the proposals committed up to `index` took.
    fn committed(&mut self, index: u64) {
        let Some(board) = &self.board else { return };
        while self.proposed.front().is_some_and(|(i, _)| *i <= index) {
            let (_, at) = self.proposed.pop_front().expect("checked");
            board.committed_after(at.elapsed());
        }
    }

    /// The turn's scalars to the board (a few relaxed stores).
    fn publish(&self) {
        let Some(board) = &self.board else { return };
        let g = &self.group;
        board.publish(&Scalars {
            role: g.role(),
            term: g.term(),
            leader: g.leader(),
            commit: g.commit(),
            last_index: g.last_index(),
            // apply() ran this turn: the shard holds every committed
            // entry handed out so far.
            applied: self.log.committed_index(),
            leading: self.status.leading.get(),
        });
        board.publish_rounds(&self.status.confirms.outcomes());
        board.publish_catch_ups(&self.status.catch_ups.outcomes());
    }

    /// The shard stops writing. If it wrote records past the committed ones
    /// (applied to its state as it wrote them, and maybe never committed),
    /// its state is rebuilt from the committed records alone, at once.
    fn stop_writing(&mut self) -> Result<(), StoreError> {
        self.log.set_appendable(false);
        if !self.status.leading.replace(false) {
            return Ok(());
        }
        self.status.confirms.lead_ends();
        let committed = committed_end(&self.log)?;
        let Some(applier) = self.applier.clone() else { return Ok(()) };
        applier.lead_ends();
        if self.log.tail_position() > committed {
            // From the oldest segment held: older ones were reclaimed.
            let records = self.log.records_between(self.log.held_start(), committed)?;
            applier.rebuild(&records).map_err(apply_failed)?;
        }
        self.applied_to = committed;
        Ok(())
    }

    /// Keeps the shard's state in step with the log. While the shard writes
    /// (its replica leads), everything in the log is its own and already in
    /// its state. Otherwise it applies the committed records it lacks, and
    /// a leader whose term has committed an entry lets it write once every
    /// record in the log is applied.
    fn apply(&mut self, leads: bool) -> Result<(), StoreError> {
        if !leads {
            self.stop_writing()?;
        }
        if self.status.leading.get() {
            self.applied_to = self.log.tail_position();
            return Ok(());
        }
        let committed = committed_end(&self.log)?;
        if let Some(applier) = self.applier.clone() {
            if self.applied_to < committed {
                let records = self.log.records_between(self.applied_to, committed)?;
                applier.apply(&records).map_err(apply_failed)?;
                self.applied_to = committed;
            }
        } else {
            self.applied_to = committed;
        }
        if leads && self.log.tail_position() == self.applied_to {
            if let Some(applier) = &self.applier {
                applier.lead_begins();
            }
            self.status.lead_term.set(self.group.term());
            self.status.leading.set(true);
            self.status.confirms.lead_begins();
            self.log.set_appendable(true);
        }
        Ok(())
    }

    /// Tells raft-rs of the turns the log made durable, in order.
    fn report_durable(&mut self, out: &impl Outbox) {
        let durable = self.log.durable_lsn();
        while self.written.front().is_some_and(|w| w.lsn <= durable) {
            let w = self.written.pop_front().expect("checked");
            self.group.persisted(w.number);
            for m in w.after {
                out.send(m);
            }
        }
    }
}

/// What woke the loop.
enum Woken {
    Message(Option<Box<Message>>),
    Tick,
    Log,
    Confirm,
    CatchUp,
}

/// Runs `replica` until its inbox ends, `stop` is set (checked at each
/// wake), or its store fails (the log is poisoned then: nothing more is
/// acknowledged). Ticks every `tick`.
pub async fn run<S: SegmentStore>(
    mut replica: Replica<S>,
    inbox: impl Stream<Item = Message>,
    out: &impl Outbox,
    sleep: &Sleep,
    tick: Duration,
    stop: &Cell<bool>,
) {
    let mut inbox = pin!(inbox);
    let mut next_tick = Instant::now() + tick;
    let log = replica.log.clone();
    let status = replica.status();
    let _stopped = Stopped(status.clone(), replica.applier.clone());
    while !stop.get() {
        let woken = {
            let message = async { Woken::Message(inbox.next().await.map(Box::new)) };
            let timer = async {
                sleep(next_tick.saturating_duration_since(Instant::now())).await;
                Woken::Tick
            };
            let logged = async {
                futures_lite::future::or(log.appended(), log.flushed()).await;
                Woken::Log
            };
            let confirm = async {
                status.confirms.wanted().await;
                Woken::Confirm
            };
            let catch_up = async {
                status.catch_ups.wanted().await;
                Woken::CatchUp
            };
            let asked = futures_lite::future::or(confirm, catch_up);
            let woken = futures_lite::future::or(timer, futures_lite::future::or(logged, asked));
            futures_lite::future::or(message, woken).await
        };
        match woken {
            Woken::Message(None) => return,
            Woken::Message(Some(m)) => replica.step(*m),
            Woken::Tick | Woken::Log | Woken::Confirm | Woken::CatchUp => {}
        }
        // Whatever woke it: a steady stream of messages must not hold the
        // clock back (elections, check-quorum, confirmation deadlines).
        if Instant::now() >= next_tick {
            replica.tick();
            next_tick = Instant::now() + tick;
        }
        let _ = replica.propose();
        replica.propose_asked().await;
        if let Err(e) = replica.turn(out).await {
            tracing::error!("replica {}: its log failed: {e}; it stops and acknowledges nothing more", replica.id);
            log.poison(e);
            return;
        }
    }
}

/// Whatever ends the loop, the shard learns that its replica no longer
/// leads nor knows a leader: it writes nothing more, and every answer
/// waiting for a confirmation is refused (503) rather than left waiting.
struct Stopped(Rc<Status>, Option<Rc<dyn Applier>>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if self.0.leading.replace(false) {
            if let Some(applier) = &self.1 {
                applier.lead_ends();
            }
        }
        self.0.leader.set(None);
        self.0.confirms.lead_ends();
        // Membership changes asked and not proposed: refused (retried).
        self.0.asked.borrow_mut().clear();
    }
}

/// Where the committed entries end in `log`.
fn committed_end<S: SegmentStore>(log: &LocalLog<S>) -> Result<BatchEnd, StoreError> {
    let index = log.committed_index();
    if index == 0 {
        return Ok(crate::storage::log::LOG_START);
    }
    let mark = log.mark(index)?.ok_or(StoreError::Batch(format!("committed entry {index} is not in the log")))?;
    Ok(mark.end)
}

fn apply_failed(e: String) -> StoreError {
    StoreError::Batch(format!("the shard could not apply committed records: {e}"))
}
