//! A shard's "stop serving" broadcast for graceful shutdown: set once, seen
//! by every connection of the shard. A connection waits on it only while
//! idle between requests (so an idle keep-alive connection closes at once)
//! and checks it after each response (so a busy one closes after its
//! request in flight). Each connection owns one waker slot, reused for its
//! lifetime, so waiting allocates nothing and the slots are bounded by the
//! open connections.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Stop {
    stopped: Cell<bool>,
    slots: RefCell<Vec<Option<Waker>>>,
    free: RefCell<Vec<usize>>,
}

impl Stop {
    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Sets the flag and wakes every waiting connection.
    pub fn trigger(&self) {
        self.stopped.set(true);
        let wakers: Vec<Waker> = self.slots.borrow_mut().iter_mut().filter_map(Option::take).collect();
        for w in wakers {
            w.wake();
        }
    }

    /// A waker slot for one connection (or the accept loop).
    pub fn slot(self: &Rc<Self>) -> StopSlot {
        let idx = match self.free.borrow_mut().pop() {
            Some(i) => i,
            None => {
                let mut slots = self.slots.borrow_mut();
                slots.push(None);
                slots.len() - 1
            }
        };
        StopSlot { stop: self.clone(), idx }
    }
}

pub struct StopSlot {
    stop: Rc<Stop>,
    idx: usize,
}

impl StopSlot {
    pub fn is_stopped(&self) -> bool {
        self.stop.is_stopped()
    }

    /// Resolves once the stop is triggered.
    pub fn wait(&self) -> StopWait<'_> {
        StopWait(self)
    }
}

impl Drop for StopSlot {
    fn drop(&mut self) {
        self.stop.slots.borrow_mut()[self.idx] = None;
        self.stop.free.borrow_mut().push(self.idx);
    }
}

pub struct StopWait<'a>(&'a StopSlot);

impl Future for StopWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let slot = self.0;
        if slot.stop.is_stopped() {
            return Poll::Ready(());
        }
        let mut slots = slot.stop.slots.borrow_mut();
        match &mut slots[slot.idx] {
            Some(w) if w.will_wake(cx.waker()) => {}
            s => *s = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn trigger_wakes_waiters_and_slots_are_reused() {
        let stop = Rc::new(Stop::default());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let a = stop.slot();
        let b = stop.slot();
        assert!(Pin::new(&mut a.wait()).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut b.wait()).poll(&mut cx).is_pending());
        drop(b);
        let c = stop.slot();
        assert_eq!(stop.slots.borrow().len(), 2, "a freed slot is reused");
        stop.trigger();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "only the live waiter (a) was registered");
        assert!(Pin::new(&mut a.wait()).poll(&mut cx).is_ready());
        assert!(Pin::new(&mut c.wait()).poll(&mut cx).is_ready());
        assert!(c.is_stopped());
    }
}
