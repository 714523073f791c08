//! The HTTP/1.1 request parser (`http::parse`) as the connection loop drives
//! it: a byte stream arriving in arbitrary pieces, heads parsed after every
//! piece, bodies framed by Content-Length or decoded by `ChunkedDecoder`,
//! pipelined requests one after another.
//!
//! Input: byte 0 picks the limits (the server's, or tiny ones that make every
//! limit reachable), byte 1 the number of split points (0..=7), then two bytes
//! per split point (the length of each piece), then the stream itself.
//!
//! Checked: no panic; a head parsed from the bytes received so far equals the
//! head parsed from the whole stream (and an error is the same error), so the
//! verdict never depends on how reads were split; used bytes and declared
//! lengths stay within the input and the limits; the chunked decoder gives
//! the same body, consumption and verdict fed piece by piece as in one call,
//! never produces more bytes than it consumed or than the chunk sizes declared.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringstream::http::parse::{parse_head, BodyKind, ChunkProgress, ChunkedDecoder, ParseError, ParseLimits};
use ringstream::limits::{REQUEST_BODY_BYTES_MAX, REQUEST_HEADER_BYTES_MAX, REQUEST_HEADER_COUNT_MAX};

/// Pipelined requests handled per input; more adds time, not coverage.
const REQUESTS_MAX: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Some((&[sel, splits], rest)) = data.split_first_chunk::<2>() else { return };
    let limits = match sel % 4 {
        0 | 1 => ParseLimits {
            header_bytes_max: REQUEST_HEADER_BYTES_MAX,
            header_count_max: REQUEST_HEADER_COUNT_MAX,
            body_bytes_max: REQUEST_BODY_BYTES_MAX,
        },
        // Tiny limits, still derived from the input so every bound is reachable.
        2 => ParseLimits { header_bytes_max: 64 + usize::from(sel >> 2), header_count_max: 2, body_bytes_max: 16 },
        // More header slots than the parser keeps on the stack.
        _ => ParseLimits { header_bytes_max: 4096, header_count_max: 100, body_bytes_max: u64::from(sel >> 2) },
    };
    let splits = usize::from(splits % 8);
    if rest.len() < 2 * splits {
        return;
    }
    let (split_bytes, stream) = rest.split_at(2 * splits);
    // Piece boundaries: cumulative, clamped to the stream.
    let mut bounds: Vec<usize> = Vec::with_capacity(splits + 1);
    let mut at = 0usize;
    for pair in split_bytes.chunks_exact(2) {
        at = (at + usize::from(u16::from_le_bytes([pair[0], pair[1]]))).min(stream.len());
        bounds.push(at);
    }
    bounds.push(stream.len());
    run_connection(stream, &bounds, &limits);
});

/// Replays the connection loop over `stream`, which arrives up to each of
/// `bounds` in turn.
fn run_connection(stream: &[u8], bounds: &[usize], limits: &ParseLimits) {
    let mut arrived = 0usize; // index into bounds
    let mut start = 0usize; // first byte of the current request
    for _ in 0..REQUESTS_MAX {
        // 1. The head, re-parsed after every piece like the connection loop does.
        let (head, head_len) = loop {
            let received = &stream[start..bounds[arrived]];
            match parse_head(received, limits) {
                Ok((head, used)) => {
                    let whole = parse_head(&stream[start..], limits).expect("head parsed from a prefix");
                    assert_eq!(whole.1, used, "head length depends on the split");
                    assert_eq!(format!("{:?}", whole.0), format!("{head:?}"), "head depends on the split");
                    assert!(used <= received.len() && used <= limits.header_bytes_max);
                    break (head, used);
                }
                Err(ParseError::Incomplete) => {
                    assert!(received.len() <= limits.header_bytes_max, "unbounded head buffering");
                    if arrived + 1 == bounds.len() {
                        return; // the peer closed mid-head
                    }
                    arrived += 1;
                }
                Err(e) => {
                    let whole = parse_head(&stream[start..], limits).map(|(_, used)| used);
                    assert_eq!(whole, Err(e), "verdict depends on the split");
                    return;
                }
            }
        };
        check_head(&head, limits);
        let body_start = start + head_len;
        // 2. The body.
        let next = match head.body {
            BodyKind::None => body_start,
            BodyKind::Length(n) => {
                assert!(n <= limits.body_bytes_max, "Content-Length over the limit accepted");
                if n > (stream.len() - body_start) as u64 {
                    return; // the peer closed mid-body
                }
                body_start + n as usize
            }
            BodyKind::Chunked => match decode_chunked(stream, bounds, &mut arrived, body_start, limits) {
                Some(end) => end,
                None => return,
            },
        };
        if !head.keep_alive {
            return;
        }
        start = next;
        while arrived + 1 < bounds.len() && bounds[arrived] < start {
            arrived += 1;
        }
        if start == stream.len() {
            return;
        }
    }
}

fn check_head(head: &ringstream::http::parse::RequestHead, limits: &ParseLimits) {
    assert!(!head.path.contains('\0'));
    assert!(head.raw_path.starts_with('/'), "path not rooted");
    assert!(head.headers.len() <= limits.header_count_max);
    for (name, _) in head.headers.iter() {
        assert!(!name.bytes().any(|b| b.is_ascii_uppercase()), "header name not lower-cased");
    }
    if head.expect_continue {
        assert!(head.minor_version >= 1);
    }
}

/// Decodes a chunked body starting at `from` piece by piece, and checks it
/// against a decode of everything in one call. Returns where the next request
/// starts, or None when the body failed or the stream ended inside it.
fn decode_chunked(
    stream: &[u8],
    bounds: &[usize],
    arrived: &mut usize,
    from: usize,
    limits: &ParseLimits,
) -> Option<usize> {
    let mut one_shot = ChunkedDecoder::new(limits.body_bytes_max);
    let mut whole_body = Vec::new();
    let whole = one_shot.decode(&stream[from..], &mut whole_body);

    let mut dec = ChunkedDecoder::new(limits.body_bytes_max);
    let mut body = Vec::new();
    let mut pos = from;
    let verdict = loop {
        let avail = &stream[pos..bounds[*arrived].max(pos)];
        let before = body.len();
        match dec.decode(avail, &mut body) {
            Ok((used, progress)) => {
                assert!(used <= avail.len(), "consumed more than given");
                assert!(body.len() - before <= used, "produced more than consumed");
                assert!(body.len() as u64 <= dec.decoded_len(), "produced more than declared");
                assert!(dec.decoded_len() <= limits.body_bytes_max, "declared more than the limit");
                pos += used;
                if progress == ChunkProgress::Done {
                    assert!(dec.is_done());
                    assert_eq!(body.len() as u64, dec.decoded_len(), "body length differs from declared sizes");
                    break Ok((pos - from, ChunkProgress::Done));
                }
                assert_eq!(used, avail.len(), "stopped early without being done");
                if *arrived + 1 == bounds.len() {
                    break Ok((pos - from, ChunkProgress::NeedMore));
                }
                *arrived += 1;
            }
            Err(e) => {
                // A failed decoder stays failed.
                assert!(dec.decode(b"0\r\n\r\n", &mut Vec::new()).is_err());
                break Err(e);
            }
        }
    };
    assert_eq!(verdict, whole, "chunked verdict depends on the split");
    if verdict.is_ok() {
        assert_eq!(body, whole_body, "chunked body depends on the split");
    }
    match verdict {
        Ok((used, ChunkProgress::Done)) => Some(from + used),
        _ => None,
    }
}
