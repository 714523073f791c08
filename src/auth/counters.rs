//! Per-token request counts for /metrics. Each shard counts into its own
//! slot (its own cache line), so counting shares nothing between cores;
//! the counts of a token live as long as its name stays in the auth file,
//! across reloads.

use std::sync::atomic::{AtomicU64, Ordering};

/// What is counted per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Every request that presented the token.
    Requests,
    /// Answered 403: the bucket is covered, the right is not granted.
    Forbidden,
    /// Answered 404 because the token's grants do not cover the bucket.
    Hidden,
}

/// One shard's counts of one token, alone on its cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Slot {
    counts: [AtomicU64; 3],
}

/// A token's counts, one slot per shard.
#[derive(Debug)]
pub struct TokenCounters {
    slots: Box<[Slot]>,
}

impl TokenCounters {
    pub fn new(shards: usize) -> TokenCounters {
        TokenCounters { slots: (0..shards).map(|_| Slot::default()).collect() }
    }

    /// One more, on `shard`'s slot. Only that shard's thread writes it, so a
    /// load and a store suffice (no read-modify-write across cores).
    pub fn add(&self, shard: usize, what: Count) {
        let c = &self.slots[shard].counts[what as usize];
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    pub fn get(&self, shard: usize, what: Count) -> u64 {
        self.slots[shard].counts[what as usize].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shard_counts_on_its_own_line() {
        let c = TokenCounters::new(3);
        c.add(1, Count::Requests);
        c.add(1, Count::Requests);
        c.add(2, Count::Hidden);
        assert_eq!(c.get(1, Count::Requests), 2);
        assert_eq!(c.get(0, Count::Requests), 0);
        assert_eq!(c.get(2, Count::Hidden), 1);
        assert_eq!(c.get(2, Count::Forbidden), 0);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }
}
