//! A leader's freshness claims, confirmed (issue 33, item 4). A replica
//! that leads answers "this is the tail", "this does not exist" and the
//! like from its own state; a leader cut off and replaced, that has not yet
//! noticed (check-quorum steps it down within an election timeout or two),
//! would answer them from stale state. So such an answer waits here until
//! the replica confirmed, *after* the state was read, that it still leads:
//! one raft-rs read index round (`ReadOnlyOption::Safe`: a heartbeat to
//! every follower carrying the round's context, answered once a majority
//! acknowledged this term). No newer leader can have acknowledged a write
//! before such a round, so the answer was fresh when it was read.
//!
//! This file is the bookkeeping, with no I/O and no Raft: the shard's
//! requests queue here (shared through `replica::Status`); the replica's
//! loop starts at most one round at a time, for every waiter queued before
//! it started (a waiter queued later waits for the next round: the
//! heartbeats of a round already sent may have left before its state was
//! read), and ends a round when raft-rs confirms it (true), or when the lead
//! ends or its deadline passes (false: the shard answers 503). Under load
//! many waiters share one round: one heartbeat per follower per round trip.

use crate::limits::{CELL_CONFIRMS_MAX, CELL_CONFIRM_TICKS};
use crate::notify::Notify;
use futures_channel::oneshot;
use std::cell::RefCell;

/// Which lead of this replica a request read its state under: taken before
/// the read, so a waiter of an earlier lead is never confirmed by a later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(Option<u64>);

/// The waiters of a replica's group and the round in flight.
#[derive(Default)]
pub struct Confirms {
    inner: RefCell<Inner>,
    /// Rings the replica's loop when a waiter is queued.
    wanted: Notify,
}

#[derive(Default)]
struct Inner {
    /// The number of the current lead, while this replica's shard writes.
    lead: Option<u64>,
    leads: u64,
    queued: Vec<oneshot::Sender<bool>>,
    round: Option<Round>,
    /// Rounds started so far (each one read index, one heartbeat a peer).
    rounds: u64,
    /// Rounds ended confirmed, and refused (deadline passed, lead ended).
    confirmed: u64,
    failed: u64,
}

/// What the rounds of a replica came to so far (for the metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rounds {
    pub started: u64,
    pub confirmed: u64,
    pub failed: u64,
}

struct Round {
    ctx: Vec<u8>,
    waiters: Vec<oneshot::Sender<bool>>,
    /// The tick at which it fails unanswered.
    deadline: u64,
}

impl std::fmt::Debug for Confirms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = self.inner.borrow();
        f.debug_struct("Confirms").field("lead", &i.lead).field("queued", &i.queued.len()).finish()
    }
}

impl Confirms {
    /// Before the request reads its state.
    pub fn ticket(&self) -> Ticket {
        Ticket(self.inner.borrow().lead)
    }

    /// After it read its state: resolves to whether the replica still led,
    /// under the same lead, after the read. False at once when it does not
    /// lead now, led differently when the ticket was taken, or
    /// `CELL_CONFIRMS_MAX` requests already wait.
    pub async fn confirm(&self, ticket: Ticket) -> bool {
        let Some(rx) = self.ask(ticket) else { return false };
        // A sender dropped unanswered (the replica stopped) is a refusal.
        rx.await.unwrap_or(false)
    }

    fn ask(&self, ticket: Ticket) -> Option<oneshot::Receiver<bool>> {
        let mut i = self.inner.borrow_mut();
        let waiting = i.queued.len() + i.round.as_ref().map_or(0, |r| r.waiters.len());
        if ticket.0.is_none() || ticket.0 != i.lead || waiting >= CELL_CONFIRMS_MAX {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        i.queued.push(tx);
        self.wanted.notify();
        Some(rx)
    }

    /// Resolves when a waiter was queued since the last time it resolved.
    pub async fn wanted(&self) {
        self.wanted.wait().await
    }

    /// The replica's shard begins to write: a new lead.
    pub fn lead_begins(&self) {
        let mut i = self.inner.borrow_mut();
        i.leads += 1;
        i.lead = Some(i.leads);
    }

    /// The lead ended: no waiter of it is confirmed.
    pub fn lead_ends(&self) {
        let mut i = self.inner.borrow_mut();
        i.lead = None;
        let round = i.round.take().map(|r| r.waiters);
        i.failed += u64::from(round.is_some());
        let round = round.unwrap_or_default();
        let queued = std::mem::take(&mut i.queued);
        answer(round.into_iter().chain(queued), false);
    }

    /// Starts a round for every waiter queued, if any and no round is in
    /// flight: the context to give raft-rs's read index, unique in the
    /// cell (`node`, this replica's id, and a count).
    pub fn start(&self, node: u64, tick: u64) -> Option<Vec<u8>> {
        let mut i = self.inner.borrow_mut();
        if i.round.is_some() || i.queued.is_empty() || i.lead.is_none() {
            return None;
        }
        i.rounds += 1;
        let mut ctx = node.to_be_bytes().to_vec();
        ctx.extend_from_slice(&i.rounds.to_be_bytes());
        let waiters = std::mem::take(&mut i.queued);
        i.round = Some(Round { ctx: ctx.clone(), waiters, deadline: tick + CELL_CONFIRM_TICKS });
        Some(ctx)
    }

    /// raft-rs answered the read index of `ctx`: the round's waiters are
    /// confirmed if `confirmed`. Those queued meanwhile ring the loop
    /// again: their round starts at its next turn.
    pub fn answered(&self, ctx: &[u8], confirmed: bool) {
        let mut i = self.inner.borrow_mut();
        if i.round.as_ref().is_some_and(|r| r.ctx == ctx) {
            answer(i.round.take().expect("checked").waiters, confirmed);
            if confirmed {
                i.confirmed += 1;
            } else {
                i.failed += 1;
            }
            if !i.queued.is_empty() {
                self.wanted.notify();
            }
        }
    }

    /// At each tick: a round unanswered by its deadline fails (its
    /// heartbeats, or their acks, lost; or no majority left).
    pub fn expire(&self, tick: u64) {
        let mut i = self.inner.borrow_mut();
        if i.round.as_ref().is_some_and(|r| tick >= r.deadline) {
            answer(i.round.take().expect("checked").waiters, false);
            i.failed += 1;
        }
    }

    /// Rounds started so far.
    pub fn rounds(&self) -> u64 {
        self.inner.borrow().rounds
    }

    /// Rounds started, confirmed and refused so far.
    pub fn outcomes(&self) -> Rounds {
        let i = self.inner.borrow();
        Rounds { started: i.rounds, confirmed: i.confirmed, failed: i.failed }
    }

    /// Requests waiting, queued or in the round in flight.
    pub fn waiting(&self) -> usize {
        let i = self.inner.borrow();
        i.queued.len() + i.round.as_ref().map_or(0, |r| r.waiters.len())
    }
}

/// A waiter gone (its request dropped) needs no answer.
fn answer(waiters: impl IntoIterator<Item = oneshot::Sender<bool>>, confirmed: bool) {
    for w in waiters {
        let _ = w.send(confirmed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::FutureExt;

    fn leading() -> Confirms {
        let c = Confirms::default();
        c.lead_begins();
        c
    }

    #[test]
    fn a_round_confirms_exactly_the_waiters_queued_before_it_started() {
        let c = leading();
        let t = c.ticket();
        let (a, b) = (c.ask(t).unwrap(), c.ask(t).unwrap());
        let ctx = c.start(7, 0).expect("a round");
        assert_eq!(&ctx[..8], &7u64.to_be_bytes(), "the node id makes it unique in the cell");
        assert_eq!(c.start(7, 0), None, "one round at a time");
        let late = c.ask(t).unwrap();
        c.answered(b"other", true);
        assert_eq!(c.waiting(), 3, "a context of no round changes nothing");
        c.answered(&ctx, true);
        assert_eq!((block_on(a), block_on(b)), (Ok(true), Ok(true)));
        let mut late = late;
        assert!((&mut late).now_or_never().is_none(), "not confirmed by a round sent before it was queued");
        let next = c.start(7, 0).unwrap();
        assert_ne!(next, ctx);
        c.answered(&next, true);
        assert_eq!(block_on(late), Ok(true));
        assert_eq!(c.rounds(), 2);
        assert_eq!(c.outcomes(), Rounds { started: 2, confirmed: 2, failed: 0 });
    }

    #[test]
    fn a_lead_that_ends_or_a_deadline_refuses_every_waiter() {
        let c = leading();
        let t = c.ticket();
        let (a, b) = (c.ask(t).unwrap(), c.ask(t).unwrap());
        c.start(1, 10).unwrap();
        let queued = c.ask(t).unwrap();
        c.expire(10 + CELL_CONFIRM_TICKS - 1);
        assert_eq!(c.waiting(), 3, "not yet");
        c.expire(10 + CELL_CONFIRM_TICKS);
        assert_eq!((block_on(a), block_on(b)), (Ok(false), Ok(false)));
        assert_eq!(c.outcomes(), Rounds { started: 1, confirmed: 0, failed: 1 }, "the deadline");
        c.start(1, 11).unwrap();
        c.lead_ends();
        assert_eq!(block_on(queued), Ok(false));
        assert_eq!(c.outcomes(), Rounds { started: 2, confirmed: 0, failed: 2 }, "the lead ended in a round");
        assert_eq!(c.waiting(), 0);
        assert!(c.ask(c.ticket()).is_none(), "not leading: refused at once");
        assert_eq!(c.start(1, 11), None);
    }

    #[test]
    fn a_ticket_of_an_earlier_lead_is_refused() {
        let c = leading();
        let before = c.ticket();
        c.lead_ends();
        c.lead_begins();
        assert!(c.ask(before).is_none(), "the state was read under another lead");
        assert!(!block_on(c.confirm(before)));
        assert!(c.ask(c.ticket()).is_some());
        assert!(c.ask(Ticket(None)).is_none());
    }

    #[test]
    fn waiters_are_bounded() {
        let c = leading();
        let t = c.ticket();
        let held: Vec<_> = (0..CELL_CONFIRMS_MAX).map(|_| c.ask(t).expect("room")).collect();
        assert!(c.ask(t).is_none(), "one more than the bound is refused at once");
        c.start(1, 0).unwrap();
        assert!(c.ask(t).is_none(), "those in the round count too");
        drop(held);
        c.lead_ends();
        c.lead_begins();
        assert!(c.ask(c.ticket()).is_some());
    }
}
