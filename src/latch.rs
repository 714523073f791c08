//! A countdown latch that any thread counts down and executor tasks await.
//!
//! Boot and shutdown cross threads: the main thread tells the shards "every
//! shard recovered, start serving", the signal thread tells them "stop", and
//! the shards wait for one another before the final sync. Each of those is a
//! latch: counted down to zero once, it wakes every task waiting on it, on
//! whatever executor (glommio delivers a waker woken from another thread
//! through the executor's eventfd). Nothing polls.

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

/// Counted down by any thread; awaited by a fixed set of waiters, each with
/// its own slot (a shard waits in the slot of its id), so neither side ever
/// takes a lock.
pub struct Latch {
    left: AtomicUsize,
    wakers: Box<[AtomicWaker]>,
}

impl Latch {
    /// A latch that opens after `count` calls to `count_down`, awaited by at
    /// most `waiters` tasks at once (slots `0..waiters`).
    pub fn new(count: usize, waiters: usize) -> Latch {
        Latch { left: AtomicUsize::new(count), wakers: (0..waiters).map(|_| AtomicWaker::new()).collect() }
    }

    pub fn is_open(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
    }

    /// One arrival; the last one wakes every waiter. Extra calls do nothing.
    pub fn count_down(&self) {
        let prev = self.left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if prev == Ok(1) {
            for w in self.wakers.iter() {
                w.wake();
            }
        }
    }

    /// Resolves once the latch is open; `slot` is this waiter's own.
    pub fn wait(&self, slot: usize) -> LatchWait<'_> {
        assert!(slot < self.wakers.len(), "latch slot {slot} of {}", self.wakers.len());
        LatchWait { latch: self, slot }
    }
}

pub struct LatchWait<'a> {
    latch: &'a Latch,
    slot: usize,
}

impl Future for LatchWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.latch.is_open() {
            return Poll::Ready(());
        }
        self.latch.wakers[self.slot].register(cx.waker());
        // Opened between the check and the registration: the opener may have
        // woken the slot before our waker was in it.
        if self.latch.is_open() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn opens_after_count_and_wakes_waiters_on_other_threads() {
        let latch = Arc::new(Latch::new(2, 3));
        let waiters: Vec<_> = (0..3)
            .map(|slot| {
                let l = latch.clone();
                std::thread::spawn(move || futures::executor::block_on(l.wait(slot)))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        latch.count_down();
        assert!(!latch.is_open());
        std::thread::sleep(Duration::from_millis(20));
        assert!(waiters.iter().all(|w| !w.is_finished()), "one of two arrivals opens nothing");
        latch.count_down();
        for w in waiters {
            w.join().unwrap();
        }
        assert!(latch.is_open());
        latch.count_down();
        assert!(latch.is_open(), "extra arrivals keep it open");
        futures::executor::block_on(latch.wait(0));
    }

    #[test]
    #[should_panic(expected = "latch slot 2 of 2")]
    fn a_slot_beyond_the_waiters_is_a_bug() {
        let latch = Latch::new(1, 2);
        let _wait = latch.wait(2);
    }
}
