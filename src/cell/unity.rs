//! Whether a node of a cell with more than one shard a node leads every
//! group, and whether its shards have told one another again, since it came
//! to, what a single node's shards tell each other in memory (bucket
//! presence, fork references, subscriptions, quota counts).
//!
//! A shard's replica keeps none of that for the other groups while it
//! follows, so what crosses groups (a create checks its bucket, a delete
//! decides on fork references, a quota counts every shard's streams) runs
//! only on a node that leads every group and has told it all again for
//! this lead: its shards see then the whole cell, each group's committed
//! prefix applied. Every change of a group's lead starts a new generation;
//! the node is whole again once it told everything for the newest one.
//! Atomics, one process-wide value read and written by every shard.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

#[derive(Debug)]
pub struct Unity {
    leads: Vec<AtomicBool>,
    /// Bumped by every change of a group's lead on this node.
    generation: AtomicU64,
    /// The generation whose state was told again; `u64::MAX`: none yet.
    told: AtomicU64,
}

impl Unity {
    /// A node of `groups` groups, leading none.
    pub fn new(groups: usize) -> Unity {
        Unity {
            leads: (0..groups).map(|_| AtomicBool::new(false)).collect(),
            generation: AtomicU64::new(0),
            told: AtomicU64::new(u64::MAX),
        }
    }

    /// Group `group`'s replica here began (true) or stopped (false) leading.
    pub fn set_leads(&self, group: usize, yes: bool) {
        let Some(slot) = self.leads.get(group) else { return };
        if slot.swap(yes, SeqCst) != yes {
            self.generation.fetch_add(1, SeqCst);
        }
    }

    fn leads_all(&self) -> bool {
        self.leads.iter().all(|l| l.load(SeqCst))
    }

    /// The generation to tell everything again for: Some while this node
    /// leads every group and has not told it since the last change.
    pub fn due(&self) -> Option<u64> {
        let g = self.generation.load(SeqCst);
        (self.leads_all() && self.told.load(SeqCst) != g).then_some(g)
    }

    /// Everything was told again for generation `g` (what `due` gave).
    pub fn told(&self, g: u64) {
        self.told.store(g, SeqCst);
    }

    /// Whether a request that crosses groups may run on this node now: it
    /// leads every group and told everything since the last change.
    pub fn whole(&self) -> bool {
        let g = self.generation.load(SeqCst);
        self.leads_all() && self.told.load(SeqCst) == g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_only_once_told_for_the_newest_lead_of_every_group() {
        let u = Unity::new(2);
        assert!(!u.whole() && u.due().is_none(), "leads nothing");
        u.set_leads(0, true);
        assert!(!u.whole() && u.due().is_none(), "leads one of two");
        u.set_leads(1, true);
        let g = u.due().expect("leads both, not told yet");
        assert!(!u.whole());
        u.told(g);
        assert!(u.whole() && u.due().is_none());
        u.set_leads(1, true);
        assert!(u.whole(), "no change");
    }

    #[test]
    fn a_lead_lost_and_won_again_while_telling_needs_telling_again() {
        let u = Unity::new(2);
        u.set_leads(0, true);
        u.set_leads(1, true);
        let g = u.due().unwrap();
        // While the shards tell each other, group 1 steps down and back.
        u.set_leads(1, false);
        u.set_leads(1, true);
        u.told(g);
        assert!(!u.whole(), "what group 1 applied as a follower meanwhile is not told");
        let again = u.due().expect("due again");
        assert_ne!(again, g);
        u.told(again);
        assert!(u.whole());
        u.set_leads(0, false);
        assert!(!u.whole() && u.due().is_none());
    }

    #[test]
    fn an_unknown_group_changes_nothing() {
        let u = Unity::new(1);
        u.set_leads(5, true);
        assert!(u.due().is_none());
    }
}
