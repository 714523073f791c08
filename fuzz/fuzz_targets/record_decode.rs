//! Record decoding (`storage::record::decode`) on arbitrary bytes, plus an
//! encode/decode round trip with one flipped bit.
//!
//! Input: byte 0 picks the mode and the segment number, the rest is data.
//! - even: decode the data as a segment tail. Never panics; a decoded record
//!   re-encodes to the same header and body bytes, does not verify under a
//!   neighbouring segment number, and every shorter prefix is `Truncated`;
//!   `End` only for an all-zero header, `Truncated` only for short input.
//! - odd: the data is a header and a body; encode, decode back (equal), then
//!   flip the bit named by the first two data bytes inside the covered bytes:
//!   the result must not decode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringstream::limits::RECORD_HEADER_BYTES;
use ringstream::storage::record::{decode, encode, framed_len, DecodeError, RecordHeader, RECORD_ALIGN};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    // Small segment numbers most of the time, so seeds made for segment 0 verify.
    let segment = u64::from(sel >> 1) % 4;
    if sel & 1 == 0 {
        check_decode(segment, rest);
    } else {
        check_round_trip(segment, rest);
    }
});

fn check_decode(segment: u64, buf: &[u8]) {
    match decode(segment, buf) {
        Ok((h, body, framed)) => {
            assert_eq!(body, RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + h.body_len as usize);
            assert!(body.end <= buf.len(), "body range past the input");
            assert_eq!(framed, framed_len(h.body_len as usize));
            assert_eq!(framed % RECORD_ALIGN, 0);
            assert!(framed >= body.end && framed < body.end + RECORD_ALIGN);
            // Re-encoding what was decoded gives the same covered bytes (padding is not covered).
            let mut out = Vec::new();
            assert_eq!(encode(segment, &h, &buf[body.clone()], &mut out), framed);
            assert_eq!(&out[..body.end], &buf[..body.end], "re-encoded record differs");
            // A one-bit change of the CRC seed is always detected by CRC32C.
            assert_eq!(decode(segment ^ 1, buf).unwrap_err(), DecodeError::Invalid);
            // Every cut inside the record is incomplete, never a record or the clean end.
            for cut in [0, 1, RECORD_HEADER_BYTES - 1, RECORD_HEADER_BYTES, body.end - 1] {
                if cut < body.end && cut > 0 {
                    assert_eq!(decode(segment, &buf[..cut]).unwrap_err(), DecodeError::Truncated, "cut {cut}");
                }
            }
        }
        Err(DecodeError::End) => {
            let head = &buf[..buf.len().min(RECORD_HEADER_BYTES)];
            assert!(head.iter().all(|&b| b == 0), "End for a non-zero header");
        }
        Err(DecodeError::Truncated) => {
            if buf.len() >= RECORD_HEADER_BYTES {
                let body_len = u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
                assert!(buf.len() < RECORD_HEADER_BYTES + body_len, "Truncated although the body is there");
            }
        }
        Err(DecodeError::Invalid) => {
            assert!(buf.len() >= RECORD_HEADER_BYTES, "Invalid verdict on a short input");
        }
    }
}

fn check_round_trip(segment: u64, data: &[u8]) {
    if data.len() < 2 + 21 {
        return;
    }
    let (flip, data) = data.split_at(2);
    let (head, body) = data.split_at(21);
    let h = RecordHeader {
        kind: head[0],
        stream_id: u64::from_le_bytes(head[1..9].try_into().unwrap()),
        incarnation: u32::from_le_bytes(head[9..13].try_into().unwrap()),
        stream_offset: u64::from_le_bytes(head[13..21].try_into().unwrap()),
        body_len: body.len() as u32,
    };
    let mut out = Vec::new();
    let framed = encode(segment, &h, body, &mut out);
    assert_eq!(framed, out.len());
    let (back, range, n) = decode(segment, &out).expect("an encoded record decodes");
    assert_eq!(back, h);
    assert_eq!(&out[range], body);
    assert_eq!(n, framed);
    // Flip one bit anywhere in the bytes the record covers (header and body).
    let covered = RECORD_HEADER_BYTES + body.len();
    let bit = usize::from(u16::from_le_bytes([flip[0], flip[1]])) % (covered * 8);
    out[bit / 8] ^= 1 << (bit % 8);
    assert!(decode(segment, &out).is_err(), "flipped bit {bit} not detected");
}
