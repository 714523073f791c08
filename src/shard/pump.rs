//! The shard: where protocol rules meet storage. Every mutation of this
//! shard's streams is serialised through here, on this shard's thread.
//!
//! Rule for every answer: it describes only durable state. Writes are
//! acknowledged after their record's flush; reads first wait for the
//! stream's last record to be durable and never show a record past the
//! log's durable point.

use super::mesh::Peers;
use super::router::shard_for_bucket;
pub use super::router::{Reply, ShardRequest};
use crate::limits::READ_CHUNK_BYTES_MAX;
use crate::protocol::headers::{is_json, stream_content_type, Lifetime};
use crate::protocol::offset::ReadFrom;
use crate::protocol::persist::{self, AppendRecord, CreateRecord, ForkRecord};
use crate::protocol::rules::{self, AppendContext, AppendVerdict, CreateConfig, ProducerState};
use crate::protocol::{
    json, AppendReq, BucketOp, CreateReq, Error, ListReq, ListedStream, Listing, Live, Offset, Outcome, ProducerAck,
    ReadOutcome, ReadReq, StreamInfo, StreamKey, StreamOp, Surface,
};
use crate::storage::io::SegmentStore;
use crate::storage::{self, Log, RecordHeader, RecordLoc, Recovered};
use futures_channel::oneshot;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// One slice of a stream's data: a record's data part.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    /// Stream position of the chunk's first byte.
    start: u64,
    len: u32,
    loc: RecordLoc,
    /// Where the data starts inside the record body.
    data_off: u32,
    lsn: u64,
}

#[derive(Debug)]
struct Stream {
    uid: u64,
    incarnation: u32,
    content_type: String,
    json: bool,
    lifetime: Lifetime,
    created_at_ms: i64,
    /// Lsn of the create record: a listing shows the stream once it is durable.
    created_lsn: u64,
    /// Time of the latest write (create, append or close), and its lsn.
    last_write_ms: i64,
    write_lsn: u64,
    /// Time of a write known durable: what a listing reports while the
    /// latest write is still in flight.
    durable_write_ms: i64,
    last_access_ms: i64,
    /// Tail including appends not yet durable (used to sequence writes).
    tail: u64,
    closed: bool,
    closed_lsn: u64,
    closed_by: Option<(String, u64, u64)>,
    chunks: Vec<Chunk>,
    producers: HashMap<String, ProducerState>,
    /// Per producer, the tail after each of its latest accepted appends
    /// (epoch, seq, tail), so a retried duplicate answers with the offset the
    /// original got (snakream.md). At most PRODUCER_ACKS_KEPT per producer.
    producer_acks: HashMap<String, VecDeque<(u64, u64, u64)>>,
    stream_seq: Option<String>,
    /// Lsn of the latest record about this stream.
    last_lsn: u64,
    /// Live readers waiting at the tail; woken when an append or close is
    /// durable (dropping them on delete wakes them too).
    waiters: Vec<oneshot::Sender<()>>,
    /// Set when this stream is a fork (its source, as asked at creation).
    fork: Option<ForkRecord>,
    /// Forks (on any shard) created from this stream and not yet gone.
    fork_refs: u32,
    /// Deleted while forks still referenced it (F43): 410 to clients, data
    /// kept until the last fork is gone.
    soft_deleted: bool,
}

/// What a reader may see of a stream: its durable prefix.
struct Visible {
    tail: u64,
    closed: bool,
    chunks: usize,
}

impl Stream {
    fn visible(&self, durable_lsn: u64) -> Visible {
        let chunks = self.chunks.partition_point(|c| c.lsn <= durable_lsn);
        let tail = if chunks == self.chunks.len() && self.chunks.last().is_none_or(|c| c.lsn <= durable_lsn) {
            // Every chunk durable: the tail is exact (it may also be > last chunk end
            // only if there are no chunks, i.e. 0).
            self.chunks.last().map_or(0, |c| c.start + c.len as u64)
        } else {
            self.chunks[..chunks].last().map_or(0, |c| c.start + c.len as u64)
        };
        Visible { tail, closed: self.closed && self.closed_lsn <= durable_lsn, chunks }
    }

    fn info(&self, v: &Visible) -> StreamInfo {
        let tail = Offset::new(0, v.tail);
        StreamInfo {
            content_type: self.content_type.clone(),
            next_offset: tail,
            closed: v.closed,
            etag: rules::stream_etag(self.uid, self.incarnation, tail, v.closed),
            ttl_secs: match self.lifetime {
                Lifetime::Ttl { secs } => Some(secs),
                _ => None,
            },
            expires_at: match &self.lifetime {
                Lifetime::ExpiresAt { raw, .. } => Some(raw.clone()),
                _ => None,
            },
        }
    }

    fn remember_ack(&mut self, producer: &str, epoch: u64, seq: u64) {
        let acks = self.producer_acks.entry(producer.to_string()).or_default();
        if acks.len() == crate::limits::PRODUCER_ACKS_KEPT {
            acks.pop_front();
        }
        acks.push_back((epoch, seq, self.tail));
    }

    fn acked_tail(&self, producer: &str, epoch: u64, seq: u64) -> Option<u64> {
        self.producer_acks.get(producer)?.iter().find(|(e, s, _)| *e == epoch && *s == seq).map(|(_, _, t)| *t)
    }

    fn config(&self) -> CreateConfig {
        CreateConfig { content_type: self.content_type.clone(), lifetime: self.lifetime.clone(), closed: self.closed }
    }
}

/// Counters for /metrics and the benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShardStats {
    pub requests_local: u64,
    pub requests_remote_in: u64,
    pub appends: u64,
    pub rejected_backpressure: u64,
}

pub struct Shard<S: SegmentStore> {
    pub id: usize,
    pub shards: usize,
    log: Rc<Log<S>>,
    streams: RefCell<HashMap<StreamKey, Stream>>,
    by_uid: RefCell<HashMap<u64, StreamKey>>,
    next_uid: Cell<u64>,
    /// Incarnation of the last deleted stream of each name seen since boot.
    tombstones: RefCell<HashMap<StreamKey, u32>>,
    /// Buckets whose durable record is in this shard's log.
    buckets_owned: RefCell<BTreeSet<String>>,
    /// Every bucket that exists, replicated from the owners.
    buckets_known: RefCell<BTreeSet<String>>,
    peers: RefCell<Option<Rc<dyn Peers>>>,
    pub stats: RefCell<ShardStats>,
    now_ms: Box<dyn Fn() -> i64>,
    /// Timer for live reads, injected by the executor (keeps this file free
    /// of glommio). None: live reads answer at once as if timed out.
    sleep: RefCell<Option<Sleep>>,
    long_poll_timeout: Cell<Duration>,
    rng: Cell<u64>,
}

/// An executor's timer: resolves after the duration.
pub type Sleep = Rc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()>>>>;

fn storage_err(e: storage::Error) -> Error {
    match e {
        storage::Error::Full => Error::Overloaded { retry_after_secs: crate::limits::RETRY_AFTER_SECS },
        storage::Error::TooLarge(_) => Error::TooLarge,
        e @ storage::Error::NoSpace { .. } => Error::InsufficientStorage(e.to_string()),
        e => Error::Unavailable(e.to_string()),
    }
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl<S: SegmentStore> Shard<S> {
    /// Rebuilds the shard's state from its recovered log.
    pub fn recover(id: usize, shards: usize, log: Rc<Log<S>>, records: &[Recovered]) -> Result<Self, String> {
        let shard = Shard {
            id,
            shards,
            log,
            streams: RefCell::default(),
            by_uid: RefCell::default(),
            next_uid: Cell::new(1),
            tombstones: RefCell::default(),
            buckets_owned: RefCell::default(),
            buckets_known: RefCell::default(),
            peers: RefCell::new(None),
            stats: RefCell::default(),
            now_ms: Box::new(wall_clock_ms),
            sleep: RefCell::new(None),
            long_poll_timeout: Cell::new(Duration::from_millis(crate::limits::LONG_POLL_TIMEOUT_MS_DEFAULT)),
            rng: Cell::new(0x9e37_79b9_7f4a_7c15 ^ (wall_clock_ms() as u64) ^ ((id as u64) << 32)),
        };
        let boot_ms = (shard.now_ms)();
        let mut body = Vec::new();
        for r in records {
            body.clear();
            let h = r.header;
            shard
                .log
                .read_body(r.loc, 0..h.body_len as usize, &mut body)
                .map_err(|e| format!("reading recovered record: {e}"))?;
            let bad = |what: &str| {
                format!("shard {id}: malformed {what} record in segment {} at {}", r.loc.segment, r.loc.pos)
            };
            shard.next_uid.set(shard.next_uid.get().max(h.stream_id + 1));
            match h.kind {
                persist::KIND_CREATE => {
                    let c = CreateRecord::decode(&body).map_err(|_| bad("create"))?;
                    let key = StreamKey { bucket: c.bucket, stream: c.stream };
                    let mut streams = shard.streams.borrow_mut();
                    if let Some(old) = streams.remove(&key) {
                        shard.by_uid.borrow_mut().remove(&old.uid);
                    }
                    let data_off = (body.len() - c.data.len()) as u32;
                    let mut s = Stream {
                        uid: h.stream_id,
                        incarnation: h.incarnation,
                        json: is_json(&c.content_type),
                        content_type: c.content_type,
                        lifetime: c.lifetime,
                        created_at_ms: c.created_at_ms,
                        created_lsn: 0,
                        last_write_ms: c.created_at_ms,
                        write_lsn: 0,
                        durable_write_ms: c.created_at_ms,
                        // TTL windows restart at boot: reads are not logged,
                        // so the last access before a crash is unknown; the
                        // later time errs on keeping data.
                        last_access_ms: boot_ms,
                        tail: 0,
                        closed: c.closed,
                        closed_lsn: 0,
                        closed_by: None,
                        chunks: Vec::new(),
                        producers: HashMap::new(),
                        producer_acks: HashMap::new(),
                        stream_seq: None,
                        last_lsn: 0,
                        waiters: Vec::new(),
                        fork: c.fork,
                        fork_refs: 0,
                        soft_deleted: false,
                    };
                    if !c.data.is_empty() {
                        s.chunks.push(Chunk { start: 0, len: c.data.len() as u32, loc: r.loc, data_off, lsn: 0 });
                        s.tail = c.data.len() as u64;
                    }
                    shard.by_uid.borrow_mut().insert(h.stream_id, key.clone());
                    streams.insert(key, s);
                }
                persist::KIND_APPEND => {
                    let (a, data_off) = AppendRecord::decode_meta(&body).map_err(|_| bad("append"))?;
                    let Some(key) = shard.by_uid.borrow().get(&h.stream_id).cloned() else {
                        continue;
                    };
                    let mut streams = shard.streams.borrow_mut();
                    let Some(s) = streams.get_mut(&key) else {
                        continue;
                    };
                    if s.incarnation != h.incarnation {
                        continue;
                    }
                    // Pair assertion with `append`: records of a stream are contiguous.
                    if h.stream_offset != s.tail {
                        return Err(format!(
                            "shard {id}: stream {key:?} record at {} expected offset {} but says {}",
                            r.loc.pos, s.tail, h.stream_offset
                        ));
                    }
                    let len = body.len() - data_off;
                    if len > 0 {
                        s.chunks.push(Chunk {
                            start: s.tail,
                            len: len as u32,
                            loc: r.loc,
                            data_off: data_off as u32,
                            lsn: 0,
                        });
                        s.tail += len as u64;
                    }
                    if let Some(seq) = a.stream_seq {
                        s.stream_seq = Some(seq);
                    }
                    if let Some((pid, epoch, seq)) = &a.producer {
                        s.producers.insert(pid.clone(), ProducerState { epoch: *epoch, last_seq: *seq });
                        s.remember_ack(pid, *epoch, *seq);
                    }
                    if a.close {
                        s.closed = true;
                        s.closed_by = a.producer;
                    }
                    s.last_write_ms = a.written_at_ms;
                    s.durable_write_ms = a.written_at_ms;
                }
                persist::KIND_DELETE => {
                    let soft = persist::decode_delete(&body).map_err(|_| bad("delete"))?;
                    let Some(key) = shard.by_uid.borrow().get(&h.stream_id).cloned() else {
                        continue;
                    };
                    if soft {
                        if let Some(s) = shard.streams.borrow_mut().get_mut(&key) {
                            s.soft_deleted = true;
                        }
                        continue;
                    }
                    shard.by_uid.borrow_mut().remove(&h.stream_id);
                    if let Some(old) = shard.streams.borrow_mut().remove(&key) {
                        shard.tombstones.borrow_mut().insert(key, old.incarnation);
                    }
                }
                persist::KIND_BUCKET_CREATE => {
                    let b = persist::decode_bucket(&body).map_err(|_| bad("bucket"))?;
                    shard.buckets_owned.borrow_mut().insert(b.clone());
                    shard.buckets_known.borrow_mut().insert(b);
                }
                persist::KIND_BUCKET_DELETE => {
                    let b = persist::decode_bucket(&body).map_err(|_| bad("bucket"))?;
                    shard.buckets_owned.borrow_mut().remove(&b);
                    shard.buckets_known.borrow_mut().remove(&b);
                }
                k => return Err(format!("shard {id}: unknown record kind {k}")),
            }
        }
        Ok(shard)
    }

    pub fn set_peers(&self, peers: Rc<dyn Peers>) {
        *self.peers.borrow_mut() = Some(peers);
    }

    /// Gives the shard a timer and the long-poll timeout for live reads.
    pub fn set_live(&self, sleep: Sleep, long_poll_timeout: Duration) {
        *self.sleep.borrow_mut() = Some(sleep);
        self.long_poll_timeout.set(long_poll_timeout);
    }

    fn jitter_secs(&self) -> u64 {
        // xorshift64: cursor jitter needs spread, not cryptographic quality.
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        1 + x % 3600
    }

    fn cursor(&self, client: Option<&str>) -> u64 {
        crate::protocol::cursor::next_cursor((self.now_ms)(), client, self.jitter_secs())
    }

    fn wake_readers(&self, key: &StreamKey) {
        if let Some(s) = self.streams.borrow_mut().get_mut(key) {
            for w in s.waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    pub fn log(&self) -> &Rc<Log<S>> {
        &self.log
    }

    pub fn owned_buckets(&self) -> Vec<String> {
        self.buckets_owned.borrow().iter().cloned().collect()
    }

    pub fn stream_count(&self) -> usize {
        self.streams.borrow().len()
    }

    #[cfg(test)]
    pub fn set_clock(&mut self, f: Box<dyn Fn() -> i64>) {
        self.now_ms = f;
    }

    /// Handles one request owned by this shard.
    pub async fn handle(&self, req: ShardRequest) -> Reply {
        match req {
            ShardRequest::Stream { key, surface, op } => {
                if surface == Surface::Ds && !self.buckets_known.borrow().contains(&key.bucket) {
                    return Err(Error::NotFound);
                }
                self.stream_op(key, op).await
            }
            ShardRequest::Bucket { bucket, op } => self.bucket_op(bucket, op).await,
            ShardRequest::ReplicateBucket { bucket, present } => {
                if present {
                    self.buckets_known.borrow_mut().insert(bucket);
                } else {
                    self.buckets_known.borrow_mut().remove(&bucket);
                }
                Ok(Outcome::Ack)
            }
            ShardRequest::CountBucket { bucket } => Ok(Outcome::Count(self.count_in_bucket(&bucket))),
            ShardRequest::ListBucket { bucket, list } => self.list_bucket(bucket, list).await,
            ShardRequest::ListPart { bucket, list } => self.list_part(&bucket, &list).await,
            ShardRequest::Stats => Ok(Outcome::Stats(self.metrics_text())),
            ShardRequest::ForkSnapshot { source, offset, sub_offset, content_type } => {
                self.fork_snapshot(source, offset, sub_offset, content_type).await
            }
            ShardRequest::ForkRef { source, source_uid, add } => {
                self.fork_ref(&source, source_uid, add).await;
                Ok(Outcome::Ack)
            }
        }
    }

    fn metrics_text(&self) -> String {
        let s = *self.stats.borrow();
        let l = self.log.stats();
        let id = self.id;
        let mut t = String::new();
        for (name, v) in [
            ("ringstream_requests_total{shard=\"{id}\",origin=\"local\"}", s.requests_local),
            ("ringstream_requests_total{shard=\"{id}\",origin=\"remote\"}", s.requests_remote_in),
            ("ringstream_appends_total{shard=\"{id}\"}", s.appends),
            ("ringstream_backpressure_rejections_total{shard=\"{id}\"}", s.rejected_backpressure),
            ("ringstream_flushes_total{shard=\"{id}\"}", l.flushes),
            ("ringstream_records_flushed_total{shard=\"{id}\"}", l.records_flushed),
            ("ringstream_bytes_flushed_total{shard=\"{id}\"}", l.bytes_flushed),
            ("ringstream_max_records_per_flush{shard=\"{id}\"}", l.max_records_per_flush),
            ("ringstream_flush_records{shard=\"{id}\",quantile=\"0.5\"}", l.batch_records.value_at_quantile(0.5)),
            ("ringstream_flush_records{shard=\"{id}\",quantile=\"0.99\"}", l.batch_records.value_at_quantile(0.99)),
            ("ringstream_flush_io_us{shard=\"{id}\",quantile=\"0.5\"}", l.flush_io_us.value_at_quantile(0.5)),
            ("ringstream_flush_io_us{shard=\"{id}\",quantile=\"0.99\"}", l.flush_io_us.value_at_quantile(0.99)),
            ("ringstream_pending_bytes{shard=\"{id}\"}", self.log.pending_bytes()),
            ("ringstream_streams{shard=\"{id}\"}", self.streams.borrow().len() as u64),
        ] {
            t.push_str(&name.replace("{id}", &id.to_string()));
            t.push(' ');
            t.push_str(&v.to_string());
            t.push('\n');
        }
        t
    }

    fn count_in_bucket(&self, bucket: &str) -> u64 {
        let now = (self.now_ms)();
        self.streams
            .borrow()
            .iter()
            .filter(|(k, s)| {
                k.bucket == bucket && !s.soft_deleted && !rules::expired(&s.lifetime, s.last_access_ms, now)
            })
            .count() as u64
    }

    async fn stream_op(&self, key: StreamKey, op: StreamOp) -> Reply {
        // Let any in-flight record of this stream land first, so what we
        // check and report is what the disk holds.
        let pending = self.streams.borrow().get(&key).map(|s| s.last_lsn);
        if let Some(lsn) = pending {
            if let Err(e) = self.log.durable(lsn).await {
                // A failed write poisoned the log: writes fail from now on,
                // but reads still serve the durable part of a stream whose
                // create is durable.
                let read = matches!(op, StreamOp::Read(_) | StreamOp::Head { .. });
                let created = self.streams.borrow().get(&key).is_some_and(|s| s.created_lsn <= self.log.durable_lsn());
                if !(read && created) {
                    return Err(storage_err(e));
                }
            }
        }
        self.expire_if_due(&key);
        if self.streams.borrow().get(&key).is_some_and(|s| s.soft_deleted) {
            return Err(match op {
                StreamOp::Create(_) => Error::Conflict("a deleted stream with live forks still holds this path".into()),
                _ => Error::Gone("the stream was deleted; its forks still read its data"),
            });
        }
        match op {
            StreamOp::Create(c) => self.create(key, c).await,
            StreamOp::Append(a) => self.append(key, a).await,
            StreamOp::Read(r) if r.live == Live::No => self.read(&key, r),
            StreamOp::Read(r) => self.read_live(&key, r).await,
            StreamOp::Head { if_none_match } => {
                let streams = self.streams.borrow();
                let s = streams.get(&key).ok_or(Error::NotFound)?;
                // HEAD does not refresh a sliding TTL (F46).
                let info = s.info(&s.visible(self.log.durable_lsn()));
                let not_modified =
                    if_none_match.as_deref().is_some_and(|h| crate::protocol::headers::etag_matches(h, &info.etag));
                Ok(Outcome::Head { info, not_modified })
            }
            StreamOp::Delete => self.delete(key).await,
        }
    }

    fn expire_if_due(&self, key: &StreamKey) {
        let now = (self.now_ms)();
        let due = self.streams.borrow().get(key).is_some_and(|s| rules::expired(&s.lifetime, s.last_access_ms, now));
        if due {
            // Lazy expiry: the stream is gone for clients from now on. The
            // delete record makes that survive a restart; if the log cannot
            // take it now, the next access after restart expires it again.
            // With forks it is only soft-deleted (F95).
            let _ = self.delete_now(key);
        }
    }

    /// Appends a delete record for the stream at `key` (hard or soft) and
    /// returns its lsn and the stream's incarnation.
    fn log_delete(&self, key: &StreamKey, soft: bool) -> Result<(u64, u64, u32), Error> {
        let (uid, inc, tail) = {
            let streams = self.streams.borrow();
            let s = streams.get(key).ok_or(Error::NotFound)?;
            (s.uid, s.incarnation, s.tail)
        };
        let h = RecordHeader {
            kind: persist::KIND_DELETE,
            stream_id: uid,
            incarnation: inc,
            stream_offset: tail,
            body_len: 0,
        };
        let (_, lsn) = self.log.append(h, &persist::encode_delete(soft)).map_err(storage_err)?;
        Ok((lsn, uid, inc))
    }

    /// Logs a delete and forgets the stream. Returns the delete's lsn.
    fn remove_stream(&self, key: &StreamKey) -> Result<u64, Error> {
        let (lsn, uid, inc) = self.log_delete(key, false)?;
        self.streams.borrow_mut().remove(key);
        self.by_uid.borrow_mut().remove(&uid);
        self.tombstones.borrow_mut().insert(key.clone(), inc);
        Ok(lsn)
    }

    /// Soft-deletes a stream that forks reference, else removes it. Returns
    /// the record's lsn and, for a removed fork, its source to release.
    fn delete_now(&self, key: &StreamKey) -> Result<(u64, Option<ForkRecord>), Error> {
        let (refs, fork) = {
            let streams = self.streams.borrow();
            let s = streams.get(key).ok_or(Error::NotFound)?;
            (s.fork_refs, s.fork.clone())
        };
        if refs == 0 {
            return Ok((self.remove_stream(key)?, fork));
        }
        let (lsn, _, _) = self.log_delete(key, true)?;
        let mut streams = self.streams.borrow_mut();
        let s = streams.get_mut(key).expect("checked above");
        s.soft_deleted = true;
        s.last_lsn = lsn;
        // Readers waiting on it get their 410 now.
        s.waiters.clear();
        Ok((lsn, None))
    }

    async fn delete(&self, key: StreamKey) -> Reply {
        let (lsn, released) = self.delete_now(&key)?;
        self.log.durable(lsn).await.map_err(storage_err)?;
        if let Some(f) = released {
            self.release_source(f).await;
        }
        Ok(Outcome::Deleted)
    }

    /// A fork is gone: tell its source's owner (which may cascade).
    async fn release_source(&self, f: ForkRecord) {
        let req = ShardRequest::ForkRef {
            source: StreamKey { bucket: f.bucket, stream: f.stream },
            source_uid: f.source_uid,
            add: false,
        };
        let _ = self.call(req).await;
    }

    /// Runs a request on its owner: here, or over the mesh.
    fn call(&self, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>> {
        let owner = req.owner(self.shards).unwrap_or(self.id);
        Box::pin(async move {
            if owner == self.id {
                self.handle(req).await
            } else {
                let peers = self.peers.borrow().clone();
                match peers {
                    Some(p) => p.call(owner, req).await,
                    None => Err(Error::Unavailable("no mesh".into())),
                }
            }
        })
    }

    /// Counts a fork reference up or down. Dropping the last reference of a
    /// soft-deleted stream removes it for good, and releases its own source.
    async fn fork_ref(&self, source: &StreamKey, uid: u64, add: bool) {
        let release = {
            let mut streams = self.streams.borrow_mut();
            let Some(s) = streams.get_mut(source).filter(|s| s.uid == uid) else {
                return;
            };
            if add {
                s.fork_refs += 1;
                return;
            }
            s.fork_refs = s.fork_refs.saturating_sub(1);
            s.fork_refs == 0 && s.soft_deleted
        };
        if release {
            self.collect(source).await;
        }
    }

    /// Removes a soft-deleted stream nobody references any more (cascading
    /// up its fork chain).
    async fn collect(&self, key: &StreamKey) {
        let fork = self.streams.borrow().get(key).and_then(|s| s.fork.clone());
        if let Ok(lsn) = self.remove_stream(key) {
            let _ = self.log.durable(lsn).await;
            if let Some(f) = fork {
                self.release_source(f).await;
            }
        }
    }

    /// At boot, after every shard told its sources about its forks: collect
    /// soft-deleted streams that no fork references any more.
    pub async fn collect_unreferenced(&self) {
        let due: Vec<StreamKey> = self
            .streams
            .borrow()
            .iter()
            .filter(|(_, s)| s.soft_deleted && s.fork_refs == 0)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            self.collect(&k).await;
        }
    }

    /// At boot: the (source, uid) of every fork this shard holds.
    pub fn fork_sources(&self) -> Vec<(StreamKey, u64)> {
        self.streams
            .borrow()
            .values()
            .filter_map(|s| s.fork.as_ref())
            .map(|f| (StreamKey { bucket: f.bucket.clone(), stream: f.stream.clone() }, f.source_uid))
            .collect()
    }

    /// At the source's owner: validate a fork point (F100/F101), count the
    /// reference, and copy out the data the fork inherits.
    async fn fork_snapshot(
        &self,
        source: StreamKey,
        offset: Option<Offset>,
        sub_offset: u64,
        content_type: Option<String>,
    ) -> Reply {
        let pending = self.streams.borrow().get(&source).map(|s| s.last_lsn);
        if let Some(lsn) = pending {
            self.log.durable(lsn).await.map_err(storage_err)?;
        }
        self.expire_if_due(&source);
        let mut streams = self.streams.borrow_mut();
        let s = streams.get_mut(&source).ok_or(Error::NotFound)?;
        if s.soft_deleted {
            return Err(Error::Conflict("the fork source was deleted".into()));
        }
        if let Some(ct) = &content_type {
            if !crate::protocol::headers::content_types_match(ct, &s.content_type) {
                return Err(Error::Conflict(format!(
                    "fork Content-Type {ct:?} differs from the source's {:?}",
                    s.content_type
                )));
            }
        }
        let v = s.visible(self.log.durable_lsn());
        let anchor = offset.map_or(v.tail, |o| o.pos);
        if anchor > v.tail {
            return Err(Error::BadRequest("Stream-Fork-Offset is past the source's tail".into()));
        }
        let chunks = &s.chunks[..v.chunks];
        let mut point = anchor;
        if sub_offset > 0 {
            let i = chunks.partition_point(|c| c.start + c.len as u64 <= anchor);
            let c = chunks.get(i).ok_or_else(|| Error::BadRequest("no data after Stream-Fork-Offset".into()))?;
            let from = (anchor - c.start) as usize;
            let extra = if s.json {
                let mut rest = Vec::new();
                let off = c.data_off as usize + from;
                self.log.read_body(c.loc, off..c.data_off as usize + c.len as usize, &mut rest).map_err(storage_err)?;
                json::prefix_len_of_messages(&rest, sub_offset as usize)
            } else {
                let rest = c.len as usize - from;
                (sub_offset as usize <= rest).then_some(sub_offset as usize)
            };
            point += extra
                .ok_or_else(|| Error::BadRequest("Stream-Fork-Sub-Offset is past the end of the message".into()))?
                as u64;
        }
        if point as usize > crate::limits::REQUEST_BODY_BYTES_MAX as usize {
            // Forks copy what they inherit into one record.
            return Err(Error::TooLarge);
        }
        let mut data = Vec::with_capacity(point as usize);
        for c in chunks.iter().take_while(|c| c.start < point) {
            let take = (point - c.start).min(c.len as u64) as usize;
            let off = c.data_off as usize;
            self.log.read_body(c.loc, off..off + take, &mut data).map_err(storage_err)?;
        }
        s.fork_refs += 1;
        Ok(Outcome::ForkData {
            data,
            content_type: s.content_type.clone(),
            lifetime: s.lifetime.clone(),
            source_uid: s.uid,
        })
    }

    async fn create(&self, key: StreamKey, req: CreateReq) -> Reply {
        let asked = CreateConfig {
            content_type: stream_content_type(req.content_type.as_deref()),
            lifetime: req.lifetime.clone(),
            closed: req.closed,
        };
        if let Some(r) = self.existing_create(&key, &req, &asked) {
            return r;
        }
        if req.if_match.is_some() {
            // If-Match on a stream that does not exist never matches (RFC 9110 13.1.1).
            return Err(Error::PreconditionFailed);
        }
        let (mut content_type, mut lifetime, mut data, mut fork) =
            (asked.content_type.clone(), asked.lifetime.clone(), Vec::new(), None);
        if let Some(f) = &req.fork {
            let snap = ShardRequest::ForkSnapshot {
                source: f.source.clone(),
                offset: f.offset,
                sub_offset: f.sub_offset,
                content_type: req.content_type.clone(),
            };
            let Outcome::ForkData { data: inherited, content_type: src_ct, lifetime: src_life, source_uid } =
                self.call(snap).await?
            else {
                return Err(Error::Unavailable("unexpected answer to a fork snapshot".into()));
            };
            let record = ForkRecord {
                bucket: f.source.bucket.clone(),
                stream: f.source.stream.clone(),
                source_uid,
                offset: f.offset.map(|o| (o.seq, o.pos)),
                sub_offset: f.sub_offset,
            };
            // The source counted a reference; a concurrent create may have
            // won the path while we waited: give the reference back.
            if let Some(r) = self.existing_create(&key, &req, &asked) {
                self.release_source(record).await;
                return r;
            }
            content_type = req.content_type.as_ref().map_or(src_ct, |_| content_type);
            // F102: without its own TTL/expiry the fork inherits the source's.
            if lifetime == Lifetime::Forever {
                lifetime = src_life;
            }
            data = inherited;
            fork = Some(record);
        }
        let json = is_json(&content_type);
        if !req.body.is_empty() {
            if json {
                data.extend_from_slice(&json::normalize(&req.body, true)?.0);
            } else {
                data.extend_from_slice(&req.body);
            }
        }
        let asked = CreateConfig { content_type, lifetime, closed: req.closed };
        let now = (self.now_ms)();
        let uid = self.next_uid.get();
        let incarnation = self.tombstones.borrow().get(&key).map_or(1, |i| i + 1);
        let rec = CreateRecord {
            bucket: key.bucket.clone(),
            stream: key.stream.clone(),
            content_type: asked.content_type.clone(),
            lifetime: asked.lifetime.clone(),
            closed: asked.closed,
            created_at_ms: now,
            fork,
            data,
        };
        let body = rec.encode();
        let h = RecordHeader { kind: persist::KIND_CREATE, stream_id: uid, incarnation, stream_offset: 0, body_len: 0 };
        let (loc, lsn) = match self.log.append(h, &body) {
            Ok(x) => x,
            Err(e) => {
                if let Some(f) = rec.fork {
                    self.release_source(f).await;
                }
                return Err(storage_err(e));
            }
        };
        self.next_uid.set(uid + 1);
        let data_len = rec.data.len();
        let mut s = Stream {
            uid,
            incarnation,
            json,
            content_type: rec.content_type,
            lifetime: rec.lifetime,
            created_at_ms: now,
            created_lsn: lsn,
            last_write_ms: now,
            write_lsn: lsn,
            durable_write_ms: now,
            last_access_ms: now,
            tail: data_len as u64,
            closed: rec.closed,
            closed_lsn: lsn,
            closed_by: None,
            chunks: Vec::new(),
            producers: HashMap::new(),
            producer_acks: HashMap::new(),
            stream_seq: None,
            last_lsn: lsn,
            waiters: Vec::new(),
            fork: rec.fork,
            fork_refs: 0,
            soft_deleted: false,
        };
        if data_len > 0 {
            s.chunks.push(Chunk { start: 0, len: data_len as u32, loc, data_off: (body.len() - data_len) as u32, lsn });
        }
        let v = Visible { tail: s.tail, closed: s.closed, chunks: s.chunks.len() };
        let info = s.info(&v);
        self.by_uid.borrow_mut().insert(uid, key.clone());
        self.streams.borrow_mut().insert(key, s);
        self.log.durable(lsn).await.map_err(storage_err)?;
        Ok(Outcome::Created { info, new: true })
    }

    /// PUT on a path that holds a stream: 200 for the same configuration
    /// (F11), 409 for another (F12), 412 for a failed If-Match. For a fork,
    /// what was not asked (content type, lifetime) is not compared, since
    /// it was inherited.
    fn existing_create(&self, key: &StreamKey, req: &CreateReq, asked: &CreateConfig) -> Option<Reply> {
        let streams = self.streams.borrow();
        let s = streams.get(key)?;
        let v = s.visible(self.log.durable_lsn());
        if let Some(want) = &req.if_match {
            if !crate::protocol::headers::etag_matches(want, &s.info(&v).etag) {
                return Some(Err(Error::PreconditionFailed));
            }
        }
        let same = match (&req.fork, &s.fork) {
            (None, None) => rules::same_config(&s.config(), asked),
            (Some(f), Some(have)) => {
                f.source.bucket == have.bucket
                    && f.source.stream == have.stream
                    && f.offset.map(|o| (o.seq, o.pos)) == have.offset
                    && f.sub_offset == have.sub_offset
                    && s.closed == asked.closed
                    && (req.content_type.is_none()
                        || rules::same_config(
                            &s.config(),
                            &CreateConfig { lifetime: s.lifetime.clone(), closed: s.closed, ..asked.clone() },
                        ))
                    && (asked.lifetime == Lifetime::Forever
                        || rules::same_config(
                            &s.config(),
                            &CreateConfig { content_type: s.content_type.clone(), closed: s.closed, ..asked.clone() },
                        ))
            }
            _ => false,
        };
        Some(if same {
            Ok(Outcome::Created { info: s.info(&v), new: false })
        } else {
            Err(Error::Conflict("a stream with a different configuration exists at this path".into()))
        })
    }

    async fn append(&self, key: StreamKey, req: AppendReq) -> Reply {
        let now = (self.now_ms)();
        let (verdict, json, uid, inc, tail) = {
            let mut streams = self.streams.borrow_mut();
            let s = streams.get_mut(&key).ok_or(Error::NotFound)?;
            // The ETag only matters for If-Match; don't build it on every append.
            let etag = match &req.if_match {
                Some(_) => s.info(&s.visible(self.log.durable_lsn())).etag,
                None => String::new(),
            };
            let cx = AppendContext {
                content_type: &s.content_type,
                closed: s.closed,
                next_offset: Offset::new(0, s.tail),
                etag: &etag,
                last_stream_seq: s.stream_seq.as_deref(),
                producer: req.producer.as_ref().and_then(|p| s.producers.get(&p.id).copied()),
                closed_by: s.closed_by.as_ref(),
            };
            let verdict = rules::check_append(&cx, &req);
            // Every write that reaches the stream refreshes its TTL, even a
            // close-only or rejected one (F93).
            s.last_access_ms = now;
            (verdict?, s.json, s.uid, s.incarnation, s.tail)
        };
        let producer_ack = match verdict {
            AppendVerdict::Duplicate { epoch, highest_seq } => Some(Some(ProducerAck { epoch, seq: highest_seq })),
            AppendVerdict::AlreadyClosed => Some(None),
            AppendVerdict::Write { .. } => None,
        };
        if let Some(producer) = producer_ack {
            let streams = self.streams.borrow();
            let s = streams.get(&key).ok_or(Error::NotFound)?;
            let mut v = s.visible(self.log.durable_lsn());
            if let (Some(p), Some(_)) = (&req.producer, &producer) {
                // A retry answers with the offset its original got, when we
                // still remember it; older ones get the current tail.
                if let Some(t) = s.acked_tail(&p.id, p.epoch, p.seq) {
                    v.tail = t.min(v.tail);
                }
            }
            return Ok(Outcome::Appended {
                info: s.info(&v),
                producer,
                duplicate: true,
                close_only: req.body.is_empty(),
            });
        }
        let AppendVerdict::Write { producer } = verdict else { unreachable!() };
        let data = if json && !req.body.is_empty() { json::normalize(&req.body, false)?.0 } else { req.body };
        let rec = AppendRecord {
            close: req.close,
            stream_seq: req.stream_seq,
            producer: producer.as_ref().map(|p| (p.id.clone(), p.epoch, p.seq)),
            written_at_ms: now,
            data,
        };
        let body = rec.encode();
        let data_len = rec.data.len();
        let h = RecordHeader {
            kind: persist::KIND_APPEND,
            stream_id: uid,
            incarnation: inc,
            stream_offset: tail,
            body_len: 0,
        };
        let (loc, lsn) = match self.log.append(h, &body) {
            Ok(x) => x,
            Err(e) => {
                if matches!(e, storage::Error::Full) {
                    self.stats.borrow_mut().rejected_backpressure += 1;
                }
                return Err(storage_err(e));
            }
        };
        let info = {
            let mut streams = self.streams.borrow_mut();
            let s = streams.get_mut(&key).expect("checked above, same task, no await since");
            if data_len > 0 {
                s.chunks.push(Chunk {
                    start: s.tail,
                    len: data_len as u32,
                    loc,
                    data_off: (body.len() - data_len) as u32,
                    lsn,
                });
                s.tail += data_len as u64;
            }
            if let Some(seq) = rec.stream_seq {
                s.stream_seq = Some(seq);
            }
            if let Some(p) = &producer {
                s.producers.insert(p.id.clone(), ProducerState { epoch: p.epoch, last_seq: p.seq });
                s.remember_ack(&p.id, p.epoch, p.seq);
            }
            if rec.close {
                s.closed = true;
                s.closed_lsn = lsn;
                s.closed_by = rec.producer.clone();
            }
            if s.write_lsn <= self.log.durable_lsn() {
                s.durable_write_ms = s.last_write_ms;
            }
            s.last_write_ms = now;
            s.write_lsn = lsn;
            s.last_lsn = lsn;
            s.info(&Visible { tail: s.tail, closed: s.closed, chunks: s.chunks.len() })
        };
        self.stats.borrow_mut().appends += 1;
        self.log.durable(lsn).await.map_err(storage_err)?;
        self.wake_readers(&key);
        Ok(Outcome::Appended {
            info,
            producer: producer.map(|p| ProducerAck { epoch: p.epoch, seq: p.seq }),
            duplicate: false,
            close_only: data_len == 0,
        })
    }

    /// Long-poll (F56–F62): answer at once when there is data after the
    /// offset or the stream is closed there; otherwise wait for an append or
    /// close to become durable, or for the timeout (204). SSE connections
    /// reach here too, one wait at a time, from whichever core holds them.
    async fn read_live(&self, key: &StreamKey, mut req: ReadReq) -> Reply {
        let deadline = Instant::now() + self.long_poll_timeout.get();
        if req.from == ReadFrom::Now {
            // `now` means the tail when the request arrived; later rounds
            // must not move it, or data appended meanwhile would be skipped.
            let streams = self.streams.borrow();
            let s = streams.get(key).ok_or(Error::NotFound)?;
            req.from = ReadFrom::At(Offset::new(0, s.visible(self.log.durable_lsn()).tail));
        }
        req.live = Live::No;
        let json = self.streams.borrow().get(key).is_some_and(|s| s.json);
        let has_data_in = |r: &ReadOutcome| !(r.body.is_empty() || (json && r.body == b"[]"));
        loop {
            let Outcome::Read(mut r) = self.read(key, req.clone())? else { unreachable!() };
            let has_data = has_data_in(&r);
            if has_data || r.closed_at_end {
                r.timed_out = !has_data;
                r.cursor = (!r.closed_at_end).then(|| self.cursor(req.cursor.as_deref()));
                return Ok(Outcome::Read(r));
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let sleep = self.sleep.borrow().clone();
            let (Some(sleep), false) = (sleep, remaining.is_zero()) else {
                r.timed_out = true;
                r.cursor = Some(self.cursor(req.cursor.as_deref()));
                return Ok(Outcome::Read(r));
            };
            let (tx, rx) = oneshot::channel();
            self.streams.borrow_mut().get_mut(key).ok_or(Error::NotFound)?.waiters.push(tx);
            // Woken (or the stream was deleted, which drops the sender):
            // loop and read again. Timed out: answer with what is there.
            let woke = futures_lite::future::or(
                async {
                    let _ = rx.await;
                    true
                },
                async {
                    sleep(remaining).await;
                    false
                },
            )
            .await;
            if !woke {
                let Outcome::Read(mut r) = self.read(key, req.clone())? else { unreachable!() };
                r.timed_out = !has_data_in(&r);
                r.cursor = (!r.closed_at_end).then(|| self.cursor(req.cursor.as_deref()));
                return Ok(Outcome::Read(r));
            }
        }
    }

    fn read(&self, key: &StreamKey, req: ReadReq) -> Reply {
        let mut streams = self.streams.borrow_mut();
        let s = streams.get_mut(key).ok_or(Error::NotFound)?;
        s.last_access_ms = (self.now_ms)();
        let v = s.visible(self.log.durable_lsn());
        let info = s.info(&v);
        let start = match req.from {
            ReadFrom::Start => 0,
            ReadFrom::Now => v.tail,
            // Past the tail: empty, positioned at the tail (F55, as the reference server).
            ReadFrom::At(o) => o.pos.min(v.tail),
        };
        let offset_now = req.from == ReadFrom::Now;
        let mut body = Vec::new();
        let mut pos = start;
        let chunks = &s.chunks[..v.chunks];
        let mut i = chunks.partition_point(|c| c.start + c.len as u64 <= start);
        while i < chunks.len() && !offset_now {
            let c = chunks[i];
            let from = (pos - c.start) as usize;
            let room = READ_CHUNK_BYTES_MAX.saturating_sub(body.len());
            if room == 0 {
                break;
            }
            let take = if s.json {
                // JSON messages are never split: whole chunks only, at least one.
                if !body.is_empty() && c.len as usize > room {
                    break;
                }
                c.len as usize - from
            } else {
                (c.len as usize - from).min(room)
            };
            let off = c.data_off as usize + from;
            self.log.read_body(c.loc, off..off + take, &mut body).map_err(storage_err)?;
            pos += take as u64;
            if from + take < c.len as usize {
                break;
            }
            i += 1;
        }
        let next = Offset::new(0, pos);
        let up_to_date = pos == v.tail;
        let closed_at_end = up_to_date && v.closed;
        let etag =
            (!offset_now).then(|| rules::range_etag(s.uid, s.incarnation, Offset::new(0, start), next, closed_at_end));
        let not_modified = match (&req.if_none_match, &etag) {
            (Some(h), Some(e)) => crate::protocol::headers::etag_matches(h, e),
            _ => false,
        };
        if s.json {
            body = json::wrap_array(&body);
        }
        Ok(Outcome::Read(ReadOutcome {
            info,
            body,
            next_offset: next,
            up_to_date,
            closed_at_end,
            etag,
            not_modified,
            offset_now,
            cursor: None,
            timed_out: false,
        }))
    }

    async fn bucket_op(&self, bucket: String, op: BucketOp) -> Reply {
        debug_assert_eq!(shard_for_bucket(&bucket, self.shards), self.id);
        match op {
            BucketOp::Create => {
                if self.buckets_owned.borrow().contains(&bucket) {
                    return Err(Error::Conflict(format!("bucket {bucket} already exists")));
                }
                let body = persist::encode_bucket(&bucket);
                let h = RecordHeader {
                    kind: persist::KIND_BUCKET_CREATE,
                    stream_id: 0,
                    incarnation: 0,
                    stream_offset: 0,
                    body_len: 0,
                };
                let (_, lsn) = self.log.append(h, &body).map_err(storage_err)?;
                self.buckets_owned.borrow_mut().insert(bucket.clone());
                self.log.durable(lsn).await.map_err(storage_err)?;
                self.buckets_known.borrow_mut().insert(bucket.clone());
                self.broadcast(|| ShardRequest::ReplicateBucket { bucket: bucket.clone(), present: true }).await?;
                Ok(Outcome::BucketCreated)
            }
            BucketOp::Get => {
                if !self.buckets_owned.borrow().contains(&bucket) {
                    return Err(Error::NotFound);
                }
                let streams = self.total_in_bucket(&bucket).await?;
                Ok(Outcome::BucketInfo { bucket, streams })
            }
            BucketOp::Delete => {
                if !self.buckets_owned.borrow().contains(&bucket) {
                    return Err(Error::NotFound);
                }
                if self.total_in_bucket(&bucket).await? > 0 {
                    return Err(Error::Conflict(format!("bucket {bucket} is not empty")));
                }
                let body = persist::encode_bucket(&bucket);
                let h = RecordHeader {
                    kind: persist::KIND_BUCKET_DELETE,
                    stream_id: 0,
                    incarnation: 0,
                    stream_offset: 0,
                    body_len: 0,
                };
                let (_, lsn) = self.log.append(h, &body).map_err(storage_err)?;
                self.buckets_owned.borrow_mut().remove(&bucket);
                self.buckets_known.borrow_mut().remove(&bucket);
                self.log.durable(lsn).await.map_err(storage_err)?;
                self.broadcast(|| ShardRequest::ReplicateBucket { bucket: bucket.clone(), present: false }).await?;
                Ok(Outcome::BucketDeleted)
            }
        }
    }

    async fn total_in_bucket(&self, bucket: &str) -> Result<u64, Error> {
        let mut total = self.count_in_bucket(bucket);
        for o in self.broadcast(|| ShardRequest::CountBucket { bucket: bucket.to_string() }).await? {
            if let Outcome::Count(n) = o {
                total += n;
            }
        }
        Ok(total)
    }

    /// `GET /ds/{bucket}/streams`, on the bucket's owner: every shard (this
    /// one included) computes its part from its own state on its own
    /// thread, concurrently; the owner merges the sorted parts and keeps the
    /// first `limit`. No shard waits for another and nothing is locked, so
    /// the page is a union of per-shard snapshots taken at about the same
    /// time, not one atomic snapshot of the bucket.
    async fn list_bucket(&self, bucket: String, list: ListReq) -> Reply {
        debug_assert_eq!(shard_for_bucket(&bucket, self.shards), self.id);
        if !self.buckets_owned.borrow().contains(&bucket) {
            return Err(Error::NotFound);
        }
        let peers = self.peers.borrow().clone();
        let mut calls: Vec<Pin<Box<dyn Future<Output = Reply> + '_>>> = vec![Box::pin(self.list_part(&bucket, &list))];
        if let Some(peers) = &peers {
            for target in (0..self.shards).filter(|&t| t != self.id) {
                calls.push(peers.call(target, ShardRequest::ListPart { bucket: bucket.clone(), list: list.clone() }));
            }
        }
        let (mut streams, mut after_count, mut stream_count) = (Vec::new(), 0u64, 0u64);
        for part in join_all(calls).await {
            let Outcome::ListPart { streams: s, after_count: a, prefix_count: c } = part? else {
                return Err(Error::Unavailable("unexpected answer to a listing".into()));
            };
            streams.extend(s);
            after_count += a;
            stream_count += c;
        }
        // Stream IDs are unique across shards (each lives on one), so a sort
        // of at most shards x limit entries is the whole merge.
        streams.sort_unstable_by(|a: &ListedStream, b| a.stream_id.cmp(&b.stream_id));
        streams.truncate(list.limit);
        let has_more = after_count > streams.len() as u64;
        let next_cursor = if has_more { streams.last().map(|s| s.stream_id.clone()) } else { None };
        Ok(Outcome::Listing(Listing { bucket, prefix: list.prefix, stream_count, streams, next_cursor, has_more }))
    }

    /// This shard's part of a bucket listing: its first `limit` streams of
    /// the bucket matching the prefix after the cursor, sorted by ID. Only
    /// durable state, as every answer: writes in flight on matching streams
    /// land first, a stream whose create is not durable is left out, and a
    /// tail or closure is what `visible` shows. Soft-deleted and expired
    /// streams are left out (expiry is not logged here: listing is not an
    /// access).
    async fn list_part(&self, bucket: &str, list: &ListReq) -> Reply {
        let matches = |k: &StreamKey| k.bucket == bucket && k.stream.starts_with(list.prefix.as_str());
        let pending = self.streams.borrow().iter().filter(|(k, _)| matches(k)).map(|(_, s)| s.last_lsn).max();
        if let Some(lsn) = pending {
            self.log.durable(lsn).await.map_err(storage_err)?;
        }
        let now = (self.now_ms)();
        let durable = self.log.durable_lsn();
        let streams = self.streams.borrow();
        let mut prefix_count = 0u64;
        let mut page: Vec<(&StreamKey, &Stream)> = Vec::new();
        for (k, s) in streams.iter() {
            if !matches(k)
                || s.soft_deleted
                || s.created_lsn > durable
                || rules::expired(&s.lifetime, s.last_access_ms, now)
            {
                continue;
            }
            prefix_count += 1;
            if list.after.as_deref().is_none_or(|a| k.stream.as_str() > a) {
                page.push((k, s));
            }
        }
        let after_count = page.len() as u64;
        let by_id = |a: &(&StreamKey, &Stream), b: &(&StreamKey, &Stream)| a.0.stream.cmp(&b.0.stream);
        if page.len() > list.limit {
            page.select_nth_unstable_by(list.limit, by_id);
            page.truncate(list.limit);
        }
        page.sort_unstable_by(by_id);
        let streams = page
            .into_iter()
            .map(|(k, s)| {
                let v = s.visible(durable);
                ListedStream {
                    stream_id: k.stream.clone(),
                    closed: v.closed,
                    content_type: s.content_type.clone(),
                    tail_offset: Offset::new(0, v.tail),
                    created_at_ms: s.created_at_ms,
                    last_write_at_ms: if s.write_lsn <= durable { s.last_write_ms } else { s.durable_write_ms },
                }
            })
            .collect();
        Ok(Outcome::ListPart { streams, after_count, prefix_count })
    }

    /// Sends a request to every other shard and waits for all answers.
    async fn broadcast(&self, make: impl Fn() -> ShardRequest) -> Result<Vec<Outcome>, Error> {
        let peers = self.peers.borrow().clone();
        let mut out = Vec::new();
        if let Some(peers) = peers {
            for target in (0..self.shards).filter(|&t| t != self.id) {
                out.push(peers.call(target, make()).await?);
            }
        }
        Ok(out)
    }
}

/// Polls every future until all are done; results in the input order.
async fn join_all<'a, T>(mut futs: Vec<Pin<Box<dyn Future<Output = T> + 'a>>>) -> Vec<T> {
    let mut out: Vec<Option<T>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("every future completed")).collect()
}
