//! A shard's connection gate: the bound on open connections (evicting the
//! longest-waiting idle one when full) and the request timeouts.

use crate::notify::Notify;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

/// How long a request may take to arrive, per connection.
#[derive(Debug, Clone, Copy)]
pub struct RequestTimeouts {
    /// From the first byte of a head to its end.
    pub header: Duration,
    /// From the end of a head to the end of its body.
    pub body: Duration,
}

/// Per shard: the bound on open connections and the request timeouts.
///
/// Over the bound, a new connection evicts the connection that has waited
/// longest for a request head (an idle keep-alive connection, or one whose
/// head is still arriving); connections busy with a request are never
/// evicted. When every connection is busy, the newcomer is answered 503 +
/// Retry-After and closed. Evicted connections close at once, so the count
/// exceeds the bound only until they have ended.
pub struct Gate {
    max: usize,
    pub(super) timeouts: RequestTimeouts,
    /// Refusals (503 answers) being written now.
    pub(super) refusing: Cell<usize>,
    next_wait: Cell<u64>,
    /// Connections waiting for a request head, oldest wait first.
    waiting: RefCell<BTreeMap<u64, Rc<Notify>>>,
    /// Set whenever the last open connection closes (graceful shutdown waits on it).
    pub(super) none_open: Notify,
}

impl Gate {
    pub fn new(max_connections: usize, timeouts: RequestTimeouts) -> Gate {
        Gate {
            max: max_connections,
            timeouts,
            refusing: Cell::new(0),
            next_wait: Cell::new(0),
            waiting: RefCell::new(BTreeMap::new()),
            none_open: Notify::default(),
        }
    }

    /// Resolves once the last open connection closed since the previous
    /// call resolved (the caller re-checks the gauge).
    pub async fn all_closed(&self) {
        self.none_open.wait().await
    }

    /// A slot for a new connection when `open` are open (the shard's
    /// connections gauge), evicting the longest-waiting one when full; None
    /// when every open connection is busy.
    pub(super) fn admit(self: &Rc<Self>, open: u64) -> Option<Slot> {
        if open >= self.max as u64 {
            let (_, oldest) = self.waiting.borrow_mut().pop_first()?;
            oldest.notify();
        }
        Some(Slot { gate: self.clone(), evict: Rc::new(Notify::default()) })
    }

    /// Marks `slot` evictable until the guard is dropped.
    pub(super) fn waiting(&self, slot: &Slot) -> Waiting<'_> {
        let n = self.next_wait.get();
        self.next_wait.set(n + 1);
        self.waiting.borrow_mut().insert(n, slot.evict.clone());
        Waiting { gate: self, n }
    }
}

/// One admitted connection: its gate, and how the gate evicts it.
pub(super) struct Slot {
    pub(super) gate: Rc<Gate>,
    /// Set by the gate to evict the connection while it waits for a head.
    pub(super) evict: Rc<Notify>,
}

/// A connection marked evictable while it waits for a request head.
pub(super) struct Waiting<'a> {
    gate: &'a Gate,
    n: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.gate.waiting.borrow_mut().remove(&self.n);
    }
}
