//! Answering other shards: bucket replication and counts, listing parts,
//! fork snapshots and reference counts, subscriptions' registries and tails. Each answer goes back on the
//! channel inside the request (a dropped channel means the asker gave up).

use super::message::Control;
use super::ops;
use super::Shard;
use crate::storage::io::SegmentStore;

impl<S: SegmentStore> Shard<S> {
    /// Runs one control request from another shard (or from this one).
    pub async fn control(&self, c: Control) {
        match c {
            Control::ReplicateBucket { bucket, present, done } => {
                let known = &mut self.state.borrow_mut().buckets_known;
                if present {
                    known.insert(bucket);
                } else {
                    known.remove(&bucket);
                }
                let _ = done.send(());
            }
            Control::CountBucket { bucket, count } => {
                let _ = count.send(ops::count_in_bucket(&self.state.borrow(), &bucket, (self.now_ms)()));
            }
            Control::ListPart { bucket, list, part } => {
                let _ = part.send(self.list_part(&bucket, &list).await);
            }
            Control::ForkSnapshot { source, offset, sub_offset, content_type, data } => {
                let _ = data.send(self.fork_snapshot(source, offset, sub_offset, content_type).await);
            }
            Control::ForkRef { source, source_uid, add, done } => {
                self.fork_ref(&source, source_uid, add).await;
                let _ = done.send(());
            }
            Control::SubRegistry { id, matcher, done } => {
                self.registry.borrow_mut().set(id, matcher);
                let _ = done.send(());
            }
            Control::Retell { step, done } => {
                let _ = done.send(self.retell(step).await);
            }
            Control::SubTail { id, path, tail, creation, done } => {
                self.sub_tail(&id, &path, tail, &creation);
                let _ = done.send(());
            }
        }
    }
}
