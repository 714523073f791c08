//! One shard's append-only log: segments, group commit, reads, recovery.
//!
//! Appends are synchronous and cheap: the record is framed into the in-memory
//! mirror of the active segment and gets a log sequence number (`lsn`, the
//! count of framed bytes appended since open). A single writer task flushes
//! everything appended so far with one aligned write per dirty segment and
//! one fdatasync, then releases every waiter whose lsn it covered. While that
//! flush is in flight, new appends gather for the next one: the group commit.
//! Up to two flushes are in flight at once, released in lsn order (see
//! `writer.rs`).
//!
//! The partial last block of the active segment stays in the mirror and is
//! rewritten by the next flush, because O_DIRECT writes whole aligned blocks;
//! a flush many records share is instead padded to the block's end, so the
//! next one need not wait for it.
//! A segment that filled up gets a seal record (see [`record::seal`]) and is
//! flushed and synced before any byte of its successor, so after a crash only
//! the newest segment can have a torn tail, and every older one must end in
//! its seal.
//!
//! A batched log ([`LocalLog::open_batched`], `batches.rs`) is one replica's
//! copy of a replicated log: what is appended is cut into batches, each
//! ended by a close record naming the consensus entry it is; a follower
//! copies the leader's batches byte for byte, and an uncommitted tail can
//! be cut back.
//!
//! The local log holds only the segments on the local disk and knows
//! nothing of remote ones: the tier layer above it (`storage/tiered/`)
//! appends its own records here like any others, removes the segments it
//! moved, and at boot tells [`LocalLog::open`] the newest segment it holds.

mod batches;
mod marks;
mod preparer;
mod recovery;
mod writer;

pub use batches::{Batch, BatchEnd, BatchMark, BatchPart, LOG_START};

use super::error::{Error, Result};
use super::io::{SealedBytes, SegmentFile, SegmentStore};
use super::record::{self, DecodeError, RecordHeader, SEAL_FRAMED_BYTES};
use super::stats::LogStats;
use crate::limits::{DIRECT_IO_ALIGNMENT_BYTES, RECORD_HEADER_BYTES};
use crate::notify::Notify;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::task::{Poll, Waker};

#[derive(Debug, Clone, Copy)]
pub struct LogConfig {
    pub segment_bytes: u64,
    /// Appended-but-not-durable bytes beyond which appends fail with `Full`.
    pub pending_bytes_max: u64,
}

/// Where a record lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLoc {
    pub segment: u64,
    /// Byte position of the record's header in the segment.
    pub pos: u64,
    pub body_len: u32,
}

/// A record found by recovery, in log order.
#[derive(Debug, Clone, Copy)]
pub struct Recovered {
    pub header: RecordHeader,
    pub loc: RecordLoc,
}

/// What recovery did, for the boot log and for tests.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub segments: usize,
    pub records: usize,
    /// (segment, cut position) when a torn tail was cut.
    pub torn_tail: Option<(u64, u64)>,
    /// The newest segment with records, sealed at boot (writing resumes in
    /// a new segment), when it was not sealed already.
    pub sealed_at_boot: Option<u64>,
    pub active_segment: u64,
}

enum SegData<F> {
    /// Written by this process and not yet sealed-and-durable: served from memory.
    /// `cut_len` of `buf` is handed to flushes (in flight or done); what
    /// is durable is the log's `lsn_durable`.
    Mirror { buf: Vec<u8>, records: u64, cut_len: usize, sealed: bool, file: Option<Rc<F>> },
    /// Sealed and durable: served from the mapped file.
    Mapped(Rc<dyn SealedBytes>),
}

struct State<F> {
    segments: BTreeMap<u64, SegData<F>>,
    active: u64,
    /// Files created ahead of use, by segment number.
    prepared: BTreeMap<u64, Rc<F>>,
    /// The mirror of the last segment that was sealed and mapped, kept for
    /// the next new segment: its pages are already faulted in, so a new
    /// segment costs no page faults and no zeroing by the kernel (under
    /// load that zeroing was a tenth of the shard's time on a VM). So a log
    /// holds its active mirror, the sealed ones not yet durable (one, unless
    /// segments fill faster than a flush), and this one.
    spare_mirror: Option<Vec<u8>>,
    lsn_tail: u64,
    /// The lsn the flushes cut so far cover (in flight or done).
    lsn_cut: u64,
    lsn_durable: u64,
    /// Records appended since the last cut.
    records_pending: u64,
    /// Flushes in flight, and what the newest of them ends with.
    flights: usize,
    last_cut: writer::CutEnd,
    /// Tasks waiting for an lsn to become durable (woken, and dropped from
    /// here, when it does, when the log is poisoned or cut back).
    waiters: VecDeque<(u64, Waker)>,
    /// Batched logs: where the closed batches are (the next starts where
    /// the last ends).
    marks: marks::Marks,
    /// Cut-backs so far: a waiter registers again after each (they drop
    /// every waiter).
    generation: u64,
    /// Batched logs: the lsns whose records a cut-back discarded, as
    /// (after, through) ranges. Lsns are never reused: what is appended
    /// after a cut-back gets lsns past the discarded ones, so an lsn from
    /// before it can never be mistaken for a newer record's.
    voids: Vec<(u64, u64)>,
    /// The last time waits for uncommitted records were given up (a
    /// replica that stopped leading): (generation, what was visible then).
    abandoned: Option<(u64, u64)>,
    /// Batched logs: the lsn the committed entries cover, the committed
    /// index, and the lsn each entry closed since the log opened ends at,
    /// until it is committed.
    lsn_committed: u64,
    /// The lsn the last close ends at.
    lsn_closed: u64,
    committed: u64,
    /// The closes of one segment older than the recent marks, read once
    /// for a follower catching up entry by entry (see `LocalLog::mark`).
    older: Option<(u64, Vec<BatchMark>)>,
    uncommitted: VecDeque<(u64, u64)>,
    /// The last entry closed since the log opened that left `uncommitted`
    /// by being committed: (index, lsn its close ends at).
    last_committed_close: Option<(u64, u64)>,
    /// A cut-back is under way: the writer cuts no flush.
    cutting_back: bool,
    poisoned: Option<Error>,
    stats: LogStats,
}

/// One shard's log of local segments (see the module docs).
pub struct LocalLog<S: SegmentStore> {
    store: S,
    cfg: LogConfig,
    st: RefCell<State<S::File>>,
    wake_writer: Notify,
    wake_preparer: Notify,
    segment_ready: Notify,
    /// Rung for the preparer's paced zero-fill when the active segment's
    /// fill reaches `zero_gate` (u64::MAX: nothing waits), at a rollover
    /// and at stop.
    zero_pace: Notify,
    zero_gate: Cell<u64>,
    stopped: Cell<bool>,
    /// Rung when a segment becomes sealed and durable (for the layer above).
    sealed: Notify,
    /// Rung when the last flush in flight completes (for a cut-back).
    flights_done: Notify,
    /// Batched logs: rung on every append (for the replica, which proposes
    /// what was appended) and every completed flush (it reports what
    /// became durable). One waiter each.
    appended: Notify,
    flushed: Notify,
    /// A replica's copy of a replicated log (see `batches.rs`).
    batched: bool,
    /// Whether the layer above may append: a replica's batched log only
    /// while the replica leads (the replica sets it); otherwise always.
    appendable: Cell<bool>,
}

/// The memory image of a new segment: its whole length reserved at once
/// (address space; pages are touched as records land), so appends never
/// grow it by copying what is there into a bigger buffer, which cost a
/// copy of the segment and twice its page faults.
fn new_mirror(cfg: &LogConfig) -> Vec<u8> {
    Vec::with_capacity(cfg.segment_bytes as usize)
}

/// A spare mirror made empty for a new segment (capacity and pages kept).
fn reuse_mirror(mut buf: Vec<u8>) -> Vec<u8> {
    buf.clear();
    buf
}

fn align_down(v: usize) -> usize {
    v / DIRECT_IO_ALIGNMENT_BYTES as usize * DIRECT_IO_ALIGNMENT_BYTES as usize
}
fn align_up(v: usize) -> usize {
    v.div_ceil(DIRECT_IO_ALIGNMENT_BYTES as usize) * DIRECT_IO_ALIGNMENT_BYTES as usize
}

/// A segment that becomes the active one again with the bytes it holds (a
/// batched log's newest segment at boot, or the one it cut back into).
struct Resumed<F> {
    bytes: Vec<u8>,
    records: u64,
    /// None: it has no file yet (the preparer makes one; nothing of it is
    /// on disk).
    file: Option<Rc<F>>,
    /// How many of `bytes` are on disk already.
    cut_len: usize,
}

/// One dirty range copied out for the writer.
struct FlushJob {
    segment: u64,
    pos: u64,
    sealed: bool,
}

impl<S: SegmentStore> LocalLog<S> {
    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn segment_bytes(&self) -> u64 {
        self.cfg.segment_bytes
    }

    /// Frames a record into the active segment. Returns where it lives and
    /// the lsn to wait for with [`LocalLog::durable`].
    pub fn append(&self, h: RecordHeader, body: &[u8]) -> Result<(RecordLoc, u64)> {
        self.append_parts(h, &[body])
    }

    /// [`LocalLog::append`] of a body given in parts laid end to end: each part
    /// is copied once, into the segment.
    pub fn append_parts(&self, mut h: RecordHeader, body: &[&[u8]]) -> Result<(RecordLoc, u64)> {
        assert_ne!(h.kind, record::KIND_SEAL, "seals are the log's own records");
        let body_len: usize = body.iter().map(|p| p.len()).sum();
        h.body_len = body_len as u32;
        let framed = record::framed_len(body_len);
        // Every segment keeps room for its seal.
        if (framed + SEAL_FRAMED_BYTES) as u64 > self.cfg.segment_bytes {
            return Err(Error::TooLarge(body_len));
        }
        let mut st = self.st.borrow_mut();
        if let Some(e) = &st.poisoned {
            return Err(e.clone());
        }
        if st.cutting_back {
            return Err(Error::CutBack);
        }
        if !self.appendable.get() {
            return Err(Error::NotLeader);
        }
        let pending = st.lsn_tail - st.lsn_durable;
        if pending > 0 && pending + framed as u64 > self.cfg.pending_bytes_max {
            return Err(Error::Full);
        }
        let active_len = match st.segments.get(&st.active) {
            Some(SegData::Mirror { buf, .. }) => buf.len(),
            _ => unreachable!("active segment is always a mirror"),
        };
        if (active_len + framed + SEAL_FRAMED_BYTES) as u64 > self.cfg.segment_bytes {
            self.seal_active(&mut st);
        }
        let no = st.active;
        let Some(SegData::Mirror { buf, records, .. }) = st.segments.get_mut(&no) else { unreachable!() };
        let pos = buf.len() as u64;
        record::encode_parts(no, &h, body, buf);
        if buf.len() as u64 >= self.zero_gate.get() {
            self.zero_gate.set(u64::MAX);
            self.zero_pace.notify();
        }
        *records += 1;
        st.lsn_tail += framed as u64;
        st.records_pending += 1;
        let lsn = st.lsn_tail;
        drop(st);
        self.wake_writer.notify();
        if self.batched {
            self.appended.notify();
        }
        Ok((RecordLoc { segment: no, pos, body_len: h.body_len }, lsn))
    }

    /// Seals the active segment (its seal goes out with its last flush)
    /// and makes the next one active.
    fn seal_active(&self, st: &mut State<S::File>) {
        let old = st.active;
        if let Some(SegData::Mirror { buf, records, sealed, .. }) = st.segments.get_mut(&old) {
            record::seal(old, buf.len() as u64, *records, buf);
            *sealed = true;
        }
        st.lsn_tail += SEAL_FRAMED_BYTES as u64;
        self.start_segment(st, old + 1, None);
    }

    /// Makes `no` the active segment: empty, or `resumed` with bytes it
    /// holds already.
    fn start_segment(&self, st: &mut State<S::File>, no: u64, resumed: Option<Resumed<S::File>>) {
        st.active = no;
        let (buf, records, file, cut_len) = match resumed {
            Some(r) => (r.bytes, r.records, r.file, r.cut_len),
            None => {
                let buf = st.spare_mirror.take().map_or_else(|| new_mirror(&self.cfg), reuse_mirror);
                (buf, 0, st.prepared.remove(&no), 0)
            }
        };
        st.segments.insert(no, SegData::Mirror { buf, records, cut_len, sealed: false, file });
        self.wake_preparer.notify();
        self.zero_pace.notify();
    }

    /// Resolves when everything up to `lsn` is on stable storage. In a
    /// batched log: on stable storage here and committed by the group
    /// ([`LocalLog::commit_to`]); fails with [`Error::CutBack`] when a
    /// cut-back discarded the record, and with [`Error::Abandoned`] when
    /// the replica stopped leading first (the record may still commit).
    pub async fn durable(&self, lsn: u64) -> Result<()> {
        let (mut since, mut registered) = (None, None);
        std::future::poll_fn(|cx| {
            let mut st = self.st.borrow_mut();
            let since = *since.get_or_insert(st.generation);
            if st.voids.iter().any(|&(after, through)| after < lsn && lsn <= through) {
                return Poll::Ready(Err(Error::CutBack));
            }
            if st.abandoned.is_some_and(|(g, visible)| g > since && lsn > visible) {
                return Poll::Ready(Err(Error::Abandoned));
            }
            if self.visible_lsn(&st) >= lsn {
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = &st.poisoned {
                return Poll::Ready(Err(e.clone()));
            }
            // Woken by anything else (a select around this wait), the
            // entry is still there: one per wait, and one again after a
            // cut-back, which drops (and wakes) every waiter.
            if registered != Some(st.generation) {
                st.waiters.push_back((lsn, cx.waker().clone()));
                registered = Some(st.generation);
            }
            Poll::Pending
        })
        .await
    }

    pub fn durable_lsn(&self) -> u64 {
        self.st.borrow().lsn_durable
    }

    pub fn tail_lsn(&self) -> u64 {
        self.st.borrow().lsn_tail
    }

    pub fn pending_bytes(&self) -> u64 {
        let st = self.st.borrow();
        st.lsn_tail - st.lsn_durable
    }

    /// Whether the segment after the active one is zero-filled and waiting
    /// (the preparer fills it in step with the active one).
    pub fn next_segment_ready(&self) -> bool {
        let st = self.st.borrow();
        st.prepared.contains_key(&(st.active + 1))
    }

    pub fn is_poisoned(&self) -> bool {
        self.st.borrow().poisoned.is_some()
    }

    pub fn stats(&self) -> LogStats {
        self.st.borrow().stats.clone()
    }

    /// Appends bytes `range` of the record body at `loc` to `out`. Records
    /// read from mapped segments are verified again, so media corruption after
    /// boot is reported instead of served.
    pub fn read_body(&self, loc: RecordLoc, range: std::ops::Range<usize>, out: &mut Vec<u8>) -> Result<()> {
        let st = self.st.borrow();
        let corrupt = || Error::Corrupt { segment: loc.segment, position: loc.pos };
        match st.segments.get(&loc.segment) {
            Some(SegData::Mirror { buf, .. }) => {
                let start = loc.pos as usize + RECORD_HEADER_BYTES;
                let body = buf.get(start..start + loc.body_len as usize).ok_or_else(corrupt)?;
                out.extend_from_slice(body.get(range).ok_or_else(corrupt)?);
                Ok(())
            }
            Some(SegData::Mapped(m)) => {
                let bytes = m.bytes().get(loc.pos as usize..).ok_or_else(corrupt)?;
                let (h, body, _) = record::decode(loc.segment, bytes).map_err(|_| corrupt())?;
                if h.body_len != loc.body_len {
                    return Err(corrupt());
                }
                out.extend_from_slice(bytes[body].get(range).ok_or_else(corrupt)?);
                Ok(())
            }
            None => Err(corrupt()),
        }
    }

    /// Stops the writer and preparer loops after their current step.
    pub fn stop(&self) {
        self.stopped.set(true);
        self.wake_writer.notify();
        self.wake_preparer.notify();
        self.zero_pace.notify();
        self.sealed.notify();
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Resolves when a segment became sealed and durable since the last
    /// call (or the log stops). One waiter: the layer above's task that
    /// moves sealed segments.
    pub async fn segment_sealed(&self) {
        self.sealed.wait().await
    }

    /// Segments that are sealed and durable (never written again),
    /// ascending: the ones [`LocalLog::remove_segment`] may delete.
    pub fn sealed_segments(&self) -> Vec<u64> {
        self.sealed_files().into_iter().map(|(no, _)| no).collect()
    }

    /// [`LocalLog::sealed_segments`] with their files' lengths.
    pub fn sealed_files(&self) -> Vec<(u64, u64)> {
        let st = self.st.borrow();
        let mapped = |(&no, s): (&u64, &SegData<_>)| match s {
            SegData::Mapped(m) => Some((no, m.bytes().len() as u64)),
            SegData::Mirror { .. } => None,
        };
        st.segments.iter().filter_map(mapped).collect()
    }

    /// Runs `f` on the bytes of sealed segment `no` (None: not a sealed
    /// segment held here).
    pub fn with_sealed<T>(&self, no: u64, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        let st = self.st.borrow();
        let Some(SegData::Mapped(m)) = st.segments.get(&no) else { return None };
        Some(f(m.bytes()))
    }

    /// Bytes `offset..offset + max` of sealed segment `no` (fewer at its
    /// end, none past it) and the segment's length; None unless the segment
    /// is sealed and durable here, so never a byte that may still change
    /// (what segment shipping sends).
    pub fn sealed_slice(&self, no: u64, offset: u64, max: usize) -> Option<(u64, Vec<u8>)> {
        let st = self.st.borrow();
        let Some(SegData::Mapped(m)) = st.segments.get(&no) else { return None };
        let bytes = m.bytes();
        let start = (offset as usize).min(bytes.len());
        let end = start.saturating_add(max).min(bytes.len());
        Some((bytes.len() as u64, bytes[start..end].to_vec()))
    }

    /// Bytes the segment files take on the local disk: the sealed ones, the
    /// active one and those prepared ahead at full size. The one prepared
    /// ahead counts even before the preparer made it: it is always made
    /// right after a rollover, and a task that wakes on rollovers to free
    /// room must not see room that is not there.
    pub fn file_bytes(&self) -> u64 {
        let st = self.st.borrow();
        let files: u64 = st
            .segments
            .values()
            .map(|s| match s {
                SegData::Mirror { .. } => self.cfg.segment_bytes,
                SegData::Mapped(m) => m.bytes().len() as u64,
            })
            .sum();
        files + st.prepared.len().max(1) as u64 * self.cfg.segment_bytes
    }

    /// Deletes a sealed segment for good (file and directory entry, durably).
    /// The caller guarantees no record in it is needed any more: recovery
    /// without it must rebuild the same state. Reads of it fail from now on.
    pub async fn remove_segment(&self, no: u64) -> Result<()> {
        if !matches!(self.st.borrow().segments.get(&no), Some(SegData::Mapped(_))) {
            return Err(Error::not_sealed("remove", no));
        }
        self.st.borrow_mut().segments.remove(&no);
        self.store.remove(no).await.map_err(|source| Error::io("remove", no, source))
    }

    pub(super) fn file_of(&self, no: u64) -> Rc<S::File> {
        match self.st.borrow().segments.get(&no) {
            Some(SegData::Mirror { file: Some(f), .. }) => f.clone(),
            _ => unreachable!("flush jobs only name segments with files"),
        }
    }
}
