//! Every shard's copy of which streams each subscription selects: an
//! append on any shard must learn, without asking anyone, whether a
//! subscription wants to hear of it. The owner of a subscription sends its
//! [`Matcher`] to every shard when it is created, changed or deleted
//! (`Control::SubRegistry`), and again at boot; memory is bounded by
//! `SUBSCRIPTIONS_PER_ROOT_MAX` per root.

use super::SubId;
use crate::protocol::subs::{glob, Delivery, Root, Subscription};
use crate::protocol::StreamKey;
use std::collections::{BTreeMap, BTreeSet};

/// What selects a subscription's streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub pattern: Option<String>,
    pub explicit: BTreeSet<String>,
    /// Its own wake stream, never selected (its wake events would wake it).
    pub wake_stream: Option<String>,
}

impl Matcher {
    pub fn of(sub: &Subscription) -> Matcher {
        let explicit = sub
            .streams
            .iter()
            .filter(|(_, c)| c.link == crate::protocol::subs::Link::Explicit)
            .map(|(p, _)| p.clone())
            .collect();
        let wake_stream = match &sub.config.delivery {
            Delivery::PullWake { wake_stream } => Some(wake_stream.clone()),
            Delivery::Webhook { .. } => None,
        };
        Matcher { pattern: sub.config.pattern.clone(), explicit, wake_stream }
    }

    fn selects(&self, path: &str) -> bool {
        self.wake_stream.as_deref() != Some(path)
            && (self.explicit.contains(path) || self.pattern.as_deref().is_some_and(|p| glob::matches(p, path)))
    }
}

#[derive(Debug, Default)]
pub struct Registry {
    subs: BTreeMap<SubId, Matcher>,
}

impl Registry {
    /// Puts (or, with None, removes) a subscription's matcher.
    pub fn set(&mut self, id: SubId, m: Option<Matcher>) {
        match m {
            Some(m) => self.subs.insert(id, m),
            None => self.subs.remove(&id),
        };
    }

    pub fn is_empty(&self) -> bool {
        self.subs.is_empty()
    }

    /// Subscriptions under `root`, whichever shard owns them.
    pub fn count_in(&self, root: &Root) -> usize {
        self.subs.range((root.clone(), String::new())..).take_while(|((r, _), _)| r == root).count()
    }

    /// The subscriptions that select the stream at `key`, with its path
    /// under each one's root. O(subscriptions): a glob each.
    pub fn matching(&self, key: &StreamKey) -> Vec<(SubId, String)> {
        let mut out = Vec::new();
        for ((root, id), m) in &self.subs {
            if let Some(path) = root.path_of(key).filter(|p| m.selects(p)) {
                out.push(((root.clone(), id.clone()), path));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_matched_under_each_root_by_its_path_there() {
        let mut r = Registry::default();
        let m = |p: &str| Matcher { pattern: Some(p.into()), explicit: BTreeSet::new(), wake_stream: None };
        r.set((Root::V1, "a".into()), Some(m("events/*")));
        r.set((Root::Ds("events".into()), "b".into()), Some(m("x*")));
        let key = StreamKey { bucket: "events".into(), stream: "x1".into() };
        let hits: Vec<String> = r.matching(&key).into_iter().map(|((_, id), p)| format!("{id}:{p}")).collect();
        assert_eq!(hits, vec!["a:events/x1".to_string(), "b:x1".to_string()]);
        r.set((Root::V1, "a".into()), None);
        assert_eq!(r.matching(&key).len(), 1);
        let own = Matcher { pattern: Some("**".into()), explicit: BTreeSet::new(), wake_stream: Some("x1".into()) };
        r.set((Root::Ds("events".into()), "b".into()), Some(own));
        assert!(r.matching(&key).is_empty(), "never its own wake stream");
        r.set((Root::Ds("events".into()), "c".into()), Some(m("y")));
        r.set((Root::Ds("eventz".into()), "a".into()), Some(m("y")));
        assert_eq!(r.count_in(&Root::Ds("events".into())), 2);
        assert_eq!((r.count_in(&Root::V1), r.count_in(&Root::Ds("none".into()))), (0, 0));
    }
}
