//! Reads: where a read starts (and when it is gone, 410), and the ETags of
//! streams and read ranges (F86).

use crate::protocol::digits;
use crate::protocol::error::Error;
use crate::protocol::offset::{Offset, ReadFrom};

/// Where a read of a stream with this trim point and tail starts: 410 for
/// data a snapshot trimmed (read the bootstrap instead); a read past the
/// tail is empty and positioned at the tail (F55, as the reference server).
pub fn read_start(from: ReadFrom, trim: u64, tail: u64) -> Result<u64, Error> {
    let below_trim = match from {
        ReadFrom::Start => trim > 0,
        ReadFrom::At(o) => o.pos < trim,
        ReadFrom::Now => false,
    };
    if below_trim {
        return Err(Error::Gone("data before the current snapshot was trimmed; read the bootstrap instead".into()));
    }
    Ok(match from {
        ReadFrom::Start => 0,
        ReadFrom::Now => tail,
        ReadFrom::At(o) => o.pos.min(tail),
    })
}

/// Stream-level ETag: identity of the incarnation, the tail, and closure.
pub fn stream_etag(uid: u64, incarnation: u32, tail: Offset, closed: bool) -> String {
    // One exactly-sized allocation, no formatting machinery: every append
    // answer carries one.
    let mut e = Vec::with_capacity(1 + 16 + 1 + 10 + 1 + 20 + 3);
    e.push(b'"');
    digits::push_hex(&mut e, uid);
    e.push(b'.');
    digits::push_decimal(&mut e, u64::from(incarnation));
    e.push(b':');
    digits::push_decimal(&mut e, tail.pos);
    if closed {
        e.extend_from_slice(b":c");
    }
    e.push(b'"');
    String::from_utf8(e).expect("ASCII")
}

/// ETag of one read response covering `[start, end)` (F86).
pub fn range_etag(uid: u64, incarnation: u32, start: Offset, end: Offset, closed: bool) -> String {
    format!("\"{uid:x}.{incarnation}:{}:{}{}\"", start.pos, end.pos, if closed { ":c" } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_etag_is_hex_uid_incarnation_and_tail() {
        for (uid, inc, pos, closed) in [(0, 0, 0, false), (0xabc, 3, 1024, true), (u64::MAX, u32::MAX, u64::MAX, false)]
        {
            let want = format!("\"{uid:x}.{inc}:{pos}{}\"", if closed { ":c" } else { "" });
            assert_eq!(stream_etag(uid, inc, Offset::new(0, pos), closed), want);
        }
        assert_eq!(stream_etag(16, 1, Offset::new(0, 7), false), "\"10.1:7\"");
    }

    #[test]
    fn read_starts_trims_and_tails() {
        let at = |p| ReadFrom::At(Offset::new(0, p));
        assert_eq!(read_start(ReadFrom::Start, 0, 50), Ok(0));
        assert_eq!(read_start(ReadFrom::Now, 0, 50), Ok(50));
        assert_eq!(read_start(at(20), 0, 50), Ok(20));
        assert_eq!(read_start(at(99), 0, 50), Ok(50), "past the tail: at the tail");
        assert!(matches!(read_start(ReadFrom::Start, 10, 50), Err(Error::Gone(_))));
        assert!(matches!(read_start(at(9), 10, 50), Err(Error::Gone(_))));
        assert_eq!(read_start(at(10), 10, 50), Ok(10));
        assert_eq!(read_start(ReadFrom::Now, 10, 50), Ok(50));
    }

    #[test]
    fn etags_name_incarnation_range_and_closure() {
        assert_eq!(stream_etag(0xab, 2, Offset::new(0, 9), false), "\"ab.2:9\"");
        assert_eq!(stream_etag(0xab, 2, Offset::new(0, 9), true), "\"ab.2:9:c\"");
        assert_eq!(range_etag(0xab, 2, Offset::new(0, 3), Offset::new(0, 9), false), "\"ab.2:3:9\"");
        assert_ne!(
            range_etag(0xab, 3, Offset::new(0, 3), Offset::new(0, 9), false),
            range_etag(0xab, 2, Offset::new(0, 3), Offset::new(0, 9), false)
        );
    }
}
