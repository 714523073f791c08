//! One subscription's state and what claim, ack and release do to it.
//!
//! Each stream it tracks has a cursor: the tail the subscription last heard
//! of and the offset its consumer acknowledged; a stream is pending while
//! its tail is past its ack. Work is handed out as a *wake*: a snapshot of
//! the pending streams' tails under a `wake_id`, a `generation` and a bearer
//! token (kept as its SHA-256 only). Every new wake, and every re-claim of
//! one whose lease ran out, takes a new generation, so an ack from stale
//! work names an old (wake, generation) pair and is fenced (409 `FENCED`).
//!
//! A cursor counts in one creation of its stream (`Stream-Incarnation`):
//! when the stream at its path is deleted and created again, its offsets
//! start over, so the cursor starts over too (nothing of the new creation
//! acknowledged), and acks the consumer sends for the old creation's data
//! no longer move it.

use super::config::{object, string_field, Delivery, SubConfig};
use super::{glob, refused, Root};
use crate::limits::SUBSCRIPTION_STREAMS_MAX;
use crate::protocol::offset::parse_offset;
use crate::protocol::{Error, Offset};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use subtle::ConstantTimeEq;

/// Why a subscription tracks a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Link {
    /// Named in `streams` (at creation or by `POST .../streams`).
    Explicit,
    /// Its pattern matched the stream when it got data.
    Pattern,
}

impl Link {
    pub fn name(self) -> &'static str {
        match self {
            Link::Explicit => "explicit",
            Link::Pattern => "pattern",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cursor {
    pub link: Link,
    /// Acknowledged up to here (None: nothing yet).
    pub acked: Option<Offset>,
    /// The stream's tail as last heard (None: nothing heard yet).
    pub tail: Option<Offset>,
    /// The creation of the stream the offsets count in (its incarnation
    /// token; None: nothing heard yet, or a record from before this field).
    #[serde(default)]
    pub creation: Option<String>,
    /// Acks of an earlier generation than this one do not move the cursor:
    /// they were sent for data of an earlier creation.
    #[serde(default)]
    pub acks_from_generation: u64,
}

impl Cursor {
    fn new(link: Link) -> Self {
        Cursor { link, acked: None, tail: None, creation: None, acks_from_generation: 0 }
    }

    /// Heard of the creation `creation` at `tail`: a creation other than
    /// the one counted in starts the cursor over. Returns whether it did.
    fn heard(&mut self, creation: &str, tail: Offset, next_generation: u64) -> bool {
        let again = self.creation.as_deref().is_some_and(|c| c != creation);
        if again {
            self.acked = None;
            self.tail = Some(tail);
            self.acks_from_generation = next_generation;
        } else {
            self.tail = Some(self.tail.map_or(tail, |t| t.max(tail)));
        }
        self.creation = Some(creation.to_string());
        again
    }

    pub fn pending(&self) -> bool {
        self.tail.is_some_and(|t| t > self.acked.unwrap_or(Offset::ZERO))
    }
}

/// Work handed out: the pending streams' tails when it began.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Wake {
    pub id: String,
    pub generation: u64,
    /// The worker that claimed it (pull-wake), or none.
    pub holder: Option<String>,
    /// Its lease ends here (wall clock, ms).
    pub lease_until_ms: i64,
    /// SHA-256 of its bearer token, hex.
    pub token_sha256: String,
    pub streams: Vec<(String, Offset)>,
}

/// What an ack (or a webhook callback) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub wake_id: String,
    pub generation: u64,
    pub acks: Vec<(String, Offset)>,
    pub done: bool,
}

/// A subscription: its configuration and everything it has delivered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Subscription {
    pub root: Root,
    pub id: String,
    pub config: SubConfig,
    /// `scheme://host` the subscription was created through: its callback
    /// and JWK set URLs are built on it.
    pub origin: String,
    pub streams: BTreeMap<String, Cursor>,
    /// The last generation given out.
    pub generation: u64,
    /// Wakes begun so far (names the next one).
    pub wakes: u64,
    pub wake: Option<Wake>,
    /// Pull-wake: a wake event is in the wake stream and no ack with
    /// `done` has answered it yet (so no second event is written).
    pub signalled: bool,
}

/// The hex SHA-256 of a bearer token.
pub fn token_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn fenced(why: &str) -> Error {
    refused(409, "FENCED", why)
}

impl Subscription {
    pub fn new(root: Root, id: String, config: SubConfig, origin: String) -> Self {
        let streams = config.streams.iter().map(|p| (p.clone(), Cursor::new(Link::Explicit))).collect();
        Subscription { root, id, config, origin, streams, generation: 0, wakes: 0, wake: None, signalled: false }
    }

    /// Whether a stream at `path` is this subscription's.
    pub fn selects(&self, path: &str) -> bool {
        let own_wake_stream =
            matches!(&self.config.delivery, Delivery::PullWake { wake_stream } if wake_stream == path);
        !own_wake_stream && self.streams.get(path).is_some_and(|c| c.link == Link::Explicit)
            || self.config.pattern.as_deref().is_some_and(|p| glob::matches(p, path))
    }

    /// The stream at `path`, its creation `creation`, has data up to
    /// `tail`. Returns whether the subscription has pending work it had not
    /// before (a wake is due). A stream beyond `SUBSCRIPTION_STREAMS_MAX`
    /// is not tracked. A new creation at the path starts its cursor over,
    /// and the wake outstanding no longer hands out the old one's data.
    pub fn note_tail(&mut self, path: &str, tail: Offset, creation: &str) -> bool {
        let was = self.pending();
        if !self.streams.contains_key(path) {
            if self.streams.len() >= SUBSCRIPTION_STREAMS_MAX || !self.selects(path) {
                return false;
            }
            self.streams.insert(path.to_string(), Cursor::new(Link::Pattern));
        }
        let next_generation = self.generation + 1;
        let c = self.streams.get_mut(path).expect("inserted above");
        if c.heard(creation, tail, next_generation) {
            if let Some(w) = &mut self.wake {
                w.streams.retain(|(p, _)| p != path);
            }
            // Pending work it had: due again for the new creation.
            return self.pending();
        }
        !was && self.pending()
    }

    pub fn pending(&self) -> bool {
        self.streams.values().any(Cursor::pending)
    }

    fn pending_streams(&self) -> Vec<(String, Offset)> {
        self.streams.iter().filter(|(_, c)| c.pending()).filter_map(|(p, c)| Some((p.clone(), c.tail?))).collect()
    }

    /// Adds explicit streams (`POST .../streams`).
    pub fn add_explicit(&mut self, paths: &[String]) -> Result<(), Error> {
        let new = paths.iter().filter(|p| !self.streams.contains_key(*p)).count();
        if self.streams.len() + new > SUBSCRIPTION_STREAMS_MAX {
            return Err(refused(
                429,
                "SUBSCRIPTION_STREAMS_LIMIT",
                format!("a subscription tracks at most {SUBSCRIPTION_STREAMS_MAX} streams"),
            ));
        }
        for p in paths {
            self.streams.entry(p.clone()).or_insert_with(|| Cursor::new(Link::Explicit)).link = Link::Explicit;
        }
        Ok(())
    }

    /// Removes an explicit stream (`DELETE .../streams/{path}`): the
    /// subscription forgets it unless its pattern matches it too.
    /// Returns whether anything changed.
    pub fn remove_explicit(&mut self, path: &str) -> bool {
        match self.streams.get_mut(path) {
            Some(c) if c.link == Link::Explicit => {
                if self.config.pattern.as_deref().is_some_and(|p| glob::matches(p, path)) {
                    c.link = Link::Pattern;
                } else {
                    self.streams.remove(path);
                }
                true
            }
            _ => false,
        }
    }

    /// Begins a wake over the pending streams, fencing any earlier one.
    pub fn begin_wake(&mut self, now_ms: i64, holder: Option<String>, token: &str) -> &Wake {
        self.generation += 1;
        self.wakes += 1;
        let wake = Wake {
            id: format!("w_{}", self.wakes),
            generation: self.generation,
            holder,
            lease_until_ms: now_ms + self.config.lease_ttl_ms as i64,
            token_sha256: token_digest(token),
            streams: self.pending_streams(),
        };
        self.wake.insert(wake)
    }

    /// A worker claims the pending work (pull-wake): 409 `ALREADY_CLAIMED`
    /// while another holds an unexpired lease; Ok(None) when nothing is
    /// pending. A claim of a wake whose lease ran out (or was released)
    /// begins a new generation of it.
    pub fn claim(&mut self, worker: String, now_ms: i64, token: &str) -> Result<Option<&Wake>, Error> {
        if let Some(w) = &self.wake {
            if let Some(holder) = w.holder.as_ref().filter(|_| w.lease_until_ms > now_ms) {
                return Err(Error::Refused {
                    status: 409,
                    code: "ALREADY_CLAIMED".into(),
                    message: format!("wake {} is claimed by {holder} until its lease ends", w.id),
                    holder: Some(holder.clone()),
                });
            }
        }
        if !self.pending() {
            self.wake = None;
            return Ok(None);
        }
        Ok(Some(self.begin_wake(now_ms, Some(worker), token)))
    }

    /// Checks that an ack or release is for the current wake and
    /// generation, with its token: else 409 `FENCED` (or 401 without a
    /// token at all).
    fn check_fence(&self, wake_id: &str, generation: u64, token: Option<&str>) -> Result<&Wake, Error> {
        let token = token.ok_or_else(|| refused(401, "UNAUTHORIZED", "the wake's bearer token is missing"))?;
        let w = self.wake.as_ref().ok_or_else(|| fenced("no wake is outstanding: it was acknowledged or replaced"))?;
        if w.id != wake_id || w.generation != generation {
            return Err(fenced("a newer wake or generation replaced this one"));
        }
        if !bool::from(token_digest(token).as_bytes().ct_eq(w.token_sha256.as_bytes())) {
            return Err(fenced("the token is not this wake's"));
        }
        Ok(w)
    }

    /// Applies an ack: cursors move forward (never back, never past the
    /// tail heard), and `done` ends the wake. Returns `next_wake`: whether
    /// work is pending still.
    pub fn ack(&mut self, a: &Ack, token: Option<&str>) -> Result<bool, Error> {
        self.check_fence(&a.wake_id, a.generation, token)?;
        for (path, offset) in &a.acks {
            if let Some(c) = self.streams.get_mut(path).filter(|c| a.generation >= c.acks_from_generation) {
                let to = c.tail.map_or(*offset, |t| (*offset).min(t));
                c.acked = Some(c.acked.map_or(to, |x| x.max(to)));
            }
        }
        if a.done {
            self.wake = None;
            self.signalled = false;
        }
        Ok(self.pending())
    }

    /// A webhook receiver answered `{"done":true}`: every stream of the wake
    /// is acknowledged at the tail it was delivered with.
    pub fn auto_ack(&mut self, wake_id: &str, generation: u64) -> bool {
        let Some(w) = self.wake.take_if(|w| w.id == wake_id && w.generation == generation) else {
            return false;
        };
        for (path, tail) in w.streams {
            if let Some(c) = self.streams.get_mut(&path) {
                c.acked = Some(c.acked.map_or(tail, |x| x.max(tail)));
            }
        }
        true
    }

    /// Pull-wake: whether a wake event is due: work is pending and none was
    /// written for it, or the worker that claimed it let its lease run out.
    pub fn signal_due(&self, now_ms: i64) -> bool {
        let lapsed = self.wake.as_ref().is_some_and(|w| w.holder.is_some() && w.lease_until_ms <= now_ms);
        self.pending() && (!self.signalled || lapsed)
    }

    /// Forgets the holder of a wake whose lease ran out (it is free to
    /// claim; the holder's ack is fenced once another claims it).
    pub fn free_expired(&mut self, now_ms: i64) {
        if let Some(w) = self.wake.as_mut().filter(|w| w.lease_until_ms <= now_ms) {
            w.holder = None;
        }
    }

    /// Gives a claimed wake back (pull-wake): another worker may claim it.
    pub fn release(&mut self, wake_id: &str, generation: u64, token: Option<&str>) -> Result<(), Error> {
        self.check_fence(wake_id, generation, token)?;
        if let Some(w) = &mut self.wake {
            w.holder = None;
            w.lease_until_ms = 0;
        }
        Ok(())
    }
}

/// `{"worker": ...}` of a claim.
pub fn parse_claim(body: &[u8]) -> Result<String, Error> {
    let m = object(body)?;
    string_field(&m, "worker")?.ok_or_else(|| Error::BadRequest("worker is missing".into()))
}

/// `{"wake_id", "generation"}` of a release, and of an ack with its
/// `acks: [{stream, offset}]` and `done`.
pub fn parse_ack(body: &[u8]) -> Result<Ack, Error> {
    let bad = |m: &str| Error::BadRequest(m.to_string());
    let m = object(body)?;
    let wake_id = match m.get("wake_id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(bad("wake_id is missing")),
    };
    let generation = m.get("generation").and_then(Value::as_u64).ok_or_else(|| bad("generation is missing"))?;
    let mut acks = Vec::new();
    if let Some(list) = m.get("acks") {
        let list = list.as_array().ok_or_else(|| bad("acks must be an array"))?;
        if list.len() > SUBSCRIPTION_STREAMS_MAX {
            return Err(bad("too many acks"));
        }
        for a in list {
            let stream = a.get("stream").and_then(Value::as_str).ok_or_else(|| bad("an ack needs stream"))?;
            let offset = a.get("offset").and_then(Value::as_str).ok_or_else(|| bad("an ack needs offset"))?;
            acks.push((stream.to_string(), parse_offset(offset)?));
        }
    }
    let done = m.get("done").and_then(Value::as_bool).unwrap_or(false);
    Ok(Ack { wake_id, generation, acks, done })
}

#[cfg(test)]
mod tests {
    use super::super::config::parse;
    use super::*;

    fn sub() -> Subscription {
        let body = r#"{"type":"pull-wake","pattern":"events/*","wake_stream":"wake/w","lease_ttl_ms":1000}"#;
        let config = parse(body.as_bytes(), &Root::V1, true).unwrap();
        Subscription::new(Root::V1, "s1".into(), config, "http://h".into())
    }

    fn code<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
        match r {
            Err(Error::Refused { code, .. }) => code,
            other => panic!("{other:?}"),
        }
    }

    fn at(pos: u64) -> Offset {
        Offset::new(0, pos)
    }

    #[test]
    fn a_matching_stream_with_data_is_pending_until_acked() {
        let mut s = sub();
        assert!(!s.note_tail("other/x", at(5), "c1"), "not selected");
        assert!(s.note_tail("events/a", at(5), "c1"), "newly pending: a wake is due");
        assert!(!s.note_tail("events/a", at(9), "c1"), "already pending");
        let w = s.claim("w1".into(), 0, "tok").unwrap().unwrap().clone();
        assert_eq!((w.generation, w.streams.clone()), (1, vec![("events/a".to_string(), at(9))]));
        let busy = s.claim("w2".into(), 10, "tok2").unwrap_err();
        assert!(matches!(busy, Error::Refused { status: 409, ref code, holder: Some(ref h), .. }
            if code == "ALREADY_CLAIMED" && h == "w1"));
        let ack = Ack { wake_id: w.id.clone(), generation: 1, acks: vec![("events/a".into(), at(9))], done: true };
        assert!(matches!(s.ack(&ack, Some("wrong")), Err(Error::Refused { status: 409, .. })));
        assert_eq!(s.ack(&ack, Some("tok")), Ok(false), "nothing pending after");
        assert_eq!(code(s.ack(&ack, Some("tok"))), "FENCED");
        assert_eq!(s.streams["events/a"].acked, Some(at(9)));
    }

    #[test]
    fn an_expired_lease_is_claimed_again_under_a_new_generation() {
        let mut s = sub();
        s.note_tail("events/a", at(5), "c1");
        let first = s.claim("w1".into(), 0, "t1").unwrap().unwrap().clone();
        let second = s.claim("w2".into(), 2_000, "t2").unwrap().unwrap().clone();
        assert_eq!(second.generation, first.generation + 1);
        let stale = Ack { wake_id: first.id, generation: first.generation, acks: vec![], done: true };
        assert_eq!(code(s.ack(&stale, Some("t1"))), "FENCED");
        s.release(&second.id, second.generation, Some("t2")).unwrap();
        assert!(s.claim("w3".into(), 2_001, "t3").unwrap().is_some(), "released: claimable at once");
    }

    #[test]
    fn a_lapsed_claim_is_signalled_again_once() {
        let mut s = sub();
        s.note_tail("events/a", at(5), "c1");
        assert!(s.signal_due(0));
        s.signalled = true;
        assert!(!s.signal_due(0), "one event per wake");
        s.claim("w1".into(), 0, "t").unwrap();
        assert!(!s.signal_due(999), "claimed, within its lease");
        assert!(s.signal_due(1_000), "the lease ran out unacknowledged");
        s.free_expired(1_000);
        assert!(!s.signal_due(1_001), "signalled once for it");
        assert!(s.claim("w2".into(), 1_001, "t2").unwrap().is_some());
    }

    #[test]
    fn webhook_done_acks_the_delivered_tails() {
        let mut s = sub();
        s.note_tail("events/a", at(5), "c1");
        let w = s.begin_wake(0, None, "t").clone();
        s.note_tail("events/a", at(8), "c1");
        assert!(s.auto_ack(&w.id, w.generation));
        assert_eq!(s.streams["events/a"].acked, Some(at(5)));
        assert!(s.pending(), "what came after the delivery is pending still");
        assert!(!s.auto_ack(&w.id, w.generation), "once");
    }

    #[test]
    fn a_stream_created_again_starts_its_cursor_over() {
        let mut s = sub();
        s.note_tail("events/a", at(9), "c1");
        let w = s.claim("w1".into(), 0, "t").unwrap().unwrap().clone();
        // Deleted and created again: the new creation's data, at lower offsets.
        assert!(s.note_tail("events/a", at(4), "c2"), "pending for the new creation");
        assert_eq!((s.streams["events/a"].acked, s.streams["events/a"].tail), (None, Some(at(4))));
        assert!(s.wake.as_ref().unwrap().streams.is_empty(), "the wake no longer hands out the old creation");
        let old =
            Ack { wake_id: w.id.clone(), generation: w.generation, acks: vec![("events/a".into(), at(9))], done: true };
        assert_eq!(s.ack(&old, Some("t")), Ok(true), "an ack of the old creation's data moves nothing");
        assert_eq!(s.streams["events/a"].acked, None);
        let w = s.claim("w1".into(), 1, "t2").unwrap().unwrap().clone();
        assert_eq!(w.streams, vec![("events/a".to_string(), at(4))]);
        let new = Ack { wake_id: w.id, generation: w.generation, acks: vec![("events/a".into(), at(4))], done: true };
        assert_eq!(s.ack(&new, Some("t2")), Ok(false));
        assert_eq!(s.streams["events/a"].acked, Some(at(4)));
        assert!(!s.note_tail("events/a", at(4), "c2"), "the same creation: nothing new");
    }

    #[test]
    fn a_cursor_recorded_before_creations_were_kept_reads_as_none() {
        let old = r#"{"link":"Pattern","acked":{"seq":0,"pos":5},"tail":{"seq":0,"pos":9}}"#;
        let c: Cursor = serde_json::from_str(old).expect("a record of an earlier build");
        assert_eq!((c.creation, c.acks_from_generation), (None, 0));
    }

    #[test]
    fn explicit_streams_come_and_go() {
        let mut s = sub();
        s.add_explicit(&["manual/a".into(), "events/b".into()]).unwrap();
        assert!(s.selects("manual/a"));
        assert!(s.remove_explicit("manual/a"));
        assert!(!s.streams.contains_key("manual/a"));
        assert!(s.remove_explicit("events/b"));
        assert_eq!(s.streams["events/b"].link, Link::Pattern, "its pattern still selects it");
        assert!(!s.remove_explicit("manual/a"), "idempotent");
    }

    #[test]
    fn ack_bodies() {
        let a = parse_ack(br#"{"wake_id":"w_1","generation":2,"acks":[{"stream":"a","offset":"0_5"}],"done":true}"#)
            .unwrap();
        assert_eq!(a, Ack { wake_id: "w_1".into(), generation: 2, acks: vec![("a".into(), at(5))], done: true });
        assert!(parse_ack(br#"{"generation":2}"#).is_err());
        assert!(parse_ack(br#"{"wake_id":"w","generation":1,"acks":[{"stream":"a","offset":"x"}]}"#).is_err());
        assert_eq!(parse_claim(br#"{"worker":"w1"}"#).unwrap(), "w1");
        assert!(parse_claim(b"{}").is_err());
    }
}
