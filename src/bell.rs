//! A bell any thread rings and executor tasks await, again and again: a
//! generation counter with one waker slot per waiter (a shard waits in the
//! slot of its id). The signal thread rings it when a reload needs every
//! shard to act (count its streams into new quota counters); each ring
//! wakes every waiter once, however many rings came while it was busy.

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

pub struct Bell {
    rung: AtomicU64,
    wakers: Box<[AtomicWaker]>,
}

impl Bell {
    /// A bell awaited by at most `waiters` tasks at once (slots `0..waiters`).
    pub fn new(waiters: usize) -> Bell {
        Bell { rung: AtomicU64::new(0), wakers: (0..waiters).map(|_| AtomicWaker::new()).collect() }
    }

    /// Rings: every waiter wakes. Returns this ring's number (1, 2, ...).
    pub fn ring(&self) -> u64 {
        let n = self.rung.fetch_add(1, Ordering::AcqRel) + 1;
        for w in self.wakers.iter() {
            w.wake();
        }
        n
    }

    /// Resolves with the latest ring's number once it is past `seen` (the
    /// number this waiter last got; 0 at first).
    pub fn wait(&self, slot: usize, seen: u64) -> BellWait<'_> {
        assert!(slot < self.wakers.len(), "bell slot {slot} of {}", self.wakers.len());
        BellWait { bell: self, slot, seen }
    }
}

pub struct BellWait<'a> {
    bell: &'a Bell,
    slot: usize,
    seen: u64,
}

impl Future for BellWait<'_> {
    type Output = u64;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        let now = self.bell.rung.load(Ordering::Acquire);
        if now > self.seen {
            return Poll::Ready(now);
        }
        self.bell.wakers[self.slot].register(cx.waker());
        // Rung between the check and the registration: the ringer may have
        // woken the slot before our waker was in it.
        let now = self.bell.rung.load(Ordering::Acquire);
        if now > self.seen {
            return Poll::Ready(now);
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
    fn each_ring_wakes_every_waiter_on_other_threads() {
        let bell = Arc::new(Bell::new(2));
        let (woke_tx, woke_rx) = std::sync::mpsc::channel();
        let waiters: Vec<_> = (0..2)
            .map(|slot| {
                let (b, woke) = (bell.clone(), woke_tx.clone());
                std::thread::spawn(move || {
                    let first = futures::executor::block_on(b.wait(slot, 0));
                    woke.send(first).unwrap();
                    let second = futures::executor::block_on(b.wait(slot, first));
                    (first, second)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        assert!(waiters.iter().all(|w| !w.is_finished()), "nothing rang yet");
        assert_eq!(bell.ring(), 1);
        // Both saw the first ring (however late a thread started) before
        // the second: a thread that started after both rings would see
        // ring 2 first and wait for a third.
        let firsts = [woke_rx.recv().unwrap(), woke_rx.recv().unwrap()];
        assert_eq!(firsts, [1, 1]);
        std::thread::sleep(Duration::from_millis(20));
        assert!(waiters.iter().all(|w| !w.is_finished()), "one ring wakes each waiter once");
        assert_eq!(bell.ring(), 2);
        for w in waiters {
            let (first, second) = w.join().unwrap();
            assert_eq!((first, second), (1, 2));
        }
        // Rings while nobody waited are not lost: the next wait sees them.
        bell.ring();
        assert_eq!(futures::executor::block_on(bell.wait(0, 2)), 3);
    }
}
