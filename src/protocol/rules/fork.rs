//! Whether a stream can be forked where a fork asks (the source's side).

use crate::protocol::error::Error;
use crate::protocol::headers::content_types_match;
use crate::protocol::offset::Offset;

/// What the source's owner knows when a fork asks for it.
pub struct ForkSource<'a> {
    pub soft_deleted: bool,
    /// A snapshot or retention trimmed the data below this.
    pub trim: u64,
    pub content_type: &'a str,
    pub tail: u64,
}

/// The fork's anchor (its `Stream-Fork-Offset`, or the source's tail): 409
/// for a deleted source or another content type, 410 when the source's
/// early data is gone (a fork copies from the start), 400 past the tail.
pub fn check_fork_source(
    src: &ForkSource<'_>,
    content_type: Option<&str>,
    offset: Option<Offset>,
) -> Result<u64, Error> {
    if src.soft_deleted {
        return Err(Error::Conflict("the fork source was deleted".into()));
    }
    if src.trim > 0 {
        return Err(Error::Gone("the fork source's early data was trimmed (by a snapshot or retention)".into()));
    }
    if let Some(ct) = content_type.filter(|ct| !content_types_match(ct, src.content_type)) {
        return Err(Error::Conflict(format!(
            "fork Content-Type {ct:?} differs from the source's {:?}",
            src.content_type
        )));
    }
    let anchor = offset.map_or(src.tail, |o| o.pos);
    if anchor > src.tail {
        return Err(Error::BadRequest("Stream-Fork-Offset is past the source's tail".into()));
    }
    Ok(anchor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_points_and_their_statuses() {
        let src = ForkSource { soft_deleted: false, trim: 0, content_type: "text/plain", tail: 40 };
        assert_eq!(check_fork_source(&src, None, None), Ok(40), "no offset: the tail");
        assert_eq!(check_fork_source(&src, Some("TEXT/PLAIN"), Some(Offset::new(0, 12))), Ok(12));
        assert_eq!(check_fork_source(&src, None, Some(Offset::new(0, 40))), Ok(40));
        assert!(matches!(check_fork_source(&src, None, Some(Offset::new(0, 41))), Err(Error::BadRequest(_))));
        assert!(matches!(check_fork_source(&src, Some("application/json"), None), Err(Error::Conflict(_))));
        let gone = ForkSource { trim: 5, ..src };
        assert!(matches!(check_fork_source(&gone, None, None), Err(Error::Gone(_))));
        let deleted = ForkSource { soft_deleted: true, trim: 5, ..src };
        assert!(matches!(check_fork_source(&deleted, None, None), Err(Error::Conflict(m)) if m.contains("deleted")));
    }
}
