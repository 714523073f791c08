//! In a cell, what a shard whose replica does not lead does with a request
//! its group's leader must decide: it hands the request, encoded, to the
//! leader (over the cell's peer link, which the server connects as a
//! [`Forwarder`]) and answers with the leader's answer.
//!
//! Writes and bucket requests (existence, counts, listings) go to the
//! leader at once. Reads (HEAD, where the current snapshot is, and
//! bootstraps too) run here first, on what this replica has applied; when
//! their answer would claim a freshness this replica cannot vouch for by
//! itself ("not found": the stream may just have been created; "not that
//! creation": a `Stream-Incarnation` this replica has not applied yet; a
//! catch-up read that reached this replica's tail, `Stream-Up-To-Date`;
//! HEAD's tail; the current snapshot), they run here again once this
//! replica caught up with what the leader had committed when they came (a
//! read index round through the leader, then the apply:
//! `cell::catch_up`), so they claim no less than the leader would, and the
//! leader serves none of their bytes. Live reads (long-poll, SSE) are
//! served here from the committed prefix as it grows, once caught up the
//! same way. A client that appended through any node reads its append
//! there.
//!
//! The leader runs a forwarded request as its own ([`Shard::run_forwarded`])
//! and never forwards it again: a replica that lost its lead meanwhile
//! answers 503 and the client retries.
//!
//! On the leader, forwarded or its own, an answer that claims freshness (a
//! read at the tail, HEAD, a 404, where the current snapshot is, a bucket
//! or a listing) is given only once the replica confirmed, after the
//! request read its state, that it still leads (a read index round: one
//! heartbeat round trip to a majority, shared by every answer waiting; see
//! `cell::confirm`); unconfirmed, it answers 503. A leader cut off and
//! replaced, not knowing it yet, so answers no stale tail and no 404 for a
//! stream its successor created. Nor does it refuse a write from stale
//! state: every answer decided without writing (a conflict, a sequence gap,
//! a duplicate, a timed-out long-poll) waits for a round too. Writes need
//! no round: their commit is one.

use super::message::{Reply, ShardRequest};
use super::Shard;
use crate::limits::{CELL_DISCARDED_RUNS_MAX, CELL_FORWARD_TIMEOUT_MS, CELL_TICK_MS};
use crate::protocol::members::{MemberChange, MemberOutcome};
use crate::protocol::offset::ReadFrom;
use crate::protocol::subs::SubOp;
use crate::protocol::{Error, Live, Outcome, ReadReq, StreamOp};
use crate::storage::io::SegmentStore;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

/// The way to the group's leader: sends an encoded request, resolves to
/// the encoded answer or to why none came; on the leader, the check that
/// it still leads.
pub trait Forwarder {
    /// Waits at most `timeout` for the answer.
    fn forward(&self, request: Vec<u8>, timeout: Duration) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, Unsent>>>>;
    /// Called before a request reads the shard's state (it notes the lead
    /// the state belongs to), awaited after: true once a majority confirmed
    /// that this replica still led, under that lead, after the read.
    fn confirmation(&self) -> Pin<Box<dyn Future<Output = bool>>>;
    /// On a follower: true once this replica applied every entry its
    /// leader had committed when this was first polled; false when that
    /// could not be learnt in time (no leader reachable, say).
    fn caught_up(&self) -> Pin<Box<dyn Future<Output = bool>>>;
    /// Sends a request whose answer nobody waits for (dropped when no
    /// leader is reachable now).
    fn notify(&self, request: Vec<u8>);
    /// Whether requests that span groups may run on this node now: it
    /// leads every group and its shards told one another again since
    /// (`Shard::retell`). A node of one shard always may.
    fn whole(&self) -> bool {
        true
    }
    /// On the leader: makes `change` to the group's members, answered once
    /// committed (`cell::replica`).
    fn change_members(&self, change: MemberChange) -> Pin<Box<dyn Future<Output = Result<MemberOutcome, Error>>>> {
        let _ = change;
        Box::pin(async { Err(Error::Unavailable("this replica cannot change its group's members".into())) })
    }
}

/// Whether `req` reads or changes what other shards keep of it, so that in
/// a cell of more than one shard a node it runs only where one node leads
/// every group ([`Forwarder::whole`]): bucket requests and listings, the
/// subscription API, a create (its bucket, a fork's source), a delete (the
/// references to a stream, a fork's source). A write to a bucket with a
/// quota spans groups too (its counters count every shard): the shard adds
/// that.
fn spans_groups(req: &ShardRequest) -> bool {
    match req {
        ShardRequest::Stream { op, .. } => matches!(op, StreamOp::Create(_) | StreamOp::Delete),
        ShardRequest::Subs(r) => r.op != SubOp::Jwks,
        ShardRequest::Bucket { .. } | ShardRequest::ListBucket { .. } => true,
        ShardRequest::Members { .. } => false,
    }
}

/// Why a forwarded request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsent {
    /// It was never sent: this replica took over the lead while it waited
    /// for a leader to be reachable, so it runs here.
    LeadsHere,
    /// No leader known, the link down, no answer in time: it may or may
    /// not have run.
    Failed(String),
}

/// Where a request runs while this replica does not lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Road {
    /// On the leader.
    Leader,
    /// Here; if the answer claims freshness, here again once this replica
    /// caught up with what the leader had committed (a read index round).
    HereFirst,
}

fn road(req: &ShardRequest) -> Road {
    match req {
        ShardRequest::Stream { op, .. } => match op {
            StreamOp::Read(_)
            | StreamOp::Head { .. }
            | StreamOp::Bootstrap
            | StreamOp::SnapshotLatest
            | StreamOp::SnapshotRead { .. } => Road::HereFirst,
            _ => Road::Leader,
        },
        // The JWK set is the cell's one key, which every node holds.
        ShardRequest::Subs(r) if r.op == SubOp::Jwks => Road::HereFirst,
        ShardRequest::Bucket { .. }
        | ShardRequest::ListBucket { .. }
        | ShardRequest::Subs(_)
        | ShardRequest::Members { .. } => Road::Leader,
    }
}

/// Whether `req`, discarded unproposed, may simply run again: a write of
/// one record (a create, an append, a delete, a retention), which left
/// nothing behind. Others (forks, snapshots, bucket changes) may write
/// several records, some committed: their 503 goes to the client.
fn rerunnable(req: &ShardRequest) -> bool {
    match req {
        ShardRequest::Stream { op, .. } => match op {
            StreamOp::Create(c) => c.fork.is_none(),
            StreamOp::Append(_) | StreamOp::Delete | StreamOp::Retain { .. } => true,
            _ => false,
        },
        ShardRequest::Bucket { .. } | ShardRequest::ListBucket { .. } | ShardRequest::Subs(_) => false,
        // A change already made is answered as made.
        ShardRequest::Members { .. } => true,
    }
}

/// Whether `req` is a live read (what `claims_freshness` needs of it).
fn liveness(req: &ShardRequest) -> Live {
    match req {
        ShardRequest::Stream { op: StreamOp::Read(r), .. } => r.live,
        _ => Live::No,
    }
}

/// Whether an answer claims more than the state it was read from shows by
/// itself: that nothing exists, that nothing comes after what it returns,
/// or what is current (HEAD's tail and ETag, the current snapshot, a
/// bucket's count, a listing). Data below the committed prefix claims
/// nothing; nor does a write's success (committed, hence confirmed), nor a
/// long-poll's answer (it waited for data committed after it came, or for
/// its timeout, which `decided_unwritten` confirms).
fn claims_freshness(live: Live, reply: &Reply) -> bool {
    match reply {
        // "Not that creation": this replica may not have applied it yet.
        Err(Error::NotFound | Error::IncarnationMismatch) => true,
        Ok(Outcome::Read(r)) => r.up_to_date && live != Live::LongPoll,
        Ok(Outcome::Bootstrap(b)) => b.up_to_date,
        Ok(Outcome::Head { .. } | Outcome::SnapshotAt { .. } | Outcome::BucketInfo { .. } | Outcome::Listing(_)) => {
            true
        }
        _ => false,
    }
}

/// Whether a leader's answer rests on its state alone, with no commit of
/// its own to prove it still led when it gave it: the freshness claims,
/// and every answer decided without writing (a refusal its state decided:
/// a conflict, a closed stream, a stale epoch or sequence gap, a failed
/// precondition, a quota, a stream gone; a create that found the same
/// stream; an append found to be a retried duplicate; a long-poll that
/// timed out at the tail). A leader cut off and replaced, not knowing it
/// yet, would give each from stale state, so each waits for a read index
/// round. Refusals that say nothing of the state (the node is busy or
/// failing, a write discarded unproposed, a body too large) need none.
fn decided_unwritten(live: Live, reply: &Reply) -> bool {
    if claims_freshness(live, reply) {
        return true;
    }
    match reply {
        Err(
            Error::Unavailable(_)
            | Error::Discarded(_)
            | Error::Overloaded { .. }
            | Error::InsufficientStorage(_)
            | Error::TooLarge,
        ) => false,
        Err(_) => true,
        Ok(Outcome::Created { new, .. }) => !new,
        Ok(Outcome::Appended { duplicate, .. }) => *duplicate,
        Ok(Outcome::Retained { moved, .. }) => !moved,
        Ok(Outcome::Read(r)) => r.up_to_date && r.timed_out,
        _ => false,
    }
}

/// Whether a confirmed answer says that something is not there, or counts
/// what is (a bucket's streams, a listing): the state it was read from may
/// lack what an uncommitted delete removed.
fn claims_absence(reply: &Reply) -> bool {
    matches!(reply, Err(Error::NotFound) | Ok(Outcome::BucketInfo { .. } | Outcome::Listing(_)))
}

/// The answer to a read the leader was asked to confirm: the leader's, or
/// when the leader cannot be reached (no majority here, say) what this
/// replica read, if it carries data, no longer claiming to reach the tail:
/// committed data stays readable, and only "there is no more" waits for a
/// leader.
fn unconfirmed(leader: Reply, here: Reply) -> Reply {
    match (leader, here) {
        (Err(Error::Unavailable(_) | Error::Discarded(_)), Ok(Outcome::Read(mut r))) if r.has_data() => {
            r.up_to_date = false;
            Ok(Outcome::Read(r))
        }
        (leader, _) => leader,
    }
}

/// The version of the encoding of forwarded requests and their answers,
/// their first byte. postcard writes no field names: nodes whose request
/// and answer types differ (two builds in a rolling upgrade) could read
/// each other's bytes as something else, so a node refuses bytes of another
/// version (503: the client retries, and a forward meets a node of its own
/// version once the upgrade is through). Bump it whenever the encoding of
/// [`ShardRequest`] or [`Reply`] changes; the test
/// `tests::the_encoding_is_pinned` fails until it is.
pub const FORWARD_CODEC: u8 = 6;

pub fn encode_request(req: &ShardRequest) -> Vec<u8> {
    postcard::to_extend(req, vec![FORWARD_CODEC]).expect("a request always encodes")
}

/// A request that does not decode is the cell's fault (nodes of different
/// builds), not the client's: 503.
pub fn decode_request(bytes: &[u8]) -> Result<ShardRequest, Error> {
    let body = versioned(bytes).map_err(|e| Error::Unavailable(format!("a forwarded request {e}")))?;
    postcard::from_bytes(body).map_err(|e| Error::Unavailable(format!("a forwarded request does not decode: {e}")))
}

pub fn encode_reply(reply: &Reply) -> Vec<u8> {
    postcard::to_extend(reply, vec![FORWARD_CODEC]).expect("an answer always encodes")
}

pub fn decode_reply(bytes: &[u8]) -> Reply {
    let body =
        versioned(bytes).map_err(|e| Error::Unavailable(format!("the leader's answer to a forwarded request {e}")))?;
    postcard::from_bytes(body)
        .map_err(|e| Error::Unavailable(format!("the leader's answer to a forwarded request does not decode: {e}")))?
}

/// The encoded value after its version byte, if that is [`FORWARD_CODEC`].
fn versioned(bytes: &[u8]) -> Result<&[u8], String> {
    match bytes.split_first() {
        Some((&FORWARD_CODEC, body)) => Ok(body),
        Some((v, _)) => Err(format!("is of encoding version {v}, this node's is {FORWARD_CODEC} (another build)")),
        None => Err("is empty (the peer refused it)".to_string()),
    }
}

impl<S: SegmentStore> Shard<S> {
    /// In a cell: how requests reach the group's leader while this replica
    /// does not lead.
    pub fn set_forwarder(&self, forwarder: Rc<dyn Forwarder>) {
        *self.forwarder.borrow_mut() = Some(forwarder);
    }

    /// Runs a request this shard owns: here, or on its group's leader. In
    /// a cell, a write discarded unproposed (this replica, or the leader it
    /// was forwarded to, stopped leading: a hand-over, say) was applied
    /// nowhere, so it runs again, on whichever replica leads by then.
    pub async fn run_owned(&self, mut req: ShardRequest) -> Reply {
        let forwarder = self.forwarder.borrow().clone();
        let Some(to_leader) = forwarder else { return self.handle(req).await };
        let mut runs = 1;
        loop {
            let again = (runs < CELL_DISCARDED_RUNS_MAX && rerunnable(&req)).then(|| req.clone());
            match (self.run_in_cell(&*to_leader, req).await, again) {
                (Err(Error::Discarded(why)), Some(r)) => {
                    tracing::debug!("shard {}: a write was discarded unproposed ({why}); running it again", self.id);
                    runs += 1;
                    req = r;
                    // A tick for the lead to settle (a new leader's first
                    // entry to commit).
                    let sleep = self.sleep.borrow().clone();
                    if let Some(sleep) = sleep {
                        sleep(Duration::from_millis(CELL_TICK_MS)).await;
                    }
                }
                (reply, _) => return reply,
            }
        }
    }

    /// `run_owned`'s one run in a cell.
    async fn run_in_cell(&self, to_leader: &dyn Forwarder, req: ShardRequest) -> Reply {
        if self.leads() {
            return self.run_confirmed(to_leader, req).await;
        }
        match road(&req) {
            Road::Leader => self.forward(to_leader, &req).await,
            Road::HereFirst if liveness(&req) != Live::No => self.run_live_here(to_leader, req).await,
            Road::HereFirst => {
                self.report_access(to_leader, &req);
                // A read: small, no body.
                let again = req.clone();
                let reply = self.handle(req).await;
                if !claims_freshness(liveness(&again), &reply) {
                    return reply;
                }
                self.run_caught_up(to_leader, again, Some(reply)).await
            }
        }
    }

    /// A follower's read run here once this replica applied everything the
    /// leader had committed when it was asked, so that its answer claims no
    /// less than the leader's would (a 404, the tail, the current
    /// snapshot), without the leader serving it. A replica that took over
    /// meanwhile confirms its lead instead. Unable to catch up (no leader
    /// reachable, too many reads waiting): `here`, what the read answered
    /// before catching up, no longer claiming the tail, or else 503.
    async fn run_caught_up(&self, to_leader: &dyn Forwarder, req: ShardRequest, here: Option<Reply>) -> Reply {
        if !self.leads() && to_leader.caught_up().await && !self.leads() {
            return self.handle(req).await;
        }
        if self.leads() {
            return self.run_confirmed(to_leader, req).await;
        }
        let failed = Err(Error::Unavailable(format!(
            "shard {}: this replica could not catch up with its group's leader to answer (retry)",
            self.id
        )));
        match here {
            Some(here) => unconfirmed(failed, here),
            None => failed,
        }
    }

    /// A live read on a follower, served here once caught up
    /// ([`Self::run_caught_up`]). An SSE catch-up round that claims nothing
    /// (data short of the tail) needs no wait.
    async fn run_live_here(&self, to_leader: &dyn Forwarder, req: ShardRequest) -> Reply {
        self.report_access(to_leader, &req);
        let live = liveness(&req);
        let mut here = None;
        if live == Live::Sse {
            // A read: small, no body.
            let reply = self.handle(req.clone()).await;
            if !claims_freshness(live, &reply) {
                return reply;
            }
            here = Some(reply);
        }
        self.run_caught_up(to_leader, req, here).await
    }

    /// Whether `req` spans groups ([`spans_groups`], or a write to a bucket
    /// whose quota counters count every shard).
    fn spans_groups(&self, req: &ShardRequest) -> bool {
        spans_groups(req)
            || matches!(req, ShardRequest::Stream { key, .. } if super::writes(req) && self.usage_of(&key.bucket).is_some())
    }

    /// Whether this node may run requests that span groups now
    /// ([`Forwarder::whole`]; always outside a cell).
    pub(in crate::shard) fn whole(&self) -> bool {
        self.forwarder.borrow().as_ref().is_none_or(|f| f.whole())
    }

    /// On the leader: runs `req` here and, if its answer claims freshness,
    /// gives it once the replica confirmed that it still leads, else 503.
    async fn run_confirmed(&self, cell: &dyn Forwarder, req: ShardRequest) -> Reply {
        if !cell.whole() && self.spans_groups(&req) {
            return Err(Error::Unavailable(format!(
                "shard {}: this node does not lead every group of the cell now (a failover under way), \
                 and the request spans groups (retry)",
                self.id
            )));
        }
        // Taken before the state is read; only awaited if needed.
        let confirmation = cell.confirmation();
        let live = liveness(&req);
        // The subscription API, little used, is confirmed whole rather
        // than told apart (a GET, a re-confirmed PUT, a claim refused).
        let control = matches!(req, ShardRequest::Subs(_));
        let reply = self.handle(req).await;
        // Everything the state may have held when it was read.
        let seen = self.log.tail_lsn();
        if !control && !decided_unwritten(live, &reply) {
            return reply;
        }
        if !confirmation.await {
            return Err(Error::Unavailable(format!(
                "shard {}: this replica could not confirm that it still leads its group (retry)",
                self.id
            )));
        }
        if claims_absence(&reply) {
            // A stream or bucket the state lacks may have been deleted by a
            // record not yet committed (a request on a stream it holds
            // waited for that stream's last record already): the answer
            // waits for the commit, and is refused if the lead ends first.
            if let Err(e) = self.log.durable(seen).await {
                return Err(self.storage_err(e));
            }
        }
        reply
    }

    /// A follower serves a read of a stream with a sliding TTL: the leader,
    /// which alone expires streams, hears of it as a read at `now` (an
    /// access, F53) now and then (`rules::access_report_due`), so a stream
    /// read only through followers does not expire under its readers (F62).
    fn report_access(&self, to_leader: &dyn Forwarder, req: &ShardRequest) {
        let ShardRequest::Stream { key, surface, op: StreamOp::Read(_), .. } = req else { return };
        let now = (self.now_ms)();
        let creation = {
            let mut state = self.state.borrow_mut();
            let Some(s) = state.get_mut(key) else { return };
            if !crate::protocol::rules::access_report_due(&s.lifetime, s.leader_told_ms, now) {
                return;
            }
            s.leader_told_ms = now;
            s.incarnation()
        };
        let read = ReadReq { from: ReadFrom::Now, live: Live::No, cursor: None, if_none_match: None };
        // Only the creation read here: not one made since at the same path.
        let touch = ShardRequest::Stream {
            key: key.clone(),
            surface: *surface,
            if_incarnation: Some(creation),
            op: StreamOp::Read(read),
        };
        to_leader.notify(encode_request(&touch));
    }

    async fn forward(&self, to_leader: &dyn Forwarder, req: &ShardRequest) -> Reply {
        self.stats.borrow_mut().requests_forwarded += 1;
        let mut timeout = Duration::from_millis(CELL_FORWARD_TIMEOUT_MS);
        if matches!(req, ShardRequest::Stream { op: StreamOp::Read(r), .. } if r.live != Live::No) {
            timeout += self.long_poll_timeout.get();
        }
        match to_leader.forward(encode_request(req), timeout).await {
            Ok(answer) => decode_reply(&answer),
            Err(Unsent::LeadsHere) if self.leads() => self.run_confirmed(to_leader, req.clone()).await,
            Err(Unsent::LeadsHere) => Err(Error::Unavailable(format!("shard {}: the lead moved again", self.id))),
            Err(Unsent::Failed(why)) => {
                Err(Error::Unavailable(format!("shard {}: forwarding to the leader: {why}", self.id)))
            }
        }
    }

    /// On its group's leader: a change of the group's members, made by the
    /// replica (not in a cell: 404).
    pub(in crate::shard) async fn change_members(&self, change: MemberChange) -> Reply {
        let forwarder = self.forwarder.borrow().clone();
        let Some(cell) = forwarder else { return Err(Error::NotFound) };
        cell.change_members(change).await.map(Outcome::Members)
    }

    /// On the leader: runs a request a peer forwarded, answers it encoded.
    /// A replica that does not lead (deposed since the follower chose it,
    /// or elected and not yet writing) answers 503: its reads could miss
    /// committed entries, and the follower asked it to vouch for them. One
    /// that leads confirms what it vouches for (`run_confirmed`).
    pub async fn run_forwarded(&self, request: Vec<u8>) -> Vec<u8> {
        self.stats.borrow_mut().requests_forwarded_in += 1;
        let cell = self.forwarder.borrow().clone();
        let reply = match (decode_request(&request), cell) {
            // Refused before it ran: the follower may run it again.
            (Ok(_), _) if !self.leads() => Err(Error::Discarded(format!(
                "shard {}: a forwarded request reached a replica that does not lead now",
                self.id
            ))),
            (Ok(req), Some(cell)) => self.run_confirmed(&*cell, req).await,
            (Ok(req), None) => self.handle(req).await,
            (Err(e), _) => Err(e),
        };
        encode_reply(&reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::headers::Lifetime;
    use crate::protocol::offset::{Offset, ReadFrom};
    use crate::protocol::{AppendReq, BucketOp, CreateReq, ForkReq, Incarnation, ReadOutcome, ReadReq, StreamInfo};
    use crate::protocol::{StreamKey, Surface};

    fn stream(op: StreamOp) -> ShardRequest {
        let key = StreamKey { bucket: "b".into(), stream: "s".into() };
        ShardRequest::Stream { key, surface: Surface::V1, if_incarnation: None, op }
    }

    fn read(live: Live) -> ShardRequest {
        stream(StreamOp::Read(ReadReq { from: ReadFrom::Start, live, cursor: None, if_none_match: None }))
    }

    fn read_answer(up_to_date: bool) -> Reply {
        let info = StreamInfo {
            incarnation: Incarnation::new(0x2a, 1),
            content_type: "text/plain".into(),
            next_offset: Offset::new(0, 5),
            closed: false,
            etag: "\"e\"".into(),
            ttl_secs: None,
            expires_at: None,
            snapshot_offset: None,
            retained_offset: None,
        };
        Ok(Outcome::Read(ReadOutcome {
            info,
            body: b"hello".to_vec(),
            next_offset: Offset::new(0, 5),
            up_to_date,
            closed_at_end: false,
            etag: None,
            not_modified: false,
            offset_now: false,
            cursor: Some(3),
            timed_out: false,
        }))
    }

    #[test]
    fn writes_and_bucket_requests_go_to_the_leader_reads_and_heads_run_here_first() {
        let append = AppendReq {
            content_type: None,
            body: vec![1, 2, 3],
            close: false,
            stream_seq: None,
            producer: None,
            if_match: None,
        };
        assert_eq!(road(&stream(StreamOp::Append(append))), Road::Leader);
        assert_eq!(road(&stream(StreamOp::Delete)), Road::Leader);
        assert_eq!(road(&stream(StreamOp::Head { if_none_match: None })), Road::HereFirst);
        assert_eq!(road(&stream(StreamOp::SnapshotLatest)), Road::HereFirst, "caught up, then here");
        assert_eq!(road(&ShardRequest::Bucket { bucket: "b".into(), op: BucketOp::Get }), Road::Leader);
        assert_eq!(road(&read(Live::No)), Road::HereFirst);
        assert_eq!(road(&stream(StreamOp::Bootstrap)), Road::HereFirst);
        let subs = |op: SubOp| {
            let root = crate::protocol::subs::Root::V1;
            ShardRequest::Subs(crate::protocol::subs::SubRequest { root, id: String::new(), op, origin: String::new() })
        };
        assert_eq!(road(&subs(SubOp::Jwks)), Road::HereFirst, "every node holds the cell's key");
        assert_eq!(road(&subs(SubOp::Get)), Road::Leader);
    }

    #[test]
    fn creates_deletes_buckets_listings_and_subscriptions_span_groups() {
        let create = CreateReq {
            content_type: None,
            lifetime: Lifetime::Forever,
            closed: false,
            body: Vec::new(),
            if_match: None,
            fork: None,
        };
        assert!(spans_groups(&stream(StreamOp::Create(create))), "its bucket, a fork's source");
        assert!(spans_groups(&stream(StreamOp::Delete)), "references to it, its source");
        assert!(spans_groups(&ShardRequest::Bucket { bucket: "b".into(), op: BucketOp::Get }));
        let list = crate::protocol::ListReq { prefix: String::new(), after: None, limit: 10 };
        assert!(spans_groups(&ShardRequest::ListBucket { bucket: "b".into(), list }));
        let append = AppendReq {
            content_type: None,
            body: vec![1],
            close: false,
            stream_seq: None,
            producer: None,
            if_match: None,
        };
        assert!(!spans_groups(&stream(StreamOp::Append(append))), "without a quota, one group");
        assert!(!spans_groups(&read(Live::No)));
        assert!(!spans_groups(&stream(StreamOp::Head { if_none_match: None })));
        let subs = |op: SubOp| {
            let root = crate::protocol::subs::Root::V1;
            ShardRequest::Subs(crate::protocol::subs::SubRequest { root, id: String::new(), op, origin: String::new() })
        };
        assert!(spans_groups(&subs(SubOp::Get)));
        assert!(!spans_groups(&subs(SubOp::Jwks)), "the cell's key, on every node");
    }

    #[test]
    fn only_answers_that_claim_freshness_are_asked_of_the_leader() {
        assert!(claims_freshness(Live::No, &Err(Error::NotFound)));
        assert!(claims_freshness(Live::LongPoll, &Err(Error::NotFound)));
        assert!(claims_freshness(Live::No, &read_answer(true)));
        assert!(!claims_freshness(Live::No, &read_answer(false)), "the middle of a stream");
        assert!(!claims_freshness(Live::LongPoll, &read_answer(true)), "it waited for data, or timed out");
        assert!(claims_freshness(Live::Sse, &read_answer(true)), "an SSE catch-up that reached the tail");
        assert!(!claims_freshness(Live::Sse, &read_answer(false)));
        assert!(!claims_freshness(Live::No, &Err(Error::Gone("trimmed".into()))));
        assert!(claims_freshness(Live::No, &Err(Error::IncarnationMismatch)), "the leader may hold that creation");
        assert!(claims_freshness(Live::LongPoll, &Err(Error::IncarnationMismatch)));
    }

    #[test]
    fn on_the_leader_heads_snapshots_and_bucket_answers_claim_freshness_writes_do_not() {
        let Ok(Outcome::Read(r)) = read_answer(true) else { unreachable!() };
        let info = r.info;
        let claims = |reply: Reply| claims_freshness(Live::No, &reply);
        assert!(claims(Ok(Outcome::Head { info: info.clone(), not_modified: false })), "the tail");
        assert!(claims(Ok(Outcome::Head { info: info.clone(), not_modified: true })), "304: the ETag is current");
        assert!(claims(Ok(Outcome::SnapshotAt { incarnation: Incarnation::new(1, 1), offset: Offset::new(0, 5) })));
        assert!(claims(Ok(Outcome::BucketInfo { bucket: "b".into(), streams: 1 })));
        let listing = crate::protocol::Listing {
            bucket: "b".into(),
            prefix: String::new(),
            stream_count: 0,
            streams: Vec::new(),
            next_cursor: None,
            has_more: false,
        };
        assert!(claims(Ok(Outcome::Listing(listing))), "an empty listing says nothing exists");
        let appended = Outcome::Appended { info: info.clone(), producer: None, duplicate: false, close_only: false };
        assert!(!claims(Ok(appended)), "a write's success is committed");
        assert!(!claims(Ok(Outcome::Created { info, new: true })));
        assert!(!claims(Ok(Outcome::BucketCreated)));
        assert!(!claims(Err(Error::Unavailable("no".into()))));
        assert_eq!(liveness(&read(Live::Sse)), Live::Sse);
        assert_eq!(liveness(&stream(StreamOp::Head { if_none_match: None })), Live::No);
    }

    #[test]
    fn only_writes_of_one_record_run_again_when_discarded() {
        let create = |fork| {
            let lifetime = Lifetime::Forever;
            let c = CreateReq { content_type: None, lifetime, closed: false, body: vec![], if_match: None, fork };
            stream(StreamOp::Create(c))
        };
        assert!(rerunnable(&create(None)));
        let source = StreamKey { bucket: "b".into(), stream: "t".into() };
        let fork = ForkReq { source, offset: None, sub_offset: 0 };
        assert!(!rerunnable(&create(Some(fork))), "a fork also takes a reference on its source");
        assert!(rerunnable(&stream(StreamOp::Delete)));
        assert!(rerunnable(&stream(StreamOp::Retain { offset: Offset::new(0, 1) })));
        assert!(!rerunnable(&read(Live::No)), "a read is never discarded");
        assert!(!rerunnable(&ShardRequest::Bucket { bucket: "b".into(), op: BucketOp::Create }));
    }

    #[test]
    fn on_the_leader_answers_decided_without_writing_are_confirmed() {
        let Ok(Outcome::Read(r)) = read_answer(true) else { unreachable!() };
        let info = r.info.clone();
        let decided = |reply: Reply| decided_unwritten(Live::No, &reply);
        assert!(decided(Err(Error::NotFound)), "the freshness claims");
        assert!(decided(Err(Error::Conflict("another config".into()))));
        assert!(decided(Err(Error::SeqGap { expected: 4, received: 9 })));
        assert!(decided(Err(Error::StaleEpoch { current: 3 })));
        assert!(decided(Err(Error::PreconditionFailed)));
        assert!(decided(Err(Error::StreamClosed { next_offset: Offset::new(0, 5) })));
        assert!(decided(Ok(Outcome::Created { info: info.clone(), new: false })), "the same stream found");
        assert!(!decided(Ok(Outcome::Created { info: info.clone(), new: true })), "a create committed");
        let appended =
            |duplicate| Outcome::Appended { info: info.clone(), producer: None, duplicate, close_only: false };
        assert!(decided(Ok(appended(true))), "a duplicate found");
        let retained = |moved| Outcome::Retained { info: info.clone(), offset: Offset::new(0, 3), moved };
        assert!(decided(Ok(retained(false))), "the retained start found already there");
        assert!(!decided(Ok(retained(true))), "a retention committed");
        assert!(!decided(Err(Error::Discarded("stepped down".into()))), "run again, not confirmed");
        assert!(!decided(Ok(appended(false))), "an append committed");
        let mut timed_out = r.clone();
        timed_out.timed_out = true;
        assert!(decided_unwritten(Live::LongPoll, &Ok(Outcome::Read(timed_out))), "nothing came: up to date");
        assert!(!decided_unwritten(Live::LongPoll, &Ok(Outcome::Read(r))), "data came: committed");
        assert!(!decided(Err(Error::Unavailable("no".into()))));
        assert!(!decided(Err(Error::Overloaded { retry_after_secs: 1 })));
    }

    #[test]
    fn without_a_leader_data_read_here_is_served_without_claiming_the_tail() {
        let down = || Err(Error::Unavailable("no leader".into()));
        let Ok(Outcome::Read(r)) = unconfirmed(down(), read_answer(true)) else { panic!("not served") };
        assert!(!r.up_to_date && r.body == b"hello");
        assert_eq!(unconfirmed(down(), Err(Error::NotFound)), down(), "not found is not confirmed");
        let Ok(Outcome::Read(mut empty)) = read_answer(true) else { unreachable!() };
        empty.body.clear();
        assert_eq!(unconfirmed(down(), Ok(Outcome::Read(empty))), down(), "an empty read at the tail");
        assert_eq!(unconfirmed(read_answer(false), read_answer(true)), read_answer(false), "the leader's answer");
        let gone = Err(Error::Gone("x".into()));
        assert_eq!(unconfirmed(gone.clone(), read_answer(true)), gone);
    }

    #[test]
    fn requests_and_answers_round_trip() {
        let create = stream(StreamOp::Create(crate::protocol::CreateReq {
            content_type: Some("application/json".into()),
            lifetime: Lifetime::ExpiresAt { at_ms: 1_700_000_000_000, raw: "2023-11-14T22:13:20Z".into() },
            closed: false,
            body: b"[1,2]".to_vec(),
            if_match: None,
            fork: None,
        }));
        let back = decode_request(&encode_request(&create)).unwrap();
        assert_eq!(format!("{back:?}"), format!("{create:?}"));
        for reply in [
            read_answer(true),
            Err(Error::Gone("trimmed".into())),
            Err(Error::SeqGap { expected: 4, received: 9 }),
            Ok(Outcome::BucketInfo { bucket: "b".into(), streams: 7 }),
        ] {
            assert_eq!(decode_reply(&encode_reply(&reply)), reply);
        }
    }

    #[test]
    fn bytes_of_another_encoding_version_are_refused() {
        let mut request = encode_request(&read(Live::No));
        request[0] = FORWARD_CODEC + 1;
        let Err(Error::Unavailable(why)) = decode_request(&request) else { panic!("another version was read") };
        assert!(why.contains(&format!("version {}", FORWARD_CODEC + 1)) && why.contains("another build"), "{why}");
        let mut answer = encode_reply(&read_answer(true));
        answer[0] = FORWARD_CODEC.wrapping_sub(1);
        assert!(matches!(decode_reply(&answer), Err(Error::Unavailable(_))));
        assert!(matches!(decode_reply(&[]), Err(Error::Unavailable(why)) if why.contains("refused")));
    }

    /// If this fails, the encoding of forwarded requests or answers changed:
    /// bump [`FORWARD_CODEC`] (nodes of the old build must not read the new
    /// bytes as something else), then update the bytes here.
    #[test]
    fn the_encoding_is_pinned() {
        let mut append = stream(StreamOp::Append(AppendReq {
            content_type: Some("text/plain".into()),
            body: b"hi".to_vec(),
            close: true,
            stream_seq: Some("7".into()),
            producer: None,
            if_match: Some("\"e\"".into()),
        }));
        if let ShardRequest::Stream { if_incarnation, .. } = &mut append {
            *if_incarnation = Some(Incarnation::new(0x2a, 1));
        }
        let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(encode_request(&append)), PINNED_APPEND, "bump FORWARD_CODEC");
        assert_eq!(hex(encode_request(&read(Live::Sse))), PINNED_READ, "bump FORWARD_CODEC");
        assert_eq!(hex(encode_reply(&read_answer(true))), PINNED_ANSWER, "bump FORWARD_CODEC");
        let retain = stream(StreamOp::Retain { offset: Offset::new(0, 9) });
        assert_eq!(hex(encode_request(&retain)), PINNED_RETAIN, "bump FORWARD_CODEC");
    }

    const PINNED_APPEND: &str = "06000162017301012a0101010a746578742f706c61696e02686901010137000103226522";
    const PINNED_READ: &str = "06000162017301000200020000";
    const PINNED_RETAIN: &str = "06000162017301000a0009";
    const PINNED_ANSWER: &str =
        "0600022a010a746578742f706c61696e00050003226522000000000568656c6c6f00050100000000010300";

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        assert!(matches!(decode_request(&[0xff; 9]), Err(Error::Unavailable(_))));
        assert!(matches!(decode_reply(&[0xff; 9]), Err(Error::Unavailable(_))));
        let good = encode_request(&read(Live::LongPoll));
        for cut in 0..good.len() {
            assert!(decode_request(&good[..cut]).is_err(), "cut at {cut}");
        }
    }
}
