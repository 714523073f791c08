//! A stream's state on its owning shard: its chunks, producers, snapshots,
//! lifetime, and how append and state records change it.

use super::producers::Producers;
use crate::protocol::headers::{is_json, Lifetime};
use crate::protocol::persist::{AppendRecord, ForkRecord, SnapshotMeta, StateRecord};
use crate::protocol::rules::{self, CreateConfig, ProducerPolicy};
use crate::protocol::{Incarnation, Offset, StreamInfo, StreamKey};
use crate::quota::BucketUsage;
use crate::storage::RecordLoc;
use futures_channel::oneshot;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One slice of a stream's data: a record's data part.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chunk {
    /// Stream position of the chunk's first byte.
    pub(super) start: u64,
    pub(super) len: u32,
    pub(super) loc: RecordLoc,
    /// Where the data starts inside the record body.
    pub(super) data_off: u32,
    pub(super) lsn: u64,
}

#[derive(Debug)]
pub(super) struct Stream {
    pub(super) uid: u64,
    pub(super) incarnation: u32,
    pub(super) content_type: String,
    pub(super) json: bool,
    pub(super) lifetime: Lifetime,
    pub(super) created_at_ms: i64,
    /// Lsn of the create record: a listing shows the stream once it is durable.
    pub(super) created_lsn: u64,
    /// Time of the latest write (create, append or close), and its lsn.
    pub(super) last_write_ms: i64,
    pub(super) write_lsn: u64,
    /// Time of a write known durable: what a listing reports while the
    /// latest write is still in flight.
    pub(super) durable_write_ms: i64,
    /// The latest read or write (sliding TTL). On a cell's follower, which
    /// decides no expiry, also `leader_told_ms`: when it last told the
    /// leader of a read it served (`rules::access_report_due`).
    pub(super) last_access_ms: i64,
    pub(super) leader_told_ms: i64,
    /// Tail including appends not yet durable (used to sequence writes).
    pub(super) tail: u64,
    pub(super) closed: bool,
    pub(super) closed_lsn: u64,
    pub(super) closed_by: Option<(String, u64, u64)>,
    pub(super) chunks: Vec<Chunk>,
    /// Its idempotent producers, bounded (see `producers`).
    pub(super) producers: Producers,
    pub(super) stream_seq: Option<String>,
    /// Lsn of the latest record about this stream.
    pub(super) last_lsn: u64,
    /// Live readers waiting at the tail; woken when an append or close is
    /// durable (dropping them on delete wakes them too).
    pub(super) waiters: Vec<oneshot::Sender<()>>,
    /// Set when this stream is a fork (its source, as asked at creation).
    pub(super) fork: Option<ForkRecord>,
    /// Forks (on any shard) created from this stream and not yet gone.
    pub(super) fork_refs: u32,
    /// Deleted while forks still referenced it (F43): 410 to clients, data
    /// kept until the last fork is gone.
    pub(super) soft_deleted: bool,
    /// Data before this position is gone (trimmed when a snapshot was
    /// published there, or by explicit retention): reads below it get 410.
    pub(super) trim: u64,
    /// Retained snapshots by offset; the last one is the current one.
    pub(super) snapshots: BTreeMap<u64, Snap>,
    /// Segment of the latest record holding the stream's whole configuration
    /// (create, state or snapshot): recovery needs it.
    pub(super) state_seg: u64,
    /// Segments of the records written since then that hold no data
    /// (close-only appends, soft delete): recovery needs them too.
    pub(super) meta_segs: Vec<u64>,
    /// Recovery only: replayed records resumed here after a gap (records
    /// reclaimed below a trim); a later state record must trim this far.
    pub(super) gap_end: u64,
    /// Recovery only: the latest state record lists a snapshot whose record
    /// was not found (fine if a later state record no longer lists it).
    pub(super) blob_missing: bool,
    /// The quota counter of its bucket, while it counts there (from its
    /// create or the counter's seeding, to its delete).
    pub(super) usage: Option<Arc<BucketUsage>>,
}

/// A published snapshot: its blob is the data part of its snapshot record.
#[derive(Debug, Clone)]
pub(super) struct Snap {
    pub(super) content_type: String,
    pub(super) loc: RecordLoc,
    pub(super) data_off: u32,
    pub(super) len: u32,
    pub(super) published_at_ms: i64,
}

/// What keeps a segment's metadata needed: re-logging it frees the segment.
pub(super) enum MetaPin {
    Stream(StreamKey),
    Bucket(String),
    /// A subscription's latest record.
    Sub(super::subs::SubId),
}

/// What a reader may see of a stream: its durable prefix.
pub(super) struct Visible {
    pub(super) tail: u64,
    pub(super) closed: bool,
    pub(super) chunks: usize,
}

impl Stream {
    /// A stream with this configuration and nothing else yet.
    /// Recovery: a stream known so far only by its uid (appends whose create
    /// was reclaimed), until a state record adopts it and fills in the rest.
    pub(super) fn adoptable(uid: u64, incarnation: u32, now: i64) -> Self {
        Stream::new(uid, incarnation, String::new(), Lifetime::Forever, 0, now)
    }

    pub(super) fn new(
        uid: u64,
        incarnation: u32,
        content_type: String,
        lifetime: Lifetime,
        created_at_ms: i64,
        now: i64,
    ) -> Self {
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
            leader_told_ms: 0,
            tail: 0,
            closed: false,
            closed_lsn: 0,
            closed_by: None,
            chunks: Vec::new(),
            producers: Producers::default(),
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
            usage: None,
        }
    }

    /// What the stream holds against its bucket's max_bytes: its retained
    /// data (tail minus trim point) and its retained snapshots' bodies.
    pub(super) fn stored_bytes(&self) -> u64 {
        let blobs: u64 = self.snapshots.values().map(|s| u64::from(s.len)).sum();
        self.tail.saturating_sub(self.trim) + blobs
    }

    /// [`Stream::stored_bytes`] once a snapshot of `blob_len` bytes is
    /// published at `offset` with `kept` the snapshots listed afterwards
    /// (the new one among them): the data from the new trim point on, the
    /// bodies of the older snapshots kept, and the new body.
    pub(super) fn stored_bytes_after_snapshot(&self, kept: &[SnapshotMeta], offset: u64, blob_len: usize) -> u64 {
        let older: u64 = kept
            .iter()
            .filter(|m| m.offset != offset)
            .filter_map(|m| self.snapshots.get(&m.offset))
            .map(|sn| u64::from(sn.len))
            .sum();
        self.tail.saturating_sub(offset.max(self.trim)) + older + blob_len as u64
    }

    /// The stream's state as a record (see [`StateRecord`]), without a blob.
    pub(super) fn state_record(&self, key: &StreamKey) -> StateRecord {
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
            producers: self.producers.records(),
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

    /// Recovery: takes the metadata of a state record (not data or
    /// snapshots); its producer table held to `policy`'s bound.
    pub(super) fn apply_state(&mut self, r: &StateRecord, policy: &ProducerPolicy) {
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
        self.producers = Producers::from_records(&r.producers, policy, r.last_write_ms);
    }

    /// Recovery (and a cell's follower): replays an append record's effect.
    /// Its producer first gets the room its writer made at the record's time
    /// (see `producers`), and the table stays within `policy`'s bound.
    pub(super) fn replay_append(
        &mut self,
        a: &AppendRecord,
        loc: RecordLoc,
        offset: u64,
        data_off: usize,
        policy: &ProducerPolicy,
    ) -> Result<(), String> {
        if offset < self.tail {
            return Err(format!("record at {}:{} says offset {offset}, below {}", loc.segment, loc.pos, self.tail));
        }
        if offset > self.tail {
            // The records in between were reclaimed: their data was trimmed.
            self.gap_end = offset;
            self.chunks.clear();
            self.tail = offset;
        }
        if let Some((pid, _, _)) = &a.producer {
            self.producers.make_room(pid, policy, a.written_at_ms);
        }
        self.apply_append(a, loc, data_off, 0);
        self.producers.bound(policy, a.written_at_ms);
        self.last_write_ms = a.written_at_ms;
        self.durable_write_ms = a.written_at_ms;
        // A write is an access: a follower applying it (and a new leader
        // after it) must not count the stream idle since its creation.
        self.last_access_ms = self.last_access_ms.max(a.written_at_ms);
        Ok(())
    }

    /// An append record's effect on the stream, live and at recovery: its
    /// data (the body from `data_off` on) at the tail, its Stream-Seq, its
    /// producer's state, its closure.
    pub(super) fn apply_append(&mut self, a: &AppendRecord, loc: RecordLoc, data_off: usize, lsn: u64) {
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
            self.producers.accept(pid, (*epoch, *seq), self.tail, a.written_at_ms);
        }
        if a.close {
            self.closed = true;
            self.closed_by = a.producer.clone();
        }
    }

    pub(super) fn note_meta(&mut self, segment: u64) {
        if self.meta_segs.last() != Some(&segment) {
            self.meta_segs.push(segment);
        }
    }

    /// Drops the data before `trim` (a chunk boundary).
    pub(super) fn trim_to(&mut self, trim: u64) {
        self.trim = self.trim.max(trim);
        let keep = self.chunks.partition_point(|c| c.start + c.len as u64 <= self.trim);
        self.chunks.drain(..keep);
    }

    pub(super) fn visible(&self, durable_lsn: u64) -> Visible {
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

    /// Which creation of its path this stream is: its uid and number,
    /// both in every record's header, so the same after recovery and on
    /// every replica.
    pub(super) fn incarnation(&self) -> Incarnation {
        Incarnation::new(self.uid, self.incarnation)
    }

    pub(super) fn info(&self, v: &Visible) -> StreamInfo {
        let tail = Offset::new(0, v.tail);
        StreamInfo {
            incarnation: self.incarnation(),
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
            retained_offset: (self.trim > 0).then(|| Offset::new(0, self.trim)),
        }
    }

    /// Where the retained data starts, for a read: whether the current
    /// snapshot stands for what is before it decides what `-1` means.
    pub(super) fn retained(&self) -> rules::Retained {
        let snapshot_at_trim = self.snapshots.keys().next_back() == Some(&self.trim);
        rules::Retained { trim: self.trim, snapshot_at_trim }
    }

    pub(super) fn config(&self) -> CreateConfig {
        CreateConfig { content_type: self.content_type.clone(), lifetime: self.lifetime.clone(), closed: self.closed }
    }
}
