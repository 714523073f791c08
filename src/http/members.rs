//! `POST`/`DELETE /_cell/members/{id}` at the edge: the request as routed,
//! the change it asks for (its body checked), and the run of that change
//! through every group, one group after the other, each made by its
//! group's leader (`ShardRequest::Members`), a group that answers 503
//! asked again until a deadline. No I/O of its own: the connection loop
//! hands it the way to run one group's change and the way to wait.

use crate::limits::{CELL_MEMBERS_DEADLINE_MS, CELL_MEMBERS_RETRY_MS};
use crate::protocol::members::{MemberChange, MemberOutcome};
use crate::protocol::{Error, Outcome};
use std::future::Future;
use std::time::Duration;

/// Longest host in a peer address, bytes (a DNS name's, RFC 1035).
const HOST_BYTES_MAX: usize = 253;

/// A membership request as routed: the node it is about, and what to do.
#[derive(Debug, PartialEq, Eq)]
pub struct MembersReq {
    /// The node's Raft id (positive).
    pub id: u64,
    /// Add it or remove it.
    pub op: MembersOp,
}

/// What a membership request does with its node.
#[derive(Debug, PartialEq, Eq)]
pub enum MembersOp {
    /// `POST`: add the node; `body` (`{"peer": "HOST:PORT"}`) is put in
    /// once read, after routing.
    Add { body: Vec<u8> },
    /// `DELETE`: remove the node (a body is ignored).
    Remove,
}

impl MembersReq {
    /// Puts the request's body in (only an add has a use for one).
    pub fn set_body(&mut self, body: Vec<u8>) {
        if let MembersOp::Add { body: b } = &mut self.op {
            *b = body;
        }
    }
}

/// The body of an add.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AddBody {
    peer: String,
}

fn bad(msg: String) -> Error {
    Error::BadRequest(msg)
}

/// The change `req` asks for, in a node of `groups` groups; 400 for an add
/// whose body is not `{"peer": "HOST:PORT"}` with a port from which each
/// of the added node's peer ports (PORT to PORT + groups - 1) is a port.
pub fn change(req: MembersReq, groups: usize) -> Result<MemberChange, Error> {
    let id = req.id;
    let MembersOp::Add { body } = req.op else { return Ok(MemberChange::Remove { id }) };
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(bad("an add needs a body: {\"peer\": \"HOST:PORT\"} (the node's own --cell entry)".into()));
    }
    let peer = serde_json::from_slice::<AddBody>(&body)
        .map_err(|e| bad(format!("the body must be {{\"peer\": \"HOST:PORT\"}} (the node's own --cell entry): {e}")))?
        .peer;
    check_peer(&peer, groups)?;
    Ok(MemberChange::Add { id, peer })
}

/// `HOST:PORT`: a host name, an IPv4 address or a bracketed IPv6 address,
/// and a port from 1 to 65535 that leaves room for one port per group.
fn check_peer(peer: &str, groups: usize) -> Result<(), Error> {
    if peer.len() > HOST_BYTES_MAX + 6 {
        return Err(bad(format!("peer is {} bytes long: HOST:PORT is at most {}", peer.len(), HOST_BYTES_MAX + 6)));
    }
    let shape = || {
        bad(format!(
            "peer {peer:?} is not HOST:PORT (a host name, an IPv4 address or a bracketed IPv6 address, and a port \
             from 1 to 65535)"
        ))
    };
    let (host, port) = peer.rsplit_once(':').ok_or_else(shape)?;
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    let port = port.parse::<u16>().ok().filter(|&p| digits && p != 0).ok_or_else(shape)?;
    if !host_ok(host) {
        return Err(shape());
    }
    let last = u64::from(port) + groups.saturating_sub(1) as u64;
    if last > u64::from(u16::MAX) {
        return Err(bad(format!(
            "peer {peer:?}: with {groups} groups the node's replicas would listen on ports {port} to {last}, but a \
             port is 1 to 65535"
        )));
    }
    Ok(())
}

fn host_ok(host: &str) -> bool {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host.len() <= HOST_BYTES_MAX
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// One group's answer as a membership outcome (any other outcome is a
/// 500: a shard that does not know the request).
pub fn outcome_of(group: u32, reply: Result<Outcome, Error>) -> Result<MemberOutcome, Error> {
    match reply? {
        Outcome::Members(o) => Ok(o),
        other => Err(Error::Refused {
            status: 500,
            code: "UNEXPECTED_ANSWER".into(),
            message: format!("group {group} answered a membership change with {other:?}"),
            holder: None,
        }),
    }
}

/// Whether a group's answer is worth asking again: a 503 (no leader yet, a
/// hand-over under way, a leader too busy).
pub fn retryable(e: &Error) -> bool {
    matches!(e, Error::Unavailable(_) | Error::Discarded(_) | Error::Overloaded { .. })
}

/// What running a change in every group came to: the outcome of each group
/// that made it, in group order, and the group that failed with its error,
/// if one did (the groups after it were not asked).
#[derive(Debug)]
pub struct Changed {
    /// The groups that made the change, from group 0 on.
    pub done: Vec<MemberOutcome>,
    /// The first group that did not, and why.
    pub failed: Option<(u32, Error)>,
}

/// Makes a change in groups 0 to `groups` - 1, in order, one at a time:
/// `run(g)` makes it in group g. A group that answers 503 ([`retryable`])
/// is asked again after `CELL_MEMBERS_RETRY_MS` (waited with `sleep`)
/// while `elapsed()`, the time since the request began, leaves room
/// before `CELL_MEMBERS_DEADLINE_MS`; any other error ends the run at once.
pub async fn in_every_group<R, RF, S, SF>(
    groups: u32,
    mut run: R,
    mut sleep: S,
    elapsed: impl Fn() -> Duration,
) -> Changed
where
    R: FnMut(u32) -> RF,
    RF: Future<Output = Result<MemberOutcome, Error>>,
    S: FnMut(Duration) -> SF,
    SF: Future<Output = ()>,
{
    let deadline = Duration::from_millis(CELL_MEMBERS_DEADLINE_MS);
    let pause = Duration::from_millis(CELL_MEMBERS_RETRY_MS);
    let mut done = Vec::new();
    for group in 0..groups {
        loop {
            match run(group).await {
                Ok(o) => break done.push(o),
                Err(e) if retryable(&e) && elapsed() + pause < deadline => sleep(pause).await,
                Err(e) => return Changed { done, failed: Some((group, e)) },
            }
        }
    }
    Changed { done, failed: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::members::MemberRole;
    use std::cell::{Cell, RefCell};

    fn add(body: &str, groups: usize) -> Result<MemberChange, Error> {
        change(MembersReq { id: 4, op: MembersOp::Add { body: body.as_bytes().to_vec() } }, groups)
    }

    #[test]
    fn an_add_names_its_peer_and_a_removal_needs_nothing() {
        let want = |peer: &str| Ok(MemberChange::Add { id: 4, peer: peer.into() });
        for peer in ["10.0.0.4:7001", "n4.cell.example:7001", "[::1]:7001", "my_host:1"] {
            assert_eq!(add(&format!("{{\"peer\": \"{peer}\"}}"), 2), want(peer), "{peer}");
        }
        assert_eq!(add("{\"peer\":\"h:65534\"}", 2), want("h:65534"));
        let remove = MembersReq { id: 4, op: MembersOp::Remove };
        assert_eq!(change(remove, 2), Ok(MemberChange::Remove { id: 4 }));
    }

    #[test]
    fn a_body_that_is_not_a_peer_is_a_bad_request() {
        for body in [
            "",
            " \n",
            "peer=h:1",
            "{}",
            "{\"peer\": 7001}",
            "{\"peer\": \"h:1\", \"role\": \"voter\"}",
            "{\"peer\": \"h\"}",
            "{\"peer\": \"h:\"}",
            "{\"peer\": \":7001\"}",
            "{\"peer\": \"h:0\"}",
            "{\"peer\": \"h:65536\"}",
            "{\"peer\": \"h:+80\"}",
            "{\"peer\": \"h/x:80\"}",
            "{\"peer\": \"h x:80\"}",
            "{\"peer\": \"::1:80\"}",
            "{\"peer\": \"[nope]:80\"}",
            "{\"peer\": \"http://h:80\"}",
        ] {
            assert!(matches!(add(body, 1), Err(Error::BadRequest(_))), "{body:?}");
        }
        let long = format!("{{\"peer\": \"{}:80\"}}", "a".repeat(HOST_BYTES_MAX + 10));
        assert!(matches!(add(&long, 1), Err(Error::BadRequest(m)) if m.contains("bytes long")));
        let longest = format!("{{\"peer\": \"{}:80\"}}", "a".repeat(HOST_BYTES_MAX));
        assert!(add(&longest, 1).is_ok());
        let longer = format!("{{\"peer\": \"{}:80\"}}", "a".repeat(HOST_BYTES_MAX + 1));
        assert!(matches!(add(&longer, 1), Err(Error::BadRequest(_))));
        // Group i listens at PORT + i: the last group's port must be one too.
        let Err(Error::BadRequest(m)) = add("{\"peer\": \"h:65535\"}", 2) else { panic!() };
        assert!(m.contains("ports 65535 to 65536"), "{m}");
    }

    fn outcome(group: u32) -> MemberOutcome {
        MemberOutcome { group, role: MemberRole::Voter, index: 10 + u64::from(group) }
    }

    /// Runs `in_every_group` over `answers` (each group's, in the order
    /// asked) with a clock that only the sleeps move; also says how often
    /// each group was asked and how long was slept.
    fn run_with(groups: u32, answers: Vec<Result<MemberOutcome, Error>>) -> (Changed, Vec<u32>, Duration) {
        let answers = RefCell::new(answers.into_iter());
        let asked = RefCell::new(Vec::new());
        let clock = Cell::new(Duration::ZERO);
        let run = |g| {
            asked.borrow_mut().push(g);
            let answer = answers.borrow_mut().next().unwrap_or(Err(Error::Unavailable("no leader".into())));
            async move { answer }
        };
        let sleep = |d| {
            clock.set(clock.get() + d);
            async {}
        };
        let changed = futures_lite::future::block_on(in_every_group(groups, run, sleep, || clock.get()));
        (changed, asked.into_inner(), clock.get())
    }

    #[test]
    fn a_group_that_answers_503_is_asked_again_then_the_next_group() {
        let answers = vec![
            Ok(outcome(0)),
            Err(Error::Unavailable("no leader".into())),
            Err(Error::Discarded("hand-over".into())),
            Err(Error::Overloaded { retry_after_secs: 1 }),
            Ok(outcome(1)),
            Ok(outcome(2)),
        ];
        let (changed, asked, slept) = run_with(3, answers);
        assert_eq!(changed.done, [outcome(0), outcome(1), outcome(2)]);
        assert!(changed.failed.is_none());
        assert_eq!(asked, [0, 1, 1, 1, 1, 2]);
        assert_eq!(slept, Duration::from_millis(3 * CELL_MEMBERS_RETRY_MS));
    }

    #[test]
    fn a_group_still_503_at_the_deadline_fails_and_the_groups_after_it_are_not_asked() {
        let (changed, asked, slept) = run_with(3, vec![Ok(outcome(0))]);
        assert_eq!(changed.done, [outcome(0)]);
        assert!(matches!(changed.failed, Some((1, Error::Unavailable(_)))), "{:?}", changed.failed);
        assert!(!asked.contains(&2));
        assert!(slept < Duration::from_millis(CELL_MEMBERS_DEADLINE_MS), "{slept:?}");
        assert!(
            slept + Duration::from_millis(2 * CELL_MEMBERS_RETRY_MS) >= Duration::from_millis(CELL_MEMBERS_DEADLINE_MS)
        );
    }

    #[test]
    fn any_other_error_ends_the_run_at_once() {
        let (changed, asked, slept) = run_with(2, vec![Err(Error::NotFound)]);
        assert!(changed.done.is_empty());
        assert!(matches!(changed.failed, Some((0, Error::NotFound))));
        assert_eq!((asked, slept), (vec![0], Duration::ZERO));
        let conflict = Err(Error::Conflict("node 4 is at another address".into()));
        let (changed, asked, _) = run_with(2, vec![Ok(outcome(0)), conflict]);
        assert!(matches!(changed.failed, Some((1, Error::Conflict(_)))));
        assert_eq!(asked, [0, 1]);
    }

    #[test]
    fn only_a_membership_outcome_is_one() {
        assert_eq!(outcome_of(1, Ok(Outcome::Members(outcome(1)))), Ok(outcome(1)));
        assert_eq!(outcome_of(1, Err(Error::NotFound)), Err(Error::NotFound));
        assert!(matches!(outcome_of(1, Ok(Outcome::BucketDeleted)), Err(Error::Refused { status: 500, .. })));
    }
}
