//! Where a snapshot may be published: at a message boundary of the data the
//! stream still holds, not past its tail, not older than its newest snapshot.

use crate::protocol::error::Error;
use crate::protocol::offset::Offset;

/// What the shard knows about a stream when a snapshot is published.
pub struct SnapshotTarget {
    pub tail: u64,
    /// Data below this was trimmed by an earlier snapshot.
    pub trim: u64,
    /// The newest snapshot's offset, if any.
    pub newest: Option<u64>,
    /// The offset is where a message starts (or the tail, or the trim point).
    pub at_boundary: bool,
}

/// 409 past the tail or older than the newest snapshot, 410 below the
/// retained data, 400 inside a message; in that order.
pub fn check_snapshot_offset(offset: Offset, t: &SnapshotTarget) -> Result<(), Error> {
    if offset.pos > t.tail {
        return Err(Error::Conflict(format!(
            "snapshot offset {offset} is past the stream's tail {}",
            Offset::new(0, t.tail)
        )));
    }
    if let Some(newest) = t.newest.filter(|&n| offset.pos < n) {
        return Err(Error::Conflict(format!("a newer snapshot exists at {}", Offset::new(0, newest))));
    }
    if offset.pos < t.trim {
        return Err(Error::Gone("the snapshot offset is below the stream's retained data".into()));
    }
    if !t.at_boundary {
        return Err(Error::BadRequest("the snapshot offset is not a message boundary of the stream".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pos: u64) -> Offset {
        Offset::new(0, pos)
    }

    #[test]
    fn publish_points_and_their_statuses() {
        let t = SnapshotTarget { tail: 100, trim: 20, newest: Some(20), at_boundary: true };
        assert_eq!(check_snapshot_offset(at(50), &t), Ok(()));
        assert_eq!(check_snapshot_offset(at(100), &t), Ok(()), "the tail is a boundary");
        assert_eq!(check_snapshot_offset(at(20), &t), Ok(()), "republishing the newest is allowed");
        assert!(
            matches!(check_snapshot_offset(at(101), &t), Err(Error::Conflict(m)) if m.contains("past the stream's tail"))
        );
        let newer = SnapshotTarget { newest: Some(60), ..t };
        assert!(
            matches!(check_snapshot_offset(at(50), &newer), Err(Error::Conflict(m)) if m.contains("newer snapshot"))
        );
        let no_snap = SnapshotTarget { tail: 100, trim: 20, newest: None, at_boundary: true };
        assert!(matches!(check_snapshot_offset(at(10), &no_snap), Err(Error::Gone(_))));
        let inside = SnapshotTarget { at_boundary: false, ..no_snap };
        assert!(matches!(check_snapshot_offset(at(50), &inside), Err(Error::BadRequest(_))));
        // Precedence: past the tail before the inside-a-message check.
        assert!(matches!(check_snapshot_offset(at(150), &inside), Err(Error::Conflict(_))));
    }
}
