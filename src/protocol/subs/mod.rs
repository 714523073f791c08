//! Subscriptions: the protocol's reserved `{stream-root}/__ds/` control API
//! (durable-streams.md §A16), as pure code. A subscription is a durable
//! cursor over the streams its glob `pattern` matches and those named
//! explicitly; it is delivered by webhook (an Ed25519-signed POST) or by
//! pull-wake (events appended to a wake stream, then claimed by a worker).
//!
//! - [`glob`]: patterns (`*` one segment, `**` any number).
//! - [`url`]: which webhook URLs are safe to call (SSRF rules).
//! - [`config`]: a PUT's JSON body to a normalised [`SubConfig`].
//! - [`cursor`]: one subscription's state (cursors, wakes, fences) and the
//!   transitions claim, ack and release make.
//! - [`view`]: the JSON bodies the API answers with.
//! - [`sign`]: the server's Ed25519 webhook key, its JWK set and signatures.
//! - [`record`]: a subscription's log record body.
//!
//! The shard (`shard/subs`) keeps the table and writes the records; the HTTP
//! edge only routes (`http/route.rs`).

pub mod config;
pub mod cursor;
pub mod glob;
pub mod record;
pub mod sign;
pub mod url;
pub mod view;

pub use config::{Delivery, SubConfig};
pub use cursor::{Ack, Cursor, Link, Subscription, Wake};

use super::names::DEFAULT_BUCKET;
use super::StreamKey;

/// The stream root a subscription lives under: `/v1/stream`, or one `/ds`
/// bucket. Its streams are named by their path under that root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum Root {
    V1,
    Ds(String),
}

impl Root {
    /// The root's URL path: `/v1/stream` or `/ds/{bucket}`.
    pub fn prefix(&self) -> String {
        match self {
            Root::V1 => "/v1/stream".to_string(),
            Root::Ds(b) => format!("/ds/{b}"),
        }
    }

    /// The key the owner of subscription `id` is found by, hashed like a
    /// stream's. A `/v1` subscription's bucket is empty, which no bucket
    /// is, so the two roots never share an owner key.
    pub fn owner_key(&self, id: &str) -> StreamKey {
        let bucket = match self {
            Root::V1 => String::new(),
            Root::Ds(b) => b.clone(),
        };
        StreamKey { bucket, stream: format!("__ds/subscriptions/{id}") }
    }

    /// The path of the stream at `key` under this root, if it is under it:
    /// every stream is under `/v1/stream` (as `bucket/stream`, or `stream`
    /// in the default bucket); under `/ds/{b}` those of bucket `b`.
    pub fn path_of(&self, key: &StreamKey) -> Option<String> {
        match self {
            Root::V1 if key.bucket == DEFAULT_BUCKET => Some(key.stream.clone()),
            Root::V1 => Some(format!("{}/{}", key.bucket, key.stream)),
            Root::Ds(b) if *b == key.bucket => Some(key.stream.clone()),
            Root::Ds(_) => None,
        }
    }

    /// The stream a path under this root names (checked as the root's
    /// paths are).
    pub fn key_of(&self, path: &str) -> Result<StreamKey, super::Error> {
        match self {
            Root::V1 => {
                let (bucket, stream) = super::names::split_v1_path(path)?;
                Ok(StreamKey { bucket, stream })
            }
            Root::Ds(b) => {
                super::names::validate_ds_stream_id(path)?;
                Ok(StreamKey { bucket: b.clone(), stream: path.to_string() })
            }
        }
    }
}

/// What the control API was asked, after routing: the body is parsed by
/// the shard (`config`, `cursor`), so a bad one is a 400 with its reason.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SubOp {
    /// `GET __ds/jwks.json`.
    Jwks,
    /// `PUT subscriptions/{id}`.
    Put { body: Vec<u8> },
    /// `GET subscriptions/{id}`.
    Get,
    /// `DELETE subscriptions/{id}`.
    Delete,
    /// `POST subscriptions/{id}/streams`.
    AddStreams { body: Vec<u8> },
    /// `DELETE subscriptions/{id}/streams/{path}`.
    RemoveStream { path: String },
    /// `POST subscriptions/{id}/claim` (pull-wake).
    Claim { body: Vec<u8> },
    /// `POST .../ack` (pull-wake) and `.../callback` (webhook): the bearer
    /// token of the wake.
    Ack { body: Vec<u8>, token: Option<String> },
    /// `POST .../release` (pull-wake).
    Release { body: Vec<u8>, token: Option<String> },
}

impl SubOp {
    /// Whether it may write a record (so runs only where writes may).
    pub fn writes(&self) -> bool {
        !matches!(self, SubOp::Jwks | SubOp::Get)
    }

    /// Puts a request body read after routing into the op.
    pub fn set_body(&mut self, b: Vec<u8>) {
        match self {
            SubOp::Put { body }
            | SubOp::AddStreams { body }
            | SubOp::Claim { body }
            | SubOp::Ack { body, .. }
            | SubOp::Release { body, .. } => *body = b,
            SubOp::Jwks | SubOp::Get | SubOp::Delete | SubOp::RemoveStream { .. } => {}
        }
    }
}

/// A control API request: under which root, which subscription (none for
/// the JWK set), what, and the scheme and host the client addressed (the
/// URLs the answers and the deliveries carry are built on it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubRequest {
    pub root: Root,
    pub id: String,
    pub op: SubOp,
    pub origin: String,
}

/// A subscription id: 1-128 of `A-Z a-z 0-9 . _ -` (one path segment,
/// safe in every URL the API builds from it).
pub fn validate_id(id: &str) -> Result<(), super::Error> {
    let ok = (1..=128).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && id != "."
        && id != "..";
    if ok {
        return Ok(());
    }
    Err(super::Error::BadRequest(format!("subscription id {id:?}: 1-128 of A-Z, a-z, 0-9, '.', '_', '-'")))
}

/// How long to wait before retrying a webhook delivery that failed
/// `failures` times in a row: 1 s doubling to 60 s, within 20 % either way
/// (`random`: any number; its remainder picks the point), never past 60 s.
pub fn retry_delay_ms(failures: u32, random: u64) -> u64 {
    use crate::limits::{WEBHOOK_RETRY_MAX_MS, WEBHOOK_RETRY_MIN_MS};
    let doublings = failures.saturating_sub(1).min(16);
    let base = (WEBHOOK_RETRY_MIN_MS << doublings).min(WEBHOOK_RETRY_MAX_MS);
    (base * (80 + random % 41) / 100).min(WEBHOOK_RETRY_MAX_MS)
}

/// A refusal with a code the API names (`{"error":{"code":...}}`).
pub fn refused(status: u16, code: &str, message: impl Into<String>) -> super::Error {
    super::Error::Refused { status, code: code.to_string(), message: message.into(), holder: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_one_second_to_a_minute_with_jitter() {
        assert_eq!(retry_delay_ms(1, 20), 1_000);
        assert_eq!(retry_delay_ms(1, 0), 800);
        assert_eq!(retry_delay_ms(1, 40), 1_200);
        assert_eq!(retry_delay_ms(2, 20), 2_000);
        assert_eq!(retry_delay_ms(7, 20), 60_000);
        assert_eq!(retry_delay_ms(40, 40), 60_000, "never past the most");
        assert_eq!(retry_delay_ms(40, 0), 48_000);
    }

    #[test]
    fn ids_are_one_safe_segment() {
        for ok in ["sub-1733", "a", "A.b_c-9"] {
            assert!(validate_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "..", "a b", "é", &"x".repeat(129)] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_under_each_root() {
        let k = |b: &str, s: &str| StreamKey { bucket: b.into(), stream: s.into() };
        assert_eq!(Root::V1.path_of(&k("events", "a")).as_deref(), Some("events/a"));
        assert_eq!(Root::V1.path_of(&k(DEFAULT_BUCKET, "a")).as_deref(), Some("a"));
        assert_eq!(Root::Ds("bkt1".into()).path_of(&k("bkt1", "a")).as_deref(), Some("a"));
        assert_eq!(Root::Ds("bkt1".into()).path_of(&k("bkt2", "a")), None);
        assert_eq!(Root::V1.key_of("events/a/b").unwrap(), k("events", "a/b"));
        assert!(Root::Ds("bkt1".into()).key_of("a/b").is_err());
        assert_ne!(Root::V1.owner_key("x"), Root::Ds(DEFAULT_BUCKET.into()).owner_key("x"));
    }
}
