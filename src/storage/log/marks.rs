//! Where a batched log's entries are: the marks of the most recent batches
//! in memory, and for each segment the first entry closed in it, so an
//! older entry is found by reading one segment's closes.
//!
//! Memory stays bounded: [`BATCH_MARKS_KEPT`] marks and one number per
//! segment, however long the log.

use super::batches::BatchMark;
use crate::limits::BATCH_MARKS_KEPT;
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Default)]
pub(super) struct Marks {
    recent: VecDeque<BatchMark>,
    /// Segment → the index of the first batch closed in it.
    firsts: BTreeMap<u64, u64>,
    /// The log's first mark (its batch may have begun in a segment the log
    /// no longer holds, or never held: see `LocalLog::first_index`).
    head: Option<BatchMark>,
}

impl Marks {
    /// The marks of a log, in order.
    #[cfg(test)]
    pub(super) fn of(marks: &[BatchMark]) -> Marks {
        let mut m = Marks::default();
        for &mark in marks {
            m.push(mark);
        }
        m
    }

    pub(super) fn push(&mut self, mark: BatchMark) {
        if self.recent.len() == BATCH_MARKS_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(mark);
        self.firsts.entry(mark.end.segment).or_insert(mark.close.index);
        self.head.get_or_insert(mark);
    }

    /// The log's first mark.
    pub(super) fn head(&self) -> Option<BatchMark> {
        self.head
    }

    /// The first segment after `through` that holds a close, and the index
    /// of the first entry closed in it.
    pub(super) fn first_after(&self, through: u64) -> Option<(u64, u64)> {
        self.firsts.range(through + 1..).next().map(|(&no, &first)| (no, first))
    }

    /// Forgets the marks of the segments up to `through` (their files are
    /// gone); `head` is the first mark closed after them.
    pub(super) fn forget_through(&mut self, through: u64, head: BatchMark) {
        self.firsts.retain(|&no, _| no > through);
        while self.recent.front().is_some_and(|m| m.end.segment <= through) {
            self.recent.pop_front();
        }
        self.head = Some(head);
    }

    /// The recent marks, oldest first.
    pub(super) fn recent_all(&self) -> Vec<BatchMark> {
        self.recent.iter().copied().collect()
    }

    pub(super) fn last(&self) -> Option<BatchMark> {
        self.recent.back().copied()
    }

    /// The mark of entry `index` if it is among the recent ones.
    pub(super) fn recent(&self, index: u64) -> Option<BatchMark> {
        let front = self.recent.front()?.close.index;
        let at = index.checked_sub(front)?;
        self.recent.get(usize::try_from(at).ok()?).copied()
    }

    /// The index of the last entry closed in segment `no`, if one was.
    pub(super) fn last_in(&self, no: u64) -> Option<u64> {
        self.firsts.get(&no)?;
        match self.first_after(no) {
            Some((_, next)) => Some(next - 1),
            None => self.last().map(|m| m.close.index),
        }
    }

    /// The segment entry `index` was closed in, if the log holds it.
    pub(super) fn segment_of(&self, index: u64) -> Option<u64> {
        if index > self.last()?.close.index {
            return None;
        }
        self.firsts.iter().rev().find(|(_, &first)| first <= index).map(|(&no, _)| no)
    }

    /// Forgets every mark after `to` (all of them for None).
    pub(super) fn cut_after(&mut self, to: Option<BatchMark>) {
        let Some(to) = to else {
            *self = Marks::default();
            return;
        };
        while self.recent.back().is_some_and(|m| m.close.index > to.close.index) {
            self.recent.pop_back();
        }
        self.firsts.retain(|&no, &mut first| no <= to.end.segment && first <= to.close.index);
        if self.recent.is_empty() {
            // Older than every recent mark: it is the newest now.
            self.push(to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::log::batches::BatchEnd;
    use crate::storage::record::BatchClose;

    fn mark(index: u64, segment: u64) -> BatchMark {
        BatchMark {
            close: BatchClose { term: 1, index, start: (segment, index * 100) },
            end: BatchEnd { segment, pos: index * 100 + 48 },
        }
    }

    #[test]
    fn finds_recent_marks_and_the_segment_of_any() {
        let all: Vec<_> = (1..=10).map(|i| mark(i, i / 4)).collect();
        let m = Marks::of(&all);
        assert_eq!(m.head().map(|h| h.close.index), Some(1));
        assert_eq!(m.recent(7), Some(all[6]));
        assert_eq!(m.recent(11), None);
        assert_eq!(m.recent(0), None);
        assert_eq!((m.segment_of(3), m.segment_of(4), m.segment_of(10)), (Some(0), Some(1), Some(2)));
        assert_eq!(m.segment_of(11), None);
    }

    #[test]
    fn keeps_a_bounded_number_of_marks() {
        let mut m = Marks::default();
        let n = BATCH_MARKS_KEPT as u64 + 10;
        for i in 1..=n {
            m.push(mark(i, i / 1000));
        }
        assert_eq!(m.recent(10), None, "forgotten");
        assert_eq!(m.recent(11), Some(mark(11, 0)));
        assert_eq!(m.segment_of(10), Some(0), "still found by segment");
        assert_eq!(m.head().map(|h| h.close.index), Some(1));
    }

    #[test]
    fn a_cut_forgets_what_follows() {
        let all: Vec<_> = (1..=10).map(|i| mark(i, i / 4)).collect();
        let mut m = Marks::of(&all);
        m.cut_after(Some(all[4]));
        assert_eq!(m.last(), Some(all[4]));
        assert_eq!(m.segment_of(6), None);
        assert_eq!(m.segment_of(5), Some(1));
        m.push(mark(6, 3));
        assert_eq!(m.segment_of(6), Some(3));
        m.cut_after(None);
        assert_eq!((m.last(), m.head()), (None, None));
    }
}
