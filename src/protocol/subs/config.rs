//! A subscription's configuration: a PUT's JSON body, checked and
//! normalised (defaults filled in, explicit streams sorted and deduplicated),
//! so that two PUTs asking the same thing compare equal and a re-confirm is
//! told apart from a different config (200 vs 409).

use super::{glob, url, Root};
use crate::limits::{
    SUBSCRIPTION_FIELD_BYTES_MAX, SUBSCRIPTION_LEASE_MS_DEFAULT, SUBSCRIPTION_LEASE_MS_MAX, SUBSCRIPTION_LEASE_MS_MIN,
    SUBSCRIPTION_STREAMS_MAX,
};
use crate::protocol::Error;
use serde_json::{Map, Value};

/// How a subscription is delivered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Delivery {
    /// POSTed, signed, to `url`.
    Webhook { url: String },
    /// Wake events appended to the stream at `wake_stream` (a path under
    /// the root); workers claim the work.
    PullWake { wake_stream: String },
}

/// A subscription's normalised configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubConfig {
    pub delivery: Delivery,
    pub pattern: Option<String>,
    /// The explicit streams it was created with (sorted, no duplicates).
    pub streams: Vec<String>,
    pub lease_ttl_ms: u64,
    pub description: Option<String>,
}

impl SubConfig {
    /// The API's name for its delivery: `webhook` or `pull-wake`.
    pub fn type_name(&self) -> &'static str {
        match self.delivery {
            Delivery::Webhook { .. } => "webhook",
            Delivery::PullWake { .. } => "pull-wake",
        }
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::BadRequest(msg.into())
}

/// The body of a request as a JSON object.
pub fn object(body: &[u8]) -> Result<Map<String, Value>, Error> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(bad("the body must be a JSON object")),
        Err(e) => Err(bad(format!("the body is not valid JSON: {e}"))),
    }
}

/// A string field, at most `SUBSCRIPTION_FIELD_BYTES_MAX` bytes.
pub fn string_field(m: &Map<String, Value>, name: &str) -> Result<Option<String>, Error> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= SUBSCRIPTION_FIELD_BYTES_MAX => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(bad(format!("{name} is longer than {SUBSCRIPTION_FIELD_BYTES_MAX} bytes"))),
        Some(_) => Err(bad(format!("{name} must be a string"))),
    }
}

/// A list of stream paths under `root` (`streams`), checked, sorted, deduplicated.
pub fn stream_list(root: &Root, v: Option<&Value>) -> Result<Vec<String>, Error> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("streams must be an array of stream paths")),
    };
    if items.len() > SUBSCRIPTION_STREAMS_MAX {
        return Err(bad(format!("a subscription tracks at most {SUBSCRIPTION_STREAMS_MAX} streams")));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::String(path) = item else { return Err(bad("streams must be an array of stream paths")) };
        root.key_of(path)?;
        out.push(path.clone());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Parses and checks a PUT body. `loopback_server`: the server listens on
/// loopback (see `url`).
pub fn parse(body: &[u8], root: &Root, loopback_server: bool) -> Result<SubConfig, Error> {
    let m = object(body)?;
    let delivery = match string_field(&m, "type")?.as_deref() {
        Some("webhook") => {
            let hook = match m.get("webhook") {
                Some(Value::Object(h)) => h,
                _ => return Err(bad("a webhook subscription needs webhook: {\"url\": ...}")),
            };
            let url = string_field(hook, "url")?.ok_or_else(|| bad("webhook.url is missing"))?;
            url::check(&url, loopback_server)?;
            Delivery::Webhook { url }
        }
        Some("pull-wake") => {
            let wake_stream = string_field(&m, "wake_stream")?.ok_or_else(|| bad("pull-wake needs wake_stream"))?;
            root.key_of(&wake_stream)?;
            Delivery::PullWake { wake_stream }
        }
        Some(other) => return Err(bad(format!("unknown subscription type {other:?} (webhook or pull-wake)"))),
        None => return Err(bad("type is missing (webhook or pull-wake)")),
    };
    let pattern = string_field(&m, "pattern")?;
    if let Some(p) = &pattern {
        glob::validate(p)?;
    }
    let streams = stream_list(root, m.get("streams"))?;
    if pattern.is_none() && streams.is_empty() {
        return Err(bad("a subscription needs a pattern or streams"));
    }
    let lease_ttl_ms = match m.get("lease_ttl_ms") {
        None | Some(Value::Null) => SUBSCRIPTION_LEASE_MS_DEFAULT,
        Some(v) => v
            .as_u64()
            .filter(|ms| (SUBSCRIPTION_LEASE_MS_MIN..=SUBSCRIPTION_LEASE_MS_MAX).contains(ms))
            .ok_or_else(|| {
                bad(format!(
                    "lease_ttl_ms must be an integer from {SUBSCRIPTION_LEASE_MS_MIN} to {SUBSCRIPTION_LEASE_MS_MAX}"
                ))
            })?,
    };
    let description = string_field(&m, "description")?;
    Ok(SubConfig { delivery, pattern, streams, lease_ttl_ms, description })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(body: &str) -> Result<SubConfig, Error> {
        parse(body.as_bytes(), &Root::V1, true)
    }

    #[test]
    fn a_webhook_config_is_normalised() {
        let a = p(r#"{"type":"webhook","pattern":"events/*","webhook":{"url":"http://127.0.0.1:9/h"}}"#).unwrap();
        assert_eq!(a.lease_ttl_ms, SUBSCRIPTION_LEASE_MS_DEFAULT);
        assert_eq!(a.type_name(), "webhook");
        let b = p(
            r#"{"webhook":{"url":"http://127.0.0.1:9/h"},"lease_ttl_ms":30000,"pattern":"events/*","type":"webhook"}"#,
        )
        .unwrap();
        assert_eq!(a, b, "field order and defaults do not make a different config");
        let c =
            p(r#"{"type":"webhook","streams":["b/x","a/y","b/x"],"webhook":{"url":"http://127.0.0.1:9/h"}}"#).unwrap();
        assert_eq!(c.streams, vec!["a/y".to_string(), "b/x".to_string()]);
        assert_ne!(a, c);
    }

    #[test]
    fn bad_bodies_say_why() {
        for body in [
            "",
            "[]",
            "{",
            r#"{"type":"carrier-pigeon","pattern":"a"}"#,
            r#"{"pattern":"a","webhook":{"url":"http://127.0.0.1/"}}"#,
            r#"{"type":"webhook","pattern":"a"}"#,
            r#"{"type":"webhook","webhook":{"url":"http://127.0.0.1/"}}"#,
            r#"{"type":"webhook","pattern":"a//b","webhook":{"url":"http://127.0.0.1/"}}"#,
            r#"{"type":"webhook","pattern":"a","webhook":{"url":"http://127.0.0.1/"},"lease_ttl_ms":5}"#,
            r#"{"type":"webhook","streams":["a/../b"],"webhook":{"url":"http://127.0.0.1/"}}"#,
            r#"{"type":"pull-wake","pattern":"a"}"#,
            r#"{"type":"webhook","pattern":7,"webhook":{"url":"http://127.0.0.1/"}}"#,
        ] {
            assert!(matches!(p(body), Err(Error::BadRequest(_))), "{body}");
        }
        let unsafe_url = p(r#"{"type":"webhook","pattern":"a","webhook":{"url":"http://10.0.0.1/hook"}}"#);
        assert!(matches!(unsafe_url, Err(Error::Refused { status: 400, .. })));
    }
}
