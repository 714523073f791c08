//! Tiered storage in a cell, the shard's side (`storage/tiered/cell.rs`):
//! the task by which the leader moves its group's oldest segments past the
//! hot budget to the object store, and the step of the reclaim pass by which
//! every replica finishes the moves it applied.

use super::tiering::{recovery_prefix, Retry};
use super::Shard;
use crate::limits::RECLAIM_INTERVAL_MS;
use crate::storage::io::SegmentStore;
use std::time::Duration;

impl<S: SegmentStore> Shard<S> {
    /// The tiering task in a cell. While this replica leads its group (its
    /// term's first entry applied), it first deletes the objects earlier
    /// leaders left behind (once a term), then moves the oldest sealed
    /// segment whenever the local segment files pass `budget`, one at a
    /// time (`Shard::due_in_cell`). Failed moves retry with a doubling
    /// backoff. A replica that does not lead looks again every
    /// `RECLAIM_INTERVAL_MS`.
    pub async fn run_tiering_in_cell(&self, budget: u64) {
        let Some(sleep) = self.sleep.borrow().clone() else { return };
        self.hot_budget.set(budget);
        let mut retry = Retry::default();
        let mut swept_in = 0;
        while !self.stopping.get() && !self.log.is_stopped() {
            let Some(term) = self.leads_in() else {
                sleep(Duration::from_millis(RECLAIM_INTERVAL_MS)).await;
                continue;
            };
            let result = if swept_in != term {
                self.log.sweep_older_terms(term).await.map(|n| {
                    if n > 0 {
                        tracing::info!(
                            "shard {}: deleted {n} objects earlier leaders left in the object store",
                            self.id
                        );
                    }
                    swept_in = term;
                })
            } else if let Some(no) = self.due_in_cell(budget) {
                let still_leads = || self.leads_in() == Some(term);
                self.log.tier_in_term(no, term, recovery_prefix, &still_leads).await.map(|_| ())
            } else {
                sleep(Duration::from_millis(RECLAIM_INTERVAL_MS)).await;
                continue;
            };
            if let Some(wait) = retry.after(self.id, result, || self.log.local_bytes().saturating_sub(budget)) {
                sleep(wait).await;
            }
        }
    }

    /// The term this replica leads its group in, once its term's first
    /// entry is applied (None while it does not).
    fn leads_in(&self) -> Option<u64> {
        let term = self.lead_term.borrow().as_ref().map_or(0, |t| t.get());
        (self.leads() && term > 0).then_some(term)
    }

    /// The segment due to move: the oldest held, past the budget and not
    /// the newest sealed (`Log::due_in_cell`), and also every entry in it
    /// and the first closed after it held by every voter and committed (no
    /// replica will need them sent as entries: the leader no longer holds
    /// them), and not named by a reclaim record, committed or on its way
    /// (it goes anyway).
    fn due_in_cell(&self, budget: u64) -> Option<u64> {
        let no = self.log.due_in_cell(budget)?;
        let first = self.log.local().first_close_after(no)?;
        let named = |through: Option<u64>| through.is_some_and(|t| t >= no);
        let reclaimed = named(self.reclaim_through.get()) || named(self.reclaim_pending.get());
        (first <= self.all_hold() && !reclaimed).then_some(no)
    }

    /// On every replica, in the reclaim pass: finishes the moves whose
    /// tier record it applied (skeleton written, file deleted).
    pub(super) async fn finish_moves(&self) {
        match self.log.finish_committed(recovery_prefix).await {
            Ok(0) => {}
            Ok(n) => {
                self.finish_failing.set(false);
                tracing::info!("shard {}: {n} segments moved to the object store through the log", self.id);
            }
            Err(e) => {
                if !self.finish_failing.replace(true) {
                    tracing::warn!("shard {}: finishing a move to the object store: {e} (retried each pass)", self.id);
                }
            }
        }
    }
}
