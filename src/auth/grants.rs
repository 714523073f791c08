//! Grants: which token may do what in which buckets, and the decision for
//! one request ([`authorize`]). Pure: no I/O, nothing allocated per request.
//!
//! A token has one set of bucket patterns and one set of rights. Its
//! patterns *cover* a bucket or not; a covered bucket with the right is
//! allowed, without it forbidden (403), and a bucket not covered is hidden:
//! answered exactly like a bucket that does not exist (404), so a token
//! learns nothing about the names of buckets it may not see.

use super::bearer::{bearer_token, Digest, Unauthenticated};
use super::counters::TokenCounters;
use std::collections::HashMap;
use std::sync::Arc;

/// What a request may need of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// GET/HEAD of streams, bucket info and listings, snapshots, bootstrap, live reads.
    Read,
    /// POST: appends and closes.
    Append,
    /// Creating and deleting streams, publishing and deleting snapshots, forks.
    Manage,
    /// Everything, bucket create/delete and (over every bucket) /metrics included.
    Admin,
}

impl Right {
    pub const ALL: [Right; 4] = [Right::Read, Right::Append, Right::Manage, Right::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Append => "append",
            Right::Manage => "manage",
            Right::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Right> {
        Right::ALL.into_iter().find(|r| r.as_str() == s)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of rights. `admin` implies every other right; the others imply
/// nothing but themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rights(u8);

impl Rights {
    pub fn with(self, r: Right) -> Rights {
        Rights(self.0 | r.bit())
    }

    pub fn allows(self, r: Right) -> bool {
        self.0 & (r.bit() | Right::Admin.bit()) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Which buckets a grant covers: one name, the names starting with a
/// prefix (written `prefix*`), or all of them (`*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    All,
    Prefix(String),
    Exact(String),
}

impl Pattern {
    /// `*`, `prefix*` or an exact name; a `*` anywhere else is refused, so a
    /// pattern never means more than it looks like.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        let (stem, star) = match s.strip_suffix('*') {
            Some(stem) => (stem, true),
            None => (s, false),
        };
        if stem.contains('*') {
            return Err(format!("bucket pattern {s:?}: '*' may only end a pattern"));
        }
        if stem.chars().any(|c| c == '/' || c.is_control() || c.is_whitespace()) {
            return Err(format!("bucket pattern {s:?}: no '/', spaces or control characters"));
        }
        Ok(match (stem.is_empty(), star) {
            (true, true) => Pattern::All,
            (true, false) => return Err("bucket pattern \"\": give a name, a prefix ending in *, or *".into()),
            (false, true) => Pattern::Prefix(stem.to_string()),
            (false, false) => Pattern::Exact(stem.to_string()),
        })
    }

    pub fn covers(&self, bucket: &str) -> bool {
        match self {
            Pattern::All => true,
            Pattern::Prefix(p) => bucket.starts_with(p.as_str()),
            Pattern::Exact(b) => bucket == b,
        }
    }
}

/// One token of the auth file, as the server keeps it (its digest, never the token).
#[derive(Debug)]
pub struct Token {
    /// Shows in logs and metrics.
    pub name: String,
    pub patterns: Vec<Pattern>,
    pub rights: Rights,
    /// Per-shard request counts, kept across reloads for the same name.
    pub counters: Arc<TokenCounters>,
}

impl Token {
    pub fn covers(&self, bucket: &str) -> bool {
        self.patterns.iter().any(|p| p.covers(bucket))
    }

    /// Whether this token may do `need`.
    pub fn check(&self, need: Need<'_>) -> Verdict {
        match need {
            Need::Bucket { bucket, .. } if !self.covers(bucket) => Verdict::Hidden,
            Need::Bucket { right, .. } | Need::AllBuckets(right) if !self.rights.allows(right) => {
                Verdict::Forbidden(right)
            }
            Need::AllBuckets(right) if !self.patterns.contains(&Pattern::All) => Verdict::Forbidden(right),
            _ => Verdict::Allowed,
        }
    }
}

/// What one request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    /// A right in one bucket.
    Bucket { bucket: &'a str, right: Right },
    /// A right over every bucket (`buckets = ["*"]`): `/metrics`, which
    /// shows every bucket's traffic and every token's name.
    AllBuckets(Right),
}

/// The answer for an authenticated token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Covered, but this right is missing: 403.
    Forbidden(Right),
    /// Not covered: 404, as for a bucket that does not exist.
    Hidden,
}

/// Every token, looked up by digest.
#[derive(Debug, Default)]
pub struct Grants {
    tokens: Vec<Token>,
    by_digest: HashMap<Digest, usize>,
}

impl Grants {
    /// Grants from (digest, token) pairs; the caller has refused duplicate
    /// digests and names.
    pub fn new(entries: Vec<(Digest, Token)>) -> Grants {
        let mut g = Grants::default();
        for (digest, token) in entries {
            let previous = g.by_digest.insert(digest, g.tokens.len());
            debug_assert!(previous.is_none(), "duplicate digests are refused when the file is read");
            g.tokens.push(token);
        }
        g
    }

    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    pub fn token_named(&self, name: &str) -> Option<&Token> {
        self.tokens.iter().find(|t| t.name == name)
    }

    /// The token a request presents. `authorization` is its first
    /// `Authorization` header and `count` how many it sent (more than one is
    /// ambiguous, so malformed).
    pub fn identify(&self, authorization: Option<&str>, count: usize) -> Result<&Token, Unauthenticated> {
        let value = authorization.ok_or(Unauthenticated::Missing)?;
        if count > 1 {
            return Err(Unauthenticated::Malformed);
        }
        let digest = Digest::of(bearer_token(value)?);
        self.by_digest.get(&digest).map(|&i| &self.tokens[i]).ok_or(Unauthenticated::Unknown)
    }
}

/// The decision for one request: who presents it (401 when nobody known),
/// then each of its needs in order; the first that is not allowed decides.
pub fn authorize<'g>(
    grants: &'g Grants,
    authorization: Option<&str>,
    count: usize,
    needs: &[Need<'_>],
) -> Result<(&'g Token, Verdict), Unauthenticated> {
    let token = grants.identify(authorization, count)?;
    let verdict = needs.iter().map(|&n| token.check(n)).find(|v| *v != Verdict::Allowed).unwrap_or(Verdict::Allowed);
    Ok((token, verdict))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, patterns: &[&str], rights: &[Right]) -> Token {
        Token {
            name: name.into(),
            patterns: patterns.iter().map(|p| Pattern::parse(p).unwrap()).collect(),
            rights: rights.iter().fold(Rights::default(), |r, &x| r.with(x)),
            counters: Arc::new(TokenCounters::new(1)),
        }
    }

    fn grants() -> Grants {
        Grants::new(vec![
            (Digest::of("ingest-secret"), token("ingest", &["orders", "tenant-a-*"], &[Right::Read, Right::Append])),
            (Digest::of("ops-secret"), token("ops", &["*"], &[Right::Admin])),
            (Digest::of("tenant-admin"), token("tenant", &["tenant-a-*"], &[Right::Admin])),
        ])
    }

    fn need(bucket: &str, right: Right) -> Need<'_> {
        Need::Bucket { bucket, right }
    }

    #[test]
    fn patterns() {
        assert_eq!(Pattern::parse("*"), Ok(Pattern::All));
        assert_eq!(Pattern::parse("a-*"), Ok(Pattern::Prefix("a-".into())));
        assert_eq!(Pattern::parse("orders"), Ok(Pattern::Exact("orders".into())));
        for bad in ["", "a*b", "**", "*a", "a b", "a/b", "a\n"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Pattern::Prefix("tenant-a-".into()).covers("tenant-a-1"));
        assert!(Pattern::Prefix("tenant-a-".into()).covers("tenant-a-"));
        assert!(!Pattern::Prefix("tenant-a-".into()).covers("tenant-b-1"));
        assert!(!Pattern::Exact("orders".into()).covers("orders2"));
        assert!(Pattern::All.covers("anything"));
    }

    #[test]
    fn rights_imply_only_themselves_except_admin() {
        let r = Rights::default().with(Right::Read);
        assert!(r.allows(Right::Read) && !r.allows(Right::Append) && !r.allows(Right::Manage));
        assert!(!r.allows(Right::Admin));
        let a = Rights::default().with(Right::Admin);
        assert!(Right::ALL.iter().all(|&x| a.allows(x)));
        assert!(Rights::default().is_empty() && !r.is_empty());
        assert_eq!(Right::parse("manage"), Some(Right::Manage));
        assert_eq!(Right::parse("write"), None);
    }

    #[test]
    fn unknown_missing_and_malformed_tokens_are_unauthenticated() {
        let g = grants();
        let n = [need("orders", Right::Read)];
        assert_eq!(authorize(&g, None, 0, &n).unwrap_err(), Unauthenticated::Missing);
        assert_eq!(authorize(&g, Some("Bearer nope"), 1, &n).unwrap_err(), Unauthenticated::Unknown);
        assert_eq!(authorize(&g, Some("Basic x"), 1, &n).unwrap_err(), Unauthenticated::Malformed);
        assert_eq!(authorize(&g, Some("Bearer ingest-secret"), 2, &n).unwrap_err(), Unauthenticated::Malformed);
        // The digest, not a prefix of it, must match.
        assert_eq!(authorize(&g, Some("Bearer ingest-secre"), 1, &n).unwrap_err(), Unauthenticated::Unknown);
    }

    #[test]
    fn covered_buckets_need_the_right_and_others_are_hidden() {
        let g = grants();
        let v = |tok: &str, needs: &[Need<'_>]| authorize(&g, Some(&format!("Bearer {tok}")), 1, needs).unwrap();
        let (t, verdict) = v("ingest-secret", &[need("orders", Right::Append)]);
        assert_eq!((t.name.as_str(), verdict), ("ingest", Verdict::Allowed));
        assert_eq!(v("ingest-secret", &[need("tenant-a-7", Right::Read)]).1, Verdict::Allowed);
        assert_eq!(v("ingest-secret", &[need("orders", Right::Manage)]).1, Verdict::Forbidden(Right::Manage));
        assert_eq!(v("ingest-secret", &[need("orders", Right::Admin)]).1, Verdict::Forbidden(Right::Admin));
        assert_eq!(v("ingest-secret", &[need("secret", Right::Read)]).1, Verdict::Hidden);
        assert_eq!(
            v("ingest-secret", &[need("tenant-b-1", Right::Manage)]).1,
            Verdict::Hidden,
            "hidden beats forbidden"
        );
        assert_eq!(v("tenant-admin", &[need("tenant-a-1", Right::Manage)]).1, Verdict::Allowed);
        assert_eq!(v("ops-secret", &[need("anything", Right::Append)]).1, Verdict::Allowed);
    }

    #[test]
    fn every_bucket_needs_a_star_grant_and_the_right() {
        let g = grants();
        let all = [Need::AllBuckets(Right::Admin)];
        let v = |tok: &str| authorize(&g, Some(&format!("Bearer {tok}")), 1, &all).unwrap().1;
        assert_eq!(v("ops-secret"), Verdict::Allowed);
        assert_eq!(v("tenant-admin"), Verdict::Forbidden(Right::Admin), "admin of some buckets only");
        assert_eq!(v("ingest-secret"), Verdict::Forbidden(Right::Admin));
    }

    #[test]
    fn the_first_need_that_fails_decides() {
        let g = grants();
        // A fork: manage on the new stream's bucket, read on the source's.
        let fork = |to, from| [need(to, Right::Manage), need(from, Right::Read)];
        let v = |needs: &[Need<'_>]| authorize(&g, Some("Bearer tenant-admin"), 1, needs).unwrap().1;
        assert_eq!(v(&fork("tenant-a-1", "tenant-a-2")), Verdict::Allowed);
        assert_eq!(v(&fork("tenant-a-1", "orders")), Verdict::Hidden);
        let w = |needs: &[Need<'_>]| authorize(&g, Some("Bearer ingest-secret"), 1, needs).unwrap().1;
        assert_eq!(w(&fork("orders", "tenant-a-1")), Verdict::Forbidden(Right::Manage));
    }
}
