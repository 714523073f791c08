//! The control API's requests on the subscription's owner: each plans on
//! the owned table, writes one record of the whole subscription (or its
//! delete), waits for it to be durable, tells every shard's registry when
//! what it selects changed, and answers.

use super::{Matcher, SubId, SubsEnv};
use crate::limits::SUBSCRIPTIONS_PER_ROOT_MAX;
use crate::protocol::persist;
use crate::protocol::subs::config::{self, object};
use crate::protocol::subs::cursor::{parse_ack, parse_claim};
use crate::protocol::subs::record::SubRecord;
use crate::protocol::subs::{refused, view, Delivery, Root, SubOp, SubRequest, Subscription};
use crate::protocol::{Error, Outcome};
use crate::shard::message::{Control, Reply};
use crate::shard::Shard;
use crate::storage::io::SegmentStore;
use crate::storage::RecordHeader;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;

/// A JSON answer.
fn json(status: u16, content_type: &str, v: &Value) -> Outcome {
    Outcome::Control { status, content_type: content_type.to_string(), body: v.to_string().into_bytes() }
}

fn no_content() -> Outcome {
    Outcome::Control { status: 204, content_type: String::new(), body: Vec::new() }
}

/// A bearer token for a wake: 192 bits from the kernel.
pub(super) fn new_token() -> Result<String, Error> {
    let mut raw = [0u8; 24];
    getrandom::fill(&mut raw).map_err(|e| Error::Unavailable(format!("no randomness for a token: {e}")))?;
    Ok(URL_SAFE_NO_PAD.encode(raw))
}

impl<S: SegmentStore> Shard<S> {
    pub(in crate::shard) async fn subs_op(&self, r: SubRequest) -> Reply {
        let env = self.subs_env.borrow().clone().ok_or_else(|| Error::Refused {
            status: 501,
            code: "SUBSCRIPTIONS_UNAVAILABLE".into(),
            message: "this node does not serve subscriptions (started without them)".into(),
            holder: None,
        })?;
        if let Root::Ds(b) = &r.root {
            if !self.state.borrow().buckets_known.contains(b) {
                return Err(Error::NotFound);
            }
        }
        let id: SubId = (r.root.clone(), r.id.clone());
        // Answer from durable state only: let its last record land first.
        let pending = self.state.borrow().subs.get(&id).map(|e| e.last_lsn);
        if let Some(lsn) = pending {
            self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        }
        let now = (self.now_ms)();
        match r.op {
            SubOp::Jwks => Ok(json(200, "application/jwk-set+json", &env.key.load().jwks())),
            SubOp::Put { body } => {
                let put = self.sub_put(id, r.origin, &body, &env).await;
                // Its loop may be parked (it owned none): from now it ticks.
                self.subs_due.notify();
                put
            }
            SubOp::Get => {
                Ok(json(200, "application/json", &view::subscription(&self.owned(&id)?, env.key.load().kid())))
            }
            SubOp::Delete => {
                self.owned(&id)?;
                self.commit_sub(&id, None).await?;
                self.publish_matcher(&id, None).await?;
                Ok(no_content())
            }
            SubOp::AddStreams { body } => {
                let paths = config::stream_list(&id.0, object(&body)?.get("streams"))?;
                let mut sub = self.owned(&id)?;
                sub.add_explicit(&paths)?;
                self.commit_sub(&id, Some(sub.clone())).await?;
                self.publish_matcher(&id, Some(Matcher::of(&sub))).await?;
                Ok(no_content())
            }
            SubOp::RemoveStream { path } => {
                let mut sub = self.owned(&id)?;
                if sub.remove_explicit(&path) {
                    self.commit_sub(&id, Some(sub.clone())).await?;
                    self.publish_matcher(&id, Some(Matcher::of(&sub))).await?;
                }
                Ok(no_content())
            }
            SubOp::Claim { body } => {
                let worker = parse_claim(&body)?;
                let mut sub = self.owned(&id)?;
                if !matches!(sub.config.delivery, Delivery::PullWake { .. }) {
                    return Err(Error::BadRequest("claim is for pull-wake subscriptions".into()));
                }
                let token = new_token()?;
                let Some(wake) = sub.claim(worker, now, &token)?.cloned() else {
                    return Ok(no_content());
                };
                self.commit_sub(&id, Some(sub.clone())).await?;
                Ok(json(200, "application/json", &view::claim(&sub, &wake, &token)))
            }
            SubOp::Ack { body, token } => {
                let ack = parse_ack(&body)?;
                let mut sub = self.owned(&id)?;
                let next_wake = sub.ack(&ack, token.as_deref())?;
                self.commit_sub(&id, Some(sub)).await?;
                if next_wake {
                    self.subs_due.notify();
                }
                Ok(json(200, "application/json", &view::acked(next_wake)))
            }
            SubOp::Release { body, token } => {
                let ack = parse_ack(&body)?;
                let mut sub = self.owned(&id)?;
                sub.release(&ack.wake_id, ack.generation, token.as_deref())?;
                self.commit_sub(&id, Some(sub)).await?;
                self.subs_due.notify();
                Ok(no_content())
            }
        }
    }

    /// A copy of an owned subscription to plan on (404 if there is none).
    fn owned(&self, id: &SubId) -> Result<Subscription, Error> {
        self.state.borrow().subs.get(id).map(|e| e.sub.clone()).ok_or(Error::NotFound)
    }

    /// PUT: 201 new, 200 the same config again, 409 another config.
    async fn sub_put(&self, id: SubId, origin: String, body: &[u8], env: &SubsEnv) -> Reply {
        let config = config::parse(body, &id.0, env.loopback)?;
        let existing = self.state.borrow().subs.get(&id).map(|e| e.sub.clone());
        if let Some(sub) = existing {
            if sub.config != config {
                return Err(refused(409, "SUBSCRIPTION_EXISTS", "a subscription with another config has this id"));
            }
            return Ok(json(200, "application/json", &view::subscription(&sub, env.key.load().kid())));
        }
        // The registry holds every shard's subscriptions. Creates racing on
        // two shards may each pass at the bound's last place: at most one
        // more a shard.
        if self.registry.borrow().count_in(&id.0) >= SUBSCRIPTIONS_PER_ROOT_MAX {
            return Err(refused(
                429,
                "SUBSCRIPTION_LIMIT",
                format!("this root holds its most subscriptions ({SUBSCRIPTIONS_PER_ROOT_MAX})"),
            ));
        }
        let sub = Subscription::new(id.0.clone(), id.1.clone(), config, origin);
        self.commit_sub(&id, Some(sub.clone())).await?;
        self.publish_matcher(&id, Some(Matcher::of(&sub))).await?;
        Ok(json(201, "application/json", &view::subscription(&sub, env.key.load().kid())))
    }

    /// Writes a subscription's record (its whole state, or with None its
    /// delete) and applies it; returns its lsn. Synchronous: planned and
    /// logged with no await between.
    pub(in crate::shard) fn log_sub(&self, id: &SubId, sub: Option<Subscription>) -> Result<u64, Error> {
        let rec = SubRecord { root: id.0.clone(), id: id.1.clone(), sub };
        let h = RecordHeader {
            kind: persist::KIND_SUBSCRIPTION,
            stream_id: 0,
            incarnation: 0,
            stream_offset: 0,
            body_len: 0,
        };
        let (loc, lsn) = self.log.append(h, &rec.encode()).map_err(|e| self.storage_err(e))?;
        if rec.sub.is_none() {
            self.reclaim_due.set(true);
            self.deliveries.borrow_mut().remove(id);
        }
        self.state.borrow_mut().apply_sub(id.clone(), rec.sub, loc.segment, lsn);
        Ok(lsn)
    }

    /// [`Shard::log_sub`], then waits until it is durable.
    pub(in crate::shard) async fn commit_sub(&self, id: &SubId, sub: Option<Subscription>) -> Result<(), Error> {
        let lsn = self.log_sub(id, sub)?;
        self.log.durable(lsn).await.map_err(|e| self.storage_err(e))
    }

    /// Reclaim: writes an owned subscription's record again (its latest
    /// state) so that its old segment can go. None if it is gone.
    pub(in crate::shard) fn relog_sub(&self, id: &SubId) -> Option<Result<u64, Error>> {
        let sub = self.state.borrow().subs.get(id)?.sub.clone();
        Some(self.log_sub(id, Some(sub)))
    }

    /// Tells every shard (this one too) what the subscription selects now.
    pub(in crate::shard) async fn publish_matcher(&self, id: &SubId, m: Option<Matcher>) -> Result<(), Error> {
        for target in 0..self.shards {
            let (id, m) = (id.clone(), m.clone());
            self.ask(target, |done| Control::SubRegistry { id, matcher: m, done }).await?;
        }
        Ok(())
    }

    /// In a cell, a follower applied a record of subscription `id` (None:
    /// its delete): every shard of this node learns what it selects now,
    /// without waiting (the apply must not), as `publish_matcher` does on
    /// the leader.
    pub(in crate::shard) fn publish_applied_matcher(&self, id: &SubId, m: Option<Matcher>) {
        self.registry.borrow_mut().set(id.clone(), m.clone());
        let Some(peers) = self.peers.borrow().clone() else { return };
        for target in (0..self.shards).filter(|&t| t != self.id) {
            // Nobody waits for the answer.
            let (done, _) = futures_channel::oneshot::channel();
            let (id, matcher) = (id.clone(), m.clone());
            if !peers.control(target, Control::SubRegistry { id, matcher, done }) {
                tracing::warn!("shard {}: shard {target} did not take a subscription's new selection", self.id);
            }
        }
    }

    /// Boot: tells every shard what this shard's subscriptions select.
    pub async fn publish_owned_subs(&self) -> Result<(), Error> {
        let owned: Vec<(SubId, Matcher)> =
            self.state.borrow().subs.iter().map(|(id, e)| (id.clone(), Matcher::of(&e.sub))).collect();
        for (id, m) in owned {
            self.publish_matcher(&id, Some(m)).await?;
        }
        Ok(())
    }
}
