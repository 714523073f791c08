//! Where a connection should be served: it moves to the shard its requests
//! go to once they have gone there several times in a row. Pure bookkeeping;
//! `conn` asks it after each answer and does the move.

use crate::limits::{CONN_MOVES_MAX, CONN_MOVE_STREAK};

/// One connection's recent targets.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Affinity {
    /// The other shard the last requests went to, and how many in a row.
    streak: Option<(usize, u32)>,
    /// Moves so far, this one's previous owners included.
    moves: u8,
}

impl Affinity {
    /// A connection that has moved `moves` times already.
    pub fn moved(moves: u8) -> Affinity {
        Affinity { streak: None, moves }
    }

    pub fn moves(&self) -> u8 {
        self.moves
    }

    /// Notes where a request ran: `remote` is its owner when that was another
    /// shard, None when it ran here (or needed no shard).
    pub fn observe(&mut self, remote: Option<usize>) {
        self.streak = match (remote, self.streak) {
            (None, _) => None,
            (Some(to), Some((s, n))) if s == to => Some((s, n.saturating_add(1))),
            (Some(to), _) => Some((to, 1)),
        };
    }

    /// The shard to move to now, if the streak is long enough and moves are
    /// left; counts the move (a failed move is not retried until the next
    /// streak).
    pub fn take_move(&mut self) -> Option<usize> {
        let (to, n) = self.streak?;
        if n < CONN_MOVE_STREAK || self.moves >= CONN_MOVES_MAX {
            return None;
        }
        self.streak = None;
        self.moves += 1;
        Some(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_after_a_streak_to_one_shard() {
        let mut a = Affinity::default();
        for _ in 1..CONN_MOVE_STREAK {
            a.observe(Some(3));
            assert_eq!(a.take_move(), None);
        }
        a.observe(Some(3));
        assert_eq!(a.take_move(), Some(3));
        assert_eq!(a.moves(), 1);
        assert_eq!(a.take_move(), None, "the streak starts over after a move");
    }

    #[test]
    fn a_local_request_or_another_shard_breaks_the_streak() {
        let mut a = Affinity::default();
        for target in [Some(1), Some(1), None, Some(1), Some(1), Some(2), Some(1), Some(1)] {
            a.observe(target);
            assert_eq!(a.take_move(), None, "after {target:?}");
        }
        a.observe(Some(1));
        assert_eq!(a.take_move(), Some(1));
    }

    #[test]
    fn settles_after_the_last_move() {
        let mut a = Affinity::moved(CONN_MOVES_MAX);
        for _ in 0..10 * CONN_MOVE_STREAK {
            a.observe(Some(0));
            assert_eq!(a.take_move(), None);
        }
    }
}
