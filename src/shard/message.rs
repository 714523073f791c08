//! What travels to a shard. Two planes, two types:
//! - [`ShardRequest`]: the data plane, what the HTTP edge asks of the owner
//!   of a stream or a bucket; answered with a [`Reply`] that the edge turns
//!   into a response.
//! - [`Control`]: what shards ask of one another (bucket replication, counts,
//!   listing parts, fork bookkeeping); each carries a typed answer channel,
//!   so an answer can never be of the wrong kind and never reaches HTTP.
//!
//! Everything here is `Send`: it crosses cores over the mesh.

use super::subs::{Matcher, SubId};
use crate::protocol::headers::Lifetime;
use crate::protocol::subs::SubRequest;
use crate::protocol::{
    BucketOp, Error, Incarnation, ListReq, ListedStream, Offset, Outcome, StreamKey, StreamOp, Surface,
};
use futures_channel::oneshot;
use std::future::Future;
use std::os::fd::OwnedFd;

/// A request for the owner of a stream or a bucket.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum ShardRequest {
    Stream {
        key: StreamKey,
        surface: Surface,
        /// `Stream-Incarnation` as sent: the op runs only on that creation
        /// of the stream (`rules::check_incarnation`).
        if_incarnation: Option<Incarnation>,
        op: StreamOp,
    },
    Bucket {
        bucket: String,
        op: BucketOp,
    },
    /// `GET /ds/{bucket}/streams`: runs on the bucket's owner, which gathers
    /// a [`Control::ListPart`] from every shard and merges them.
    ListBucket {
        bucket: String,
        list: ListReq,
    },
    /// The subscription API (`{root}/__ds/...`): runs on the shard that
    /// owns the subscription (`Root::owner_key`).
    Subs(SubRequest),
    /// A change of group `group`'s members (`/_cell/members`): runs on
    /// shard `group`, which hands it to its group's leader.
    Members {
        group: u32,
        change: crate::protocol::members::MemberChange,
    },
}

pub type Reply = Result<Outcome, Error>;

/// Where a request runs, decided once per request (the edge counts a
/// hand-off and follows its requests' shard with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// This shard owns it: run here, no hop.
    Here,
    /// Shard `n` (another core) owns it: over the mesh.
    Peer(usize),
}

/// How the HTTP edge hands a request to its owner: decide once where it
/// runs ([`Dispatch::owner`]), then run it there. The shard implements it
/// (`shard/dispatch.rs`), so the edge reaches the shard with no layer between.
///
/// The futures are returned unboxed: a connection awaits them inside its
/// own task, whose memory it allocates once, instead of allocating (and
/// freeing) the shard's request state, some 4 KiB, for every request.
pub trait Dispatch {
    /// Where `req` runs: its stream's or its bucket's shard, seen from here.
    fn owner(&self, req: &ShardRequest) -> Owner;
    /// Runs `req` where [`Dispatch::owner`] said.
    fn run(&self, owner: Owner, req: ShardRequest) -> impl Future<Output = Reply> + '_;
    /// Runs `req` on its owner.
    fn dispatch(&self, req: ShardRequest) -> impl Future<Output = Reply> + '_ {
        self.run(self.owner(&req), req)
    }
}

/// Shard-to-shard requests, each with the channel its answer goes back on.
#[derive(Debug)]
pub enum Control {
    /// The owner of a bucket tells every shard it now exists (or not).
    ReplicateBucket { bucket: String, present: bool, done: oneshot::Sender<()> },
    /// How many live streams a shard holds in a bucket.
    CountBucket { bucket: String, count: oneshot::Sender<u64> },
    /// One shard's part of a bucket listing (asked by the bucket's owner).
    ListPart { bucket: String, list: ListReq, part: oneshot::Sender<Result<ListPart, Error>> },
    /// To a fork source's owner: validate the fork point, count a reference,
    /// and return what the fork inherits.
    ForkSnapshot {
        source: StreamKey,
        offset: Option<Offset>,
        sub_offset: u64,
        content_type: Option<String>,
        data: oneshot::Sender<Result<ForkData, Error>>,
    },
    /// To a fork source's owner: one fork fewer (at boot: one more).
    ForkRef { source: StreamKey, source_uid: u64, add: bool, done: oneshot::Sender<()> },
    /// From a subscription's owner to every shard: what it selects now
    /// (None: it is gone).
    SubRegistry { id: SubId, matcher: Option<Matcher>, done: oneshot::Sender<()> },
    /// In a cell of more than one shard a node that came to lead every
    /// group: one step of telling one another again what a single node's
    /// shards keep of each other (`Shard::retell`); every shard ends a step
    /// before any begins the next.
    Retell { step: RetellStep, done: oneshot::Sender<Result<(), Error>> },
    /// To a subscription's owner: a stream it selects (of creation
    /// `creation`, its incarnation token) has data up to `tail`.
    SubTail { id: SubId, path: String, tail: Offset, creation: String, done: oneshot::Sender<()> },
}

/// The steps of [`Control::Retell`], in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetellStep {
    /// Forget what the other shards told this one (bucket presence,
    /// references to this shard's streams, subscriptions' matchers) and
    /// this shard's share of the quota counters.
    Forget,
    /// Tell the others this shard's buckets, subscriptions and forks, and
    /// count its streams into the quota counters.
    Tell,
    /// Tell each subscription that selects a stream of this shard its tail
    /// (every shard's matchers are whole by then).
    Tails,
}

impl RetellStep {
    pub const ALL: [RetellStep; 3] = [RetellStep::Forget, RetellStep::Tell, RetellStep::Tails];
}

/// One shard's part of a listing: its first `limit` matching streams after
/// the cursor (sorted), how many match after the cursor, and how many match
/// the prefix at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPart {
    pub streams: Vec<ListedStream>,
    pub after_count: u64,
    pub prefix_count: u64,
}

/// What a new fork inherits from its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkData {
    pub data: Vec<u8>,
    pub content_type: String,
    pub lifetime: Lifetime,
    pub source_uid: u64,
}

/// A client connection moving to another shard: its socket and the bytes
/// received on it but not yet used (a pipelined request, say). Opaque here:
/// the HTTP edge makes and adopts it; the mesh only carries it.
#[derive(Debug)]
pub struct MovedConnection {
    pub socket: OwnedFd,
    pub pending: Vec<u8>,
    /// Moves so far, this one included.
    pub moves: u8,
    /// The shard it comes from.
    pub from: usize,
}
