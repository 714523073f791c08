//! Idempotent producers (F31): epoch and sequence decide accept, duplicate
//! or error.

use crate::protocol::error::Error;

/// An idempotent producer's state on one stream (F31).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerState {
    pub epoch: u64,
    pub last_seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerVerdict {
    /// Write it and store (epoch, seq).
    Accept,
    /// Already written: answer as the original did, write nothing.
    Duplicate { epoch: u64, highest_seq: u64 },
}

/// F31, in its order of checks. Changes nothing.
pub fn check_producer(state: Option<&ProducerState>, epoch: u64, seq: u64) -> Result<ProducerVerdict, Error> {
    let Some(st) = state else {
        // Unknown producer: it must start at seq 0 (any epoch).
        return if seq == 0 { Ok(ProducerVerdict::Accept) } else { Err(Error::SeqGap { expected: 0, received: seq }) };
    };
    if epoch < st.epoch {
        return Err(Error::StaleEpoch { current: st.epoch });
    }
    if epoch > st.epoch {
        return if seq == 0 {
            Ok(ProducerVerdict::Accept)
        } else {
            Err(Error::BadRequest(format!("a new producer epoch must start at Producer-Seq 0, got {seq}")))
        };
    }
    if seq <= st.last_seq {
        Ok(ProducerVerdict::Duplicate { epoch, highest_seq: st.last_seq })
    } else if seq == st.last_seq + 1 {
        Ok(ProducerVerdict::Accept)
    } else {
        Err(Error::SeqGap { expected: st.last_seq + 1, received: seq })
    }
}

/// How much producer state a stream may hold: at most `max_per_stream`
/// producers, each forgotten once its last accepted append is more than
/// `idle_expiry_ms` old (then its next append starts it anew, from seq 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerPolicy {
    pub max_per_stream: usize,
    pub idle_expiry_ms: i64,
}

impl ProducerPolicy {
    /// The policy of `--max-producers-per-stream` and `--producer-idle-expiry-secs`.
    pub fn new(max_per_stream: usize, idle_expiry_secs: u64) -> Self {
        let idle_expiry_ms = i64::try_from(idle_expiry_secs).unwrap_or(i64::MAX).saturating_mul(1000);
        ProducerPolicy { max_per_stream, idle_expiry_ms }
    }
}

impl Default for ProducerPolicy {
    /// The defaults of both flags (what a shard holds before it is told).
    fn default() -> Self {
        use crate::limits::{PRODUCERS_PER_STREAM_DEFAULT, PRODUCER_IDLE_EXPIRY_SECS_DEFAULT};
        ProducerPolicy::new(PRODUCERS_PER_STREAM_DEFAULT, PRODUCER_IDLE_EXPIRY_SECS_DEFAULT)
    }
}

/// Whether a producer whose last accepted append was written at `last_ms`
/// is forgotten at `now_ms`. A clock that went back forgets nothing.
pub fn producer_idle(policy: &ProducerPolicy, last_ms: i64, now_ms: i64) -> bool {
    now_ms.saturating_sub(last_ms) > policy.idle_expiry_ms
}

/// Whether a producer may write: one the stream holds state for always may;
/// a new one only while the stream holds fewer than the bound (`held`
/// counts the producers not idle). Changes nothing.
pub fn admit_producer(policy: &ProducerPolicy, known: bool, held: usize) -> Result<(), Error> {
    if known || held < policy.max_per_stream {
        Ok(())
    } else {
        Err(Error::ProducerLimit { limit: policy.max_per_stream as u64 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ps(epoch: u64, last_seq: u64) -> ProducerState {
        ProducerState { epoch, last_seq }
    }

    #[test]
    fn producer_rules_f31() {
        assert_eq!(check_producer(None, 5, 0), Ok(ProducerVerdict::Accept));
        assert_eq!(check_producer(None, 0, 3), Err(Error::SeqGap { expected: 0, received: 3 }));
        assert_eq!(check_producer(Some(&ps(2, 4)), 1, 5), Err(Error::StaleEpoch { current: 2 }));
        assert_eq!(check_producer(Some(&ps(2, 4)), 3, 0), Ok(ProducerVerdict::Accept));
        assert!(matches!(check_producer(Some(&ps(2, 4)), 3, 1), Err(Error::BadRequest(_))));
        assert_eq!(check_producer(Some(&ps(2, 4)), 2, 1), Ok(ProducerVerdict::Duplicate { epoch: 2, highest_seq: 4 }));
        assert_eq!(check_producer(Some(&ps(2, 4)), 2, 5), Ok(ProducerVerdict::Accept));
        assert_eq!(check_producer(Some(&ps(2, 4)), 2, 7), Err(Error::SeqGap { expected: 5, received: 7 }));
    }

    #[test]
    fn a_new_producer_is_admitted_below_the_bound_only() {
        let policy = ProducerPolicy::new(3, 60);
        assert_eq!(admit_producer(&policy, false, 0), Ok(()));
        assert_eq!(admit_producer(&policy, false, 2), Ok(()));
        assert_eq!(admit_producer(&policy, false, 3), Err(Error::ProducerLimit { limit: 3 }));
        // A producer the stream knows keeps writing at (or past) the bound.
        assert_eq!(admit_producer(&policy, true, 3), Ok(()));
        assert_eq!(admit_producer(&policy, true, 9), Ok(()));
    }

    #[test]
    fn a_producer_is_idle_only_past_the_expiry() {
        let policy = ProducerPolicy::new(1, 2);
        assert_eq!(policy.idle_expiry_ms, 2_000);
        assert!(!producer_idle(&policy, 1_000, 3_000), "exactly the expiry old: kept");
        assert!(producer_idle(&policy, 1_000, 3_001));
        assert!(!producer_idle(&policy, 5_000, 1_000), "a clock that went back forgets nothing");
        let forever = ProducerPolicy::new(1, u64::MAX);
        assert!(!producer_idle(&forever, i64::MIN, i64::MAX), "no overflow into forgetting");
    }
}
