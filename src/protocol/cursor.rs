//! `Stream-Cursor` values (F88).
//!
//! Cursors exist for CDN request collapsing: every client polling in the same
//! 20 s window sends the same `cursor`, so the cache key is shared. A client
//! that echoes a cursor at or beyond the current window would otherwise get
//! the same value back and loop on a cached response, so it is pushed forward
//! by a random number of windows instead.

/// 2024-10-09T00:00:00Z in Unix milliseconds.
pub const CURSOR_EPOCH_MS: i64 = 1_728_432_000_000;
pub const CURSOR_INTERVAL_MS: i64 = 20_000;

/// Upper bound of the jitter the protocol allows (F88), in seconds.
const MAX_JITTER_SECS: u64 = 3600;

fn parse_client_cursor(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// now_ms: Unix ms; client: the `cursor` query param if any; jitter_secs: caller-supplied random number in 1..=3600 (keep the function pure).
/// If client cursor parses (`^\d+$`) and is >= the current interval, return client + max(1, jitter_secs*1000 / CURSOR_INTERVAL_MS) ; else the current interval. Result is always > client when client parsed.
pub fn next_cursor(now_ms: i64, client: Option<&str>, jitter_secs: u64) -> u64 {
    // A clock before the epoch is a misconfiguration, not a reason to emit a
    // non-digit cursor; clamp to interval 0.
    let current = now_ms.saturating_sub(CURSOR_EPOCH_MS).div_euclid(CURSOR_INTERVAL_MS).max(0) as u64;
    match client.and_then(parse_client_cursor) {
        Some(c) if c >= current => {
            let jitter_ms = jitter_secs.min(MAX_JITTER_SECS) * 1000;
            let step = (jitter_ms / CURSOR_INTERVAL_MS as u64).max(1);
            c.saturating_add(step)
        }
        _ => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = CURSOR_EPOCH_MS;

    #[test]
    fn epoch_constant_is_2024_10_09() {
        let parsed = chrono::DateTime::parse_from_rfc3339("2024-10-09T00:00:00Z").unwrap();
        assert_eq!(parsed.timestamp_millis(), CURSOR_EPOCH_MS);
    }

    #[test]
    fn current_interval_without_client_cursor() {
        assert_eq!(next_cursor(T0, None, 1), 0);
        assert_eq!(next_cursor(T0 + 19_999, None, 1), 0);
        assert_eq!(next_cursor(T0 + 20_000, None, 1), 1);
        assert_eq!(next_cursor(T0 + 20_000 * 1000 + 5, None, 1), 1000);
        // 2025-01-01T00:00:00Z: 84 days = 7_257_600 s after the epoch.
        assert_eq!(next_cursor(1_735_689_600_000, None, 1), 362_880);
    }

    #[test]
    fn clock_before_epoch_clamps_to_zero() {
        assert_eq!(next_cursor(0, None, 1), 0);
        assert_eq!(next_cursor(T0 - 1, None, 1), 0);
        assert_eq!(next_cursor(i64::MIN, None, 1), 0);
    }

    #[test]
    fn stale_or_garbage_client_cursor_gets_current() {
        let now = T0 + 20_000 * 500;
        assert_eq!(next_cursor(now, Some("499"), 3600), 500);
        assert_eq!(next_cursor(now, Some("0"), 3600), 500);
        for junk in ["", "abc", "-1", "+600", "1.5", "600 ", "99999999999999999999999"] {
            assert_eq!(next_cursor(now, Some(junk), 3600), 500, "{junk:?}");
        }
    }

    #[test]
    fn current_or_future_client_cursor_moves_forward() {
        let now = T0 + 20_000 * 500;
        // Jitter below one interval still advances by one.
        assert_eq!(next_cursor(now, Some("500"), 1), 501);
        assert_eq!(next_cursor(now, Some("500"), 19), 501);
        assert_eq!(next_cursor(now, Some("500"), 20), 501);
        assert_eq!(next_cursor(now, Some("500"), 40), 502);
        assert_eq!(next_cursor(now, Some("500"), 3600), 680);
        assert_eq!(next_cursor(now, Some("0500"), 60), 503);
        assert_eq!(next_cursor(now, Some("900"), 100), 905);
        // Out-of-contract jitter is clamped rather than trusted.
        assert_eq!(next_cursor(now, Some("500"), 0), 501);
        assert_eq!(next_cursor(now, Some("500"), u64::MAX), 680);
    }

    #[test]
    fn result_is_strictly_greater_than_parsed_client() {
        for now in [T0, T0 + 1, T0 + 20_000 * 12_345 + 7] {
            for client in [0u64, 1, 12_344, 12_345, 12_346, 1_000_000] {
                for jitter in [1u64, 20, 1234, 3600] {
                    let got = next_cursor(now, Some(&client.to_string()), jitter);
                    assert!(got > client, "now={now} client={client} jitter={jitter} got={got}");
                }
            }
        }
    }
}
