//! Moving sealed segments to the object store: which are due, and the four
//! steps of one move (see the module docs).

use super::skeleton::{tier_body, Moved, Skeleton};
use super::state::{KeepFn, RemoteSeg, Tier};
use super::Log;
use crate::storage::error::{Error, Result};
use crate::storage::io::SegmentStore;
use crate::storage::log::LocalLog;
use crate::storage::record::{self, RecordHeader};

impl<S: SegmentStore> Log<S> {
    /// Bytes this log keeps on the local disk: every segment file (the
    /// active one and those prepared ahead at full size) and the skeletons.
    pub fn local_bytes(&self) -> u64 {
        let skeletons = self.tier.as_ref().map_or(0, |t| t.remote.borrow().values().map(|r| r.skel_len).sum());
        self.local.file_bytes() + skeletons
    }

    /// The oldest sealed segments on the local disk that are not being
    /// moved, as many as it takes to bring the local bytes within `budget`
    /// (at most `max`), oldest first.
    pub fn due_for_tiering(&self, budget: u64, max: usize) -> Vec<u64> {
        let mut over = self.local_bytes().saturating_sub(budget);
        let mut due = Vec::new();
        for (no, len) in self.local.sealed_files() {
            if over == 0 || due.len() == max {
                break;
            }
            if !self.is_moving(no) {
                due.push(no);
            }
            over = over.saturating_sub(len);
        }
        due
    }

    /// Whether segment `no` is being moved to the object store now (the
    /// reclaim pass leaves it alone until the move ends).
    pub fn is_moving(&self, no: u64) -> bool {
        self.tier.as_ref().is_some_and(|t| t.moving.borrow().contains(&no))
    }

    /// Moves sealed segment `no` to the object store (the four steps of the
    /// module docs). `keep` says how many leading body bytes of each record
    /// its skeleton keeps. Returns the bytes uploaded. On an error nothing
    /// changed that recovery would not undo; the caller retries later.
    pub async fn tier_segment(&self, no: u64, keep: KeepFn) -> Result<u64> {
        let t = self.tier("tier a segment");
        let Some((_, size)) = self.local.sealed_files().into_iter().find(|s| s.0 == no) else {
            return Err(Error::not_sealed("tier", no));
        };
        if !t.moving.borrow_mut().insert(no) {
            return Err(Error::not_sealed("tier (already moving)", no));
        }
        let r = t.move_to_store(&self.local, no, size, keep).await;
        t.moving.borrow_mut().remove(&no);
        t.count_move(&r);
        r
    }
}

impl Tier {
    async fn move_to_store<S: SegmentStore>(
        &self,
        local: &LocalLog<S>,
        no: u64,
        size: u64,
        keep: KeepFn,
    ) -> Result<u64> {
        let io = |op| move |source| Error::io(op, no, source);
        let files = local.store().tier_files().ok_or_else(|| {
            Error::io("tier", no, std::io::Error::other(format!("{} cannot keep skeletons", local.store().describe())))
        })?;
        let source = files.upload_source(no).map_err(io("read for upload"))?;
        // The skeleton is built from the bytes uploaded, on the tier thread.
        let derive = Box::new(move |seg: &[u8]| Skeleton::build(no, seg, keep).map_err(|e| e.to_string()));
        let put = self.link.client.put_verified(self.key(no), source, derive).await;
        let (len, skeleton) =
            put.map_err(|e| Error::ObjectStore { op: "upload", segment: no, reason: e.to_string() })?;
        if len != size {
            let reason = format!("uploaded {len} bytes of a {size}-byte segment");
            return Err(Error::ObjectStore { op: "upload", segment: no, reason });
        }
        files.write_skeleton(no, &skeleton).map_err(io("write skeleton"))?;
        let h = RecordHeader { kind: record::KIND_TIER, stream_id: 0, incarnation: 0, stream_offset: no, body_len: 0 };
        let (_, lsn) = local.append(h, &tier_body(Moved { no, len, term: 0 }))?;
        local.durable(lsn).await?;
        let remote = RemoteSeg { len, term: 0, skel_len: skeleton.len() as u64, skeleton: None };
        self.remote.borrow_mut().insert(no, remote);
        local.remove_segment(no).await?;
        Ok(len)
    }
}
