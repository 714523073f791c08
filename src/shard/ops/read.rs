//! Reads: catch-up reads of a stream's durable bytes, long-poll waits and
//! the readers they wake, and the cursors live responses carry.

use crate::limits::READ_CHUNK_BYTES_MAX;
use crate::protocol::headers::etag_matches;
use crate::protocol::offset::ReadFrom;
use crate::protocol::rules;
use crate::protocol::{json, Error, Incarnation, Live, Offset, Outcome, ReadOutcome, ReadReq, StreamKey};
use crate::shard::state::State;
use crate::shard::tiering::ReadStop;
use crate::shard::{Reply, Shard};
use crate::storage::{self, io::SegmentStore};
use futures_channel::oneshot;
use std::time::Instant;

/// HEAD: the durable stream's metadata; 304 when If-None-Match names its
/// ETag. HEAD does not refresh a sliding TTL (F46).
pub(in crate::shard) fn head(state: &State, key: &StreamKey, if_none_match: Option<&str>, durable_lsn: u64) -> Reply {
    let s = state.get(key).ok_or(Error::NotFound)?;
    let info = s.info(&s.visible(durable_lsn));
    let not_modified = if_none_match.is_some_and(|h| etag_matches(h, &info.etag));
    Ok(Outcome::Head { info, not_modified })
}

impl<S: SegmentStore> Shard<S> {
    pub(in crate::shard) fn jitter_secs(&self) -> u64 {
        // xorshift64: cursor jitter needs spread, not cryptographic quality.
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        1 + x % 3600
    }

    pub(in crate::shard) fn cursor(&self, client: Option<&str>) -> u64 {
        crate::protocol::cursor::next_cursor((self.now_ms)(), client, self.jitter_secs())
    }

    /// The cursor of a live answer: none once the stream closed there (F68).
    fn cursor_unless_closed(&self, r: &ReadOutcome, client: Option<&str>) -> Option<u64> {
        (!r.closed_at_end).then(|| self.cursor(client))
    }

    /// One catch-up round of an SSE connection: a read now, with a cursor.
    pub(in crate::shard) fn read_sse(&self, key: &StreamKey, req: ReadReq) -> Result<ReadOutcome, ReadStop> {
        let client = req.cursor.clone();
        let mut r = self.read(key, req)?;
        r.cursor = self.cursor_unless_closed(&r, client.as_deref());
        Ok(r)
    }

    pub(in crate::shard) fn wake_readers(&self, key: &StreamKey) {
        if let Some(s) = self.state.borrow_mut().get_mut(key) {
            for w in s.waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// Long-poll (F56–F62): answer at once when there is data after the
    /// offset or the stream is closed there; otherwise wait for an append or
    /// close to become durable, or for the timeout (204). SSE connections
    /// reach here too, one wait at a time, from whichever core holds them.
    /// A long-poll. With `if_incarnation`, every round after a wait checks
    /// it again: the stream may have been deleted and created again while
    /// the reader waited, and the answer must come from the creation named.
    pub(in crate::shard) async fn read_live(
        &self,
        key: &StreamKey,
        mut req: ReadReq,
        if_incarnation: Option<Incarnation>,
    ) -> Reply {
        let deadline = Instant::now() + self.long_poll_timeout.get();
        if req.from == ReadFrom::Now {
            // `now` means the tail when the request arrived; later rounds
            // must not move it, or data appended meanwhile would be skipped.
            let state = self.state.borrow();
            let s = state.get(key).ok_or(Error::NotFound)?;
            req.from = ReadFrom::At(Offset::new(0, s.visible(self.log.durable_lsn()).tail));
        }
        req.live = Live::No;
        loop {
            let mut r = self.with_cold(|| self.read(key, req.clone())).await?;
            let has_data = r.has_data();
            if has_data || r.closed_at_end {
                r.timed_out = !has_data;
                r.cursor = self.cursor_unless_closed(&r, req.cursor.as_deref());
                return Ok(Outcome::Read(r));
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let sleep = self.sleep.borrow().clone();
            let (Some(sleep), false, false) = (sleep, remaining.is_zero(), self.stopping.get()) else {
                r.timed_out = true;
                r.cursor = Some(self.cursor(req.cursor.as_deref()));
                return Ok(Outcome::Read(r));
            };
            let (tx, rx) = oneshot::channel();
            self.state.borrow_mut().get_mut(key).ok_or(Error::NotFound)?.waiters.push(tx);
            // Woken (or the stream was deleted, which drops the sender):
            // loop and read again. Timed out: answer with what is there.
            let woke = futures_lite::future::or(
                async {
                    let _ = rx.await;
                    true
                },
                async {
                    sleep(remaining).await;
                    false
                },
            )
            .await;
            rules::check_incarnation(if_incarnation, self.state.borrow().incarnation(key), false)?;
            if !woke {
                let mut r = self.with_cold(|| self.read(key, req.clone())).await?;
                r.timed_out = !r.has_data();
                r.cursor = self.cursor_unless_closed(&r, req.cursor.as_deref());
                return Ok(Outcome::Read(r));
            }
        }
    }

    pub(in crate::shard) fn read(&self, key: &StreamKey, req: ReadReq) -> Result<ReadOutcome, ReadStop> {
        let mut state = self.state.borrow_mut();
        let s = state.get_mut(key).ok_or(Error::NotFound)?;
        s.last_access_ms = (self.now_ms)();
        let v = s.visible(self.log.durable_lsn());
        let info = s.info(&v);
        let start = rules::read_start(req.from, s.retained(), v.tail)?;
        let offset_now = req.from == ReadFrom::Now;
        let mut body = Vec::new();
        let mut pos = start;
        let chunks = &s.chunks[..v.chunks];
        let mut i = chunks.partition_point(|c| c.start + c.len as u64 <= start);
        while i < chunks.len() && !offset_now {
            let c = chunks[i];
            let from = (pos - c.start) as usize;
            let room = READ_CHUNK_BYTES_MAX.saturating_sub(body.len());
            if room == 0 {
                break;
            }
            let take = if s.json {
                // JSON messages are never split: whole chunks only, at least one.
                if !body.is_empty() && c.len as usize > room {
                    break;
                }
                c.len as usize - from
            } else {
                (c.len as usize - from).min(room)
            };
            let off = c.data_off as usize + from;
            match self.log.read_body(c.loc, off..off + take, &mut body) {
                // Cold blocks after some data: answer with what is here (the
                // client reads on from the next offset), so one answer costs
                // at most one fetch, whatever the cache holds.
                Err(storage::Error::Cold(_)) if !body.is_empty() => break,
                r => r.map_err(|e| self.read_stop(e))?,
            }
            pos += take as u64;
            if from + take < c.len as usize {
                break;
            }
            i += 1;
        }
        let next = Offset::new(0, pos);
        let up_to_date = pos == v.tail;
        let closed_at_end = up_to_date && v.closed;
        let etag =
            (!offset_now).then(|| rules::range_etag(s.uid, s.incarnation, Offset::new(0, start), next, closed_at_end));
        let not_modified = match (&req.if_none_match, &etag) {
            (Some(h), Some(e)) => crate::protocol::headers::etag_matches(h, e),
            _ => false,
        };
        if s.json {
            body = json::wrap_array(&body);
        }
        Ok(ReadOutcome {
            info,
            body,
            next_offset: next,
            up_to_date,
            closed_at_end,
            etag,
            not_modified,
            offset_now,
            cursor: None,
            timed_out: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ops::testkit::{append, create, key};

    #[test]
    fn head_answers_the_durable_tail_and_not_modified_for_its_etag() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abc", None, 2);
        append(&mut state, "a", b"de", None, 3);
        let Ok(Outcome::Head { info, not_modified: false }) = head(&state, &key("a"), None, 2) else { panic!() };
        assert_eq!(info.next_offset.pos, 3, "lsn 3 is not durable");
        let Ok(Outcome::Head { not_modified, .. }) = head(&state, &key("a"), Some(&info.etag), 2) else { panic!() };
        assert!(not_modified);
        let Ok(Outcome::Head { info: later, not_modified }) = head(&state, &key("a"), Some(&info.etag), 3) else {
            panic!()
        };
        assert!(!not_modified, "the tail moved, so did the ETag");
        assert_eq!(later.next_offset.pos, 5);
        assert!(matches!(head(&state, &key("zz"), None, 3), Err(Error::NotFound)));
    }
}
