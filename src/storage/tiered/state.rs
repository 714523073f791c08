//! What the tier layer keeps of one shard's log: its link to the object
//! store, the segments there, the block cache, the moves under way.

use super::cache::BlockCache;
use super::skeleton::Skeleton;
use crate::storage::record::RecordHeader;
use crate::storage::stats::TierStats;
use crate::tier::TierClient;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// How many leading body bytes of a record its segment's skeleton keeps
/// (what recovery replays); the layer above decides.
pub type KeepFn = fn(&RecordHeader, &[u8]) -> usize;

/// A log's link to the object store.
pub struct Tiering {
    pub client: TierClient,
    /// The shard whose keys this log uses.
    pub shard: usize,
}

/// A segment that lives in the object store.
pub(super) struct RemoteSeg {
    pub len: u64,
    /// Bytes of its skeleton file (local disk it still takes).
    pub skel_len: u64,
    /// Kept from recovery until the shard has replayed it.
    pub skeleton: Option<Rc<Skeleton>>,
}

/// The tier layer's state of one shard's log.
pub(super) struct Tier {
    pub link: Tiering,
    pub remote: RefCell<BTreeMap<u64, RemoteSeg>>,
    pub cache: RefCell<BlockCache>,
    /// The segments being moved to the store now.
    pub moving: RefCell<BTreeSet<u64>>,
    /// An orphan sweep is due (at boot, and after a failed delete).
    pub sweep_due: Cell<bool>,
    pub stats: RefCell<TierStats>,
}

impl Tier {
    pub fn new(link: Tiering, remote: BTreeMap<u64, RemoteSeg>) -> Tier {
        Tier {
            link,
            remote: RefCell::new(remote),
            cache: RefCell::default(),
            moving: RefCell::default(),
            sweep_due: Cell::new(true),
            stats: RefCell::default(),
        }
    }

    pub fn is_remote(&self, no: u64) -> bool {
        self.remote.borrow().contains_key(&no)
    }

    /// The object store key of segment `no`.
    pub fn key(&self, no: u64) -> String {
        self.link.client.segment_key(self.link.shard, no)
    }
}
