//! One Raft group as a replica drives it: tikv's raft-rs `RawNode`, sans-I/O.
//!
//! The owner (a shard's executor in a cell; the seeded scheduler in
//! `tests/cell_sim.rs`) calls [`Group::tick`] on its timer, [`Group::step`]
//! for each message from a peer and [`Group::propose`] for new data, then
//! drains [`Group::ready`] into [`Work`]: messages to send at once, entries
//! and a hard state to make durable, messages to send only once they are,
//! committed entries to apply, and the answers to proposals. When a write
//! is durable the owner says so with [`Group::persisted`].
//!
//! An answer is never given early: a proposal is [`Answer::Committed`] only
//! when its entry, with the term it was proposed in, is in a committed
//! prefix (durable on a majority: a leader counts itself only once its own
//! write is durable, raft-rs's `on_persist_ready`). A leader that loses its
//! role answers its pending proposals [`Answer::Unknown`] (a later leader
//! may still commit them, so the client must retry idempotently); an entry
//! replaced by another term's is [`Answer::Lost`].

use super::amnesia::{self, LogTip, VoteGuard};
use super::members::{self, Addresses};
use crate::limits::{CELL_APPLY_BYTES_PER_TURN, CELL_ENTRY_BYTES_MAX, CELL_UNCOMMITTED_BYTES_MAX};
use raft::prelude::{ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, HardState, Message};
use raft::{Config, RawNode, StateRole, Storage};
use std::collections::BTreeMap;

/// What the group needs of the storage under its `RawNode` besides reading:
/// raft-rs reads back what [`Group::ready`] hands out before it is durable,
/// so the store takes it first (durability is the owner's, reported
/// through [`Group::persisted`]). A store a [`Group`] is made over must hold
/// only what is durable: raft-rs takes all of it as persisted.
pub trait GroupStore: Storage {
    /// Appends `entries`, first replacing any entries from `entries[0]`'s
    /// index on (a follower's conflicting suffix).
    fn append(&mut self, entries: &[Entry]);
    /// The term, vote and commit index to keep.
    fn set_hard_state(&mut self, hs: &HardState);
    /// The membership to keep, which the change of entry `index` led to,
    /// with the members' peer addresses.
    fn set_conf_state(&mut self, cs: &ConfState, index: u64, addresses: &Addresses);
    /// The members' peer addresses as kept (none: those of `--cell`).
    fn addresses(&self) -> Addresses {
        Addresses::new()
    }
    /// The index of the change the kept membership results from (0: none).
    /// A committed change at or below it is in the membership already.
    fn conf_index(&self) -> u64;
}

/// raft-rs's in-memory store, for what keeps replicas in memory: unit
/// tests, the simulation (`tests/cell_sim.rs`, which models the disk
/// beside it), the real-socket tests and the `raft_group` benchmark.
impl GroupStore for raft::storage::MemStorage {
    fn append(&mut self, entries: &[Entry]) {
        self.wl().append(entries).expect("entries follow the log");
    }
    fn set_hard_state(&mut self, hs: &HardState) {
        self.wl().set_hardstate(hs.clone());
    }
    fn set_conf_state(&mut self, cs: &ConfState, _index: u64, _addresses: &Addresses) {
        self.wl().set_conf_state(cs.clone());
    }
    /// None recorded: every committed change is applied as it is handed
    /// out (a replica kept in memory is not handed one out twice).
    fn conf_index(&self) -> u64 {
        0
    }
}

/// Where a proposal went: its log position, to be answered by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    pub index: u64,
    pub term: u64,
}

/// Why a proposal was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Only the leader proposes; `leader` is the one this replica knows of.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<u64> },
    /// The leader is handing over or holds `CELL_UNCOMMITTED_BYTES_MAX`
    /// of uncommitted data.
    #[error("the leader cannot take proposals now")]
    Busy,
    /// More than `CELL_ENTRY_BYTES_MAX` in one entry.
    #[error("an entry of {len} bytes is over the {max} a peer link carries")]
    TooLarge { len: usize, max: usize },
}

/// The outcome of a proposal, by its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// In the committed prefix with its own term: acknowledge it.
    Committed { index: u64 },
    /// This replica stopped leading before it committed: the entry may
    /// still be committed by another leader, or not.
    Unknown { index: u64 },
    /// Another term's entry was committed at its index: it never will be.
    /// (Rare: a deposed leader answers `Unknown` first, which ends the wait.)
    Lost { index: u64 },
}

/// The answer to [`Group::read_index`]: a read that started before it
/// asked sees every write committed before then once this replica has
/// applied up to `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadIndex {
    pub ctx: Vec<u8>,
    pub index: u64,
}

/// A replica's role, leader and term after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleChange {
    pub role: StateRole,
    pub leader: Option<u64>,
    pub term: u64,
}

/// What `/cellz` shows of one group on one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub role: StateRole,
    pub term: u64,
    pub leader: Option<u64>,
    pub commit: u64,
    pub last_index: u64,
    /// On a leader, each other voter: how far its log matches this one's.
    pub followers: Vec<FollowerView>,
}

/// A follower as its leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerView {
    pub id: u64,
    /// The highest index known to be in its log.
    pub matched: u64,
    /// Entries it lacks of the leader's log.
    pub lag: u64,
    /// It needs entries older than the leader's log holds (reclaimed):
    /// only a copy of the sealed segments, at its boot, brings it back.
    pub needs_copy: bool,
}

/// One turn of the group's output, in the order the owner handles it.
#[derive(Debug, Default)]
pub struct Work {
    /// Give this number to [`Group::persisted`] once `entries` and
    /// `hard_state` are durable (writes complete in order).
    pub number: u64,
    /// Send now: a leader's appends and heartbeats go out while its own
    /// write runs (the Raft thesis, 10.2.1).
    pub send: Vec<Message>,
    /// Make durable, replacing any entries from the first one's index on.
    pub entries: Vec<Entry>,
    pub hard_state: Option<HardState>,
    /// Send only once this turn's write is durable (votes, follower acks).
    pub send_when_durable: Vec<Message>,
    /// Committed, in index order: apply them before the next turn.
    pub apply: Vec<Entry>,
    pub answers: Vec<Answer>,
    /// Read indexes confirmed by the leader of this turn.
    pub reads: Vec<ReadIndex>,
    pub role: Option<RoleChange>,
}

/// The settings every replica of a cell runs with, `ticks` of the owner's
/// timer apart. Pre-vote keeps a node that was cut off from deposing a
/// working leader when it comes back; check-quorum makes a leader that
/// cannot hear a majority step down, so it stops taking proposals.
pub fn config(id: u64, applied: u64) -> Config {
    Config {
        id,
        applied,
        election_tick: 10,
        heartbeat_tick: 2,
        pre_vote: true,
        check_quorum: true,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        max_uncommitted_size: CELL_UNCOMMITTED_BYTES_MAX,
        max_committed_size_per_ready: CELL_APPLY_BYTES_PER_TURN,
        ..Config::default()
    }
}

/// One replica of one group.
pub struct Group<S: GroupStore> {
    node: RawNode<S>,
    /// Proposals of this replica's leadership not yet answered: index → term.
    pending: BTreeMap<u64, u64>,
    /// Whether it may vote yet, having started knowing nothing.
    votes: VoteGuard,
    /// Ticks so far, and the hand-over `lead_toward` last began: (term,
    /// replica, tick). One that did not take is not tried again for
    /// `LEAD_TOWARD_RETRY_TICKS`.
    ticks: u64,
    handing: Option<(u64, u64, u64)>,
    /// Since when `lead_toward` has wanted to hand the lead to a replica:
    /// (term, replica, tick).
    steering: Option<(u64, u64, u64)>,
    /// Refusals this replica sends its leader of its own accord, with the
    /// next turn's messages ([`amnesia::lost_notice`]), and the tick the
    /// last one was made.
    notices: Vec<Message>,
    noticed_at: Option<u64>,
    /// On a leader: followers that need entries older than its log's
    /// first (`reprobe_stranded`), with the ticks each has been so.
    stranded: BTreeMap<u64, u64>,
    /// The tick each peer was last heard from (`steer_target`).
    heard: BTreeMap<u64, u64>,
    /// The members' peer addresses, as the applied changes left them.
    addresses: Addresses,
    /// A membership change was applied since the owner last asked.
    members_changed: bool,
    /// The index of the last membership change applied (0: none).
    conf_applied: u64,
}

/// How often at most a replica that lost entries tells its leader so
/// unasked (a heartbeat in every other tick would ask it more often).
const LOST_NOTICE_TICKS: u64 = 10;

/// How long `lead_toward` waits before it tries again a hand-over that did
/// not take (the replica refused it: one that lost its data, say), in ticks.
const LEAD_TOWARD_RETRY_TICKS: u64 = 100;
/// How long `lead_toward` waits for a tick at which the preferred replica
/// holds the whole log before it takes one a few entries behind: under a
/// steady stream of proposals such a tick may never come (a node's groups
/// left led by two nodes would then stay so).
const LEAD_TOWARD_PATIENCE_TICKS: u64 = 20;
/// How many entries behind the preferred replica may be then; raft-rs
/// sends them before it hands over, holding new proposals meanwhile (one
/// round trip: they are refused, and run again).
const LEAD_TOWARD_LAG_MAX: u64 = 16;
/// How recently a voter must have been heard from for `lead_toward` to
/// steer to it, in ticks: an election timeout (a leader hears each
/// follower at every other tick).
const STEER_HEARD_TICKS: u64 = 10;
/// Whether follower `id` (its progress `pr`) needs entries from before the
/// log's `first`, which only a copy of the sealed segments gives it: it is
/// already among the `stranded`, or its next entry comes before `first`.
fn needs_copy(stranded: &BTreeMap<u64, u64>, id: u64, pr: &raft::Progress, first: u64) -> bool {
    stranded.contains_key(&id) || pr.next_idx < first
}

/// How often a leader asks a stranded follower again where its log ends,
/// in ticks (`reprobe_stranded`).
const REPROBE_TICKS: u64 = 10;

impl<S: GroupStore> Group<S> {
    /// A replica over `store` (empty, or what survived a restart; its
    /// `initial_state` names the voters).
    pub fn new(config: &Config, store: S, logger: &slog::Logger) -> raft::Result<Self> {
        let (addresses, conf_applied) = (store.addresses(), store.conf_index());
        let node = RawNode::new(config, store, logger)?;
        let votes = VoteGuard::at_boot(node.raft.term);
        if votes != VoteGuard::Open {
            tracing::info!(
                "replica {}: starts in term 0 with {} entries (none of its own: an empty log, or segments copied from its peers); it votes for a candidate holding a log only once it has caught up with a leader (it may be a voter whose data was lost)",
                config.id,
                node.raft.raft_log.last_index()
            );
        }
        Ok(Group {
            node,
            pending: BTreeMap::new(),
            votes,
            ticks: 0,
            handing: None,
            steering: None,
            notices: Vec::new(),
            noticed_at: None,
            stranded: BTreeMap::new(),
            heard: BTreeMap::new(),
            addresses,
            members_changed: false,
            conf_applied,
        })
    }

    /// One tick of the owner's timer; true when the group has work. A
    /// replica that may have lost entries it acknowledged and holds a log
    /// does not tick towards an election (`VoteGuard::may_campaign`): its
    /// election clock stands still until a leader caught it up.
    pub fn tick(&mut self) -> bool {
        self.ticks += 1;
        let leads = self.node.raft.state == StateRole::Leader;
        if !leads && !self.votes.may_campaign(self.node.raft.raft_log.last_index()) {
            return false;
        }
        let work = self.node.tick();
        // A lone voter wins its election within the tick.
        self.open_if_elected();
        self.reprobe_stranded();
        work
    }

    /// On a leader, follows the followers that need entries older than its
    /// log's first (reclaimed segments; raft-rs would send a snapshot,
    /// which this build does not make): one stays so until its match
    /// reaches the log's start. raft-rs learns where a follower's log ends
    /// only from its answer to an append, and it sends none to a follower
    /// it has nothing to send: one that copied the segments meanwhile (its
    /// node emptied and started with `--cell-join`) would never be caught
    /// up. So every `REPROBE_TICKS` the leader probes it again from its own
    /// last entry; the refusal names where the follower's log ends.
    fn reprobe_stranded(&mut self) {
        let raft = &mut self.node.raft;
        if raft.state != StateRole::Leader {
            self.stranded.clear();
            return;
        }
        let (me, first, last) = (raft.id, raft.raft_log.first_index(), raft.raft_log.last_index());
        for (&id, pr) in raft.mut_prs().iter_mut() {
            if id == me || pr.matched + 1 >= first {
                self.stranded.remove(&id);
                continue;
            }
            if !needs_copy(&self.stranded, id, pr, first) {
                continue;
            }
            let ticks = self.stranded.entry(id).or_insert(0);
            *ticks += 1;
            if ticks.is_multiple_of(REPROBE_TICKS) {
                // (Probing: a snapshot raft-rs asked for is never made.)
                pr.become_probe();
                pr.next_idx = last + 1;
            }
        }
    }

    /// A replica that leads now won an election: its vote guard opens.
    fn open_if_elected(&mut self) {
        if self.role() == StateRole::Leader && self.votes.elected() {
            tracing::info!("replica {}: elected: it votes as Raft says from now on", self.node.raft.id);
        }
    }

    /// A message from a peer, under the rules for a voter that lost its
    /// data ([`super::amnesia`]). Messages of an older term or for a
    /// replica that has moved on are ignored by raft-rs itself.
    pub fn step(&mut self, mut msg: Message) -> raft::Result<()> {
        self.heard.insert(msg.from, self.ticks);
        if !self.votes.admits(&msg) {
            tracing::debug!(
                "replica {}: {:?} from {} withheld: not caught up yet",
                self.node.raft.id,
                msg.get_msg_type(),
                msg.from
            );
            return Ok(());
        }
        self.notice_lost(&msg);
        amnesia::clamp_heartbeat(&mut msg, self.tip());
        self.hand_over_if_lost(&msg);
        let (kind, from, term, commit) = (msg.get_msg_type(), msg.from, msg.term, msg.commit);
        let stepped = self.node.step(msg);
        // Only an append from the leader of this replica's current term
        // names the commit index to catch up to (not one of a deposed
        // leader, which raft-rs ignored).
        if term == self.term() && self.leader() == Some(from) {
            self.votes.heard(kind, commit);
        }
        if self.votes.committed(self.commit()) {
            tracing::info!(
                "replica {}: caught up with its leader (commit {}): it votes again",
                self.node.raft.id,
                self.commit()
            );
        }
        self.open_if_elected();
        stepped
    }

    /// A heartbeat that names a commit index past this replica's log: it
    /// lost entries it had acknowledged (a leader sends no more than its
    /// record of the follower says it holds). A leader with nothing new
    /// sends it no append, so would never learn it from a refusal: the
    /// replica tells it, at most once every LOST_NOTICE_TICKS.
    fn notice_lost(&mut self, msg: &Message) {
        let due =
            self.noticed_at.is_none_or(|at| self.ticks >= at + LOST_NOTICE_TICKS) && msg.term >= self.node.raft.term;
        if let Some(notice) = amnesia::lost_notice(msg, self.tip()).filter(|_| due) {
            tracing::info!(
                "replica {}: its leader {} counts on entries up to {} it does not hold (its log ends at {}): it says so",
                self.node.raft.id,
                msg.from,
                msg.commit,
                notice.reject_hint
            );
            self.noticed_at = Some(self.ticks);
            self.notices.push(notice);
        }
    }

    fn tip(&self) -> LogTip {
        let log = &self.node.raft.raft_log;
        LogTip { last_index: log.last_index(), last_term: log.last_term(), committed: log.committed }
    }

    /// On the leader: a follower that lost entries it had acknowledged
    /// (`amnesia::lost_entries`) cannot be caught up by this leader, whose
    /// record of it cannot go back: the lead goes to the voter furthest
    /// along besides it, which starts that record afresh.
    fn hand_over_if_lost(&mut self, msg: &Message) {
        let raft = &self.node.raft;
        if raft.state != StateRole::Leader || raft.lead_transferee.is_some() {
            return;
        }
        let Some(pr) = raft.prs().get(msg.from) else { return };
        if !amnesia::lost_entries(msg, pr.matched) {
            return;
        }
        let (me, lost, matched) = (raft.id, msg.from, pr.matched);
        let to = raft.prs().iter().filter(|(id, _)| **id != me && **id != lost).max_by_key(|(_, p)| p.matched);
        let Some((&to, _)) = to else { return };
        tracing::warn!(
            "replica {me}: replica {lost} lost entries it had acknowledged (up to {matched}; its log ends at {}): handing the lead to {to}, which catches it up",
            msg.reject_hint
        );
        self.node.transfer_leader(to);
    }

    /// Proposes `data` as one entry; answered later by its index.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<Proposal, Refused> {
        if self.node.raft.state != StateRole::Leader {
            return Err(Refused::NotLeader { leader: self.leader() });
        }
        if data.len() > CELL_ENTRY_BYTES_MAX {
            return Err(Refused::TooLarge { len: data.len(), max: CELL_ENTRY_BYTES_MAX });
        }
        self.node.propose(vec![], data).map_err(|_| Refused::Busy)?;
        let p = Proposal { index: self.node.raft.raft_log.last_index(), term: self.node.raft.term };
        self.pending.insert(p.index, p.term);
        Ok(p)
    }

    /// Proposes a membership change (one at a time) as one entry, `batch`
    /// being the encoded batch of its log record, which followers write;
    /// answered by index like any proposal. Refused while an earlier change
    /// is not yet applied.
    pub fn propose_conf_change(&mut self, batch: Vec<u8>, cc: ConfChangeV2) -> Result<Proposal, Refused> {
        if !self.may_change_members() {
            return Err(match self.node.raft.state {
                StateRole::Leader => Refused::Busy,
                _ => Refused::NotLeader { leader: self.leader() },
            });
        }
        self.node.propose_conf_change(batch, cc).map_err(|_| Refused::Busy)?;
        let p = Proposal { index: self.node.raft.raft_log.last_index(), term: self.node.raft.term };
        self.pending.insert(p.index, p.term);
        Ok(p)
    }

    /// Whether a membership change may be proposed here now: it leads, and
    /// no change it holds is still to be applied.
    pub fn may_change_members(&self) -> bool {
        self.node.raft.state == StateRole::Leader && !self.node.raft.has_pending_conf()
    }

    /// The members as this replica applied them.
    pub fn members(&self) -> ConfState {
        self.node.raft.prs().conf().to_conf_state()
    }

    /// The members' peer addresses as the applied changes left them (none
    /// for the cell's first voters: `--cell` names them).
    pub fn addresses(&self) -> &Addresses {
        &self.addresses
    }

    /// The index of the last membership change applied (0: none).
    pub fn conf_applied(&self) -> u64 {
        self.conf_applied
    }

    /// Whether a membership change was applied since the last call.
    pub fn take_members_changed(&mut self) -> bool {
        std::mem::take(&mut self.members_changed)
    }

    /// On a leader: the learners that hold every committed entry but at
    /// most `LEAD_TOWARD_LAG_MAX` (under a steady stream of proposals the
    /// last few are always on their way) and were heard from within an
    /// election timeout (raft-rs counts a member just added as active):
    /// ready to be made voters. Sorted; none elsewhere.
    pub fn caught_up_learners(&self) -> Vec<u64> {
        let raft = &self.node.raft;
        if raft.state != StateRole::Leader {
            return Vec::new();
        }
        let committed = raft.raft_log.committed;
        let heard = |id: &u64| self.heard.get(id).is_some_and(|&t| self.ticks <= t + STEER_HEARD_TICKS);
        let near = |id: &u64| raft.prs().get(*id).is_some_and(|p| p.matched + LEAD_TOWARD_LAG_MAX >= committed);
        let caught_up = |id: &u64| heard(id) && near(id);
        let mut ids: Vec<u64> = raft.prs().conf().learners().iter().copied().filter(caught_up).collect();
        ids.sort_unstable();
        ids
    }

    /// Applies the membership changes among committed `entries` that the
    /// kept membership does not hold yet (a restarted replica is handed out
    /// again entries after its saved commit index), and keeps the result.
    /// A change raft-rs finds invalid is skipped, by every replica alike.
    fn apply_conf_changes(&mut self, entries: &[Entry]) {
        let me = self.node.raft.id;
        for e in entries.iter().filter(|e| e.get_entry_type() == EntryType::EntryConfChangeV2) {
            if e.index <= self.node.store().conf_index() {
                continue;
            }
            let applied =
                <ConfChangeV2 as prost::Message>::decode(&e.data[..]).map_err(|err| err.to_string()).and_then(|cc| {
                    self.step_down_if_removed(&cc);
                    Ok((self.node.apply_conf_change(&cc).map_err(|err| err.to_string())?, cc))
                });
            match applied {
                Ok((cs, cc)) => {
                    members::note(&mut self.addresses, &cc);
                    tracing::info!("replica {me}: members from entry {} on: {cs:?} at {:?}", e.index, self.addresses);
                    self.node.mut_store().set_conf_state(&cs, e.index, &self.addresses);
                    self.members_changed = true;
                    self.conf_applied = e.index;
                }
                Err(why) => {
                    tracing::error!("replica {me}: the membership change of entry {} is skipped: {why}", e.index)
                }
            }
        }
    }

    /// A leader whose own removal committed (a change proposed by an
    /// earlier leader, say: a leader asked to remove itself is made a
    /// learner first, `members::Step::HandOver`) stops leading before it
    /// applies it: raft-rs's leader must be among its own members.
    fn step_down_if_removed(&mut self, cc: &ConfChangeV2) {
        let raft = &mut self.node.raft;
        let removes_me =
            cc.changes.iter().any(|c| c.node_id == raft.id && c.change_type() == ConfChangeType::RemoveNode);
        if removes_me && raft.state == StateRole::Leader {
            tracing::warn!("replica {}: its own removal is committed while it leads: it steps down first", raft.id);
            let term = raft.term;
            raft.become_follower(term, raft::INVALID_ID);
        }
    }

    /// Asks for the index a linearizable read must wait for: the leader
    /// confirms with a heartbeat round to a majority that it still leads
    /// (raft-rs's `ReadOnlyOption::Safe`), through the leader if this
    /// replica follows. The answer comes in [`Work::reads`] under `ctx`, or
    /// never (no leader, a leader that has not yet committed in its term, a
    /// lost message): the caller retries or gives up at its deadline.
    /// raft-rs matches answers by `ctx` across the group, so it must be
    /// unique in the cell (the node id in it, say).
    pub fn read_index(&mut self, ctx: Vec<u8>) {
        self.node.read_index(ctx);
    }

    /// The next turn of work, or None when there is nothing to do.
    pub fn ready(&mut self) -> Option<Work> {
        if !self.node.has_ready() {
            return None;
        }
        let mut rd = self.node.ready();
        // No replica compacts its log yet, so none sends a snapshot; taking
        // one in silence would lose data, so a snapshot stops the replica.
        assert!(rd.snapshot().is_empty(), "a Raft snapshot arrived: this build does not install snapshots");
        let mut w = Work {
            number: rd.number(),
            send: rd.take_messages(),
            entries: rd.take_entries(),
            hard_state: rd.hs().cloned(),
            send_when_durable: rd.take_persisted_messages(),
            apply: rd.take_committed_entries(),
            ..Work::default()
        };
        w.reads = rd.take_read_states().into_iter().map(|r| ReadIndex { ctx: r.request_ctx, index: r.index }).collect();
        if let Some(ss) = rd.ss() {
            w.role = Some(RoleChange { role: ss.raft_state, leader: known(ss.leader_id), term: self.node.raft.term });
        }
        let store = self.node.mut_store();
        if !w.entries.is_empty() {
            store.append(&w.entries);
        }
        if let Some(hs) = &w.hard_state {
            store.set_hard_state(hs);
        }
        w.send.append(&mut self.notices);
        self.node.advance_append_async(rd);
        w.answers = self.answer(&w.apply, w.role);
        self.apply_conf_changes(&w.apply);
        // Applied as soon as handed out: raft-rs uses the applied index
        // only for membership changes, applied just above.
        self.node.advance_apply();
        Some(w)
    }

    /// The write of turn `number` (and of every turn before it) is durable.
    pub fn persisted(&mut self, number: u64) {
        self.node.on_persist_ready(number);
    }

    /// Answers pending proposals: those committed now, and all the rest
    /// when this replica stopped leading.
    fn answer(&mut self, committed: &[Entry], role: Option<RoleChange>) -> Vec<Answer> {
        let mut out = Vec::new();
        for e in committed {
            if let Some(term) = self.pending.remove(&e.index) {
                let index = e.index;
                out.push(if term == e.term { Answer::Committed { index } } else { Answer::Lost { index } });
            }
        }
        if role.is_some_and(|r| r.role != StateRole::Leader) {
            out.extend(std::mem::take(&mut self.pending).into_keys().map(|index| Answer::Unknown { index }));
        }
        out
    }

    /// The voter `lead_toward` steers to: `preferred` while this replica
    /// hears from it, else the lowest voter it hears from (itself
    /// included). The owner's `preferred` is the first voter whose link is
    /// up, and a partition that drops packets leaves a TCP connection up
    /// for minutes: the replicas that still hear from that voter and those
    /// that do not would steer their groups apart, and no node would lead
    /// them all until the partition healed. What each leader hears from,
    /// the same on both sides of such a cut, brings them together.
    fn steer_target(&self, preferred: u64) -> u64 {
        let raft = &self.node.raft;
        let hears =
            |id: u64| id == raft.id || self.heard.get(&id).is_some_and(|&t| self.ticks <= t + STEER_HEARD_TICKS);
        let voters = raft.prs().conf().voters().ids();
        if voters.contains(preferred) && hears(preferred) {
            return preferred;
        }
        voters.iter().filter(|&id| hears(id)).min().unwrap_or(raft.id)
    }

    /// On the leader: hands leadership to `preferred` once it holds the
    /// whole log (so the hand-over costs no catch-up), keeping every group
    /// of a cell led by one node where it can be. A no-op elsewhere, while
    /// a hand-over runs, or when `preferred` lags, is not heard from (down)
    /// or is this replica. The owner calls it on every tick: under a steady
    /// stream of proposals `preferred` may lag at every call, so after
    /// `LEAD_TOWARD_PATIENCE_TICKS` it takes a tick where it lags by at most
    /// `LEAD_TOWARD_LAG_MAX` entries.
    pub fn lead_toward(&mut self, preferred: u64) {
        let preferred = self.steer_target(preferred);
        let raft = &self.node.raft;
        if raft.state != StateRole::Leader || raft.id == preferred || raft.lead_transferee.is_some() {
            return;
        }
        let (term, now, last) = (raft.term, self.ticks, raft.raft_log.last_index());
        let lag = raft.prs().get(preferred).filter(|p| p.recent_active).map(|p| last.saturating_sub(p.matched));
        let since = match self.steering {
            Some((t, to, at)) if t == term && to == preferred => at,
            _ => now,
        };
        self.steering = Some((term, preferred, since));
        let patient = now >= since + LEAD_TOWARD_PATIENCE_TICKS;
        let ready = lag.is_some_and(|lag| lag == 0 || (patient && lag <= LEAD_TOWARD_LAG_MAX));
        let refused =
            self.handing.is_some_and(|(t, to, at)| t == term && to == preferred && now < at + LEAD_TOWARD_RETRY_TICKS);
        if ready && !refused {
            self.handing = Some((term, preferred, now));
            self.node.transfer_leader(preferred);
        }
    }

    /// The group as this replica sees it.
    pub fn view(&self) -> GroupView {
        let raft = &self.node.raft;
        let last_index = raft.raft_log.last_index();
        let mut followers: Vec<FollowerView> = match raft.state {
            StateRole::Leader => raft
                .prs()
                .iter()
                .filter(|(id, _)| **id != raft.id)
                .map(|(id, p)| FollowerView {
                    id: *id,
                    matched: p.matched,
                    lag: last_index.saturating_sub(p.matched),
                    needs_copy: needs_copy(&self.stranded, *id, p, raft.raft_log.first_index()),
                })
                .collect(),
            _ => Vec::new(),
        };
        followers.sort_by_key(|f| f.id);
        GroupView {
            role: raft.state,
            term: raft.term,
            leader: self.leader(),
            commit: self.commit(),
            last_index,
            followers,
        }
    }

    /// On a leader: the newest entry every voter holds (its own log and
    /// each follower's match as its progress records it; 0 for a follower
    /// it has not heard from since it began to lead). 0 elsewhere.
    pub fn held_by_all(&self) -> u64 {
        let raft = &self.node.raft;
        if raft.state != StateRole::Leader {
            return 0;
        }
        let own = raft.raft_log.last_index();
        raft.prs().iter().filter(|(id, _)| **id != raft.id).map(|(_, p)| p.matched).fold(own, u64::min)
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<u64> {
        known(self.node.raft.leader_id)
    }

    /// This replica's role now.
    pub fn role(&self) -> StateRole {
        self.node.raft.state
    }

    /// This replica's current term.
    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The highest index known committed.
    pub fn commit(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    /// The storage under the group.
    pub fn store(&self) -> &S {
        self.node.store()
    }

    /// Whether this replica leads and an entry of its term is committed: then
    /// every entry before its term is committed too.
    pub fn leads_committed(&self) -> bool {
        self.node.raft.state == StateRole::Leader && self.node.raft.commit_to_current_term()
    }

    /// The index of the last entry in this replica's Raft log, handed to
    /// the store or not yet. A leader whose store's log ends before it
    /// (raft-rs's own empty entry of a new term, still to be handed out)
    /// must not close a batch of its own until its store holds them.
    pub fn last_index(&self) -> u64 {
        self.node.raft.raft_log.last_index()
    }

    /// The store, for its owner's asynchronous part of a turn
    /// ([`super::store::LogStore::persist`]).
    pub fn store_mut(&mut self) -> &mut S {
        self.node.mut_store()
    }

    /// How many proposals wait for an answer.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// raft-rs says "no leader" with id 0 (`raft::INVALID_ID`).
fn known(id: u64) -> Option<u64> {
    (id != raft::INVALID_ID).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::storage::MemStorage;

    fn logger() -> slog::Logger {
        slog::Logger::root(slog::Discard, slog::o!())
    }

    fn group(id: u64, voters: &[u64]) -> Group<MemStorage> {
        let store = MemStorage::new_with_conf_state((voters.to_vec(), vec![]));
        Group::new(&config(id, 0), store, &logger()).unwrap()
    }

    /// Drains one replica's work, making its writes durable at once;
    /// returns the messages it sends and its answers.
    fn drain(g: &mut Group<MemStorage>) -> (Vec<Message>, Vec<Answer>) {
        let (mut msgs, mut answers) = (Vec::new(), Vec::new());
        while let Some(w) = g.ready() {
            msgs.extend(w.send);
            g.persisted(w.number);
            msgs.extend(w.send_when_durable);
            answers.extend(w.answers);
        }
        (msgs, answers)
    }

    /// Runs three replicas with instant, lossless links until quiet.
    fn settle(gs: &mut [Group<MemStorage>]) -> Vec<Answer> {
        let mut answers = Vec::new();
        loop {
            let mut inflight = Vec::new();
            for g in gs.iter_mut() {
                let (m, a) = drain(g);
                inflight.extend(m);
                answers.extend(a);
            }
            if inflight.is_empty() {
                return answers;
            }
            for m in inflight {
                gs[(m.to - 1) as usize].step(m).unwrap();
            }
        }
    }

    /// Replicas 1 to 3, 1 leading, one entry committed everywhere.
    fn three_with_one_entry() -> Vec<Group<MemStorage>> {
        let mut gs: Vec<_> = (1..=3).map(|id| group(id, &[1, 2, 3])).collect();
        elect_one(&mut gs);
        gs[0].propose(b"one".to_vec()).unwrap();
        settle(&mut gs);
        gs
    }

    fn elect_one(gs: &mut [Group<MemStorage>]) {
        gs[0].node.campaign().unwrap();
        settle(gs);
        assert_eq!(gs[0].role(), StateRole::Leader);
    }

    /// A replica starting in term 0 (its data lost) with a log (segments
    /// copied from its peers) stands for no election however long it hears
    /// nothing; with an empty log it does (a new cell's first election).
    #[test]
    fn a_replica_that_lost_its_data_and_holds_a_log_does_not_campaign() {
        let campaigns = |entries: u64| {
            let store = MemStorage::new_with_conf_state((vec![1, 2, 3], vec![]));
            let log: Vec<Entry> = (1..=entries).map(|index| Entry { term: 1, index, ..Entry::default() }).collect();
            store.wl().append(&log).unwrap();
            let mut g = Group::new(&config(3, 0), store, &logger()).unwrap();
            let mut sent = Vec::new();
            for _ in 0..100 {
                g.tick();
                sent.extend(drain(&mut g).0);
            }
            let vote = |m: &Message| {
                matches!(
                    m.get_msg_type(),
                    raft::prelude::MessageType::MsgRequestPreVote | raft::prelude::MessageType::MsgRequestVote
                )
            };
            sent.iter().any(vote)
        };
        assert!(!campaigns(65), "it stood for election holding a log it cannot vouch for");
        assert!(campaigns(0), "an empty replica of a new cell stands for election");
    }

    /// Ticks every replica `ticks` times, delivering what they send;
    /// raft-rs's snapshots (the cell's store never makes one) are dropped.
    fn run_ticks(gs: &mut [Group<MemStorage>], ticks: usize) {
        for _ in 0..ticks {
            let mut inflight = Vec::new();
            for g in gs.iter_mut() {
                g.tick();
                inflight.extend(drain(g).0);
            }
            for m in inflight.into_iter().filter(|m| m.get_msg_type() != raft::prelude::MessageType::MsgSnapshot) {
                gs[(m.to - 1) as usize].step(m).unwrap();
            }
        }
    }

    /// Replica 3 as the leader (whichever it is: replica 3's refusal may
    /// have had the lead handed over) sees it; the other follower must not
    /// need a copy.
    fn third_as_leader_sees_it(gs: &[Group<MemStorage>]) -> FollowerView {
        let view = gs.iter().map(|g| g.view()).find(|v| v.role == StateRole::Leader).expect("a leader");
        assert!(view.followers.iter().all(|f| f.id == 3 || !f.needs_copy), "{view:?}");
        view.followers.into_iter().find(|f| f.id == 3).expect("replica 3 follows")
    }

    /// A follower that lost its data catches up from the leader's entries.
    /// Where the leaders' logs no longer begin at the first entry (their
    /// oldest segments reclaimed) it is shown as needing a copy; once it
    /// holds one (its node emptied and started with `--cell-join`), the
    /// leader finds where its log ends and sends it the rest.
    #[test]
    fn a_follower_behind_the_leaders_first_entry_needs_a_copy_then_catches_up() {
        let five_entries = || {
            let mut gs = three_with_one_entry();
            for i in 0..4 {
                gs[0].propose(format!("entry {i}").into_bytes()).unwrap();
            }
            settle(&mut gs);
            gs
        };
        let mut gs = five_entries();
        let commit = gs[0].commit();
        gs[2] = group(3, &[1, 2, 3]);
        run_ticks(&mut gs, 10);
        let f = third_as_leader_sees_it(&gs);
        assert!(!f.needs_copy && f.matched >= commit, "the leader sends a wiped follower every entry: {f:?}");

        let mut gs = five_entries();
        let ctx = raft::GetEntriesContext::empty(false);
        let copy = gs[1].store().entries(1, commit + 1, None, ctx).unwrap();
        for g in &gs[..2] {
            g.store().wl().compact(commit).unwrap();
        }
        gs[2] = group(3, &[1, 2, 3]);
        run_ticks(&mut gs, 10);
        let f = third_as_leader_sees_it(&gs);
        assert!(f.needs_copy && f.matched < commit, "entries the leader no longer holds: {f:?}");

        let store = MemStorage::new_with_conf_state((vec![1, 2, 3], vec![]));
        store.wl().append(&copy).unwrap();
        gs[2] = Group::new(&config(3, 0), store, &logger()).unwrap();
        gs[0].propose(b"after the copy".to_vec()).ok();
        gs[1].propose(b"after the copy".to_vec()).ok();
        run_ticks(&mut gs, 3 * REPROBE_TICKS as usize);
        let f = third_as_leader_sees_it(&gs);
        assert!(!f.needs_copy && f.matched > commit, "the copy and the entries after it: {f:?}");
    }

    /// A change of the members, one at a time: proposed on the leader only,
    /// committed by the voters, then applied (and kept) by every replica.
    #[test]
    fn a_membership_change_is_applied_by_every_replica_once_committed() {
        use raft::prelude::{ConfChangeSingle, ConfChangeType};
        let change = |t: ConfChangeType, id: u64| ConfChangeV2 {
            changes: vec![ConfChangeSingle { change_type: t.into(), node_id: id }],
            ..ConfChangeV2::default()
        };
        // Replica 4 is not there to answer: what is sent to it is lost.
        let settle_without_4 = |gs: &mut [Group<MemStorage>]| {
            let mut answers = Vec::new();
            loop {
                let mut inflight = Vec::new();
                for g in gs.iter_mut() {
                    let (m, a) = drain(g);
                    inflight.extend(m.into_iter().filter(|m| m.to != 4));
                    answers.extend(a);
                }
                if inflight.is_empty() {
                    return answers;
                }
                for m in inflight {
                    gs[(m.to - 1) as usize].step(m).unwrap();
                }
            }
        };
        let mut gs = three_with_one_entry();
        let learner = change(ConfChangeType::AddLearnerNode, 4);
        assert_eq!(
            gs[1].propose_conf_change(b"batch".to_vec(), learner.clone()),
            Err(Refused::NotLeader { leader: Some(1) })
        );
        let p = gs[0].propose_conf_change(b"batch".to_vec(), learner.clone()).unwrap();
        assert_eq!(gs[0].propose_conf_change(b"batch".to_vec(), learner), Err(Refused::Busy), "one at a time");
        assert!(gs.iter().all(|g| g.members().learners.is_empty()), "applied only once committed");
        let answers = settle_without_4(&mut gs);
        assert!(answers.contains(&Answer::Committed { index: p.index }), "{answers:?}");
        for g in &gs {
            assert_eq!((g.members().voters, g.members().learners), (vec![1, 2, 3], vec![4]));
            assert_eq!(g.store().initial_state().unwrap().conf_state.learners, vec![4], "kept");
        }
        assert!(gs[0].may_change_members(), "the next change may go");
        assert!(gs[0].caught_up_learners().is_empty(), "a learner never heard from is not ready to vote");
        gs[0].propose_conf_change(b"batch".to_vec(), change(ConfChangeType::AddNode, 4)).unwrap();
        settle_without_4(&mut gs);
        for g in &gs {
            let mut voters = g.members().voters;
            voters.sort_unstable();
            assert_eq!((voters, g.members().learners), (vec![1, 2, 3, 4], vec![]));
        }
        // Three of four voters commit without the fourth.
        let p = gs[0].propose(b"after".to_vec()).unwrap();
        assert!(settle_without_4(&mut gs).contains(&Answer::Committed { index: p.index }));
    }

    /// A leader whose own removal commits (proposed by itself here; in a
    /// cell, by an earlier leader) steps down before it applies it, rather
    /// than leading outside its members (raft-rs then panics counting its
    /// own progress), and the two others elect a leader between them.
    use crate::cell::members::{Addresses, Change};

    #[test]
    fn a_leader_whose_own_removal_commits_steps_down_and_the_others_go_on() {
        let mut gs = three_with_one_entry();
        let remove = members::step(&Change::Remove { id: 1 }, &gs[0].members(), &Addresses::new(), 2).unwrap();
        let members::Step::Propose(cc) = remove else { panic!("{remove:?}") };
        gs[0].propose_conf_change(b"batch".to_vec(), cc).unwrap();
        settle(&mut gs);
        assert_ne!(gs[0].role(), StateRole::Leader, "it no longer leads");
        for g in &gs {
            assert_eq!((g.members().voters, g.members().learners), (vec![2, 3], vec![]));
        }
        run_ticks(&mut gs, 40);
        let leaders: Vec<usize> = (0..3).filter(|&i| gs[i].role() == StateRole::Leader).collect();
        assert!(matches!(leaders[..], [1] | [2]), "one of 2 and 3 leads: {leaders:?}");
        let p = gs[leaders[0]].propose(b"after".to_vec()).unwrap();
        assert!(settle(&mut gs).contains(&Answer::Committed { index: p.index }));
    }

    #[test]
    fn a_follower_refuses_proposals_and_names_the_leader() {
        let mut gs: Vec<_> = (1..=3).map(|id| group(id, &[1, 2, 3])).collect();
        elect_one(&mut gs);
        assert_eq!(gs[1].propose(b"x".to_vec()), Err(Refused::NotLeader { leader: Some(1) }));
        assert_eq!(gs[0].leader(), Some(1));
    }

    #[test]
    fn a_proposal_is_answered_once_a_majority_holds_it() {
        let mut gs: Vec<_> = (1..=3).map(|id| group(id, &[1, 2, 3])).collect();
        elect_one(&mut gs);
        let p = gs[0].propose(b"batch".to_vec()).unwrap();
        // The leader's own durable write is not a majority: nothing yet.
        let (sent, answers) = drain(&mut gs[0]);
        assert!(answers.is_empty());
        assert_eq!(gs[0].pending(), 1);
        // One follower's ack makes two of three.
        for m in sent.into_iter().filter(|m| m.to == 2) {
            gs[1].step(m).unwrap();
        }
        let (acks, _) = drain(&mut gs[1]);
        for m in acks {
            gs[0].step(m).unwrap();
        }
        let (_, answers) = drain(&mut gs[0]);
        assert_eq!(answers, vec![Answer::Committed { index: p.index }]);
        assert_eq!(gs[0].commit(), p.index);
    }

    #[test]
    fn a_follower_reads_at_the_index_the_leader_confirms() {
        let mut gs: Vec<_> = (1..=3).map(|id| group(id, &[1, 2, 3])).collect();
        elect_one(&mut gs);
        let p = gs[0].propose(b"before the read".to_vec()).unwrap();
        settle(&mut gs);
        gs[2].read_index(b"r1".to_vec());
        let mut reads = Vec::new();
        loop {
            let mut inflight = Vec::new();
            for g in gs.iter_mut() {
                while let Some(w) = g.ready() {
                    inflight.extend(w.send);
                    g.persisted(w.number);
                    inflight.extend(w.send_when_durable);
                    if g.node.raft.id == 3 {
                        reads.extend(w.reads);
                    }
                }
            }
            if inflight.is_empty() {
                break;
            }
            for m in inflight {
                gs[(m.to - 1) as usize].step(m).unwrap();
            }
        }
        assert_eq!(reads, vec![ReadIndex { ctx: b"r1".to_vec(), index: p.index }]);
    }

    #[test]
    fn the_leader_shows_each_followers_lag_and_hands_over_to_the_preferred() {
        let mut gs = three_with_one_entry();
        let v = gs[0].view();
        assert_eq!((v.role, v.leader, v.commit), (StateRole::Leader, Some(1), v.last_index));
        let lags: Vec<_> = v.followers.iter().map(|f| (f.id, f.lag)).collect();
        assert_eq!(lags, vec![(2, 0), (3, 0)]);
        assert!(gs[1].view().followers.is_empty());
        gs[0].lead_toward(3);
        settle(&mut gs);
        assert_eq!(gs[2].role(), StateRole::Leader);
        assert_eq!(gs[0].leader(), Some(3));
    }

    #[test]
    fn under_steady_proposals_the_lead_goes_to_a_preferred_replica_a_few_entries_behind() {
        let mut gs = three_with_one_entry();
        // Every tick one proposal replica 3 has not yet got: never quiet.
        let mut handed = None;
        for tick in 0..2 * LEAD_TOWARD_PATIENCE_TICKS {
            gs[0].propose(format!("{tick}").into_bytes()).unwrap();
            drain(&mut gs[0]);
            gs[0].lead_toward(3);
            if gs[0].node.raft.lead_transferee == Some(3) {
                handed = Some(tick);
                break;
            }
            gs[0].tick();
            settle(&mut gs);
        }
        let tick = handed.expect("never handed over");
        assert!(tick >= LEAD_TOWARD_PATIENCE_TICKS, "handed over at tick {tick}, with replica 3 behind");
        settle(&mut gs);
        assert_eq!(gs[2].role(), StateRole::Leader);
    }

    #[test]
    fn the_lead_goes_to_no_replica_it_does_not_hear_from() {
        let mut gs = three_with_one_entry();
        // Replica 3 goes silent (what is sent to it is lost): after an
        // election timeout the leader's quorum check counts it inactive,
        // though it holds the whole log.
        for _ in 0..3 * 10 {
            for g in gs.iter_mut().take(2) {
                g.tick();
            }
            loop {
                let sent: Vec<Message> = gs.iter_mut().take(2).flat_map(|g| drain(g).0).collect();
                if sent.is_empty() {
                    break;
                }
                for m in sent.into_iter().filter(|m| m.to != 3) {
                    gs[(m.to - 1) as usize].step(m).unwrap();
                }
            }
        }
        assert_eq!(gs[0].role(), StateRole::Leader);
        gs[0].lead_toward(3);
        assert_eq!(gs[0].node.raft.lead_transferee, None, "handed to a replica that is down");
        gs[0].lead_toward(2);
        assert_eq!(gs[0].node.raft.lead_transferee, Some(2), "one it hears from, holding the whole log");
    }

    /// A leader steered toward a voter it has stopped hearing from (cut
    /// off, though the links may still look up) steers toward the lowest
    /// voter it hears from instead, as the other side of the cut does.
    #[test]
    fn a_leader_steered_toward_a_voter_it_does_not_hear_from_steers_toward_the_lowest_it_hears() {
        let mut gs: Vec<_> = (1..=3).map(|id| group(id, &[1, 2, 3])).collect();
        gs[2].node.campaign().unwrap();
        settle(&mut gs);
        assert_eq!(gs[2].role(), StateRole::Leader);
        // Replica 1 cut off from the other two.
        let settle_without_1 = |gs: &mut [Group<MemStorage>]| loop {
            let sent: Vec<Message> = gs.iter_mut().skip(1).flat_map(|g| drain(g).0).collect();
            if sent.is_empty() {
                break;
            }
            for m in sent.into_iter().filter(|m| m.to != 1) {
                gs[(m.to - 1) as usize].step(m).unwrap();
            }
        };
        for _ in 0..3 * STEER_HEARD_TICKS {
            for g in gs.iter_mut().skip(1) {
                g.tick();
            }
            settle_without_1(&mut gs);
        }
        assert_eq!(gs[2].role(), StateRole::Leader);
        gs[2].lead_toward(1);
        assert_eq!(gs[2].node.raft.lead_transferee, Some(2), "steered toward the lowest voter it hears from");
        settle_without_1(&mut gs);
        assert_eq!(gs[1].role(), StateRole::Leader);
        gs[1].lead_toward(1);
        assert_eq!(gs[1].node.raft.lead_transferee, None, "it is the lowest it hears from: it keeps the lead");
    }

    #[test]
    fn an_entry_too_large_for_a_link_is_refused() {
        let mut gs: Vec<_> = (1..=3).map(|id| group(id, &[1, 2, 3])).collect();
        elect_one(&mut gs);
        let big = vec![0; CELL_ENTRY_BYTES_MAX + 1];
        assert_eq!(
            gs[0].propose(big),
            Err(Refused::TooLarge { len: CELL_ENTRY_BYTES_MAX + 1, max: CELL_ENTRY_BYTES_MAX })
        );
        assert_eq!(gs[0].pending(), 0);
    }

    #[test]
    fn a_deposed_leader_answers_its_pending_proposals_unknown() {
        let mut gs: Vec<_> = (1..=3).map(|id| group(id, &[1, 2, 3])).collect();
        elect_one(&mut gs);
        let p = gs[0].propose(b"cut off".to_vec()).unwrap();
        drain(&mut gs[0]); // its appends are lost: the leader is cut off
        let mut old = gs.remove(0);
        // 2 and 3 stop hearing from 1, elect one of them, and 1 hears of it.
        for _ in 0..200 {
            for g in gs.iter_mut() {
                g.tick();
            }
            let answers = settle_some(&mut gs, &mut old);
            if !answers.is_empty() {
                assert_eq!(answers, vec![Answer::Unknown { index: p.index }]);
                assert_ne!(old.role(), StateRole::Leader);
                assert!(gs.iter().any(|g| g.role() == StateRole::Leader));
                return;
            }
        }
        panic!("the old leader never learned of the new term");
    }

    /// Runs `rest` until quiet, then lets `old` hear their messages.
    fn settle_some(rest: &mut [Group<MemStorage>], old: &mut Group<MemStorage>) -> Vec<Answer> {
        let mut to_old = Vec::new();
        loop {
            let mut inflight = Vec::new();
            for g in rest.iter_mut() {
                inflight.extend(drain(g).0);
            }
            if inflight.is_empty() {
                break;
            }
            for m in inflight {
                match m.to {
                    1 => to_old.push(m),
                    to => rest[(to - 2) as usize].step(m).unwrap(),
                }
            }
        }
        for m in to_old {
            old.step(m).unwrap();
        }
        drain(old).1
    }
}
