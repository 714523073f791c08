//! A shard's side of bucket quotas: counting its streams into the counters
//! of limited buckets (at boot and when a reload adds counters), reserving
//! what a write adds before it is written, and giving back what a delete,
//! expiry or trim frees. See `crate::quota` for what is counted.

use crate::protocol::{Error, QuotaKind};
use crate::quota::{BucketUsage, Quotas, Reservation};
use crate::shard::Shard;
use crate::storage::io::SegmentStore;
use std::collections::HashMap;
use std::sync::Arc;

impl<S: SegmentStore> Shard<S> {
    /// Counts this shard's streams into every quota counter it does not
    /// count yet. One synchronous step on this shard's thread, so no write
    /// of this shard is counted twice or missed: those before it are in the
    /// streams it scans, those after it reserve on the counter.
    pub fn count_usage(&self, quotas: &Quotas) {
        let all = quotas.counters();
        let mut counted = self.counted.borrow_mut();
        let new: HashMap<&str, &Arc<BucketUsage>> =
            all.iter().filter(|(b, _)| !counted.contains_key(*b)).map(|(b, u)| (b.as_str(), u)).collect();
        if new.is_empty() {
            return;
        }
        for (key, s) in self.state.borrow_mut().iter_mut() {
            if let Some(u) = new.get(key.bucket.as_str()).filter(|_| !s.soft_deleted) {
                u.add(1, s.stored_bytes());
                s.usage = Some(Arc::clone(u));
            }
        }
        for (bucket, u) in new {
            counted.insert(bucket.to_string(), u.clone());
        }
    }

    /// In a cell (one shard a node, so this shard alone counts its buckets'
    /// streams here): the counters again from the state, as this replica
    /// begins to lead. As a follower it applied creates, appends and
    /// deletes without counting them (a leader alone admits writes), and a
    /// rebuild dropped streams it had counted.
    pub(in crate::shard) fn recount_usage(&self) {
        debug_assert_eq!(self.shards, 1, "another shard counts into the same counters");
        let counted = self.counted.borrow();
        if counted.is_empty() {
            return;
        }
        let mut totals: HashMap<&str, (u64, u64)> = counted.keys().map(|b| (b.as_str(), (0, 0))).collect();
        for (key, s) in self.state.borrow_mut().iter_mut() {
            s.usage = counted.get(&key.bucket).filter(|_| !s.soft_deleted).cloned();
            if let (Some(_), Some(t)) = (&s.usage, totals.get_mut(key.bucket.as_str())) {
                t.0 += 1;
                t.1 += s.stored_bytes();
            }
        }
        for (bucket, (streams, bytes)) in totals {
            counted[bucket].reset(streams, bytes);
        }
    }

    /// In a cell of more than one shard a node (`Shard::retell`): this
    /// shard's streams counted into counters every shard zeroed first.
    pub(in crate::shard) fn count_usage_share(&self) {
        let counted = self.counted.borrow();
        if counted.is_empty() {
            return;
        }
        for (key, s) in self.state.borrow_mut().iter_mut() {
            s.usage = counted.get(&key.bucket).filter(|_| !s.soft_deleted).cloned();
            if let Some(u) = &s.usage {
                u.add(1, s.stored_bytes());
            }
        }
    }

    /// The counter this shard counts `bucket`'s streams into, if any.
    pub(in crate::shard) fn usage_of(&self, bucket: &str) -> Option<Arc<BucketUsage>> {
        let counted = self.counted.borrow();
        if counted.is_empty() {
            return None;
        }
        counted.get(bucket).cloned()
    }

    /// Reserves what a write adds to `bucket` (nothing to do without a
    /// counter); a refusal is 429 or 507 and writes nothing.
    pub(in crate::shard) fn reserve(
        &self,
        bucket: &str,
        usage: Option<&Arc<BucketUsage>>,
        streams: u64,
        bytes: u64,
    ) -> Result<Option<Reservation>, Error> {
        let Some(u) = usage else { return Ok(None) };
        u.reserve(streams, bytes).map(Some).map_err(|e| {
            let mut st = self.stats.borrow_mut();
            match e.quota {
                QuotaKind::MaxStreams => st.quota_refused_streams += 1,
                QuotaKind::MaxBytes => st.quota_refused_bytes += 1,
            }
            Error::QuotaExceeded {
                quota: e.quota,
                bucket: bucket.to_string(),
                limit: e.limit,
                used: e.used,
                requested: e.requested,
            }
        })
    }
}
