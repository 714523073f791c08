//! Creating a stream that may already exist (F11/F12): an identical PUT is
//! answered as a re-create, anything else conflicts.

use crate::protocol::headers::{content_types_match, Lifetime};
use crate::protocol::op::ForkReq;
use crate::protocol::persist::ForkRecord;

/// The configuration a PUT asks for, compared for idempotent create (F11/F12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateConfig {
    pub content_type: String,
    pub lifetime: Lifetime,
    pub closed: bool,
}

/// True when an existing stream has the configuration a PUT asks for.
pub fn same_config(existing: &CreateConfig, asked: &CreateConfig) -> bool {
    content_types_match(&existing.content_type, &asked.content_type)
        && existing.closed == asked.closed
        && match (&existing.lifetime, &asked.lifetime) {
            (Lifetime::ExpiresAt { at_ms: a, .. }, Lifetime::ExpiresAt { at_ms: b, .. }) => a == b,
            (a, b) => a == b,
        }
}

/// Whether a PUT at a path that holds a stream asks for that stream, so it
/// is answered as an idempotent re-create rather than a conflict. A fork
/// must name the same source and fork point and agree on closure; its
/// content type and lifetime, inherited from the source, must match only
/// when the PUT names them (`content_type_given`, a lifetime other than
/// `Forever`). A plain create never matches a fork, nor the other way round.
pub fn recreate_matches(
    existing: &CreateConfig,
    existing_fork: Option<&ForkRecord>,
    asked: &CreateConfig,
    asked_fork: Option<&ForkReq>,
    content_type_given: bool,
) -> bool {
    match (asked_fork, existing_fork) {
        (None, None) => same_config(existing, asked),
        (Some(f), Some(have)) => {
            let inherit = |c: CreateConfig| same_config(existing, &c);
            f.source.bucket == have.bucket
                && f.source.stream == have.stream
                && f.offset.map(|o| (o.seq, o.pos)) == have.offset
                && f.sub_offset == have.sub_offset
                && existing.closed == asked.closed
                && (!content_type_given
                    || inherit(CreateConfig {
                        lifetime: existing.lifetime.clone(),
                        closed: existing.closed,
                        ..asked.clone()
                    }))
                && (asked.lifetime == Lifetime::Forever
                    || inherit(CreateConfig {
                        content_type: existing.content_type.clone(),
                        closed: existing.closed,
                        ..asked.clone()
                    }))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Offset, StreamKey};

    fn cfg(ct: &str, lifetime: Lifetime, closed: bool) -> CreateConfig {
        CreateConfig { content_type: ct.into(), lifetime, closed }
    }

    fn fork_req(stream: &str, offset: Option<u64>, sub_offset: u64) -> ForkReq {
        ForkReq {
            source: StreamKey { bucket: "b".into(), stream: stream.into() },
            offset: offset.map(|p| Offset::new(0, p)),
            sub_offset,
        }
    }

    fn fork_rec(stream: &str, offset: Option<u64>, sub_offset: u64) -> ForkRecord {
        ForkRecord {
            bucket: "b".into(),
            stream: stream.into(),
            source_uid: 7,
            offset: offset.map(|p| (0, p)),
            sub_offset,
        }
    }

    #[test]
    fn plain_recreate_needs_the_same_configuration() {
        let have = cfg("text/plain", Lifetime::Ttl { secs: 60 }, false);
        assert!(recreate_matches(&have, None, &have.clone(), None, true));
        assert!(recreate_matches(&have, None, &cfg("TEXT/PLAIN", Lifetime::Ttl { secs: 60 }, false), None, true));
        assert!(!recreate_matches(
            &have,
            None,
            &cfg("application/json", Lifetime::Ttl { secs: 60 }, false),
            None,
            true
        ));
        assert!(!recreate_matches(&have, None, &cfg("text/plain", Lifetime::Forever, false), None, true));
        assert!(!recreate_matches(&have, None, &cfg("text/plain", Lifetime::Ttl { secs: 60 }, true), None, true));
    }

    #[test]
    fn fork_recreate_needs_the_same_source_and_point_and_inherits_the_rest() {
        let have = cfg("text/plain", Lifetime::Ttl { secs: 60 }, false);
        let rec = fork_rec("src", Some(10), 2);
        // Content type and lifetime not named: inherited, so they match.
        let bare = cfg("application/octet-stream", Lifetime::Forever, false);
        assert!(recreate_matches(&have, Some(&rec), &bare, Some(&fork_req("src", Some(10), 2)), false));
        // Named, they must match the fork's.
        assert!(recreate_matches(&have, Some(&rec), &have.clone(), Some(&fork_req("src", Some(10), 2)), true));
        assert!(!recreate_matches(&have, Some(&rec), &bare, Some(&fork_req("src", Some(10), 2)), true));
        let other_ttl = cfg("text/plain", Lifetime::Ttl { secs: 5 }, false);
        assert!(!recreate_matches(&have, Some(&rec), &other_ttl, Some(&fork_req("src", Some(10), 2)), false));
        // Another source, point or sub-offset, or closure: a conflict.
        assert!(!recreate_matches(&have, Some(&rec), &bare, Some(&fork_req("other", Some(10), 2)), false));
        assert!(!recreate_matches(&have, Some(&rec), &bare, Some(&fork_req("src", Some(11), 2)), false));
        assert!(!recreate_matches(&have, Some(&rec), &bare, Some(&fork_req("src", None, 2)), false));
        assert!(!recreate_matches(&have, Some(&rec), &bare, Some(&fork_req("src", Some(10), 0)), false));
        let closed = cfg("application/octet-stream", Lifetime::Forever, true);
        assert!(!recreate_matches(&have, Some(&rec), &closed, Some(&fork_req("src", Some(10), 2)), false));
        // Fork and plain never match each other.
        assert!(!recreate_matches(&have, Some(&rec), &have.clone(), None, true));
        assert!(!recreate_matches(&have, None, &have.clone(), Some(&fork_req("src", Some(10), 2)), true));
    }
}
