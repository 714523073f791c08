//! Tiered storage: moving sealed segments to the object store, reading them
//! back by range, and removing them there.
//!
//! One segment goes remote in four steps, each durable before the next, so
//! a crash at any point loses nothing:
//! 1. upload the sealed file to its key and verify the stored object
//!    ([`TierClient::put_verified`]: size, and MD5 where the ETag is one);
//! 2. write its *skeleton* durably (`NNN.skel` beside the segments): every
//!    record's header and the part of its body recovery needs, which is all
//!    of it but append data and snapshot blobs (the caller says how much);
//! 3. append a [`KIND_TIER`] record naming the segment and wait until it is
//!    durable;
//! 4. delete the local file; reads of it now fetch blocks from the store.
//!
//! Recovery (see `recovery.rs`) finishes or undoes an interrupted move: a
//! skeleton beside its file with a tier record finishes step 4; without the
//! record the attempt is dropped (the skeleton deleted; the next attempt
//! overwrites the object, or the sweep deletes it); a skeleton without its
//! file is a remote segment. Removing a remote segment deletes the skeleton
//! first, then the object; an object no skeleton names is an orphan that
//! [`Log::sweep_remote`] deletes.

use super::*;
use crate::limits::{TIER_BLOCK_BYTES, TIER_CACHE_BYTES};
use crate::storage::error::ColdNeed;
use crate::tier::TierClient;
use std::collections::HashMap;

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

/// Tiering counters, part of [`LogStats`].
#[derive(Debug, Clone, Default)]
pub struct TierStats {
    pub uploads_ok: u64,
    pub uploads_failed: u64,
    pub uploaded_bytes: u64,
    /// Record reads of remote segments served from the block cache.
    pub cold_cached: u64,
    /// Block fetches from the store that succeeded, and their bytes.
    pub cold_fetched: u64,
    pub cold_fetched_bytes: u64,
    /// Block fetches that failed (the read answered 503).
    pub cold_unavailable: u64,
    /// Remote objects deleted (reclaim and orphan sweeps).
    pub remote_deleted: u64,
}

struct Cached {
    bytes: Rc<[u8]>,
    used: u64,
}

/// Fetched blocks of remote segments, least recently used evicted first.
#[derive(Default)]
pub(super) struct BlockCache {
    /// By (segment, block): the bytes and when they were last used.
    blocks: HashMap<(u64, u64), Cached>,
    bytes: u64,
    clock: u64,
}

impl BlockCache {
    fn get(&mut self, segment: u64, block: u64) -> Option<Rc<[u8]>> {
        self.clock += 1;
        let clock = self.clock;
        self.blocks.get_mut(&(segment, block)).map(|c| {
            c.used = clock;
            c.bytes.clone()
        })
    }

    /// Inserts blocks `first..` of `segment`, then evicts the least recently
    /// used others until the cache is within its budget.
    fn insert(&mut self, segment: u64, first: u64, bytes: &[u8]) {
        let fresh: Vec<u64> = (first..).take(bytes.len().div_ceil(TIER_BLOCK_BYTES as usize)).collect();
        for (&block, chunk) in fresh.iter().zip(bytes.chunks(TIER_BLOCK_BYTES as usize)) {
            self.clock += 1;
            if let Some(old) = self.blocks.insert((segment, block), Cached { bytes: Rc::from(chunk), used: self.clock })
            {
                self.bytes -= old.bytes.len() as u64;
            }
            self.bytes += chunk.len() as u64;
        }
        while self.bytes > TIER_CACHE_BYTES {
            let victim = self
                .blocks
                .iter()
                .filter(|(k, _)| k.0 != segment || !fresh.contains(&k.1))
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| *k);
            let Some(k) = victim else { break };
            let gone = self.blocks.remove(&k).expect("the victim is cached");
            self.bytes -= gone.bytes.len() as u64;
        }
    }

    fn forget(&mut self, segment: u64) {
        let bytes = &mut self.bytes;
        self.blocks.retain(|k, c| {
            let keep = k.0 != segment;
            if !keep {
                *bytes -= c.bytes.len() as u64;
            }
            keep
        });
    }
}

/// What recovery needs of a remote segment: its records' headers and
/// positions, and the leading body bytes of each (all but bulk data).
pub(super) struct Skeleton {
    pub entries: Vec<SkelEntry>,
    bytes: Vec<u8>,
}

pub(super) struct SkelEntry {
    pub header: RecordHeader,
    pub pos: u64,
    meta: std::ops::Range<usize>,
}

const SKEL_MAGIC: &[u8; 8] = b"RSSKEL01";
const SKEL_HEAD_BYTES: usize = 32;
const SKEL_ENTRY_BYTES: usize = 48;

impl Skeleton {
    /// The skeleton of sealed segment `no`: scans (and verifies) every
    /// record up to the seal. `keep(header, body)` says how many leading
    /// body bytes recovery needs.
    pub fn build(no: u64, seg: &[u8], keep: KeepFn) -> Result<Vec<u8>> {
        let corrupt = |pos: usize| Error::Corrupt { segment: no, position: pos as u64 };
        let mut out = Vec::with_capacity(seg.len() / 16);
        out.extend_from_slice(SKEL_MAGIC);
        out.extend_from_slice(&no.to_le_bytes());
        out.extend_from_slice(&(seg.len() as u64).to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        // Records before the seal (pads too), and entries (pads are left out).
        let (mut pos, mut count, mut entries) = (0usize, 0u64, 0u64);
        loop {
            let (h, body, framed) =
                record::decode(no, seg.get(pos..).ok_or_else(|| corrupt(pos))?).map_err(|_| corrupt(pos))?;
            let body = &seg[pos..][body];
            if h.kind == record::KIND_SEAL {
                if !record::is_seal_of(&h, body, pos as u64, count) {
                    return Err(corrupt(pos));
                }
                break;
            }
            if h.kind == record::KIND_PAD {
                (pos, count) = (pos + framed, count + 1);
                continue;
            }
            let meta = if h.kind == record::KIND_TIER { body } else { &body[..keep(&h, body).min(body.len())] };
            out.extend_from_slice(&(pos as u64).to_le_bytes());
            out.extend_from_slice(&[h.kind, 0, 0, 0]);
            out.extend_from_slice(&h.body_len.to_le_bytes());
            out.extend_from_slice(&h.stream_id.to_le_bytes());
            out.extend_from_slice(&h.incarnation.to_le_bytes());
            out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
            out.extend_from_slice(&h.stream_offset.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
            out.extend_from_slice(meta);
            pos += framed;
            count += 1;
            entries += 1;
        }
        out[24..32].copy_from_slice(&entries.to_le_bytes());
        let crc = skel_crc(no, &out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Parses and verifies skeleton file bytes of segment `no`; returns it
    /// and the segment's length.
    pub fn decode(no: u64, bytes: Vec<u8>) -> Result<(Skeleton, u64)> {
        let bad = || Error::Corrupt { segment: no, position: 0 };
        let n = bytes.len().checked_sub(4).filter(|&n| n >= SKEL_HEAD_BYTES).ok_or_else(bad)?;
        let crc = u32::from_le_bytes(bytes[n..].try_into().expect("4 bytes"));
        if &bytes[..8] != SKEL_MAGIC || skel_crc(no, &bytes[..n]) != crc || le64(&bytes, 8) != no {
            return Err(bad());
        }
        let (seg_len, count) = (le64(&bytes, 16), le64(&bytes, 24));
        let mut entries = Vec::new();
        let mut at = SKEL_HEAD_BYTES;
        for _ in 0..count {
            if at + SKEL_ENTRY_BYTES > n {
                return Err(bad());
            }
            let e = &bytes[at..at + SKEL_ENTRY_BYTES];
            let header = RecordHeader {
                kind: e[8],
                body_len: le32(e, 12),
                stream_id: le64(e, 16),
                incarnation: le32(e, 24),
                stream_offset: le64(e, 32),
            };
            let meta_len = le32(e, 28) as usize;
            let meta = at + SKEL_ENTRY_BYTES..at + SKEL_ENTRY_BYTES + meta_len;
            if meta.end > n || meta_len > header.body_len as usize {
                return Err(bad());
            }
            entries.push(SkelEntry { header, pos: le64(e, 0), meta: meta.clone() });
            at = meta.end;
        }
        if at != n {
            return Err(bad());
        }
        Ok((Skeleton { entries, bytes }, seg_len))
    }

    /// The kept body bytes of the record at `pos`.
    pub fn meta_at(&self, pos: u64) -> Option<&[u8]> {
        let i = self.entries.binary_search_by_key(&pos, |e| e.pos).ok()?;
        Some(&self.bytes[self.entries[i].meta.clone()])
    }

    /// The tier records it holds: segments they say are remote.
    pub fn tiered(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries
            .iter()
            .filter(|e| e.header.kind == record::KIND_TIER)
            .filter_map(|e| decode_tier_body(&self.bytes[e.meta.clone()]).map(|(no, _)| no))
    }
}

fn skel_crc(no: u64, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&no.to_le_bytes()), bytes)
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The body of a tier record: the segment number and its length.
pub(super) fn decode_tier_body(body: &[u8]) -> Option<(u64, u64)> {
    (body.len() == 16).then(|| (le64(body, 0), le64(body, 8)))
}

impl<S: SegmentStore> Log<S> {
    pub fn tiering(&self) -> Option<&Tiering> {
        self.tier.as_ref()
    }

    /// Bytes this log keeps on the local disk: every segment file (the
    /// active one and those prepared ahead at full size) and the skeletons.
    pub fn local_bytes(&self) -> u64 {
        let st = self.st.borrow();
        let files: u64 = st
            .segments
            .values()
            .map(|s| match s {
                SegData::Mirror { .. } => self.cfg.segment_bytes,
                SegData::Mapped(m) => m.bytes().len() as u64,
                SegData::Remote(r) => r.skel_len,
            })
            .sum();
        // The segment prepared ahead counts even before the preparer made
        // it: it is always made right after a rollover, and the tiering
        // task, which wakes on rollovers, must not see room that is not there.
        files + st.prepared.len().max(1) as u64 * self.cfg.segment_bytes
    }

    /// Remote segments and their bytes in the object store.
    pub fn remote_segments(&self) -> (u64, u64) {
        let st = self.st.borrow();
        st.segments.values().fold((0, 0), |(n, b), s| match s {
            SegData::Remote(r) => (n + 1, b + r.len),
            _ => (n, b),
        })
    }

    /// The oldest sealed segments on the local disk that are not being
    /// moved, as many as it takes to bring the local bytes within `budget`
    /// (at most `max`), oldest first.
    pub fn due_for_tiering(&self, budget: u64, max: usize) -> Vec<u64> {
        let mut over = self.local_bytes().saturating_sub(budget);
        let st = self.st.borrow();
        let moving = self.moving.borrow();
        let mut due = Vec::new();
        for (&no, s) in &st.segments {
            let SegData::Mapped(m) = s else { continue };
            if over == 0 || due.len() == max {
                break;
            }
            if !moving.contains(&no) {
                due.push(no);
            }
            over = over.saturating_sub(m.bytes().len() as u64);
        }
        due
    }

    /// Whether segment `no` is being moved to the object store now (the
    /// reclaim pass leaves it alone until the move ends).
    pub fn is_moving(&self, no: u64) -> bool {
        self.moving.borrow().contains(&no)
    }

    /// Moves sealed segment `no` to the object store (the four steps of the
    /// module docs). `keep` says how many leading body bytes of each record
    /// its skeleton keeps. Returns the bytes uploaded. On an error nothing
    /// changed that recovery would not undo; the caller retries later.
    pub async fn tier_segment(&self, no: u64, keep: KeepFn) -> Result<u64> {
        let t = self.tier.as_ref().expect("tiering is configured");
        let map = match self.st.borrow().segments.get(&no) {
            Some(SegData::Mapped(m)) => m.clone(),
            _ => return Err(not_sealed("tier", no)),
        };
        if !self.moving.borrow_mut().insert(no) {
            return Err(not_sealed("tier (already moving)", no));
        }
        let r = self.move_to_store(t, no, map.bytes().len() as u64, keep).await;
        self.moving.borrow_mut().remove(&no);
        let mut st = self.st.borrow_mut();
        match &r {
            Ok(len) => {
                st.stats.tier.uploads_ok += 1;
                st.stats.tier.uploaded_bytes += len;
            }
            Err(_) => st.stats.tier.uploads_failed += 1,
        }
        r
    }

    async fn move_to_store(&self, t: &Tiering, no: u64, size: u64, keep: KeepFn) -> Result<u64> {
        let io = |op| move |source| Error::io(op, no, source);
        let source = self.store.upload_source(no).map_err(io("read for upload"))?;
        let key = t.client.segment_key(t.shard, no);
        // The skeleton is built from the bytes uploaded, on the tier thread.
        let derive = Box::new(move |seg: &[u8]| Skeleton::build(no, seg, keep).map_err(|e| e.to_string()));
        let (len, skeleton) = t.client.put_verified(key, source, derive).await.map_err(|e| Error::ObjectStore {
            op: "upload",
            segment: no,
            reason: e.to_string(),
        })?;
        if len != size {
            let reason = format!("uploaded {len} bytes of a {size}-byte segment");
            return Err(Error::ObjectStore { op: "upload", segment: no, reason });
        }
        self.store.write_skeleton(no, &skeleton).map_err(io("write skeleton"))?;
        let mut body = no.to_le_bytes().to_vec();
        body.extend_from_slice(&len.to_le_bytes());
        let h = RecordHeader { kind: record::KIND_TIER, stream_id: 0, incarnation: 0, stream_offset: no, body_len: 0 };
        let (_, lsn) = self.append(h, &body)?;
        self.durable(lsn).await?;
        let remote = RemoteSeg { len, skel_len: skeleton.len() as u64, skeleton: None };
        self.st.borrow_mut().segments.insert(no, SegData::Remote(remote));
        self.store.remove(no).await.map_err(io("remove after upload"))?;
        Ok(len)
    }

    /// Fetches the blocks `need` names into the cache (one ranged GET).
    pub async fn fetch_cold(&self, need: ColdNeed) -> Result<()> {
        let t = self.tier.as_ref().expect("only remote segments are cold");
        let len = match self.st.borrow().segments.get(&need.segment) {
            Some(SegData::Remote(r)) => r.len,
            // Removed meanwhile: the read that retries will say so.
            _ => return Ok(()),
        };
        let start = need.blocks.start() * TIER_BLOCK_BYTES;
        let end = ((need.blocks.end() + 1) * TIER_BLOCK_BYTES).min(len);
        let got = t.client.get_range(t.client.segment_key(t.shard, need.segment), start..end).await;
        let mut st = self.st.borrow_mut();
        match got {
            Ok(bytes) if bytes.len() as u64 == end - start => {
                st.stats.tier.cold_fetched += 1;
                st.stats.tier.cold_fetched_bytes += bytes.len() as u64;
                drop(st);
                self.cache.borrow_mut().insert(need.segment, *need.blocks.start(), &bytes);
                Ok(())
            }
            other => {
                st.stats.tier.cold_unavailable += 1;
                let reason = match other {
                    Ok(b) => format!("asked for {} bytes, got {}", end - start, b.len()),
                    Err(e) => e.to_string(),
                };
                Err(Error::ObjectStore { op: "read", segment: need.segment, reason })
            }
        }
    }

    /// Reads the record at `loc` of a remote segment from cached blocks:
    /// verified like a mapped one, or `Cold` naming the blocks to fetch.
    pub(super) fn read_remote(&self, loc: RecordLoc, range: std::ops::Range<usize>, out: &mut Vec<u8>) -> Result<()> {
        let corrupt = || Error::Corrupt { segment: loc.segment, position: loc.pos };
        let end = loc.pos + record::framed_len(loc.body_len as usize) as u64;
        let blocks = loc.pos / TIER_BLOCK_BYTES..=(end - 1) / TIER_BLOCK_BYTES;
        let mut cache = self.cache.borrow_mut();
        let mut framed = Vec::new();
        for b in blocks.clone() {
            let Some(block) = cache.get(loc.segment, b) else {
                return Err(Error::Cold(ColdNeed { segment: loc.segment, blocks }));
            };
            let from = (loc.pos.max(b * TIER_BLOCK_BYTES) - b * TIER_BLOCK_BYTES) as usize;
            let to = ((end.min((b + 1) * TIER_BLOCK_BYTES) - b * TIER_BLOCK_BYTES) as usize).min(block.len());
            framed.extend_from_slice(block.get(from..to).ok_or_else(corrupt)?);
        }
        drop(cache);
        let (h, body, _) = record::decode(loc.segment, &framed).map_err(|_| corrupt())?;
        if h.body_len != loc.body_len {
            return Err(corrupt());
        }
        out.extend_from_slice(framed[body].get(range).ok_or_else(corrupt)?);
        self.st.borrow_mut().stats.tier.cold_cached += 1;
        Ok(())
    }

    /// Deletes a remote segment: its skeleton (after which recovery no
    /// longer knows it), then its object; an object left behind by a failed
    /// delete is an orphan for [`Log::sweep_remote`].
    pub(super) async fn remove_remote(&self, no: u64) -> Result<()> {
        self.store.remove_skeleton(no).map_err(|source| Error::io("remove skeleton", no, source))?;
        self.st.borrow_mut().segments.remove(&no);
        self.cache.borrow_mut().forget(no);
        let t = self.tier.as_ref().expect("remote segments come with tiering");
        match t.client.delete(t.client.segment_key(t.shard, no)).await {
            Ok(()) => self.st.borrow_mut().stats.tier.remote_deleted += 1,
            Err(e) => {
                tracing::warn!("shard {}: deleting remote segment {no}: {e} (the next sweep retries)", t.shard);
                self.sweep_due.set(true);
            }
        }
        Ok(())
    }

    /// Whether an orphan sweep is due (at boot, and after a failed delete).
    pub fn sweep_due(&self) -> bool {
        self.sweep_due.get()
    }

    /// Deletes every object of this shard that no remote segment names:
    /// left by an upload whose move did not finish, or a failed delete.
    /// Returns how many it deleted.
    pub async fn sweep_remote(&self) -> Result<usize> {
        let t = self.tier.as_ref().expect("tiering is configured");
        let unavailable = |e: std::io::Error| Error::ObjectStore { op: "sweep", segment: 0, reason: e.to_string() };
        let keys = t.client.list(t.client.shard_prefix(t.shard)).await.map_err(unavailable)?;
        let mut deleted = 0;
        for (key, _) in keys {
            let Some(no) = TierClient::segment_of(&key) else { continue };
            let keep = self.is_moving(no) || matches!(self.st.borrow().segments.get(&no), Some(SegData::Remote(_)));
            if !keep {
                t.client.delete(key).await.map_err(unavailable)?;
                deleted += 1;
            }
        }
        self.st.borrow_mut().stats.tier.remote_deleted += deleted as u64;
        self.sweep_due.set(false);
        Ok(deleted)
    }

    /// Forgets the skeletons kept for recovery, once the shard replayed them.
    pub fn recovery_done(&self) {
        for s in self.st.borrow_mut().segments.values_mut() {
            if let SegData::Remote(r) = s {
                r.skeleton = None;
            }
        }
    }
}

pub(super) fn not_sealed(op: &'static str, no: u64) -> Error {
    Error::io(op, no, std::io::Error::new(std::io::ErrorKind::InvalidInput, "segment is not sealed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(no: u64, records: &[(u8, &[u8])]) -> Vec<u8> {
        let mut buf = Vec::new();
        for (i, (kind, body)) in records.iter().enumerate() {
            let h = RecordHeader {
                kind: *kind,
                stream_id: 9,
                incarnation: 1,
                stream_offset: i as u64 * 100,
                body_len: body.len() as u32,
            };
            record::encode(no, &h, body, &mut buf);
        }
        record::seal(no, buf.len() as u64, records.len() as u64, &mut buf);
        buf
    }

    #[test]
    fn a_skeleton_keeps_headers_and_what_recovery_needs() {
        let seg = segment(5, &[(1, b"create-body"), (2, b"metaDATADATADATA"), (record::KIND_TIER, &[0; 16])]);
        let keep = |h: &RecordHeader, _: &[u8]| if h.kind == 2 { 4 } else { usize::MAX };
        let bytes = Skeleton::build(5, &seg, keep).unwrap();
        let (sk, len) = Skeleton::decode(5, bytes.clone()).unwrap();
        assert_eq!(len, seg.len() as u64);
        assert_eq!(sk.entries.len(), 3);
        assert_eq!(sk.entries[1].header.body_len, 16);
        assert_eq!(sk.entries[1].header.stream_offset, 100);
        assert_eq!(sk.meta_at(sk.entries[0].pos).unwrap(), b"create-body");
        assert_eq!(sk.meta_at(sk.entries[1].pos).unwrap(), b"meta");
        assert_eq!(sk.tiered().collect::<Vec<_>>(), vec![0]);
        // Another segment's number, a flipped bit, a cut: all refused.
        assert!(Skeleton::decode(6, bytes.clone()).is_err());
        let mut flipped = bytes.clone();
        flipped[40] ^= 1;
        assert!(Skeleton::decode(5, flipped).is_err());
        assert!(Skeleton::decode(5, bytes[..bytes.len() - 9].to_vec()).is_err());
    }

    #[test]
    fn an_unsealed_segment_has_no_skeleton() {
        let mut seg = segment(3, &[(1, b"x")]);
        seg.truncate(seg.len() - SEAL_FRAMED_BYTES);
        seg.resize(seg.len() + 64, 0);
        assert!(Skeleton::build(3, &seg, |_, _| usize::MAX).is_err());
    }

    #[test]
    fn the_block_cache_stays_within_budget_and_keeps_what_it_just_fetched() {
        let mut c = BlockCache::default();
        let block = vec![7u8; TIER_BLOCK_BYTES as usize];
        let n = TIER_CACHE_BYTES / TIER_BLOCK_BYTES;
        for i in 0..n + 5 {
            c.insert(1, i, &block);
            assert!(c.bytes <= TIER_CACHE_BYTES);
        }
        assert!(c.get(1, 0).is_none(), "the oldest went first");
        assert!(c.get(1, n + 4).is_some());
        // A fetch larger than the budget is kept whole until the next one.
        let big = vec![1u8; (TIER_CACHE_BYTES + TIER_BLOCK_BYTES) as usize];
        c.insert(2, 0, &big);
        assert!(c.get(2, 0).is_some() && c.get(2, n).is_some());
        c.forget(2);
        assert_eq!(c.bytes, 0);
    }
}
