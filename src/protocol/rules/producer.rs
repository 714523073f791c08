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
}
