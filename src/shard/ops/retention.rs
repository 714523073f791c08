//! Explicit retention (`PUT .../retention/{offset}`): moves a stream's
//! retained start forward with a state record carrying the new trim point,
//! the same trim a snapshot makes, so that reads, recovery, a cell's
//! followers, quotas and the reclaim pass (local and remote segments) treat
//! both alike and the log format does not change.

use crate::protocol::persist::StateRecord;
use crate::protocol::rules;
use crate::protocol::{Error, Offset, Outcome, StreamKey};
use crate::shard::state::State;
use crate::shard::{Reply, Shard};
use crate::storage::io::SegmentStore;

impl<S: SegmentStore> Shard<S> {
    /// Moves the retained start of the stream at `key` to `offset` (see
    /// [`plan_retain`]); answers once the state record is durable. Asked
    /// at or below the current start, it writes nothing and names it.
    pub(in crate::shard) async fn retain(&self, key: StreamKey, offset: Offset) -> Reply {
        let now = (self.now_ms)();
        if let Some(s) = self.state.borrow_mut().get_mut(&key) {
            s.last_access_ms = now;
        }
        let durable = self.log.durable_lsn();
        let Some(mut rec) = plan_retain(&self.state.borrow(), &key, offset, durable)? else {
            return self.retained(&key, false);
        };
        let (_, lsn) = self.log_state(&key, &mut rec, None)?;
        self.apply_retention(&key, rec.trim);
        self.reclaim_due.set(true);
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        self.retained(&key, true)
    }

    /// The trim a retention record set, applied live: the data before it
    /// leaves the stream, and its bytes leave the bucket's quota.
    fn apply_retention(&self, key: &StreamKey, trim: u64) {
        let mut state = self.state.borrow_mut();
        let s = state.get_mut(key).expect("planned on it, no await since");
        let before = s.stored_bytes();
        s.trim_to(trim);
        if let Some(u) = &s.usage {
            u.release(0, before - s.stored_bytes());
        }
    }

    /// The answer: the stream as clients see it and its retained start.
    fn retained(&self, key: &StreamKey, moved: bool) -> Reply {
        let state = self.state.borrow();
        let s = state.get(key).ok_or(Error::NotFound)?;
        let info = s.info(&s.visible(self.log.durable_lsn()));
        Ok(Outcome::Retained { info, offset: Offset::new(0, s.trim), moved })
    }
}

/// Plans `PUT .../retention/{offset}` on the durable stream: the state
/// record that moves its trim point (None when it stays where it is). The
/// offset is checked by [`rules::retention_boundary`], given the start of
/// the durable append that holds it.
pub(in crate::shard) fn plan_retain(
    state: &State,
    key: &StreamKey,
    offset: Offset,
    durable_lsn: u64,
) -> Result<Option<StateRecord>, Error> {
    let s = state.get(key).ok_or(Error::NotFound)?;
    let v = s.visible(durable_lsn);
    let chunks = &s.chunks[..v.chunks];
    let holding = chunks.partition_point(|c| c.start + u64::from(c.len) <= offset.pos);
    let append_start = chunks.get(holding).map_or(offset.pos, |c| c.start.min(offset.pos));
    let target = rules::RetentionTarget {
        tail: v.tail,
        trim: s.trim,
        snapshot: s.snapshots.keys().next_back().copied(),
        append_start,
    };
    let boundary = rules::retention_boundary(offset, &target)?;
    if boundary == s.trim {
        return Ok(None);
    }
    let mut rec = s.state_record(key);
    rec.trim = boundary;
    Ok(Some(rec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ops::testkit::{append, create, key, publish};
    use crate::shard::records;

    /// Applies a planned retention to `state` as the live operation does.
    fn apply(state: &mut State, key: &StreamKey, rec: &StateRecord, lsn: u64) {
        records::apply_state(state, key, lsn, lsn);
        state.get_mut(key).expect("planned on it").trim_to(rec.trim);
    }

    /// "abc" (0..3), "defg" (3..7), "hi" (7..9), durable at lsn 4.
    fn stream() -> State {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abc", None, 2);
        append(&mut state, "a", b"defg", None, 3);
        append(&mut state, "a", b"hi", None, 4);
        state
    }

    fn retain(state: &mut State, pos: u64, lsn: u64) -> Result<u64, Error> {
        if let Some(rec) = plan_retain(state, &key("a"), Offset::new(0, pos), lsn)? {
            apply(state, &key("a"), &rec, lsn + 1);
        }
        Ok(state.get(&key("a")).unwrap().trim)
    }

    #[test]
    fn retention_trims_at_the_start_of_the_append_holding_the_offset() {
        let mut state = stream();
        assert_eq!(retain(&mut state, 5, 4), Ok(3), "inside \"defg\": its start");
        let s = state.get(&key("a")).unwrap();
        assert_eq!(s.chunks.len(), 2, "\"abc\" left the stream");
        assert_eq!(s.stored_bytes(), 6);
        assert_eq!(retain(&mut state, 1, 5), Ok(3), "never backwards");
        assert_eq!(retain(&mut state, 9, 5), Ok(9), "up to the tail");
        assert!(state.get(&key("a")).unwrap().chunks.is_empty());
    }

    #[test]
    fn nothing_is_written_when_the_start_stays() {
        let state = stream();
        assert!(matches!(plan_retain(&state, &key("a"), Offset::new(0, 0), 4), Ok(None)));
        assert!(matches!(plan_retain(&state, &key("a"), Offset::new(0, 2), 4), Ok(None)), "inside the first append");
        assert!(matches!(plan_retain(&state, &key("zz"), Offset::new(0, 0), 4), Err(Error::NotFound)));
    }

    #[test]
    fn past_the_durable_tail_or_the_current_snapshot_conflicts() {
        let mut state = stream();
        let past = plan_retain(&state, &key("a"), Offset::new(0, 9), 3).unwrap_err();
        assert!(matches!(past, Error::Conflict(_)), "\"hi\" is not durable at lsn 3: {past:?}");
        publish(&mut state, "a", 3, 2, 5);
        assert_eq!(retain(&mut state, 3, 5), Ok(3), "at the snapshot");
        let r = plan_retain(&state, &key("a"), Offset::new(0, 7), 5).unwrap_err();
        assert!(matches!(r, Error::Conflict(m) if m.contains("snapshot")));
    }

    #[test]
    fn the_record_keeps_everything_but_the_trim() {
        let state = stream();
        let rec = plan_retain(&state, &key("a"), Offset::new(0, 7), 4).unwrap().unwrap();
        assert_eq!((rec.trim, rec.tail), (7, 9));
        assert!(rec.snapshots.is_empty());
    }
}
