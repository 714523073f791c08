//! Appends: the plan (producer, Stream-Seq, closure and If-Match rules on
//! the state), the record, the durable ack.

use crate::protocol::headers::ProducerHeaders;
use crate::protocol::persist::{self, AppendRecord};
use crate::protocol::rules::{self, AppendContext, AppendVerdict, ProducerPolicy};
use crate::protocol::{json, AppendReq, Error, Offset, Outcome, ProducerAck, StreamKey};
use crate::quota::BucketUsage;
use crate::shard::records;
use crate::shard::state::State;
use crate::shard::stream::{Stream, Visible};
use crate::shard::{Reply, Shard};
use crate::storage::{self, io::SegmentStore, RecordHeader};
use std::sync::Arc;

/// What an append does, decided on the state alone.
#[derive(Debug)]
// A plan lives on the stack from `plan` to its match, moved once: boxing
// the answer would allocate for every duplicate instead.
#[allow(clippy::large_enum_variant)]
pub(in crate::shard) enum AppendPlan {
    /// Write a record at the stream's tail.
    Write { header: RecordHeader, producer: Option<ProducerHeaders>, json: bool, usage: Option<Arc<BucketUsage>> },
    /// Write nothing (an idempotent retry, or a close of a closed stream):
    /// this is the answer.
    Answer(Outcome),
}

/// When an append is planned and what its producer may do: the clock its
/// record will carry and the stream's producer bound and expiry.
pub(in crate::shard) struct At<'a> {
    pub(in crate::shard) now_ms: i64,
    pub(in crate::shard) policy: &'a ProducerPolicy,
}

/// Plans an append to the stream at `key` as of `durable_lsn` (F19-F33),
/// then, for a producer the stream holds no live state for, the producer
/// bound (429, nothing written).
pub(in crate::shard) fn plan(
    state: &State,
    key: &StreamKey,
    req: &AppendReq,
    durable_lsn: u64,
    at: &At<'_>,
) -> Result<AppendPlan, Error> {
    let s = state.get(key).ok_or(Error::NotFound)?;
    // The ETag only matters for If-Match; don't build it on every append.
    let etag = match &req.if_match {
        Some(_) => s.info(&s.visible(durable_lsn)).etag,
        None => String::new(),
    };
    let cx = AppendContext {
        content_type: &s.content_type,
        closed: s.closed,
        next_offset: Offset::new(0, s.tail),
        etag: &etag,
        last_stream_seq: s.stream_seq.as_deref(),
        producer: req.producer.as_ref().and_then(|p| s.producers.live(&p.id, at.policy, at.now_ms)),
        closed_by: s.closed_by.as_ref(),
    };
    Ok(match rules::check_append(&cx, req)? {
        AppendVerdict::Write { producer } => {
            if let Some(p) = &producer {
                s.producers.admit(&p.id, at.policy, at.now_ms)?;
            }
            AppendPlan::Write {
                header: records::stream_header(persist::KIND_APPEND, s.uid, s.incarnation, s.tail),
                producer,
                json: s.json,
                usage: s.usage.clone(),
            }
        }
        AppendVerdict::Duplicate { epoch, highest_seq } => {
            AppendPlan::Answer(unwritten(s, req, Some(ProducerAck { epoch, seq: highest_seq }), durable_lsn))
        }
        AppendVerdict::AlreadyClosed => AppendPlan::Answer(unwritten(s, req, None, durable_lsn)),
    })
}

/// The answer to an append that writes nothing: the stream as it is. A
/// producer's retry answers with the offset its original got, when that is
/// still remembered; older ones get the current tail.
fn unwritten(s: &Stream, req: &AppendReq, producer: Option<ProducerAck>, durable_lsn: u64) -> Outcome {
    let mut v = s.visible(durable_lsn);
    if let (Some(p), Some(_)) = (&req.producer, &producer) {
        if let Some(t) = s.producers.acked_tail(&p.id, p.epoch, p.seq) {
            v.tail = t.min(v.tail);
        }
    }
    Outcome::Appended { info: s.info(&v), producer, duplicate: true, close_only: req.body.is_empty() }
}

impl<S: SegmentStore> Shard<S> {
    /// Before an append is planned: every write that reaches the stream
    /// refreshes its TTL, even a close-only or rejected one (F93), and the
    /// idle producers make room for one the stream does not know.
    fn touch_for_append(&self, key: &StreamKey, req: &AppendReq, now: i64, policy: &ProducerPolicy) {
        if let Some(s) = self.state.borrow_mut().get_mut(key) {
            s.last_access_ms = now;
            if let Some(p) = &req.producer {
                s.producers.make_room(&p.id, policy, now);
            }
        }
    }

    pub(in crate::shard) async fn append(&self, key: StreamKey, req: AppendReq) -> Reply {
        let now = (self.now_ms)();
        let policy = self.producer_policy.get();
        self.touch_for_append(&key, &req, now, &policy);
        let at = At { now_ms: now, policy: &policy };
        let (header, producer, json, usage) = match plan(&self.state.borrow(), &key, &req, self.log.durable_lsn(), &at)?
        {
            AppendPlan::Write { header, producer, json, usage } => (header, producer, json, usage),
            AppendPlan::Answer(answer) => return Ok(answer),
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
        let (loc, lsn) = match self.log.append_parts(header, &[&meta, &rec.data]) {
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
            let s = state.get_mut(&key).expect("planned above, same task, no await since");
            records::apply_append(s, &rec, loc, meta.len(), lsn, self.log.durable_lsn());
            s.info(&Visible { tail: s.tail, closed: s.closed, chunks: s.chunks.len() })
        };
        let data_len = rec.data.len();
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{PRODUCERS_PER_STREAM_DEFAULT, PRODUCER_IDLE_EXPIRY_SECS_DEFAULT};
    use crate::shard::ops::testkit::{append, create, key, req};

    /// [`super::plan`] under the default producer policy, at 1 s.
    fn plan(state: &State, key: &StreamKey, req: &AppendReq, durable_lsn: u64) -> Result<AppendPlan, Error> {
        let policy = ProducerPolicy::new(PRODUCERS_PER_STREAM_DEFAULT, PRODUCER_IDLE_EXPIRY_SECS_DEFAULT);
        super::plan(state, key, req, durable_lsn, &At { now_ms: 1_000, policy: &policy })
    }

    fn producer(id: &str, epoch: u64, seq: u64) -> Option<ProducerHeaders> {
        Some(ProducerHeaders { id: id.into(), epoch, seq })
    }

    fn write_offset(p: &AppendPlan) -> u64 {
        match p {
            AppendPlan::Write { header, .. } => header.stream_offset,
            AppendPlan::Answer(a) => panic!("expected a write, got {a:?}"),
        }
    }

    #[test]
    fn a_missing_stream_is_not_found() {
        let state = State::default();
        assert!(matches!(plan(&state, &key("a"), &req(b"x"), 0), Err(Error::NotFound)));
    }

    #[test]
    fn a_write_goes_at_the_tail_including_appends_not_yet_durable() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"hello", None, 2);
        // lsn 2 is not durable (durable_lsn 1), yet the next write sequences after it.
        let p = plan(&state, &key("a"), &req(b"!"), 1).unwrap();
        assert_eq!(write_offset(&p), 5);
        let AppendPlan::Write { header, json, .. } = p else { unreachable!() };
        assert_eq!(header.kind, persist::KIND_APPEND);
        assert!(!json);
    }

    #[test]
    fn a_json_stream_plans_a_json_write() {
        let mut state = State::default();
        create(&mut state, "j", "application/json", 1);
        let mut r = req(b"[1]");
        r.content_type = Some("application/json".into());
        assert!(matches!(plan(&state, &key("j"), &r, 1).unwrap(), AppendPlan::Write { json: true, .. }));
    }

    #[test]
    fn a_closed_stream_refuses_data_with_its_final_offset() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abc", None, 2);
        let mut close = req(b"");
        close.close = true;
        records::apply_append(state.get_mut(&key("a")).unwrap(), &rec(b"", true), loc(3, 0), 0, 3, 3);
        let e = plan(&state, &key("a"), &req(b"more"), 3).unwrap_err();
        assert!(matches!(e, Error::StreamClosed { next_offset } if next_offset == Offset::new(0, 3)), "{e:?}");
        // Closing again writes nothing and answers as a duplicate.
        match plan(&state, &key("a"), &close, 3).unwrap() {
            AppendPlan::Answer(Outcome::Appended { duplicate: true, close_only: true, info, .. }) => {
                assert!(info.closed);
                assert_eq!(info.next_offset, Offset::new(0, 3));
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn a_producer_retry_answers_with_the_offset_its_original_got() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"one", producer("p", 0, 0), 2);
        append(&mut state, "a", b"two", producer("p", 0, 1), 3);
        let mut retry = req(b"one");
        retry.producer = producer("p", 0, 0);
        match plan(&state, &key("a"), &retry, 3).unwrap() {
            AppendPlan::Answer(Outcome::Appended { duplicate: true, info, producer, .. }) => {
                assert_eq!(info.next_offset, Offset::new(0, 3), "the tail after the original append");
                assert_eq!(producer, Some(ProducerAck { epoch: 0, seq: 1 }));
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn a_producer_gap_and_a_stale_epoch_are_refused() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"one", producer("p", 2, 0), 2);
        let mut gap = req(b"x");
        gap.producer = producer("p", 2, 5);
        assert!(matches!(plan(&state, &key("a"), &gap, 2), Err(Error::SeqGap { expected: 1, received: 5 })));
        let mut stale = req(b"x");
        stale.producer = producer("p", 1, 0);
        assert!(matches!(plan(&state, &key("a"), &stale, 2), Err(Error::StaleEpoch { current: 2 })));
        let mut next = req(b"x");
        next.producer = producer("p", 2, 1);
        assert_eq!(write_offset(&plan(&state, &key("a"), &next, 2).unwrap()), 3);
    }

    #[test]
    fn stream_seq_must_grow() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        let mut first = req(b"x");
        first.stream_seq = Some("b".into());
        assert!(matches!(plan(&state, &key("a"), &first, 1).unwrap(), AppendPlan::Write { .. }));
        let s = state.get_mut(&key("a")).unwrap();
        let mut r = rec(b"x", false);
        r.stream_seq = Some("b".into());
        records::apply_append(s, &r, loc(2, 0), 0, 2, 2);
        let mut same = req(b"y");
        same.stream_seq = Some("b".into());
        assert!(matches!(plan(&state, &key("a"), &same, 2), Err(Error::Conflict(_))));
        let mut later = req(b"y");
        later.stream_seq = Some("c".into());
        assert!(plan(&state, &key("a"), &later, 2).is_ok());
    }

    #[test]
    fn if_match_compares_the_durable_etag() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        append(&mut state, "a", b"abc", None, 2);
        let s = state.get(&key("a")).unwrap();
        let durable = s.info(&s.visible(2)).etag;
        let mut ok = req(b"x");
        ok.if_match = Some(durable.clone());
        assert!(plan(&state, &key("a"), &ok, 2).is_ok());
        // Before lsn 2 is durable the ETag clients saw is an older one.
        assert!(matches!(plan(&state, &key("a"), &ok, 1), Err(Error::PreconditionFailed)));
        let mut stale = req(b"x");
        stale.if_match = Some("\"nope\"".into());
        assert!(matches!(plan(&state, &key("a"), &stale, 2), Err(Error::PreconditionFailed)));
    }

    #[test]
    fn a_content_type_mismatch_is_refused() {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        let mut r = req(b"{}");
        r.content_type = Some("application/json".into());
        assert!(matches!(plan(&state, &key("a"), &r, 1), Err(Error::Conflict(_))));
    }

    /// Stream "a" with producers p0..p{n} (epoch 0, seq 0), written at `at_ms`.
    fn with_producers(n: usize, at_ms: i64) -> State {
        let mut state = State::default();
        create(&mut state, "a", "text/plain", 1);
        for i in 0..n {
            let mut r = rec(b"x", false);
            (r.producer, r.written_at_ms) = (Some((format!("p{i}"), 0, 0)), at_ms);
            let s = state.get_mut(&key("a")).unwrap();
            records::apply_append(s, &r, loc(2 + i as u64, 5), 4, 2 + i as u64, 1 + i as u64);
        }
        state
    }

    fn by(id: &str, epoch: u64, seq: u64) -> AppendReq {
        AppendReq { producer: producer(id, epoch, seq), ..req(b"y") }
    }

    #[test]
    fn a_new_producer_past_the_bound_is_refused_and_known_ones_go_on() {
        let state = with_producers(3, 1_000);
        let policy = ProducerPolicy::new(3, 60);
        let at = At { now_ms: 2_000, policy: &policy };
        let e = super::plan(&state, &key("a"), &by("p3", 0, 0), 9, &at).unwrap_err();
        assert_eq!(e, Error::ProducerLimit { limit: 3 });
        for i in 0..3 {
            let next = super::plan(&state, &key("a"), &by(&format!("p{i}"), 0, 1), 9, &at).unwrap();
            assert!(matches!(next, AppendPlan::Write { .. }), "p{i}: {next:?}");
        }
        // A retry of a known producer is still a duplicate, and appends
        // without a producer are not counted.
        let dup = super::plan(&state, &key("a"), &by("p0", 0, 0), 9, &at).unwrap();
        assert!(matches!(dup, AppendPlan::Answer(Outcome::Appended { duplicate: true, .. })), "{dup:?}");
        assert!(super::plan(&state, &key("a"), &req(b"z"), 9, &at).is_ok());
        // A gap is a gap before it is a newcomer.
        let gap = super::plan(&state, &key("a"), &by("p3", 0, 4), 9, &at).unwrap_err();
        assert!(matches!(gap, Error::SeqGap { expected: 0, received: 4 }), "{gap:?}");
    }

    #[test]
    fn idle_producers_free_their_slots_once_room_is_made() {
        let mut state = with_producers(3, 1_000);
        let policy = ProducerPolicy::new(3, 60);
        let later = 1_000 + 60_001;
        let at = At { now_ms: later, policy: &policy };
        let s = state.get_mut(&key("a")).unwrap();
        s.producers.make_room("p3", &policy, later);
        assert_eq!(s.producers.len(), 0, "all three idle past the expiry");
        assert!(matches!(super::plan(&state, &key("a"), &by("p3", 0, 0), 9, &at).unwrap(), AppendPlan::Write { .. }));
        // A forgotten producer's old sequence is gone: it starts at 0 again.
        let e = super::plan(&state, &key("a"), &by("p0", 0, 1), 9, &at).unwrap_err();
        assert!(matches!(e, Error::SeqGap { expected: 0, received: 1 }), "{e:?}");
    }

    #[test]
    fn replay_and_a_state_record_rebuild_the_same_producer_table() {
        let live = with_producers(3, 1_000);
        let s = live.get(&key("a")).unwrap();
        // Replay: the same append records, read back.
        let mut replayed = Stream::adoptable(s.uid, s.incarnation, 0);
        for i in 0..3u64 {
            let mut r = rec(b"x", false);
            (r.producer, r.written_at_ms) = (Some((format!("p{i}"), 0, 0)), 1_000);
            replayed.replay_append(&r, loc(2 + i, 5), i, 4, &ProducerPolicy::default()).unwrap();
        }
        assert_eq!(sorted(&replayed), sorted(s));
        assert!(sorted(s).iter().all(|p| p.last_ms == 1_000), "the records' time, not the clock's");
        // A state record carries the table, times included.
        let mut restored = Stream::adoptable(s.uid, s.incarnation, 0);
        restored.apply_state(&s.state_record(&key("a")), &ProducerPolicy::default());
        assert_eq!(sorted(&restored), sorted(s));
    }

    /// The stream's producer table, in id order.
    fn sorted(s: &Stream) -> Vec<crate::protocol::persist::ProducerRecord> {
        let mut v = s.producers.records();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// An append record of producer `id` (epoch 0, seq 0) written at `at_ms`.
    fn by_at(id: &str, at_ms: i64) -> AppendRecord {
        let mut r = rec(b"x", false);
        (r.producer, r.written_at_ms) = (Some((id.to_string(), 0, 0)), at_ms);
        r
    }

    #[test]
    fn replay_holds_the_table_its_writer_held() {
        // The writer: waves of 3 producers, each wave idle by the next, so
        // each newcomer of a wave makes room by dropping the last wave.
        let policy = ProducerPolicy::new(3, 60);
        let mut live = State::default();
        create(&mut live, "a", "text/plain", 1);
        let mut written = Vec::new();
        for (n, (wave, i)) in (0..6i64).flat_map(|w| (0..3).map(move |i| (w, i))).enumerate() {
            let (id, at) = (format!("w{wave}p{i}"), 1_000 + wave * 61_000);
            let s = live.get_mut(&key("a")).unwrap();
            s.producers.make_room(&id, &policy, at);
            s.producers.admit(&id, &policy, at).unwrap();
            let lsn = 2 + n as u64;
            records::apply_append(s, &by_at(&id, at), loc(lsn, 5), 4, lsn, lsn - 1);
            written.push(by_at(&id, at));
        }
        let s = live.get(&key("a")).unwrap();
        assert_eq!(s.producers.len(), 3, "the writer holds the last wave");
        // Replay (a restart, a follower): the same records, the same table,
        // never more than the bound on the way.
        let mut replayed = Stream::adoptable(s.uid, s.incarnation, 0);
        for (n, r) in written.iter().enumerate() {
            replayed.replay_append(r, loc(2 + n as u64, 5), n as u64, 4, &policy).unwrap();
            assert!(replayed.producers.len() <= 3, "record {n}: {} producers held", replayed.producers.len());
        }
        assert_eq!(sorted(&replayed), sorted(s));
    }

    #[test]
    fn replay_of_records_from_a_larger_bound_keeps_the_most_recent() {
        // Written under no bound (or a larger one): 5 producers, none idle.
        let mut replayed = Stream::adoptable(7, 1, 0);
        let policy = ProducerPolicy::new(3, 60);
        for i in 0..5u64 {
            replayed.replay_append(&by_at(&format!("p{i}"), 1_000 + i as i64), loc(2 + i, 5), i, 4, &policy).unwrap();
        }
        let ids: Vec<String> = sorted(&replayed).into_iter().map(|p| p.id).collect();
        assert_eq!(ids, ["p2", "p3", "p4"], "the least recently written beyond the bound are forgotten");
        // So is a state record's table, at the record's own time.
        let mut st = replayed.state_record(&key("a"));
        let idle: Vec<_> = st.producers.iter().map(|p| (format!("{}-idle", p.id), p.last_ms - 100_000)).collect();
        for (id, last_ms) in idle {
            st.producers.push(crate::protocol::persist::ProducerRecord { id, last_ms, ..st.producers[0].clone() });
        }
        assert_eq!(st.producers.len(), 6);
        let mut big = Stream::adoptable(7, 1, 0);
        big.apply_state(&st, &policy);
        assert_eq!(sorted(&big), sorted(&replayed), "the idle ones go first");
    }

    use crate::shard::ops::testkit::{loc, rec};
}
