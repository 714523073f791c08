//! A single-waiter wake-up flag that works on any executor.
//!
//! The log's writer and segment preparer each sleep on one of these (appends
//! set it); a connection waiting for a request head sleeps on one that its
//! shard's connection gate sets to evict it. No timers, no polling: a set
//! flag wakes the sleeper once.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Notify {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Notify {
    pub fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Resolves once `notify` has been called since the last wait resolved.
    pub fn wait(&self) -> Wait<'_> {
        Wait(self)
    }
}

pub struct Wait<'a>(&'a Notify);

impl Future for Wait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.set.replace(false) {
            Poll::Ready(())
        } else {
            *self.0.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}
