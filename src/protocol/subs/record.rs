//! A subscription's record body (`persist::KIND_SUBSCRIPTION`): a version
//! byte, then JSON. JSON because the record is small, written only when a
//! subscription changes (not per append), and read by later builds that
//! may add fields (unknown ones are ignored, missing ones refused).
//!
//! Each record carries the subscription's whole state, so the latest one
//! alone rebuilds it; a record with no state is its delete (tombstone).

use super::{Root, Subscription};
use crate::protocol::persist::Malformed;

/// The layout this build writes.
const VERSION: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubRecord {
    pub root: Root,
    pub id: String,
    /// None: deleted.
    pub sub: Option<Subscription>,
}

impl SubRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        serde_json::to_writer(&mut out, self).expect("a subscription serializes");
        out
    }

    pub fn decode(body: &[u8]) -> Result<SubRecord, Malformed> {
        match body.split_first() {
            Some((&VERSION, json)) => serde_json::from_slice(json).map_err(|_| Malformed),
            _ => Err(Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::parse;
    use super::*;
    use crate::protocol::Offset;

    #[test]
    fn a_record_round_trips_and_damage_is_refused() {
        let body = r#"{"type":"webhook","pattern":"events/*","webhook":{"url":"http://127.0.0.1:9/h"}}"#;
        let config = parse(body.as_bytes(), &Root::V1, true).unwrap();
        let mut sub = Subscription::new(Root::V1, "s".into(), config, "http://h:1".into());
        sub.note_tail("events/a", Offset::new(0, 4), "c1");
        sub.begin_wake(5, None, "token");
        let rec = SubRecord { root: Root::V1, id: "s".into(), sub: Some(sub) };
        assert_eq!(SubRecord::decode(&rec.encode()).unwrap(), rec);
        let gone = SubRecord { root: Root::Ds("bkt1".into()), id: "s".into(), sub: None };
        assert_eq!(SubRecord::decode(&gone.encode()).unwrap(), gone);
        let mut bytes = rec.encode();
        bytes[0] = 2;
        assert!(SubRecord::decode(&bytes).is_err(), "a newer layout");
        assert!(SubRecord::decode(&bytes[..1]).is_err());
        assert!(SubRecord::decode(&[]).is_err());
    }
}
