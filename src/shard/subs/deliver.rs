//! The owner's delivery loop: on every due signal (new pending work, an
//! ack that left work) and every `SUBSCRIPTION_TICK_MS`, each owned
//! subscription with pending work gets a wake:
//! - pull-wake: one event appended to its wake stream (a JSON stream),
//!   until an ack with `done` answers it; workers then claim the work;
//! - webhook: a new wake (new generation, new token; its record durable
//!   before anything goes out), POSTed signed by the delivery thread
//!   (`tier::outbound`). A 2xx answer `{"done":true}` acknowledges it; any
//!   other 2xx waits for the callback until the lease ends; a failure is
//!   retried after `retry_delay_ms` (1 s doubling to 60 s, 20 % jitter),
//!   each retry a new generation so that the old one is fenced.
//!
//! What a delivery is doing is kept in memory only: after a restart a
//! webhook subscription's outstanding wake is replaced by a new one
//! (at-least-once: the receiver may see the same data again, under a new
//! generation; the old callback is fenced).

use super::{SubId, SubsEnv};
use crate::limits::SUBSCRIPTION_TICK_MS;
use crate::protocol::subs::{retry_delay_ms, view, Delivery, Root};
use crate::protocol::{AppendReq, StreamOp, Surface};
use crate::shard::message::{Dispatch, ShardRequest};
use crate::shard::Shard;
use crate::storage::io::SegmentStore;
use serde_json::Value;
use std::rc::Rc;
use std::time::Duration;

/// A webhook subscription's deliveries as this process knows them.
#[derive(Debug, Default, Clone)]
pub struct Attempt {
    in_flight: bool,
    /// The wake (id, generation) this process last POSTed.
    delivered: Option<(String, u64)>,
    /// Failed deliveries in a row, and when the next try may start.
    failures: u32,
    next_at_ms: i64,
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl<S: SegmentStore + 'static> Shard<S> {
    /// Runs until shutdown (started by the server once every shard's
    /// registry is whole): first the boot's resync of tails, then passes.
    pub async fn run_subscriptions(self: Rc<Self>) {
        self.resync_subs().await;
        loop {
            let Some(sleep) = self.sleep.borrow().clone() else { return };
            // A shard that owns no subscription sleeps until told (an idle
            // server does not wake for nothing); one that does also looks
            // every tick for leases run out and retries come due.
            if self.state.borrow().subs.is_empty() {
                self.subs_due.wait().await;
            } else {
                futures_lite::future::or(self.subs_due.wait(), sleep(Duration::from_millis(SUBSCRIPTION_TICK_MS)))
                    .await;
            }
            if self.stopping.get() {
                return;
            }
            // In a cell only the leader hands out work.
            if self.leads() {
                if self.subs_resync.take() {
                    self.resync_subs().await;
                }
                self.subs_pass().await;
            }
        }
    }

    async fn subs_pass(self: &Rc<Self>) {
        let Some(env) = self.subs_env.borrow().clone() else { return };
        let now = (self.now_ms)();
        let due: Vec<(SubId, Delivery)> = self
            .state
            .borrow()
            .subs
            .iter()
            .filter(|(_, e)| e.sub.pending())
            .map(|(id, e)| (id.clone(), e.sub.config.delivery.clone()))
            .collect();
        for (id, delivery) in due {
            match delivery {
                Delivery::PullWake { wake_stream } => self.signal_pull(&id, &wake_stream, now).await,
                Delivery::Webhook { url } => self.start_webhook(&env, &id, url, now),
            }
        }
    }

    /// Appends a wake event to a pull-wake subscription's wake stream:
    /// once per wake, and again when a worker's claim ran out of lease
    /// unacknowledged (so other workers hear the work is free). The record
    /// saying so is written first.
    async fn signal_pull(&self, id: &SubId, wake_stream: &str, now: i64) {
        let sub = {
            let st = self.state.borrow();
            let Some(mut sub) = st.subs.get(id).map(|e| e.sub.clone()) else { return };
            if !sub.signal_due(now) {
                return;
            }
            sub.signalled = true;
            sub.free_expired(now);
            sub
        };
        let event = view::wake_event(&sub, now).to_string().into_bytes();
        if let Err(e) = self.commit_sub(id, Some(sub)).await {
            tracing::warn!("shard {}: subscription {}: {e}", self.id, id.1);
            return;
        }
        let Ok(key) = id.0.key_of(wake_stream) else { return };
        let surface = match id.0 {
            Root::V1 => Surface::V1,
            Root::Ds(_) => Surface::Ds,
        };
        let append = AppendReq {
            content_type: Some("application/json".into()),
            body: event,
            close: false,
            stream_seq: None,
            producer: None,
            if_match: None,
        };
        let req = ShardRequest::Stream { key, surface, if_incarnation: None, op: StreamOp::Append(append) };
        if let Err(e) = Box::pin(self.dispatch(req)).await {
            // Claims still find the work; the next wake writes again.
            tracing::warn!("shard {}: subscription {}: wake stream {wake_stream}: {e}", self.id, id.1);
        }
    }

    /// Begins a webhook wake and hands its POST to a task of its own,
    /// unless one is under way, waiting for a retry, or delivered and still
    /// within its lease.
    fn start_webhook(self: &Rc<Self>, env: &Rc<SubsEnv>, id: &SubId, url: String, now: i64) {
        let a = self.deliveries.borrow().get(id).cloned().unwrap_or_default();
        if a.in_flight || a.next_at_ms > now {
            return;
        }
        let Some(mut sub) = self.state.borrow().subs.get(id).map(|e| e.sub.clone()) else { return };
        let current = sub.wake.as_ref().map(|w| ((w.id.clone(), w.generation), w.lease_until_ms));
        if let Some((wake, lease_until)) = current {
            if a.failures == 0 && a.delivered.as_ref() == Some(&wake) && lease_until > now {
                return;
            }
        }
        let Ok(token) = super::api::new_token() else { return };
        let wake = sub.begin_wake(now, None, &token).clone();
        let body = view::delivery(&sub, &wake, &token).to_string().into_bytes();
        let lsn = match self.log_sub(id, Some(sub)) {
            Ok(lsn) => lsn,
            Err(e) => {
                tracing::warn!("shard {}: subscription {}: {e}", self.id, id.1);
                return;
            }
        };
        let delivered = Some((wake.id.clone(), wake.generation));
        self.deliveries.borrow_mut().insert(id.clone(), Attempt { in_flight: true, delivered, ..a });
        let task = self.clone().post_wake(env.clone(), id.clone(), url, body, (wake.id, wake.generation), lsn);
        (env.spawn)(Box::pin(task));
    }

    /// One POST, once its wake's record is durable; then the outcome.
    async fn post_wake(
        self: Rc<Self>,
        env: Rc<SubsEnv>,
        id: SubId,
        url: String,
        body: Vec<u8>,
        wake: (String, u64),
        lsn: u64,
    ) {
        let ok = match self.log.durable(lsn).await {
            Err(_) => false,
            Ok(()) => {
                let signature = env.key.load().signature_header(unix_secs(), &body);
                let headers = vec![
                    ("content-type".to_string(), "application/json".to_string()),
                    ("webhook-signature".to_string(), signature),
                ];
                match env.outbound.post(url, headers, body).await {
                    Ok((status, answer)) if (200..300).contains(&status) => {
                        self.answered(&id, &wake, &answer).await;
                        true
                    }
                    Ok((status, _)) => {
                        tracing::debug!("shard {}: subscription {}: the receiver answered {status}", self.id, id.1);
                        false
                    }
                    Err(e) => {
                        tracing::debug!("shard {}: subscription {}: delivery failed: {e}", self.id, id.1);
                        false
                    }
                }
            }
        };
        let now = (self.now_ms)();
        let random = self.jitter_secs();
        {
            let mut stats = self.stats.borrow_mut();
            stats.webhook_deliveries += 1;
            stats.webhook_failures += u64::from(!ok);
        }
        if let Some(a) = self.deliveries.borrow_mut().get_mut(&id) {
            a.in_flight = false;
            a.failures = if ok { 0 } else { a.failures + 1 };
            a.next_at_ms = if ok { 0 } else { now + retry_delay_ms(a.failures, random) as i64 };
        }
        self.subs_due.notify();
    }

    /// A 2xx answer: `{"done":true}` acknowledges the wake at once.
    async fn answered(&self, id: &SubId, wake: &(String, u64), answer: &[u8]) {
        let done = serde_json::from_slice::<Value>(answer).ok().and_then(|v| v.get("done")?.as_bool()) == Some(true);
        if !done {
            return;
        }
        let Some(mut sub) = self.state.borrow().subs.get(id).map(|e| e.sub.clone()) else { return };
        if sub.auto_ack(&wake.0, wake.1) {
            if let Err(e) = self.commit_sub(id, Some(sub)).await {
                tracing::warn!("shard {}: subscription {}: {e}", self.id, id.1);
            }
        }
    }
}
