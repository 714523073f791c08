//! A follower's live reads, held until the replica has applied everything
//! its leader had committed when they arrived (issue 33). A live read
//! (long-poll, SSE) is served from what the replica applied; a follower
//! that has not yet heard of the latest commit would answer "up to date"
//! short of writes already acknowledged, through this node even (a client
//! that appends through a follower, then reads there, would miss its own
//! append). So such a read first waits here: one raft-rs read index round
//! asked through the leader (it confirms its lead with a heartbeat round
//! and answers its commit index), then until the replica applied up to that
//! index.
//!
//! This file is the bookkeeping, with no I/O and no Raft: the shard's reads
//! queue here (shared through `replica::Status`); the replica's loop starts
//! at most one round at a time, for every waiter queued before it started;
//! an answered round's waiters are held until the replica applied its
//! index; a round unanswered by its deadline (no leader known, a leader not
//! yet committing in its term, a lost message) or held past it fails them
//! (the shard answers 503). Under load many reads share one round.

use super::confirm::Rounds;
use crate::limits::{CELL_CATCH_UPS_MAX, CELL_CONFIRM_TICKS};
use crate::notify::Notify;
use futures_channel::oneshot;
use std::cell::RefCell;

/// The first byte of a catch-up round's context: raft-rs matches answers by
/// context, and a leader's own rounds (`confirm`) number theirs alike.
const CONTEXT_TAG: u8 = b'F';

/// The reads waiting on a follower, the round in flight and the rounds
/// answered but not yet applied.
#[derive(Default)]
pub struct CatchUps {
    inner: RefCell<Inner>,
    /// Rings the replica's loop when a read is queued.
    wanted: Notify,
}

#[derive(Default)]
struct Inner {
    queued: Vec<oneshot::Sender<bool>>,
    round: Option<Round>,
    /// Answered rounds: the index to apply, the deadline, the waiters.
    held: Vec<Held>,
    rounds: u64,
    /// Rounds whose reads were caught up, and that failed.
    caught_up: u64,
    failed: u64,
}

struct Round {
    ctx: Vec<u8>,
    waiters: Vec<oneshot::Sender<bool>>,
    deadline: u64,
}

struct Held {
    index: u64,
    deadline: u64,
    waiters: Vec<oneshot::Sender<bool>>,
}

impl std::fmt::Debug for CatchUps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatchUps").field("waiting", &self.waiting()).finish()
    }
}

impl CatchUps {
    /// Resolves to true once the replica applied every entry its leader
    /// had committed after this was called; false when that could not be
    /// learnt in time or `CELL_CATCH_UPS_MAX` reads already wait.
    pub async fn caught_up(&self) -> bool {
        let Some(rx) = self.ask() else { return false };
        // A sender dropped unanswered (the replica stopped) is a refusal.
        rx.await.unwrap_or(false)
    }

    fn ask(&self) -> Option<oneshot::Receiver<bool>> {
        if self.waiting() >= CELL_CATCH_UPS_MAX {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        self.inner.borrow_mut().queued.push(tx);
        self.wanted.notify();
        Some(rx)
    }

    /// Resolves when a read was queued since the last time it resolved.
    pub async fn wanted(&self) {
        self.wanted.wait().await
    }

    /// Starts a round for every read queued, if any and no round is in
    /// flight: the context to give raft-rs's read index, unique in the cell
    /// (a tag, `node`, and a count).
    pub fn start(&self, node: u64, tick: u64) -> Option<Vec<u8>> {
        let mut i = self.inner.borrow_mut();
        if i.round.is_some() || i.queued.is_empty() {
            return None;
        }
        i.rounds += 1;
        let mut ctx = vec![CONTEXT_TAG];
        ctx.extend_from_slice(&node.to_be_bytes());
        ctx.extend_from_slice(&i.rounds.to_be_bytes());
        let waiters = std::mem::take(&mut i.queued);
        i.round = Some(Round { ctx: ctx.clone(), waiters, deadline: tick + CELL_CONFIRM_TICKS });
        Some(ctx)
    }

    /// raft-rs answered the read index of `ctx` with `index`: the round's
    /// reads wait until the replica applied it. False if `ctx` is not this
    /// round's (another's answer: a leader's own round, say).
    pub fn answered(&self, ctx: &[u8], index: u64) -> bool {
        let mut i = self.inner.borrow_mut();
        if i.round.as_ref().is_none_or(|r| r.ctx != ctx) {
            return ctx.first() == Some(&CONTEXT_TAG);
        }
        let Round { waiters, deadline, .. } = i.round.take().expect("checked");
        i.held.push(Held { index, deadline, waiters });
        if !i.queued.is_empty() {
            self.wanted.notify();
        }
        true
    }

    /// The replica applied every entry up to `index`: the reads held for
    /// it are caught up.
    pub fn applied(&self, index: u64) {
        let done: Vec<Held> = {
            let mut i = self.inner.borrow_mut();
            let (done, held): (Vec<Held>, _) = std::mem::take(&mut i.held).into_iter().partition(|h| h.index <= index);
            i.held = held;
            i.caught_up += done.len() as u64;
            done
        };
        answer(done.into_iter().flat_map(|h| h.waiters), true);
    }

    /// The replica leads now, every committed entry applied: it holds all
    /// any earlier leader committed, so every read waiting is caught up.
    pub fn leads(&self) {
        let mut i = self.inner.borrow_mut();
        let round = i.round.take().map(|r| r.waiters);
        i.caught_up += u64::from(round.is_some()) + i.held.len() as u64;
        let round = round.unwrap_or_default();
        let held = std::mem::take(&mut i.held).into_iter().flat_map(|h| h.waiters);
        let queued = std::mem::take(&mut i.queued);
        drop(i);
        answer(round.into_iter().chain(held).chain(queued), true);
    }

    /// At each tick: a round unanswered by its deadline, and reads held
    /// past it, fail.
    pub fn expire(&self, tick: u64) {
        let mut i = self.inner.borrow_mut();
        let mut late = Vec::new();
        if i.round.as_ref().is_some_and(|r| tick >= r.deadline) {
            late.extend(i.round.take().expect("checked").waiters);
            i.failed += 1;
        }
        let (over, held) = std::mem::take(&mut i.held).into_iter().partition::<Vec<_>, _>(|h| tick >= h.deadline);
        i.held = held;
        i.failed += over.len() as u64;
        late.extend(over.into_iter().flat_map(|h| h.waiters));
        drop(i);
        answer(late, false);
    }

    /// Rounds started so far.
    pub fn rounds(&self) -> u64 {
        self.inner.borrow().rounds
    }

    /// Rounds started, caught up and failed so far (for the metrics).
    pub fn outcomes(&self) -> Rounds {
        let i = self.inner.borrow();
        Rounds { started: i.rounds, confirmed: i.caught_up, failed: i.failed }
    }

    /// Reads waiting: queued, in the round in flight, or held.
    pub fn waiting(&self) -> usize {
        let i = self.inner.borrow();
        let held: usize = i.held.iter().map(|h| h.waiters.len()).sum();
        i.queued.len() + i.round.as_ref().map_or(0, |r| r.waiters.len()) + held
    }
}

/// A waiter gone (its read dropped) needs no answer.
fn answer(waiters: impl IntoIterator<Item = oneshot::Sender<bool>>, caught_up: bool) {
    for w in waiters {
        let _ = w.send(caught_up);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::FutureExt;

    #[test]
    fn a_read_waits_for_its_round_and_then_for_the_index_to_be_applied() {
        let c = CatchUps::default();
        let (mut a, b) = (c.ask().unwrap(), c.ask().unwrap());
        let ctx = c.start(2, 0).expect("a round");
        assert_eq!((ctx[0], &ctx[1..9]), (CONTEXT_TAG, &2u64.to_be_bytes()[..]));
        assert_eq!(c.start(2, 0), None, "one round at a time");
        let mut late = c.ask().unwrap();
        assert!(!c.answered(&[0; 16], 9), "a leader's round is not ours");
        assert!(c.answered(&ctx, 9));
        c.applied(8);
        assert!((&mut a).now_or_never().is_none(), "entry 9 is not applied yet");
        c.applied(9);
        assert_eq!((block_on(a), block_on(b)), (Ok(true), Ok(true)));
        assert!((&mut late).now_or_never().is_none(), "its round was sent before it was queued");
        let next = c.start(2, 1).expect("the next round");
        assert_ne!(next, ctx);
        assert!(c.answered(&next, 3));
        c.applied(9);
        assert_eq!(block_on(late), Ok(true), "an index already applied");
        assert_eq!((c.rounds(), c.waiting()), (2, 0));
        assert_eq!(c.outcomes(), Rounds { started: 2, confirmed: 2, failed: 0 });
    }

    #[test]
    fn a_round_unanswered_or_unapplied_by_its_deadline_fails() {
        let c = CatchUps::default();
        let a = c.ask().unwrap();
        c.start(1, 10).unwrap();
        c.expire(10 + CELL_CONFIRM_TICKS - 1);
        assert_eq!(c.waiting(), 1, "not yet");
        c.expire(10 + CELL_CONFIRM_TICKS);
        assert_eq!(block_on(a), Ok(false), "no answer: no leader, say");
        let b = c.ask().unwrap();
        let ctx = c.start(1, 20).unwrap();
        c.answered(&ctx, 50);
        c.expire(20 + CELL_CONFIRM_TICKS);
        assert_eq!(block_on(b), Ok(false), "answered, never applied in time");
        assert_eq!(c.outcomes(), Rounds { started: 2, confirmed: 0, failed: 2 });
        assert_eq!(c.waiting(), 0);
    }

    #[test]
    fn a_replica_that_comes_to_lead_has_caught_up_every_read() {
        let c = CatchUps::default();
        let held = c.ask().unwrap();
        let ctx = c.start(3, 0).unwrap();
        c.answered(&ctx, 100);
        let in_round = c.ask().unwrap();
        c.start(3, 0).unwrap();
        let queued = c.ask().unwrap();
        c.leads();
        assert_eq!((block_on(held), block_on(in_round), block_on(queued)), (Ok(true), Ok(true), Ok(true)));
        assert_eq!(c.outcomes(), Rounds { started: 2, confirmed: 2, failed: 0 }, "the queued read had no round");
        assert_eq!(c.waiting(), 0);
    }

    #[test]
    fn past_the_limit_a_read_is_refused_at_once() {
        let c = CatchUps::default();
        let _waiting: Vec<_> = (0..CELL_CATCH_UPS_MAX).map(|_| c.ask().unwrap()).collect();
        assert!(c.ask().is_none());
        assert!(!block_on(c.caught_up()));
    }
}
