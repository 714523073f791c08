//! Buckets: create, delete, info, counts and listings gathered from every shard.

use crate::protocol::persist;
use crate::protocol::rules;
use crate::protocol::{BucketOp, Error, ListReq, ListedStream, Listing, Offset, Outcome, StreamKey};
use crate::shard::message::{Control, ListPart};
use crate::shard::records;
use crate::shard::router::shard_for_bucket;
use crate::shard::stream::Stream;
use crate::shard::{Reply, Shard};
use crate::storage::io::SegmentStore;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

impl<S: SegmentStore> Shard<S> {
    pub(in crate::shard) fn count_in_bucket(&self, bucket: &str) -> u64 {
        let now = (self.now_ms)();
        self.state
            .borrow()
            .iter()
            .filter(|(k, s)| {
                k.bucket == bucket && !s.soft_deleted && !rules::expired(&s.lifetime, s.last_access_ms, now)
            })
            .count() as u64
    }

    /// Writes a bucket's create record: at creation, and again when the
    /// reclaim pass moves it out of an old segment (recovery treats repeats
    /// as one). Returns its lsn.
    pub(in crate::shard) fn log_bucket_create(&self, bucket: &str) -> Result<u64, Error> {
        self.log_bucket(bucket, true)
    }

    /// Writes a bucket's create or delete record and applies it.
    fn log_bucket(&self, bucket: &str, created: bool) -> Result<u64, Error> {
        let h = records::bucket_header(created);
        let (loc, lsn) = self.log.append(h, &persist::encode_bucket(bucket)).map_err(|e| self.storage_err(e))?;
        records::apply_bucket(&mut self.state.borrow_mut(), bucket, loc.segment, created);
        if !created {
            self.reclaim_due.set(true);
        }
        Ok(lsn)
    }

    pub(in crate::shard) async fn bucket_op(&self, bucket: String, op: BucketOp) -> Reply {
        debug_assert_eq!(shard_for_bucket(&bucket, self.shards), self.id);
        match op {
            BucketOp::Create => {
                if self.owns_bucket(&bucket) {
                    return Err(Error::Conflict(format!("bucket {bucket} already exists")));
                }
                let lsn = self.log_bucket_create(&bucket)?;
                self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
                self.state.borrow_mut().buckets_known.insert(bucket.clone());
                self.broadcast(|done| Control::ReplicateBucket { bucket: bucket.clone(), present: true, done }).await?;
                Ok(Outcome::BucketCreated)
            }
            BucketOp::Get => {
                if !self.owns_bucket(&bucket) {
                    return Err(Error::NotFound);
                }
                let streams = self.total_in_bucket(&bucket).await?;
                Ok(Outcome::BucketInfo { bucket, streams })
            }
            BucketOp::Delete => {
                if !self.owns_bucket(&bucket) {
                    return Err(Error::NotFound);
                }
                if self.total_in_bucket(&bucket).await? > 0 {
                    return Err(Error::Conflict(format!("bucket {bucket} is not empty")));
                }
                let lsn = self.log_bucket(&bucket, false)?;
                self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
                self.broadcast(|done| Control::ReplicateBucket { bucket: bucket.clone(), present: false, done })
                    .await?;
                Ok(Outcome::BucketDeleted)
            }
        }
    }

    fn owns_bucket(&self, bucket: &str) -> bool {
        self.state.borrow().buckets_owned.contains(bucket)
    }

    pub(in crate::shard) async fn total_in_bucket(&self, bucket: &str) -> Result<u64, Error> {
        let others = self.broadcast(|count| Control::CountBucket { bucket: bucket.to_string(), count }).await?;
        Ok(self.count_in_bucket(bucket) + others.iter().sum::<u64>())
    }

    /// `GET /ds/{bucket}/streams`, on the bucket's owner: every shard (this
    /// one included) computes its part from its own state on its own
    /// thread, concurrently; the owner merges the sorted parts and keeps the
    /// first `limit`. No shard waits for another and nothing is locked, so
    /// the page is a union of per-shard snapshots taken at about the same
    /// time, not one atomic snapshot of the bucket.
    pub(in crate::shard) async fn list_bucket(&self, bucket: String, list: ListReq) -> Reply {
        debug_assert_eq!(shard_for_bucket(&bucket, self.shards), self.id);
        if !self.owns_bucket(&bucket) {
            return Err(Error::NotFound);
        }
        type Part<'a> = Pin<Box<dyn Future<Output = Result<Result<ListPart, Error>, Error>> + 'a>>;
        let mut calls: Vec<Part<'_>> = vec![Box::pin(async { Ok(self.list_part(&bucket, &list).await) })];
        for target in (0..self.shards).filter(|&t| t != self.id) {
            let (bucket, list) = (bucket.clone(), list.clone());
            calls.push(Box::pin(self.ask(target, move |part| Control::ListPart { bucket, list, part })));
        }
        let mut parts = Vec::with_capacity(self.shards);
        for part in join_all(calls).await {
            parts.push(part??);
        }
        let (mut streams, mut after_count, mut stream_count) = (Vec::new(), 0u64, 0u64);
        for p in parts {
            streams.extend(p.streams);
            after_count += p.after_count;
            stream_count += p.prefix_count;
        }
        // Stream IDs are unique across shards (each lives on one), so a sort
        // of at most shards x limit entries is the whole merge.
        streams.sort_unstable_by(|a: &ListedStream, b| a.stream_id.cmp(&b.stream_id));
        streams.truncate(list.limit);
        let has_more = after_count > streams.len() as u64;
        let next_cursor = if has_more { streams.last().map(|s| s.stream_id.clone()) } else { None };
        Ok(Outcome::Listing(Listing { bucket, prefix: list.prefix, stream_count, streams, next_cursor, has_more }))
    }

    /// This shard's part of a bucket listing: its first `limit` streams of
    /// the bucket matching the prefix after the cursor, sorted by ID. Only
    /// durable state, as every answer: writes in flight on matching streams
    /// land first, a stream whose create is not durable is left out, and a
    /// tail or closure is what `visible` shows. Soft-deleted and expired
    /// streams are left out (expiry is not logged here: listing is not an
    /// access).
    pub(in crate::shard) async fn list_part(&self, bucket: &str, list: &ListReq) -> Result<ListPart, Error> {
        let matches = |k: &StreamKey| k.bucket == bucket && k.stream.starts_with(list.prefix.as_str());
        let pending = self.state.borrow().iter().filter(|(k, _)| matches(k)).map(|(_, s)| s.last_lsn).max();
        if let Some(lsn) = pending {
            self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        }
        let now = (self.now_ms)();
        let durable = self.log.durable_lsn();
        let state = self.state.borrow();
        let mut prefix_count = 0u64;
        let mut page: Vec<(&StreamKey, &Stream)> = Vec::new();
        for (k, s) in state.iter() {
            if !matches(k)
                || s.soft_deleted
                || s.created_lsn > durable
                || rules::expired(&s.lifetime, s.last_access_ms, now)
            {
                continue;
            }
            prefix_count += 1;
            if list.after.as_deref().is_none_or(|a| k.stream.as_str() > a) {
                page.push((k, s));
            }
        }
        let after_count = page.len() as u64;
        let by_id = |a: &(&StreamKey, &Stream), b: &(&StreamKey, &Stream)| a.0.stream.cmp(&b.0.stream);
        if page.len() > list.limit {
            page.select_nth_unstable_by(list.limit, by_id);
            page.truncate(list.limit);
        }
        page.sort_unstable_by(by_id);
        let streams = page
            .into_iter()
            .map(|(k, s)| {
                let v = s.visible(durable);
                ListedStream {
                    stream_id: k.stream.clone(),
                    closed: v.closed,
                    content_type: s.content_type.clone(),
                    tail_offset: Offset::new(0, v.tail),
                    created_at_ms: s.created_at_ms,
                    last_write_at_ms: if s.write_lsn <= durable { s.last_write_ms } else { s.durable_write_ms },
                }
            })
            .collect();
        Ok(ListPart { streams, after_count, prefix_count })
    }
}

/// Polls every future until all are done; results in the input order.
async fn join_all<'a, T>(mut futs: Vec<Pin<Box<dyn Future<Output = T> + 'a>>>) -> Vec<T> {
    let mut out: Vec<Option<T>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("every future completed")).collect()
}
