//! The segment preparer: keeps the next pre-zeroed segment ready before
//! the active one fills.

use super::*;

impl<S: SegmentStore> Log<S> {
    /// Creates the active segment and, with `ahead`, the next one too, so
    /// rollover never waits for a file to be zero-filled.
    pub(super) async fn prepare_missing(&self, ahead: bool) -> Result<()> {
        loop {
            let want = {
                let st = self.st.borrow();
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
            let file = self
                .store
                .create(no, self.cfg.segment_bytes)
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
