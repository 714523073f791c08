//! A stream's end of life: delete (soft while forks need it), TTL expiry,
//! fork reference counts and the collection of unreferenced sources.

use crate::protocol::persist::{self, ForkRecord};
use crate::protocol::rules;
use crate::protocol::{Error, Outcome, StreamKey};
use crate::quota::BucketUsage;
use crate::shard::message::Control;
use crate::shard::records;
use crate::shard::state::State;
use crate::shard::{Reply, Shard};
use crate::storage::{io::SegmentStore, RecordHeader};
use std::sync::Arc;

/// A delete's record and what it gives back to its bucket's quota.
#[derive(Debug)]
pub(in crate::shard) struct DeletePlan {
    pub(in crate::shard) header: RecordHeader,
    /// Forks still read the stream's data: it stays, answering 410.
    pub(in crate::shard) soft: bool,
    pub(in crate::shard) usage: Option<Arc<BucketUsage>>,
    pub(in crate::shard) stored: u64,
}

/// Plans deleting the stream at `key` (a live or a soft-deleted one).
pub(in crate::shard) fn plan_delete(state: &State, key: &StreamKey) -> Result<DeletePlan, Error> {
    let s = state.get(key).ok_or(Error::NotFound)?;
    Ok(DeletePlan {
        header: records::stream_header(persist::KIND_DELETE, s.uid, s.incarnation, s.tail),
        soft: s.fork_refs > 0,
        usage: s.usage.clone(),
        stored: s.stored_bytes(),
    })
}

/// Whether the stream at `key` is live and past its TTL or expiry time.
pub(in crate::shard) fn expiry_due(state: &State, key: &StreamKey, now_ms: i64) -> bool {
    state.get(key).is_some_and(|s| !s.soft_deleted && rules::expired(&s.lifetime, s.last_access_ms, now_ms))
}

impl<S: SegmentStore> Shard<S> {
    /// Lazy expiry: the stream is gone for clients from now on. The delete
    /// record makes that survive a restart; if the log cannot take it now,
    /// the next access after restart expires it again. With forks it is only
    /// soft-deleted (F95). An expired fork releases its source once its
    /// delete is durable, as an explicit delete does. On a node of a cell
    /// not whole (more than one shard a node, not leading every group) it
    /// waits: whether forks read the stream is counted on other groups.
    pub(in crate::shard) async fn expire_if_due(&self, key: &StreamKey) {
        if !self.whole() || !expiry_due(&self.state.borrow(), key, (self.now_ms)()) {
            return;
        }
        if let Ok((lsn, Some(source))) = self.delete_now(key) {
            if self.log.durable(lsn).await.is_ok() {
                self.release_source(source).await;
            }
        }
    }

    /// In a cell, as this replica begins to lead (every committed record
    /// applied): every stream's TTL window starts again now. As a follower
    /// it saw the writes and the reads it served itself, not always those
    /// other nodes served, so a last access it holds may be stale; restarting
    /// the window costs an idle stream at most one window more, deciding on a
    /// stale time would delete a stream in use. Its quota counters are
    /// counted again, and its subscriptions resynced.
    pub fn lead_begins(&self) {
        let now = (self.now_ms)();
        for (_, s) in self.state.borrow_mut().iter_mut() {
            s.last_access_ms = s.last_access_ms.max(now);
        }
        // With more than one shard a node, the counters count every
        // shard's streams: the node recounts them all once it leads every
        // group (`Shard::retell`).
        if self.shards == 1 {
            self.recount_usage();
        }
        self.subs_lead_begins();
    }

    /// Logs a delete record for the stream at `key` and applies it: soft
    /// while forks reference the stream (it answers 410 and keeps its data
    /// for them), else hard. Returns the record's lsn and, for a removed
    /// fork, its source to release. Either way the stream stops counting
    /// against its bucket's quotas.
    pub(in crate::shard) fn delete_now(&self, key: &StreamKey) -> Result<(u64, Option<ForkRecord>), Error> {
        let DeletePlan { header, soft, usage, stored } = plan_delete(&self.state.borrow(), key)?;
        let (loc, lsn) = self.log.append(header, &persist::encode_delete(soft)).map_err(|e| self.storage_err(e))?;
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
        // Taken before the stream goes: the answer names the creation deleted.
        let incarnation = self.state.borrow().incarnation(&key).ok_or(Error::NotFound)?;
        let (lsn, released) = self.delete_now(&key)?;
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        if let Some(f) = released {
            self.release_source(f).await;
        }
        Ok(Outcome::Deleted { incarnation })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::headers::Lifetime;
    use crate::shard::ops::testkit::{append, create, create_with, key};

    #[test]
    fn a_stream_without_forks_is_deleted_for_good() {
        let mut state = State::default();
        let uid = create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abcd", None, 2);
        let p = plan_delete(&state, &key("a")).unwrap();
        assert!(!p.soft);
        assert_eq!((p.header.kind, p.header.stream_id, p.header.stream_offset), (persist::KIND_DELETE, uid, 4));
        assert_eq!(p.stored, 4);
        let gone = records::apply_delete(&mut state, &key("a"), p.soft, 7, 3).expect("removed");
        assert_eq!(gone.uid, uid);
        assert!(state.get(&key("a")).is_none());
        assert!(state.key_of(uid).is_none(), "its uid no longer names it");
        assert!(matches!(plan_delete(&state, &key("a")), Err(Error::NotFound)));
    }

    #[test]
    fn a_stream_forks_read_is_only_soft_deleted_and_its_readers_released() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        let s = state.get_mut(&key("a")).unwrap();
        s.fork_refs = 1;
        let (tx, mut rx) = futures_channel::oneshot::channel();
        s.waiters.push(tx);
        let p = plan_delete(&state, &key("a")).unwrap();
        assert!(p.soft);
        assert!(records::apply_delete(&mut state, &key("a"), true, 5, 2).is_none());
        let s = state.get(&key("a")).expect("kept for its forks");
        assert!(s.soft_deleted);
        assert_eq!(s.last_lsn, 2);
        assert_eq!(s.meta_segs, vec![5], "recovery needs the delete's segment");
        assert!(rx.try_recv().is_err(), "the waiting reader was released (its sender dropped)");
        assert!(!expiry_due(&state, &key("a"), i64::MAX), "a soft-deleted stream does not expire again");
    }

    #[test]
    fn expiry_follows_the_ttl_from_the_last_access() {
        let mut state = State::default();
        create_with(&mut state, "t", "text/plain", Lifetime::Ttl { secs: 10 }, 1);
        let last = state.get(&key("t")).unwrap().last_access_ms;
        assert!(!expiry_due(&state, &key("t"), last + 9_999));
        assert!(expiry_due(&state, &key("t"), last + 10_000));
        state.get_mut(&key("t")).unwrap().last_access_ms = last + 5_000;
        assert!(!expiry_due(&state, &key("t"), last + 10_000), "an access slides the window");
        assert!(!expiry_due(&state, &key("nope"), 0));
    }
}
