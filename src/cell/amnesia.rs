//! A voter that lost its data: what keeps its forgotten votes and entries
//! from costing acknowledged appends, as pure rules over Raft messages that
//! [`super::group::Group::step`] applies.
//!
//! Raft assumes a voter never forgets what it wrote: its vote in a term, and
//! the entries it acknowledged (counted towards a majority). A node whose
//! data directory was lost (a replaced disk, a wiped volume) comes back
//! knowing nothing, and breaks both: its vote could elect a replica that
//! lacks committed entries, and its leader, which remembers how far it had
//! replicated, would tell it to commit entries it no longer has (raft-rs
//! then stops the process) and would never send them again. Three rules:
//!
//! - **Votes and campaigns wait** ([`VoteGuard`]): a replica that starts
//!   in term 0, its log empty or copied from its peers at boot (a new
//!   cell's first boot, or a lost disk, segment shipping or not: it cannot
//!   tell), gives no vote to a candidate that holds a log until it has
//!   caught up with a leader (its commit index reached the one the first
//!   leader it heard announced), nor takes over when a leader bids it to,
//!   nor, holding a log itself, stands for election: copied segments end
//!   where its peers' sealed ones did, short of entries it may have
//!   acknowledged before its disk was lost, and stale voters would elect
//!   it over them (a five-node cell did, in CI: the leader it became wrote
//!   over acknowledged appends). Candidates with empty logs (a new cell's
//!   first election) get its vote, and it stands with an empty log, as
//!   there is nothing to lose.
//! - **A heartbeat commits only what matches** ([`clamp_heartbeat`]): it
//!   may advance the commit index to this replica's last entry only if that
//!   entry is of the leader's term (then the logs match up to it), else not
//!   at all (appends, which check, advance it).
//! - **A leader hands over** ([`lost_entries`]): a follower that refuses an
//!   append at or above the entries it had acknowledged, its log ending
//!   below them, lost them; the leader's record of its progress cannot go
//!   back, so the leader hands its lead to another voter, whose record of
//!   that follower starts afresh and catches it up.

use raft::prelude::{Message, MessageType};

/// Whether this replica may vote as Raft says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteGuard {
    /// It votes as Raft says.
    Open,
    /// It started knowing nothing and has not yet heard from a leader.
    AwaitLeader,
    /// A leader announced this commit index; its votes wait for its own
    /// commit index to reach it.
    AwaitCommit(u64),
}

impl VoteGuard {
    /// The guard of a replica that starts in `term`. Term 0 means it never
    /// wrote one: whatever its log holds (segments copied from its peers at
    /// boot, `cell::ship`), it cannot know whom it voted for before.
    pub fn at_boot(term: u64) -> VoteGuard {
        if term == 0 {
            VoteGuard::AwaitLeader
        } else {
            VoteGuard::Open
        }
    }

    /// Whether `m` may be stepped while the guard is as it is: a vote
    /// request from a candidate holding a log waits (it gets no answer, as
    /// from a node that is down), and so does a leader's bidding to take
    /// over (`MsgTimeoutNow`: its leader's record of it may be stale).
    pub fn admits(&self, m: &Message) -> bool {
        let open = *self == VoteGuard::Open;
        match m.get_msg_type() {
            MessageType::MsgRequestVote | MessageType::MsgRequestPreVote => open || m.index == 0,
            MessageType::MsgTimeoutNow => open,
            _ => true,
        }
    }

    /// Whether this replica may stand for election, its log ending at
    /// `last_index`: not while it waits for a leader to catch it up, if it
    /// holds a log (what it holds may end short of what it acknowledged).
    pub fn may_campaign(&self, last_index: u64) -> bool {
        *self == VoteGuard::Open || last_index == 0
    }

    /// Notes a message of kind `kind` stepped from the current leader,
    /// carrying `commit`: the first append names the commit index to catch
    /// up to (a heartbeat's commit is only what the leader believes this
    /// replica holds).
    pub fn heard(&mut self, kind: MessageType, commit: u64) {
        if *self == VoteGuard::AwaitLeader && kind == MessageType::MsgAppend {
            *self = VoteGuard::AwaitCommit(commit);
        }
    }

    /// Notes that this replica won an election; true when that opens the
    /// guard. A majority elected it knowing its log, and a leader's log
    /// holds every committed entry (it can only have stood with an empty
    /// log: a new cell's first election), so there is nothing left to
    /// catch up to; left closed, it would withhold its vote from its
    /// successor once it stepped down, and stand for no election either.
    pub fn elected(&mut self) -> bool {
        let was = *self;
        *self = VoteGuard::Open;
        was != VoteGuard::Open
    }

    /// Notes this replica's commit index; true when that opens the guard.
    pub fn committed(&mut self, commit: u64) -> bool {
        match *self {
            VoteGuard::AwaitCommit(target) if commit >= target => {
                *self = VoteGuard::Open;
                true
            }
            _ => false,
        }
    }
}

/// This replica's log as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogTip {
    pub last_index: u64,
    pub last_term: u64,
    pub committed: u64,
}

/// Lowers a heartbeat's commit index to what this replica may commit: up to
/// its last entry if that entry is of the heartbeat's term (the leader's:
/// its entries of its own term match the leader's log, and so does all
/// before them), else no further than it has. A no-op for a replica that
/// forgot nothing: raft-rs's leader sends no more than it knows matches.
pub fn clamp_heartbeat(m: &mut Message, tip: LogTip) {
    if m.get_msg_type() != MessageType::MsgHeartbeat || m.commit <= tip.committed {
        return;
    }
    let safe = if tip.last_term == m.term { tip.last_index } else { tip.committed };
    m.commit = m.commit.min(safe);
}

/// The refusal a replica sends its leader of its own accord when a
/// heartbeat `m` names a commit index past its log (`tip`): raft-rs's
/// leader names no more than its record of the follower says it holds, so
/// the follower lost entries it had acknowledged. Shaped as the refusal
/// of an append at that index ([`lost_entries`] on the leader reads it so;
/// raft-rs itself ignores it as stale), for a leader with nothing new to
/// send would never get one otherwise.
pub fn lost_notice(m: &Message, tip: LogTip) -> Option<Message> {
    if m.get_msg_type() != MessageType::MsgHeartbeat || m.commit <= tip.last_index {
        return None;
    }
    let mut notice = Message { to: m.from, from: m.to, term: m.term, index: m.commit, ..Message::default() };
    notice.set_msg_type(MessageType::MsgAppendResponse);
    notice.reject = true;
    notice.reject_hint = tip.last_index;
    notice.log_term = tip.last_term;
    Some(notice)
}

/// On a leader: whether `m`, from a follower that had acknowledged entries
/// up to `matched`, says that it lost some: it refused an append at or
/// above them (one below could be an old, reordered refusal) and its log
/// ends below them. A follower that forgot nothing never does: the entries
/// it acknowledged match the leader's, so its hint never falls below them.
pub fn lost_entries(m: &Message, matched: u64) -> bool {
    m.get_msg_type() == MessageType::MsgAppendResponse && m.reject && m.index >= matched && m.reject_hint < matched
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_waiting_for_a_leader_stands_for_election_only_with_an_empty_log() {
        for guard in [VoteGuard::AwaitLeader, VoteGuard::AwaitCommit(70)] {
            assert!(guard.may_campaign(0), "an empty log: a new cell's first election");
            assert!(!guard.may_campaign(65), "copied segments may end short of what it acknowledged");
        }
        assert!(VoteGuard::Open.may_campaign(65));
        let mut first_leader = VoteGuard::AwaitLeader;
        assert!(first_leader.elected(), "a new cell's first leader opens its guard");
        assert!(!first_leader.elected() && first_leader.may_campaign(65));
    }

    #[test]
    fn a_heartbeat_past_its_log_makes_a_replica_say_it_lost_entries() {
        let tip = LogTip { last_index: 106, last_term: 1, committed: 14 };
        let mut hb = msg(MessageType::MsgHeartbeat, 1, 0, 300);
        (hb.from, hb.to) = (1, 3);
        let n = lost_notice(&hb, tip).expect("a commit past its log");
        assert_eq!((n.to, n.from, n.term, n.index, n.reject, n.reject_hint), (1, 3, 1, 300, true, 106));
        assert_eq!(n.get_msg_type(), MessageType::MsgAppendResponse);
        // The leader's record said 300: it reads the notice as lost entries.
        assert!(lost_entries(&n, 300));
        // Not past its log, or not a heartbeat: nothing to say.
        assert_eq!(lost_notice(&msg(MessageType::MsgHeartbeat, 1, 0, 106), tip), None);
        assert_eq!(lost_notice(&msg(MessageType::MsgAppend, 1, 0, 300), tip), None);
    }

    fn msg(t: MessageType, term: u64, index: u64, commit: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(t);
        (m.term, m.index, m.commit) = (term, index, commit);
        m
    }

    #[test]
    fn a_replica_that_knew_nothing_votes_for_a_log_only_once_caught_up() {
        assert_eq!(VoteGuard::at_boot(2), VoteGuard::Open);
        assert_eq!(VoteGuard::at_boot(3), VoteGuard::Open, "it voted before any entry: it remembers");
        let mut g = VoteGuard::at_boot(0);
        let vote = msg(MessageType::MsgRequestVote, 4, 9, 0);
        let pre_vote = msg(MessageType::MsgRequestPreVote, 4, 9, 0);
        assert!(!g.admits(&vote) && !g.admits(&pre_vote));
        assert!(g.admits(&msg(MessageType::MsgRequestVote, 1, 0, 0)), "a new cell's first election");
        assert!(g.admits(&msg(MessageType::MsgHeartbeat, 4, 0, 7)));
        assert!(!g.admits(&msg(MessageType::MsgTimeoutNow, 4, 0, 0)), "no take-over while it lacks entries");
        g.heard(MessageType::MsgHeartbeat, 7);
        assert_eq!(g, VoteGuard::AwaitLeader, "a heartbeat names no commit it can trust");
        g.heard(MessageType::MsgAppend, 7);
        assert_eq!(g, VoteGuard::AwaitCommit(7));
        g.heard(MessageType::MsgAppend, 11);
        assert_eq!(g, VoteGuard::AwaitCommit(7), "the first leader's commit is the mark");
        assert!(!g.committed(6) && !g.admits(&vote));
        assert!(g.committed(7));
        assert!(g.admits(&vote) && !g.committed(8), "opened once");
    }

    #[test]
    fn a_heartbeat_commits_only_entries_known_to_match() {
        let tip = |last_index, last_term, committed| LogTip { last_index, last_term, committed };
        let clamped = |commit, t| {
            let mut m = msg(MessageType::MsgHeartbeat, 5, 0, commit);
            clamp_heartbeat(&mut m, t);
            m.commit
        };
        assert_eq!(clamped(100, tip(0, 0, 0)), 0, "an empty log commits nothing");
        assert_eq!(clamped(100, tip(40, 3, 10)), 10, "entries of an older term may conflict");
        assert_eq!(clamped(100, tip(40, 5, 10)), 40, "entries of the leader's term match");
        assert_eq!(clamped(30, tip(40, 5, 10)), 30, "what the leader sent, when less");
        assert_eq!(clamped(8, tip(40, 3, 10)), 8, "no higher than sent: raft-rs keeps its own");
        let mut append = msg(MessageType::MsgAppend, 5, 0, 100);
        clamp_heartbeat(&mut append, tip(0, 0, 0));
        assert_eq!(append.commit, 100, "appends are raft-rs's to check");
    }

    #[test]
    fn a_refusal_below_what_was_acknowledged_means_lost_entries() {
        let refusal = |index, hint| {
            let mut m = msg(MessageType::MsgAppendResponse, 5, index, 0);
            (m.reject, m.reject_hint) = (true, hint);
            m
        };
        assert!(lost_entries(&refusal(100, 0), 100), "the wiped follower");
        assert!(lost_entries(&refusal(120, 30), 100));
        assert!(!lost_entries(&refusal(120, 100), 100), "its log reaches what it acknowledged");
        assert!(!lost_entries(&refusal(90, 0), 100), "an old refusal, reordered");
        let mut ack = refusal(120, 0);
        ack.reject = false;
        assert!(!lost_entries(&ack, 100));
    }
}
