//! Outcomes and errors to responses: the only place that knows which status
//! an answer gets, and where the /ds and /v1 dialects differ ([`DIALECT`],
//! snakream.md's table). How a response goes on the wire is `encode`'s.

pub use super::encode::{plain, Response};
use super::members::Changed;
use crate::limits::RETRY_AFTER_UNAVAILABLE_SECS;
use crate::protocol::members::{MemberOutcome, MemberRole};
use crate::protocol::{
    Bootstrap, Error, Incarnation, Listing, Offset, Outcome, ProducerAck, QuotaKind, ReadOutcome, StreamInfo, Surface,
};
use std::fmt::Write;

/// The answers whose status depends on the surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    /// An append without a producer.
    Append,
    /// A producer's append that wrote data.
    ProducerAppend,
    /// A producer's duplicate, or a producer's append that only closes.
    ProducerNothingNew,
    /// A read at the open tail that found nothing.
    EmptyReadAtOpenTail,
    /// A producer fenced by a newer epoch.
    StaleEpoch,
}

/// The dialect table: (row, status on /ds, status on /v1).
pub const DIALECT: [(Row, u16, u16); 5] = [
    (Row::Append, 200, 204),
    (Row::ProducerAppend, 200, 200),
    (Row::ProducerNothingNew, 200, 204),
    (Row::EmptyReadAtOpenTail, 204, 200),
    (Row::StaleEpoch, 409, 403),
];

/// The status of `row` on `surface`.
pub fn status(surface: Surface, row: Row) -> u16 {
    let (_, ds, v1) = DIALECT.iter().find(|(r, _, _)| *r == row).expect("every row is in the table");
    match surface {
        Surface::Ds => *ds,
        Surface::V1 => *v1,
    }
}

/// `write!` into a byte vector without an intermediate String.
fn out_str(out: &mut Vec<u8>) -> impl std::fmt::Write + '_ {
    struct W<'a>(&'a mut Vec<u8>);
    impl std::fmt::Write for W<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.extend_from_slice(s.as_bytes());
            Ok(())
        }
    }
    W(out)
}

/// Adds `name: value` when there is a value.
fn maybe(r: Response, name: &'static str, value: Option<impl ToString>) -> Response {
    match value {
        Some(v) => r.header(name, v.to_string()),
        None => r,
    }
}

/// Adds `name: true` when `on`.
fn flag(r: Response, name: &'static str, on: bool) -> Response {
    if on {
        r.header(name, "true")
    } else {
        r
    }
}

/// The headers every answer about a stream carries (moves the ETag out of `info`).
fn stream_headers(r: Response, info: &mut StreamInfo) -> Response {
    let r = r.header("Stream-Next-Offset", info.next_offset.to_string()).header("ETag", std::mem::take(&mut info.etag));
    flag(r, "Stream-Closed", info.closed)
}

/// Which creation of its stream an answer is about, for the answers about
/// one stream (every one of them carries `Stream-Incarnation`).
fn incarnation_of(o: &Outcome) -> Option<Incarnation> {
    match o {
        Outcome::Created { info, .. }
        | Outcome::Appended { info, .. }
        | Outcome::Head { info, .. }
        | Outcome::SnapshotPublished { info, .. }
        | Outcome::Snapshot { info, .. }
        | Outcome::Retained { info, .. } => Some(info.incarnation),
        Outcome::Read(rd) => Some(rd.info.incarnation),
        Outcome::Bootstrap(b) => Some(b.info.incarnation),
        Outcome::Deleted { incarnation } | Outcome::SnapshotAt { incarnation, .. } => Some(*incarnation),
        Outcome::BucketCreated
        | Outcome::BucketInfo { .. }
        | Outcome::BucketDeleted
        | Outcome::Listing(_)
        | Outcome::Control { .. }
        | Outcome::Members(_) => None,
    }
}

/// The response to a successful outcome. `location`: absolute URL of the
/// request path, for 201 and 307.
pub fn outcome(surface: Surface, o: Outcome, location: impl FnOnce() -> String) -> Response {
    let incarnation = incarnation_of(&o);
    let r = answer(surface, o, location);
    match incarnation {
        Some(i) => r.header("Stream-Incarnation", i.token()),
        None => r,
    }
}

fn answer(surface: Surface, o: Outcome, location: impl FnOnce() -> String) -> Response {
    match o {
        Outcome::Created { info, new } => created(info, new, location),
        Outcome::Appended { info, producer, duplicate, close_only } => {
            appended(surface, info, producer, duplicate || close_only)
        }
        Outcome::Read(rd) if rd.not_modified => maybe(Response::new(304), "ETag", rd.etag),
        Outcome::Read(rd) if rd.timed_out => long_poll_timeout(rd),
        Outcome::Read(rd) => read(surface, rd),
        Outcome::Head { info, not_modified: true } => Response::new(304).header("ETag", info.etag),
        Outcome::Head { info, .. } => head(info),
        Outcome::SnapshotPublished { info, offset } => Response::new(204)
            .header("Stream-Next-Offset", info.next_offset.to_string())
            .header("ETag", info.etag)
            .header("Stream-Snapshot-Offset", offset.to_string()),
        Outcome::SnapshotAt { offset, .. } => Response::new(307)
            .header("Location", format!("{}/{offset}", location()))
            .header("Stream-Snapshot-Offset", offset.to_string())
            .header("Cache-Control", "no-store"),
        Outcome::Snapshot { info, offset, content_type, body } => {
            let up_to_date = offset == info.next_offset;
            let closed = up_to_date && info.closed;
            snapshot_answer(content_type, info.next_offset, offset.to_string(), up_to_date, closed, body)
        }
        Outcome::Bootstrap(b) => bootstrap(b),
        Outcome::Retained { info, offset, .. } => Response::new(204)
            .header("Stream-Next-Offset", info.next_offset.to_string())
            .header("ETag", info.etag)
            .header("Stream-Retained-Offset", offset.to_string()),
        Outcome::Deleted { .. } | Outcome::BucketDeleted => Response::new(204),
        Outcome::BucketCreated => Response::new(201),
        Outcome::BucketInfo { bucket, streams } => json(bucket_json(&bucket, streams)),
        Outcome::Listing(l) => json(listing_json(&l)).header("Cache-Control", "no-store"),
        Outcome::Control { status, content_type, body } => {
            let mut r = Response::new(status).header("Cache-Control", "no-store");
            if !body.is_empty() {
                r = r.header("Content-Type", content_type);
            }
            r.body = body;
            r
        }
        // One group's answer, as the edge lists it in /_cell/members' answer
        // (which it builds from every group's: `members`).
        Outcome::Members(m) => json(to_json(&GroupJson::from(m))).header("Cache-Control", "no-store"),
    }
}

fn json(body: String) -> Response {
    let mut r = Response::new(200).header("Content-Type", "application/json");
    r.body = body.into_bytes();
    r
}

/// PUT of a stream: 201 with its Location when new, 200 when it existed alike.
fn created(mut info: StreamInfo, new: bool, location: impl FnOnce() -> String) -> Response {
    let mut r = Response::new(if new { 201 } else { 200 }).header("Content-Type", info.content_type.clone());
    if new {
        r = r.header("Location", location());
    }
    stream_headers(r, &mut info)
}

/// POST: the status is the dialect's; a producer's is echoed.
fn appended(surface: Surface, mut info: StreamInfo, producer: Option<ProducerAck>, nothing_new: bool) -> Response {
    let row = match (&producer, nothing_new) {
        (None, _) => Row::Append,
        (Some(_), true) => Row::ProducerNothingNew,
        (Some(_), false) => Row::ProducerAppend,
    };
    let r = stream_headers(Response::new(status(surface, row)), &mut info);
    match producer {
        Some(p) => r.header("Producer-Epoch", p.epoch.to_string()).header("Producer-Seq", p.seq.to_string()),
        None => r,
    }
}

/// A long-poll without data: timeout, or closed at the tail (F58/F59).
fn long_poll_timeout(rd: ReadOutcome) -> Response {
    let r = Response::new(204)
        .header("Stream-Next-Offset", rd.next_offset.to_string())
        .header("Stream-Up-To-Date", "true")
        .header("Cache-Control", "no-store");
    flag(maybe(r, "Stream-Cursor", rd.cursor), "Stream-Closed", rd.closed_at_end)
}

/// A read with its range: 200, or the dialect's status for nothing at an open tail.
fn read(surface: Surface, rd: ReadOutcome) -> Response {
    let at_open_tail = rd.up_to_date && !rd.closed_at_end && rd.next_offset == rd.info.next_offset && !rd.has_data();
    let code = if at_open_tail { status(surface, Row::EmptyReadAtOpenTail) } else { 200 };
    let r = Response::new(code)
        .header("Content-Type", rd.info.content_type.clone())
        .header("Stream-Next-Offset", rd.next_offset.to_string());
    let cache = read_cache(&rd);
    let r = flag(flag(r, "Stream-Up-To-Date", rd.up_to_date), "Stream-Closed", rd.closed_at_end);
    let mut r = maybe(maybe(r, "ETag", rd.etag), "Stream-Cursor", rd.cursor).header("Cache-Control", cache);
    r.body = rd.body;
    r
}

fn read_cache(rd: &ReadOutcome) -> &'static str {
    if rd.offset_now {
        "no-store"
    } else if rd.up_to_date {
        // The tail moves: let caches revalidate with the ETag.
        "no-cache"
    } else {
        // A range strictly before the tail never changes.
        "public, max-age=60, stale-while-revalidate=300"
    }
}

/// HEAD of a stream: its metadata.
fn head(mut info: StreamInfo) -> Response {
    let r = stream_headers(Response::new(200), &mut info)
        .header("Content-Type", info.content_type.clone())
        .header("Cache-Control", "no-store");
    let r = maybe(r, "Stream-TTL", info.ttl_secs);
    let r = maybe(r, "Stream-Expires-At", info.expires_at);
    let r = maybe(r, "Stream-Snapshot-Offset", info.snapshot_offset);
    maybe(r, "Stream-Retained-Offset", info.retained_offset)
}

/// `GET .../bootstrap` as `multipart/mixed` (RFC 2046): the snapshot part
/// (empty without a snapshot), then one part per message.
fn bootstrap(b: Bootstrap) -> Response {
    let parts = || {
        let snap = b.snapshot.as_ref().map_or(&[][..], |s| &s.2[..]);
        std::iter::once(snap).chain(b.messages.iter().map(Vec::as_slice))
    };
    // The boundary must not occur in any part; grow it until it does not.
    let mut boundary =
        format!("ringstream-{}", b.info.etag.trim_matches('"').replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
    while parts().any(|p| p.windows(boundary.len()).any(|w| w == boundary.as_bytes())) {
        boundary.push('x');
    }
    let mut body = Vec::with_capacity(parts().map(|p| p.len() + 96).sum());
    let snapshot_type = b.snapshot.as_ref().map_or("application/octet-stream", |s| s.1.as_str());
    for (i, part) in parts().enumerate() {
        let ct = if i == 0 { snapshot_type } else { b.message_type.as_str() };
        let _ = write!(out_str(&mut body), "--{boundary}\r\nContent-Type: {ct}\r\n\r\n");
        body.extend_from_slice(part);
        body.extend_from_slice(b"\r\n");
    }
    let _ = write!(out_str(&mut body), "--{boundary}--\r\n");
    let snapshot_offset = b.snapshot.as_ref().map_or("-1".to_string(), |s| s.0.to_string());
    let content_type = format!("multipart/mixed; boundary={boundary}");
    snapshot_answer(content_type, b.next_offset, snapshot_offset, b.up_to_date, b.closed_at_end, body)
}

/// The 200 of a snapshot read and of a bootstrap: never cached, since a
/// newer snapshot replaces what they answer.
fn snapshot_answer(
    content_type: String,
    next_offset: Offset,
    snapshot_offset: String,
    up_to_date: bool,
    closed: bool,
    body: Vec<u8>,
) -> Response {
    let mut r = Response::new(200)
        .header("Content-Type", content_type)
        .header("Stream-Next-Offset", next_offset.to_string())
        .header("Stream-Snapshot-Offset", snapshot_offset)
        .header("Cache-Control", "no-store");
    if up_to_date {
        r = r.header("Stream-Up-To-Date", "true");
    }
    if closed {
        r = r.header("Stream-Closed", "true");
    }
    r.body = body;
    r
}

/// The JSON body of `GET /ds/{bucket}/streams` (snakream.md), field for
/// field in this order.
fn listing_json(l: &Listing) -> String {
    #[derive(serde::Serialize)]
    struct Page<'a> {
        bucket_id: &'a str,
        prefix: &'a str,
        stream_count: u64,
        streams: Vec<Entry<'a>>,
        next_cursor: Option<&'a str>,
        has_more: bool,
    }
    #[derive(serde::Serialize)]
    struct Entry<'a> {
        stream_id: &'a str,
        status: &'static str,
        content_type: &'a str,
        tail_offset: String,
        created_at_ms: i64,
        last_write_at_ms: i64,
    }
    let page = Page {
        bucket_id: &l.bucket,
        prefix: &l.prefix,
        stream_count: l.stream_count,
        streams: l
            .streams
            .iter()
            .map(|s| Entry {
                stream_id: &s.stream_id,
                status: if s.closed { "closed" } else { "open" },
                content_type: &s.content_type,
                tail_offset: s.tail_offset.to_string(),
                created_at_ms: s.created_at_ms,
                last_write_at_ms: s.last_write_at_ms,
            })
            .collect(),
        next_cursor: l.next_cursor.as_deref(),
        has_more: l.has_more,
    };
    serde_json::to_string(&page).expect("a listing serializes")
}

/// The JSON body of `GET /ds/{bucket}`.
fn bucket_json(bucket: &str, streams: u64) -> String {
    serde_json::json!({ "bucket_id": bucket, "streams": streams }).to_string()
}

pub fn error(surface: Surface, e: &Error) -> Response {
    match e {
        Error::BadRequest(m) => Response::new(400).text(m),
        Error::NotFound => Response::new(404).text("not found"),
        Error::Gone(m) => Response::new(410).text(m),
        Error::Trimmed { retained, reason } => {
            Response::new(410).header("Stream-Retained-Offset", retained.to_string()).text(reason)
        }
        Error::Conflict(m) => Response::new(409).text(m),
        Error::TooLarge => Response::new(413).text("payload too large"),
        Error::StreamClosed { next_offset } => Response::new(409)
            .header("Stream-Closed", "true")
            .header("Stream-Next-Offset", next_offset.to_string())
            .text("stream is closed"),
        Error::StaleEpoch { current } => Response::new(status(surface, Row::StaleEpoch))
            .header("Producer-Epoch", current.to_string())
            .text(&e.to_string()),
        Error::SeqGap { expected, received } => Response::new(409)
            .header("Producer-Expected-Seq", expected.to_string())
            .header("Producer-Received-Seq", received.to_string())
            .text(&e.to_string()),
        Error::PreconditionFailed | Error::IncarnationMismatch => Response::new(412).text(&e.to_string()),
        Error::Overloaded { retry_after_secs } => {
            Response::new(503).header("Retry-After", retry_after_secs.to_string()).text(&e.to_string())
        }
        Error::Unavailable(m) | Error::Discarded(m) => {
            Response::new(503).header("Retry-After", RETRY_AFTER_UNAVAILABLE_SECS.to_string()).text(m)
        }
        Error::InsufficientStorage(m) => {
            Response::new(507).header("Retry-After", RETRY_AFTER_UNAVAILABLE_SECS.to_string()).text(m)
        }
        Error::QuotaExceeded { quota, bucket, limit, used, requested } => {
            let status = match quota {
                QuotaKind::MaxStreams => 429,
                QuotaKind::MaxBytes => 507,
            };
            let body = QuotaBody {
                error: "quota exceeded",
                quota: quota.name(),
                bucket,
                limit: *limit,
                used: *used,
                requested: *requested,
            };
            let mut r = Response::new(status).header("Content-Type", "application/json");
            r.body = serde_json::to_vec(&body).expect("a quota error serializes");
            r
        }
        Error::ProducerLimit { limit } => {
            let body = serde_json::json!({ "error": "producer_limit", "message": e.to_string(), "limit": limit });
            Response { status: 429, ..json(body.to_string()) }
        }
        Error::Refused { status, code, message, holder } => {
            let mut err = serde_json::json!({ "code": code, "message": message });
            if let Some(h) = holder {
                err["current_holder"] = serde_json::json!(h);
            }
            Response { status: *status, ..json(serde_json::json!({ "error": err }).to_string()) }
        }
    }
}

/// The JSON body of a 429/507 quota refusal, fields in this order.
#[derive(serde::Serialize)]
struct QuotaBody<'a> {
    error: &'static str,
    quota: &'static str,
    bucket: &'a str,
    limit: u64,
    used: u64,
    requested: u64,
}

/// 401: no usable token (RFC 6750's challenge; `error` says which kind).
pub fn unauthenticated(message: &str, error: Option<&str>) -> Response {
    let challenge = match error {
        Some(e) => format!("Bearer realm=\"ringstream\", error=\"{e}\""),
        None => "Bearer realm=\"ringstream\"".to_string(),
    };
    Response::new(401).header("WWW-Authenticate", challenge).text(message)
}

/// 403: the token may see the bucket but not do this in it.
pub fn forbidden(message: &str) -> Response {
    Response::new(403).text(message)
}

/// `/leaderz`: 200 on a node that leads every group (HAProxy's health
/// check passes), 503 elsewhere; the line says why, either way.
pub fn leaderz(leads: bool, why: &str) -> Response {
    Response::new(if leads { 200 } else { 503 }).text(why)
}

/// `/cellz`: the cell's JSON, or 404 (with a JSON error) on a node
/// started without `--cell`.
pub fn cellz(json_body: Option<String>) -> Response {
    let Some(body) = json_body else { return not_in_a_cell("there is no group to show") };
    json(body)
}

/// 404 on a node started without `--cell`, for the cell's endpoints: JSON,
/// `not_in_a_cell`, and why there is nothing to do.
fn not_in_a_cell(what: &str) -> Response {
    let body = serde_json::json!({
        "error": "not_in_a_cell",
        "message": format!("this node is not in a cell (started without --cell): {what}"),
    });
    Response { status: 404, ..json(body.to_string()) }
}

/// One group's answer to a membership change, as JSON.
#[derive(serde::Serialize)]
struct GroupJson {
    group: u32,
    role: &'static str,
    index: u64,
}

impl From<MemberOutcome> for GroupJson {
    fn from(o: MemberOutcome) -> Self {
        GroupJson { group: o.group, role: o.role.name(), index: o.index }
    }
}

fn groups_json(done: &[MemberOutcome]) -> Vec<GroupJson> {
    done.iter().copied().map(GroupJson::from).collect()
}

fn to_json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).expect("plain fields serialize")
}

/// `POST`/`DELETE /_cell/members/{id}`, never cached: 200 with each group's
/// answer (`{"id":N,"groups":[{"group":0,"role":"voter","index":12},...]}`)
/// once every group made the change; 202, the same body, when a group added
/// the node as a learner (its leader makes it a voter once it caught up);
/// 404 (JSON `not_in_a_cell`) without `--cell`; otherwise the status of the
/// first group that failed, its JSON naming that group and listing those
/// before it, which made the change already.
pub fn members(id: u64, changed: Changed) -> Response {
    #[derive(serde::Serialize)]
    struct Body {
        id: u64,
        groups: Vec<GroupJson>,
    }
    let r = match changed.failed {
        None => {
            let learner = changed.done.iter().any(|o| o.role == MemberRole::Learner);
            let body = Body { id, groups: groups_json(&changed.done) };
            Response { status: if learner { 202 } else { 200 }, ..json(to_json(&body)) }
        }
        Some((_, Error::NotFound)) => not_in_a_cell("there are no members to change"),
        Some((group, e)) => group_failed(id, group, &e, &changed.done),
    };
    r.header("Cache-Control", "no-store")
}

/// A membership change that group `group` refused or could not make: that
/// error's status and headers (`Retry-After` on a 503), and a JSON body
/// saying which group failed, why, and which groups made the change already
/// (the change is idempotent: sent again, it finishes).
fn group_failed(id: u64, group: u32, e: &Error, done: &[MemberOutcome]) -> Response {
    #[derive(serde::Serialize)]
    struct Body {
        error: &'static str,
        message: String,
        id: u64,
        group: u32,
        groups: Vec<GroupJson>,
    }
    let reason = match e {
        Error::Unavailable(m) | Error::Discarded(m) | Error::BadRequest(m) | Error::Conflict(m) => m.clone(),
        Error::Refused { message, .. } => message.clone(),
        _ => e.to_string(),
    };
    let before = match group {
        0 => "no group has made it".to_string(),
        1 => "group 0 has made it already".to_string(),
        n => format!("groups 0 to {} have made it already", n - 1),
    };
    let message = format!(
        "group {group} did not make the change: {reason}; {before}. The change is idempotent: send the request \
         again to make it in every group"
    );
    let body = Body { error: "group_failed", message, id, group, groups: groups_json(done) };
    let mut r = error(Surface::V1, e);
    r.headers.retain(|(name, _)| *name != "Content-Type");
    r.body = to_json(&body).into_bytes();
    r.header("Content-Type", "application/json")
}

pub fn preflight() -> Response {
    Response::new(204)
        .header("Access-Control-Allow-Methods", "GET, HEAD, PUT, POST, DELETE, OPTIONS")
        .header("Access-Control-Allow-Headers", "*, Authorization, Content-Type, If-Match, If-None-Match, Stream-Closed, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset, Stream-Incarnation, Producer-Id, Producer-Epoch, Producer-Seq")
        .header("Access-Control-Max-Age", "86400")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ListedStream;

    #[test]
    fn leaderz_and_cellz_answers() {
        let r = leaderz(true, "single node: it takes every write");
        assert_eq!((r.status, &r.body[..]), (200, &b"single node: it takes every write\n"[..]));
        assert_eq!(leaderz(false, "node 2: leads 0 of 1 groups").status, 503);
        let r = cellz(Some("{\"node\":1}".into()));
        assert_eq!((r.status, &r.body[..]), (200, &b"{\"node\":1}"[..]));
        assert!(r.headers.contains(&("Content-Type", "application/json".into())));
        let r = cellz(None);
        assert_eq!(r.status, 404);
        assert!(r.headers.contains(&("Content-Type", "application/json".into())));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"], "not_in_a_cell");
    }

    fn member(group: u32, role: MemberRole) -> MemberOutcome {
        MemberOutcome { group, role, index: 12 + u64::from(group) }
    }

    fn body_of(r: &Response) -> serde_json::Value {
        assert!(r.headers.contains(&("Content-Type", "application/json".into())), "{:?}", r.headers);
        assert!(r.headers.contains(&("Cache-Control", "no-store".into())), "{:?}", r.headers);
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn members_answers_200_once_every_group_made_the_change_and_202_while_a_learner_catches_up() {
        let done = vec![member(0, MemberRole::Voter), member(1, MemberRole::Voter)];
        let r = members(4, Changed { done, failed: None });
        assert_eq!(r.status, 200);
        let want = r#"{"id":4,"groups":[{"group":0,"role":"voter","index":12},{"group":1,"role":"voter","index":13}]}"#;
        assert_eq!(String::from_utf8(r.body.clone()).unwrap(), want);
        body_of(&r);
        let r = members(4, Changed { done: vec![member(0, MemberRole::Gone)], failed: None });
        assert_eq!((r.status, body_of(&r)["groups"][0]["role"].as_str()), (200, Some("gone")));
        let done = vec![member(0, MemberRole::Voter), member(1, MemberRole::Learner)];
        let r = members(4, Changed { done, failed: None });
        assert_eq!((r.status, body_of(&r)["groups"][1]["role"].as_str()), (202, Some("learner")));
    }

    #[test]
    fn members_names_the_group_that_failed_and_those_that_made_the_change() {
        let done = vec![member(0, MemberRole::Voter), member(1, MemberRole::Voter)];
        let r = members(4, Changed { done, failed: Some((2, Error::Unavailable("no leader known".into()))) });
        assert_eq!(r.status, 503);
        assert!(r.headers.iter().any(|(k, _)| *k == "Retry-After"), "{:?}", r.headers);
        assert_eq!(r.headers.iter().filter(|(k, _)| *k == "Content-Type").count(), 1);
        let v = body_of(&r);
        assert_eq!(
            (v["error"].as_str(), v["id"].as_u64(), v["group"].as_u64()),
            (Some("group_failed"), Some(4), Some(2))
        );
        assert_eq!(v["groups"].as_array().map(Vec::len), Some(2));
        let message = v["message"].as_str().unwrap();
        assert!(message.contains("group 2") && message.contains("no leader known"), "{message}");
        assert!(message.contains("groups 0 to 1 have made it") && message.contains("idempotent"), "{message}");
        let r = members(4, Changed { done: vec![], failed: Some((0, Error::Conflict("another address".into()))) });
        assert_eq!(r.status, 409);
        assert!(body_of(&r)["message"].as_str().unwrap().contains("no group has made it"));
    }

    #[test]
    fn members_outside_a_cell_is_the_404_of_cellz() {
        let r = members(4, Changed { done: vec![], failed: Some((0, Error::NotFound)) });
        assert_eq!((r.status, body_of(&r)["error"].as_str()), (404, Some("not_in_a_cell")));
        let one = outcome(Surface::V1, Outcome::Members(member(3, MemberRole::Learner)), String::new);
        assert_eq!((one.status, &one.body[..]), (200, &br#"{"group":3,"role":"learner","index":15}"#[..]));
    }

    fn info() -> StreamInfo {
        StreamInfo {
            incarnation: Incarnation::new(0x2a, 1),
            content_type: "text/plain".into(),
            next_offset: Offset::new(0, 5),
            closed: false,
            etag: "\"e\"".into(),
            ttl_secs: None,
            expires_at: None,
            snapshot_offset: None,
            retained_offset: None,
        }
    }

    fn append_status(surface: Surface, producer: bool, duplicate: bool, close_only: bool) -> u16 {
        let producer = producer.then_some(ProducerAck { epoch: 1, seq: 2 });
        let o = Outcome::Appended { info: info(), producer, duplicate, close_only };
        outcome(surface, o, String::new).status
    }

    fn read_at(next: Offset, body: &[u8]) -> ReadOutcome {
        ReadOutcome {
            info: info(),
            body: body.to_vec(),
            next_offset: next,
            up_to_date: true,
            closed_at_end: false,
            etag: None,
            not_modified: false,
            offset_now: false,
            cursor: None,
            timed_out: false,
        }
    }

    #[test]
    fn every_row_of_the_dialect_table_is_answered_as_listed() {
        use Surface::{Ds, V1};
        for surface in [Ds, V1] {
            let want = |row| status(surface, row);
            assert_eq!(append_status(surface, false, false, false), want(Row::Append));
            assert_eq!(append_status(surface, true, false, false), want(Row::ProducerAppend));
            assert_eq!(append_status(surface, true, true, false), want(Row::ProducerNothingNew));
            assert_eq!(append_status(surface, true, false, true), want(Row::ProducerNothingNew));
            let empty = outcome(surface, Outcome::Read(read_at(Offset::new(0, 5), b"")), String::new);
            assert_eq!(empty.status, want(Row::EmptyReadAtOpenTail));
            assert_eq!(error(surface, &Error::StaleEpoch { current: 3 }).status, want(Row::StaleEpoch));
        }
        // The table itself, as snakream.md gives it.
        assert_eq!([Ds, V1].map(|s| status(s, Row::Append)), [200, 204]);
        assert_eq!([Ds, V1].map(|s| status(s, Row::ProducerAppend)), [200, 200]);
        assert_eq!([Ds, V1].map(|s| status(s, Row::ProducerNothingNew)), [200, 204]);
        assert_eq!([Ds, V1].map(|s| status(s, Row::EmptyReadAtOpenTail)), [204, 200]);
        assert_eq!([Ds, V1].map(|s| status(s, Row::StaleEpoch)), [409, 403]);
    }

    #[test]
    fn reads_with_data_or_before_the_tail_are_200_on_both_surfaces() {
        for surface in [Surface::Ds, Surface::V1] {
            let data = outcome(surface, Outcome::Read(read_at(Offset::new(0, 5), b"x")), String::new);
            assert_eq!(data.status, 200);
            assert_eq!(data.body, b"x");
            let behind = outcome(surface, Outcome::Read(read_at(Offset::new(0, 3), b"")), String::new);
            assert_eq!(behind.status, 200);
        }
    }

    #[test]
    fn errors_map_to_the_same_status_on_both_surfaces_but_stale_epochs() {
        let quota = |quota| Error::QuotaExceeded { quota, bucket: "b".into(), limit: 1, used: 1, requested: 1 };
        for (e, want) in [
            (Error::BadRequest("x".into()), 400),
            (Error::NotFound, 404),
            (Error::Gone("x".into()), 410),
            (Error::Trimmed { retained: Offset::new(0, 7), reason: "x".into() }, 410),
            (Error::Conflict("x".into()), 409),
            (Error::TooLarge, 413),
            (Error::StreamClosed { next_offset: Offset::new(0, 1) }, 409),
            (Error::SeqGap { expected: 2, received: 4 }, 409),
            (Error::PreconditionFailed, 412),
            (Error::IncarnationMismatch, 412),
            (Error::Overloaded { retry_after_secs: 1 }, 503),
            (Error::Unavailable("x".into()), 503),
            (Error::Discarded("x".into()), 503),
            (Error::InsufficientStorage("x".into()), 507),
            (quota(QuotaKind::MaxStreams), 429),
            (quota(QuotaKind::MaxBytes), 507),
            (Error::ProducerLimit { limit: 3 }, 429),
        ] {
            assert_eq!(error(Surface::Ds, &e).status, want, "{e:?}");
            assert_eq!(error(Surface::V1, &e).status, want, "{e:?}");
        }
    }

    #[test]
    fn a_producer_limit_is_a_json_429_naming_the_limit() {
        for surface in [Surface::Ds, Surface::V1] {
            let r = error(surface, &Error::ProducerLimit { limit: 4_096 });
            assert_eq!(r.status, 429);
            assert!(r.headers.contains(&("Content-Type", "application/json".into())), "{:?}", r.headers);
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!((v["error"].as_str(), v["limit"].as_u64()), (Some("producer_limit"), Some(4_096)));
            assert!(v["message"].as_str().unwrap().contains("4096 producers"), "{v}");
        }
    }

    #[test]
    fn every_answer_about_a_stream_names_its_creation_and_bucket_answers_do_not() {
        let i = info().incarnation;
        let about_a_stream = [
            Outcome::Created { info: info(), new: true },
            Outcome::Appended { info: info(), producer: None, duplicate: true, close_only: false },
            Outcome::Read(read_at(Offset::new(0, 5), b"x")),
            Outcome::Head { info: info(), not_modified: false },
            Outcome::Head { info: info(), not_modified: true },
            Outcome::Deleted { incarnation: i },
            Outcome::SnapshotPublished { info: info(), offset: Offset::new(0, 5) },
            Outcome::SnapshotAt { incarnation: i, offset: Offset::new(0, 5) },
            Outcome::Retained { info: info(), offset: Offset::new(0, 3), moved: true },
        ];
        for o in about_a_stream {
            let what = format!("{o:?}");
            let r = outcome(Surface::V1, o, || "http://h/v1/stream/s".into());
            let sent: Vec<_> = r.headers.iter().filter(|(k, _)| *k == "Stream-Incarnation").collect();
            assert_eq!(sent, [&("Stream-Incarnation", i.to_string())], "{what}");
        }
        for o in
            [Outcome::BucketCreated, Outcome::BucketDeleted, Outcome::BucketInfo { bucket: "b".into(), streams: 1 }]
        {
            let r = outcome(Surface::Ds, o, String::new);
            assert!(r.headers.iter().all(|(k, _)| *k != "Stream-Incarnation"));
        }
        assert!(error(Surface::V1, &Error::IncarnationMismatch)
            .headers
            .iter()
            .all(|(k, _)| *k != "Stream-Incarnation"));
    }

    #[test]
    fn the_retained_start_is_named_by_retention_head_and_410() {
        let r = outcome(
            Surface::Ds,
            Outcome::Retained { info: info(), offset: Offset::new(0, 3), moved: false },
            String::new,
        );
        assert_eq!(r.status, 204);
        let retained = ("Stream-Retained-Offset", Offset::new(0, 3).to_string());
        assert!(r.headers.contains(&retained));
        let head = |info| outcome(Surface::Ds, Outcome::Head { info, not_modified: false }, String::new);
        assert!(head(info()).headers.iter().all(|(k, _)| *k != "Stream-Retained-Offset"), "nothing trimmed");
        let trimmed = StreamInfo { retained_offset: Some(Offset::new(0, 3)), ..info() };
        assert!(head(trimmed).headers.contains(&retained));
        let gone = error(Surface::V1, &Error::Trimmed { retained: Offset::new(0, 3), reason: "x".into() });
        assert_eq!(gone.status, 410);
        assert!(gone.headers.contains(&retained));
    }

    #[test]
    fn long_polls_without_data_and_revalidations() {
        let mut rd = read_at(Offset::new(0, 5), b"");
        rd.timed_out = true;
        rd.closed_at_end = true;
        let r = outcome(Surface::V1, Outcome::Read(rd), String::new);
        assert_eq!(r.status, 204);
        assert!(r.headers.contains(&("Stream-Closed", "true".into())));
        let mut rd = read_at(Offset::new(0, 5), b"x");
        rd.not_modified = true;
        rd.etag = Some("\"e\"".into());
        let r = outcome(Surface::Ds, Outcome::Read(rd), String::new);
        assert_eq!((r.status, r.headers.len()), (304, 2));
        assert!(r.headers.contains(&("Stream-Incarnation", info().incarnation.to_string())));
        let r = outcome(Surface::Ds, Outcome::Created { info: info(), new: true }, || "http://h/ds/b/s".into());
        assert_eq!(r.status, 201);
        assert!(r.headers.contains(&("Location", "http://h/ds/b/s".into())));
    }

    #[test]
    fn listing_and_bucket_bodies_are_json_with_escapes() {
        let l = Listing {
            bucket: "b\"1".into(),
            prefix: "".into(),
            stream_count: 1,
            streams: vec![ListedStream {
                stream_id: "a\\b\n".into(),
                closed: true,
                content_type: "text/plain".into(),
                tail_offset: Offset::new(0, 5),
                created_at_ms: 1,
                last_write_at_ms: 2,
            }],
            next_cursor: None,
            has_more: false,
        };
        let text = listing_json(&l);
        assert!(text.starts_with("{\"bucket_id\":\"b\\\"1\",\"prefix\":\"\",\"stream_count\":1,"), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["streams"][0]["stream_id"], "a\\b\n");
        assert_eq!(v["streams"][0]["status"], "closed");
        assert_eq!(v["streams"][0]["tail_offset"], Offset::new(0, 5).to_string());
        assert!(v["next_cursor"].is_null() && v["has_more"] == false);
        assert_eq!(bucket_json("x\"y", 3), "{\"bucket_id\":\"x\\\"y\",\"streams\":3}");
    }
}
