//! Snapshots (publish, read, delete) and bootstrap (the snapshot plus every
//! later message), and the state records that carry a stream's whole state.

use crate::limits::READ_CHUNK_BYTES_MAX;
use crate::protocol::headers::stream_content_type;
use crate::protocol::persist::{self, SnapshotMeta, StateRecord};
use crate::protocol::rules;
use crate::protocol::{json, Bootstrap, Error, Offset, Outcome, SnapshotReq, StreamKey};
use crate::shard::records;
use crate::shard::stream::Snap;
use crate::shard::{Reply, Shard};
use crate::storage::{self, io::SegmentStore, RecordLoc};

impl<S: SegmentStore> Shard<S> {
    /// Logs the stream's state (a snapshot record when `blob` is given) and
    /// notes where it lives. Returns the record's location and lsn.
    pub(in crate::shard) fn log_state(
        &self,
        key: &StreamKey,
        rec: &StateRecord,
        blob: Option<&[u8]>,
    ) -> Result<(RecordLoc, u64), Error> {
        let (uid, incarnation) = {
            let state = self.state.borrow();
            let s = state.get(key).ok_or(Error::NotFound)?;
            (s.uid, s.incarnation)
        };
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

    /// `PUT .../snapshot/{offset}`: publishes a snapshot and trims the data
    /// before its offset, in one record.
    pub(in crate::shard) async fn snapshot_publish(&self, key: StreamKey, req: SnapshotReq) -> Reply {
        let now = (self.now_ms)();
        let offset = req.offset.pos;
        let content_type = stream_content_type(req.content_type.as_deref());
        let (rec, before, after, usage) = {
            let mut state = self.state.borrow_mut();
            let s = state.get_mut(&key).ok_or(Error::NotFound)?;
            s.last_access_ms = now;
            let v = s.visible(self.log.durable_lsn());
            let target = rules::SnapshotTarget {
                tail: v.tail,
                trim: s.trim,
                newest: s.snapshots.last_key_value().map(|(&o, _)| o),
                at_boundary: offset == v.tail
                    || offset == s.trim
                    || s.chunks.binary_search_by_key(&offset, |c| c.start).is_ok(),
            };
            rules::check_snapshot_offset(req.offset, &target)?;
            let mut rec = s.state_record(&key);
            rec.trim = offset;
            rec.snapshots.retain(|m| m.offset != offset);
            rec.snapshots.push(SnapshotMeta { offset, content_type: content_type.clone(), published_at_ms: now });
            let excess = rec.snapshots.len().saturating_sub(crate::limits::SNAPSHOTS_PER_STREAM_MAX);
            rec.snapshots.drain(..excess);
            let after = s.stored_bytes_after_snapshot(&rec.snapshots, offset, req.body.len());
            (rec, s.stored_bytes(), after, s.usage.clone())
        };
        let held = match after.checked_sub(before) {
            Some(grows) => self.reserve(&key.bucket, usage.as_ref(), 0, grows)?,
            None => None,
        };
        let (loc, lsn) = self.log_state(&key, &rec, Some(&req.body))?;
        if let Some(h) = held {
            h.keep();
        }
        if let (Some(u), Some(frees)) = (&usage, before.checked_sub(after)) {
            u.release(0, frees);
        }
        let info = {
            let mut state = self.state.borrow_mut();
            let s = state.get_mut(&key).expect("checked above, no await since");
            s.trim_to(offset);
            s.snapshots.retain(|o, _| rec.snapshots.iter().any(|m| m.offset == *o));
            let data_off = loc.body_len - req.body.len() as u32;
            let snap = Snap { content_type, loc, data_off, len: req.body.len() as u32, published_at_ms: now };
            s.snapshots.insert(offset, snap);
            debug_assert_eq!(s.stored_bytes(), after, "the quota counted what the stream now holds");
            s.info(&s.visible(self.log.durable_lsn()))
        };
        self.reclaim_due.set(true);
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        Ok(Outcome::SnapshotPublished { info, offset: req.offset })
    }

    /// A published snapshot's blob, from its record.
    pub(in crate::shard) fn read_blob(&self, snap: &Snap) -> Result<Vec<u8>, Error> {
        let mut blob = Vec::with_capacity(snap.len as usize);
        let from = snap.data_off as usize;
        self.log.read_body(snap.loc, from..from + snap.len as usize, &mut blob).map_err(|e| self.storage_err(e))?;
        Ok(blob)
    }

    pub(in crate::shard) fn snapshot_read(&self, key: &StreamKey, offset: Offset) -> Reply {
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
        let rec = {
            let state = self.state.borrow();
            let s = state.get(&key).ok_or(Error::NotFound)?;
            if !s.snapshots.contains_key(&offset.pos) {
                return Err(Error::NotFound);
            }
            if s.snapshots.last_key_value().is_some_and(|(&o, _)| o == offset.pos) {
                return Err(Error::Conflict("this is the current snapshot; publish a newer one first".into()));
            }
            let mut rec = s.state_record(&key);
            rec.snapshots.retain(|m| m.offset != offset.pos);
            rec
        };
        let (_, lsn) = self.log_state(&key, &rec, None)?;
        if let Some(s) = self.state.borrow_mut().get_mut(&key) {
            if let (Some(snap), Some(u)) = (s.snapshots.remove(&offset.pos), &s.usage) {
                u.release(0, u64::from(snap.len));
            }
        }
        self.reclaim_due.set(true);
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        Ok(Outcome::Deleted)
    }

    /// `GET .../bootstrap`: the current snapshot, then each message after it,
    /// up to about one read's worth (the client continues from the offset).
    pub(in crate::shard) fn bootstrap(&self, key: &StreamKey) -> Reply {
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
                r => r.map_err(|e| self.storage_err(e))?,
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
