//! A group's members as its replicas keep them: raft-rs's `ConfState`
//! beside each member's peer address (the node's own `--cell` entry,
//! `HOST:PORT`; group *i* links at that port plus *i*), the membership
//! change a requested [`Change`] needs now, and what a committed change
//! does to the addresses. Pure: the replica proposes and applies.
//!
//! A node joins as a learner (its address in the change's context, so
//! every replica learns where to link to it) and is made a voter once it
//! holds the log ([`promotion`]); a change is one node at a time, so
//! raft-rs makes it without a joint configuration. A leader asked to
//! remove itself is made a learner first ([`Step::HandOver`]): it then
//! steers its lead to a voter (`Group::lead_toward`), and the next leader
//! removes it (raft-rs cannot apply a leader's own removal).

use crate::limits::CELL_VOTERS_MAX;
use raft::prelude::{ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState};
use std::collections::BTreeMap;

/// A change of a group's members, asked of its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Node `id`, whose peer links listen at `peer`, joins: as a learner,
    /// then a voter once caught up.
    Add { id: u64, peer: String },
    /// Node `id` leaves.
    Remove { id: u64 },
}

impl Change {
    pub fn id(&self) -> u64 {
        match self {
            Change::Add { id, .. } | Change::Remove { id } => *id,
        }
    }
}

/// A node's place in a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Voter,
    Learner,
    /// No member.
    Gone,
}

/// Each member's peer address, by node id.
pub type Addresses = BTreeMap<u64, String>;

/// A group's members as a replica applied them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Membership {
    pub conf: ConfState,
    /// Those of members added since the cell began (`--cell` names the
    /// first voters').
    pub addresses: Addresses,
    /// The index of the last change applied (0: none).
    pub index: u64,
}

/// The longest peer address a change may carry: a 253-byte host name, a
/// colon and a five-digit port (what the edge lets through).
pub const PEER_ADDRESS_BYTES_MAX: usize = 259;

/// What a requested change needs, seen from the members now.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Nothing: the group has it so already.
    Done(Role),
    /// This change, proposed and committed.
    Propose(ConfChangeV2),
    /// A learner already: made a voter once caught up.
    AwaitVoter,
    /// The leader itself is to go: this change (if any) makes it a
    /// learner, and it hands the lead to a voter before it is removed.
    HandOver(Option<ConfChangeV2>),
}

/// Why a requested change cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    #[error("node {id} is a member at {at}: remove it first to give it another address")]
    Moved { id: u64, at: String },
    #[error("node {id} is the group's last voter: a group cannot lose it")]
    LastVoter { id: u64 },
    #[error("a peer address of {len} bytes is over the {PEER_ADDRESS_BYTES_MAX} a member may have")]
    AddressTooLong { len: usize },
    #[error("the group has {CELL_VOTERS_MAX} members, the most a cell may have: remove one first")]
    Full,
}

/// The step `change` needs in a group whose members are `conf`, at
/// `addresses`, asked of its leader `leader`.
pub fn step(change: &Change, conf: &ConfState, addresses: &Addresses, leader: u64) -> Result<Step, Conflict> {
    let role = role(conf, change.id());
    match change {
        Change::Add { id, peer } => {
            if peer.len() > PEER_ADDRESS_BYTES_MAX {
                return Err(Conflict::AddressTooLong { len: peer.len() });
            }
            if let Some(at) = addresses.get(id).filter(|at| *at != peer && role != Role::Gone) {
                return Err(Conflict::Moved { id: *id, at: at.clone() });
            }
            Ok(match role {
                Role::Voter => Step::Done(Role::Voter),
                Role::Learner => Step::AwaitVoter,
                Role::Gone if all(conf).len() >= CELL_VOTERS_MAX => return Err(Conflict::Full),
                Role::Gone => Step::Propose(single(ConfChangeType::AddLearnerNode, *id, peer.as_bytes())),
            })
        }
        Change::Remove { id } => match role {
            Role::Gone => Ok(Step::Done(Role::Gone)),
            Role::Voter if conf.voters == [*id] => Err(Conflict::LastVoter { id: *id }),
            Role::Voter if *id == leader => Ok(Step::HandOver(Some(single(ConfChangeType::AddLearnerNode, *id, &[])))),
            Role::Learner if *id == leader => Ok(Step::HandOver(None)),
            _ => Ok(Step::Propose(single(ConfChangeType::RemoveNode, *id, &[]))),
        },
    }
}

/// The change that makes learner `id` a voter.
pub fn promotion(id: u64) -> ConfChangeV2 {
    single(ConfChangeType::AddNode, id, &[])
}

/// Node `id`'s place in `conf`. A voter of either side of a joint
/// configuration votes.
pub fn role(conf: &ConfState, id: u64) -> Role {
    if conf.voters.contains(&id) || conf.voters_outgoing.contains(&id) {
        Role::Voter
    } else if conf.learners.contains(&id) || conf.learners_next.contains(&id) {
        Role::Learner
    } else {
        Role::Gone
    }
}

/// Every member of `conf`, voters first, each once.
pub fn all(conf: &ConfState) -> Vec<u64> {
    let mut ids: Vec<u64> = Vec::new();
    for id in conf.voters.iter().chain(&conf.voters_outgoing).chain(&conf.learners).chain(&conf.learners_next) {
        if !ids.contains(id) {
            ids.push(*id);
        }
    }
    ids
}

/// What committed change `cc` does to the addresses: an added node's is
/// its context (a promotion carries none and keeps it), a removed node's
/// goes.
pub fn note(addresses: &mut Addresses, cc: &ConfChangeV2) {
    let context = std::str::from_utf8(&cc.context).ok().filter(|c| !c.is_empty());
    for c in &cc.changes {
        match c.change_type() {
            ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                if let Some(at) = context {
                    addresses.insert(c.node_id, at.to_string());
                }
            }
            ConfChangeType::RemoveNode => {
                addresses.remove(&c.node_id);
            }
        }
    }
}

fn single(kind: ConfChangeType, id: u64, context: &[u8]) -> ConfChangeV2 {
    let mut one = ConfChangeSingle { node_id: id, ..Default::default() };
    one.set_change_type(kind);
    ConfChangeV2 { changes: vec![one], context: context.to_vec(), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(voters: &[u64], learners: &[u64]) -> ConfState {
        ConfState { voters: voters.to_vec(), learners: learners.to_vec(), ..ConfState::default() }
    }

    fn add(id: u64, peer: &str) -> Change {
        Change::Add { id, peer: peer.into() }
    }

    #[test]
    fn an_add_proposes_a_learner_waits_for_a_learner_and_is_done_for_a_voter() {
        let at: Addresses = [(4, "10.0.0.4:7400".to_string())].into();
        let Step::Propose(cc) = step(&add(4, "10.0.0.4:7400"), &conf(&[1, 2, 3], &[]), &Addresses::new(), 1).unwrap()
        else {
            panic!("a new node is proposed")
        };
        assert_eq!(cc.changes[0].change_type(), ConfChangeType::AddLearnerNode);
        assert_eq!(cc.context, b"10.0.0.4:7400");
        assert_eq!(step(&add(4, "10.0.0.4:7400"), &conf(&[1, 2, 3], &[4]), &at, 1), Ok(Step::AwaitVoter));
        assert_eq!(step(&add(4, "10.0.0.4:7400"), &conf(&[1, 2, 3, 4], &[]), &at, 1), Ok(Step::Done(Role::Voter)));
        let moved = step(&add(4, "10.0.0.9:7400"), &conf(&[1, 2, 3, 4], &[]), &at, 1);
        assert!(matches!(moved, Err(Conflict::Moved { id: 4, .. })), "{moved:?}");
        let long = "h".repeat(PEER_ADDRESS_BYTES_MAX + 1);
        assert!(matches!(step(&add(5, &long), &conf(&[1], &[]), &at, 1), Err(Conflict::AddressTooLong { .. })));
        let full = conf(&[1, 2, 3, 4, 5], &[6, 7]);
        assert_eq!(step(&add(8, "h8:7400"), &full, &at, 1), Err(Conflict::Full));
        assert_eq!(
            step(&add(7, "h7:7400"), &full, &Addresses::new(), 1),
            Ok(Step::AwaitVoter),
            "a member is no new one"
        );
    }

    #[test]
    fn a_removal_proposes_for_a_member_is_done_for_none_and_keeps_the_last_voter() {
        let none = Addresses::new();
        let remove = |id| Change::Remove { id };
        assert!(matches!(step(&remove(3), &conf(&[1, 2, 3], &[]), &none, 1), Ok(Step::Propose(_))));
        assert!(matches!(step(&remove(4), &conf(&[1, 2, 3], &[4]), &none, 1), Ok(Step::Propose(_))));
        assert_eq!(step(&remove(9), &conf(&[1, 2, 3], &[]), &none, 1), Ok(Step::Done(Role::Gone)));
        assert_eq!(step(&remove(1), &conf(&[1], &[2]), &none, 1), Err(Conflict::LastVoter { id: 1 }));
        let Ok(Step::HandOver(Some(cc))) = step(&remove(1), &conf(&[1, 2, 3], &[]), &none, 1) else {
            panic!("the leader is made a learner first")
        };
        assert_eq!(cc.changes[0].change_type(), ConfChangeType::AddLearnerNode);
        assert_eq!(step(&remove(1), &conf(&[2, 3], &[1]), &none, 1), Ok(Step::HandOver(None)), "and then hands over");
        assert!(
            matches!(step(&remove(1), &conf(&[2, 3], &[1]), &none, 2), Ok(Step::Propose(_))),
            "removed by the next"
        );
    }

    #[test]
    fn committed_changes_keep_an_added_nodes_address_through_its_promotion_and_drop_a_removed_ones() {
        let mut at = Addresses::new();
        let Ok(Step::Propose(cc)) = step(&add(4, "h4:7400"), &conf(&[1, 2, 3], &[]), &at, 1) else { panic!() };
        note(&mut at, &cc);
        note(&mut at, &promotion(4));
        assert_eq!(at.get(&4).map(String::as_str), Some("h4:7400"));
        let Ok(Step::Propose(cc)) = step(&Change::Remove { id: 4 }, &conf(&[1, 2, 3, 4], &[]), &at, 1) else {
            panic!()
        };
        note(&mut at, &cc);
        assert!(at.is_empty());
        assert_eq!(all(&conf(&[1, 2], &[3])), vec![1, 2, 3]);
    }
}
