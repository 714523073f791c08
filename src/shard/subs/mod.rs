//! Subscriptions on a shard (durable-streams.md §A16). The shard that owns
//! a subscription (its `Root::owner_key` hashed like a stream's) keeps it
//! in its `State` (`shard/state.rs`), writes every change as one
//! record (`persist::KIND_SUBSCRIPTION`, the whole subscription) and
//! answers its API (`api`). Every shard keeps a [`Registry`] of what each
//! subscription selects, so that an append anywhere tells the owner of
//! each subscription that wants it the stream's new tail
//! (`Control::SubTail`, `notify`); the owner's delivery loop (`deliver`)
//! turns pending work into wakes: events appended to a pull-wake
//! subscription's wake stream, or signed webhook POSTs made by the
//! delivery thread (`tier::outbound`), never on an executor.

mod api;
mod deliver;
mod notify;
mod registry;

pub use deliver::Attempt;
pub use registry::{Matcher, Registry};

use crate::protocol::subs::sign::KeySet;
use crate::protocol::subs::{Root, Subscription};
use crate::tier::outbound::Outbound;
use arc_swap::ArcSwap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

/// A subscription's identity: its root and its id.
pub type SubId = (Root, String);

/// An owned subscription and where its latest record is.
#[derive(Debug)]
pub struct SubEntry {
    pub sub: Subscription,
    /// Segment of its latest record (reclaim re-logs it to free the segment).
    pub seg: u64,
    /// Lsn of its latest record: answers about it wait until it is durable.
    pub last_lsn: u64,
}

/// Runs a task on the shard's executor, detached (given by the server,
/// which keeps glommio out of this module).
pub type Spawn = Rc<dyn Fn(Pin<Box<dyn Future<Output = ()>>>)>;

/// What every shard's subscriptions share: the webhook signing key,
/// whether the server listens on loopback (then `http://` loopback
/// receivers are accepted), the delivery thread, and a spawner.
pub struct SubsEnv {
    /// The keys published and the one that signs, as the server loaded
    /// them last (a SIGHUP loads them again: a rotation's steps).
    pub key: Arc<ArcSwap<KeySet>>,
    pub loopback: bool,
    pub outbound: Outbound,
    pub spawn: Spawn,
}
