//! A stream's end of life: delete (soft while forks need it), TTL expiry,
//! fork reference counts and the collection of unreferenced sources.

use crate::protocol::persist::{self, ForkRecord};
use crate::protocol::rules;
use crate::protocol::{Error, Outcome, StreamKey};
use crate::shard::message::Control;
use crate::shard::records;
use crate::shard::{Reply, Shard};
use crate::storage::io::SegmentStore;

impl<S: SegmentStore> Shard<S> {
    /// Whether the stream at `key` is live and past its TTL or expiry time.
    pub(in crate::shard) fn expiry_due(&self, key: &StreamKey, now_ms: i64) -> bool {
        self.state
            .borrow()
            .get(key)
            .is_some_and(|s| !s.soft_deleted && rules::expired(&s.lifetime, s.last_access_ms, now_ms))
    }

    /// Lazy expiry: the stream is gone for clients from now on. The delete
    /// record makes that survive a restart; if the log cannot take it now,
    /// the next access after restart expires it again. With forks it is only
    /// soft-deleted (F95). An expired fork releases its source once its
    /// delete is durable, as an explicit delete does.
    pub(in crate::shard) async fn expire_if_due(&self, key: &StreamKey) {
        if !self.expiry_due(key, (self.now_ms)()) {
            return;
        }
        if let Ok((lsn, Some(source))) = self.delete_now(key) {
            if self.log.durable(lsn).await.is_ok() {
                self.release_source(source).await;
            }
        }
    }

    /// Logs a delete record for the stream at `key` and applies it: soft
    /// while forks reference the stream (it answers 410 and keeps its data
    /// for them), else hard. Returns the record's lsn and, for a removed
    /// fork, its source to release. Either way the stream stops counting
    /// against its bucket's quotas.
    pub(in crate::shard) fn delete_now(&self, key: &StreamKey) -> Result<(u64, Option<ForkRecord>), Error> {
        let (h, soft, usage, stored) = {
            let state = self.state.borrow();
            let s = state.get(key).ok_or(Error::NotFound)?;
            let h = records::stream_header(persist::KIND_DELETE, s.uid, s.incarnation, s.tail);
            (h, s.fork_refs > 0, s.usage.clone(), s.stored_bytes())
        };
        let (loc, lsn) = self.log.append(h, &persist::encode_delete(soft)).map_err(|e| self.storage_err(e))?;
        if let Some(u) = &usage {
            u.release(1, stored);
        }
        let removed = records::apply_delete(&mut self.state.borrow_mut(), key, soft, loc.segment, lsn);
        if !soft {
            self.reclaim_due.set(true);
        }
        Ok((lsn, removed.and_then(|s| s.fork)))
    }

    pub(in crate::shard) async fn delete(&self, key: StreamKey) -> Reply {
        let (lsn, released) = self.delete_now(&key)?;
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        if let Some(f) = released {
            self.release_source(f).await;
        }
        Ok(Outcome::Deleted)
    }

    /// A fork is gone: tell its source's owner (which may cascade).
    pub(in crate::shard) async fn release_source(&self, f: ForkRecord) {
        let source = StreamKey { bucket: f.bucket, stream: f.stream };
        let _ = self.ask_owner(|done| Control::ForkRef { source, source_uid: f.source_uid, add: false, done }).await;
    }

    /// Counts a fork reference up or down. Dropping the last reference of a
    /// soft-deleted stream removes it for good, and releases its own source.
    pub(in crate::shard) async fn fork_ref(&self, source: &StreamKey, uid: u64, add: bool) {
        let release = {
            let mut state = self.state.borrow_mut();
            let Some(s) = state.get_mut(source).filter(|s| s.uid == uid) else {
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
    pub(in crate::shard) async fn collect(&self, key: &StreamKey) {
        if let Ok((lsn, fork)) = self.delete_now(key) {
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
            .state
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
