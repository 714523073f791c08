//! One shard's append-only log: segments, group commit, reads, recovery.
//!
//! Appends are synchronous and cheap: the record is framed into the in-memory
//! mirror of the active segment and gets a log sequence number (`lsn`, the
//! count of framed bytes appended since open). A single writer task flushes
//! everything appended so far with one aligned write per dirty segment and
//! one fdatasync, then releases every waiter whose lsn it covered. While that
//! flush is in flight, new appends gather for the next one: the group commit.
//!
//! The partial last block of the active segment stays in the mirror and is
//! rewritten by the next flush, because O_DIRECT writes whole aligned blocks.
//! A segment that filled up gets a seal record (see [`record::seal`]) and is
//! flushed and synced before any byte of its successor, so after a crash only
//! the newest segment can have a torn tail, and every older one must end in
//! its seal.

use super::error::{Error, Result};
use super::io::{SealedBytes, SegmentFile, SegmentStore};
use super::record::{self, DecodeError, RecordHeader, SEAL_FRAMED_BYTES};
use crate::limits::{DIRECT_IO_ALIGNMENT_BYTES, RECORD_HEADER_BYTES};
use crate::metrics::Histo;
use crate::notify::Notify;
use futures_channel::oneshot;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

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

/// Counters for the metrics endpoint and the benchmarks.
#[derive(Debug, Clone)]
pub struct LogStats {
    pub flushes: u64,
    pub records_flushed: u64,
    pub bytes_flushed: u64,
    pub max_records_per_flush: u64,
    /// Records per flush.
    pub batch_records: Histo,
    /// Microseconds from the first write of a flush to the end of its sync.
    pub flush_io_us: Histo,
    /// Microseconds of each segment write (with O_DSYNC: write + sync in one).
    pub write_us: Histo,
    /// Microseconds of each fdatasync (none when writes are durable by themselves).
    pub sync_us: Histo,
}

impl Default for LogStats {
    fn default() -> Self {
        LogStats {
            flushes: 0,
            records_flushed: 0,
            bytes_flushed: 0,
            max_records_per_flush: 0,
            batch_records: Histo::batch_records(),
            flush_io_us: Histo::latency_us(),
            write_us: Histo::latency_us(),
            sync_us: Histo::latency_us(),
        }
    }
}

enum SegData<F> {
    /// Written by this process and not yet sealed-and-durable: served from memory.
    Mirror { buf: Vec<u8>, records: u64, durable_len: usize, sealed: bool, file: Option<Rc<F>> },
    /// Sealed and durable: served from the mapped file.
    Mapped(Rc<dyn SealedBytes>),
}

struct State<F> {
    segments: BTreeMap<u64, SegData<F>>,
    active: u64,
    /// Files created ahead of use, by segment number.
    prepared: BTreeMap<u64, Rc<F>>,
    lsn_tail: u64,
    lsn_durable: u64,
    records_pending: u64,
    waiters: VecDeque<(u64, oneshot::Sender<Result<()>>)>,
    poisoned: Option<Error>,
    stats: LogStats,
}

pub struct Log<S: SegmentStore> {
    store: S,
    cfg: LogConfig,
    st: RefCell<State<S::File>>,
    wake_writer: Notify,
    wake_preparer: Notify,
    segment_ready: Notify,
    stopped: Cell<bool>,
}

fn align_down(v: usize) -> usize {
    v / DIRECT_IO_ALIGNMENT_BYTES as usize * DIRECT_IO_ALIGNMENT_BYTES as usize
}
fn align_up(v: usize) -> usize {
    v.div_ceil(DIRECT_IO_ALIGNMENT_BYTES as usize) * DIRECT_IO_ALIGNMENT_BYTES as usize
}

/// One dirty range copied out for the writer.
struct FlushJob {
    segment: u64,
    pos: u64,
    /// Mirror length this job makes durable.
    end: usize,
    sealed: bool,
}

impl<S: SegmentStore> Log<S> {
    /// Recovers the log in `store` and returns it with every valid record in
    /// log order. A torn tail of the newest segment is cut; an older segment
    /// that does not end in its seal (an invalid record, or a clean-looking
    /// end before the seal) is corruption and fails the open. The newest
    /// segment is sealed before writing resumes in a new one.
    pub async fn open(store: S, cfg: LogConfig) -> Result<(Self, Vec<Recovered>, RecoveryReport)> {
        assert!(cfg.segment_bytes.is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES));
        let io = |op, segment| move |source| Error::io(op, segment, source);
        let list = store.list().await.map_err(io("list", 0))?;
        let mut recovered = Vec::new();
        // (segment, valid end, number of records, ended cleanly, sealed)
        let mut scans: Vec<(u64, u64, usize, bool, bool)> = Vec::new();
        for &(no, _len) in &list {
            let map = store.map(no).map_err(io("map", no))?;
            let bytes = map.bytes();
            let mut pos = 0usize;
            let mut count = 0usize;
            let mut sealed = false;
            let clean = loop {
                if pos >= bytes.len() {
                    break true;
                }
                match record::decode(no, &bytes[pos..]) {
                    Ok((h, body, _)) if h.kind == record::KIND_SEAL => {
                        // A seal anywhere but after this segment's records is
                        // not ours here: treat it like any invalid record.
                        sealed = record::is_seal_of(&h, &bytes[pos..][body], pos as u64, count as u64);
                        break sealed;
                    }
                    Ok((h, _body, framed)) => {
                        // No assertion on what a record says: these are disk
                        // bytes, not our state (a record written twice still
                        // verifies). The shard's replay checks each stream's
                        // records are contiguous and fails the boot if not.
                        recovered.push(Recovered {
                            header: h,
                            loc: RecordLoc { segment: no, pos: pos as u64, body_len: h.body_len },
                        });
                        pos += framed;
                        count += 1;
                    }
                    Err(DecodeError::End) => break true,
                    Err(DecodeError::Truncated | DecodeError::Invalid) => break false,
                }
            };
            scans.push((no, pos as u64, count, clean, sealed));
        }
        let last_with_data = scans.iter().rev().find(|s| s.2 > 0).map(|s| s.0);
        let mut report = RecoveryReport { records: recovered.len(), ..Default::default() };
        let mut segments = BTreeMap::new();
        for &(no, end, count, clean, sealed) in &scans {
            let newer_data = last_with_data.is_some_and(|l| l > no);
            // Older segments were sealed and synced before their successors
            // got a byte: one that does not end in its seal lost records.
            if newer_data && !sealed {
                return Err(Error::Corrupt { segment: no, position: end });
            }
            if count == 0 && !newer_data {
                // A segment prepared ahead and never used, or whose first
                // batch was torn: nothing acknowledged lives there.
                store.remove(no).await.map_err(io("remove", no))?;
                if !clean {
                    report.torn_tail = Some((no, 0));
                }
                continue;
            }
            if !clean {
                report.torn_tail = Some((no, end));
            }
            if !sealed {
                // The newest segment with records: cut a torn tail, seal.
                let mut tail = Vec::with_capacity(SEAL_FRAMED_BYTES);
                record::seal(no, end, count as u64, &mut tail);
                store.finish(no, end, &tail).await.map_err(io("seal", no))?;
                report.sealed_at_boot = Some(no);
            }
            segments.insert(no, SegData::Mapped(store.map(no).map_err(io("map", no))?));
        }
        report.segments = segments.len();
        let active = list.last().map(|l| l.0 + 1).unwrap_or(0);
        report.active_segment = active;
        segments
            .insert(active, SegData::Mirror { buf: Vec::new(), records: 0, durable_len: 0, sealed: false, file: None });
        let log = Log {
            store,
            cfg,
            st: RefCell::new(State {
                segments,
                active,
                prepared: BTreeMap::new(),
                lsn_tail: 0,
                lsn_durable: 0,
                records_pending: 0,
                waiters: VecDeque::new(),
                poisoned: None,
                stats: LogStats::default(),
            }),
            wake_writer: Notify::default(),
            wake_preparer: Notify::default(),
            segment_ready: Notify::default(),
            stopped: Cell::new(false),
        };
        // Create the active segment now so the first append does not wait
        // for it; the preparer task makes the next one in the background.
        log.prepare_missing(false).await?;
        Ok((log, recovered, report))
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// Frames a record into the active segment. Returns where it lives and
    /// the lsn to wait for with [`Log::durable`].
    pub fn append(&self, mut h: RecordHeader, body: &[u8]) -> Result<(RecordLoc, u64)> {
        assert_ne!(h.kind, record::KIND_SEAL, "seals are the log's own records");
        h.body_len = body.len() as u32;
        let framed = record::framed_len(body.len());
        // Every segment keeps room for its seal.
        if (framed + SEAL_FRAMED_BYTES) as u64 > self.cfg.segment_bytes {
            return Err(Error::TooLarge(body.len()));
        }
        let mut st = self.st.borrow_mut();
        if let Some(e) = &st.poisoned {
            return Err(e.clone());
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
            let old = st.active;
            if let Some(SegData::Mirror { buf, records, sealed, .. }) = st.segments.get_mut(&old) {
                record::seal(old, buf.len() as u64, *records, buf);
                *sealed = true;
            }
            // The seal goes out with the segment's last flush.
            st.lsn_tail += SEAL_FRAMED_BYTES as u64;
            st.active = old + 1;
            let file = st.prepared.remove(&(old + 1));
            st.segments
                .insert(old + 1, SegData::Mirror { buf: Vec::new(), records: 0, durable_len: 0, sealed: false, file });
            self.wake_preparer.notify();
        }
        let no = st.active;
        let Some(SegData::Mirror { buf, records, .. }) = st.segments.get_mut(&no) else { unreachable!() };
        let pos = buf.len() as u64;
        record::encode(no, &h, body, buf);
        *records += 1;
        st.lsn_tail += framed as u64;
        st.records_pending += 1;
        let lsn = st.lsn_tail;
        drop(st);
        self.wake_writer.notify();
        Ok((RecordLoc { segment: no, pos, body_len: h.body_len }, lsn))
    }

    /// Resolves when everything up to `lsn` is on stable storage.
    pub async fn durable(&self, lsn: u64) -> Result<()> {
        let rx = {
            let mut st = self.st.borrow_mut();
            if st.lsn_durable >= lsn {
                return Ok(());
            }
            if let Some(e) = &st.poisoned {
                return Err(e.clone());
            }
            let (tx, rx) = oneshot::channel();
            st.waiters.push_back((lsn, tx));
            rx
        };
        rx.await.unwrap_or(Err(Error::Poisoned))
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
    }

    /// Creates the active segment and, with `ahead`, the next one too, so
    /// rollover never waits for a file to be zero-filled.
    async fn prepare_missing(&self, ahead: bool) -> Result<()> {
        loop {
            let want = {
                let st = self.st.borrow();
                let active = st.active;
                let has = |no: u64| {
                    st.prepared.contains_key(&no)
                        || matches!(st.segments.get(&no), Some(SegData::Mirror { file: Some(_), .. }))
                };
                // A segment rolled past before this task ran (appends filled
                // more than one segment meanwhile) has no file and is no longer
                // `active`: create it too, or the writer waits for it forever.
                let passed_over = st
                    .segments
                    .iter()
                    .find(|(_, s)| matches!(s, SegData::Mirror { file: None, .. }))
                    .map(|(&no, _)| no);
                let wanted = if ahead { 2 } else { 1 };
                passed_over.or_else(|| (active..active + wanted).find(|&no| !has(no)))
            };
            let Some(no) = want else { return Ok(()) };
            let file = self
                .store
                .create(no, self.cfg.segment_bytes)
                .await
                .map_err(|source| Error::io("create", no, source))?;
            let mut st = self.st.borrow_mut();
            match st.segments.get_mut(&no) {
                Some(SegData::Mirror { file: slot @ None, .. }) => *slot = Some(Rc::new(file)),
                _ => {
                    st.prepared.insert(no, Rc::new(file));
                }
            }
            drop(st);
            self.segment_ready.notify();
        }
    }

    /// Background task: creates (zero-fills) segments ahead of use.
    pub async fn run_preparer(&self) {
        while !self.stopped.get() {
            if let Err(e) = self.prepare_missing(true).await {
                self.poison(e);
                return;
            }
            self.wake_preparer.wait().await;
        }
    }

    /// A write, sync or segment creation failed: from now on every waiter
    /// and every append fails with the first error. After a failed
    /// fdatasync the kernel may have dropped the dirty pages and a later
    /// sync may succeed without them, so nothing written after the failure
    /// may ever be acknowledged; the in-memory state may also be ahead of the
    /// disk. Reads of what was durable before keep working. A restart
    /// recovers from what the disk holds.
    fn poison(&self, e: Error) {
        let mut st = self.st.borrow_mut();
        let first = st.poisoned.get_or_insert_with(|| {
            tracing::error!(
                "STORAGE FAILURE: {e}; this shard now refuses every write until the server is restarted \
                 (reads of durable data continue; recovery at restart keeps every acknowledged record)"
            );
            e
        });
        let first = first.clone();
        for (_, tx) in st.waiters.drain(..) {
            let _ = tx.send(Err(first.clone()));
        }
        drop(st);
        // A writer waiting for a segment file must see the failure too.
        self.segment_ready.notify();
    }

    /// Background task: the group-commit loop. One flush in flight at a time.
    pub async fn run_writer(&self) {
        loop {
            let has_work = {
                let st = self.st.borrow();
                st.lsn_tail > st.lsn_durable && st.poisoned.is_none()
            };
            if !has_work {
                if self.stopped.get() {
                    return;
                }
                self.wake_writer.wait().await;
                continue;
            }
            if let Err(e) = self.flush_once().await {
                self.poison(e);
            }
        }
    }

    /// Copies every dirty range out of the mirrors (so appends can go on
    /// meanwhile), writes them, syncs, and releases the covered waiters.
    async fn flush_once(&self) -> Result<()> {
        // Files first: a dirty segment whose file is still being created waits here.
        loop {
            let missing = {
                let st = self.st.borrow();
                st.segments.iter().any(|(_, s)| {
                    matches!(s, SegData::Mirror { buf, durable_len, file: None, .. } if buf.len() > *durable_len)
                })
            };
            if !missing {
                break;
            }
            self.wake_preparer.notify();
            self.segment_ready.wait().await;
            if self.st.borrow().poisoned.is_some() {
                return Err(Error::Poisoned);
            }
        }
        let (jobs, bufs, target_lsn, records) = {
            let mut st = self.st.borrow_mut();
            let mut jobs = Vec::new();
            let mut bufs = Vec::new();
            for (&no, seg) in st.segments.iter() {
                let SegData::Mirror { buf, durable_len, sealed, file, .. } = seg else {
                    continue;
                };
                if buf.len() == *durable_len && !*sealed {
                    continue;
                }
                // A sealed segment with nothing dirty still gets a job (with an
                // empty write) so it is swapped to its mapping below.
                let file = file.as_ref().expect("checked above");
                let start = align_down(*durable_len);
                let end = buf.len();
                let mut data = file.alloc_buf(if end > *durable_len { align_up(end) - start } else { 0 });
                if end > *durable_len {
                    data.as_mut()[..end - start].copy_from_slice(&buf[start..end]);
                }
                jobs.push(FlushJob { segment: no, pos: start as u64, end, sealed: *sealed });
                bufs.push(data);
            }
            let records = std::mem::take(&mut st.records_pending);
            (jobs, bufs, st.lsn_tail, records)
        };
        let mut bytes = 0u64;
        let io_started = std::time::Instant::now();
        for (job, data) in jobs.iter().zip(bufs) {
            if data.as_ref().is_empty() {
                continue;
            }
            let file = self.file_of(job.segment);
            bytes += data.as_ref().len() as u64;
            let t = std::time::Instant::now();
            file.write_at(data, job.pos).await.map_err(|source| Error::io("write", job.segment, source))?;
            let written = std::time::Instant::now();
            // A sealed segment is synced on its own before its successor's
            // bytes go out: only the newest segment may ever be torn.
            file.sync().await.map_err(|source| Error::io("fdatasync", job.segment, source))?;
            let mut st = self.st.borrow_mut();
            st.stats.write_us.record((written - t).as_micros() as u64);
            if !self.store.write_is_durable() {
                st.stats.sync_us.record(written.elapsed().as_micros() as u64);
            }
        }
        let mut st = self.st.borrow_mut();
        for job in &jobs {
            if job.sealed {
                let map = self.store.map(job.segment).map_err(|source| Error::io("map", job.segment, source))?;
                st.segments.insert(job.segment, SegData::Mapped(map));
            } else if let Some(SegData::Mirror { durable_len, .. }) = st.segments.get_mut(&job.segment) {
                *durable_len = job.end;
            }
        }
        debug_assert!(target_lsn >= st.lsn_durable);
        st.lsn_durable = target_lsn;
        if records > 0 {
            st.stats.flushes += 1;
            st.stats.records_flushed += records;
            st.stats.bytes_flushed += bytes;
            st.stats.max_records_per_flush = st.stats.max_records_per_flush.max(records);
            st.stats.batch_records.record(records);
            st.stats.flush_io_us.record(io_started.elapsed().as_micros() as u64);
        }
        // Waiters are mostly in lsn order, but a reader may wait for an
        // older lsn after a newer waiter: release every covered one.
        let waiters = std::mem::take(&mut st.waiters);
        for (lsn, tx) in waiters {
            if lsn <= target_lsn {
                let _ = tx.send(Ok(()));
            } else {
                st.waiters.push_back((lsn, tx));
            }
        }
        Ok(())
    }

    /// Segments that are sealed and durable (never written again), ascending:
    /// the ones [`Log::remove_segment`] may delete.
    pub fn sealed_segments(&self) -> Vec<u64> {
        let st = self.st.borrow();
        st.segments.iter().filter(|(_, s)| matches!(s, SegData::Mapped(_))).map(|(&no, _)| no).collect()
    }

    /// Deletes a sealed segment for good (file and directory entry, durably).
    /// The caller guarantees no record in it is needed any more: recovery
    /// without it must rebuild the same state. Reads of it fail from now on.
    pub async fn remove_segment(&self, no: u64) -> Result<()> {
        {
            let mut st = self.st.borrow_mut();
            if !matches!(st.segments.get(&no), Some(SegData::Mapped(_))) {
                let source = std::io::Error::new(std::io::ErrorKind::InvalidInput, "segment is not sealed");
                return Err(Error::io("remove", no, source));
            }
            st.segments.remove(&no);
        }
        self.store.remove(no).await.map_err(|source| Error::io("remove", no, source))
    }

    fn file_of(&self, no: u64) -> Rc<S::File> {
        match self.st.borrow().segments.get(&no) {
            Some(SegData::Mirror { file: Some(f), .. }) => f.clone(),
            _ => unreachable!("flush jobs only name segments with files"),
        }
    }
}
