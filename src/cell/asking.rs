//! A membership change asked of a group's leader (`/_cell/members`), run
//! beside its replica on the same executor: what the change needs now
//! (`members::step`), its proposal through the replica's loop
//! (`Status::asked`), the wait until every step is applied, and for a node
//! added, until it caught up (`Status::caught_up`) and the change that
//! makes it a voter is applied. Every wait is bounded by one deadline; the
//! lead lost meanwhile is a retry the caller makes (503: the change is
//! idempotent, a retry finds what was made).

use super::group::Refused;
use super::members::{self, Change, Role, Step};
use super::replica::{Asked, Sleep, Status};
use futures_channel::oneshot;
use std::time::{Duration, Instant};

/// A change made: the node's role in the group, and the index of the last
/// change applied for it (0: none was needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Made {
    pub role: Role,
    pub index: u64,
}

/// Why a change was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotMade {
    /// It cannot be (a conflict with the members as they are).
    #[error("{0}")]
    Conflict(String),
    /// Not now (the lead moved or is being handed over, no majority):
    /// asked again, of the leader then, it goes on where it stopped.
    #[error("{0}")]
    Retry(String),
}

/// Where a change is made: group `group`, whose leader, replica `me`,
/// publishes to `status`; waits look again every `tick`, until `deadline`.
pub struct Asking<'a> {
    pub status: &'a Status,
    pub group: u32,
    pub me: u64,
    pub sleep: &'a Sleep,
    pub tick: Duration,
    pub deadline: Instant,
}

impl Asking<'_> {
    /// Makes `change`, answered once every step it needs is applied (for
    /// an add, once the node is a voter; a learner when it did not catch
    /// up in time).
    pub async fn change(&self, change: Change) -> Result<Made, NotMade> {
        let step = {
            let now = self.status.members.borrow();
            members::step(&change, &now.conf, &now.addresses, self.me).map_err(|c| NotMade::Conflict(c.to_string()))?
        };
        let index = match step {
            Step::Done(role) => return Ok(self.outcome(role, 0)),
            Step::AwaitVoter => self.status.members.borrow().index,
            Step::Propose(cc) => self.applied(cc).await?,
            Step::HandOver(demotion) => {
                if let Some(cc) = demotion {
                    self.applied(cc).await?;
                }
                return Err(NotMade::Retry(format!(
                    "node {} leads group {} and is to be removed: it is a learner now and hands its lead to a \
                     voter, which removes it: repeat the request",
                    self.me, self.group
                )));
            }
        };
        match change {
            Change::Add { id, .. } => self.promoted(id, index).await,
            Change::Remove { .. } => Ok(self.outcome(Role::Gone, index)),
        }
    }

    fn outcome(&self, role: Role, index: u64) -> Made {
        Made { role, index }
    }

    /// Proposes `cc` and waits until it is applied; its index.
    async fn applied(&self, cc: raft::prelude::ConfChangeV2) -> Result<u64, NotMade> {
        let proposed = propose(self.status, cc);
        let late = async {
            (self.sleep)(self.deadline.saturating_duration_since(Instant::now())).await;
            Err(Waited::TimedOut.into())
        };
        let index = futures_lite::future::or(proposed, late).await?;
        self.until(|s| s.members.borrow().index >= index).await?;
        Ok(index)
    }

    /// Learner `id`, added by the change at `index`, made a voter once it
    /// caught up; still a learner when the deadline came first.
    async fn promoted(&self, id: u64, index: u64) -> Result<Made, NotMade> {
        let caught_up = |s: &Status| s.caught_up.borrow().contains(&id) || self.role_of(id) != Role::Learner;
        match self.until(caught_up).await {
            Ok(()) => {}
            Err(Waited::TimedOut) => return Ok(self.outcome(Role::Learner, index)),
            Err(lost) => return Err(lost.into()),
        }
        if self.role_of(id) == Role::Learner {
            let index = self.applied(members::promotion(id)).await?;
            tracing::info!("group {}: node {id} caught up: entry {index} makes it a voter", self.group);
        }
        Ok(self.outcome(self.role_of(id), self.status.members.borrow().index))
    }

    fn role_of(&self, id: u64) -> Role {
        members::role(&self.status.members.borrow().conf, id)
    }

    /// Waits until `done` holds, while this replica leads, until the
    /// deadline.
    async fn until(&self, done: impl Fn(&Status) -> bool) -> Result<(), Waited> {
        loop {
            if done(self.status) {
                return Ok(());
            }
            if !self.status.leading.get() {
                return Err(Waited::LeadLost);
            }
            if Instant::now() >= self.deadline {
                return Err(Waited::TimedOut);
            }
            (self.sleep)(self.tick).await;
        }
    }
}

/// Hands `cc` to the replica's loop; its index once proposed.
async fn propose(status: &Status, cc: raft::prelude::ConfChangeV2) -> Result<u64, NotMade> {
    let (answer, proposed) = oneshot::channel();
    status.asked.borrow_mut().push_back(Asked { change: cc, answer });
    match proposed.await {
        Ok(Ok(index)) => Ok(index),
        Ok(Err(Refused::NotLeader { leader })) => Err(NotMade::Retry(format!(
            "this replica no longer leads its group (leader: {leader:?}): repeat the request"
        ))),
        Ok(Err(refused)) => Err(NotMade::Retry(format!("the group's leader refused the change now: {refused}"))),
        Err(_) => Err(NotMade::Retry("the group's replica stopped".into())),
    }
}

/// Why a wait ended without what it waited for.
#[derive(Debug, PartialEq, Eq)]
enum Waited {
    TimedOut,
    LeadLost,
}

impl From<Waited> for NotMade {
    fn from(w: Waited) -> NotMade {
        NotMade::Retry(match w {
            Waited::TimedOut => "the change was not applied in time (no majority?): repeat the request".into(),
            Waited::LeadLost => "the lead moved while the change was made: repeat the request".into(),
        })
    }
}
