//! The self-checking record frame of a segment file (see docs/storage-format.md).
//!
//! ```text
//!  0       2   3    4               8                               16
//!  +-------+---+----+---------------+-------------------------------+
//!  | magic |ver|kind|   body_len    |           stream_id           |
//!  +-------+---+----+---------------+-------------------------------+
//!  16              20              24                              32
//!  +---------------+---------------+-------------------------------+
//!  |  incarnation  |    crc32c     |         stream_offset         |
//!  +---------------+---------------+-------------------------------+
//!  | body (body_len bytes) ... | zero padding to a multiple of 8     |
//! ```
//! All integers little-endian. The CRC32C covers every header byte except the
//! CRC itself, then the body, and is seeded with the segment number so that a
//! record left over from an earlier use of the same file (or copied from
//! another segment) never verifies in the wrong place.

use crate::limits::{DIRECT_IO_ALIGNMENT_BYTES, RECORD_BODY_BYTES_MAX, RECORD_HEADER_BYTES};

/// "RS" in little-endian byte order; never all-zero so a zeroed tail stops a scan.
pub const MAGIC: u16 = 0x5352;
pub const VERSION: u8 = 1;
/// Records start and end on this alignment so headers never straddle it.
pub const RECORD_ALIGN: usize = 8;
/// The one kind the storage layer writes itself: the last record of every
/// segment but the one being written (see [`seal`]). The layer above uses
/// kinds below it and never sees a seal.
pub const KIND_SEAL: u8 = 0xFF;
/// Storage's other record of its own, written by the tier layer
/// (`storage/tiered/`) through the log: segment N (body: its number and
/// length, two u64) is in the object store from now on. The local log
/// hands it up at recovery like any record; the tier layer takes it out,
/// so the layer above storage never sees it.
pub const KIND_TIER: u8 = 0xFE;
/// The log's filler: a flush that many records share is padded with one to
/// the next block boundary, so the flush after it starts on a fresh block
/// and may be written while this one is still in flight (see
/// `log/writer.rs`). Its body is zeros; recovery skips it, the layer above
/// never sees it.
pub const KIND_PAD: u8 = 0xFD;
/// Bytes a seal occupies (header + 8-byte body), reserved in every segment.
pub const SEAL_FRAMED_BYTES: usize = RECORD_HEADER_BYTES + 8;
/// The close of a batch in a replicated log (`log/batches.rs`): the
/// records since the previous close are one consensus entry, of the term
/// and index this record names (header `stream_id` and `stream_offset`);
/// its body is where the batch began (segment, position: two u64). Every
/// replica writes it itself, byte for byte the same, so recovery rebuilds
/// the entry table from the segments and cuts a batch that has none.
pub const KIND_BATCH: u8 = 0xFC;
/// A membership change of a replicated log, the whole of its batch: the
/// layer that replicates the log (`cell/`) writes it and reads it back as a
/// consensus entry of its own kind; its body is that layer's, opaque here.
/// Recovery and [`super::log::LocalLog::records_between`] never hand it to
/// the layer above the log.
pub const KIND_CONF: u8 = 0xFB;
/// Bytes a batch close occupies (header + 16-byte body).
pub const BATCH_CLOSE_FRAMED_BYTES: usize = RECORD_HEADER_BYTES + 16;

/// What a batch close says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchClose {
    pub term: u64,
    pub index: u64,
    /// Where the batch's first byte is (segment, position).
    pub start: (u64, u64),
}

/// What the storage layer knows about a record. The meaning of `kind` and of
/// the body belongs to the layer above (the shard); storage only frames,
/// checks and locates records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: u8,
    pub stream_id: u64,
    pub incarnation: u32,
    /// Position in the stream's byte space this record refers to.
    pub stream_offset: u64,
    pub body_len: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than a header or than the header's body length.
    Truncated,
    /// All-zero header: the clean end of the written part of a segment.
    End,
    /// Not a record: wrong magic/version, impossible length, or CRC mismatch.
    Invalid,
}

/// Bytes a record with `body_len` occupies in a segment, padding included.
pub fn framed_len(body_len: usize) -> usize {
    (RECORD_HEADER_BYTES + body_len).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// The largest record body one segment of `segment_bytes` holds whatever
/// else is in it: framed with its header, with room for a batch close (a
/// replicated log's) and the seal every segment keeps, and never more than
/// [`RECORD_BODY_BYTES_MAX`]. What a configuration is checked against.
pub fn body_max(segment_bytes: u64) -> usize {
    let kept = RECORD_HEADER_BYTES + BATCH_CLOSE_FRAMED_BYTES + SEAL_FRAMED_BYTES;
    let room = usize::try_from(segment_bytes).unwrap_or(usize::MAX).saturating_sub(kept);
    (room / RECORD_ALIGN * RECORD_ALIGN).min(RECORD_BODY_BYTES_MAX)
}

fn crc(segment_no: u64, header: &[u8], body: &[&[u8]]) -> u32 {
    let c = crc32c::crc32c(&segment_no.to_le_bytes());
    let c = crc32c::crc32c_append(c, &header[0..20]);
    let c = crc32c::crc32c_append(c, &header[24..32]);
    body.iter().fold(c, |c, part| crc32c::crc32c_append(c, part))
}

/// Appends the framed record to `out` and returns the framed length.
pub fn encode(segment_no: u64, h: &RecordHeader, body: &[u8], out: &mut Vec<u8>) -> usize {
    encode_parts(segment_no, h, &[body], out)
}

/// [`encode`] of a body given in parts, laid end to end (an append's meta
/// and its data go straight into the segment, without first being copied
/// into one buffer).
pub fn encode_parts(segment_no: u64, h: &RecordHeader, body: &[&[u8]], out: &mut Vec<u8>) -> usize {
    let body_len: usize = body.iter().map(|p| p.len()).sum();
    assert!(body_len <= RECORD_BODY_BYTES_MAX);
    assert_eq!(h.body_len as usize, body_len);
    let start = out.len();
    let mut head = [0u8; RECORD_HEADER_BYTES];
    head[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    head[2] = VERSION;
    head[3] = h.kind;
    head[4..8].copy_from_slice(&h.body_len.to_le_bytes());
    head[8..16].copy_from_slice(&h.stream_id.to_le_bytes());
    head[16..20].copy_from_slice(&h.incarnation.to_le_bytes());
    head[24..32].copy_from_slice(&h.stream_offset.to_le_bytes());
    let sum = crc(segment_no, &head, body);
    head[20..24].copy_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&head);
    for part in body {
        out.extend_from_slice(part);
    }
    let framed = framed_len(body_len);
    out.resize(start + framed, 0);
    // Pair assertion with `decode`: what we just wrote must verify.
    debug_assert!(decode(segment_no, &out[start..]).is_ok());
    framed
}

/// Appends to `out` the seal of segment `segment_no` that goes at byte
/// `pos`, after `records` records. A seal says "the segment ends here, after
/// this many records": recovery requires one at the end of every segment
/// older than the newest, so damage that looks like a clean end (a zeroed
/// block, a cut at a record boundary) is caught.
pub fn seal(segment_no: u64, pos: u64, records: u64, out: &mut Vec<u8>) {
    let body = records.to_le_bytes();
    let h =
        RecordHeader { kind: KIND_SEAL, stream_id: 0, incarnation: 0, stream_offset: pos, body_len: body.len() as u32 };
    let n = encode(segment_no, &h, &body, out);
    debug_assert_eq!(n, SEAL_FRAMED_BYTES);
}

/// Appends to `out` a pad record of exactly `framed` bytes (at least a
/// header, a multiple of [`RECORD_ALIGN`]).
pub fn pad(segment_no: u64, framed: usize, out: &mut Vec<u8>) {
    // A pad is shorter than a block plus a header.
    const ZEROS: [u8; DIRECT_IO_ALIGNMENT_BYTES as usize] = [0; DIRECT_IO_ALIGNMENT_BYTES as usize];
    let body = &ZEROS[..framed - RECORD_HEADER_BYTES];
    let h =
        RecordHeader { kind: KIND_PAD, stream_id: 0, incarnation: 0, stream_offset: 0, body_len: body.len() as u32 };
    let n = encode(segment_no, &h, body, out);
    debug_assert_eq!(n, framed);
}

/// Appends to `out` the close of a batch, written in segment `segment_no`.
pub fn batch_close(segment_no: u64, c: &BatchClose, out: &mut Vec<u8>) {
    let mut body = [0u8; 16];
    body[..8].copy_from_slice(&c.start.0.to_le_bytes());
    body[8..].copy_from_slice(&c.start.1.to_le_bytes());
    let h = RecordHeader {
        kind: KIND_BATCH,
        stream_id: c.term,
        incarnation: 0,
        stream_offset: c.index,
        body_len: body.len() as u32,
    };
    let n = encode(segment_no, &h, &body, out);
    debug_assert_eq!(n, BATCH_CLOSE_FRAMED_BYTES);
}

/// The batch close a decoded record is, if it is one.
pub fn batch_close_of(h: &RecordHeader, body: &[u8]) -> Option<BatchClose> {
    if h.kind != KIND_BATCH || body.len() != 16 {
        return None;
    }
    let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("16 bytes"));
    Some(BatchClose { term: h.stream_id, index: h.stream_offset, start: (u64_at(0), u64_at(8)) })
}

/// Whether a decoded record is a seal that belongs where it was found: at
/// byte `pos` of its segment, after `records` records.
pub fn is_seal_of(h: &RecordHeader, body: &[u8], pos: u64, records: u64) -> bool {
    h.kind == KIND_SEAL && h.stream_offset == pos && body == records.to_le_bytes()
}

/// Decodes the record at the start of `buf`. Returns the header, the body
/// range inside `buf`, and the framed length.
pub fn decode(segment_no: u64, buf: &[u8]) -> Result<(RecordHeader, std::ops::Range<usize>, usize), DecodeError> {
    if buf.len() < RECORD_HEADER_BYTES {
        if buf.iter().all(|&b| b == 0) {
            return Err(DecodeError::End);
        }
        return Err(DecodeError::Truncated);
    }
    let head = &buf[..RECORD_HEADER_BYTES];
    if head.iter().all(|&b| b == 0) {
        return Err(DecodeError::End);
    }
    let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
    if u16::from_le_bytes([head[0], head[1]]) != MAGIC || head[2] != VERSION {
        return Err(DecodeError::Invalid);
    }
    let body_len = u32_at(4) as usize;
    if body_len > RECORD_BODY_BYTES_MAX {
        return Err(DecodeError::Invalid);
    }
    let framed = framed_len(body_len);
    if buf.len() < RECORD_HEADER_BYTES + body_len {
        return Err(DecodeError::Truncated);
    }
    let body = RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + body_len;
    if crc(segment_no, head, &[&buf[body.clone()]]) != u32_at(20) {
        return Err(DecodeError::Invalid);
    }
    let h = RecordHeader {
        kind: head[3],
        stream_id: u64_at(8),
        incarnation: u32_at(16),
        stream_offset: u64_at(24),
        body_len: body_len as u32,
    };
    Ok((h, body, framed))
}

/// The records of sealed segment `segment_no` before its seal (pads
/// included), each header with its body's range in `seg`, every one
/// checked and the seal too (its place and count). Err names the byte
/// where the segment stops being a sealed one: a record that does not
/// decode, or a seal that does not close what precedes it.
pub fn sealed_records(segment_no: u64, seg: &[u8]) -> Result<Vec<(RecordHeader, std::ops::Range<usize>)>, u64> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let (h, body, framed) = decode(segment_no, seg.get(pos..).ok_or(pos as u64)?).map_err(|_| pos as u64)?;
        let body = pos + body.start..pos + body.end;
        if h.kind == KIND_SEAL {
            // What follows the seal is the file's unused room.
            return if is_seal_of(&h, &seg[body], pos as u64, out.len() as u64) { Ok(out) } else { Err(pos as u64) };
        }
        out.push((h, body));
        pos += framed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(body: &[u8]) -> RecordHeader {
        RecordHeader { kind: 2, stream_id: 77, incarnation: 3, stream_offset: 4096, body_len: body.len() as u32 }
    }

    #[test]
    fn the_largest_body_of_a_segment_fits_it_with_a_batch_close_and_the_seal() {
        use crate::limits::{SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MIN};
        for seg in [SEGMENT_BYTES_MIN, 1 << 20, 4 << 20] {
            let max = body_max(seg);
            let used = |body| (framed_len(body) + BATCH_CLOSE_FRAMED_BYTES + SEAL_FRAMED_BYTES) as u64;
            assert!(used(max) <= seg, "{seg}: {max}");
            assert!(used(max + 1) > seg, "{seg}: {max} is the largest");
        }
        assert_eq!(body_max(SEGMENT_BYTES_DEFAULT), RECORD_BODY_BYTES_MAX);
    }

    #[test]
    fn a_body_in_parts_frames_as_the_whole() {
        let body: Vec<u8> = (0..1500).map(|i| (i * 7 % 251) as u8).collect();
        let mut whole = vec![];
        encode(5, &hdr(&body), &body, &mut whole);
        for split in [0, 1, 17, 750, 1499, 1500] {
            let (a, b) = body.split_at(split);
            let mut parts = vec![];
            encode_parts(5, &hdr(&body), &[a, b, &[]], &mut parts);
            assert_eq!(parts, whole, "split at {split}");
            let (h, range, _) = decode(5, &parts).unwrap();
            assert_eq!(h.body_len as usize, body.len());
            assert_eq!(&parts[range], &body[..]);
        }
    }

    #[test]
    fn round_trip_and_padding() {
        for len in [0usize, 1, 7, 8, 9, 1000, 4096] {
            let body: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut out = vec![];
            let n = encode(5, &hdr(&body), &body, &mut out);
            assert_eq!(n, out.len());
            assert_eq!(n % RECORD_ALIGN, 0);
            let (h, range, framed) = decode(5, &out).unwrap();
            assert_eq!(h, hdr(&body));
            assert_eq!(&out[range], &body[..]);
            assert_eq!(framed, n);
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let body = b"hello, durable world".to_vec();
        let mut out = vec![];
        encode(1, &hdr(&body), &body, &mut out);
        let valid_len = RECORD_HEADER_BYTES + body.len();
        for byte in 0..valid_len {
            for bit in 0..8 {
                let mut bad = out.clone();
                bad[byte] ^= 1 << bit;
                assert!(decode(1, &bad).is_err(), "flip at {byte}:{bit} not detected");
            }
        }
    }

    #[test]
    fn wrong_segment_does_not_verify() {
        let body = b"x".to_vec();
        let mut out = vec![];
        encode(1, &hdr(&body), &body, &mut out);
        assert_eq!(decode(2, &out).unwrap_err(), DecodeError::Invalid);
    }

    #[test]
    fn a_sealed_segments_records_are_those_its_seal_counts() {
        let (a, b) = (b"first".to_vec(), vec![9u8; 700]);
        let mut seg = vec![];
        encode(8, &hdr(&a), &a, &mut seg);
        let second = seg.len();
        encode(8, &hdr(&b), &b, &mut seg);
        pad(8, 512, &mut seg);
        let mut counted_wrong = seg.clone();
        seal(8, seg.len() as u64, 3, &mut seg);
        let records = sealed_records(8, &seg).unwrap();
        assert_eq!(records.iter().map(|(h, _)| h.kind).collect::<Vec<_>>(), [2, 2, KIND_PAD]);
        assert_eq!((&seg[records[0].1.clone()], &seg[records[1].1.clone()]), (&a[..], &b[..]));
        assert_eq!(records[1].1.start, second + RECORD_HEADER_BYTES);
        seal(8, counted_wrong.len() as u64, 2, &mut counted_wrong);
        assert_eq!(sealed_records(8, &counted_wrong), Err(counted_wrong.len() as u64 - SEAL_FRAMED_BYTES as u64));
        assert!(sealed_records(8, &seg[..seg.len() - 1]).is_err(), "its seal cut short");
        assert_eq!(sealed_records(8, &seg[..second]), Err(second as u64), "no seal");
        assert!(sealed_records(9, &seg).is_err(), "another segment's records");
    }

    #[test]
    fn a_seal_verifies_only_where_it_was_written() {
        let mut out = vec![0u8; 64];
        seal(3, 64, 2, &mut out);
        assert_eq!(out.len(), 64 + SEAL_FRAMED_BYTES);
        let (h, body, framed) = decode(3, &out[64..]).unwrap();
        assert_eq!(framed, SEAL_FRAMED_BYTES);
        assert!(is_seal_of(&h, &out[64..][body.clone()], 64, 2));
        assert!(!is_seal_of(&h, &out[64..][body.clone()], 72, 2), "another position");
        assert!(!is_seal_of(&h, &out[64..][body], 64, 3), "another record count");
        assert_eq!(decode(4, &out[64..]).unwrap_err(), DecodeError::Invalid, "another segment");
    }

    #[test]
    fn a_pad_fills_exactly_and_verifies() {
        for framed in (RECORD_HEADER_BYTES..=DIRECT_IO_ALIGNMENT_BYTES as usize + 24).step_by(RECORD_ALIGN) {
            let mut out = vec![7u8; 40];
            pad(9, framed, &mut out);
            assert_eq!(out.len(), 40 + framed);
            let (h, body, n) = decode(9, &out[40..]).unwrap();
            assert_eq!((h.kind, n), (KIND_PAD, framed));
            assert!(out[40..][body].iter().all(|&b| b == 0));
            assert_eq!(decode(10, &out[40..]).unwrap_err(), DecodeError::Invalid, "another segment");
        }
    }

    #[test]
    fn a_batch_close_round_trips_and_is_nothing_else() {
        let c = BatchClose { term: 7, index: 1234, start: (3, 4096) };
        let mut out = vec![];
        batch_close(4, &c, &mut out);
        assert_eq!(out.len(), BATCH_CLOSE_FRAMED_BYTES);
        let (h, body, _) = decode(4, &out).unwrap();
        assert_eq!(batch_close_of(&h, &out[body.clone()]), Some(c));
        assert!(!is_seal_of(&h, &out[body], 1234, 0));
        assert_eq!(decode(5, &out).unwrap_err(), DecodeError::Invalid, "another segment");
        let mut sealed = vec![];
        seal(5, 0, 0, &mut sealed);
        let (h, body, _) = decode(5, &sealed).unwrap();
        assert_eq!(batch_close_of(&h, &sealed[body]), None, "a seal is no close");
    }

    #[test]
    fn zeros_are_end_and_short_is_truncated() {
        assert_eq!(decode(0, &[0u8; 64]).unwrap_err(), DecodeError::End);
        assert_eq!(decode(0, &[0u8; 5]).unwrap_err(), DecodeError::End);
        let body = vec![9u8; 100];
        let mut out = vec![];
        encode(0, &hdr(&body), &body, &mut out);
        assert_eq!(decode(0, &out[..50]).unwrap_err(), DecodeError::Truncated);
        assert_eq!(decode(0, &out[..10]).unwrap_err(), DecodeError::Truncated);
    }
}
