//! The group-commit writer: flushes cut from the mirrors, up to
//! [`FLIGHTS_MAX`] of them in flight, completed in order; a failed write or
//! sync poisons the log.
//!
//! A second flush may start before the first completes only where the two
//! cannot touch the same block (O_DIRECT writes whole blocks, and two
//! writes of one block in flight may land in either order): so a flush that
//! many records share is padded to a block boundary ([`record::pad`]), and
//! the next one may go out at once if it writes only the same, unsealed
//! segment. A flush with a seal is alone in flight: a sealed segment is
//! durable before any byte of its successor goes out. Waiters are released
//! in lsn order, so a flush that completes early waits for its elders.

use super::*;
use futures_util::stream::{FuturesOrdered, StreamExt};

/// Flushes in flight at most. A disk serves a few writes at once at little
/// more latency than one (the development VM's virtio disk: 4.4k O_DSYNC
/// writes/s at one in flight, 6.8k at two), so a second flush carries what
/// arrives while the first is out instead of waiting a whole write for it.
pub(super) const FLIGHTS_MAX: usize = 2;

/// Records a flush carries at least to be padded to a block: a pad costs
/// half a block on average, worth it when records arrive faster than the
/// disk writes (a lone writer's flushes are never padded).
const PAD_RECORDS_MIN: u64 = 2;

/// How the newest flush cut ends: whether another may start behind it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CutEnd {
    segment: u64,
    /// It ends on a block boundary (padded, or by chance).
    aligned: bool,
    /// It carries a seal.
    sealed: bool,
}

/// One flush: where its ranges go, and what it makes durable. Its data
/// (the ranges copied out of the mirrors) travels beside it to the write.
pub(super) struct Cut {
    jobs: Vec<FlushJob>,
    target_lsn: u64,
    records: u64,
}

/// What the writer may do now.
enum Step {
    /// Nothing to flush (or the log is poisoned).
    Idle,
    /// Cut a flush now.
    Cut,
    /// A dirty segment's file is still being created.
    NeedFile,
    /// Wait for a flight to complete first.
    Busy,
}

impl<S: SegmentStore> LocalLog<S> {
    /// A write, sync or segment creation failed: from now on every waiter
    /// and every append fails with the first error. After a failed
    /// fdatasync the kernel may have dropped the dirty pages and a later
    /// sync may succeed without them, so nothing written after the failure
    /// may ever be acknowledged; the in-memory state may also be ahead of the
    /// disk. Reads of what was durable before keep working. A restart
    /// recovers from what the disk holds.
    pub fn poison(&self, e: Error) {
        let mut st = self.st.borrow_mut();
        st.poisoned.get_or_insert_with(|| {
            tracing::error!(
                "STORAGE FAILURE in {}: {e}; this shard now refuses every write until the server is restarted \
                 (reads of durable data continue; recovery at restart keeps every acknowledged record)",
                self.store.location()
            );
            e
        });
        // Each wakes to find the log poisoned and fails with its first error.
        for (_, waker) in st.waiters.drain(..) {
            waker.wake();
        }
        drop(st);
        // A writer waiting for a segment file must see the failure too.
        self.segment_ready.notify();
    }

    /// Background task: the group-commit loop.
    pub async fn run_writer(&self) {
        let mut flights = FuturesOrdered::new();
        // Whether the tasks that were ready had their turn since the writer
        // was last idle: woken by one append, it lets every connection whose
        // request arrived in the same turn append first, so one flush
        // carries them all. After a flush there is no such wait: what was
        // appended meanwhile is the next batch already.
        let mut gathered = false;
        loop {
            match self.step(flights.len()) {
                Step::Cut if !gathered => {
                    futures_lite::future::yield_now().await;
                    gathered = true;
                    continue;
                }
                Step::Cut => {
                    let (cut, data) = self.cut();
                    flights.push_back(self.write_cut(cut, data));
                    continue;
                }
                Step::NeedFile if flights.is_empty() => {
                    self.wake_preparer.notify();
                    self.segment_ready.wait().await;
                    continue;
                }
                Step::Idle if flights.is_empty() => {
                    if self.stopped.get() {
                        return;
                    }
                    gathered = false;
                    self.wake_writer.wait().await;
                    continue;
                }
                _ => {}
            }
            // Wait for the oldest flight, or, with room for another, for
            // appends that may start one.
            let done = if flights.len() < FLIGHTS_MAX {
                let appended = async {
                    self.wake_writer.wait().await;
                    None
                };
                futures_lite::future::or(flights.next(), appended).await
            } else {
                flights.next().await
            };
            if let Some((cut, result)) = done {
                self.complete(cut, result);
                gathered = true;
            }
        }
    }

    fn step(&self, in_flight: usize) -> Step {
        let st = self.st.borrow();
        if st.poisoned.is_some() || st.lsn_tail == st.lsn_cut || st.cutting_back {
            return Step::Idle;
        }
        if in_flight >= FLIGHTS_MAX {
            return Step::Busy;
        }
        let mut dirty = st.segments.iter().filter_map(|(&no, s)| match s {
            SegData::Mirror { buf, cut_len, file, .. } if buf.len() > *cut_len => Some((no, file.is_some())),
            _ => None,
        });
        if dirty.clone().any(|(_, has_file)| !has_file) {
            return Step::NeedFile;
        }
        let last = st.last_cut;
        if in_flight == 0 || (last.aligned && !last.sealed && dirty.all(|(no, _)| no == last.segment)) {
            Step::Cut
        } else {
            Step::Busy
        }
    }

    /// Pads the active segment to a block boundary when the flush being
    /// cut carries enough records and there is room for the pad.
    fn pad_if_busy(&self, st: &mut State<S::File>) {
        // A batched log's bytes are its leader's: it writes no pads of its own.
        if st.records_pending < PAD_RECORDS_MIN || self.batched {
            return;
        }
        let no = st.active;
        let Some(SegData::Mirror { buf, records, sealed: false, .. }) = st.segments.get_mut(&no) else { return };
        let len = buf.len();
        let mut framed = align_up(len) - len;
        if framed == 0 {
            return;
        }
        if framed < RECORD_HEADER_BYTES {
            framed += DIRECT_IO_ALIGNMENT_BYTES as usize;
        }
        if (len + framed + SEAL_FRAMED_BYTES) as u64 > self.cfg.segment_bytes {
            return;
        }
        record::pad(no, framed, buf);
        *records += 1;
        st.lsn_tail += framed as u64;
        st.stats.bytes_padded += framed as u64;
    }

    /// Copies every range not yet cut out of the mirrors (so appends can go
    /// on meanwhile) into one flush.
    fn cut(&self) -> (Cut, Vec<<S::File as SegmentFile>::Buf>) {
        let mut st = self.st.borrow_mut();
        self.pad_if_busy(&mut st);
        let first = st.flights == 0;
        let (mut jobs, mut bufs) = (Vec::new(), Vec::new());
        let mut end_of_cut = CutEnd::default();
        for (&no, seg) in st.segments.iter_mut() {
            let SegData::Mirror { buf, cut_len, sealed, file, .. } = seg else {
                continue;
            };
            // A sealed segment with nothing dirty still gets a job (with an
            // empty write) so it is swapped to its mapping at completion.
            if buf.len() == *cut_len && !(*sealed && first) {
                continue;
            }
            let file = file.as_ref().expect("step checked every dirty segment has a file");
            let start = align_down(*cut_len);
            let end = buf.len();
            let data = if end > *cut_len {
                file.filled_buf(align_up(end) - start, &buf[start..end])
            } else {
                file.alloc_buf(0)
            };
            *cut_len = end;
            end_of_cut = CutEnd { segment: no, aligned: end == align_up(end), sealed: end_of_cut.sealed || *sealed };
            jobs.push(FlushJob { segment: no, pos: start as u64, sealed: *sealed });
            bufs.push(data);
        }
        st.last_cut = end_of_cut;
        st.flights += 1;
        st.lsn_cut = st.lsn_tail;
        let records = std::mem::take(&mut st.records_pending);
        (Cut { jobs, target_lsn: st.lsn_tail, records }, bufs)
    }

    /// Writes (and syncs) a flush's ranges, one segment after the other: a
    /// sealed segment is durable before its successor's bytes go out.
    async fn write_cut(&self, cut: Cut, data: Vec<<S::File as SegmentFile>::Buf>) -> (Cut, Result<()>) {
        let mut result = Ok(());
        let io_started = std::time::Instant::now();
        let mut bytes = 0;
        for (job, data) in cut.jobs.iter().zip(data) {
            if result.is_ok() && !data.as_ref().is_empty() {
                bytes += data.as_ref().len() as u64;
                result = self.write_job(job, data).await;
            }
        }
        if result.is_ok() && cut.records > 0 {
            let mut st = self.st.borrow_mut();
            st.stats.bytes_flushed += bytes;
            st.stats.flush_io_us.record(io_started.elapsed().as_micros() as u64);
        }
        (cut, result)
    }

    async fn write_job(&self, job: &FlushJob, data: <S::File as SegmentFile>::Buf) -> Result<()> {
        let file = self.file_of(job.segment);
        let t = std::time::Instant::now();
        file.write_at(data, job.pos).await.map_err(|source| Error::io("write", job.segment, source))?;
        let written = std::time::Instant::now();
        file.sync().await.map_err(|source| Error::io("fdatasync", job.segment, source))?;
        let mut st = self.st.borrow_mut();
        st.stats.write_us.record((written - t).as_micros() as u64);
        if !self.store.write_is_durable() {
            st.stats.sync_us.record(written.elapsed().as_micros() as u64);
        }
        Ok(())
    }

    /// The oldest flight finished (flights complete in cut order): makes
    /// what it wrote durable in memory and releases the covered waiters.
    fn complete(&self, cut: Cut, result: Result<()>) {
        let flights = {
            let mut st = self.st.borrow_mut();
            st.flights -= 1;
            st.flights
        };
        if flights == 0 {
            self.flights_done.notify();
        }
        if let Err(e) = result.and_then(|()| self.swap_sealed(&cut)) {
            self.poison(e);
            return;
        }
        let mut st = self.st.borrow_mut();
        if st.poisoned.is_some() {
            // An older flight failed: nothing after it may be acknowledged.
            return;
        }
        debug_assert!(cut.target_lsn >= st.lsn_durable);
        st.lsn_durable = cut.target_lsn;
        if cut.records > 0 {
            st.stats.flushes += 1;
            st.stats.records_flushed += cut.records;
            st.stats.max_records_per_flush = st.stats.max_records_per_flush.max(cut.records);
            st.stats.batch_records.record(cut.records);
        }
        let visible = self.visible_lsn(&st);
        release_waiters(&mut st, visible);
        drop(st);
        self.flushed.notify();
    }

    /// What `durable` waits for: the durable point, and in a batched log
    /// also the committed one (a record is acknowledged and served only
    /// once its batch is durable here and committed by the group).
    pub(super) fn visible_lsn(&self, st: &State<S::File>) -> u64 {
        if self.batched {
            st.lsn_durable.min(st.lsn_committed)
        } else {
            st.lsn_durable
        }
    }

    /// Sealed segments of a completed flight are served from their files
    /// from now on; their mirrors are kept for reuse.
    fn swap_sealed(&self, cut: &Cut) -> Result<()> {
        if self.st.borrow().poisoned.is_some() {
            return Ok(());
        }
        for job in cut.jobs.iter().filter(|job| job.sealed) {
            let map = self.store.map(job.segment).map_err(|source| Error::io("map", job.segment, source))?;
            let mut st = self.st.borrow_mut();
            if let Some(SegData::Mirror { buf, .. }) = st.segments.insert(job.segment, SegData::Mapped(map)) {
                st.spare_mirror = Some(buf);
            }
            drop(st);
            self.sealed.notify();
        }
        Ok(())
    }
}

/// Wakes (and forgets) every waiter `visible` covers. Waiters are mostly in
/// lsn order, but a reader may wait for an older lsn after a newer waiter.
pub(super) fn release_waiters<F>(st: &mut State<F>, visible: u64) {
    st.waiters.retain(|(lsn, waker)| {
        let covered = *lsn <= visible;
        if covered {
            waker.wake_by_ref();
        }
        !covered
    });
}
