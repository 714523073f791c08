//! Skeletons of remote segments (docs/storage-format.md): what recovery
//! needs of a segment whose bytes are in the object store, so that a boot
//! never asks the store. Built on the tier thread from the bytes uploaded,
//! written beside the segments, read back at boot.

use super::KeepFn;
use crate::limits::RECORD_HEADER_BYTES;
use crate::storage::error::{Error, Result};
use crate::storage::record::{self, RecordHeader};

/// What recovery needs of a remote segment: its records' headers and
/// positions, and the leading body bytes of each (all but bulk data).
pub(crate) struct Skeleton {
    pub entries: Vec<SkelEntry>,
    /// The term its object's key names (0 on a single node).
    pub term: u64,
    bytes: Vec<u8>,
}

pub(crate) struct SkelEntry {
    pub header: RecordHeader,
    pub pos: u64,
    meta: std::ops::Range<usize>,
}

const SKEL_MAGIC: &[u8; 8] = b"RSSKEL01";
const SKEL_HEAD_BYTES: usize = 32;
/// In a cell: the head goes on with the term of the object's key.
const SKEL_MAGIC_IN_TERM: &[u8; 8] = b"RSSKEL02";
const SKEL_HEAD_IN_TERM_BYTES: usize = 40;
const SKEL_ENTRY_BYTES: usize = 48;

impl Skeleton {
    /// The skeleton of sealed segment `no`: scans (and verifies) every
    /// record up to the seal. `keep(header, body)` says how many leading
    /// body bytes recovery needs.
    pub fn build(no: u64, seg: &[u8], keep: KeepFn) -> Result<Vec<u8>> {
        Skeleton::build_in_term(no, seg, keep, 0)
    }

    /// [`Skeleton::build`] of a segment whose object's key names `term`
    /// (in a cell; 0 builds the single node's form).
    pub fn build_in_term(no: u64, seg: &[u8], keep: KeepFn, term: u64) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(seg.len() / 16);
        out.extend_from_slice(if term == 0 { SKEL_MAGIC } else { SKEL_MAGIC_IN_TERM });
        out.extend_from_slice(&no.to_le_bytes());
        out.extend_from_slice(&(seg.len() as u64).to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        if term > 0 {
            out.extend_from_slice(&term.to_le_bytes());
        }
        // Entries are the records before the seal, pads left out.
        let records = record::sealed_records(no, seg).map_err(|pos| Error::Corrupt { segment: no, position: pos })?;
        let mut entries = 0u64;
        for (h, range) in records.iter().filter(|(h, _)| h.kind != record::KIND_PAD) {
            let at = (range.start - RECORD_HEADER_BYTES) as u64;
            let body = &seg[range.clone()];
            let meta = if h.kind == record::KIND_TIER { body } else { &body[..keep(h, body).min(body.len())] };
            push_entry(&mut out, at, h, meta);
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
        let head = match bytes.get(..8) {
            Some(m) if m == SKEL_MAGIC => SKEL_HEAD_BYTES,
            Some(m) if m == SKEL_MAGIC_IN_TERM => SKEL_HEAD_IN_TERM_BYTES,
            _ => return Err(bad()),
        };
        let n = bytes.len().checked_sub(4).filter(|&n| n >= head).ok_or_else(bad)?;
        let crc = u32::from_le_bytes(bytes[n..].try_into().expect("4 bytes"));
        if skel_crc(no, &bytes[..n]) != crc || le64(&bytes, 8) != no {
            return Err(bad());
        }
        let (seg_len, count) = (le64(&bytes, 16), le64(&bytes, 24));
        let term = if head == SKEL_HEAD_BYTES { 0 } else { le64(&bytes, 32) };
        let mut entries = Vec::new();
        let mut at = head;
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
        Ok((Skeleton { entries, term, bytes }, seg_len))
    }

    /// The kept body bytes of the record at `pos`.
    pub fn meta_at(&self, pos: u64) -> Option<&[u8]> {
        let i = self.entries.binary_search_by_key(&pos, |e| e.pos).ok()?;
        Some(&self.bytes[self.entries[i].meta.clone()])
    }

    /// The tier records it holds: segments they say are remote.
    pub fn tiered(&self) -> impl Iterator<Item = Moved> + '_ {
        self.entries
            .iter()
            .filter(|e| e.header.kind == record::KIND_TIER)
            .filter_map(|e| decode_tier_body(&self.bytes[e.meta.clone()]))
    }
}

/// One entry: `SKEL_ENTRY_BYTES` of header, then the kept body bytes.
fn push_entry(out: &mut Vec<u8>, pos: u64, h: &RecordHeader, meta: &[u8]) {
    out.extend_from_slice(&pos.to_le_bytes());
    out.extend_from_slice(&[h.kind, 0, 0, 0]);
    out.extend_from_slice(&h.body_len.to_le_bytes());
    out.extend_from_slice(&h.stream_id.to_le_bytes());
    out.extend_from_slice(&h.incarnation.to_le_bytes());
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&h.stream_offset.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(meta);
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
pub(crate) fn decode_tier_body(body: &[u8]) -> Option<Moved> {
    let (no, len) = (body.len() >= 16).then(|| (le64(body, 0), le64(body, 8)))?;
    match body.len() {
        16 => Some(Moved { no, len, term: 0 }),
        24 => Some(Moved { no, len, term: le64(body, 16) }).filter(|m| m.term > 0),
        _ => None,
    }
}

/// What a tier record says: segment `no`, `len` bytes long, is in the
/// object store under the key of `term` (0 on a single node; in a cell,
/// the term of the leader that uploaded it: `TierClient::segment_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moved {
    pub no: u64,
    pub len: u64,
    pub term: u64,
}

/// The body of the tier record of `m`: `no | len`, and `| term` in a cell.
pub(crate) fn tier_body(m: Moved) -> Vec<u8> {
    let mut body = m.no.to_le_bytes().to_vec();
    body.extend_from_slice(&m.len.to_le_bytes());
    if m.term > 0 {
        body.extend_from_slice(&m.term.to_le_bytes());
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::record::SEAL_FRAMED_BYTES;

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
        assert_eq!(sk.tiered().collect::<Vec<_>>(), vec![Moved { no: 0, len: 0, term: 0 }]);
        assert_eq!(sk.term, 0, "a single node's skeleton names no term");
        // Another segment's number, a flipped bit, a cut: all refused.
        assert!(Skeleton::decode(6, bytes.clone()).is_err());
        let mut flipped = bytes.clone();
        flipped[40] ^= 1;
        assert!(Skeleton::decode(5, flipped).is_err());
        assert!(Skeleton::decode(5, bytes[..bytes.len() - 9].to_vec()).is_err());
    }

    #[test]
    fn a_cells_skeleton_keeps_its_keys_term() {
        let seg = segment(5, &[(1, b"create-body"), (record::KIND_BATCH, b"close")]);
        let bytes = Skeleton::build_in_term(5, &seg, |_, b| b.len(), 9).unwrap();
        assert_eq!(&bytes[..8], SKEL_MAGIC_IN_TERM);
        let (sk, len) = Skeleton::decode(5, bytes.clone()).unwrap();
        assert_eq!((sk.term, len, sk.entries.len()), (9, seg.len() as u64, 2));
        assert_eq!(sk.meta_at(sk.entries[0].pos).unwrap(), b"create-body");
        let mut flipped = bytes.clone();
        flipped[33] ^= 1;
        assert!(Skeleton::decode(5, flipped).is_err(), "the term is under the CRC");
        let mut other = bytes;
        other[..8].copy_from_slice(b"RSSKEL03");
        assert!(Skeleton::decode(5, other).is_err());
    }

    #[test]
    fn tier_records_name_a_term_only_in_a_cell() {
        let single = Moved { no: 3, len: 4096, term: 0 };
        assert_eq!(tier_body(single).len(), 16);
        assert_eq!(decode_tier_body(&tier_body(single)), Some(single));
        let in_cell = Moved { term: 7, ..single };
        assert_eq!(tier_body(in_cell).len(), 24);
        assert_eq!(decode_tier_body(&tier_body(in_cell)), Some(in_cell));
        let mut zero = tier_body(single);
        zero.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(decode_tier_body(&zero), None, "a cell's record names a term");
        assert_eq!(decode_tier_body(&[0; 20]), None);
    }

    #[test]
    fn an_unsealed_segment_has_no_skeleton() {
        let mut seg = segment(3, &[(1, b"x")]);
        seg.truncate(seg.len() - SEAL_FRAMED_BYTES);
        seg.resize(seg.len() + 64, 0);
        assert!(Skeleton::build(3, &seg, |_, _| usize::MAX).is_err());
    }
}
