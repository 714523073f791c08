//! The grants in force: shared by every shard, read once per request
//! without a lock, and replaced whole when SIGHUP re-reads the auth file.

use super::counters::{Count, TokenCounters};
use super::file::TokenSpec;
use super::grants::{Grants, Token};
use crate::metrics::{Family, Samples};
use arc_swap::{ArcSwap, Guard};
use std::sync::Arc;

/// The current grants. A reader holds the grants it loaded for the length
/// of one check; a replacement takes effect for the next request.
#[derive(Debug)]
pub struct Access {
    current: ArcSwap<Grants>,
    shards: usize,
}

impl Access {
    pub fn new(tokens: &[TokenSpec], shards: usize) -> Access {
        Access { current: ArcSwap::from_pointee(build(tokens, shards, None)), shards }
    }

    /// The grants in force (no allocation, no lock).
    pub fn grants(&self) -> Guard<Arc<Grants>> {
        self.current.load()
    }

    /// Puts these tokens in force; a token whose name was in force keeps
    /// its counts.
    pub fn replace(&self, tokens: &[TokenSpec]) {
        let next = build(tokens, self.shards, Some(&self.current.load()));
        self.current.store(Arc::new(next));
    }

    /// `shard`'s counts of every token in force, for /metrics.
    pub fn render(&self, shard: usize, out: &mut Samples) {
        for t in self.grants().tokens() {
            let label = format!("token=\"{}\"", t.name);
            out.sample(Family::TokenRequests, shard, &label, t.counters.get(shard, Count::Requests));
            out.sample(Family::TokenForbidden, shard, &label, t.counters.get(shard, Count::Forbidden));
            out.sample(Family::TokenHidden, shard, &label, t.counters.get(shard, Count::Hidden));
        }
    }
}

fn build(tokens: &[TokenSpec], shards: usize, previous: Option<&Grants>) -> Grants {
    let entries = tokens
        .iter()
        .map(|t| {
            let counters = previous
                .and_then(|p| p.token_named(&t.name))
                .map_or_else(|| Arc::new(TokenCounters::new(shards)), |old| old.counters.clone());
            let token = Token { name: t.name.clone(), patterns: t.patterns.clone(), rights: t.rights, counters };
            (t.digest, token)
        })
        .collect();
    Grants::new(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::bearer::Digest;
    use crate::auth::grants::{Pattern, Right, Rights};

    fn spec(name: &str, secret: &str) -> TokenSpec {
        TokenSpec {
            name: name.into(),
            digest: Digest::of(secret),
            patterns: vec![Pattern::All],
            rights: Rights::default().with(Right::Read),
        }
    }

    #[test]
    fn a_replacement_takes_effect_and_keeps_counts_by_name() {
        let a = Access::new(&[spec("ingest", "s1"), spec("old", "s2")], 2);
        a.grants().token_named("ingest").unwrap().counters.add(1, Count::Requests);
        let held = a.grants();
        a.replace(&[spec("ingest", "s3"), spec("new", "s4")]);
        assert!(held.token_named("old").is_some(), "a check in progress keeps the grants it loaded");
        let g = a.grants();
        assert!(g.identify(Some("Bearer s1"), 1).is_err(), "the old secret is gone");
        assert_eq!(g.identify(Some("Bearer s3"), 1).unwrap().name, "ingest");
        assert!(g.token_named("old").is_none());
        assert_eq!(g.token_named("ingest").unwrap().counters.get(1, Count::Requests), 1);
        let mut s = Samples::default();
        a.render(1, &mut s);
        let text = s.render();
        assert!(text.contains("ringstream_token_requests_total{shard=\"1\",token=\"ingest\"} 1\n"), "{text}");
        assert!(text.contains("ringstream_token_requests_total{shard=\"1\",token=\"new\"} 0\n"), "{text}");
        assert!(!text.contains("token=\"old\""));
    }
}
