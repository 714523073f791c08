//! Reads: where a read starts (and when it is gone, 410), and the ETags of
//! streams and read ranges (F86).

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
        return Err(Error::Gone("data before the current snapshot was trimmed; read the bootstrap instead"));
    }
    Ok(match from {
        ReadFrom::Start => 0,
        ReadFrom::Now => tail,
        ReadFrom::At(o) => o.pos.min(tail),
    })
}

/// Stream-level ETag: identity of the incarnation, the tail, and closure.
pub fn stream_etag(uid: u64, incarnation: u32, tail: Offset, closed: bool) -> String {
    format!("\"{uid:x}.{incarnation}:{}{}\"", tail.pos, if closed { ":c" } else { "" })
}

/// ETag of one read response covering `[start, end)` (F86).
pub fn range_etag(uid: u64, incarnation: u32, start: Offset, end: Offset, closed: bool) -> String {
    format!("\"{uid:x}.{incarnation}:{}:{}{}\"", start.pos, end.pos, if closed { ":c" } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;

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
