//! Snapshots (publish, read, delete) and bootstrap (the snapshot plus every
//! later message), and the state records that carry a stream's whole state.

use crate::limits::READ_CHUNK_BYTES_MAX;
use crate::protocol::headers::stream_content_type;
use crate::protocol::persist::{self, SnapshotMeta, StateRecord};
use crate::protocol::rules;
use crate::protocol::{json, Bootstrap, Error, Offset, Outcome, SnapshotReq, StreamKey};
use crate::quota::BucketUsage;
use crate::shard::records;
use crate::shard::state::State;
use crate::shard::stream::Snap;
use crate::shard::tiering::ReadStop;
use crate::shard::{Reply, Shard};
use crate::storage::{self, io::SegmentStore, RecordLoc};
use std::sync::Arc;

impl<S: SegmentStore> Shard<S> {
    /// Logs the stream's state (a snapshot record when `blob` is given) and
    /// notes where it lives. Returns the record's location and lsn. The
    /// record lists the stream's producers as pruned now (see
    /// [`Shard::prune_producers`]): never more than the bound.
    pub(in crate::shard) fn log_state(
        &self,
        key: &StreamKey,
        rec: &mut StateRecord,
        blob: Option<&[u8]>,
    ) -> Result<(RecordLoc, u64), Error> {
        let (uid, incarnation) = self.prune_producers(key, rec)?;
        let mut body = rec.encode();
        let kind = match blob {
            Some(b) => {
                body.extend_from_slice(b);
                persist::KIND_SNAPSHOT
            }
            None => persist::KIND_STATE,
        };
        let h = records::stream_header(kind, uid, incarnation, rec.tail);
        let (loc, lsn) = self.log.append(h, &body).map_err(|e| self.storage_err(e))?;
        records::apply_state(&mut self.state.borrow_mut(), key, loc.segment, lsn);
        Ok((loc, lsn))
    }

    /// Before a state record of the stream at `key` is written: its idle
    /// producers are forgotten and its table held to the bound, in memory
    /// and in `rec` alike, so that a record never outgrows what the
    /// configuration was checked to fit in one segment, and every node that
    /// applies it holds the same table. Returns the stream's uid and
    /// incarnation.
    fn prune_producers(&self, key: &StreamKey, rec: &mut StateRecord) -> Result<(u64, u32), Error> {
        let mut state = self.state.borrow_mut();
        let s = state.get_mut(key).ok_or(Error::NotFound)?;
        s.producers.prune(&self.producer_policy.get(), (self.now_ms)());
        rec.producers = s.producers.records();
        Ok((s.uid, s.incarnation))
    }

    /// `PUT .../snapshot/{offset}`: publishes a snapshot and trims the data
    /// before its offset, in one record.
    pub(in crate::shard) async fn snapshot_publish(&self, key: StreamKey, req: SnapshotReq) -> Reply {
        let now = (self.now_ms)();
        let content_type = stream_content_type(req.content_type.as_deref());
        if let Some(s) = self.state.borrow_mut().get_mut(&key) {
            s.last_access_ms = now;
        }
        let Publish { mut rec, before, after, usage } =
            plan_publish(&self.state.borrow(), &key, &req, &content_type, now, self.log.durable_lsn())?;
        let held = match after.checked_sub(before) {
            Some(grows) => self.reserve(&key.bucket, usage.as_ref(), 0, grows)?,
            None => None,
        };
        let (loc, lsn) = self.log_state(&key, &mut rec, Some(&req.body))?;
        if let Some(h) = held {
            h.keep();
        }
        if let (Some(u), Some(frees)) = (&usage, before.checked_sub(after)) {
            u.release(0, frees);
        }
        let info = {
            let mut state = self.state.borrow_mut();
            let s = state.get_mut(&key).expect("checked above, no await since");
            records::apply_snapshot(s, &rec, loc, req.body.len());
            debug_assert_eq!(s.stored_bytes(), after, "the quota counted what the stream now holds");
            s.info(&s.visible(self.log.durable_lsn()))
        };
        self.reclaim_due.set(true);
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        Ok(Outcome::SnapshotPublished { info, offset: req.offset })
    }

    /// A published snapshot's blob, from its record.
    pub(in crate::shard) fn read_blob(&self, snap: &Snap) -> Result<Vec<u8>, ReadStop> {
        let mut blob = Vec::with_capacity(snap.len as usize);
        let from = snap.data_off as usize;
        self.log.read_body(snap.loc, from..from + snap.len as usize, &mut blob).map_err(|e| self.read_stop(e))?;
        Ok(blob)
    }

    pub(in crate::shard) fn snapshot_read(&self, key: &StreamKey, offset: Offset) -> Result<Outcome, ReadStop> {
        let mut state = self.state.borrow_mut();
        let s = state.get_mut(key).ok_or(Error::NotFound)?;
        s.last_access_ms = (self.now_ms)();
        let snap = s.snapshots.get(&offset.pos).ok_or(Error::NotFound)?;
        let body = self.read_blob(snap)?;
        let info = s.info(&s.visible(self.log.durable_lsn()));
        Ok(Outcome::Snapshot {
            info,
            offset: Offset::new(0, offset.pos),
            content_type: snap.content_type.clone(),
            body,
        })
    }

    /// `DELETE .../snapshot/{offset}`: forgets an older snapshot (never the
    /// current one, which stands for the trimmed data).
    pub(in crate::shard) async fn snapshot_delete(&self, key: StreamKey, offset: Offset) -> Reply {
        let mut rec = plan_snapshot_delete(&self.state.borrow(), &key, offset)?;
        let incarnation = self.state.borrow().incarnation(&key).ok_or(Error::NotFound)?;
        let (_, lsn) = self.log_state(&key, &mut rec, None)?;
        if let Some(s) = self.state.borrow_mut().get_mut(&key) {
            if let (Some(snap), Some(u)) = (s.snapshots.remove(&offset.pos), &s.usage) {
                u.release(0, u64::from(snap.len));
            }
        }
        self.reclaim_due.set(true);
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        Ok(Outcome::Deleted { incarnation })
    }

    /// `GET .../bootstrap`: the current snapshot, then each message after it,
    /// up to about one read's worth (the client continues from the offset).
    pub(in crate::shard) fn bootstrap(&self, key: &StreamKey) -> Result<Outcome, ReadStop> {
        let mut state = self.state.borrow_mut();
        let s = state.get_mut(key).ok_or(Error::NotFound)?;
        s.last_access_ms = (self.now_ms)();
        let v = s.visible(self.log.durable_lsn());
        let info = s.info(&v);
        let snapshot = match s.snapshots.last_key_value() {
            Some((&offset, snap)) => Some((Offset::new(0, offset), snap.content_type.clone(), self.read_blob(snap)?)),
            None => None,
        };
        let start = s.trim;
        let chunks = &s.chunks[..v.chunks];
        let first = chunks.partition_point(|c| c.start + c.len as u64 <= start);
        let (mut messages, mut bytes, mut pos) = (Vec::new(), 0usize, start);
        for c in &chunks[first..] {
            if bytes > 0 && bytes + c.len as usize > READ_CHUNK_BYTES_MAX {
                break;
            }
            let mut data = Vec::with_capacity(c.len as usize);
            let off = c.data_off as usize;
            match self.log.read_body(c.loc, off..off + c.len as usize, &mut data) {
                // As in `read`: cold blocks after some messages end this answer.
                Err(storage::Error::Cold(_)) if !messages.is_empty() => break,
                r => r.map_err(|e| self.read_stop(e))?,
            }
            if s.json {
                messages.extend(json::split_messages(&data).map(<[u8]>::to_vec));
            } else {
                messages.push(data);
            }
            bytes += c.len as usize;
            pos = c.start + c.len as u64;
        }
        let up_to_date = pos == v.tail;
        Ok(Outcome::Bootstrap(Bootstrap {
            message_type: if s.json { "application/json".into() } else { s.content_type.clone() },
            info,
            snapshot,
            messages,
            next_offset: Offset::new(0, pos),
            up_to_date,
            closed_at_end: up_to_date && v.closed,
        }))
    }
}

/// What publishing a snapshot writes (a snapshot record carrying this
/// state) and what the stream holds against its quota before and after.
#[derive(Debug)]
pub(in crate::shard) struct Publish {
    pub(in crate::shard) rec: StateRecord,
    pub(in crate::shard) before: u64,
    pub(in crate::shard) after: u64,
    pub(in crate::shard) usage: Option<Arc<BucketUsage>>,
}

/// Plans `PUT .../snapshot/{offset}`: the offset must be a boundary of the
/// durable stream, not past its tail and not older than the newest
/// snapshot; the record trims the data before it and keeps at most
/// `SNAPSHOTS_PER_STREAM_MAX` snapshots, the new one last.
pub(in crate::shard) fn plan_publish(
    state: &State,
    key: &StreamKey,
    req: &SnapshotReq,
    content_type: &str,
    now: i64,
    durable_lsn: u64,
) -> Result<Publish, Error> {
    let s = state.get(key).ok_or(Error::NotFound)?;
    let offset = req.offset.pos;
    let v = s.visible(durable_lsn);
    let target = rules::SnapshotTarget {
        tail: v.tail,
        trim: s.trim,
        newest: s.snapshots.last_key_value().map(|(&o, _)| o),
        at_boundary: offset == v.tail
            || offset == s.trim
            || s.chunks.binary_search_by_key(&offset, |c| c.start).is_ok(),
    };
    rules::check_snapshot_offset(req.offset, &target)?;
    let mut rec = s.state_record(key);
    rec.trim = offset;
    rec.snapshots.retain(|m| m.offset != offset);
    rec.snapshots.push(SnapshotMeta { offset, content_type: content_type.to_string(), published_at_ms: now });
    let excess = rec.snapshots.len().saturating_sub(crate::limits::SNAPSHOTS_PER_STREAM_MAX);
    rec.snapshots.drain(..excess);
    let after = s.stored_bytes_after_snapshot(&rec.snapshots, offset, req.body.len());
    Ok(Publish { rec, before: s.stored_bytes(), after, usage: s.usage.clone() })
}

/// Plans `DELETE .../snapshot/{offset}`: the state record without that
/// snapshot. The current one stands for the trimmed data and stays.
pub(in crate::shard) fn plan_snapshot_delete(
    state: &State,
    key: &StreamKey,
    offset: Offset,
) -> Result<StateRecord, Error> {
    let s = state.get(key).ok_or(Error::NotFound)?;
    if !s.snapshots.contains_key(&offset.pos) {
        return Err(Error::NotFound);
    }
    if s.snapshots.last_key_value().is_some_and(|(&o, _)| o == offset.pos) {
        return Err(Error::Conflict("this is the current snapshot; publish a newer one first".into()));
    }
    let mut rec = s.state_record(key);
    rec.snapshots.retain(|m| m.offset != offset.pos);
    Ok(rec)
}

/// `GET .../snapshot`: where the current snapshot is.
pub(in crate::shard) fn latest(state: &State, key: &StreamKey) -> Reply {
    let s = state.get(key).ok_or(Error::NotFound)?;
    let &offset = s.snapshots.keys().next_back().ok_or(Error::NotFound)?;
    Ok(Outcome::SnapshotAt { incarnation: s.incarnation(), offset: Offset::new(0, offset) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ops::testkit::{append, create, key, publish};

    fn at(pos: u64, blob: &[u8]) -> SnapshotReq {
        SnapshotReq { offset: Offset::new(0, pos), content_type: None, body: blob.to_vec() }
    }

    /// A stream holding "abc" (0..3) and "defg" (3..7), durable at lsn 3.
    fn stream() -> State {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abc", None, 2);
        append(&mut state, "a", b"defg", None, 3);
        state
    }

    #[test]
    fn a_snapshot_goes_at_a_message_boundary_of_the_durable_stream() {
        let state = stream();
        for ok in [0, 3, 7] {
            assert!(plan_publish(&state, &key("a"), &at(ok, b"s"), "text/plain", 5, 3).is_ok(), "{ok}");
        }
        let inside = plan_publish(&state, &key("a"), &at(4, b"s"), "text/plain", 5, 3).unwrap_err();
        assert!(matches!(inside, Error::BadRequest(_)), "{inside:?}");
        // The second append is not durable at lsn 2: 7 is past the tail clients saw.
        let past = plan_publish(&state, &key("a"), &at(7, b"s"), "text/plain", 5, 2).unwrap_err();
        assert!(matches!(past, Error::Conflict(_)), "{past:?}");
    }

    #[test]
    fn publishing_trims_and_counts_what_the_stream_will_hold() {
        let state = stream();
        let p = plan_publish(&state, &key("a"), &at(3, b"snap!"), "application/x", 5, 3).unwrap();
        assert_eq!(p.rec.trim, 3);
        assert_eq!(p.rec.snapshots.len(), 1);
        assert_eq!(p.rec.snapshots[0].content_type, "application/x");
        assert_eq!(p.before, 7, "seven bytes of data");
        assert_eq!(p.after, 4 + 5, "the data after the trim point and the blob");
    }

    #[test]
    fn an_older_snapshot_than_the_newest_conflicts_and_the_trimmed_part_is_gone() {
        let mut state = stream();
        publish(&mut state, "a", 3, 2, 4);
        assert_eq!(state.get(&key("a")).unwrap().trim, 3);
        assert_eq!(state.get(&key("a")).unwrap().chunks.len(), 1, "the first chunk was trimmed");
        let older = plan_publish(&state, &key("a"), &at(0, b"s"), "text/plain", 5, 4).unwrap_err();
        assert!(matches!(older, Error::Conflict(_)), "{older:?}");
        assert!(matches!(latest(&state, &key("a")), Ok(Outcome::SnapshotAt { offset, .. }) if offset.pos == 3));
    }

    #[test]
    fn at_most_the_limit_of_snapshots_is_kept_the_oldest_going_first() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        let max = crate::limits::SNAPSHOTS_PER_STREAM_MAX as u64;
        for i in 0..=max {
            append(&mut state, "a", b"x", None, 2 + 2 * i);
            publish(&mut state, "a", i + 1, 1, 3 + 2 * i);
        }
        let s = state.get(&key("a")).unwrap();
        assert_eq!(s.snapshots.len() as u64, max);
        assert_eq!(s.snapshots.keys().next(), Some(&2), "the first snapshot (at 1) was dropped");
        assert_eq!(s.stored_bytes(), max, "one blob byte each, no data left after the last trim");
    }

    #[test]
    fn only_an_older_snapshot_may_be_deleted() {
        let mut state = stream();
        assert!(matches!(plan_snapshot_delete(&state, &key("a"), Offset::new(0, 3)), Err(Error::NotFound)));
        publish(&mut state, "a", 3, 2, 4);
        publish(&mut state, "a", 7, 2, 5);
        let current = plan_snapshot_delete(&state, &key("a"), Offset::new(0, 7)).unwrap_err();
        assert!(matches!(current, Error::Conflict(_)), "{current:?}");
        let rec = plan_snapshot_delete(&state, &key("a"), Offset::new(0, 3)).unwrap();
        assert_eq!(rec.snapshots.iter().map(|m| m.offset).collect::<Vec<_>>(), vec![7]);
        assert_eq!(rec.trim, 7, "the state record keeps the trim point");
    }

    #[test]
    fn a_stream_without_snapshots_has_no_latest() {
        let state = stream();
        assert!(matches!(latest(&state, &key("a")), Err(Error::NotFound)));
        assert!(matches!(latest(&state, &key("zz")), Err(Error::NotFound)));
    }
}
