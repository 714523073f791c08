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
use crate::metrics::{Family, Histo, Samples};
use crate::protocol::headers::{is_json, stream_content_type, Lifetime};
use crate::protocol::offset::ReadFrom;
use crate::protocol::persist::{
    self, AppendRecord, CreateRecord, ForkRecord, ProducerRecord, SnapshotMeta, StateRecord,
};
use crate::protocol::rules::{self, AppendContext, AppendVerdict, CreateConfig, ProducerState};
use crate::protocol::{
    json, AppendReq, Bootstrap, BucketOp, CreateReq, Error, ListReq, ListedStream, Listing, Live, Offset, Outcome,
    ProducerAck, ReadOutcome, ReadReq, SnapshotReq, StreamInfo, StreamKey, StreamOp, Surface,
};
use crate::storage::io::SegmentStore;
use crate::storage::{self, Log, RecordHeader, RecordLoc, Recovered};
use futures_channel::oneshot;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
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
    /// Data before this position is gone (trimmed when a snapshot was
    /// published there): reads below it get 410.
    trim: u64,
    /// Retained snapshots by offset; the last one is the current one.
    snapshots: BTreeMap<u64, Snap>,
    /// Segment of the latest record holding the stream's whole configuration
    /// (create, state or snapshot): recovery needs it.
    state_seg: u64,
    /// Segments of the records written since then that hold no data
    /// (close-only appends, soft delete): recovery needs them too.
    meta_segs: Vec<u64>,
    /// Recovery only: replayed records resumed here after a gap (records
    /// reclaimed below a trim); a later state record must trim this far.
    gap_end: u64,
    /// Recovery only: the latest state record lists a snapshot whose record
    /// was not found (fine if a later state record no longer lists it).
    blob_missing: bool,
}

/// A published snapshot: its blob is the data part of its snapshot record.
#[derive(Debug, Clone)]
struct Snap {
    content_type: String,
    loc: RecordLoc,
    data_off: u32,
    len: u32,
    published_at_ms: i64,
}

/// What one segment holds that recovery may need besides stream data (see
/// `Shard::reclaim`): a delete record is needed while an older segment still
/// holds a record that would bring back what it deleted.
#[derive(Debug, Default)]
struct SegIndex {
    /// Streams with a create, state or snapshot record here.
    state_uids: HashSet<u64>,
    /// Streams hard-deleted here.
    deleted_uids: Vec<u64>,
    bucket_creates: HashSet<String>,
    bucket_deletes: Vec<String>,
}

/// What keeps a segment's metadata needed: re-logging it frees the segment.
enum MetaPin {
    Stream(StreamKey),
    Bucket(String),
}

/// What a reader may see of a stream: its durable prefix.
struct Visible {
    tail: u64,
    closed: bool,
    chunks: usize,
}

impl Stream {
    /// A stream with this configuration and nothing else yet.
    /// Recovery: a stream known so far only by its uid (appends whose create
    /// was reclaimed), until a state record adopts it and fills in the rest.
    fn adoptable(uid: u64, incarnation: u32, now: i64) -> Self {
        Stream::new(uid, incarnation, String::new(), Lifetime::Forever, 0, now)
    }

    fn new(uid: u64, incarnation: u32, content_type: String, lifetime: Lifetime, created_at_ms: i64, now: i64) -> Self {
        Stream {
            uid,
            incarnation,
            json: is_json(&content_type),
            content_type,
            lifetime,
            created_at_ms,
            created_lsn: 0,
            last_write_ms: created_at_ms,
            write_lsn: 0,
            durable_write_ms: created_at_ms,
            last_access_ms: now,
            tail: 0,
            closed: false,
            closed_lsn: 0,
            closed_by: None,
            chunks: Vec::new(),
            producers: HashMap::new(),
            producer_acks: HashMap::new(),
            stream_seq: None,
            last_lsn: 0,
            waiters: Vec::new(),
            fork: None,
            fork_refs: 0,
            soft_deleted: false,
            trim: 0,
            snapshots: BTreeMap::new(),
            state_seg: 0,
            meta_segs: Vec::new(),
            gap_end: 0,
            blob_missing: false,
        }
    }

    /// The stream's state as a record (see [`StateRecord`]), without a blob.
    fn state_record(&self, key: &StreamKey) -> StateRecord {
        StateRecord {
            bucket: key.bucket.clone(),
            stream: key.stream.clone(),
            content_type: self.content_type.clone(),
            lifetime: self.lifetime.clone(),
            created_at_ms: self.created_at_ms,
            last_write_ms: self.last_write_ms,
            fork: self.fork.clone(),
            tail: self.tail,
            trim: self.trim,
            closed: self.closed,
            closed_by: self.closed_by.clone(),
            stream_seq: self.stream_seq.clone(),
            producers: self
                .producers
                .iter()
                .map(|(id, p)| ProducerRecord {
                    id: id.clone(),
                    epoch: p.epoch,
                    last_seq: p.last_seq,
                    acks: self.producer_acks.get(id).map(|a| a.iter().copied().collect()).unwrap_or_default(),
                })
                .collect(),
            soft_deleted: self.soft_deleted,
            snapshots: self
                .snapshots
                .iter()
                .map(|(&offset, sn)| SnapshotMeta {
                    offset,
                    content_type: sn.content_type.clone(),
                    published_at_ms: sn.published_at_ms,
                })
                .collect(),
            blob: Vec::new(),
        }
    }

    /// Recovery: takes the metadata of a state record (not data or snapshots).
    fn apply_state(&mut self, r: &StateRecord) {
        self.json = is_json(&r.content_type);
        self.content_type = r.content_type.clone();
        self.lifetime = r.lifetime.clone();
        self.created_at_ms = r.created_at_ms;
        self.last_write_ms = r.last_write_ms;
        self.durable_write_ms = r.last_write_ms;
        self.fork = r.fork.clone();
        self.tail = r.tail;
        self.trim = r.trim;
        self.closed = r.closed;
        self.closed_by = r.closed_by.clone();
        self.stream_seq = r.stream_seq.clone();
        self.soft_deleted = r.soft_deleted;
        self.producers.clear();
        self.producer_acks.clear();
        for p in &r.producers {
            self.producers.insert(p.id.clone(), ProducerState { epoch: p.epoch, last_seq: p.last_seq });
            self.producer_acks.insert(p.id.clone(), p.acks.iter().copied().collect());
        }
    }

    /// Recovery: replays an append record's effect.
    fn replay_append(&mut self, a: &AppendRecord, loc: RecordLoc, offset: u64, data_off: usize) -> Result<(), String> {
        if offset < self.tail {
            return Err(format!("record at {}:{} says offset {offset}, below {}", loc.segment, loc.pos, self.tail));
        }
        if offset > self.tail {
            // The records in between were reclaimed: their data was trimmed.
            self.gap_end = offset;
            self.chunks.clear();
            self.tail = offset;
        }
        self.apply_append(a, loc, data_off, 0);
        self.last_write_ms = a.written_at_ms;
        self.durable_write_ms = a.written_at_ms;
        Ok(())
    }

    /// An append record's effect on the stream, live and at recovery: its
    /// data (the body from `data_off` on) at the tail, its Stream-Seq, its
    /// producer's state, its closure.
    fn apply_append(&mut self, a: &AppendRecord, loc: RecordLoc, data_off: usize, lsn: u64) {
        let len = loc.body_len as usize - data_off;
        if len > 0 {
            self.chunks.push(Chunk { start: self.tail, len: len as u32, loc, data_off: data_off as u32, lsn });
            self.tail += len as u64;
        } else {
            self.note_meta(loc.segment);
        }
        if let Some(seq) = &a.stream_seq {
            self.stream_seq = Some(seq.clone());
        }
        if let Some((pid, epoch, seq)) = &a.producer {
            self.producers.insert(pid.clone(), ProducerState { epoch: *epoch, last_seq: *seq });
            self.remember_ack(pid, *epoch, *seq);
        }
        if a.close {
            self.closed = true;
            self.closed_by = a.producer.clone();
        }
    }

    fn note_meta(&mut self, segment: u64) {
        if self.meta_segs.last() != Some(&segment) {
            self.meta_segs.push(segment);
        }
    }

    /// Drops the data before `trim` (a chunk boundary).
    fn trim_to(&mut self, trim: u64) {
        self.trim = self.trim.max(trim);
        let keep = self.chunks.partition_point(|c| c.start + c.len as u64 <= self.trim);
        self.chunks.drain(..keep);
    }

    fn visible(&self, durable_lsn: u64) -> Visible {
        let chunks = self.chunks.partition_point(|c| c.lsn <= durable_lsn);
        let tail = if chunks == self.chunks.len() && self.chunks.last().is_none_or(|c| c.lsn <= durable_lsn) {
            // Every chunk durable: the tail is exact. Without chunks it is
            // where the retained data starts (0, or the trim point).
            self.chunks.last().map_or(self.trim, |c| c.start + c.len as u64)
        } else {
            self.chunks[..chunks].last().map_or(self.trim, |c| c.start + c.len as u64)
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
            snapshot_offset: self.snapshots.keys().next_back().map(|&o| Offset::new(0, o)),
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
    pub append_bytes: u64,
    pub rejected_backpressure: u64,
    /// Segment files deleted because no record in them was needed any more.
    pub segments_reclaimed: u64,
    /// State or bucket records re-logged so that an old segment could go.
    pub relogged: u64,
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
    /// Microseconds from an append reaching this shard to its durable ack.
    append_us: RefCell<Histo>,
    /// Shutting down: live reads answer at once instead of waiting.
    stopping: Cell<bool>,
    now_ms: Box<dyn Fn() -> i64>,
    /// Timer for live reads, injected by the executor (keeps this file free
    /// of glommio). None: live reads answer at once as if timed out.
    sleep: RefCell<Option<Sleep>>,
    long_poll_timeout: Cell<Duration>,
    rng: Cell<u64>,
    /// Per segment, what recovery may need from it besides data (see `reclaim`).
    seg_index: RefCell<BTreeMap<u64, SegIndex>>,
    /// Segment of each owned bucket's latest create record.
    bucket_segs: RefCell<HashMap<String, u64>>,
    /// Something may have freed a segment since the last reclaim pass.
    reclaim_due: Cell<bool>,
    /// Sealed segments at the end of the last reclaim pass.
    reclaim_sealed: Cell<usize>,
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
            append_us: RefCell::new(Histo::latency_us()),
            stopping: Cell::new(false),
            now_ms: Box::new(wall_clock_ms),
            sleep: RefCell::new(None),
            long_poll_timeout: Cell::new(Duration::from_millis(crate::limits::LONG_POLL_TIMEOUT_MS_DEFAULT)),
            rng: Cell::new(0x9e37_79b9_7f4a_7c15 ^ (wall_clock_ms() as u64) ^ ((id as u64) << 32)),
            seg_index: RefCell::default(),
            bucket_segs: RefCell::default(),
            reclaim_due: Cell::new(true),
            reclaim_sealed: Cell::new(0),
        };
        let boot_ms = (shard.now_ms)();
        // Appends whose stream's create record was reclaimed: adopted by the
        // stream's next state record (which always exists: see `reclaim`).
        let mut orphans: HashMap<u64, Stream> = HashMap::new();
        // Snapshot blobs seen, by (uid, offset).
        let mut blobs: HashMap<(u64, u64), Snap> = HashMap::new();
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
            let seg = r.loc.segment;
            shard.next_uid.set(shard.next_uid.get().max(h.stream_id.saturating_add(1)));
            match h.kind {
                persist::KIND_CREATE => {
                    let c = CreateRecord::decode(&body).map_err(|_| bad("create"))?;
                    let key = StreamKey { bucket: c.bucket, stream: c.stream };
                    // TTL windows restart at boot: reads are not logged, so
                    // the last access before a crash is unknown; the later
                    // time errs on keeping data.
                    let mut s =
                        Stream::new(h.stream_id, h.incarnation, c.content_type, c.lifetime, c.created_at_ms, boot_ms);
                    s.closed = c.closed;
                    s.fork = c.fork;
                    if !c.data.is_empty() {
                        let data_off = (body.len() - c.data.len()) as u32;
                        s.chunks.push(Chunk { start: 0, len: c.data.len() as u32, loc: r.loc, data_off, lsn: 0 });
                        s.tail = c.data.len() as u64;
                    }
                    shard.note_state(&mut s, seg);
                    shard.insert_recovered(key, s);
                }
                persist::KIND_APPEND => {
                    let (a, data_off) = AppendRecord::decode_meta(&body).map_err(|_| bad("append"))?;
                    let key = shard.by_uid.borrow().get(&h.stream_id).cloned();
                    let mut streams = shard.streams.borrow_mut();
                    let s = match key.as_ref().and_then(|k| streams.get_mut(k)) {
                        Some(s) => s,
                        None => orphans
                            .entry(h.stream_id)
                            .or_insert_with(|| Stream::adoptable(h.stream_id, h.incarnation, boot_ms)),
                    };
                    if s.incarnation != h.incarnation {
                        continue;
                    }
                    s.replay_append(&a, r.loc, h.stream_offset, data_off).map_err(|e| format!("shard {id}: {e}"))?;
                }
                persist::KIND_STATE | persist::KIND_SNAPSHOT => {
                    let (st, blob_off) = StateRecord::decode_meta(&body).map_err(|_| bad("state"))?;
                    if h.kind == persist::KIND_SNAPSHOT {
                        let m = st.snapshots.last().ok_or_else(|| bad("snapshot"))?;
                        let snap = Snap {
                            content_type: m.content_type.clone(),
                            loc: r.loc,
                            data_off: blob_off as u32,
                            len: (body.len() - blob_off) as u32,
                            published_at_ms: m.published_at_ms,
                        };
                        blobs.insert((h.stream_id, m.offset), snap);
                    }
                    let key = StreamKey { bucket: st.bucket.clone(), stream: st.stream.clone() };
                    let known = shard.by_uid.borrow().get(&h.stream_id).cloned();
                    let mut s = match known.and_then(|k| shard.streams.borrow_mut().remove(&k)) {
                        Some(s) => s,
                        None => orphans
                            .remove(&h.stream_id)
                            .unwrap_or_else(|| Stream::adoptable(h.stream_id, h.incarnation, boot_ms)),
                    };
                    if s.incarnation != h.incarnation {
                        s = Stream::adoptable(h.stream_id, h.incarnation, boot_ms);
                    }
                    // Records between what was replayed and this record may
                    // have been reclaimed (their data trimmed by a later
                    // state): a gap. A gap this record's trim covers is
                    // explained; one it does not must be explained by a later
                    // state record (checked at the end), as must a snapshot
                    // listed here whose blob is gone.
                    if s.tail > st.tail {
                        return Err(format!(
                            "shard {id}: stream {key:?}: replayed data ends at {} past the tail {} of the state \
                             record in segment {seg} at {}",
                            s.tail, st.tail, r.loc.pos
                        ));
                    }
                    s.trim_to(st.trim);
                    if s.tail < st.tail {
                        s.gap_end = st.tail;
                        s.chunks.clear();
                    }
                    if s.gap_end <= st.trim {
                        s.gap_end = 0;
                    }
                    s.apply_state(&st);
                    s.snapshots.clear();
                    s.blob_missing = false;
                    for m in &st.snapshots {
                        match blobs.get(&(h.stream_id, m.offset)) {
                            Some(snap) => {
                                s.snapshots.insert(m.offset, snap.clone());
                            }
                            None => s.blob_missing = true,
                        }
                    }
                    shard.note_state(&mut s, seg);
                    shard.insert_recovered(key, s);
                }
                persist::KIND_DELETE => {
                    let soft = persist::decode_delete(&body).map_err(|_| bad("delete"))?;
                    let Some(key) = shard.by_uid.borrow().get(&h.stream_id).cloned() else {
                        if !soft {
                            orphans.remove(&h.stream_id);
                            shard.index(seg).deleted_uids.push(h.stream_id);
                        }
                        continue;
                    };
                    if soft {
                        if let Some(s) = shard.streams.borrow_mut().get_mut(&key) {
                            s.soft_deleted = true;
                            s.note_meta(seg);
                        }
                        continue;
                    }
                    shard.index(seg).deleted_uids.push(h.stream_id);
                    shard.by_uid.borrow_mut().remove(&h.stream_id);
                    if let Some(old) = shard.streams.borrow_mut().remove(&key) {
                        shard.tombstones.borrow_mut().insert(key, old.incarnation);
                    }
                }
                persist::KIND_BUCKET_CREATE => {
                    let b = persist::decode_bucket(&body).map_err(|_| bad("bucket"))?;
                    shard.note_bucket(&b, seg, true);
                    shard.buckets_owned.borrow_mut().insert(b.clone());
                    shard.buckets_known.borrow_mut().insert(b);
                }
                persist::KIND_BUCKET_DELETE => {
                    let b = persist::decode_bucket(&body).map_err(|_| bad("bucket"))?;
                    shard.note_bucket(&b, seg, false);
                    shard.buckets_owned.borrow_mut().remove(&b);
                    shard.buckets_known.borrow_mut().remove(&b);
                }
                k => return Err(format!("shard {id}: unknown record kind {k}")),
            }
        }
        for (key, s) in shard.streams.borrow().iter() {
            if s.gap_end > 0 {
                return Err(format!(
                    "shard {id}: stream {key:?}: records before offset {} are missing and nothing trimmed them",
                    s.gap_end
                ));
            }
            if s.blob_missing {
                return Err(format!("shard {id}: stream {key:?}: a retained snapshot's record is missing"));
            }
        }
        // Uids must never repeat, even when every record of the newest
        // streams was reclaimed: start above the wall clock (1024 per ms).
        shard.next_uid.set(shard.next_uid.get().max((wall_clock_ms().max(0) as u64) << 10));
        Ok(shard)
    }

    /// Recovery: a create or state record brought this stream (back).
    fn insert_recovered(&self, key: StreamKey, s: Stream) {
        let mut streams = self.streams.borrow_mut();
        if let Some(old) = streams.remove(&key) {
            self.by_uid.borrow_mut().remove(&old.uid);
        }
        self.by_uid.borrow_mut().insert(s.uid, key.clone());
        streams.insert(key, s);
    }

    fn index(&self, segment: u64) -> std::cell::RefMut<'_, SegIndex> {
        std::cell::RefMut::map(self.seg_index.borrow_mut(), |m| m.entry(segment).or_default())
    }

    /// A record holding the stream's whole configuration was written in `segment`.
    fn note_state(&self, s: &mut Stream, segment: u64) {
        s.state_seg = segment;
        s.meta_segs.clear();
        self.index(segment).state_uids.insert(s.uid);
    }

    /// A bucket create (or delete) record was written in `segment`.
    fn note_bucket(&self, bucket: &str, segment: u64, created: bool) {
        if created {
            self.index(segment).bucket_creates.insert(bucket.to_string());
            self.bucket_segs.borrow_mut().insert(bucket.to_string(), segment);
        } else {
            self.index(segment).bucket_deletes.push(bucket.to_string());
            self.bucket_segs.borrow_mut().remove(bucket);
            self.reclaim_due.set(true);
        }
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

    /// Replaces the wall clock (milliseconds since the epoch): for tests of
    /// expiry, which would otherwise wait real seconds.
    #[doc(hidden)]
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
            ShardRequest::Stats => Ok(Outcome::Stats(self.metrics().into_blocks())),
            ShardRequest::ForkSnapshot { source, offset, sub_offset, content_type } => {
                self.fork_snapshot(source, offset, sub_offset, content_type).await
            }
            ShardRequest::ForkRef { source, source_uid, add } => {
                self.fork_ref(&source, source_uid, add).await;
                Ok(Outcome::Ack)
            }
        }
    }

    /// This shard's storage and stream metrics (the HTTP edge adds its own).
    pub fn metrics(&self) -> Samples {
        let s = *self.stats.borrow();
        let l = self.log.stats();
        let id = self.id;
        let mut out = Samples::default();
        out.sample(Family::ShardRequests, id, "origin=\"local\"", s.requests_local);
        out.sample(Family::ShardRequests, id, "origin=\"remote\"", s.requests_remote_in);
        out.sample(Family::Appends, id, "", s.appends);
        out.sample(Family::AppendedBytes, id, "", s.append_bytes);
        out.histogram(Family::AppendSeconds, id, &self.append_us.borrow());
        out.sample(Family::BackpressureRejections, id, "", s.rejected_backpressure);
        out.sample(Family::Flushes, id, "", l.flushes);
        out.sample(Family::FlushedRecords, id, "", l.records_flushed);
        out.sample(Family::FlushedBytes, id, "", l.bytes_flushed);
        out.histogram(Family::FlushBatchRecords, id, &l.batch_records);
        out.histogram(Family::FlushSeconds, id, &l.flush_io_us);
        out.histogram(Family::WriteSeconds, id, &l.write_us);
        out.histogram(Family::FdatasyncSeconds, id, &l.sync_us);
        out.sample(Family::PendingBytes, id, "", self.log.pending_bytes());
        out.sample(Family::Streams, id, "", self.streams.borrow().len() as u64);
        out.sample(Family::DirectIo, id, "", self.log.store().write_is_durable() as u64);
        out.sample(Family::Segments, id, "", self.log.sealed_segments().len() as u64 + 1);
        out.sample(Family::SegmentsReclaimed, id, "", s.segments_reclaimed);
        out
    }

    /// Graceful shutdown: live reads waiting here answer now (as at their
    /// timeout), and new ones answer at once.
    pub fn begin_shutdown(&self) {
        self.stopping.set(true);
        for s in self.streams.borrow_mut().values_mut() {
            for w in s.waiters.drain(..) {
                let _ = w.send(());
            }
        }
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
        let arrived = Instant::now();
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
        self.expire_if_due(&key).await;
        if self.streams.borrow().get(&key).is_some_and(|s| s.soft_deleted) {
            return Err(match op {
                StreamOp::Create(_) => Error::Conflict("a deleted stream with live forks still holds this path".into()),
                _ => Error::Gone("the stream was deleted; its forks still read its data"),
            });
        }
        match op {
            StreamOp::Create(c) => self.create(key, c).await,
            StreamOp::Append(a) => {
                let r = self.append(key, a).await;
                if r.is_ok() {
                    self.append_us.borrow_mut().record(arrived.elapsed().as_micros() as u64);
                }
                r
            }
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
            StreamOp::SnapshotPublish(r) => self.snapshot_publish(key, r).await,
            StreamOp::SnapshotLatest => {
                let streams = self.streams.borrow();
                let s = streams.get(&key).ok_or(Error::NotFound)?;
                let &offset = s.snapshots.keys().next_back().ok_or(Error::NotFound)?;
                Ok(Outcome::SnapshotAt { offset: Offset::new(0, offset) })
            }
            StreamOp::SnapshotRead { offset } => self.snapshot_read(&key, offset),
            StreamOp::SnapshotDelete { offset } => self.snapshot_delete(key, offset).await,
            StreamOp::Bootstrap => self.bootstrap(&key),
        }
    }

    /// Logs the stream's state (a snapshot record when `blob` is given) and
    /// notes where it lives. Returns the record's location and lsn.
    fn log_state(&self, key: &StreamKey, rec: &StateRecord, blob: Option<&[u8]>) -> Result<(RecordLoc, u64), Error> {
        let (uid, incarnation) = {
            let streams = self.streams.borrow();
            let s = streams.get(key).ok_or(Error::NotFound)?;
            (s.uid, s.incarnation)
        };
        let mut body = rec.encode();
        let kind = match blob {
            Some(b) => {
                body.extend_from_slice(b);
                persist::KIND_SNAPSHOT
            }
            None => persist::KIND_STATE,
        };
        let h = RecordHeader { kind, stream_id: uid, incarnation, stream_offset: rec.tail, body_len: 0 };
        let (loc, lsn) = self.log.append(h, &body).map_err(storage_err)?;
        let mut streams = self.streams.borrow_mut();
        let s = streams.get_mut(key).expect("checked above, no await since");
        s.last_lsn = lsn;
        self.note_state(s, loc.segment);
        Ok((loc, lsn))
    }

    /// `PUT .../snapshot/{offset}`: publishes a snapshot and trims the data
    /// before its offset, in one record.
    async fn snapshot_publish(&self, key: StreamKey, req: SnapshotReq) -> Reply {
        let now = (self.now_ms)();
        let offset = req.offset.pos;
        let content_type = stream_content_type(req.content_type.as_deref());
        let rec = {
            let mut streams = self.streams.borrow_mut();
            let s = streams.get_mut(&key).ok_or(Error::NotFound)?;
            s.last_access_ms = now;
            let v = s.visible(self.log.durable_lsn());
            if offset > v.tail {
                return Err(Error::Conflict(format!(
                    "snapshot offset {} is past the stream's tail {}",
                    req.offset,
                    Offset::new(0, v.tail)
                )));
            }
            if let Some((&current, _)) = s.snapshots.last_key_value() {
                if offset < current {
                    return Err(Error::Conflict(format!("a newer snapshot exists at {}", Offset::new(0, current))));
                }
            }
            if offset < s.trim {
                return Err(Error::Gone("the snapshot offset is below the stream's retained data"));
            }
            let boundary =
                offset == v.tail || offset == s.trim || s.chunks.binary_search_by_key(&offset, |c| c.start).is_ok();
            if !boundary {
                return Err(Error::BadRequest("the snapshot offset is not a message boundary of the stream".into()));
            }
            let mut rec = s.state_record(&key);
            rec.trim = offset;
            rec.snapshots.retain(|m| m.offset != offset);
            rec.snapshots.push(SnapshotMeta { offset, content_type: content_type.clone(), published_at_ms: now });
            let excess = rec.snapshots.len().saturating_sub(crate::limits::SNAPSHOTS_PER_STREAM_MAX);
            rec.snapshots.drain(..excess);
            rec
        };
        let (loc, lsn) = self.log_state(&key, &rec, Some(&req.body))?;
        let info = {
            let mut streams = self.streams.borrow_mut();
            let s = streams.get_mut(&key).expect("checked above, no await since");
            s.trim_to(offset);
            s.snapshots.retain(|o, _| rec.snapshots.iter().any(|m| m.offset == *o));
            let data_off = loc.body_len - req.body.len() as u32;
            let snap = Snap { content_type, loc, data_off, len: req.body.len() as u32, published_at_ms: now };
            s.snapshots.insert(offset, snap);
            s.info(&s.visible(self.log.durable_lsn()))
        };
        self.reclaim_due.set(true);
        self.log.durable(lsn).await.map_err(storage_err)?;
        Ok(Outcome::SnapshotPublished { info, offset: req.offset })
    }

    /// A published snapshot's blob, from its record.
    fn read_blob(&self, snap: &Snap) -> Result<Vec<u8>, Error> {
        let mut blob = Vec::with_capacity(snap.len as usize);
        let from = snap.data_off as usize;
        self.log.read_body(snap.loc, from..from + snap.len as usize, &mut blob).map_err(storage_err)?;
        Ok(blob)
    }

    fn snapshot_read(&self, key: &StreamKey, offset: Offset) -> Reply {
        let mut streams = self.streams.borrow_mut();
        let s = streams.get_mut(key).ok_or(Error::NotFound)?;
        s.last_access_ms = (self.now_ms)();
        let snap = s.snapshots.get(&offset.pos).ok_or(Error::NotFound)?;
        let body = self.read_blob(snap)?;
        let info = s.info(&s.visible(self.log.durable_lsn()));
        Ok(Outcome::Snapshot {
            info,
            offset: Offset::new(0, offset.pos),
            content_type: snap.content_type.clone(),
            body,
        })
    }

    /// `DELETE .../snapshot/{offset}`: forgets an older snapshot (never the
    /// current one, which stands for the trimmed data).
    async fn snapshot_delete(&self, key: StreamKey, offset: Offset) -> Reply {
        let rec = {
            let streams = self.streams.borrow();
            let s = streams.get(&key).ok_or(Error::NotFound)?;
            if !s.snapshots.contains_key(&offset.pos) {
                return Err(Error::NotFound);
            }
            if s.snapshots.last_key_value().is_some_and(|(&o, _)| o == offset.pos) {
                return Err(Error::Conflict("this is the current snapshot; publish a newer one first".into()));
            }
            let mut rec = s.state_record(&key);
            rec.snapshots.retain(|m| m.offset != offset.pos);
            rec
        };
        let (_, lsn) = self.log_state(&key, &rec, None)?;
        if let Some(s) = self.streams.borrow_mut().get_mut(&key) {
            s.snapshots.remove(&offset.pos);
        }
        self.reclaim_due.set(true);
        self.log.durable(lsn).await.map_err(storage_err)?;
        Ok(Outcome::Deleted)
    }

    /// `GET .../bootstrap`: the current snapshot, then each message after it,
    /// up to about one read's worth (the client continues from the offset).
    fn bootstrap(&self, key: &StreamKey) -> Reply {
        let mut streams = self.streams.borrow_mut();
        let s = streams.get_mut(key).ok_or(Error::NotFound)?;
        s.last_access_ms = (self.now_ms)();
        let v = s.visible(self.log.durable_lsn());
        let info = s.info(&v);
        let snapshot = match s.snapshots.last_key_value() {
            Some((&offset, snap)) => Some((Offset::new(0, offset), snap.content_type.clone(), self.read_blob(snap)?)),
            None => None,
        };
        let start = s.trim;
        let chunks = &s.chunks[..v.chunks];
        let first = chunks.partition_point(|c| c.start + c.len as u64 <= start);
        let (mut messages, mut bytes, mut pos) = (Vec::new(), 0usize, start);
        for c in &chunks[first..] {
            if bytes > 0 && bytes + c.len as usize > READ_CHUNK_BYTES_MAX {
                break;
            }
            let mut data = Vec::with_capacity(c.len as usize);
            let off = c.data_off as usize;
            self.log.read_body(c.loc, off..off + c.len as usize, &mut data).map_err(storage_err)?;
            if s.json {
                messages.extend(json::split_messages(&data).map(<[u8]>::to_vec));
            } else {
                messages.push(data);
            }
            bytes += c.len as usize;
            pos = c.start + c.len as u64;
        }
        let up_to_date = pos == v.tail;
        Ok(Outcome::Bootstrap(Bootstrap {
            message_type: if s.json { "application/json".into() } else { s.content_type.clone() },
            info,
            snapshot,
            messages,
            next_offset: Offset::new(0, pos),
            up_to_date,
            closed_at_end: up_to_date && v.closed,
        }))
    }

    /// Whether the stream at `key` is live and past its TTL or expiry time.
    fn expiry_due(&self, key: &StreamKey, now_ms: i64) -> bool {
        self.streams
            .borrow()
            .get(key)
            .is_some_and(|s| !s.soft_deleted && rules::expired(&s.lifetime, s.last_access_ms, now_ms))
    }

    /// Lazy expiry: the stream is gone for clients from now on. The delete
    /// record makes that survive a restart; if the log cannot take it now,
    /// the next access after restart expires it again. With forks it is only
    /// soft-deleted (F95). An expired fork releases its source once its
    /// delete is durable, as an explicit delete does.
    async fn expire_if_due(&self, key: &StreamKey) {
        if !self.expiry_due(key, (self.now_ms)()) {
            return;
        }
        if let Ok((lsn, Some(source))) = self.delete_now(key) {
            if self.log.durable(lsn).await.is_ok() {
                self.release_source(source).await;
            }
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
        let (loc, lsn) = self.log.append(h, &persist::encode_delete(soft)).map_err(storage_err)?;
        if soft {
            if let Some(s) = self.streams.borrow_mut().get_mut(key) {
                s.note_meta(loc.segment);
            }
        } else {
            self.index(loc.segment).deleted_uids.push(uid);
            self.reclaim_due.set(true);
        }
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

    /// Background pass (every RECLAIM_INTERVAL_MS): expires streams whose
    /// TTL ran out, then deletes every sealed segment recovery no longer
    /// needs. A segment is needed while it holds
    /// - data a stream still serves (not trimmed, not deleted) or a retained
    ///   snapshot's blob;
    /// - a stream's latest create/state/snapshot record, or a data-less
    ///   record written after it (close, soft delete); a bucket's create;
    /// - a delete record (stream or bucket) while an older segment still holds
    ///   a record that would bring back what it deleted.
    ///
    /// Metadata that alone keeps a segment is re-logged into the active
    /// segment first (a state record, a bucket create), which frees it.
    /// Segments go oldest first, so a delete record never goes before what it
    /// deleted. Recovery then rebuilds the same state from what is left (see
    /// `recover`: appends whose create is gone wait for their state record).
    pub async fn reclaim(&self) {
        if self.stopping.get() {
            // Shutting down: write nothing more.
            return;
        }
        let now = (self.now_ms)();
        let keys: Vec<StreamKey> = self.streams.borrow().keys().cloned().collect();
        let expired: Vec<StreamKey> = keys.into_iter().filter(|k| self.expiry_due(k, now)).collect();
        // Each is checked again: an earlier one's release may have awaited.
        for key in &expired {
            self.expire_if_due(key).await;
        }
        let sealed = self.log.sealed_segments();
        if !self.reclaim_due.get() && sealed.len() == self.reclaim_sealed.get() {
            return;
        }
        self.reclaim_due.set(false);
        if sealed.is_empty() {
            self.reclaim_sealed.set(0);
            return;
        }
        let (data, pins) = self.segment_needs(&sealed);
        // Re-log metadata that alone keeps a sealed segment.
        let mut relogged = 0usize;
        let mut last_lsn = 0;
        let mut seen = HashSet::new();
        'relog: for (seg, list) in &pins {
            if data.contains(seg) {
                continue;
            }
            for pin in list {
                if relogged == crate::limits::RECLAIM_RELOG_MAX {
                    // The rest waits for the next pass.
                    self.reclaim_due.set(true);
                    break 'relog;
                }
                let lsn = match pin {
                    MetaPin::Stream(key) if seen.insert(key.clone()) => {
                        let rec = match self.streams.borrow().get(key) {
                            Some(s) => s.state_record(key),
                            None => continue,
                        };
                        self.log_state(key, &rec, None).map(|(_, lsn)| lsn)
                    }
                    MetaPin::Stream(_) => continue,
                    MetaPin::Bucket(b) => self.log_bucket_create(b),
                };
                match lsn {
                    Ok(lsn) => {
                        last_lsn = lsn;
                        relogged += 1;
                    }
                    // Backpressure or a failing disk: try again next pass.
                    Err(_) => {
                        self.reclaim_due.set(true);
                        return;
                    }
                }
            }
        }
        // With nothing re-logged nothing has changed (no await since the
        // needs were computed); otherwise compute them again.
        let (sealed, data, pins) = if relogged > 0 {
            self.stats.borrow_mut().relogged += relogged as u64;
            if self.log.durable(last_lsn).await.is_err() {
                return;
            }
            let sealed = self.log.sealed_segments();
            let (data, pins) = self.segment_needs(&sealed);
            (sealed, data, pins)
        } else {
            (sealed, data, pins)
        };
        let mut on_disk: BTreeSet<u64> = sealed.iter().copied().collect();
        for &seg in &sealed {
            if data.contains(&seg) || pins.contains_key(&seg) || self.delete_still_needed(seg, &on_disk) {
                continue;
            }
            if let Err(e) = self.log.remove_segment(seg).await {
                tracing::warn!("shard {}: could not reclaim segment {seg}: {e}", self.id);
                self.reclaim_due.set(true);
                break;
            }
            on_disk.remove(&seg);
            self.seg_index.borrow_mut().remove(&seg);
            self.stats.borrow_mut().segments_reclaimed += 1;
        }
        self.reclaim_sealed.set(self.log.sealed_segments().len());
    }

    /// Which of `sealed` hold needed data, and which hold needed metadata (by whom).
    fn segment_needs(&self, sealed: &[u64]) -> (HashSet<u64>, BTreeMap<u64, Vec<MetaPin>>) {
        let oldest = sealed.first().copied().unwrap_or(0);
        let newest = sealed.last().copied().unwrap_or(0);
        let in_range = |seg: u64| (oldest..=newest).contains(&seg);
        let mut data = HashSet::new();
        let mut pins: BTreeMap<u64, Vec<MetaPin>> = BTreeMap::new();
        for (key, s) in self.streams.borrow().iter() {
            // A stream's chunks are in log order, so their segments do not
            // decrease: visit each distinct segment once (O(segments × log chunks)).
            let mut i = 0;
            while let Some(c) = s.chunks.get(i) {
                let seg = c.loc.segment;
                data.insert(seg);
                i += s.chunks[i..].partition_point(|c| c.loc.segment <= seg);
            }
            data.extend(s.snapshots.values().map(|sn| sn.loc.segment));
            for &seg in std::iter::once(&s.state_seg).chain(&s.meta_segs) {
                if in_range(seg) {
                    pins.entry(seg).or_default().push(MetaPin::Stream(key.clone()));
                }
            }
        }
        for (b, &seg) in self.bucket_segs.borrow().iter() {
            if in_range(seg) {
                pins.entry(seg).or_default().push(MetaPin::Bucket(b.clone()));
            }
        }
        (data, pins)
    }

    /// Whether a delete record in `seg` still has something to delete in an
    /// older segment that is still on disk.
    fn delete_still_needed(&self, seg: u64, on_disk: &BTreeSet<u64>) -> bool {
        let index = self.seg_index.borrow();
        let Some(here) = index.get(&seg) else {
            return false;
        };
        let older = || on_disk.range(..seg).filter_map(|o| index.get(o));
        here.deleted_uids.iter().any(|uid| older().any(|i| i.state_uids.contains(uid)))
            || here.bucket_deletes.iter().any(|b| older().any(|i| i.bucket_creates.contains(b)))
    }

    /// Writes a bucket's create record: at creation, and again when the
    /// reclaim pass moves it out of an old segment (recovery treats repeats
    /// as one). Returns its lsn.
    fn log_bucket_create(&self, bucket: &str) -> Result<u64, Error> {
        let h = RecordHeader {
            kind: persist::KIND_BUCKET_CREATE,
            stream_id: 0,
            incarnation: 0,
            stream_offset: 0,
            body_len: 0,
        };
        let (loc, lsn) = self.log.append(h, &persist::encode_bucket(bucket)).map_err(storage_err)?;
        self.note_bucket(bucket, loc.segment, true);
        Ok(lsn)
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
        self.expire_if_due(&source).await;
        let mut streams = self.streams.borrow_mut();
        let s = streams.get_mut(&source).ok_or(Error::NotFound)?;
        if s.soft_deleted {
            return Err(Error::Conflict("the fork source was deleted".into()));
        }
        if s.trim > 0 {
            // A fork copies the source's data from its start.
            return Err(Error::Gone("the fork source's early data was trimmed by a snapshot"));
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
        let mut s = Stream::new(uid, incarnation, rec.content_type, rec.lifetime, now, now);
        debug_assert_eq!(s.json, json);
        s.created_lsn = lsn;
        s.write_lsn = lsn;
        s.tail = data_len as u64;
        s.closed = rec.closed;
        s.closed_lsn = lsn;
        s.last_lsn = lsn;
        s.fork = rec.fork;
        self.note_state(&mut s, loc.segment);
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
            s.apply_append(&rec, loc, body.len() - data_len, lsn);
            if rec.close {
                s.closed_lsn = lsn;
            }
            if s.write_lsn <= self.log.durable_lsn() {
                s.durable_write_ms = s.last_write_ms;
            }
            s.last_write_ms = now;
            s.write_lsn = lsn;
            s.last_lsn = lsn;
            s.info(&Visible { tail: s.tail, closed: s.closed, chunks: s.chunks.len() })
        };
        {
            let mut st = self.stats.borrow_mut();
            st.appends += 1;
            st.append_bytes += data_len as u64;
        }
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
            let (Some(sleep), false, false) = (sleep, remaining.is_zero(), self.stopping.get()) else {
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
        let below_trim = match req.from {
            ReadFrom::Start => s.trim > 0,
            ReadFrom::At(o) => o.pos < s.trim,
            ReadFrom::Now => false,
        };
        if below_trim {
            return Err(Error::Gone("data before the current snapshot was trimmed; read the bootstrap instead"));
        }
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
                let lsn = self.log_bucket_create(&bucket)?;
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
                let (loc, lsn) = self.log.append(h, &body).map_err(storage_err)?;
                self.note_bucket(&bucket, loc.segment, false);
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
