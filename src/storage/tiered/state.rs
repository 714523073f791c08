//! What the tier layer keeps of one shard's log: its link to the object
//! store, the segments there, the block cache, the moves under way.

use super::cache::BlockCache;
use super::skeleton::{Moved, Skeleton};
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
    /// The term its key names (0 on a single node).
    pub term: u64,
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
    /// In a cell: moves whose tier record this replica applied (committed)
    /// and has not yet finished locally (`cell.rs`).
    pub committed: RefCell<BTreeMap<u64, Moved>>,
    /// Those moves are being finished now (by one caller at a time).
    pub finishing: Cell<bool>,
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
            committed: RefCell::default(),
            finishing: Cell::new(false),
            stats: RefCell::default(),
        }
    }

    /// Counts a move's outcome (the bytes uploaded, or a failure).
    pub fn count_move(&self, r: &crate::storage::error::Result<u64>) {
        let mut stats = self.stats.borrow_mut();
        match r {
            Ok(len) => {
                stats.uploads_ok += 1;
                stats.uploaded_bytes += len;
            }
            Err(_) => stats.uploads_failed += 1,
        }
    }

    pub fn is_remote(&self, no: u64) -> bool {
        self.remote.borrow().contains_key(&no)
    }

    /// The object store key of remote segment `no` (of one being moved on
    /// a single node: its key has no term).
    pub fn key(&self, no: u64) -> String {
        let term = self.remote.borrow().get(&no).map_or(0, |r| r.term);
        self.link.client.segment_key(self.link.shard, no, term)
    }
}
