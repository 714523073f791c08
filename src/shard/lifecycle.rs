//! A stream's end of life: delete (soft while forks need it), TTL expiry,
//! fork reference counts and the collection of unreferenced sources.

use super::*;

impl<S: SegmentStore> Shard<S> {
    /// Whether the stream at `key` is live and past its TTL or expiry time.
    pub(super) fn expiry_due(&self, key: &StreamKey, now_ms: i64) -> bool {
        self.streams
            .borrow()
            .get(key)
            .is_some_and(|s| !s.soft_deleted && rules::expired(&s.lifetime, s.last_access_ms, now_ms))
    }

    /// Lazy expiry: the stream is gone for clients from now on. The delete
    /// record makes that survive a restart; if the log cannot take it now,
    /// the next access after restart expires it again. With forks it is only
    /// soft-deleted (F95). An expired fork releases its source once its
    /// delete is durable, as an explicit delete does.
    pub(super) async fn expire_if_due(&self, key: &StreamKey) {
        if !self.expiry_due(key, (self.now_ms)()) {
            return;
        }
        if let Ok((lsn, Some(source))) = self.delete_now(key) {
            if self.log.durable(lsn).await.is_ok() {
                self.release_source(source).await;
            }
        }
    }

    /// Appends a delete record for the stream at `key` (hard or soft) and
    /// returns its lsn and the stream's incarnation.
    pub(super) fn log_delete(&self, key: &StreamKey, soft: bool) -> Result<(u64, u64, u32), Error> {
        let (uid, inc, tail) = {
            let streams = self.streams.borrow();
            let s = streams.get(key).ok_or(Error::NotFound)?;
            (s.uid, s.incarnation, s.tail)
        };
        let h = RecordHeader {
            kind: persist::KIND_DELETE,
            stream_id: uid,
            incarnation: inc,
            stream_offset: tail,
            body_len: 0,
        };
        let (loc, lsn) = self.log.append(h, &persist::encode_delete(soft)).map_err(|e| self.storage_err(e))?;
        if soft {
            if let Some(s) = self.streams.borrow_mut().get_mut(key) {
                s.note_meta(loc.segment);
            }
        } else {
            self.index(loc.segment).deleted_uids.push(uid);
            self.reclaim_due.set(true);
        }
        Ok((lsn, uid, inc))
    }

    /// Logs a delete and forgets the stream. Returns the delete's lsn.
    pub(super) fn remove_stream(&self, key: &StreamKey) -> Result<u64, Error> {
        let (lsn, uid, inc) = self.log_delete(key, false)?;
        self.streams.borrow_mut().remove(key);
        self.by_uid.borrow_mut().remove(&uid);
        self.tombstones.borrow_mut().insert(key.clone(), inc);
        Ok(lsn)
    }

    /// Soft-deletes a stream that forks reference, else removes it. Returns
    /// the record's lsn and, for a removed fork, its source to release.
    /// Either way the stream stops counting against its bucket's quotas.
    pub(super) fn delete_now(&self, key: &StreamKey) -> Result<(u64, Option<ForkRecord>), Error> {
        let (refs, fork, usage, stored) = {
            let streams = self.streams.borrow();
            let s = streams.get(key).ok_or(Error::NotFound)?;
            (s.fork_refs, s.fork.clone(), s.usage.clone(), s.stored_bytes())
        };
        let release = || {
            if let Some(u) = &usage {
                u.release(1, stored);
            }
        };
        if refs == 0 {
            let lsn = self.remove_stream(key)?;
            release();
            return Ok((lsn, fork));
        }
        let (lsn, _, _) = self.log_delete(key, true)?;
        release();
        let mut streams = self.streams.borrow_mut();
        let s = streams.get_mut(key).expect("checked above");
        s.soft_deleted = true;
        s.usage = None;
        s.last_lsn = lsn;
        // Readers waiting on it get their 410 now.
        s.waiters.clear();
        Ok((lsn, None))
    }

    pub(super) async fn delete(&self, key: StreamKey) -> Reply {
        let (lsn, released) = self.delete_now(&key)?;
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        if let Some(f) = released {
            self.release_source(f).await;
        }
        Ok(Outcome::Deleted)
    }

    /// A fork is gone: tell its source's owner (which may cascade).
    pub(super) async fn release_source(&self, f: ForkRecord) {
        let source = StreamKey { bucket: f.bucket, stream: f.stream };
        let _ = self.ask_owner(|done| Control::ForkRef { source, source_uid: f.source_uid, add: false, done }).await;
    }

    /// Counts a fork reference up or down. Dropping the last reference of a
    /// soft-deleted stream removes it for good, and releases its own source.
    pub(super) async fn fork_ref(&self, source: &StreamKey, uid: u64, add: bool) {
        let release = {
            let mut streams = self.streams.borrow_mut();
            let Some(s) = streams.get_mut(source).filter(|s| s.uid == uid) else {
                return;
            };
            if add {
                s.fork_refs += 1;
                return;
            }
            s.fork_refs = s.fork_refs.saturating_sub(1);
            s.fork_refs == 0 && s.soft_deleted
        };
        if release {
            self.collect(source).await;
        }
    }

    /// Removes a soft-deleted stream nobody references any more (cascading
    /// up its fork chain).
    pub(super) async fn collect(&self, key: &StreamKey) {
        let fork = self.streams.borrow().get(key).and_then(|s| s.fork.clone());
        if let Ok(lsn) = self.remove_stream(key) {
            let _ = self.log.durable(lsn).await;
            if let Some(f) = fork {
                self.release_source(f).await;
            }
        }
    }

    /// At boot, after every shard told its sources about its forks: collect
    /// soft-deleted streams that no fork references any more.
    pub async fn collect_unreferenced(&self) {
        let due: Vec<StreamKey> = self
            .streams
            .borrow()
            .iter()
            .filter(|(_, s)| s.soft_deleted && s.fork_refs == 0)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            self.collect(&k).await;
        }
    }
}
