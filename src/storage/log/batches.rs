//! A batched log: one replica's copy of a replicated log (issue 33).
//!
//! The records appended since the last batch close are one batch; the
//! leader takes them as they lie in its segments ([`LocalLog::pending_batch`]),
//! hands them to consensus as one entry, and closes the batch with the term
//! and index the entry got ([`LocalLog::close_batch`]). A follower copies
//! an entry's batch into its own segments at the same positions and closes
//! it the same way ([`LocalLog::append_batch`]), so the replicas' segments
//! are byte for byte the same and nothing is written twice. Every replica
//! writes its close records itself, by one rule: a close that does not fit
//! in the active segment goes into the next one, after a seal.
//!
//! Only closed batches are entries: recovery ([`LocalLog::open_batched`])
//! cuts whatever follows the last close. A tail the consensus discards
//! (a follower's entries that conflict with its leader's, a deposed
//! leader's records it never proposed) is cut back with
//! [`LocalLog::cut_back`], which zeroes the discarded bytes on disk before
//! anything new is written there: a stale record must never be read back
//! after the new ones.

use super::*;
use crate::limits::ZERO_CHUNK_BYTES;
use crate::storage::record::{BatchClose, BATCH_CLOSE_FRAMED_BYTES};

/// A position in a batched log where a batch ends (just after its close)
/// or starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BatchEnd {
    pub segment: u64,
    pub pos: u64,
}

/// Where an empty batched log starts.
pub const LOG_START: BatchEnd = BatchEnd { segment: 0, pos: 0 };

/// A closed batch as the log holds it: its close, and where it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMark {
    pub close: BatchClose,
    pub end: BatchEnd,
}

impl BatchMark {
    /// Where the batch's close record is (its bytes end there).
    pub fn close_at(&self) -> BatchEnd {
        BatchEnd { segment: self.end.segment, pos: self.end.pos - BATCH_CLOSE_FRAMED_BYTES as u64 }
    }
}

/// The bytes of one segment a batch fills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPart {
    pub segment: u64,
    pub pos: u64,
    pub bytes: Vec<u8>,
}

/// A batch's bytes as they travel in a consensus entry: the parts of the
/// segments it fills, in log order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub parts: Vec<BatchPart>,
}

/// Version byte of [`Batch::encode`]'s format.
const BATCH_FORMAT: u8 = 1;
/// A part's header in [`Batch::encode`]: segment, position, length.
const PART_HEADER_BYTES: usize = 8 + 8 + 4;

impl Batch {
    pub fn len_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.bytes.len()).sum()
    }

    /// The body of the batch's one record when that is a membership change
    /// (`KIND_CONF`; a seal before it aside); None for any other batch.
    pub fn conf_body(&self) -> Option<&[u8]> {
        let mut found = None;
        for p in &self.parts {
            let mut at = 0;
            while at < p.bytes.len() {
                let (h, body, framed) = record::decode(p.segment, &p.bytes[at..]).ok()?;
                match h.kind {
                    record::KIND_SEAL => {}
                    record::KIND_CONF if found.is_none() => found = Some(&p.bytes[at..][body]),
                    _ => return None,
                }
                at += framed;
            }
        }
        found
    }

    /// `format u8 | parts u32 | (segment u64 | pos u64 | len u32 | bytes)*`,
    /// little-endian; an empty batch is no bytes at all (the data of the
    /// consensus library's own empty entries).
    pub fn encode(&self) -> Vec<u8> {
        if self.parts.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(5 + self.parts.len() * PART_HEADER_BYTES + self.len_bytes());
        out.push(BATCH_FORMAT);
        out.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        for p in &self.parts {
            out.extend_from_slice(&p.segment.to_le_bytes());
            out.extend_from_slice(&p.pos.to_le_bytes());
            out.extend_from_slice(&(p.bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&p.bytes);
        }
        out
    }

    /// Decodes an entry's data. An empty entry (the consensus library's
    /// own, when a leader takes office) is an empty batch.
    pub fn decode(data: &[u8]) -> Result<Batch> {
        let bad = |why: &str| Error::Batch(format!("malformed batch: {why}"));
        if data.is_empty() {
            return Ok(Batch::default());
        }
        let (&format, mut rest) = data.split_first().expect("not empty");
        if format != BATCH_FORMAT {
            return Err(bad("unknown format"));
        }
        let count = take_u32(&mut rest).ok_or_else(|| bad("no part count"))?;
        let mut parts = Vec::new();
        for _ in 0..count {
            let segment = take_u64(&mut rest).ok_or_else(|| bad("short part header"))?;
            let pos = take_u64(&mut rest).ok_or_else(|| bad("short part header"))?;
            let len = take_u32(&mut rest).ok_or_else(|| bad("short part header"))? as usize;
            if rest.len() < len {
                return Err(bad("a part longer than the entry"));
            }
            let (bytes, tail) = rest.split_at(len);
            parts.push(BatchPart { segment, pos, bytes: bytes.to_vec() });
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(bad("bytes after the last part"));
        }
        Ok(Batch { parts })
    }
}

fn take_u32(buf: &mut &[u8]) -> Option<u32> {
    let (head, rest) = buf.split_first_chunk::<4>()?;
    *buf = rest;
    Some(u32::from_le_bytes(*head))
}

fn take_u64(buf: &mut &[u8]) -> Option<u64> {
    let (head, rest) = buf.split_first_chunk::<8>()?;
    *buf = rest;
    Some(u64::from_le_bytes(*head))
}

/// What a follower's check of one part found.
struct CheckedPart {
    records: u64,
    /// It ends with its segment's seal.
    sealed: bool,
}

impl<S: SegmentStore> LocalLog<S> {
    /// Where the next batch starts: just after the last close.
    pub fn batch_start(&self) -> BatchEnd {
        self.st.borrow().marks.last().map_or(LOG_START, |m| m.end)
    }

    /// The last closed batch, if any.
    pub fn last_mark(&self) -> Option<BatchMark> {
        self.st.borrow().marks.last()
    }

    /// The index of the first entry the log holds whole (None: it holds
    /// none). A log whose oldest segments are gone (a replica given its
    /// leader's newer segments) holds the first batch closed in its oldest
    /// segment whole only if that batch began there: else its entry is the
    /// one before the log's first, known by its close (term and index) only.
    pub fn first_index(&self) -> Option<u64> {
        let st = self.st.borrow();
        let head = st.marks.head()?;
        let began_here = st.segments.contains_key(&head.close.start.0);
        Some(head.close.index + u64::from(!began_here))
    }

    /// The sealed segments a replica that has none may be given (segment
    /// shipping), with their lengths: from the oldest held, one after the
    /// other, through the newest whose last entry is committed here, so no
    /// entry they close may still be cut back. Records after that last
    /// close (a batch that goes on in the next segment) are cut by the
    /// receiver's recovery, which writes on from that close as this log
    /// does.
    pub fn shippable_segments(&self) -> Vec<(u64, u64)> {
        let sealed = self.sealed_files();
        let st = self.st.borrow();
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut keep = 0;
        for (no, len) in sealed {
            if out.last().is_some_and(|&(prev, _)| no != prev + 1) {
                break;
            }
            match st.marks.last_in(no) {
                Some(last) if last > st.committed => break,
                Some(_) => {
                    out.push((no, len));
                    keep = out.len();
                }
                None => out.push((no, len)),
            }
        }
        out.truncate(keep);
        out
    }

    /// Where the records the log holds begin: the start of its oldest
    /// segment (records there before the first close belong to a batch
    /// that began in a segment no longer held; recovery reads them too).
    pub fn held_start(&self) -> BatchEnd {
        let st = self.st.borrow();
        st.segments.keys().next().map_or(LOG_START, |&segment| BatchEnd { segment, pos: 0 })
    }

    /// The index of the first entry closed after segment `no` (it may have
    /// begun in `no`), if one is.
    pub fn first_close_after(&self, no: u64) -> Option<u64> {
        self.st.borrow().marks.first_after(no).map(|(_, first)| first)
    }

    /// Deletes the sealed segments up to `through`, oldest first (a crash
    /// part way leaves a log missing fewer of its oldest segments, which
    /// opens: see [`LocalLog::first_index`]). Refused, with nothing
    /// removed, unless each of them is sealed, an entry is closed after
    /// them, and every entry up to that one is committed (it may have
    /// begun in them: then the log's first whole entry is the one after).
    pub async fn remove_through(&self, through: u64) -> Result<()> {
        let doomed = {
            let st = self.st.borrow();
            let refuse = |why: String| Err(Error::Batch(format!("remove segments through {through}: {why}")));
            let Some((_, first)) = st.marks.first_after(through) else {
                return refuse("no entry is closed after them".into());
            };
            if first > st.committed {
                return refuse(format!("entry {first}, the first closed after them, is not committed"));
            }
            let doomed: Vec<u64> = st.segments.range(..=through).map(|(&no, _)| no).collect();
            if let Some(no) = doomed.iter().find(|no| !matches!(st.segments.get(no), Some(SegData::Mapped(_)))) {
                return refuse(format!("segment {no} is not sealed"));
            }
            doomed
        };
        for no in doomed {
            if let Err(e) = self.remove_segment(no).await {
                self.forget_removed()?;
                return Err(e);
            }
        }
        self.forget_removed()
    }

    /// Forgets the marks of the segments before the oldest one held (after
    /// [`LocalLog::remove_through`]); the log's first mark becomes the first
    /// closed in the segments held.
    fn forget_removed(&self) -> Result<()> {
        let mut st = self.st.borrow_mut();
        let Some(&oldest) = st.segments.keys().next() else { return Ok(()) };
        let Some(through) = oldest.checked_sub(1) else { return Ok(()) };
        let Some((next, _)) = st.marks.first_after(through) else { return Ok(()) };
        let bytes = held_bytes(&st, next, 0)?;
        let head = closes_in(next, bytes)?.first().copied().ok_or(Error::Corrupt { segment: next, position: 0 })?;
        st.marks.forget_through(through, head);
        if st.older.as_ref().is_some_and(|(no, _)| *no <= through) {
            st.older = None;
        }
        Ok(())
    }

    /// The index of the last entry the log holds (0: none).
    pub fn last_index(&self) -> u64 {
        self.st.borrow().marks.last().map_or(0, |m| m.close.index)
    }

    /// The mark of entry `index`, if the log holds it: a recent one from
    /// memory, an older one read from the closes of its segment.
    pub fn mark(&self, index: u64) -> Result<Option<BatchMark>> {
        let mut st = self.st.borrow_mut();
        if let Some(m) = st.marks.recent(index) {
            return Ok(Some(m));
        }
        let Some(no) = st.marks.segment_of(index) else { return Ok(None) };
        if !covers(st.older.as_ref(), no, index) {
            let closes = closes_in(no, held_bytes(&st, no, 0)?)?;
            st.older = Some((no, closes));
        }
        let (_, closes) = st.older.as_ref().expect("cached above");
        let found = closes.binary_search_by_key(&index, |m| m.close.index).ok().map(|i| closes[i]);
        found.map(Some).ok_or(Error::Corrupt { segment: no, position: 0 })
    }

    /// Whether the layer above may append (a batched log's replica says so
    /// while it leads). Checked at each append, so a write admitted before
    /// its replica stopped leading cannot land after.
    pub fn set_appendable(&self, yes: bool) {
        self.appendable.set(yes);
    }

    /// Where the log ends now (closed or not).
    pub fn tail_position(&self) -> BatchEnd {
        let st = self.st.borrow();
        BatchEnd { segment: st.active, pos: self.active_len(&st) as u64 }
    }

    /// The records of the layers above between two positions (record
    /// boundaries, `from` not after `to`), in log order: what a replica
    /// applies once the batches holding them are committed.
    pub fn records_between(&self, from: BatchEnd, to: BatchEnd) -> Result<Vec<Recovered>> {
        let st = self.st.borrow();
        let mut out = Vec::new();
        for no in from.segment..=to.segment {
            let bytes = held_bytes(&st, no, 0)?;
            let mut at = if no == from.segment { from.pos as usize } else { 0 };
            let end = if no == to.segment { to.pos as usize } else { bytes.len() };
            while at < end {
                let corrupt = Error::Corrupt { segment: no, position: at as u64 };
                let (header, _, framed) = record::decode(no, &bytes[at..]).map_err(|_| corrupt)?;
                // The tier record too: a move to the object store is an entry.
                if header.kind < record::KIND_CONF || header.kind == record::KIND_TIER {
                    out.push(Recovered {
                        header,
                        loc: RecordLoc { segment: no, pos: at as u64, body_len: header.body_len },
                    });
                }
                at += framed;
                if header.kind == record::KIND_SEAL {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Whether records were appended since the last close.
    pub fn has_unclosed(&self) -> bool {
        let st = self.st.borrow();
        let start = st.marks.last().map_or(LOG_START, |m| m.end);
        (st.active, self.active_len(&st) as u64) != (start.segment, start.pos)
    }

    /// Resolves at the next append (one waiter: the replica that proposes).
    pub async fn appended(&self) {
        self.appended.wait().await
    }

    /// Resolves at the next completed flush (one waiter: the replica that
    /// reports what became durable).
    pub async fn flushed(&self) {
        self.flushed.wait().await
    }

    /// A copy of what was appended since the last close: the batch the
    /// leader proposes next (empty if nothing was).
    pub fn pending_batch(&self) -> Result<Batch> {
        let st = self.st.borrow();
        let tail = BatchEnd { segment: st.active, pos: self.active_len(&st) as u64 };
        self.batch_between(&st, st.marks.last().map_or(LOG_START, |m| m.end), tail)
    }

    /// The batch of a closed one, as its entry carries it (read back for a
    /// follower that lags).
    pub fn batch_of(&self, mark: &BatchMark) -> Result<Batch> {
        let st = self.st.borrow();
        let start = BatchEnd { segment: mark.close.start.0, pos: mark.close.start.1 };
        self.batch_between(&st, start, mark.close_at())
    }

    /// Closes what was appended since the last close as the entry of
    /// `term` and `index`: the batch [`LocalLog::pending_batch`] gave when
    /// the log ended at `proposed_end` ([`LocalLog::tail_position`]), refused
    /// if anything was appended since. Returns its mark and the lsn that
    /// makes it durable.
    pub fn close_batch(&self, term: u64, index: u64, proposed_end: BatchEnd) -> Result<(BatchMark, u64)> {
        let mut st = self.st.borrow_mut();
        self.writable(&st, index)?;
        let tail = BatchEnd { segment: st.active, pos: self.active_len(&st) as u64 };
        if tail != proposed_end {
            return Err(Error::Batch(format!("records were appended after the batch of entry {index} was proposed")));
        }
        Ok(self.close_now(&mut st, term, index))
    }

    /// The lsn the last close ends at: a turn that wrote closed entries is
    /// durable there.
    pub fn closed_lsn(&self) -> u64 {
        self.st.borrow().lsn_closed
    }

    /// A follower's write of its leader's batch for entry `term`, `index`:
    /// the same bytes at the same positions, then the same close. Refused,
    /// with nothing changed, unless every part starts where this log ends
    /// and holds whole records that verify.
    pub fn append_batch(&self, batch: &Batch, term: u64, index: u64) -> Result<(BatchMark, u64)> {
        let mut st = self.st.borrow_mut();
        self.writable(&st, index)?;
        let start = st.marks.last().map_or(LOG_START, |m| m.end);
        if (st.active, self.active_len(&st) as u64) != (start.segment, start.pos) {
            return Err(Error::Batch(format!(
                "records never proposed follow entry {}: cut them back first",
                index - 1
            )));
        }
        let checked = self.check_parts(&st, batch)?;
        for (part, c) in batch.parts.iter().zip(checked) {
            self.copy_part(&mut st, part, c);
        }
        let done = self.close_now(&mut st, term, index);
        drop(st);
        self.wake_writer.notify();
        Ok(done)
    }

    /// Entries up to `index` are committed: records in them become
    /// visible ([`LocalLog::durable`] resolves for them once they are
    /// durable here too).
    pub fn commit_to(&self, index: u64) {
        let mut st = self.st.borrow_mut();
        if index <= st.committed {
            return;
        }
        st.committed = index;
        while let Some(&(i, lsn)) = st.uncommitted.front() {
            if i > index {
                break;
            }
            st.lsn_committed = st.lsn_committed.max(lsn);
            st.last_committed_close = st.uncommitted.pop_front();
        }
        let visible = self.visible_lsn(&st);
        writer::release_waiters(&mut st, visible);
    }

    /// Gives up every wait for a record not yet visible (they fail with
    /// [`Error::Abandoned`]): a replica that stopped leading answers its
    /// clients now rather than when, or if, another leader commits.
    pub fn abandon_waits(&self) {
        let mut st = self.st.borrow_mut();
        st.generation += 1;
        let visible = self.visible_lsn(&st);
        st.abandoned = Some((st.generation, visible));
        for (_, waker) in st.waiters.drain(..) {
            waker.wake();
        }
    }

    /// What [`LocalLog::durable`] resolves up to: the durable point, and in
    /// a batched log the committed one too.
    pub fn visible(&self) -> u64 {
        self.visible_lsn(&self.st.borrow())
    }

    /// The highest index [`LocalLog::commit_to`] was told of.
    pub fn committed_index(&self) -> u64 {
        self.st.borrow().committed
    }

    /// Cuts the log back to just after `to` (None: to empty), discarding
    /// every later byte, on disk too (zeroed or removed, durably) before
    /// anything new is written there. Waits for the flushes in flight
    /// first; tasks waiting for a discarded lsn fail with
    /// [`Error::CutBack`]. The caller names a batch this log closed.
    pub async fn cut_back(&self, to: Option<BatchMark>) -> Result<()> {
        let keep = to.map_or(0, |m| m.close.index);
        {
            let mut st = self.st.borrow_mut();
            if keep < st.committed {
                return Err(Error::Batch(format!("cut back to entry {keep} below the committed {}", st.committed)));
            }
            if st.cutting_back {
                return Err(Error::Batch("a cut-back is already under way".into()));
            }
            // From here until the switch, appends are refused, the writer
            // cuts no flush and the preparer creates no segment.
            st.cutting_back = true;
        }
        while self.st.borrow().flights > 0 {
            self.flights_done.wait().await;
        }
        let result = self.cut_back_now(to).await;
        self.st.borrow_mut().cutting_back = false;
        self.wake_writer.notify();
        self.wake_preparer.notify();
        if let Err(e) = &result {
            self.poison(e.clone());
        }
        result
    }

    fn writable(&self, st: &State<S::File>, index: u64) -> Result<()> {
        assert!(self.batched, "batches are for a batched log");
        if let Some(e) = &st.poisoned {
            return Err(e.clone());
        }
        if st.cutting_back {
            return Err(Error::CutBack);
        }
        // An empty log begins with entry 1.
        let last = st.marks.last().map_or(0, |m| m.close.index);
        if index != last + 1 {
            return Err(Error::Batch(format!("entry {index} does not follow entry {last}")));
        }
        Ok(())
    }

    fn active_len(&self, st: &State<S::File>) -> usize {
        match st.segments.get(&st.active) {
            Some(SegData::Mirror { buf, .. }) => buf.len(),
            _ => unreachable!("the active segment is a mirror"),
        }
    }

    /// Appends the close of the batch since the last one, in the next
    /// segment if it does not fit in this one (every replica by this rule).
    fn close_now(&self, st: &mut State<S::File>, term: u64, index: u64) -> (BatchMark, u64) {
        let start = st.marks.last().map_or(LOG_START, |m| m.end);
        if (self.active_len(st) + BATCH_CLOSE_FRAMED_BYTES + SEAL_FRAMED_BYTES) as u64 > self.cfg.segment_bytes {
            self.seal_active(st);
        }
        let close = BatchClose { term, index, start: (start.segment, start.pos) };
        let no = st.active;
        let Some(SegData::Mirror { buf, records, .. }) = st.segments.get_mut(&no) else { unreachable!() };
        record::batch_close(no, &close, buf);
        *records += 1;
        let end = BatchEnd { segment: no, pos: buf.len() as u64 };
        st.lsn_tail += BATCH_CLOSE_FRAMED_BYTES as u64;
        st.records_pending += 1;
        let mark = BatchMark { close, end };
        st.marks.push(mark);
        st.uncommitted.push_back((index, st.lsn_tail));
        st.lsn_closed = st.lsn_tail;
        self.wake_writer.notify();
        (mark, st.lsn_tail)
    }

    /// Checks a leader's parts against this log without changing it.
    fn check_parts(&self, st: &State<S::File>, batch: &Batch) -> Result<Vec<CheckedPart>> {
        let mut at = BatchEnd { segment: st.active, pos: self.active_len(st) as u64 };
        let mut records_before = match st.segments.get(&st.active) {
            Some(SegData::Mirror { records, .. }) => *records,
            _ => unreachable!("the active segment is a mirror"),
        };
        let mut checked = Vec::with_capacity(batch.parts.len());
        for (i, part) in batch.parts.iter().enumerate() {
            if (part.segment, part.pos) != (at.segment, at.pos) {
                return Err(Error::Batch(format!(
                    "part at segment {} byte {}, but this log ends at segment {} byte {}",
                    part.segment, part.pos, at.segment, at.pos
                )));
            }
            let c = self.check_part(part, records_before)?;
            let last = i + 1 == batch.parts.len();
            if !c.sealed && !last {
                return Err(Error::Batch(format!("part in segment {} is followed but not sealed", part.segment)));
            }
            at = if c.sealed {
                BatchEnd { segment: part.segment + 1, pos: 0 }
            } else {
                BatchEnd { segment: part.segment, pos: part.pos + part.bytes.len() as u64 }
            };
            records_before = if c.sealed { 0 } else { records_before + c.records };
            checked.push(c);
        }
        Ok(checked)
    }

    /// One part: whole records that verify, no close (every replica writes
    /// its own), a seal only last and only where it belongs, and room left
    /// for a seal when there is none.
    fn check_part(&self, part: &BatchPart, records_before: u64) -> Result<CheckedPart> {
        let bad = |why: String| Error::Batch(format!("segment {} byte {}: {why}", part.segment, part.pos));
        let mut c = CheckedPart { records: 0, sealed: false };
        let mut at = 0usize;
        while at < part.bytes.len() {
            if c.sealed {
                return Err(bad("bytes after a seal".into()));
            }
            let pos = part.pos + at as u64;
            let (h, body, framed) =
                record::decode(part.segment, &part.bytes[at..]).map_err(|e| bad(format!("{e:?} record at {pos}")))?;
            if h.kind == record::KIND_BATCH {
                return Err(bad(format!("a batch close inside a batch at {pos}")));
            }
            if h.kind == record::KIND_SEAL {
                if !record::is_seal_of(&h, &part.bytes[at..][body], pos, records_before + c.records) {
                    return Err(bad(format!("a seal that does not belong at {pos}")));
                }
                c.sealed = true;
            } else {
                c.records += 1;
            }
            at += framed;
        }
        let room = if c.sealed { 0 } else { SEAL_FRAMED_BYTES as u64 };
        if part.pos + part.bytes.len() as u64 + room > self.cfg.segment_bytes {
            return Err(bad("longer than the segment".into()));
        }
        Ok(c)
    }

    /// Copies a checked part into the active mirror; a sealed one makes the
    /// next segment active.
    fn copy_part(&self, st: &mut State<S::File>, part: &BatchPart, c: CheckedPart) {
        let no = st.active;
        let Some(SegData::Mirror { buf, records, sealed, .. }) = st.segments.get_mut(&no) else { unreachable!() };
        buf.extend_from_slice(&part.bytes);
        *records += c.records;
        *sealed = c.sealed;
        st.lsn_tail += part.bytes.len() as u64;
        st.records_pending += c.records;
        if c.sealed {
            self.start_segment(st, no + 1, None);
        }
    }

    /// The parts of the log between two positions, copied.
    fn batch_between(&self, st: &State<S::File>, from: BatchEnd, to: BatchEnd) -> Result<Batch> {
        let mut parts = Vec::new();
        for no in from.segment..=to.segment {
            let start = if no == from.segment { from.pos as usize } else { 0 };
            let bytes = held_bytes(st, no, start as u64)?;
            let end = if no == to.segment { to.pos as usize } else { data_end(no, bytes, start)? };
            let range = bytes.get(start..end).ok_or(Error::Corrupt { segment: no, position: start as u64 })?;
            if !range.is_empty() {
                parts.push(BatchPart { segment: no, pos: start as u64, bytes: range.to_vec() });
            }
        }
        Ok(Batch { parts })
    }

    /// The cut-back's disk work first, with the log's map untouched (so the
    /// preparer and readers see the log as it was), then the switch to the
    /// cut log in one step.
    async fn cut_back_now(&self, to: Option<BatchMark>) -> Result<()> {
        let end = to.map_or(LOG_START, |m| m.end);
        let keep = to.map_or(0, |m| m.close.index);
        let newer: Vec<u64> = self.st.borrow().segments.range(end.segment + 1..).map(|(&no, _)| no).rev().collect();
        for &no in &newer {
            self.remove_newer(no).await?;
        }
        let resumed = self.cut_segment(end).await?;
        let mut st = self.st.borrow_mut();
        for no in newer {
            st.segments.remove(&no);
        }
        st.segments.remove(&end.segment);
        match resumed {
            Some(r) => self.start_segment(&mut st, end.segment, Some(r)),
            None => self.start_segment(&mut st, end.segment, None),
        }
        st.marks.cut_after(to);
        st.older = None;
        // The discarded records' lsns become a void; the lsns go on from
        // where they were, never reused. The void begins where the kept
        // entry's close ended, not `removed` bytes before the tail: the
        // lsns after it hold earlier voids too (records a leader could not
        // propose, cut back), which took no bytes.
        let cut = closed_lsn_of(&st, keep);
        let tail = st.lsn_tail;
        if cut < tail {
            remember_void(&mut st.voids, cut, tail);
        }
        if st.lsn_durable >= cut {
            // Every byte kept is on disk: durable through the void.
            st.lsn_durable = tail;
            st.lsn_cut = tail;
        }
        st.lsn_committed = st.lsn_committed.min(cut);
        st.lsn_closed = st.lsn_closed.min(cut);
        while st.uncommitted.back().is_some_and(|&(i, _)| i > keep) {
            st.uncommitted.pop_back();
        }
        st.generation += 1;
        for (_, waker) in st.waiters.drain(..) {
            waker.wake();
        }
        Ok(())
    }

    /// Deletes the file of a segment after the cut (it stays in the map
    /// until the switch).
    async fn remove_newer(&self, no: u64) -> Result<()> {
        let has_file = match self.st.borrow().segments.get(&no) {
            Some(SegData::Mirror { file, .. }) => file.is_some(),
            Some(SegData::Mapped(_)) => true,
            None => false,
        };
        if has_file {
            self.store.remove(no).await.map_err(Error::io_at("remove", no))?;
        }
        Ok(())
    }

    /// Zeroes on disk what follows the cut in its segment and gets that
    /// segment ready to be written on: its bytes up to the cut, its file
    /// (reopened if it was sealed) and how much of it is on disk. Returns
    /// that (None: the segment has no file yet).
    async fn cut_segment(&self, end: BatchEnd) -> Result<Option<Resumed<S::File>>> {
        let no = end.segment;
        let pos = end.pos as usize;
        let corrupt = Error::Corrupt { segment: no, position: end.pos };
        // What is needed of the segment, copied out before any wait.
        let (prefix, file, on_disk) = match self.st.borrow().segments.get(&no) {
            Some(SegData::Mirror { buf, file, cut_len, .. }) => {
                let mut prefix = new_mirror(&self.cfg);
                prefix.extend_from_slice(buf.get(..pos).ok_or(corrupt.clone())?);
                (prefix, file.clone(), *cut_len)
            }
            Some(SegData::Mapped(m)) => {
                let bytes = m.bytes();
                let mut prefix = new_mirror(&self.cfg);
                prefix.extend_from_slice(bytes.get(..pos).ok_or(corrupt.clone())?);
                (prefix, None, last_nonzero(bytes, pos))
            }
            None => return Ok(None),
        };
        let records = count_records(no, &prefix)?;
        let file = match file {
            Some(f) => f,
            None if on_disk > 0 => Rc::new(self.store.reopen(no).await.map_err(Error::io_at("reopen", no))?),
            // A segment whose file is still being made: nothing of it is
            // on disk, its kept bytes go out once the file exists.
            None if pos > 0 => return Ok(Some(Resumed { bytes: prefix, records, file: None, cut_len: 0 })),
            None => return Ok(None),
        };
        zero_after(&*file, &prefix, on_disk).await.map_err(Error::io_at("zero", no))?;
        let cut_len = on_disk.min(prefix.len());
        Ok(Some(Resumed { bytes: prefix, records, file: Some(file), cut_len }))
    }
}

/// The lsn at which entry `keep`'s close ends (0 for the empty log and for
/// an entry recovered when the log opened: every lsn since is later). The
/// caller's `keep` is at least the committed index, so an entry closed
/// since the log opened is either still uncommitted or the last one
/// committed.
fn closed_lsn_of<F>(st: &State<F>, keep: u64) -> u64 {
    if let Some(&(_, lsn)) = st.uncommitted.iter().rev().find(|&&(i, _)| i == keep) {
        return lsn;
    }
    match st.last_committed_close {
        Some((i, lsn)) if i == keep => lsn,
        _ => 0,
    }
}

/// Records a void of discarded lsns, bounded: past [`VOIDS_KEPT`] the two
/// oldest merge into the range that spans both, which can only fail a wait
/// for a record that was kept (the client retries), never pass one that was
/// discarded.
fn remember_void(voids: &mut Vec<(u64, u64)>, after: u64, through: u64) {
    voids.push((after, through));
    if voids.len() > VOIDS_KEPT {
        let (a1, t1) = voids.remove(0);
        let (a2, t2) = voids[0];
        voids[0] = (a1.min(a2), t1.max(t2));
    }
}

/// Voids remembered exactly (see [`remember_void`]).
const VOIDS_KEPT: usize = 1024;

/// Where the records of a segment no longer written end (after its seal,
/// or where zeros begin), walking from `from`, a record boundary.
fn data_end(no: u64, bytes: &[u8], from: usize) -> Result<usize> {
    let mut at = from;
    while at < bytes.len() {
        match record::decode(no, &bytes[at..]) {
            Ok((h, _, framed)) => {
                at += framed;
                if h.kind == record::KIND_SEAL {
                    break;
                }
            }
            Err(DecodeError::End) => break,
            Err(_) => return Err(Error::Corrupt { segment: no, position: at as u64 }),
        }
    }
    Ok(at)
}

/// The bytes of segment `no` as the log holds them (its mirror, or its
/// mapping once sealed); a segment it does not hold is corruption, reported
/// at `position`.
fn held_bytes<F>(st: &State<F>, no: u64, position: u64) -> Result<&[u8]> {
    match st.segments.get(&no) {
        Some(SegData::Mirror { buf, .. }) => Ok(&buf[..]),
        Some(SegData::Mapped(m)) => Ok(m.bytes()),
        None => Err(Error::Corrupt { segment: no, position }),
    }
}

/// Whether `cached`, the closes of one segment read earlier, holds entry
/// `index` of segment `no`. Closes cached from the active segment end
/// where it ended then: an entry closed in it since is past them, and
/// the segment is read again (trusting them failed a lagging follower's
/// read of such an entry as corrupt).
fn covers(cached: Option<&(u64, Vec<BatchMark>)>, no: u64, index: u64) -> bool {
    cached.is_some_and(|(segment, closes)| *segment == no && closes.last().is_some_and(|m| m.close.index >= index))
}

/// The marks of the batches closed in segment `no`, in order.
fn closes_in(no: u64, bytes: &[u8]) -> Result<Vec<BatchMark>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (h, body, framed) = match record::decode(no, &bytes[at..]) {
            Ok(r) => r,
            Err(DecodeError::End) => break,
            Err(_) => return Err(Error::Corrupt { segment: no, position: at as u64 }),
        };
        if let Some(close) = record::batch_close_of(&h, &bytes[at..][body]) {
            out.push(BatchMark { close, end: BatchEnd { segment: no, pos: (at + framed) as u64 } });
        }
        at += framed;
        if h.kind == record::KIND_SEAL {
            break;
        }
    }
    Ok(out)
}

/// The records in `bytes`, the start of segment `no` up to a record
/// boundary (seals are not counted: they count the records before them).
pub(super) fn count_records(no: u64, bytes: &[u8]) -> Result<u64> {
    let mut at = 0;
    let mut n = 0;
    while at < bytes.len() {
        let (h, _, framed) =
            record::decode(no, &bytes[at..]).map_err(|_| Error::Corrupt { segment: no, position: at as u64 })?;
        n += u64::from(h.kind != record::KIND_SEAL);
        at += framed;
    }
    Ok(n)
}

/// One past the last byte of `bytes` from `from` on that is not zero
/// (`from` if none is): how far a torn or discarded tail may reach.
pub(super) fn last_nonzero(bytes: &[u8], from: usize) -> usize {
    bytes.get(from..).and_then(|t| t.iter().rposition(|&b| b != 0)).map_or(from, |i| from + i + 1)
}

/// Durably zeroes a segment file from the end of `prefix` (its bytes from
/// the start, kept) up to `upto`, in chunks; the block the cut falls in is
/// rewritten with the prefix's part of it.
pub(super) async fn zero_after<F: SegmentFile>(file: &F, prefix: &[u8], upto: usize) -> std::io::Result<()> {
    let end = align_up(upto);
    let mut at = align_down(prefix.len());
    if upto <= prefix.len() {
        return Ok(());
    }
    while at < end {
        let len = (end - at).min(ZERO_CHUNK_BYTES as usize);
        let keep = prefix.get(at..).unwrap_or(&[]);
        file.write_at(file.filled_buf(len, &keep[..keep.len().min(len)]), at as u64).await?;
        at += len;
    }
    file.sync().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_round_trips_and_bad_data_is_refused() {
        let b = Batch {
            parts: vec![
                BatchPart { segment: 3, pos: 4000, bytes: vec![1; 96] },
                BatchPart { segment: 4, pos: 0, bytes: vec![2; 40] },
            ],
        };
        let data = b.encode();
        assert_eq!(Batch::decode(&data).unwrap(), b);
        assert_eq!(Batch::decode(&[]).unwrap(), Batch::default());
        assert_eq!(Batch::default().encode(), Vec::<u8>::new());
        for cut in 1..data.len() {
            assert!(Batch::decode(&data[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = data.clone();
        longer.push(0);
        assert!(Batch::decode(&longer).is_err());
        let mut other = data;
        other[0] = 9;
        assert!(Batch::decode(&other).is_err());
    }

    #[test]
    fn a_segments_closes_are_read_back_in_order() {
        let mut seg = Vec::new();
        let h = RecordHeader { kind: 1, stream_id: 1, incarnation: 0, stream_offset: 0, body_len: 3 };
        let mut want = Vec::new();
        for index in 5..9 {
            let start = (2, seg.len() as u64);
            record::encode(2, &h, b"abc", &mut seg);
            let close = BatchClose { term: 3, index, start };
            record::batch_close(2, &close, &mut seg);
            want.push(BatchMark { close, end: BatchEnd { segment: 2, pos: seg.len() as u64 } });
        }
        seg.resize(seg.len() + 4096, 0);
        assert_eq!(closes_in(2, &seg).unwrap(), want);
        assert!(closes_in(3, &seg).is_err(), "another segment's bytes");
    }

    #[test]
    fn cached_closes_cover_only_what_they_held_when_read() {
        let mark = |index| BatchMark {
            close: BatchClose { term: 1, index, start: (4, index * 10) },
            end: BatchEnd { segment: 4, pos: index * 10 + 8 },
        };
        let cached = (4, vec![mark(7), mark(8), mark(9)]);
        assert!(covers(Some(&cached), 4, 7));
        assert!(covers(Some(&cached), 4, 9));
        assert!(!covers(Some(&cached), 4, 10), "closed in the segment after it was read");
        assert!(!covers(Some(&cached), 5, 8), "another segment");
        assert!(!covers(Some(&(4, Vec::new())), 4, 1));
        assert!(!covers(None, 4, 8));
    }

    #[test]
    fn last_nonzero_finds_the_reach_of_a_tail() {
        let mut b = vec![0u8; 100];
        assert_eq!(last_nonzero(&b, 10), 10);
        b[57] = 1;
        assert_eq!(last_nonzero(&b, 10), 58);
        assert_eq!(last_nonzero(&b, 60), 60);
        assert_eq!(last_nonzero(&b, 200), 200);
    }
}
