//! What a node's replicas publish for `/cellz`, `/leaderz` and the cell's
//! metrics: one process-wide board of atomics, a slot per group, written
//! by the group's replica on its shard's executor and read by whichever
//! shard's HTTP edge answers, without asking the replica anything.
//!
//! A replica stores its scalars (role, term, leader, commit, last index,
//! whether its shard writes) at the end of every turn, a few relaxed stores;
//! its followers' progress at most once a tick, and only while it leads;
//! its counters (elections, leader changes, message bytes, commit
//! latency) as they happen. A reader may see one turn's term beside the
//! next turn's role: the board is for monitoring, not for decisions.

use super::group::{FollowerView, GroupView};
use super::replica::Outbox;
use crate::limits::CELL_VOTERS_MAX;
use crate::metrics::{Family, Samples, SharedLatency};
use raft::prelude::Message;
use raft::StateRole;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Every group's slot on this node.
#[derive(Debug)]
pub struct Board {
    node: u64,
    slots: Vec<Arc<Slot>>,
}

impl Board {
    /// The board of node `node`, whose shard *i* is group *i*'s replica.
    pub fn new(node: u64, groups: usize) -> Board {
        Board { node, slots: (0..groups).map(|_| Arc::new(Slot::default())).collect() }
    }

    pub fn node(&self) -> u64 {
        self.node
    }

    /// Where group `group`'s replica publishes.
    pub fn slot(&self, group: usize) -> Arc<Slot> {
        self.slots[group].clone()
    }

    /// Every group as last published, in group order.
    pub fn groups(&self) -> Vec<Published> {
        self.slots.iter().map(|s| s.read()).collect()
    }

    /// The cell's families, one `shard` label per group (shard *i* is
    /// group *i*).
    pub fn render(&self, out: &mut Samples) {
        for (shard, s) in self.slots.iter().enumerate() {
            let p = s.read();
            out.sample(Family::CellElections, shard, "", s.elections.load(Relaxed));
            out.sample(Family::CellTerm, shard, "", p.view.term);
            out.sample(Family::CellLeaderChanges, shard, "", s.leader_changes.load(Relaxed));
            for (outcome, n) in ["started", "confirmed", "failed"].iter().zip(&s.read_index_rounds) {
                out.sample(Family::CellReadIndexRounds, shard, &format!("outcome=\"{outcome}\""), n.load(Relaxed));
            }
            for (outcome, n) in ["started", "caught_up", "failed"].iter().zip(&s.catch_up_rounds) {
                out.sample(Family::CellCatchUpRounds, shard, &format!("outcome=\"{outcome}\""), n.load(Relaxed));
            }
            out.sample(Family::CellLeading, shard, "", u64::from(p.leading));
            out.sample(Family::CellCommitIndex, shard, "", p.view.commit);
            out.shared_histogram(Family::CellCommitSeconds, shard, &s.commit_latency);
            out.sample(Family::CellSentBytes, shard, "", s.sent_bytes.load(Relaxed));
            out.sample(Family::CellReceivedBytes, shard, "", s.received_bytes.load(Relaxed));
            out.sample(Family::CellShippedSegments, shard, "", s.shipped_segments.load(Relaxed));
            out.sample(Family::CellShippedBytes, shard, "", s.shipped_bytes.load(Relaxed));
            out.sample(Family::CellServedSegmentBytes, shard, "", s.served_segment_bytes.load(Relaxed));
            for f in &p.view.followers {
                out.sample(Family::CellFollowerLag, shard, &format!("peer=\"{}\"", f.id), f.lag);
            }
        }
    }
}

/// One group as its replica last published it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub view: GroupView,
    /// The replica leads and its shard writes (`Status::leading`).
    pub leading: bool,
    /// The last committed entry whose records its shard has applied.
    pub applied: u64,
    pub members: Members,
}

/// A group's members as its replica applied them, each list sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
}

/// A follower's progress as its leader published it; id 0: no one.
#[derive(Debug, Default)]
struct FollowerSlot {
    id: AtomicU64,
    matched: AtomicU64,
    lag: AtomicU64,
    needs_copy: AtomicBool,
}

/// One group's replica's published state.
#[derive(Debug, Default)]
pub struct Slot {
    role: AtomicU8,
    term: AtomicU64,
    /// 0: none known (raft-rs's own "no leader").
    leader: AtomicU64,
    commit: AtomicU64,
    last_index: AtomicU64,
    applied: AtomicU64,
    leading: AtomicBool,
    followers: [FollowerSlot; CELL_VOTERS_MAX - 1],
    elections: AtomicU64,
    leader_changes: AtomicU64,
    /// The last leader this replica knew of, to count changes.
    last_leader: AtomicU64,
    sent_bytes: AtomicU64,
    received_bytes: AtomicU64,
    commit_latency: SharedLatency,
    /// Read index rounds (`cell::confirm`): started, confirmed, failed.
    read_index_rounds: [AtomicU64; 3],
    /// A follower's catch-up rounds (`cell::catch_up`): started, caught
    /// up, failed.
    catch_up_rounds: [AtomicU64; 3],
    /// Sealed segments copied from a peer at boot (`cell::ship`), and their bytes.
    shipped_segments: AtomicU64,
    shipped_bytes: AtomicU64,
    /// Bytes of sealed segments sent to peers copying them.
    served_segment_bytes: AtomicU64,
    /// Its members, voters then learners, each list ending at its first
    /// 0 (a reader in the middle of a change may see a mix of the two).
    voters: [AtomicU64; CELL_VOTERS_MAX],
    learners: [AtomicU64; CELL_VOTERS_MAX],
}

impl Slot {
    /// The replica's scalars, at the end of each turn.
    pub fn publish(&self, view: &Scalars) {
        self.role.store(role_code(view.role), Relaxed);
        self.term.store(view.term, Relaxed);
        self.leader.store(view.leader.unwrap_or(0), Relaxed);
        self.commit.store(view.commit, Relaxed);
        self.last_index.store(view.last_index, Relaxed);
        self.applied.store(view.applied, Relaxed);
        self.leading.store(view.leading, Relaxed);
    }

    /// A leader's followers (none elsewhere), at most once a tick.
    pub fn publish_followers(&self, followers: &[FollowerView]) {
        debug_assert!(followers.len() < CELL_VOTERS_MAX);
        for (i, s) in self.followers.iter().enumerate() {
            match followers.get(i) {
                Some(f) => {
                    s.matched.store(f.matched, Relaxed);
                    s.lag.store(f.lag, Relaxed);
                    s.needs_copy.store(f.needs_copy, Relaxed);
                    s.id.store(f.id, Relaxed);
                }
                None => s.id.store(0, Relaxed),
            }
        }
    }

    /// A role change the replica saw: counts an election when it became a
    /// candidate, and a leader change when it learned of a leader other
    /// than the last it knew.
    pub fn role_changed(&self, role: StateRole, leader: Option<u64>) {
        if role == StateRole::Candidate {
            self.elections.fetch_add(1, Relaxed);
        }
        if let Some(l) = leader {
            if self.last_leader.swap(l, Relaxed) != l {
                self.leader_changes.fetch_add(1, Relaxed);
            }
        }
    }

    /// On a leader: an entry committed `after` its proposal.
    /// The replica's confirmation rounds so far.
    pub fn publish_rounds(&self, r: &crate::cell::confirm::Rounds) {
        for (slot, n) in self.read_index_rounds.iter().zip([r.started, r.confirmed, r.failed]) {
            slot.store(n, Relaxed);
        }
    }

    /// The replica's catch-up rounds so far.
    pub fn publish_catch_ups(&self, r: &crate::cell::confirm::Rounds) {
        for (slot, n) in self.catch_up_rounds.iter().zip([r.started, r.confirmed, r.failed]) {
            slot.store(n, Relaxed);
        }
    }

    pub fn committed_after(&self, after: Duration) {
        self.commit_latency.record(u64::try_from(after.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn add_sent(&self, bytes: usize) {
        self.sent_bytes.fetch_add(bytes as u64, Relaxed);
    }

    pub fn add_received(&self, bytes: usize) {
        self.received_bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// Segments copied from a peer at boot.
    pub fn shipped(&self, segments: usize, bytes: u64) {
        self.shipped_segments.fetch_add(segments as u64, Relaxed);
        self.shipped_bytes.fetch_add(bytes, Relaxed);
    }

    /// Bytes of a sealed segment sent to a peer that copies it.
    pub fn served_segment(&self, bytes: u64) {
        self.served_segment_bytes.fetch_add(bytes, Relaxed);
    }

    /// The replica's members, at each tick (at most `CELL_VOTERS_MAX` of
    /// each kind are shown).
    pub fn publish_members(&self, members: &Members) {
        for (slots, ids) in [(&self.voters, &members.voters), (&self.learners, &members.learners)] {
            for (i, slot) in slots.iter().enumerate() {
                slot.store(ids.get(i).copied().unwrap_or(0), Relaxed);
            }
        }
    }

    /// What was last published (followers only while it leads).
    pub fn read(&self) -> Published {
        let role = role_of(self.role.load(Relaxed));
        let followers = match role {
            StateRole::Leader => self
                .followers
                .iter()
                .filter_map(|s| {
                    let id = s.id.load(Relaxed);
                    (id != 0).then(|| FollowerView {
                        id,
                        matched: s.matched.load(Relaxed),
                        lag: s.lag.load(Relaxed),
                        needs_copy: s.needs_copy.load(Relaxed),
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        let leader = self.leader.load(Relaxed);
        Published {
            view: GroupView {
                role,
                term: self.term.load(Relaxed),
                leader: (leader != 0).then_some(leader),
                commit: self.commit.load(Relaxed),
                last_index: self.last_index.load(Relaxed),
                followers,
            },
            leading: self.leading.load(Relaxed),
            applied: self.applied.load(Relaxed),
            members: Members { voters: ids(&self.voters), learners: ids(&self.learners) },
        }
    }
}

/// An outbox that counts the bytes of the messages it queued on a slot.
pub struct Counting<'a, O> {
    pub out: &'a O,
    pub slot: &'a Slot,
}

impl<O: Outbox> Outbox for Counting<'_, O> {
    fn send(&self, message: Message) -> bool {
        let bytes = message_bytes(&message);
        let queued = self.out.send(message);
        if queued {
            self.slot.add_sent(bytes);
        }
        queued
    }
}

/// A Raft message's encoded size (the frame around it not counted): a walk
/// over its entries' lengths, no encoding.
pub fn message_bytes(m: &Message) -> usize {
    prost::Message::encoded_len(m)
}

/// What a replica publishes each turn.
#[derive(Debug, Clone, Copy)]
pub struct Scalars {
    pub role: StateRole,
    pub term: u64,
    pub leader: Option<u64>,
    pub commit: u64,
    pub last_index: u64,
    pub applied: u64,
    pub leading: bool,
}

fn role_code(r: StateRole) -> u8 {
    match r {
        StateRole::Follower => 0,
        StateRole::Candidate => 1,
        StateRole::Leader => 2,
        StateRole::PreCandidate => 3,
    }
}

fn role_of(code: u8) -> StateRole {
    match code {
        1 => StateRole::Candidate,
        2 => StateRole::Leader,
        3 => StateRole::PreCandidate,
        _ => StateRole::Follower,
    }
}

/// The role as `/cellz` and `/leaderz` name it.
pub fn role_name(r: StateRole) -> &'static str {
    match r {
        StateRole::Follower => "follower",
        StateRole::Candidate => "candidate",
        StateRole::Leader => "leader",
        StateRole::PreCandidate => "pre_candidate",
    }
}

/// The ids of a members' list, up to its first 0.
fn ids(slots: &[AtomicU64]) -> Vec<u64> {
    slots.iter().map(|s| s.load(Relaxed)).take_while(|&id| id != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalars(role: StateRole, term: u64) -> Scalars {
        Scalars {
            role,
            term,
            leader: Some(1),
            commit: 5,
            last_index: 6,
            applied: 4,
            leading: role == StateRole::Leader,
        }
    }

    #[test]
    fn a_slot_reads_back_what_was_published_and_followers_only_on_a_leader() {
        let s = Slot::default();
        assert_eq!(s.read().view.role, StateRole::Follower);
        assert_eq!(s.read().view.leader, None, "0 is no leader");
        s.publish(&scalars(StateRole::Leader, 3));
        let three = [
            FollowerView { id: 2, matched: 6, lag: 0, needs_copy: false },
            FollowerView { id: 3, matched: 1, lag: 5, needs_copy: true },
        ];
        s.publish_followers(&three);
        let p = s.read();
        assert_eq!((p.view.term, p.view.commit, p.view.last_index, p.applied, p.leading), (3, 5, 6, 4, true));
        assert_eq!(p.view.followers, three);
        s.publish_followers(&three[1..]);
        assert_eq!(s.read().view.followers, three[1..], "a shorter list clears the rest");
        s.publish(&scalars(StateRole::Follower, 4));
        assert!(s.read().view.followers.is_empty(), "a follower shows no followers");
        for r in [StateRole::Candidate, StateRole::PreCandidate, StateRole::Leader, StateRole::Follower] {
            assert_eq!(role_of(role_code(r)), r);
        }
    }

    #[test]
    fn elections_and_leader_changes_are_counted_once_each() {
        let s = Slot::default();
        s.role_changed(StateRole::Follower, Some(1));
        s.role_changed(StateRole::PreCandidate, None);
        s.role_changed(StateRole::Candidate, None);
        s.role_changed(StateRole::Follower, Some(1));
        assert_eq!((s.elections.load(Relaxed), s.leader_changes.load(Relaxed)), (1, 1), "leader 1 came back");
        s.role_changed(StateRole::Candidate, None);
        s.role_changed(StateRole::Leader, Some(3));
        assert_eq!((s.elections.load(Relaxed), s.leader_changes.load(Relaxed)), (2, 2));
    }

    #[test]
    fn the_cell_families_carry_each_group_as_its_shard() {
        let b = Board::new(1, 2);
        b.slot(1).publish(&scalars(StateRole::Leader, 9));
        b.slot(1).publish_followers(&[FollowerView { id: 3, matched: 2, lag: 4, needs_copy: false }]);
        b.slot(1).add_sent(100);
        b.slot(1).add_received(7);
        b.slot(1).committed_after(Duration::from_micros(700));
        let mut out = Samples::default();
        b.render(&mut out);
        let text = out.render();
        for line in [
            "ringstream_cell_term{shard=\"0\"} 0\n",
            "ringstream_cell_term{shard=\"1\"} 9\n",
            "ringstream_cell_leading{shard=\"1\"} 1\n",
            "ringstream_cell_commit_index{shard=\"1\"} 5\n",
            "ringstream_cell_sent_bytes_total{shard=\"1\"} 100\n",
            "ringstream_cell_received_bytes_total{shard=\"1\"} 7\n",
            "ringstream_cell_follower_lag_entries{shard=\"1\",peer=\"3\"} 4\n",
            "ringstream_cell_commit_seconds_bucket{shard=\"1\",le=\"0.001\"} 1\n",
            "ringstream_cell_commit_seconds_count{shard=\"1\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
        assert!(!text.contains("ringstream_cell_follower_lag_entries{shard=\"0\""));
    }
}
