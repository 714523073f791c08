//! How the owner of a subscription hears of data: a shard that acknowledged
//! an append (or a create with data) asks its registry which subscriptions
//! select the stream and tells each owner the new tail, waiting for the
//! owner to have noted it (in memory: a claim made after the append's
//! answer sees it). At boot every shard tells the owners the tails of its
//! streams again, which brings back whatever was noted and not yet in a
//! subscription's record when the process stopped; in a cell, so does a
//! replica that begins to lead (its follower noted nothing).

use super::SubId;
use crate::protocol::{Offset, StreamKey};
use crate::shard::message::Control;
use crate::shard::router::shard_for;
use crate::shard::Shard;
use crate::storage::io::SegmentStore;

impl<S: SegmentStore> Shard<S> {
    /// The stream at `key` (of creation `creation`) has data up to `tail`:
    /// tells the owners of the subscriptions that select it. Nothing to do
    /// (one check) without any.
    pub(in crate::shard) async fn notify_subs(&self, key: &StreamKey, tail: Offset, creation: &str) {
        if self.registry.borrow().is_empty() {
            return;
        }
        let hits = self.registry.borrow().matching(key);
        for (id, path) in hits {
            let target = shard_for(&id.0.owner_key(&id.1), self.shards);
            // An owner that is gone (shutting down) hears of it at the next boot.
            let creation = creation.to_string();
            let _ = self.ask(target, |done| Control::SubTail { id, path, tail, creation, done }).await;
        }
    }

    /// On the owner: the stream at `path` has data up to `tail`.
    pub(in crate::shard) fn sub_tail(&self, id: &SubId, path: &str, tail: Offset, creation: &str) {
        let mut st = self.state.borrow_mut();
        let Some(e) = st.subs.get_mut(id) else { return };
        if e.sub.note_tail(path, tail, creation) {
            self.subs_due.notify();
        }
    }

    /// In a cell, this replica begins to lead: what an earlier lead was
    /// delivering is not known here (each wake begun again, under a new
    /// generation: at least once), and the tails its followers' appends
    /// reached are told to the subscriptions before work is handed out.
    pub(in crate::shard) fn subs_lead_begins(&self) {
        self.deliveries.borrow_mut().clear();
        self.subs_resync.set(true);
        self.subs_due.notify();
    }

    /// Boot, once every registry is whole: the tails of this shard's
    /// streams to the subscriptions that select them.
    pub async fn resync_subs(&self) {
        if self.registry.borrow().is_empty() {
            return;
        }
        let durable = self.log.durable_lsn();
        let tails: Vec<(StreamKey, Offset, String)> = {
            let st = self.state.borrow();
            st.iter()
                .filter(|(_, s)| !s.soft_deleted)
                .map(|(k, s)| (k.clone(), s.info(&s.visible(durable)).next_offset, s.incarnation().token()))
                .filter(|(_, t, _)| *t > Offset::ZERO)
                .collect()
        };
        for (key, tail, creation) in tails {
            self.notify_subs(&key, tail, &creation).await;
        }
    }
}
