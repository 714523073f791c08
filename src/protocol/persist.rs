//! Bodies of the records a shard writes to its log, as bytes. Pure encoding:
//! the storage layer frames and checksums these without understanding them.
//!
//! Every state change that must survive a crash is one record, so one fsync
//! commits it atomically: an append carries its data together with the
//! producer state and Stream-Seq it establishes and its close flag.

use super::headers::Lifetime;

pub const KIND_CREATE: u8 = 1;
pub const KIND_APPEND: u8 = 2;
pub const KIND_DELETE: u8 = 3;
pub const KIND_BUCKET_CREATE: u8 = 4;
pub const KIND_BUCKET_DELETE: u8 = 5;
/// A checkpoint of a stream's whole state (see [`StateRecord`]): written when
/// a snapshot is deleted, and when segment reclamation moves a stream's
/// metadata out of an old segment.
pub const KIND_STATE: u8 = 6;
/// A snapshot publish: a [`StateRecord`] (with the new snapshot listed and the
/// stream trimmed at its offset) followed by the snapshot blob.
pub const KIND_SNAPSHOT: u8 = 7;
/// A subscription's whole state, or its delete (`subs::record::SubRecord`).
pub const KIND_SUBSCRIPTION: u8 = 8;
/// In a cell: the sealed segments up to the one named go on every replica
/// once this record is committed (the leader decided nothing needs them).
pub const KIND_RECLAIM: u8 = 9;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRecord {
    pub bucket: String,
    pub stream: String,
    pub content_type: String,
    pub lifetime: Lifetime,
    pub closed: bool,
    pub created_at_ms: i64,
    /// Set when the stream is a fork: its source and fork point as asked.
    pub fork: Option<ForkRecord>,
    /// Initial data (stored form), possibly empty. For a fork: the data it
    /// inherited, copied at creation.
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkRecord {
    pub bucket: String,
    pub stream: String,
    pub source_uid: u64,
    /// `Stream-Fork-Offset` as (seq, pos), if given.
    pub offset: Option<(u64, u64)>,
    pub sub_offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendRecord {
    pub close: bool,
    pub stream_seq: Option<String>,
    /// (producer id, epoch, seq) this append establishes.
    pub producer: Option<(String, u64, u64)>,
    pub written_at_ms: i64,
    pub data: Vec<u8>,
}

/// One published snapshot, as listed in a [`StateRecord`]. The blob itself
/// lives in the `KIND_SNAPSHOT` record that published it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// Stream position the snapshot stands for (the state of every message before it).
    pub offset: u64,
    pub content_type: String,
    pub published_at_ms: i64,
}

/// An idempotent producer's state: epoch, highest accepted seq, when its
/// last accepted append was written, and the remembered (epoch, seq, tail)
/// of its latest appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    pub id: String,
    pub epoch: u64,
    pub last_seq: u64,
    /// `written_at_ms` of its last accepted append (what its idle expiry
    /// counts from). State records written before this was kept carry none:
    /// they read as the record's `last_write_ms`, never earlier than the
    /// truth, so a producer is never forgotten sooner than it should be.
    pub last_ms: i64,
    pub acks: Vec<(u64, u64, u64)>,
}

/// Everything recovery needs to rebuild a stream except its data: with it,
/// every older record of the stream whose data is trimmed (or that holds no
/// data) is no longer needed, which is what lets old segments be reclaimed.
/// The header of the record carries the stream's uid and incarnation; its
/// `stream_offset` is `tail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecord {
    pub bucket: String,
    pub stream: String,
    pub content_type: String,
    pub lifetime: Lifetime,
    pub created_at_ms: i64,
    pub last_write_ms: i64,
    pub fork: Option<ForkRecord>,
    /// Next offset when the record was written.
    pub tail: u64,
    /// Data before this position is gone (reads below it: 410).
    pub trim: u64,
    pub closed: bool,
    pub closed_by: Option<(String, u64, u64)>,
    pub stream_seq: Option<String>,
    pub producers: Vec<ProducerRecord>,
    pub soft_deleted: bool,
    /// Every retained snapshot, oldest first; the last is the current one.
    pub snapshots: Vec<SnapshotMeta>,
    /// `KIND_SNAPSHOT` only: the published blob (last and unprefixed, like
    /// an append's data). Empty for `KIND_STATE`.
    pub blob: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed record body")]
pub struct Malformed;

/// Why a state record's body was refused. A flag this build does not know
/// is told apart from damage: a newer build wrote it, in a layout this one
/// cannot read, and reading on would misread every field after the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateDecodeError {
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error(
        "state record flags {flags:#04x} include {unknown:#04x}, which this build does not know: a newer build \
         wrote it; run a build that reads it (see \"Nodes of different builds\" in docs/operations.md)"
    )]
    UnknownFlags { flags: u8, unknown: u8 },
}

struct W<'a>(&'a mut Vec<u8>);
impl W<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
}

struct R<'a>(&'a [u8]);
impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| Malformed)?))
    }
    fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.u64()?;
        self.take(usize::try_from(n).map_err(|_| Malformed)?)
    }
    fn string(&mut self) -> Result<String, Malformed> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| Malformed)
    }
}

impl W<'_> {
    fn lifetime(&mut self, l: &Lifetime) {
        match l {
            Lifetime::Forever => self.u8(0),
            Lifetime::Ttl { secs } => {
                self.u8(1);
                self.u64(*secs);
            }
            Lifetime::ExpiresAt { at_ms, raw } => {
                self.u8(2);
                self.u64(*at_ms as u64);
                self.str(raw);
            }
        }
    }
    fn fork(&mut self, fork: &Option<ForkRecord>) {
        match fork {
            None => self.u8(0),
            Some(f) => {
                self.u8(1);
                self.str(&f.bucket);
                self.str(&f.stream);
                self.u64(f.source_uid);
                match f.offset {
                    None => self.u8(0),
                    Some((seq, pos)) => {
                        self.u8(1);
                        self.u64(seq);
                        self.u64(pos);
                    }
                }
                self.u64(f.sub_offset);
            }
        }
    }
    fn opt_str(&mut self, s: &Option<String>) {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
}

impl R<'_> {
    fn lifetime(&mut self) -> Result<Lifetime, Malformed> {
        Ok(match self.u8()? {
            0 => Lifetime::Forever,
            1 => Lifetime::Ttl { secs: self.u64()? },
            2 => Lifetime::ExpiresAt { at_ms: self.u64()? as i64, raw: self.string()? },
            _ => return Err(Malformed),
        })
    }
    fn fork(&mut self) -> Result<Option<ForkRecord>, Malformed> {
        Ok(match self.u8()? {
            0 => None,
            1 => {
                let bucket = self.string()?;
                let stream = self.string()?;
                let source_uid = self.u64()?;
                let offset = match self.u8()? {
                    0 => None,
                    1 => Some((self.u64()?, self.u64()?)),
                    _ => return Err(Malformed),
                };
                Some(ForkRecord { bucket, stream, source_uid, offset, sub_offset: self.u64()? })
            }
            _ => return Err(Malformed),
        })
    }
    fn opt_str(&mut self) -> Result<Option<String>, Malformed> {
        Ok(match self.u8()? {
            0 => None,
            1 => Some(self.string()?),
            _ => return Err(Malformed),
        })
    }
    /// A count of items that each take at least `min_bytes`: bounded by what is left.
    fn count(&mut self, min_bytes: usize) -> Result<usize, Malformed> {
        let n = usize::try_from(self.u64()?).map_err(|_| Malformed)?;
        if n > self.0.len() / min_bytes.max(1) {
            return Err(Malformed);
        }
        Ok(n)
    }
}

impl CreateRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.data.len());
        let mut w = W(&mut out);
        w.str(&self.bucket);
        w.str(&self.stream);
        w.str(&self.content_type);
        w.lifetime(&self.lifetime);
        w.u8(self.closed as u8);
        w.u64(self.created_at_ms as u64);
        w.fork(&self.fork);
        w.bytes(&self.data);
        out
    }

    pub fn decode(b: &[u8]) -> Result<Self, Malformed> {
        let mut r = R(b);
        let bucket = r.string()?;
        let stream = r.string()?;
        let content_type = r.string()?;
        let lifetime = r.lifetime()?;
        let closed = r.u8()? != 0;
        let created_at_ms = r.u64()? as i64;
        let fork = r.fork()?;
        let data = r.bytes()?.to_vec();
        if !r.0.is_empty() {
            return Err(Malformed);
        }
        Ok(CreateRecord { bucket, stream, content_type, lifetime, closed, created_at_ms, fork, data })
    }
}

const F_CLOSE: u8 = 1;
const F_SEQ: u8 = 2;
const F_PRODUCER: u8 = 4;
/// A state record's flag: each producer carries its last append time.
const S_PRODUCER_TIMES: u8 = 4;
/// Every state record flag this build reads (1 closed, 2 soft-deleted).
const S_KNOWN: u8 = 1 | 2 | S_PRODUCER_TIMES;

impl AppendRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.encode_meta();
        out.extend_from_slice(&self.data);
        out
    }

    /// The body without its data: a record's body is this, then the data
    /// (which the log copies straight from the request).
    pub fn encode_meta(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        let mut w = W(&mut out);
        let flags = (self.close as u8 * F_CLOSE)
            | (self.stream_seq.is_some() as u8 * F_SEQ)
            | (self.producer.is_some() as u8 * F_PRODUCER);
        w.u8(flags);
        w.u64(self.written_at_ms as u64);
        if let Some(s) = &self.stream_seq {
            w.str(s);
        }
        if let Some((id, epoch, seq)) = &self.producer {
            w.str(id);
            w.u64(*epoch);
            w.u64(*seq);
        }
        // The data goes last and unprefixed, so a reader can find it as a
        // suffix of the body without copying (see `data_start`).
        out
    }

    /// Decodes everything but the data; returns the offset where the data starts.
    pub fn decode_meta(b: &[u8]) -> Result<(AppendRecord, usize), Malformed> {
        let mut r = R(b);
        let flags = r.u8()?;
        if flags & !(F_CLOSE | F_SEQ | F_PRODUCER) != 0 {
            return Err(Malformed);
        }
        let written_at_ms = r.u64()? as i64;
        let stream_seq = if flags & F_SEQ != 0 { Some(r.string()?) } else { None };
        let producer = if flags & F_PRODUCER != 0 { Some((r.string()?, r.u64()?, r.u64()?)) } else { None };
        let start = b.len() - r.0.len();
        Ok((AppendRecord { close: flags & F_CLOSE != 0, stream_seq, producer, written_at_ms, data: Vec::new() }, start))
    }

    pub fn decode(b: &[u8]) -> Result<Self, Malformed> {
        let (mut rec, start) = Self::decode_meta(b)?;
        rec.data = b[start..].to_vec();
        Ok(rec)
    }
}

impl StateRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + self.blob.len());
        let mut w = W(&mut out);
        w.str(&self.bucket);
        w.str(&self.stream);
        w.str(&self.content_type);
        w.lifetime(&self.lifetime);
        w.u64(self.created_at_ms as u64);
        w.u64(self.last_write_ms as u64);
        w.fork(&self.fork);
        w.u64(self.tail);
        w.u64(self.trim);
        w.u8(self.closed as u8 | (self.soft_deleted as u8) << 1 | S_PRODUCER_TIMES);
        match &self.closed_by {
            None => w.u8(0),
            Some((id, epoch, seq)) => {
                w.u8(1);
                w.str(id);
                w.u64(*epoch);
                w.u64(*seq);
            }
        }
        w.opt_str(&self.stream_seq);
        w.u64(self.producers.len() as u64);
        for p in &self.producers {
            w.str(&p.id);
            w.u64(p.epoch);
            w.u64(p.last_seq);
            w.u64(p.last_ms as u64);
            w.u64(p.acks.len() as u64);
            for &(e, s, t) in &p.acks {
                w.u64(e);
                w.u64(s);
                w.u64(t);
            }
        }
        w.u64(self.snapshots.len() as u64);
        for m in &self.snapshots {
            w.u64(m.offset);
            w.str(&m.content_type);
            w.u64(m.published_at_ms as u64);
        }
        // The blob goes last and unprefixed (see AppendRecord::encode).
        out.extend_from_slice(&self.blob);
        out
    }

    /// Decodes everything but the blob; returns where the blob starts.
    pub fn decode_meta(b: &[u8]) -> Result<(StateRecord, usize), StateDecodeError> {
        let mut r = R(b);
        let bucket = r.string()?;
        let stream = r.string()?;
        let content_type = r.string()?;
        let lifetime = r.lifetime()?;
        let created_at_ms = r.u64()? as i64;
        let last_write_ms = r.u64()? as i64;
        let fork = r.fork()?;
        let tail = r.u64()?;
        let trim = r.u64()?;
        let flags = r.u8()?;
        if flags & !S_KNOWN != 0 {
            return Err(StateDecodeError::UnknownFlags { flags, unknown: flags & !S_KNOWN });
        }
        if trim > tail {
            return Err(Malformed.into());
        }
        let closed_by = match r.u8()? {
            0 => None,
            1 => Some((r.string()?, r.u64()?, r.u64()?)),
            _ => return Err(Malformed.into()),
        };
        let stream_seq = r.opt_str()?;
        let mut producers = Vec::new();
        for _ in 0..r.count(32)? {
            let id = r.string()?;
            let (epoch, last_seq) = (r.u64()?, r.u64()?);
            let last_ms = if flags & S_PRODUCER_TIMES != 0 { r.u64()? as i64 } else { last_write_ms };
            let mut acks = Vec::new();
            for _ in 0..r.count(24)? {
                acks.push((r.u64()?, r.u64()?, r.u64()?));
            }
            producers.push(ProducerRecord { id, epoch, last_seq, last_ms, acks });
        }
        let mut snapshots = Vec::new();
        for _ in 0..r.count(24)? {
            snapshots.push(SnapshotMeta {
                offset: r.u64()?,
                content_type: r.string()?,
                published_at_ms: r.u64()? as i64,
            });
        }
        let start = b.len() - r.0.len();
        let rec = StateRecord {
            bucket,
            stream,
            content_type,
            lifetime,
            created_at_ms,
            last_write_ms,
            fork,
            tail,
            trim,
            closed: flags & 1 != 0,
            closed_by,
            stream_seq,
            producers,
            soft_deleted: flags & 2 != 0,
            snapshots,
            blob: Vec::new(),
        };
        Ok((rec, start))
    }

    pub fn decode(b: &[u8]) -> Result<Self, StateDecodeError> {
        let (mut rec, start) = Self::decode_meta(b)?;
        rec.blob = b[start..].to_vec();
        Ok(rec)
    }
}

/// Body of a delete record: a soft delete keeps the stream's data for its
/// forks (F43); a hard delete forgets it.
pub fn encode_delete(soft: bool) -> Vec<u8> {
    vec![soft as u8]
}

pub fn decode_delete(b: &[u8]) -> Result<bool, Malformed> {
    match b {
        [] | [0] => Ok(false),
        [1] => Ok(true),
        _ => Err(Malformed),
    }
}

/// A reclaim record carries the newest segment that goes (u64, LE).
pub fn encode_reclaim(through: u64) -> Vec<u8> {
    through.to_le_bytes().to_vec()
}

pub fn decode_reclaim(b: &[u8]) -> Result<u64, Malformed> {
    Ok(u64::from_le_bytes(b.try_into().map_err(|_| Malformed)?))
}

/// Bucket records carry just the bucket name.
pub fn encode_bucket(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    W(&mut out).str(name);
    out
}

pub fn decode_bucket(b: &[u8]) -> Result<String, Malformed> {
    let mut r = R(b);
    let s = r.string()?;
    if !r.0.is_empty() {
        return Err(Malformed);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_round_trip() {
        for lifetime in [
            Lifetime::Forever,
            Lifetime::Ttl { secs: 3600 },
            Lifetime::ExpiresAt { at_ms: 1_700_000_000_000, raw: "2023-11-14T22:13:20Z".into() },
        ] {
            let r = CreateRecord {
                bucket: "b-1".into(),
                stream: "a/b".into(),
                content_type: "text/plain".into(),
                lifetime,
                closed: true,
                created_at_ms: 42,
                fork: Some(ForkRecord {
                    bucket: "b".into(),
                    stream: "src".into(),
                    source_uid: 9,
                    offset: Some((0, 5)),
                    sub_offset: 2,
                }),
                data: b"hello".to_vec(),
            };
            assert_eq!(CreateRecord::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn append_round_trip_all_flag_combinations() {
        for close in [false, true] {
            for seq in [None, Some("0009".to_string())] {
                for producer in [None, Some(("p".to_string(), 3u64, 9u64))] {
                    let r = AppendRecord {
                        close,
                        stream_seq: seq.clone(),
                        producer: producer.clone(),
                        written_at_ms: 7,
                        data: vec![1, 2, 3, 0, 255],
                    };
                    let enc = r.encode();
                    assert_eq!(AppendRecord::decode(&enc).unwrap(), r);
                    let (_, start) = AppendRecord::decode_meta(&enc).unwrap();
                    assert_eq!(&enc[start..], &r.data[..]);
                }
            }
        }
    }

    #[test]
    fn truncated_bodies_are_malformed() {
        let r = CreateRecord {
            bucket: "bbbb".into(),
            stream: "s".into(),
            content_type: "x/y".into(),
            lifetime: Lifetime::Forever,
            closed: false,
            created_at_ms: 1,
            fork: None,
            data: vec![],
        };
        let enc = r.encode();
        for n in 0..enc.len() {
            assert!(CreateRecord::decode(&enc[..n]).is_err());
        }
        assert!(AppendRecord::decode(&[0x80]).is_err());
        assert_eq!(decode_bucket(&encode_bucket("abcd")).unwrap(), "abcd");
    }

    fn state() -> StateRecord {
        StateRecord {
            bucket: "bkt1".into(),
            stream: "s".into(),
            content_type: "application/json".into(),
            lifetime: Lifetime::Ttl { secs: 60 },
            created_at_ms: 5,
            last_write_ms: 9,
            fork: Some(ForkRecord {
                bucket: "b".into(),
                stream: "src".into(),
                source_uid: 3,
                offset: None,
                sub_offset: 0,
            }),
            tail: 100,
            trim: 40,
            closed: true,
            closed_by: Some(("p".into(), 1, 7)),
            stream_seq: Some("0003".into()),
            producers: vec![ProducerRecord {
                id: "p".into(),
                epoch: 1,
                last_seq: 7,
                last_ms: 8,
                acks: vec![(1, 6, 90), (1, 7, 100)],
            }],
            soft_deleted: true,
            snapshots: vec![
                SnapshotMeta { offset: 20, content_type: "a/b".into(), published_at_ms: 1 },
                SnapshotMeta { offset: 40, content_type: "c/d".into(), published_at_ms: 2 },
            ],
            blob: b"{\"state\":1}".to_vec(),
        }
    }

    #[test]
    fn state_round_trip_and_blob_is_a_suffix() {
        let r = state();
        let enc = r.encode();
        assert_eq!(StateRecord::decode(&enc).unwrap(), r);
        let (meta, start) = StateRecord::decode_meta(&enc).unwrap();
        assert_eq!(&enc[start..], &r.blob[..]);
        assert!(meta.blob.is_empty());
        let plain = StateRecord { blob: Vec::new(), soft_deleted: false, closed: false, ..state() };
        assert_eq!(StateRecord::decode(&plain.encode()).unwrap(), plain);
    }

    #[test]
    fn truncated_or_inconsistent_state_is_malformed() {
        let enc = StateRecord { blob: Vec::new(), ..state() }.encode();
        // Every strict prefix fails except those that only cut the (empty) blob.
        for n in 0..enc.len() {
            assert!(StateRecord::decode_meta(&enc[..n]).is_err(), "prefix {n} decoded");
        }
        let bad = StateRecord { trim: 101, ..state() };
        assert!(StateRecord::decode_meta(&bad.encode()).is_err(), "trim past the tail must be refused");
    }

    #[test]
    fn a_state_record_without_producer_times_reads_them_as_its_last_write() {
        // The body of the format before producers carried a time: flags
        // without bit 4 and no time after each producer's last seq. Where
        // the flags and the time lie: the first byte that changes with them.
        let r = StateRecord { blob: Vec::new(), ..state() };
        let enc = r.encode();
        let first_change = |other: &StateRecord| enc.iter().zip(other.encode()).position(|(a, b)| *a != b).unwrap();
        let flags_at = first_change(&StateRecord { closed: false, ..r.clone() });
        let mut later = r.clone();
        later.producers[0].last_ms += 1;
        let time_at = first_change(&later);
        assert_eq!(enc[flags_at], 3 | S_PRODUCER_TIMES, "the new format sets the flag");
        assert_eq!(enc[time_at..time_at + 8], 8u64.to_le_bytes());
        let mut body = enc[..time_at].to_vec();
        body.extend_from_slice(&enc[time_at + 8..]);
        body[flags_at] = 3;
        let back = StateRecord::decode(&body).unwrap();
        assert_eq!(back.producers[0].last_ms, r.last_write_ms);
        assert_eq!(
            StateRecord { producers: vec![ProducerRecord { last_ms: 8, ..back.producers[0].clone() }], ..back },
            r
        );
    }

    #[test]
    fn a_state_record_with_a_flag_this_build_does_not_know_is_refused_with_a_reason() {
        let enc = StateRecord { blob: Vec::new(), ..state() }.encode();
        let flags_at = enc.iter().zip(StateRecord { closed: false, ..state() }.encode()).position(|(a, b)| *a != b);
        let flags_at = flags_at.unwrap();
        for bit in [8u8, 0x80] {
            let mut body = enc.clone();
            body[flags_at] |= bit;
            let e = StateRecord::decode_meta(&body).unwrap_err();
            assert_eq!(e, StateDecodeError::UnknownFlags { flags: enc[flags_at] | bit, unknown: bit });
            let msg = e.to_string();
            assert!(msg.contains("does not know") && msg.contains("newer build"), "{msg}");
            assert!(msg.contains(&format!("{bit:#04x}")), "the message names the bit: {msg}");
        }
        // Damage is still told as damage.
        let e = StateRecord::decode_meta(&enc[..flags_at]).unwrap_err();
        assert_eq!(e, StateDecodeError::Malformed(Malformed));
    }

    #[test]
    fn the_rest_of_a_largest_state_record_fits_its_allowance() {
        use crate::limits::*;
        let name = |n: usize| "n".repeat(n);
        let ct = name(256); // content types are not bounded but by the request head: 256 each here
        let fork = ForkRecord {
            bucket: name(BUCKET_ID_BYTES_MAX),
            stream: name(V1_PATH_BYTES_MAX),
            source_uid: u64::MAX,
            offset: Some((u64::MAX, u64::MAX)),
            sub_offset: u64::MAX,
        };
        let rec = StateRecord {
            bucket: name(BUCKET_ID_BYTES_MAX),
            stream: name(V1_PATH_BYTES_MAX),
            content_type: ct.clone(),
            lifetime: Lifetime::ExpiresAt { at_ms: i64::MAX, raw: name(64) },
            fork: Some(fork),
            closed_by: Some((name(PRODUCER_ID_BYTES_MAX), u64::MAX, u64::MAX)),
            stream_seq: Some(name(STREAM_SEQ_BYTES_MAX)),
            producers: Vec::new(),
            snapshots: vec![SnapshotMeta { offset: 1, content_type: ct, published_at_ms: 1 }; SNAPSHOTS_PER_STREAM_MAX],
            blob: Vec::new(),
            ..state()
        };
        assert!(rec.encode().len() <= STATE_RECORD_REST_BYTES / 2, "{} bytes", rec.encode().len());
    }

    #[test]
    fn a_largest_producer_fits_its_budget_in_a_state_record() {
        use crate::limits::{PRODUCER_ACKS_KEPT, PRODUCER_ID_BYTES_MAX, PRODUCER_RECORD_BYTES_MAX};
        let empty = StateRecord { producers: Vec::new(), blob: Vec::new(), ..state() };
        let big = ProducerRecord {
            id: "x".repeat(PRODUCER_ID_BYTES_MAX),
            epoch: u64::MAX,
            last_seq: u64::MAX,
            last_ms: i64::MAX,
            acks: vec![(u64::MAX, u64::MAX, u64::MAX); PRODUCER_ACKS_KEPT],
        };
        let one = StateRecord { producers: vec![big], ..empty.clone() };
        assert!(one.encode().len() - empty.encode().len() <= PRODUCER_RECORD_BYTES_MAX);
    }
}
