//! Stream lifetimes: sliding TTL and absolute expiry (F93/F94).

use crate::protocol::headers::Lifetime;

/// Whether a stream with this lifetime has expired at `now_ms`, given the
/// last time a read or write reached it (sliding TTL, F93/F94).
pub fn expired(lifetime: &Lifetime, last_access_ms: i64, now_ms: i64) -> bool {
    match lifetime {
        Lifetime::Forever => false,
        Lifetime::Ttl { secs } => {
            let window_ms = i64::try_from(*secs).unwrap_or(i64::MAX).saturating_mul(1000);
            now_ms >= last_access_ms.saturating_add(window_ms)
        }
        Lifetime::ExpiresAt { at_ms, .. } => now_ms >= *at_ms,
    }
}

/// Whether a replica that does not decide expiry (a cell's follower),
/// having served a read of a stream with this lifetime, should tell the
/// deciding one (its leader), which it last did at `last_told_ms`: four
/// times a TTL window at most, so an access reaches the leader well within
/// the window it slides. Never for a lifetime that no access changes.
pub fn access_report_due(lifetime: &Lifetime, last_told_ms: i64, now_ms: i64) -> bool {
    match lifetime {
        Lifetime::Ttl { secs } => {
            let quarter_ms = i64::try_from(*secs).unwrap_or(i64::MAX).saturating_mul(250);
            now_ms >= last_told_ms.saturating_add(quarter_ms)
        }
        Lifetime::Forever | Lifetime::ExpiresAt { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_slides_and_expires_at_does_not() {
        let ttl = Lifetime::Ttl { secs: 2 };
        assert!(!expired(&ttl, 1000, 2999));
        assert!(expired(&ttl, 1000, 3000));
        let at = Lifetime::ExpiresAt { at_ms: 5000, raw: String::new() };
        assert!(!expired(&at, 0, 4999));
        assert!(expired(&at, 4999, 5000));
        assert!(!expired(&Lifetime::Forever, 0, i64::MAX));
        // A TTL too large for i64 milliseconds never wraps into the past.
        assert!(!expired(&Lifetime::Ttl { secs: u64::MAX }, 1000, 2000));
    }

    #[test]
    fn a_follower_reports_reads_four_times_a_ttl_window() {
        let ttl = Lifetime::Ttl { secs: 4 };
        assert!(access_report_due(&ttl, 0, 10_000));
        assert!(!access_report_due(&ttl, 10_000, 10_999));
        assert!(access_report_due(&ttl, 10_000, 11_000));
        let at = Lifetime::ExpiresAt { at_ms: 5000, raw: String::new() };
        assert!(!access_report_due(&at, 0, i64::MAX));
        assert!(!access_report_due(&Lifetime::Forever, 0, i64::MAX));
        assert!(!access_report_due(&Lifetime::Ttl { secs: u64::MAX }, 0, i64::MAX - 1));
    }
}
