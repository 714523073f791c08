//! `Stream-Incarnation` sent with a request: a precondition on which
//! creation of its path the stream is, checked before anything is written.

use crate::protocol::{Error, Incarnation};

/// Whether a request that sent `want` may go on against the stream at its
/// path, whose creation is `have` (None: no stream there). `creates`: the
/// request would create a stream where there is none (a PUT).
///
/// - No header: always.
/// - The same creation: yes.
/// - Another creation (the one the client knew was deleted and the path
///   created again): 412.
/// - No stream: a PUT answers 412 as it does for `If-Match` (RFC 9110
///   13.1.1: a condition on a representation that does not exist fails),
///   so a conditional PUT never creates. Any other request answers 404, as
///   it does with `If-Match` or without either: "not found" already tells
///   the client that the creation it knew is gone.
pub fn check_incarnation(want: Option<Incarnation>, have: Option<Incarnation>, creates: bool) -> Result<(), Error> {
    match (want, have) {
        (None, _) => Ok(()),
        (Some(w), Some(h)) if w == h => Ok(()),
        (Some(_), Some(_)) => Err(Error::IncarnationMismatch),
        (Some(_), None) if creates => Err(Error::IncarnationMismatch),
        (Some(_), None) => Err(Error::NotFound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_creation_passes() {
        let (first, second) = (Incarnation::new(40, 1), Incarnation::new(41, 2));
        for creates in [false, true] {
            assert_eq!(check_incarnation(None, Some(first), creates), Ok(()));
            assert_eq!(check_incarnation(None, None, creates), Ok(()));
            assert_eq!(check_incarnation(Some(first), Some(first), creates), Ok(()));
            assert_eq!(check_incarnation(Some(first), Some(second), creates), Err(Error::IncarnationMismatch));
        }
    }

    #[test]
    fn a_missing_stream_fails_a_put_and_is_not_found_otherwise() {
        let gone = Some(Incarnation::new(40, 1));
        assert_eq!(check_incarnation(gone, None, true), Err(Error::IncarnationMismatch));
        assert_eq!(check_incarnation(gone, None, false), Err(Error::NotFound));
    }

    #[test]
    fn the_same_uid_with_another_number_is_another_creation() {
        let want = Some(Incarnation::new(40, 1));
        assert_eq!(check_incarnation(want, Some(Incarnation::new(40, 2)), false), Err(Error::IncarnationMismatch));
        assert_eq!(check_incarnation(want, Some(Incarnation::new(41, 1)), false), Err(Error::IncarnationMismatch));
    }
}
