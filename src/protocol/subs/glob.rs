//! Subscription patterns: globs over stream paths, segment by segment
//! (`/` separates segments). `*` within a segment matches any characters of
//! that segment (so a lone `*` is one whole segment); `**`, a segment of
//! its own, matches any number of segments, none included.

use crate::protocol::Error;

/// Checks a pattern: 1 or more non-empty segments, and `**` only as a
/// whole segment.
pub fn validate(pattern: &str) -> Result<(), Error> {
    let bad = |why: &str| Error::BadRequest(format!("pattern {pattern:?}: {why}"));
    if pattern.is_empty() {
        return Err(bad("empty"));
    }
    for seg in pattern.split('/') {
        if seg.is_empty() {
            return Err(bad("empty segment"));
        }
        if seg != "**" && seg.contains("**") {
            return Err(bad("`**` must be a whole segment"));
        }
        if seg.chars().any(char::is_control) {
            return Err(bad("control characters are not allowed"));
        }
    }
    Ok(())
}

/// Whether `path` matches `pattern` (a validated one).
pub fn matches(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    match_segments(&p, &s)
}

/// Segments against segments. `**` tries every split, so a pattern with k
/// of them costs O(segments^k); paths are at most 1 KiB.
fn match_segments(p: &[&str], s: &[&str]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((&"**", rest)) => (0..=s.len()).any(|skip| match_segments(rest, &s[skip..])),
        Some((first, rest)) => {
            s.split_first().is_some_and(|(seg, tail)| segment(first, seg) && match_segments(rest, tail))
        }
    }
}

/// One segment against one: `*` matches any run of characters.
fn segment(p: &str, s: &str) -> bool {
    let parts: Vec<&str> = p.split('*').collect();
    if parts.len() == 1 {
        return p == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if s.len() < first.len() + last.len() || !s.starts_with(first) || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_star_is_one_segment_two_are_any_number() {
        assert!(matches("events/*", "events/a"));
        assert!(!matches("events/*", "events/a/b"));
        assert!(!matches("events/*", "events"));
        assert!(!matches("events/*", "other/a"));
        assert!(matches("events/**", "events/a/b/c"));
        assert!(matches("events/**", "events"));
        assert!(matches("**/x", "a/b/x"));
        assert!(matches("a/**/z", "a/z"));
        assert!(!matches("a/**/z", "a/b/y"));
        assert!(matches("events/sync-*", "events/sync-123"));
        assert!(!matches("events/sync-*", "events/async-1"));
        assert!(matches("e*s/*-*-x", "events/a-b-x"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
    }

    #[test]
    fn patterns_are_checked() {
        for ok in ["a", "a/*", "**", "a/**/b", "x*y"] {
            assert!(validate(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a//b", "/a", "a/", "a**", "a/**b"] {
            assert!(validate(bad).is_err(), "{bad}");
        }
    }
}
