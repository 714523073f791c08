//! Bucket quotas: how many streams and how many bytes a bucket holds across
//! every shard, and the limits the auth file sets on them. Pure atomics, no
//! I/O, no lock.
//!
//! Every bucket named by a `[[bucket]]` entry has one [`BucketUsage`],
//! shared by every shard (a bucket's streams are spread over all of them).
//! A write that would grow a bucket first *reserves* what it adds
//! ([`BucketUsage::reserve`]: add, then compare, then take back if over),
//! so concurrent writes on different shards can never together pass a
//! limit; a write that fails gives its reservation back. Usage counts
//! streams from their create to their delete (or expiry), and bytes as
//! each stream's retained data (tail minus trim point, after JSON
//! normalisation) plus its retained snapshots' bodies.
//!
//! A counter, once made, lives for the life of the process (a later reload
//! may drop and re-add its limits without losing count); the shards seed it
//! from their streams before its limits are enforced (`shard::quota`).

use crate::protocol::QuotaKind;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The limits of one bucket; None: not limited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_streams: Option<u64>,
    pub max_bytes: Option<u64>,
}

/// What a refused reservation would have done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    pub quota: QuotaKind,
    pub limit: u64,
    /// The usage seen (other writes in flight included).
    pub used: u64,
    pub requested: u64,
}

/// One bucket's usage and limits, shared by every shard.
#[derive(Debug)]
pub struct BucketUsage {
    streams: AtomicU64,
    bytes: AtomicU64,
    max_streams: AtomicU64,
    max_bytes: AtomicU64,
}

impl Default for BucketUsage {
    fn default() -> Self {
        BucketUsage {
            streams: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            max_streams: AtomicU64::new(u64::MAX),
            max_bytes: AtomicU64::new(u64::MAX),
        }
    }
}

impl BucketUsage {
    /// Takes `n` of `used` unless that passes `max`.
    fn take(used: &AtomicU64, max: &AtomicU64, n: u64, quota: QuotaKind) -> Result<(), Exceeded> {
        if n == 0 {
            return Ok(());
        }
        let limit = max.load(Ordering::Acquire);
        let before = used.fetch_add(n, Ordering::AcqRel);
        if before.saturating_add(n) > limit {
            used.fetch_sub(n, Ordering::AcqRel);
            return Err(Exceeded { quota, limit, used: before, requested: n });
        }
        Ok(())
    }

    /// Reserves `streams` streams and `bytes` bytes, or refuses without
    /// changing anything. The reservation is given back when dropped unless
    /// [`Reservation::keep`] is called (the write succeeded).
    pub fn reserve(self: &Arc<Self>, streams: u64, bytes: u64) -> Result<Reservation, Exceeded> {
        Self::take(&self.streams, &self.max_streams, streams, QuotaKind::MaxStreams)?;
        if let Err(e) = Self::take(&self.bytes, &self.max_bytes, bytes, QuotaKind::MaxBytes) {
            self.streams.fetch_sub(streams, Ordering::AcqRel);
            return Err(e);
        }
        Ok(Reservation { usage: self.clone(), streams, bytes })
    }

    /// Counts what exists (seeding from a shard's streams), unconditionally.
    pub fn add(&self, streams: u64, bytes: u64) {
        self.streams.fetch_add(streams, Ordering::AcqRel);
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Gives back what a delete, trim or failed write freed.
    pub fn release(&self, streams: u64, bytes: u64) {
        let s = self.streams.fetch_sub(streams, Ordering::AcqRel);
        let b = self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(s >= streams && b >= bytes, "released more than was counted");
    }

    /// Counts these instead of what was counted: in a cell, where one
    /// shard a node counts every stream of the bucket, what its state holds
    /// when its replica begins to lead.
    pub fn reset(&self, streams: u64, bytes: u64) {
        self.streams.store(streams, Ordering::Release);
        self.bytes.store(bytes, Ordering::Release);
    }

    pub fn streams(&self) -> u64 {
        self.streams.load(Ordering::Acquire)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    pub fn limits(&self) -> Limits {
        let l = |a: &AtomicU64| Some(a.load(Ordering::Acquire)).filter(|&v| v != u64::MAX);
        Limits { max_streams: l(&self.max_streams), max_bytes: l(&self.max_bytes) }
    }

    fn set_limits(&self, l: Limits) {
        self.max_streams.store(l.max_streams.unwrap_or(u64::MAX), Ordering::Release);
        self.max_bytes.store(l.max_bytes.unwrap_or(u64::MAX), Ordering::Release);
    }
}

/// Room taken for a write in flight.
#[must_use = "a reservation is given back when dropped; keep() it once the write succeeded"]
#[derive(Debug)]
pub struct Reservation {
    usage: Arc<BucketUsage>,
    streams: u64,
    bytes: u64,
}

impl Reservation {
    /// The write succeeded: what it reserved is now used.
    pub fn keep(mut self) {
        self.streams = 0;
        self.bytes = 0;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.streams > 0 || self.bytes > 0 {
            self.usage.release(self.streams, self.bytes);
        }
    }
}

/// Every bucket with a usage counter. Only the thread that loads the auth
/// file (boot, then the signal thread) changes it; shards read it.
#[derive(Debug, Default)]
pub struct Quotas {
    buckets: ArcSwap<HashMap<String, Arc<BucketUsage>>>,
}

impl Quotas {
    /// The counters (a snapshot; new ones appear on reload).
    pub fn counters(&self) -> Arc<HashMap<String, Arc<BucketUsage>>> {
        self.buckets.load_full()
    }

    /// Makes a counter, without limits yet, for each bucket that has none;
    /// true when one was made (the shards must then seed it).
    pub fn add_buckets<'a>(&self, buckets: impl Iterator<Item = &'a str>) -> bool {
        let current = self.buckets.load_full();
        let mut next: Option<HashMap<String, Arc<BucketUsage>>> = None;
        for b in buckets {
            if !current.contains_key(b) {
                next.get_or_insert_with(|| (*current).clone()).entry(b.to_string()).or_default();
            }
        }
        let added = next.is_some();
        if let Some(n) = next {
            self.buckets.store(Arc::new(n));
        }
        added
    }

    /// Sets the limits of the buckets listed and lifts those of every
    /// other bucket (its counter goes on counting).
    pub fn set_limits(&self, limits: &[(String, Limits)]) {
        let given: HashMap<&str, Limits> = limits.iter().map(|(b, l)| (b.as_str(), *l)).collect();
        for (bucket, usage) in self.buckets.load().iter() {
            usage.set_limits(given.get(bucket.as_str()).copied().unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(max_streams: Option<u64>, max_bytes: Option<u64>) -> Arc<BucketUsage> {
        let u = Arc::new(BucketUsage::default());
        u.set_limits(Limits { max_streams, max_bytes });
        u
    }

    #[test]
    fn reservations_stop_at_the_limit_and_change_nothing_when_refused() {
        let u = usage(Some(2), Some(100));
        u.reserve(1, 60).unwrap().keep();
        let e = u.reserve(1, 41).unwrap_err();
        assert_eq!(e, Exceeded { quota: QuotaKind::MaxBytes, limit: 100, used: 60, requested: 41 });
        assert_eq!((u.streams(), u.bytes()), (1, 60), "a refusal takes nothing, not even the stream");
        u.reserve(1, 40).unwrap().keep();
        let e = u.reserve(1, 0).unwrap_err();
        assert_eq!(e, Exceeded { quota: QuotaKind::MaxStreams, limit: 2, used: 2, requested: 1 });
        assert!(u.reserve(0, 0).is_ok(), "nothing asked, nothing refused");
        assert!(u.reserve(0, 1).is_err());
    }

    #[test]
    fn a_dropped_reservation_is_given_back() {
        let u = usage(None, Some(10));
        {
            let _r = u.reserve(1, 10).unwrap();
            assert_eq!(u.bytes(), 10);
            assert!(u.reserve(0, 1).is_err(), "held while in flight");
        }
        assert_eq!((u.streams(), u.bytes()), (0, 0));
        u.add(3, 7);
        u.release(1, 2);
        assert_eq!((u.streams(), u.bytes()), (2, 5));
    }

    #[test]
    fn concurrent_reservations_never_pass_the_limit() {
        let u = usage(None, Some(1000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let u = u.clone();
                std::thread::spawn(move || (0..1000).filter(|_| u.reserve(0, 3).map(Reservation::keep).is_ok()).count())
            })
            .collect();
        let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(granted, 333, "exactly floor(1000 / 3) reservations fit");
        assert_eq!(u.bytes(), 999);
    }

    #[test]
    fn counters_outlive_their_limits() {
        let q = Quotas::default();
        assert!(q.add_buckets(["orders", "logs"].into_iter()));
        assert!(!q.add_buckets(["orders"].into_iter()), "no new counter");
        q.set_limits(&[("orders".into(), Limits { max_streams: Some(1), max_bytes: None })]);
        let c = q.counters();
        assert_eq!(c["orders"].limits(), Limits { max_streams: Some(1), max_bytes: None });
        assert_eq!(c["logs"].limits(), Limits::default());
        c["orders"].add(1, 5);
        q.set_limits(&[]);
        assert_eq!(q.counters()["orders"].limits(), Limits::default());
        assert_eq!(q.counters()["orders"].bytes(), 5, "lifting a limit keeps the count");
    }
}
