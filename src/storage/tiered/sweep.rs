//! Removing remote segments, and the sweep of objects no remote segment
//! names (left by an upload whose move did not finish, or a failed delete).

use super::files::TierFiles;
use super::state::Tier;
use super::Log;
use crate::storage::error::{Error, Result};
use crate::storage::io::SegmentStore;
use crate::tier::TierClient;

impl<S: SegmentStore> Log<S> {
    /// Whether an orphan sweep is due (at boot, and after a failed delete).
    pub fn sweep_due(&self) -> bool {
        self.tier.as_ref().is_some_and(|t| t.sweep_due.get())
    }

    /// Deletes every object of this shard that no remote segment names.
    /// Returns how many it deleted.
    pub async fn sweep_remote(&self) -> Result<usize> {
        self.tier("sweep the object store").sweep().await
    }
}

impl Tier {
    /// Deletes a remote segment: its skeleton (after which recovery no
    /// longer knows it), then, with `delete_object`, its object; an object
    /// left behind by a failed delete is an orphan for the next sweep.
    pub(super) async fn remove(&self, files: &dyn TierFiles, no: u64, delete_object: bool) -> Result<()> {
        let key = self.key(no);
        files.remove_skeleton(no).map_err(|source| Error::io("remove skeleton", no, source))?;
        self.remote.borrow_mut().remove(&no);
        self.cache.borrow_mut().forget(no);
        if !delete_object {
            return Ok(());
        }
        match self.link.client.delete(key).await {
            Ok(()) => self.stats.borrow_mut().remote_deleted += 1,
            Err(e) => {
                tracing::warn!("shard {}: deleting remote segment {no}: {e} (the next sweep retries)", self.link.shard);
                self.sweep_due.set(true);
            }
        }
        Ok(())
    }

    /// The single node's sweep: every object whose segment is neither
    /// being moved nor remote.
    async fn sweep(&self) -> Result<usize> {
        self.sweep_where(|no, _| !self.moving.borrow().contains(&no) && !self.is_remote(no)).await
    }

    /// Deletes every object of this shard whose key `orphan` picks (given
    /// the segment number and the term the key names, 0 for a single
    /// node's), counts them, and marks the sweep done. Returns how many.
    pub(super) async fn sweep_where(&self, orphan: impl Fn(u64, u64) -> bool) -> Result<usize> {
        let unavailable = |e: std::io::Error| Error::ObjectStore { op: "sweep", segment: 0, reason: e.to_string() };
        let client = &self.link.client;
        let keys = client.list(client.shard_prefix(self.link.shard)).await.map_err(unavailable)?;
        let mut deleted = 0;
        for (key, _) in keys {
            let Some((no, term)) = TierClient::segment_of(&key) else { continue };
            if orphan(no, term) {
                client.delete(key).await.map_err(unavailable)?;
                deleted += 1;
            }
        }
        self.stats.borrow_mut().remote_deleted += deleted as u64;
        self.sweep_due.set(false);
        Ok(deleted)
    }
}
