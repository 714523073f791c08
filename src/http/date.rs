//! The `Date` header (RFC 9110 §6.6.1: an origin server with a clock sends
//! one on every response), as an IMF-fixdate such as
//! `Sun, 06 Nov 1994 08:49:37 GMT`.
//!
//! Cheap on the hot path: each shard thread keeps the last formatted value
//! and the second it is for; a response reads the wall clock (vDSO, no
//! syscall) and formats again only when the second has changed.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// `Sun, 06 Nov 1994 08:49:37 GMT` is always 29 bytes.
const IMF_FIXDATE_LEN: usize = 29;

thread_local! {
    /// (second since the epoch, its IMF-fixdate); second u64::MAX: none yet.
    static CACHE: Cell<(u64, [u8; IMF_FIXDATE_LEN])> = const { Cell::new((u64::MAX, [0; IMF_FIXDATE_LEN])) };
}

/// The IMF-fixdate of `secs` seconds after the UNIX epoch.
pub fn imf_fixdate(secs: u64) -> [u8; IMF_FIXDATE_LEN] {
    let t = chrono::DateTime::from_timestamp(i64::try_from(secs).unwrap_or(i64::MAX), 0).unwrap_or_default();
    let text = t.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let mut out = [b' '; IMF_FIXDATE_LEN];
    // Years 0-9999 give exactly 29 bytes; anything else (a clock far off) is cut.
    let n = text.len().min(IMF_FIXDATE_LEN);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// Appends `Date: <now>\r\n`, formatting at most once per second per thread.
pub fn write_header(out: &mut Vec<u8>) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let date = CACHE.with(|c| {
        let (secs, bytes) = c.get();
        if secs == now {
            return bytes;
        }
        let bytes = imf_fixdate(now);
        c.set((now, bytes));
        bytes
    });
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(&date);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_the_rfc_example() {
        // RFC 9110 §5.6.7.
        assert_eq!(&imf_fixdate(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&imf_fixdate(1_709_251_199), b"Thu, 29 Feb 2024 23:59:59 GMT");
    }

    #[test]
    fn the_header_is_now_and_cached_per_second() {
        let mut a = Vec::new();
        write_header(&mut a);
        let text = String::from_utf8(a.clone()).unwrap();
        let value = text.strip_prefix("Date: ").and_then(|v| v.strip_suffix("\r\n")).unwrap();
        let parsed = chrono::DateTime::parse_from_rfc2822(value).unwrap();
        let now = chrono::Utc::now().timestamp();
        assert!((parsed.timestamp() - now).abs() <= 1, "{value} is not now");
        let (secs, cached) = CACHE.with(Cell::get);
        assert_eq!(secs as i64, parsed.timestamp());
        assert_eq!(&cached[..], value.as_bytes());
    }
}
