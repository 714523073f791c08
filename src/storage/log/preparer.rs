//! The segment preparer: keeps the next pre-zeroed segment ready before
//! the active one fills.
//!
//! Segments are zero-filled so that the log's writes overwrite written
//! blocks (a write into a fallocated, unwritten extent also writes the
//! extent tree; on the VMs measured it halved the writes per second). But a
//! zero-fill is bulk writing that every cache flush of the log's `O_DSYNC`
//! writes must then also flush: 64 MiB written at once made the log's
//! writes take ~12 ms for as long as it lasted (docs/benchmarks-journal.md,
//! the sixth round). So a
//! segment made ahead of use is filled in step with the active one, a chunk
//! at a time, done by the time the active one is
//! [`ZERO_AHEAD_DONE_AT`] full; one the writer already needs is filled at
//! once.

use super::*;
use crate::limits::{ZERO_AHEAD_DONE_AT, ZERO_CHUNK_BYTES};
use crate::storage::io::ZeroPace;

/// The pace of a segment made ahead: each chunk waits for the active
/// segment to fill further.
struct AheadPace<'a, S: SegmentStore> {
    log: &'a LocalLog<S>,
    no: u64,
}

impl<S: SegmentStore> ZeroPace for AheadPace<'_, S> {
    async fn allow(&self, zeroed: u64) {
        while !self.log.may_zero(self.no, zeroed) {
            self.log.zero_pace.wait().await;
        }
    }
}

impl<S: SegmentStore> LocalLog<S> {
    /// Creates the active segment and, with `ahead`, the next one too, so
    /// rollover never waits for a file to be zero-filled.
    pub(super) async fn prepare_missing(&self, ahead: bool) -> Result<()> {
        loop {
            let want = {
                let st = self.st.borrow();
                if st.cutting_back {
                    // Which segments exist changes at its end; the cut-back
                    // rings the preparer then.
                    return Ok(());
                }
                let active = st.active;
                let has = |no: u64| {
                    st.prepared.contains_key(&no)
                        || matches!(st.segments.get(&no), Some(SegData::Mirror { file: Some(_), .. }))
                };
                // A segment rolled past before this task ran (appends filled
                // more than one segment meanwhile) has no file and is no longer
                // `active`: create it too, or the writer waits for it forever.
                let passed_over = st
                    .segments
                    .iter()
                    .find(|(_, s)| matches!(s, SegData::Mirror { file: None, .. }))
                    .map(|(&no, _)| no);
                let wanted = if ahead { 2 } else { 1 };
                passed_over.or_else(|| (active..active + wanted).find(|&no| !has(no)))
            };
            let Some(no) = want else { return Ok(()) };
            let pace = AheadPace { log: self, no };
            let file = self
                .store
                .create_paced(no, self.cfg.segment_bytes, &pace)
                .await
                .map_err(|source| Error::io("create", no, source))?;
            let mut st = self.st.borrow_mut();
            match st.segments.get_mut(&no) {
                Some(SegData::Mirror { file: slot @ None, .. }) => *slot = Some(Rc::new(file)),
                _ => {
                    st.prepared.insert(no, Rc::new(file));
                }
            }
            drop(st);
            self.segment_ready.notify();
        }
    }

    /// Whether segment `no`'s zero-fill may go on past `zeroed` bytes: at
    /// once when the writer needs it (it is the active one, or older) or
    /// the log stops; otherwise once the active segment holds its share.
    /// When not, sets the fill at which `append` rings `zero_pace`.
    fn may_zero(&self, no: u64, zeroed: u64) -> bool {
        let st = self.st.borrow();
        if self.stopped.get() || no <= st.active {
            return true;
        }
        let Some(SegData::Mirror { buf, .. }) = st.segments.get(&st.active) else {
            return true;
        };
        // The chunk that ends at `end` waits for the active segment to hold
        // the same share of its length, so the last one waits for
        // ZERO_AHEAD_DONE_AT.
        let (num, den) = ZERO_AHEAD_DONE_AT;
        let end = (zeroed + ZERO_CHUNK_BYTES).min(self.cfg.segment_bytes);
        let want = end * num / den;
        if buf.len() as u64 >= want {
            return true;
        }
        self.zero_gate.set(want);
        false
    }

    /// Background task: creates (zero-fills) segments ahead of use.
    pub async fn run_preparer(&self) {
        while !self.stopped.get() {
            if let Err(e) = self.prepare_missing(true).await {
                self.poison(e);
                return;
            }
            self.wake_preparer.wait().await;
        }
    }
}
