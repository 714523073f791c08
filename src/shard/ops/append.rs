//! Appends: the producer and Stream-Seq rules, the record, the durable ack.

use crate::protocol::persist::{self, AppendRecord};
use crate::protocol::rules::{self, AppendContext, AppendVerdict};
use crate::protocol::{json, AppendReq, Error, Offset, Outcome, ProducerAck, StreamKey};
use crate::shard::records;
use crate::shard::stream::Visible;
use crate::shard::{Reply, Shard};
use crate::storage::{self, io::SegmentStore};

impl<S: SegmentStore> Shard<S> {
    pub(in crate::shard) async fn append(&self, key: StreamKey, req: AppendReq) -> Reply {
        let now = (self.now_ms)();
        let (verdict, json, uid, inc, tail, usage) = {
            let mut state = self.state.borrow_mut();
            let s = state.get_mut(&key).ok_or(Error::NotFound)?;
            // The ETag only matters for If-Match; don't build it on every append.
            let etag = match &req.if_match {
                Some(_) => s.info(&s.visible(self.log.durable_lsn())).etag,
                None => String::new(),
            };
            let cx = AppendContext {
                content_type: &s.content_type,
                closed: s.closed,
                next_offset: Offset::new(0, s.tail),
                etag: &etag,
                last_stream_seq: s.stream_seq.as_deref(),
                producer: req.producer.as_ref().and_then(|p| s.producers.get(&p.id).copied()),
                closed_by: s.closed_by.as_ref(),
            };
            let verdict = rules::check_append(&cx, &req);
            // Every write that reaches the stream refreshes its TTL, even a
            // close-only or rejected one (F93).
            s.last_access_ms = now;
            (verdict?, s.json, s.uid, s.incarnation, s.tail, s.usage.clone())
        };
        let producer = match verdict {
            AppendVerdict::Write { producer } => producer,
            AppendVerdict::Duplicate { epoch, highest_seq } => {
                return self.answer_unwritten(&key, &req, Some(ProducerAck { epoch, seq: highest_seq }));
            }
            AppendVerdict::AlreadyClosed => return self.answer_unwritten(&key, &req, None),
        };
        let data = if json && !req.body.is_empty() { json::normalize(&req.body, false)?.0 } else { req.body };
        // Before the record exists: a refused append writes nothing.
        let held = self.reserve(&key.bucket, usage.as_ref(), 0, data.len() as u64)?;
        let rec = AppendRecord {
            close: req.close,
            stream_seq: req.stream_seq,
            producer: producer.as_ref().map(|p| (p.id.clone(), p.epoch, p.seq)),
            written_at_ms: now,
            data,
        };
        let meta = rec.encode_meta();
        let data_len = rec.data.len();
        let h = records::stream_header(persist::KIND_APPEND, uid, inc, tail);
        let (loc, lsn) = match self.log.append_parts(h, &[&meta, &rec.data]) {
            Ok(x) => x,
            Err(e) => {
                if matches!(e, storage::Error::Full) {
                    self.stats.borrow_mut().rejected_backpressure += 1;
                }
                return Err(self.storage_err(e));
            }
        };
        if let Some(h) = held {
            h.keep();
        }
        let info = {
            let mut state = self.state.borrow_mut();
            let s = state.get_mut(&key).expect("checked above, same task, no await since");
            records::apply_append(s, &rec, loc, meta.len(), lsn, self.log.durable_lsn());
            s.info(&Visible { tail: s.tail, closed: s.closed, chunks: s.chunks.len() })
        };
        {
            let mut st = self.stats.borrow_mut();
            st.appends += 1;
            st.append_bytes += data_len as u64;
        }
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        self.wake_readers(&key);
        Ok(Outcome::Appended {
            info,
            producer: producer.map(|p| ProducerAck { epoch: p.epoch, seq: p.seq }),
            duplicate: false,
            close_only: data_len == 0,
        })
    }

    /// The answer to an append that writes nothing (an idempotent retry, or
    /// a close of a closed stream): the stream as it is.
    fn answer_unwritten(&self, key: &StreamKey, req: &AppendReq, producer: Option<ProducerAck>) -> Reply {
        let state = self.state.borrow();
        let s = state.get(key).ok_or(Error::NotFound)?;
        let mut v = s.visible(self.log.durable_lsn());
        if let (Some(p), Some(_)) = (&req.producer, &producer) {
            // A retry answers with the offset its original got, when we
            // still remember it; older ones get the current tail.
            if let Some(t) = s.acked_tail(&p.id, p.epoch, p.seq) {
                v.tail = t.min(v.tail);
            }
        }
        Ok(Outcome::Appended { info: s.info(&v), producer, duplicate: true, close_only: req.body.is_empty() })
    }
}
