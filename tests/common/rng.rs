//! xorshift64*: a small generator, reproducible from its seed, for the
//! seeded tests (`reclaim_model.rs`, `cell_sim.rs`). Included with `#[path]`
//! where a test does not use `common/mod.rs`.

// Each test uses only some of it.
#![allow(dead_code)]

pub struct Rng(u64);

impl Rng {
    /// Any seed, 0 included, spread into a non-zero state.
    pub fn from_seed(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `per_million` / 1,000,000.
    pub fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }

    /// Random bytes, 1..=max of them (0..=max with `empty_ok`).
    pub fn bytes(&mut self, max: u64, empty_ok: bool) -> Vec<u8> {
        let len = self.below(max + 1).max(!empty_ok as u64);
        (0..len).map(|_| self.next() as u8).collect()
    }
}
