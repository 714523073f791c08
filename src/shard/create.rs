//! Creating streams: new ones, forks, and the idempotent re-create that
//! answers an existing stream with the same configuration.

use super::*;
use crate::protocol::ForkReq;

impl<S: SegmentStore> Shard<S> {
    /// PUT: an idempotent re-create, or a new stream (a fork inherits its
    /// source's data and, where the PUT does not name them, its content type
    /// and lifetime), durable before the answer.
    pub(super) async fn create(&self, key: StreamKey, req: CreateReq) -> Reply {
        let asked = CreateConfig {
            content_type: stream_content_type(req.content_type.as_deref()),
            lifetime: req.lifetime.clone(),
            closed: req.closed,
        };
        if let Some(r) = self.existing_create(&key, &req, &asked) {
            return r;
        }
        if req.if_match.is_some() {
            // If-Match on a stream that does not exist never matches (RFC 9110 13.1.1).
            return Err(Error::PreconditionFailed);
        }
        let mut rec = CreateRecord {
            bucket: key.bucket.clone(),
            stream: key.stream.clone(),
            content_type: asked.content_type.clone(),
            lifetime: asked.lifetime.clone(),
            closed: asked.closed,
            created_at_ms: (self.now_ms)(),
            fork: None,
            data: Vec::new(),
        };
        if let Some(f) = &req.fork {
            if let Some(raced) = self.inherit(&key, &req, &asked, f, &mut rec).await? {
                return raced;
            }
        }
        if !req.body.is_empty() {
            if is_json(&rec.content_type) {
                rec.data.extend_from_slice(&json::normalize(&req.body, true)?.0);
            } else {
                rec.data.extend_from_slice(&req.body);
            }
        }
        self.log_create(key, rec).await
    }

    /// Asks the fork source's owner for what the fork inherits and fills it
    /// into `rec`. Some(answer) when a concurrent create won the path while
    /// we waited (the source's reference is then given back).
    async fn inherit(
        &self,
        key: &StreamKey,
        req: &CreateReq,
        asked: &CreateConfig,
        f: &ForkReq,
        rec: &mut CreateRecord,
    ) -> Result<Option<Reply>, Error> {
        let ForkData { data, content_type, lifetime, source_uid } = self
            .ask_owner(|data| Control::ForkSnapshot {
                source: f.source.clone(),
                offset: f.offset,
                sub_offset: f.sub_offset,
                content_type: req.content_type.clone(),
                data,
            })
            .await??;
        let fork = ForkRecord {
            bucket: f.source.bucket.clone(),
            stream: f.source.stream.clone(),
            source_uid,
            offset: f.offset.map(|o| (o.seq, o.pos)),
            sub_offset: f.sub_offset,
        };
        if let Some(r) = self.existing_create(key, req, asked) {
            self.release_source(fork).await;
            return Ok(Some(r));
        }
        if req.content_type.is_none() {
            rec.content_type = content_type;
        }
        // F102: without its own TTL/expiry the fork inherits the source's.
        if rec.lifetime == Lifetime::Forever {
            rec.lifetime = lifetime;
        }
        rec.data = data;
        rec.fork = Some(fork);
        Ok(None)
    }

    /// Writes a new stream's create record and makes the stream, answering
    /// once the record is durable. The bucket's quotas are reserved first;
    /// a refusal or a failed write gives a fork's reference back.
    async fn log_create(&self, key: StreamKey, rec: CreateRecord) -> Reply {
        let usage = self.usage_of(&key.bucket);
        let held = self.reserve(&key.bucket, usage.as_ref(), 1, rec.data.len() as u64);
        let uid = self.next_uid.get();
        let incarnation = self.tombstones.borrow().get(&key).map_or(1, |i| i + 1);
        let body = rec.encode();
        let h = RecordHeader { kind: persist::KIND_CREATE, stream_id: uid, incarnation, stream_offset: 0, body_len: 0 };
        let written =
            held.and_then(|held| self.log.append(h, &body).map_err(|e| self.storage_err(e)).map(|x| (x, held)));
        let ((loc, lsn), held) = match written {
            Ok(x) => x,
            Err(e) => {
                if let Some(f) = rec.fork {
                    self.release_source(f).await;
                }
                return Err(e);
            }
        };
        if let Some(h) = held {
            h.keep();
        }
        self.next_uid.set(uid + 1);
        let data_len = rec.data.len();
        let now = rec.created_at_ms;
        let mut s = Stream::new(uid, incarnation, rec.content_type, rec.lifetime, now, now);
        s.created_lsn = lsn;
        s.write_lsn = lsn;
        s.tail = data_len as u64;
        s.closed = rec.closed;
        s.closed_lsn = lsn;
        s.last_lsn = lsn;
        s.fork = rec.fork;
        s.usage = usage;
        self.note_state(&mut s, loc.segment);
        if data_len > 0 {
            s.chunks.push(Chunk { start: 0, len: data_len as u32, loc, data_off: (body.len() - data_len) as u32, lsn });
        }
        let v = Visible { tail: s.tail, closed: s.closed, chunks: s.chunks.len() };
        let info = s.info(&v);
        self.by_uid.borrow_mut().insert(uid, key.clone());
        self.streams.borrow_mut().insert(key, s);
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        Ok(Outcome::Created { info, new: true })
    }

    /// PUT on a path that holds a stream: 200 for the same configuration
    /// (F11), 409 for another (F12), 412 for a failed If-Match. For a fork,
    /// what was not asked (content type, lifetime) is not compared, since
    /// it was inherited.
    pub(super) fn existing_create(&self, key: &StreamKey, req: &CreateReq, asked: &CreateConfig) -> Option<Reply> {
        let streams = self.streams.borrow();
        let s = streams.get(key)?;
        let v = s.visible(self.log.durable_lsn());
        if let Some(want) = &req.if_match {
            if !crate::protocol::headers::etag_matches(want, &s.info(&v).etag) {
                return Some(Err(Error::PreconditionFailed));
            }
        }
        let same =
            rules::recreate_matches(&s.config(), s.fork.as_ref(), asked, req.fork.as_ref(), req.content_type.is_some());
        Some(if same {
            Ok(Outcome::Created { info: s.info(&v), new: false })
        } else {
            Err(Error::Conflict("a stream with a different configuration exists at this path".into()))
        })
    }
}
