//! Tiered storage, the shard's side: the task that moves sealed segments
//! beyond the hot budget to the object store, what a segment's skeleton
//! keeps of each record, and reads that fetch cold blocks before answering.

use super::Shard;
use crate::limits::{TIER_MOVES_MAX, TIER_RETRY_MAX_MS, TIER_RETRY_MIN_MS, TIER_UPLOAD_BYTES_MAX};
use crate::metrics::{Family, Samples};
use crate::protocol::persist::{self, AppendRecord, StateRecord};
use crate::protocol::Error;
use crate::storage::error::ColdNeed;
use crate::storage::{self, io::SegmentStore, RecordHeader};
use std::time::Duration;

/// Most block fetches one read may need before it gives up (503): a read
/// returns at most `READ_CHUNK_BYTES_MAX`, a fork copies at most
/// `REQUEST_BODY_BYTES_MAX`, so this is never reached by a healthy store.
const COLD_FETCHES_PER_READ_MAX: usize = 64;

/// How many leading body bytes of a record recovery replays: all of it but
/// an append's data and a snapshot's blob (those stay in the object store).
pub fn recovery_prefix(h: &RecordHeader, body: &[u8]) -> usize {
    match h.kind {
        persist::KIND_APPEND => AppendRecord::decode_meta(body).map_or(body.len(), |(_, off)| off),
        persist::KIND_SNAPSHOT => StateRecord::decode_meta(body).map_or(body.len(), |(_, off)| off),
        _ => body.len(),
    }
}

/// Why a synchronous read of durable state stopped: it needs blocks of a
/// remote segment fetched first (run it again after), or it failed.
#[derive(Debug)]
pub(super) enum ReadStop {
    Cold(ColdNeed),
    Failed(Error),
}

impl From<Error> for ReadStop {
    fn from(e: Error) -> Self {
        ReadStop::Failed(e)
    }
}

/// A tiering task's retries: a doubling backoff while moves fail, and one
/// warning for each run of failures.
#[derive(Default)]
pub(super) struct Retry {
    failing: bool,
    backoff_ms: u64,
}

impl Retry {
    /// How long to wait after `result` (None: go on at once). `over` says
    /// how far the local segments are past the budget (for the warning).
    pub(super) fn after(
        &mut self,
        shard: usize,
        result: Result<(), storage::Error>,
        over: impl Fn() -> u64,
    ) -> Option<Duration> {
        match result {
            Ok(()) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!("shard {shard}: the object store answers again");
                }
                self.backoff_ms = TIER_RETRY_MIN_MS;
                None
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(
                        "shard {shard}: tiering: {e}; retrying with backoff (local segments {} bytes over --hot-bytes)",
                        over()
                    );
                }
                let wait = self.backoff_ms.max(TIER_RETRY_MIN_MS);
                self.backoff_ms = (wait * 2).min(TIER_RETRY_MAX_MS);
                Some(Duration::from_millis(wait))
            }
        }
    }
}

impl<S: SegmentStore> Shard<S> {
    /// The `ringstream_tier_*` samples of this shard.
    pub(super) fn tier_metrics(&self, out: &mut Samples, t: &storage::TierStats) {
        let id = self.id;
        let (segments, bytes) = self.log.remote_segments();
        out.sample(Family::TierLocalBytes, id, "", self.log.local_bytes());
        out.sample(Family::TierHotBudgetBytes, id, "", self.hot_budget.get());
        out.sample(Family::TierRemoteSegments, id, "", segments);
        out.sample(Family::TierRemoteBytes, id, "", bytes);
        out.sample(Family::TierUploads, id, "result=\"ok\"", t.uploads_ok);
        out.sample(Family::TierUploads, id, "result=\"error\"", t.uploads_failed);
        out.sample(Family::TierUploadedBytes, id, "", t.uploaded_bytes);
        out.sample(Family::TierColdReads, id, "result=\"cached\"", t.cold_cached);
        out.sample(Family::TierColdReads, id, "result=\"fetched\"", t.cold_fetched);
        out.sample(Family::TierColdReads, id, "result=\"unavailable\"", t.cold_unavailable);
        out.sample(Family::TierFetchedBytes, id, "", t.cold_fetched_bytes);
        out.sample(Family::TierRemoteDeleted, id, "", t.remote_deleted);
        let up = self.log.tiering().is_some_and(|t| t.client.is_up());
        out.sample(Family::TierStoreUp, id, "", u64::from(up));
    }

    /// Runs `read` (a synchronous read of durable state); when it stopped
    /// at blocks of a remote segment that are not cached, fetches them and
    /// runs it again. A store that does not answer makes it a 503 +
    /// Retry-After.
    pub(super) async fn with_cold<T>(&self, mut read: impl FnMut() -> Result<T, ReadStop>) -> Result<T, Error> {
        for _ in 0..COLD_FETCHES_PER_READ_MAX {
            match read() {
                Ok(v) => return Ok(v),
                Err(ReadStop::Failed(e)) => return Err(e),
                Err(ReadStop::Cold(need)) => self.log.fetch_cold(need).await.map_err(|e| self.storage_err(e))?,
            }
        }
        Err(Error::Unavailable(format!(
            "shard {}: a read needed more than {COLD_FETCHES_PER_READ_MAX} block fetches",
            self.id
        )))
    }

    /// A storage error met by a read: blocks to fetch, or a failure.
    pub(super) fn read_stop(&self, e: storage::Error) -> ReadStop {
        match e {
            storage::Error::Cold(need) => ReadStop::Cold(need),
            e => ReadStop::Failed(self.storage_err(e)),
        }
    }

    /// The tiering task: whenever this shard's local segment files exceed
    /// `budget` bytes, moves its oldest sealed segment to the object store.
    /// Failed moves retry with a doubling backoff (the local disk overshoots
    /// meanwhile, logged); orphaned objects are swept at boot and after a
    /// failed delete. Sleeps on "a segment was sealed" when nothing is due.
    pub async fn run_tiering(&self, budget: u64) {
        let Some(sleep) = self.sleep.borrow().clone() else { return };
        self.hot_budget.set(budget);
        let mut retry = Retry::default();
        let moves_max = (TIER_UPLOAD_BYTES_MAX / self.log.segment_bytes()).clamp(1, TIER_MOVES_MAX as u64) as usize;
        while !self.stopping.get() && !self.log.is_stopped() {
            let due = self.log.due_for_tiering(budget, moves_max);
            let result = match (self.log.sweep_due(), due.is_empty()) {
                (true, _) => self.log.sweep_remote().await.map(|n| {
                    if n > 0 {
                        tracing::info!("shard {}: deleted {n} orphaned objects from the object store", self.id);
                    }
                }),
                (false, false) => {
                    // Concurrent moves: each waits mostly on the store.
                    let moves = due.iter().map(|&no| self.log.tier_segment(no, recovery_prefix));
                    let results = futures_util::future::join_all(moves).await;
                    // Their metadata may now be all that pins them: let reclaim look.
                    self.reclaim_due.set(true);
                    results.into_iter().find(Result::is_err).unwrap_or(Ok(0)).map(|_| ())
                }
                (false, true) => {
                    self.log.segment_sealed().await;
                    continue;
                }
            };
            if let Some(wait) = retry.after(self.id, result, || self.log.local_bytes().saturating_sub(budget)) {
                sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_the_cap_and_start_over_after_a_success() {
        let mut retry = Retry::default();
        let failed = || Err(storage::Error::not_sealed("tier", 1));
        let mut waits = Vec::new();
        for _ in 0..10 {
            waits.push(retry.after(0, failed(), || 0).unwrap().as_millis() as u64);
        }
        assert_eq!(waits[..3], [TIER_RETRY_MIN_MS, 2 * TIER_RETRY_MIN_MS, 4 * TIER_RETRY_MIN_MS]);
        assert_eq!(*waits.last().unwrap(), TIER_RETRY_MAX_MS);
        assert_eq!(retry.after(0, Ok(()), || 0), None);
        assert_eq!(retry.after(0, failed(), || 0), Some(Duration::from_millis(TIER_RETRY_MIN_MS)));
    }
}
