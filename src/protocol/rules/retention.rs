//! Where an explicit retention request (`PUT .../retention/{offset}`) puts
//! a stream's retained start: only ever forward, never past the tail, on
//! the start of an append, and never past a snapshot that stands for the
//! data before it.

use crate::protocol::error::Error;
use crate::protocol::offset::Offset;

/// What the shard knows about a stream when retention is asked for.
pub struct RetentionTarget {
    /// The durable tail: what clients were told exists.
    pub tail: u64,
    /// The retained start now (0, or where a snapshot or retention trimmed).
    pub trim: u64,
    /// The current snapshot's offset, if one was published.
    pub snapshot: Option<u64>,
    /// Where the append holding the asked offset starts (the offset itself
    /// when it starts one, or is the tail).
    pub append_start: u64,
}

/// The retained start after the request: the current one when the offset
/// is at or below it (never backwards), else the start of the append that
/// holds the offset, so that no message (nor a bootstrap part, which is a
/// whole append) is cut in two. 409 past the tail, and 409 past the current
/// snapshot: a bootstrap is that snapshot plus every message after it, so
/// the data between must stay until a newer snapshot is published.
pub fn retention_boundary(asked: Offset, t: &RetentionTarget) -> Result<u64, Error> {
    if asked.pos > t.tail {
        return Err(Error::Conflict(format!(
            "retention offset {asked} is past the stream's tail {}",
            Offset::new(0, t.tail)
        )));
    }
    let boundary = t.append_start.min(asked.pos).max(t.trim);
    if let Some(snap) = t.snapshot.filter(|&s| boundary > s) {
        return Err(Error::Conflict(format!(
            "the current snapshot at {} stands for the data before it; publish a newer snapshot first",
            Offset::new(0, snap)
        )));
    }
    Ok(boundary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pos: u64) -> Offset {
        Offset::new(0, pos)
    }

    fn target(trim: u64, append_start: u64) -> RetentionTarget {
        RetentionTarget { tail: 100, trim, snapshot: None, append_start }
    }

    #[test]
    fn the_boundary_moves_forward_to_an_append_start() {
        assert_eq!(retention_boundary(at(40), &target(0, 40)), Ok(40), "an append starts there");
        assert_eq!(retention_boundary(at(45), &target(0, 40)), Ok(40), "inside an append: its start");
        assert_eq!(retention_boundary(at(100), &target(0, 100)), Ok(100), "the tail");
        assert_eq!(retention_boundary(at(0), &target(0, 0)), Ok(0), "nothing to move");
    }

    #[test]
    fn never_backwards() {
        assert_eq!(retention_boundary(at(10), &target(40, 10)), Ok(40), "below: the current boundary");
        assert_eq!(retention_boundary(at(40), &target(40, 40)), Ok(40));
        // An append straddling the current boundary never moves it back.
        assert_eq!(retention_boundary(at(45), &target(42, 40)), Ok(42));
    }

    #[test]
    fn past_the_tail_or_the_current_snapshot_conflicts() {
        let r = retention_boundary(at(101), &target(0, 100));
        assert!(matches!(r, Err(Error::Conflict(m)) if m.contains("past the stream's tail")));
        let snap = RetentionTarget { snapshot: Some(40), ..target(40, 60) };
        assert_eq!(retention_boundary(at(40), &snap), Ok(40), "at the snapshot: nothing moves");
        assert_eq!(retention_boundary(at(20), &snap), Ok(40), "below it: the current boundary");
        let r = retention_boundary(at(60), &snap);
        assert!(matches!(&r, Err(Error::Conflict(m)) if m.contains("newer snapshot")), "{r:?}");
        // Precedence: past the tail is said first.
        let r = retention_boundary(at(150), &snap);
        assert!(matches!(r, Err(Error::Conflict(m)) if m.contains("tail")));
    }
}
