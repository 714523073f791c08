//! What a shard forgets and tells the other shards again when its node
//! comes to lead every group of a cell of more than one shard a node
//! (`cell::unity`): as a follower it applied its group's committed records
//! without telling the other shards what a single node's shards tell each
//! other as they go (a bucket created, a fork of a stream of theirs, a
//! subscription, the streams counted against a quota), so the node's
//! shards start again from what each holds. Until every shard has been
//! through every step, requests that cross groups wait (503).

use super::message::{Control, RetellStep};
use super::Shard;
use crate::protocol::Error;
use crate::storage::io::SegmentStore;

impl<S: SegmentStore> Shard<S> {
    /// One step of the retelling, on this shard.
    pub(in crate::shard) async fn retell(&self, step: RetellStep) -> Result<(), Error> {
        match step {
            RetellStep::Forget => {
                self.forget_others();
                Ok(())
            }
            RetellStep::Tell => self.tell_others().await,
            RetellStep::Tails => {
                self.resync_subs().await;
                Ok(())
            }
        }
    }

    /// Drops what other shards told this one, and this shard's counts in
    /// the quota counters (every shard zeroes them before any counts again).
    fn forget_others(&self) {
        let mut st = self.state.borrow_mut();
        let owned = st.buckets_owned.clone();
        st.buckets_known.retain(|b| owned.contains(b));
        for (_, s) in st.iter_mut() {
            s.fork_refs = 0;
            s.usage = None;
        }
        drop(st);
        *self.registry.borrow_mut() = Default::default();
        for u in self.counted.borrow().values() {
            u.reset(0, 0);
        }
    }

    /// What boot tells the other shards (its buckets, its subscriptions'
    /// matchers, a reference to each of its forks' sources), and its
    /// streams counted into the quota counters.
    pub async fn tell_others(&self) -> Result<(), Error> {
        for bucket in self.owned_buckets() {
            self.broadcast(|done| Control::ReplicateBucket { bucket: bucket.clone(), present: true, done }).await?;
        }
        self.publish_owned_subs().await?;
        for (source, source_uid) in self.fork_sources() {
            self.ask_owner(|done| Control::ForkRef { source, source_uid, add: true, done }).await?;
        }
        self.count_usage_share();
        Ok(())
    }
}
