//! The group-commit writer: one flush in flight, every record appended
//! meanwhile goes in the next; a failed write or sync poisons the log.

use super::*;

impl<S: SegmentStore> Log<S> {
    /// A write, sync or segment creation failed: from now on every waiter
    /// and every append fails with the first error. After a failed
    /// fdatasync the kernel may have dropped the dirty pages and a later
    /// sync may succeed without them, so nothing written after the failure
    /// may ever be acknowledged; the in-memory state may also be ahead of the
    /// disk. Reads of what was durable before keep working. A restart
    /// recovers from what the disk holds.
    pub(super) fn poison(&self, e: Error) {
        let mut st = self.st.borrow_mut();
        let first = st.poisoned.get_or_insert_with(|| {
            tracing::error!(
                "STORAGE FAILURE in {}: {e}; this shard now refuses every write until the server is restarted \
                 (reads of durable data continue; recovery at restart keeps every acknowledged record)",
                self.store.location()
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
            // Let every task that is ready now (connections whose requests
            // arrived in the same turn) append first: one flush carries
            // them all instead of the first alone.
            futures_lite::future::yield_now().await;
            if let Err(e) = self.flush_once().await {
                self.poison(e);
            }
        }
    }

    /// Copies every dirty range out of the mirrors (so appends can go on
    /// meanwhile), writes them, syncs, and releases the covered waiters.
    pub(super) async fn flush_once(&self) -> Result<()> {
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
                let data = if end > *durable_len {
                    file.filled_buf(align_up(end) - start, &buf[start..end])
                } else {
                    file.alloc_buf(0)
                };
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
                if let Some(SegData::Mirror { buf, .. }) = st.segments.insert(job.segment, SegData::Mapped(map)) {
                    st.spare_mirror = Some(buf);
                }
                self.sealed.notify();
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
}
