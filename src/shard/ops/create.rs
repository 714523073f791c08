//! Creating streams: new ones, forks, and the idempotent re-create that
//! answers an existing stream with the same configuration.

use crate::protocol::headers::etag_matches;
use crate::protocol::headers::{is_json, stream_content_type, Lifetime};
use crate::protocol::persist::{self, CreateRecord, ForkRecord};
use crate::protocol::rules::{self, CreateConfig};
use crate::protocol::{json, CreateReq, Error, ForkReq, Outcome, StreamKey};
use crate::shard::message::{Control, ForkData};
use crate::shard::records;
use crate::shard::state::State;
use crate::shard::stream::Visible;
use crate::shard::{Reply, Shard};
use crate::storage::{io::SegmentStore, RecordHeader};

impl<S: SegmentStore> Shard<S> {
    /// PUT: an idempotent re-create, or a new stream (a fork inherits its
    /// source's data and, where the PUT does not name them, its content type
    /// and lifetime), durable before the answer.
    pub(in crate::shard) async fn create(&self, key: StreamKey, req: CreateReq) -> Reply {
        let asked = CreateConfig {
            content_type: stream_content_type(req.content_type.as_deref()),
            lifetime: req.lifetime.clone(),
            closed: req.closed,
        };
        let occupied = existing(&self.state.borrow(), &key, &req, &asked, self.log.durable_lsn());
        if let Some(r) = occupied {
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
        let raced = existing(&self.state.borrow(), key, req, asked, self.log.durable_lsn());
        if let Some(r) = raced {
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
        let h = create_header(&self.state.borrow(), &key);
        let body = rec.encode();
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
        let info = {
            let mut state = self.state.borrow_mut();
            let now = rec.created_at_ms;
            let s = records::apply_create(&mut state, key, &h, rec, loc, lsn, now);
            s.usage = usage;
            s.info(&Visible { tail: s.tail, closed: s.closed, chunks: s.chunks.len() })
        };
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        Ok(Outcome::Created { info, new: true })
    }
}

/// PUT on a path that holds a stream: 200 for the same configuration
/// (F11), 409 for another (F12), 412 for a failed If-Match. For a fork,
/// what was not asked (content type, lifetime) is not compared, since it
/// was inherited. None: the path is free.
pub(in crate::shard) fn existing(
    state: &State,
    key: &StreamKey,
    req: &CreateReq,
    asked: &CreateConfig,
    durable_lsn: u64,
) -> Option<Reply> {
    let s = state.get(key)?;
    let v = s.visible(durable_lsn);
    if let Some(want) = &req.if_match {
        if !etag_matches(want, &s.info(&v).etag) {
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

/// The create record's header of a new stream at `key`: a fresh uid, and
/// the incarnation after the last stream deleted there.
pub(in crate::shard) fn create_header(state: &State, key: &StreamKey) -> RecordHeader {
    records::stream_header(persist::KIND_CREATE, state.next_uid(), state.next_incarnation(key), 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ops::testkit::{append, create, key};

    fn put(content_type: &str) -> CreateReq {
        CreateReq {
            content_type: Some(content_type.into()),
            lifetime: Lifetime::Forever,
            closed: false,
            body: Vec::new(),
            if_match: None,
            fork: None,
        }
    }

    fn asked(req: &CreateReq) -> CreateConfig {
        CreateConfig {
            content_type: stream_content_type(req.content_type.as_deref()),
            lifetime: req.lifetime.clone(),
            closed: req.closed,
        }
    }

    #[test]
    fn a_free_path_has_nothing_to_answer() {
        let r = put("text/plain");
        assert!(existing(&State::default(), &key("a"), &r, &asked(&r), 0).is_none());
    }

    #[test]
    fn the_same_configuration_answers_the_existing_stream() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abc", None, 2);
        let r = put("text/plain");
        match existing(&state, &key("a"), &r, &asked(&r), 2) {
            Some(Ok(Outcome::Created { new: false, info })) => assert_eq!(info.next_offset.pos, 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn another_configuration_conflicts() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        let json = put("application/json");
        assert!(matches!(existing(&state, &key("a"), &json, &asked(&json), 1), Some(Err(Error::Conflict(_)))));
        let mut ttl = put("text/plain");
        ttl.lifetime = Lifetime::Ttl { secs: 60 };
        assert!(matches!(existing(&state, &key("a"), &ttl, &asked(&ttl), 1), Some(Err(Error::Conflict(_)))));
        let mut closed = put("text/plain");
        closed.closed = true;
        assert!(matches!(existing(&state, &key("a"), &closed, &asked(&closed), 1), Some(Err(Error::Conflict(_)))));
    }

    #[test]
    fn if_match_on_an_existing_stream_must_match_its_etag() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        let etag = {
            let s = state.get(&key("a")).unwrap();
            s.info(&s.visible(1)).etag
        };
        let mut r = put("text/plain");
        r.if_match = Some("\"other\"".into());
        assert!(matches!(existing(&state, &key("a"), &r, &asked(&r), 1), Some(Err(Error::PreconditionFailed))));
        r.if_match = Some(etag);
        assert!(matches!(existing(&state, &key("a"), &r, &asked(&r), 1), Some(Ok(_))));
    }

    #[test]
    fn a_new_stream_gets_a_fresh_uid_and_the_next_incarnation() {
        let mut state = State::default();
        let first = create(&mut state, "a", "text/plain", 1);
        let h = create_header(&state, &key("b"));
        assert!(h.stream_id > first, "uids never repeat");
        assert_eq!(h.incarnation, 1);
        records::apply_delete(&mut state, &key("a"), false, 2, 2);
        let again = create_header(&state, &key("a"));
        assert_eq!(again.incarnation, 2, "a re-created path is a new incarnation");
        assert!(again.stream_id > first);
    }
}
