//! A stream's table of idempotent producers, bounded: at most the policy's
//! producers per stream, each forgotten once idle past the policy's expiry.
//!
//! The table is a function of the stream's records and the policy: an
//! append record sets its producer's state and time (`written_at_ms`), a
//! state record replaces the whole table. Whether an entry counts is
//! decided from those times against a clock: an entry idle past the expiry
//! is as good as absent (`live` ignores it).
//!
//! Deterministic (the records' own times): the writer (a single node, a
//! cell's leader) stamps an append with its clock and, before it admits a
//! producer it does not know into a full table, drops the idle entries at
//! that same time ([`Producers::make_room`]). Replay (recovery, a follower
//! applying committed records) makes the same room at the record's
//! `written_at_ms` and holds the table to the bound at that time
//! ([`Producers::bound`]); a state record's table is held to the bound at
//! the record's `last_write_ms`. So nodes that applied the same records
//! under the same policy hold the same table, whatever their clocks, and
//! never more than the bound: memory per stream is bounded by it.
//!
//! Clock-dependent: which entries count when a request is decided (`live`
//! and `admit` at the node's clock: a clock behind keeps a producer longer,
//! which costs a slot but never a duplicate); the room a writer makes for
//! an append it then refuses (no record: replicas keep those idle entries,
//! which count for nothing, until their next sweep); and the idle entries
//! a writer drops before it writes a state record ([`Producers::prune`], at
//! its clock: the record carries the result, so whoever applies it agrees).
//! Nodes with different `--max-producers-per-stream` or expiry hold
//! different tables: a cell's nodes should share both.

use crate::protocol::persist::ProducerRecord;
use crate::protocol::rules::{self, ProducerPolicy, ProducerState};
use std::collections::{HashMap, VecDeque};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    state: ProducerState,
    /// `written_at_ms` of its last accepted append.
    last_ms: i64,
    /// (epoch, seq, tail) after each of its latest accepted appends, so a
    /// retried duplicate answers with the offset the original got
    /// (snakream.md). At most PRODUCER_ACKS_KEPT.
    acks: VecDeque<(u64, u64, u64)>,
}

#[derive(Debug, Default)]
pub(super) struct Producers {
    by_id: HashMap<String, Entry>,
}

impl Producers {
    /// Entries held, idle ones included until [`Producers::forget_idle`].
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The producer's state, unless it is unknown or idle at `now_ms`.
    pub(super) fn live(&self, id: &str, policy: &ProducerPolicy, now_ms: i64) -> Option<ProducerState> {
        let e = self.by_id.get(id)?;
        (!rules::producer_idle(policy, e.last_ms, now_ms)).then_some(e.state)
    }

    /// Whether producer `id` may write at `now_ms` (see
    /// [`rules::admit_producer`]); after [`Producers::make_room`], the
    /// entries held are exactly those that count. Changes nothing.
    pub(super) fn admit(&self, id: &str, policy: &ProducerPolicy, now_ms: i64) -> Result<(), crate::protocol::Error> {
        let known = self.live(id, policy, now_ms).is_some();
        rules::admit_producer(policy, known, self.len())
    }

    /// Before producer `id` is admitted at `now_ms`: when it is not known
    /// and the table is full, the idle entries go, so that only producers
    /// that count fill it (the sweep runs only then, so it costs at most
    /// one pass over a full table per newcomer).
    pub(super) fn make_room(&mut self, id: &str, policy: &ProducerPolicy, now_ms: i64) {
        if self.len() >= policy.max_per_stream && self.live(id, policy, now_ms).is_none() {
            self.forget_idle(policy, now_ms);
        }
    }

    /// Drops the entries idle at `now_ms`: they already count for nothing.
    pub(super) fn forget_idle(&mut self, policy: &ProducerPolicy, now_ms: i64) {
        self.by_id.retain(|_, e| !rules::producer_idle(policy, e.last_ms, now_ms));
    }

    /// Holds the table to the bound at `at_ms`: past it, the idle entries
    /// go, then the least recently written ones. A writer's admission keeps
    /// its table within the bound, so this acts only on a table built under
    /// a larger bound (or before there was one): those producers are
    /// forgotten as if idle, so that memory and state records stay bounded.
    pub(super) fn bound(&mut self, policy: &ProducerPolicy, at_ms: i64) {
        if self.len() <= policy.max_per_stream {
            return;
        }
        self.forget_idle(policy, at_ms);
        self.forget_least_recent(self.len().saturating_sub(policy.max_per_stream));
    }

    /// Drops the `n` entries written longest ago (ties by id, so every
    /// replica drops the same ones).
    fn forget_least_recent(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let mut oldest: Vec<(i64, String)> = self.by_id.iter().map(|(id, e)| (e.last_ms, id.clone())).collect();
        oldest.select_nth_unstable(n - 1);
        for (_, id) in &oldest[..n] {
            self.by_id.remove(id);
        }
    }

    /// Before the table goes into a state record written at `now_ms`: the
    /// idle entries go (the record then carries only what counts, in memory
    /// and on every node that applies it alike), and the table is held to
    /// the bound, which the configuration checked fits one record.
    pub(super) fn prune(&mut self, policy: &ProducerPolicy, now_ms: i64) {
        self.forget_idle(policy, now_ms);
        self.bound(policy, now_ms);
    }

    /// An accepted append of producer `id` (epoch, seq), written at `at_ms`,
    /// after which the stream's tail is `tail`. A sequence that starts anew
    /// (seq 0: a new producer, one forgotten, or a new epoch) drops the
    /// acks of the old one: none of them can be retried any more, and an
    /// old (epoch, seq) must not answer for a new append.
    pub(super) fn accept(&mut self, id: &str, (epoch, seq): (u64, u64), tail: u64, at_ms: i64) {
        let e = self.by_id.entry(id.to_string()).or_insert_with(|| Entry {
            state: ProducerState { epoch, last_seq: seq },
            last_ms: at_ms,
            acks: VecDeque::new(),
        });
        if seq == 0 {
            e.acks.clear();
        }
        e.state = ProducerState { epoch, last_seq: seq };
        e.last_ms = at_ms;
        if e.acks.len() == crate::limits::PRODUCER_ACKS_KEPT {
            e.acks.pop_front();
        }
        e.acks.push_back((epoch, seq, tail));
    }

    /// The tail after producer `id`'s accepted append (epoch, seq), if
    /// still remembered.
    pub(super) fn acked_tail(&self, id: &str, epoch: u64, seq: u64) -> Option<u64> {
        let acks = &self.by_id.get(id)?.acks;
        acks.iter().rev().find(|(e, s, _)| *e == epoch && *s == seq).map(|(_, _, t)| *t)
    }

    /// The table as a state record lists it.
    pub(super) fn records(&self) -> Vec<ProducerRecord> {
        self.by_id
            .iter()
            .map(|(id, e)| ProducerRecord {
                id: id.clone(),
                epoch: e.state.epoch,
                last_seq: e.state.last_seq,
                last_ms: e.last_ms,
                acks: e.acks.iter().copied().collect(),
            })
            .collect()
    }

    /// The table a state record lists, held to the bound at `at_ms` (the
    /// record's own time: see [`Producers::bound`]).
    pub(super) fn from_records(records: &[ProducerRecord], policy: &ProducerPolicy, at_ms: i64) -> Self {
        let by_id = records
            .iter()
            .map(|p| {
                let state = ProducerState { epoch: p.epoch, last_seq: p.last_seq };
                (p.id.clone(), Entry { state, last_ms: p.last_ms, acks: p.acks.iter().copied().collect() })
            })
            .collect();
        let mut table = Producers { by_id };
        table.bound(policy, at_ms);
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Error;

    const MIN: i64 = 60_000;

    fn policy(max: usize) -> ProducerPolicy {
        ProducerPolicy::new(max, 60)
    }

    #[test]
    fn a_full_table_refuses_a_new_producer_and_keeps_the_known_ones() {
        let p = policy(3);
        let mut t = Producers::default();
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            t.make_room(id, &p, 1_000);
            t.admit(id, &p, 1_000).unwrap();
            t.accept(id, (0, 0), i as u64, 1_000);
        }
        t.make_room("d", &p, 2_000);
        assert_eq!(t.admit("d", &p, 2_000), Err(Error::ProducerLimit { limit: 3 }));
        assert_eq!(t.len(), 3, "a refusal holds nothing");
        for id in ["a", "b", "c"] {
            assert_eq!(t.admit(id, &p, 2_000), Ok(()), "{id} is known");
        }
    }

    #[test]
    fn an_idle_producer_frees_its_slot_and_starts_anew() {
        let p = policy(2);
        let mut t = Producers::default();
        t.accept("old", (3, 5), 10, 0);
        t.accept("busy", (0, 0), 20, MIN);
        // Exactly the expiry later "old" still counts; a moment after, not.
        assert_eq!(t.admit("new", &p, MIN), Err(Error::ProducerLimit { limit: 2 }));
        assert!(t.live("old", &p, MIN).is_some());
        assert_eq!(t.live("old", &p, MIN + 1), None);
        // Before room is made the idle entry still fills a slot.
        assert_eq!(t.admit("new", &p, MIN + 1), Err(Error::ProducerLimit { limit: 2 }));
        t.make_room("busy", &p, MIN + 1);
        assert_eq!(t.len(), 2, "a known producer makes no room");
        t.make_room("new", &p, MIN + 1);
        assert_eq!(t.len(), 1, "the idle entry is gone");
        assert_eq!(t.admit("new", &p, MIN + 1), Ok(()));
        // Its next append is a new producer's: old acks answer nothing.
        t.accept("old", (0, 0), 30, MIN + 2);
        assert_eq!(t.live("old", &p, MIN + 2), Some(ProducerState { epoch: 0, last_seq: 0 }));
        assert_eq!(t.acked_tail("old", 3, 5), None);
        assert_eq!(t.acked_tail("old", 0, 0), Some(30));
    }

    #[test]
    fn a_forgotten_producer_restarting_at_an_old_tuple_gets_its_new_tail() {
        let p = policy(4);
        let mut t = Producers::default();
        t.accept("p", (0, 0), 5, 0);
        t.accept("p", (0, 1), 9, 0);
        // Idle past the expiry but not yet dropped: it starts over at (0, 0).
        assert_eq!(t.live("p", &p, 2 * MIN), None);
        t.accept("p", (0, 0), 40, 2 * MIN);
        assert_eq!(t.acked_tail("p", 0, 0), Some(40));
        assert_eq!(t.acked_tail("p", 0, 1), None);
    }

    #[test]
    fn acks_are_bounded_per_producer() {
        let mut t = Producers::default();
        for seq in 0..100 {
            t.accept("p", (1, seq), seq * 10, 0);
        }
        assert_eq!(t.acked_tail("p", 1, 99), Some(990));
        assert_eq!(t.acked_tail("p", 1, 100 - crate::limits::PRODUCER_ACKS_KEPT as u64), Some(840));
        assert_eq!(t.acked_tail("p", 1, 10), None);
    }

    #[test]
    fn before_a_state_record_the_idle_go_and_the_table_is_held_to_the_bound() {
        let mut t = Producers::default();
        for (i, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
            t.accept(id, (0, 0), i as u64, i as i64 * MIN);
        }
        // At 3 min - 1 ms, "a" (written at 0) and "b" (1 min) are idle.
        t.prune(&policy(8), 3 * MIN - 1);
        assert_eq!(t.len(), 2);
        assert!(t.acked_tail("a", 0, 0).is_none() && t.acked_tail("b", 0, 0).is_none());
        // Past a (lowered) bound the least recently written go too.
        t.prune(&policy(1), 3 * MIN - 1);
        assert_eq!(t.records().iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), ["d"]);
    }

    #[test]
    fn the_bound_breaks_ties_in_time_by_id() {
        let mut t = Producers::default();
        for id in ["c", "a", "b", "d"] {
            t.accept(id, (0, 0), 1, 500);
        }
        t.bound(&policy(2), 500);
        let mut ids: Vec<String> = t.records().into_iter().map(|p| p.id).collect();
        ids.sort();
        assert_eq!(ids, ["c", "d"], "every replica forgets the same ones");
    }

    #[test]
    fn a_state_record_gives_back_the_same_table() {
        let p = policy(8);
        let mut t = Producers::default();
        t.accept("a", (1, 0), 3, 100);
        t.accept("a", (1, 1), 6, 200);
        t.accept("b", (0, 0), 9, 300);
        let back = Producers::from_records(&t.records(), &p, 300);
        assert_eq!(back.by_id, t.by_id);
        assert_eq!(back.live("a", &p, 200 + MIN), Some(ProducerState { epoch: 1, last_seq: 1 }));
        assert_eq!(back.live("a", &p, 201 + MIN), None, "the time travels with the state");
    }
}
