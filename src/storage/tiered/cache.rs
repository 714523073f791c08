//! The block cache of remote segments: fetched blocks of
//! `TIER_BLOCK_BYTES`, at most `TIER_CACHE_BYTES` of them per shard, least
//! recently used evicted first.

use crate::limits::{TIER_BLOCK_BYTES, TIER_CACHE_BYTES};
use std::collections::HashMap;
use std::rc::Rc;

struct Cached {
    bytes: Rc<[u8]>,
    used: u64,
}

/// Fetched blocks of remote segments, least recently used evicted first.
#[derive(Default)]
pub(super) struct BlockCache {
    /// By (segment, block): the bytes and when they were last used.
    blocks: HashMap<(u64, u64), Cached>,
    bytes: u64,
    clock: u64,
}

impl BlockCache {
    pub(super) fn get(&mut self, segment: u64, block: u64) -> Option<Rc<[u8]>> {
        self.clock += 1;
        let clock = self.clock;
        self.blocks.get_mut(&(segment, block)).map(|c| {
            c.used = clock;
            c.bytes.clone()
        })
    }

    /// Inserts blocks `first..` of `segment`, then evicts the least recently
    /// used others until the cache is within its budget.
    pub(super) fn insert(&mut self, segment: u64, first: u64, bytes: &[u8]) {
        let fresh: Vec<u64> = (first..).take(bytes.len().div_ceil(TIER_BLOCK_BYTES as usize)).collect();
        for (&block, chunk) in fresh.iter().zip(bytes.chunks(TIER_BLOCK_BYTES as usize)) {
            self.clock += 1;
            if let Some(old) = self.blocks.insert((segment, block), Cached { bytes: Rc::from(chunk), used: self.clock })
            {
                self.bytes -= old.bytes.len() as u64;
            }
            self.bytes += chunk.len() as u64;
        }
        while self.bytes > TIER_CACHE_BYTES {
            let victim = self
                .blocks
                .iter()
                .filter(|(k, _)| k.0 != segment || !fresh.contains(&k.1))
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| *k);
            let Some(k) = victim else { break };
            let gone = self.blocks.remove(&k).expect("the victim is cached");
            self.bytes -= gone.bytes.len() as u64;
        }
    }

    pub(super) fn forget(&mut self, segment: u64) {
        let bytes = &mut self.bytes;
        self.blocks.retain(|k, c| {
            let keep = k.0 != segment;
            if !keep {
                *bytes -= c.bytes.len() as u64;
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_cache_stays_within_budget_and_keeps_what_it_just_fetched() {
        let mut c = BlockCache::default();
        let block = vec![7u8; TIER_BLOCK_BYTES as usize];
        let n = TIER_CACHE_BYTES / TIER_BLOCK_BYTES;
        for i in 0..n + 5 {
            c.insert(1, i, &block);
            assert!(c.bytes <= TIER_CACHE_BYTES);
        }
        assert!(c.get(1, 0).is_none(), "the oldest went first");
        assert!(c.get(1, n + 4).is_some());
        // A fetch larger than the budget is kept whole until the next one.
        let big = vec![1u8; (TIER_CACHE_BYTES + TIER_BLOCK_BYTES) as usize];
        c.insert(2, 0, &big);
        assert!(c.get(2, 0).is_some() && c.get(2, n).is_some());
        c.forget(2);
        assert_eq!(c.bytes, 0);
    }
}
