//! The cell's membership API (`POST`/`DELETE /_cell/members/{id}`) as
//! the edge hands it to each group's leader, and what a group answers.
//! Pure data: the replica makes the change (`cell::replica`).

/// A change of one group's members, run by that group's leader.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberChange {
    /// Node `id`, whose peer links listen at `peer` (its own `--cell`
    /// entry, `HOST:PORT`; group *i* at that port plus *i*), joins: as a
    /// learner, made a voter by the leader once it caught up.
    Add { id: u64, peer: String },
    /// Node `id` leaves the group.
    Remove { id: u64 },
}

/// A node's place in a group once a change was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberRole {
    /// It votes (an add answered once it caught up and was promoted).
    Voter,
    /// It is added and catching up: the leader makes it a voter once it
    /// holds the log (an add whose wait ran out first).
    Learner,
    /// It is no member (a removal answered).
    Gone,
}

impl MemberRole {
    pub fn name(self) -> &'static str {
        match self {
            MemberRole::Voter => "voter",
            MemberRole::Learner => "learner",
            MemberRole::Gone => "gone",
        }
    }
}

/// One group's answer to a [`MemberChange`], committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberOutcome {
    pub group: u32,
    pub role: MemberRole,
    /// The index of the last change this took (0: none was needed, the
    /// group already had it so).
    pub index: u64,
}
