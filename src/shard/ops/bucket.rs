//! Buckets: create, delete, info, counts and listings gathered from every shard.

use crate::protocol::persist;
use crate::protocol::rules;
use crate::protocol::{BucketOp, Error, ListReq, ListedStream, Listing, Offset, Outcome, StreamKey};
use crate::shard::message::{Control, ListPart};
use crate::shard::records;
use crate::shard::router::shard_for_bucket;
use crate::shard::state::State;
use crate::shard::stream::Stream;
use crate::shard::{Reply, Shard};
use crate::storage::io::SegmentStore;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

impl<S: SegmentStore> Shard<S> {
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
        Ok(count_in_bucket(&self.state.borrow(), bucket, (self.now_ms)()) + others.iter().sum::<u64>())
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
        Ok(list_page(&self.state.borrow(), bucket, list, (self.now_ms)(), self.log.durable_lsn()))
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

/// How many live streams of `bucket` this shard holds (soft-deleted and
/// expired ones do not count).
pub(in crate::shard) fn count_in_bucket(state: &State, bucket: &str, now_ms: i64) -> u64 {
    state
        .iter()
        .filter(|(k, s)| {
            k.bucket == bucket && !s.soft_deleted && !rules::expired(&s.lifetime, s.last_access_ms, now_ms)
        })
        .count() as u64
}

/// This shard's part of a listing page, from its state as of `durable`:
/// the first `limit` live, durably created streams of `bucket` whose IDs
/// start with the prefix and sort after the cursor, by ID, each as far as
/// it is durable.
pub(in crate::shard) fn list_page(state: &State, bucket: &str, list: &ListReq, now: i64, durable: u64) -> ListPart {
    let mut prefix_count = 0u64;
    let mut page: Vec<(&StreamKey, &Stream)> = Vec::new();
    for (k, s) in state.iter() {
        if k.bucket != bucket
            || !k.stream.starts_with(list.prefix.as_str())
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
    let streams = page.into_iter().map(|(k, s)| listed(k, s, durable)).collect();
    ListPart { streams, after_count, prefix_count }
}

/// A stream as a listing shows it: what is durable of it.
fn listed(k: &StreamKey, s: &Stream, durable: u64) -> ListedStream {
    let v = s.visible(durable);
    ListedStream {
        stream_id: k.stream.clone(),
        closed: v.closed,
        content_type: s.content_type.clone(),
        tail_offset: Offset::new(0, v.tail),
        created_at_ms: s.created_at_ms,
        last_write_at_ms: if s.write_lsn <= durable { s.last_write_ms } else { s.durable_write_ms },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::headers::Lifetime;
    use crate::shard::ops::testkit::{append, create, create_with, key};

    fn list(prefix: &str, after: Option<&str>, limit: usize) -> ListReq {
        ListReq { prefix: prefix.into(), after: after.map(String::from), limit }
    }

    fn ids(p: &ListPart) -> Vec<&str> {
        p.streams.iter().map(|s| s.stream_id.as_str()).collect()
    }

    #[test]
    fn counting_leaves_out_soft_deleted_expired_and_other_buckets() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        create(&mut state, "b", "text/plain", 2);
        create_with(&mut state, "ttl", "text/plain", Lifetime::Ttl { secs: 1 }, 3);
        state.get_mut(&key("b")).unwrap().soft_deleted = true;
        let mut other = key("a");
        other.bucket = "elsewhere".into();
        let uid = state.next_uid();
        state.insert(other, Stream::new(uid, 1, "text/plain".into(), Lifetime::Forever, 0, 0));
        let now = state.get(&key("ttl")).unwrap().last_access_ms;
        assert_eq!(count_in_bucket(&state, "b", now), 2, "a and ttl");
        assert_eq!(count_in_bucket(&state, "b", now + 1_000), 1, "ttl expired");
        assert_eq!(count_in_bucket(&state, "elsewhere", now), 1);
    }

    #[test]
    fn a_page_is_sorted_by_id_after_the_cursor_within_the_prefix() {
        let mut state = State::default();
        for (i, name) in ["log-c", "log-a", "other", "log-b", "log-d"].iter().enumerate() {
            create(&mut state, name, "text/plain", i as u64 + 1);
        }
        let p = list_page(&state, "b", &list("log-", None, 2), 0, 10);
        assert_eq!(ids(&p), vec!["log-a", "log-b"]);
        assert_eq!((p.prefix_count, p.after_count), (4, 4));
        let next = list_page(&state, "b", &list("log-", Some("log-b"), 2), 0, 10);
        assert_eq!(ids(&next), vec!["log-c", "log-d"]);
        assert_eq!(next.after_count, 2, "no more after this page");
    }

    #[test]
    fn a_listing_shows_only_what_is_durable() {
        let mut state = State::default();
        create(&mut state, "old", "text/plain", 1);
        append(&mut state, "old", b"abc", None, 2);
        append(&mut state, "old", b"def", None, 4);
        create(&mut state, "new", "text/plain", 3);
        let p = list_page(&state, "b", &list("", None, 10), 0, 2);
        assert_eq!(ids(&p), vec!["old"], "the new stream's create is not durable yet");
        assert_eq!(p.streams[0].tail_offset.pos, 3, "the second append is not durable yet");
        let all = list_page(&state, "b", &list("", None, 10), 0, 4);
        assert_eq!(ids(&all), vec!["new", "old"]);
        assert_eq!(all.streams[1].tail_offset.pos, 6);
    }
}
