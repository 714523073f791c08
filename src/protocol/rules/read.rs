//! Reads: where a read starts (and when it is gone, 410), and the ETags of
//! streams and read ranges (F86).

use crate::protocol::digits;
use crate::protocol::error::Error;
use crate::protocol::offset::{Offset, ReadFrom};

/// What a read's start is checked against: where the retained data starts.
#[derive(Debug, Clone, Copy)]
pub struct Retained {
    /// Data below this is gone (trimmed by a snapshot or by retention).
    pub trim: u64,
    /// The current snapshot sits at `trim`: it stands for the data before,
    /// so even a read from the start (`-1`) is gone (read the bootstrap).
    /// Without one, `-1` starts at the retained start.
    pub snapshot_at_trim: bool,
}

/// Where a read of a stream with this retained start and tail starts: 410
/// (naming the retained start) below it; a read past the tail is empty and
/// positioned at the tail (F55, as the reference server).
pub fn read_start(from: ReadFrom, kept: Retained, tail: u64) -> Result<u64, Error> {
    let below_trim = match from {
        ReadFrom::Start => kept.snapshot_at_trim && kept.trim > 0,
        ReadFrom::At(o) => o.pos < kept.trim,
        ReadFrom::Now => false,
    };
    if below_trim {
        return Err(Error::Trimmed {
            retained: Offset::new(0, kept.trim),
            reason: if kept.snapshot_at_trim {
                "data before the current snapshot was trimmed; read the bootstrap instead".into()
            } else {
                "data before the stream's retained start was removed; read from Stream-Retained-Offset".into()
            },
        });
    }
    Ok(match from {
        ReadFrom::Start => kept.trim,
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
        let none = Retained { trim: 0, snapshot_at_trim: false };
        assert_eq!(read_start(ReadFrom::Start, none, 50), Ok(0));
        assert_eq!(read_start(ReadFrom::Now, none, 50), Ok(50));
        assert_eq!(read_start(at(20), none, 50), Ok(20));
        assert_eq!(read_start(at(99), none, 50), Ok(50), "past the tail: at the tail");
        let snap = Retained { trim: 10, snapshot_at_trim: true };
        let gone = |r| matches!(r, Err(Error::Trimmed { retained, .. }) if retained == Offset::new(0, 10));
        assert!(gone(read_start(ReadFrom::Start, snap, 50)), "a snapshot replaced the start");
        assert!(gone(read_start(at(9), snap, 50)));
        assert_eq!(read_start(at(10), snap, 50), Ok(10));
        assert_eq!(read_start(ReadFrom::Now, snap, 50), Ok(50));
    }

    #[test]
    fn a_read_from_the_start_begins_at_the_retained_start() {
        let kept = Retained { trim: 10, snapshot_at_trim: false };
        assert_eq!(read_start(ReadFrom::Start, kept, 50), Ok(10));
        let r = read_start(ReadFrom::At(Offset::new(0, 9)), kept, 50);
        assert!(
            matches!(r, Err(Error::Trimmed { retained, reason }) if retained.pos == 10 && reason.contains("retained"))
        );
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
