//! The JSON bodies of the control API's answers and of webhook deliveries
//! (durable-streams.md F105). A subscription's answer never carries a
//! webhook secret: deliveries are signed with the server's key, whose
//! public half is at `jwks_url`.

use super::config::Delivery;
use super::{Subscription, Wake};
use serde_json::{json, Value};

/// `{origin}{root}/__ds/jwks.json`.
pub fn jwks_url(s: &Subscription) -> String {
    format!("{}{}/__ds/jwks.json", s.origin, s.root.prefix())
}

/// `{origin}{root}/__ds/subscriptions/{id}/callback`.
pub fn callback_url(s: &Subscription) -> String {
    format!("{}{}/__ds/subscriptions/{}/callback", s.origin, s.root.prefix(), s.id)
}

/// The answer to PUT and GET: the configuration, how it is delivered
/// (`kid`: the signing key's id) and every tracked stream's cursor.
pub fn subscription(s: &Subscription, kid: &str) -> Value {
    let c = &s.config;
    let mut v = json!({
        "id": s.id,
        "type": c.type_name(),
        "lease_ttl_ms": c.lease_ttl_ms,
        "generation": s.generation,
        "streams": s.streams.iter().map(|(path, cur)| json!({
            "path": path,
            "link_type": cur.link.name(),
            "acked_offset": cur.acked.map_or("-1".to_string(), |o| o.to_string()),
            "tail_offset": cur.tail.map_or("-1".to_string(), |o| o.to_string()),
            "has_pending": cur.pending(),
        })).collect::<Vec<_>>(),
    });
    let m = v.as_object_mut().expect("an object");
    if let Some(p) = &c.pattern {
        m.insert("pattern".into(), json!(p));
    }
    if let Some(d) = &c.description {
        m.insert("description".into(), json!(d));
    }
    match &c.delivery {
        Delivery::Webhook { url } => {
            let signing = json!({ "alg": "ed25519", "kid": kid, "jwks_url": jwks_url(s) });
            m.insert("webhook".into(), json!({ "url": url, "signing": signing }));
        }
        Delivery::PullWake { wake_stream } => {
            m.insert("wake_stream".into(), json!(wake_stream));
        }
    }
    v
}

/// The streams of a wake, as a claim and a delivery list them.
fn wake_streams(w: &Wake) -> Vec<Value> {
    w.streams
        .iter()
        .map(|(path, tail)| json!({ "path": path, "tail_offset": tail.to_string(), "has_pending": true }))
        .collect()
}

/// The answer to a claim: the wake, its token (given out once, here) and
/// its streams.
pub fn claim(s: &Subscription, w: &Wake, token: &str) -> Value {
    json!({
        "subscription_id": s.id,
        "wake_id": w.id,
        "generation": w.generation,
        "token": token,
        "lease_ttl_ms": s.config.lease_ttl_ms,
        "streams": wake_streams(w),
    })
}

/// A webhook delivery's body.
pub fn delivery(s: &Subscription, w: &Wake, token: &str) -> Value {
    json!({
        "subscription_id": s.id,
        "wake_id": w.id,
        "generation": w.generation,
        "callback_url": callback_url(s),
        "callback_token": token,
        "lease_ttl_ms": s.config.lease_ttl_ms,
        "streams": wake_streams(w),
    })
}

/// A pull-wake event appended to the wake stream: which subscription has
/// work, and where (workers then claim it).
pub fn wake_event(s: &Subscription, now_ms: i64) -> Value {
    let pending: Vec<Value> = s
        .streams
        .iter()
        .filter(|(_, c)| c.pending())
        .map(|(p, c)| json!({ "path": p, "tail_offset": c.tail.map(|t| t.to_string()) }))
        .collect();
    json!({ "type": "wake", "subscription_id": s.id, "streams": pending, "at_ms": now_ms })
}

/// `{"ok": true, "next_wake": ...}` of an ack.
pub fn acked(next_wake: bool) -> Value {
    json!({ "ok": true, "next_wake": next_wake })
}
