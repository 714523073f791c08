//! Classifies a parsed request, once: method + path + query + headers ->
//! [`Class`] (its metrics label, its surface, its live mode, and where it
//! goes: a typed shard request, an SSE session, a change of the cell's
//! members, or an answer the edge gives itself). No I/O, and no storage.

use super::members::{MembersOp, MembersReq};
use super::parse::{Method, RequestHead};
use crate::limits::BUCKET_LIST_LIMIT_MAX;
use crate::metrics::RouteLabel;
use crate::protocol::headers::parse_sub_offset;
use crate::protocol::headers::{parse_lifetime, parse_producer, parse_stream_seq, stream_closed_requested};
use crate::protocol::names::{split_v1_path, validate_bucket_id, validate_ds_stream_id};
use crate::protocol::offset::{parse_offset, parse_read_from, ReadFrom};
use crate::protocol::subs::{validate_id as validate_sub_id, Root, SubOp, SubRequest};
use crate::protocol::ForkReq;
use crate::protocol::{
    AppendReq, BucketOp, CreateReq, Error, Incarnation, ListReq, Live, ReadReq, SnapshotReq, StreamKey, StreamOp,
    Surface,
};
use crate::shard::message::ShardRequest;

/// Everything the edge decides about a request from its head, decided in
/// one step ([`classify`]) and carried through the connection loop.
#[derive(Debug)]
pub struct Class {
    /// The `route` label it is counted under in /metrics.
    pub label: RouteLabel,
    /// Which status dialect answers it (errors included).
    pub surface: Surface,
    /// A read's live mode (`Live::No` for anything else).
    pub live: Live,
    /// Where it goes, or why it goes nowhere.
    pub route: Result<Route, RouteError>,
}

/// Classifies a request from its head (the body comes later, see [`set_body`]).
pub fn classify(head: &RequestHead) -> Class {
    let (label, surface) = place(&head.path);
    let route = route(head, Vec::new());
    let live = match &route {
        Ok(Route::Sse(_)) => Live::Sse,
        Ok(Route::Shard(req)) => match &**req {
            ShardRequest::Stream { op: StreamOp::Read(r), .. } => r.live,
            _ => Live::No,
        },
        _ => Live::No,
    };
    Class { label, surface, live, route }
}

/// An SSE read: the connection runs an SSE session for it.
#[derive(Debug)]
pub struct SseRead {
    pub key: StreamKey,
    pub surface: Surface,
    /// `Stream-Incarnation` as sent: the session's first read checks it.
    pub if_incarnation: Option<Incarnation>,
    pub read: ReadReq,
}

#[derive(Debug)]
pub enum Route {
    /// Run on the owning shard, one answer.
    Shard(Box<ShardRequest>),
    /// `live=sse`: a session of reads on the owning shard.
    Sse(Box<SseRead>),
    /// Answered by the edge itself, no shard.
    Edge(Fixed),
    /// `POST`/`DELETE /_cell/members/{id}`: a change of the cell's members,
    /// run by the edge in every group in turn (`http::members`).
    Members(MembersReq),
}

/// The requests the edge answers without a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixed {
    /// CORS preflight.
    Options,
    /// Server counters.
    Metrics,
    /// `GET /healthz`: the process serves HTTP.
    Health,
    /// `GET /readyz`: recovered, every shard serving, not shutting down.
    Ready,
    /// `GET /leaderz`: this node leads every group of its cell (or is a
    /// single node): for a proxy to prefer it.
    Leader,
    /// `GET /cellz`: the cell as this node sees it (JSON).
    Cell,
}

/// Routing failures the HTTP edge answers itself.
#[derive(Debug, PartialEq, Eq)]
pub enum RouteError {
    Protocol(Error),
    MethodNotAllowed(&'static str),
}

impl From<Error> for RouteError {
    fn from(e: Error) -> Self {
        RouteError::Protocol(e)
    }
}

/// One raw path segment, percent-decoded.
fn decode(raw: &str) -> Result<String, RouteError> {
    super::parse::percent_decode(raw, false).map_err(|_| bad("the path is not valid percent-encoded UTF-8"))
}

fn bad(msg: &str) -> RouteError {
    RouteError::Protocol(Error::BadRequest(msg.into()))
}

/// The metrics label and the surface of a path: a few prefix tests, no
/// allocation, whether or not the request routes.
fn place(path: &str) -> (RouteLabel, Surface) {
    if path.starts_with("/v1/stream/") {
        return (RouteLabel::V1Stream, Surface::V1);
    }
    if let Some(rest) = path.strip_prefix("/ds/") {
        let label = match rest.split_once('/') {
            None | Some((_, "")) | Some((_, "streams")) => RouteLabel::DsBucket,
            Some(_) => RouteLabel::DsStream,
        };
        return (label, Surface::Ds);
    }
    let surface = if path == "/ds" { Surface::Ds } else { Surface::V1 };
    let label = match path {
        "/metrics" => RouteLabel::Metrics,
        "/healthz" | "/readyz" | "/leaderz" => RouteLabel::Health,
        _ => RouteLabel::Other,
    };
    (label, surface)
}

pub fn route(head: &RequestHead, body: Vec<u8>) -> Result<Route, RouteError> {
    if head.method == Method::Options {
        return Ok(Route::Edge(Fixed::Options));
    }
    let path = head.path.as_str();
    let fixed = match path {
        "/metrics" => Some(Fixed::Metrics),
        "/healthz" => Some(Fixed::Health),
        "/readyz" => Some(Fixed::Ready),
        "/leaderz" => Some(Fixed::Leader),
        "/cellz" => Some(Fixed::Cell),
        _ => None,
    };
    if let Some(f) = fixed {
        return match head.method {
            Method::Get | Method::Head => Ok(Route::Edge(f)),
            _ => Err(RouteError::MethodNotAllowed("GET, HEAD")),
        };
    }
    if let Some(rest) = path.strip_prefix("/_cell/") {
        return cell_route(head, rest);
    }
    if let Some(rest) = path.strip_prefix("/v1/stream/") {
        // F3: `__ds` first after the root is the control API, never a stream.
        if rest == "__ds" || rest.starts_with("__ds/") {
            return sub_route(head, body, Root::V1, rest.strip_prefix("__ds/").unwrap_or_default());
        }
        let (bucket, stream) = split_v1_path(rest)?;
        let key = StreamKey { bucket, stream };
        return stream_route(head, body, key, Surface::V1);
    }
    if path.starts_with("/ds/") {
        // A '/' sent as such separates bucket, stream and sub-resource
        // (snapshot, bootstrap); one sent as %2F belongs to the ID it is in,
        // whose rules refuse it (400). So split the path as sent, then decode.
        let raw =
            head.raw_path.strip_prefix("/ds/").ok_or_else(|| bad("the /ds/ prefix must not be percent-encoded"))?;
        let DsPath { bucket, stream, sub } = ds_path(raw)?;
        if stream.as_deref() == Some("__ds") {
            return sub_route(head, body, Root::Ds(bucket), sub.as_deref().unwrap_or_default());
        }
        return match stream.as_deref() {
            None | Some("") => {
                let op = match head.method {
                    Method::Put => BucketOp::Create,
                    // HEAD answers as GET does, without the body (RFC 9110 9.3.2).
                    Method::Get | Method::Head => BucketOp::Get,
                    Method::Delete => BucketOp::Delete,
                    _ => return Err(RouteError::MethodNotAllowed("PUT, GET, HEAD, DELETE")),
                };
                Ok(Route::Shard(Box::new(ShardRequest::Bucket { bucket, op })))
            }
            // `streams` is reserved: GET (or HEAD) lists the bucket, anything else is a bad stream ID.
            Some("streams") if sub.is_none() && matches!(head.method, Method::Get | Method::Head) => {
                Ok(Route::Shard(Box::new(ShardRequest::ListBucket { bucket, list: list_query(head)? })))
            }
            Some("streams") => Err(bad("\"streams\" is reserved and cannot be a stream ID")),
            Some(stream) => {
                validate_ds_stream_id(stream)?;
                let key = StreamKey { bucket: bucket.clone(), stream: stream.to_string() };
                match sub.as_deref() {
                    None => stream_route(head, body, key, Surface::Ds),
                    Some(sub) => snapshot_route(head, body, key, sub),
                }
            }
        };
    }
    Err(RouteError::Protocol(Error::NotFound))
}

/// Puts a request's body, read after the request was routed and checked,
/// into its operation (other operations have no use for one).
pub fn set_body(route: &mut Route, body: Vec<u8>) {
    let req = match route {
        Route::Shard(req) => req,
        Route::Members(m) => return m.set_body(body),
        _ => return,
    };
    let op = match &mut **req {
        ShardRequest::Stream { op, .. } => op,
        ShardRequest::Subs(r) => return r.op.set_body(body),
        _ => return,
    };
    match op {
        StreamOp::Create(c) => c.body = body,
        StreamOp::Append(a) => a.body = body,
        StreamOp::SnapshotPublish(s) => s.body = body,
        _ => {}
    }
}

/// The cell's API under `/_cell/` (`rest` after it, decoded):
/// `members/{id}`, `POST` to add node `id` (its body comes later), `DELETE`
/// to remove it. Any other path under `/_cell/` is 404.
fn cell_route(head: &RequestHead, rest: &str) -> Result<Route, RouteError> {
    let id = rest.strip_prefix("members/").filter(|id| !id.contains('/'));
    let id = id.ok_or(RouteError::Protocol(Error::NotFound))?;
    let op = match head.method {
        Method::Post => MembersOp::Add { body: Vec::new() },
        Method::Delete => MembersOp::Remove,
        _ => return Err(RouteError::MethodNotAllowed("POST, DELETE")),
    };
    Ok(Route::Members(MembersReq { id: node_id(id)?, op }))
}

/// A node's id in a path: a decimal from 1 to 2^64 - 1 (Raft reserves 0).
fn node_id(s: &str) -> Result<u64, RouteError> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    s.parse::<u64>().ok().filter(|&n| digits && n >= 1).ok_or_else(|| {
        bad(&format!("the node id must be a decimal integer from 1 to {} (Raft reserves 0), not {s:?}", u64::MAX))
    })
}

/// The control API under `{root}/__ds/` (F105), `rest` after it (decoded):
/// `jwks.json`, `subscriptions/{id}`, and under it `streams`,
/// `streams/{path}`, `claim`, `ack`, `release`, `callback`.
fn sub_route(head: &RequestHead, body: Vec<u8>, root: Root, rest: &str) -> Result<Route, RouteError> {
    let m = &head.method;
    let token = || head.header("authorization").and_then(|a| a.strip_prefix("Bearer ")).map(|t| t.trim().to_string());
    let allow = |ok: bool, allow: &'static str| if ok { Ok(()) } else { Err(RouteError::MethodNotAllowed(allow)) };
    let (id, op) = if rest == "jwks.json" {
        allow(matches!(m, Method::Get | Method::Head), "GET, HEAD")?;
        (String::new(), SubOp::Jwks)
    } else {
        let rest = rest.strip_prefix("subscriptions/").ok_or(RouteError::Protocol(Error::NotFound))?;
        let (id, sub) = rest.split_once('/').unwrap_or((rest, ""));
        validate_sub_id(id)?;
        let post = |op: SubOp| allow(*m == Method::Post, "POST").map(|_| op);
        let op = match sub {
            "" => match m {
                Method::Put => SubOp::Put { body: Vec::new() },
                Method::Get | Method::Head => SubOp::Get,
                Method::Delete => SubOp::Delete,
                _ => return Err(RouteError::MethodNotAllowed("PUT, GET, HEAD, DELETE")),
            },
            "streams" => post(SubOp::AddStreams { body: Vec::new() })?,
            "claim" => post(SubOp::Claim { body: Vec::new() })?,
            "ack" | "callback" => post(SubOp::Ack { body: Vec::new(), token: token() })?,
            "release" => post(SubOp::Release { body: Vec::new(), token: token() })?,
            _ => match sub.strip_prefix("streams/") {
                Some(path) if !path.is_empty() => {
                    allow(*m == Method::Delete, "DELETE")?;
                    root.key_of(path)?;
                    SubOp::RemoveStream { path: path.to_string() }
                }
                _ => return Err(RouteError::Protocol(Error::NotFound)),
            },
        };
        (id.to_string(), op)
    };
    let mut req = SubRequest { root, id, op, origin: String::new() };
    req.op.set_body(body);
    Ok(Route::Shard(Box::new(ShardRequest::Subs(req))))
}

/// A `/ds/` path after its prefix, as sent: bucket, then stream, then a
/// sub-resource, each percent-decoded on its own.
struct DsPath {
    bucket: String,
    stream: Option<String>,
    sub: Option<String>,
}

/// The one `/ds` path grammar (request paths and `Stream-Forked-From`). A
/// '/' sent as such separates the parts; one sent as %2F belongs to the ID
/// it is in, whose rules refuse it (400). So split as sent, then decode.
fn ds_path(raw: &str) -> Result<DsPath, RouteError> {
    let mut parts = raw.splitn(3, '/');
    let bucket = decode(parts.next().unwrap_or_default())?;
    validate_bucket_id(&bucket)?;
    let stream = parts.next().map(decode).transpose()?;
    let sub = parts.next().map(decode).transpose()?;
    Ok(DsPath { bucket, stream, sub })
}

/// `?prefix=&after=&limit=` of a bucket listing: `limit` 1-1000 (default
/// 1000); each parameter at most once.
fn list_query(head: &RequestHead) -> Result<ListReq, RouteError> {
    for name in ["prefix", "after", "limit"] {
        if head.query_count(name) > 1 {
            return Err(bad(&format!("{name} given more than once")));
        }
    }
    let limit = match head.query_param("limit") {
        None => BUCKET_LIST_LIMIT_MAX,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| l.bytes().all(|b| b.is_ascii_digit()) && (1..=BUCKET_LIST_LIMIT_MAX).contains(n))
            .ok_or_else(|| bad(&format!("limit must be an integer from 1 to {BUCKET_LIST_LIMIT_MAX}")))?,
    };
    Ok(ListReq {
        prefix: head.query_param("prefix").unwrap_or_default().to_string(),
        after: head.query_param("after").map(str::to_string),
        limit,
    })
}

fn stream_route(head: &RequestHead, body: Vec<u8>, key: StreamKey, surface: Surface) -> Result<Route, RouteError> {
    let h = |name: &str| head.header(name).map(str::to_string);
    let op = match head.method {
        Method::Put => {
            let fork = fork_headers(head)?;
            StreamOp::Create(CreateReq {
                fork,
                content_type: h("content-type"),
                lifetime: parse_lifetime(head.header("stream-ttl"), head.header("stream-expires-at"))?,
                closed: stream_closed_requested(head.header("stream-closed")),
                body,
                if_match: h("if-match"),
            })
        }
        Method::Post => StreamOp::Append(AppendReq {
            content_type: h("content-type"),
            body,
            close: stream_closed_requested(head.header("stream-closed")),
            stream_seq: parse_stream_seq(head.header("stream-seq"))?,
            producer: parse_producer(
                head.header("producer-id"),
                head.header("producer-epoch"),
                head.header("producer-seq"),
            )?,
            if_match: h("if-match"),
        }),
        Method::Get => {
            if head.query_count("offset") > 1 {
                return Err(bad("offset given more than once"));
            }
            let live = match head.query_param("live") {
                None => Live::No,
                Some("long-poll") => Live::LongPoll,
                Some("sse") => Live::Sse,
                Some(_) => return Err(bad("live must be long-poll or sse")),
            };
            let from = match head.query_param("offset") {
                Some(o) => parse_read_from(o)?,
                None if live != Live::No => return Err(bad("live reads need an offset")),
                None => ReadFrom::Start,
            };
            StreamOp::Read(ReadReq {
                from,
                live,
                cursor: head.query_param("cursor").map(str::to_string),
                if_none_match: h("if-none-match"),
            })
        }
        Method::Head => StreamOp::Head { if_none_match: h("if-none-match") },
        Method::Delete => StreamOp::Delete,
        _ => return Err(RouteError::MethodNotAllowed("GET, HEAD, PUT, POST, DELETE, OPTIONS")),
    };
    let if_incarnation = if_incarnation(head)?;
    Ok(match op {
        StreamOp::Read(read) if read.live == Live::Sse => {
            Route::Sse(Box::new(SseRead { key, surface, if_incarnation, read }))
        }
        op => Route::Shard(Box::new(ShardRequest::Stream { key, surface, if_incarnation, op })),
    })
}

/// `Stream-Incarnation`, if sent: a precondition on which creation of the
/// stream the request is for: one token as we give them out, else 400
/// (two could name two creations, and only one can be current).
fn if_incarnation(head: &RequestHead) -> Result<Option<Incarnation>, RouteError> {
    if head.header_count("stream-incarnation") > 1 {
        return Err(bad("Stream-Incarnation given more than once"));
    }
    Ok(head.header("stream-incarnation").map(Incarnation::parse).transpose()?)
}

/// `/ds/{bucket}/{stream}/snapshot[/{offset}]` and `.../bootstrap` (snakream.md),
/// and `.../retention/{offset}` (issue 35).
fn snapshot_route(head: &RequestHead, body: Vec<u8>, key: StreamKey, sub: &str) -> Result<Route, RouteError> {
    let read = matches!(head.method, Method::Get | Method::Head);
    let op = match sub.split_once('/') {
        None if sub == "bootstrap" => {
            if !read {
                return Err(RouteError::MethodNotAllowed("GET, HEAD"));
            }
            if head.query_param("live").is_some() {
                return Err(bad("bootstrap is one-shot: continue with a live read from Stream-Next-Offset"));
            }
            StreamOp::Bootstrap
        }
        None if sub == "snapshot" => {
            if !read {
                return Err(RouteError::MethodNotAllowed("GET, HEAD"));
            }
            StreamOp::SnapshotLatest
        }
        Some(("snapshot", offset)) => {
            let offset = parse_offset(offset)?;
            match head.method {
                Method::Put => StreamOp::SnapshotPublish(SnapshotReq {
                    offset,
                    content_type: head.header("content-type").map(str::to_string),
                    body,
                }),
                Method::Get | Method::Head => StreamOp::SnapshotRead { offset },
                Method::Delete => StreamOp::SnapshotDelete { offset },
                _ => return Err(RouteError::MethodNotAllowed("GET, HEAD, PUT, DELETE")),
            }
        }
        Some(("retention", offset)) => {
            if head.method != Method::Put {
                return Err(RouteError::MethodNotAllowed("PUT"));
            }
            StreamOp::Retain { offset: parse_offset(offset)? }
        }
        _ => return Err(RouteError::Protocol(Error::NotFound)),
    };
    let if_incarnation = if_incarnation(head)?;
    Ok(Route::Shard(Box::new(ShardRequest::Stream { key, surface: Surface::Ds, if_incarnation, op })))
}

/// F97–F101: `Stream-Forked-From` names the source by its path on this
/// server (`/v1/stream/{path}` or `/ds/{bucket}/{stream}`).
fn fork_headers(head: &RequestHead) -> Result<Option<ForkReq>, RouteError> {
    let from = head.header("stream-forked-from");
    let offset = head.header("stream-fork-offset");
    let sub = head.header("stream-fork-sub-offset").map(parse_sub_offset).transpose()?;
    let Some(from) = from else {
        if sub.is_some() {
            return Err(bad("Stream-Fork-Sub-Offset needs Stream-Forked-From"));
        }
        if offset.is_some() {
            return Err(bad("Stream-Fork-Offset needs Stream-Forked-From"));
        }
        return Ok(None);
    };
    let sub_offset = sub.unwrap_or(0);
    if sub_offset > 0 && offset.is_none() {
        return Err(bad("Stream-Fork-Sub-Offset > 0 needs Stream-Fork-Offset"));
    }
    let raw = from.split('?').next().unwrap_or(from);
    let source = if let Some(rest) = raw.strip_prefix("/ds/") {
        match ds_path(rest)? {
            DsPath { bucket, stream: Some(stream), sub: None } if !stream.is_empty() => {
                validate_ds_stream_id(&stream)?;
                StreamKey { bucket, stream }
            }
            _ => return Err(bad("Stream-Forked-From must name a stream")),
        }
    } else if let Some(rest) = raw.strip_prefix("/v1/stream/") {
        let path =
            super::parse::percent_decode(rest, false).map_err(|_| bad("Stream-Forked-From is not a valid path"))?;
        let (bucket, stream) = split_v1_path(&path)?;
        StreamKey { bucket, stream }
    } else {
        return Err(bad("Stream-Forked-From must be a /v1/stream/... or /ds/... path on this server"));
    };
    let offset = offset.map(parse_offset).transpose()?;
    Ok(Some(ForkReq { source, offset, sub_offset }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(raw: &str) -> Class {
        let limits =
            super::super::parse::ParseLimits { header_bytes_max: 8192, header_count_max: 32, body_bytes_max: 1 << 20 };
        let (head, _) = super::super::parse::parse_head(raw.as_bytes(), &limits).unwrap();
        classify(&head)
    }

    #[test]
    fn one_classification_carries_label_surface_live_mode_and_road() {
        let c = class_of("GET /ds/b1bb/s?offset=now&live=sse HTTP/1.1\r\n\r\n");
        assert_eq!((c.label, c.surface, c.live), (RouteLabel::DsStream, Surface::Ds, Live::Sse));
        assert!(matches!(&c.route, Ok(Route::Sse(s)) if s.key.stream == "s" && s.surface == Surface::Ds));
        let c = class_of("GET /v1/stream/a/b?offset=-1&live=long-poll HTTP/1.1\r\n\r\n");
        assert_eq!((c.label, c.surface, c.live), (RouteLabel::V1Stream, Surface::V1, Live::LongPoll));
        assert!(matches!(c.route, Ok(Route::Shard(_))));
        let c = class_of("POST /ds/b1bb/s HTTP/1.1\r\nContent-Length: 1\r\n\r\n");
        assert_eq!((c.label, c.surface, c.live), (RouteLabel::DsStream, Surface::Ds, Live::No));
        // Routing errors keep the label and the surface of their path.
        let c = class_of("PATCH /ds/b1bb HTTP/1.1\r\n\r\n");
        assert_eq!((c.label, c.surface), (RouteLabel::DsBucket, Surface::Ds));
        assert_eq!(c.route.unwrap_err(), RouteError::MethodNotAllowed("PUT, GET, HEAD, DELETE"));
        let c = class_of("GET /nowhere HTTP/1.1\r\n\r\n");
        assert_eq!((c.label, c.surface), (RouteLabel::Other, Surface::V1));
        assert!(matches!(class_of("HEAD /readyz HTTP/1.1\r\n\r\n").route, Ok(Route::Edge(Fixed::Ready))));
        assert!(matches!(class_of("OPTIONS /ds/b1bb/s HTTP/1.1\r\n\r\n").route, Ok(Route::Edge(Fixed::Options))));
    }

    #[test]
    fn head_routes_wherever_get_does() {
        for path in ["/ds/b1bb", "/ds/b1bb/streams?limit=2", "/ds/b1bb/s/snapshot", "/ds/b1bb/s/bootstrap"] {
            let get = class_of(&format!("GET {path} HTTP/1.1\r\n\r\n")).route;
            let head = class_of(&format!("HEAD {path} HTTP/1.1\r\n\r\n")).route;
            match (get, head) {
                (Ok(Route::Shard(g)), Ok(Route::Shard(h))) => assert_eq!(format!("{g:?}"), format!("{h:?}"), "{path}"),
                other => panic!("{path}: {other:?}"),
            }
        }
        for path in ["/metrics", "/healthz", "/readyz", "/leaderz", "/cellz"] {
            assert!(class_of(&format!("HEAD {path} HTTP/1.1\r\n\r\n")).route.is_ok(), "{path}");
        }
        assert!(matches!(class_of("GET /leaderz HTTP/1.1\r\n\r\n").route, Ok(Route::Edge(Fixed::Leader))));
        assert!(matches!(class_of("GET /cellz HTTP/1.1\r\n\r\n").route, Ok(Route::Edge(Fixed::Cell))));
        let post = class_of("POST /leaderz HTTP/1.1\r\n\r\n").route;
        assert_eq!(post.unwrap_err(), RouteError::MethodNotAllowed("GET, HEAD"));
    }

    #[test]
    fn route_labels() {
        for (path, want) in [
            ("/v1/stream/a/b", RouteLabel::V1Stream),
            ("/ds/bucket1", RouteLabel::DsBucket),
            ("/ds/bucket1/", RouteLabel::DsBucket),
            ("/ds/bucket1/streams", RouteLabel::DsBucket),
            ("/ds/bucket1/orders", RouteLabel::DsStream),
            ("/metrics", RouteLabel::Metrics),
            ("/healthz", RouteLabel::Health),
            ("/readyz", RouteLabel::Health),
            ("/leaderz", RouteLabel::Health),
            ("/cellz", RouteLabel::Other),
            ("/_cell/members/4", RouteLabel::Other),
            ("/", RouteLabel::Other),
            ("/v1/streamx", RouteLabel::Other),
        ] {
            assert_eq!(place(path).0, want, "{path}");
        }
    }

    #[test]
    fn cell_members_add_and_remove_a_node_by_its_id() {
        let c = class_of("POST /_cell/members/4 HTTP/1.1\r\nContent-Length: 2\r\n\r\n");
        assert_eq!((c.label, c.surface, c.live), (RouteLabel::Other, Surface::V1, Live::No));
        let mut route = c.route.unwrap();
        set_body(&mut route, b"{}".to_vec());
        let add = MembersReq { id: 4, op: MembersOp::Add { body: b"{}".to_vec() } };
        assert!(matches!(&route, Route::Members(m) if *m == add), "{route:?}");
        let c = class_of("DELETE /_cell/members/18446744073709551615 HTTP/1.1\r\n\r\n");
        let remove = MembersReq { id: u64::MAX, op: MembersOp::Remove };
        assert!(matches!(&c.route, Ok(Route::Members(m)) if *m == remove), "{:?}", c.route);
    }

    #[test]
    fn cell_members_refuse_bad_ids_other_methods_and_other_paths() {
        for id in ["0", "", "-1", "+4", "4x", "0x10", "18446744073709551616", "%20"] {
            let c = class_of(&format!("DELETE /_cell/members/{id} HTTP/1.1\r\n\r\n"));
            assert!(matches!(c.route, Err(RouteError::Protocol(Error::BadRequest(_)))), "{id:?}: {:?}", c.route);
        }
        for method in ["GET", "HEAD", "PUT", "PATCH"] {
            let c = class_of(&format!("{method} /_cell/members/4 HTTP/1.1\r\n\r\n"));
            assert_eq!(c.route.unwrap_err(), RouteError::MethodNotAllowed("POST, DELETE"), "{method}");
        }
        for path in ["/_cell/", "/_cell/members", "/_cell/members/4/x", "/_cell/voters/4", "/_cell/cellz"] {
            let c = class_of(&format!("POST {path} HTTP/1.1\r\n\r\n"));
            assert_eq!(c.route.unwrap_err(), RouteError::Protocol(Error::NotFound), "{path}");
        }
    }

    #[test]
    fn retention_is_a_put_of_an_offset() {
        let c = class_of("PUT /ds/b1bb/s/retention/0000000000000000_0000000000000007 HTTP/1.1\r\n\r\n");
        let Ok(Route::Shard(req)) = c.route else { panic!("{:?}", c.route) };
        assert!(matches!(*req, ShardRequest::Stream { op: StreamOp::Retain { offset }, .. } if offset.pos == 7));
        let malformed = class_of("PUT /ds/b1bb/s/retention/soon HTTP/1.1\r\n\r\n");
        assert!(matches!(malformed.route, Err(RouteError::Protocol(Error::BadRequest(_)))));
        let get = class_of("GET /ds/b1bb/s/retention/0000000000000000_0000000000000007 HTTP/1.1\r\n\r\n");
        assert_eq!(get.route.unwrap_err(), RouteError::MethodNotAllowed("PUT"));
    }

    #[test]
    fn stream_incarnation_is_parsed_on_every_stream_route() {
        let token = Incarnation::new(0x1f, 2).to_string();
        for (method, path) in [
            ("GET", "/v1/stream/a/b"),
            ("POST", "/ds/b1bb/s"),
            ("HEAD", "/ds/b1bb/s"),
            ("PUT", "/ds/b1bb/s/snapshot/0000000000000000_0000000000000003"),
        ] {
            let raw = format!("{method} {path} HTTP/1.1\r\nStream-Incarnation: {token}\r\n\r\n");
            let c = class_of(&raw);
            let Ok(Route::Shard(req)) = c.route else { panic!("{raw}: {:?}", c.route) };
            let ShardRequest::Stream { if_incarnation, .. } = *req else { panic!("{raw}") };
            assert_eq!(if_incarnation, Some(Incarnation::new(0x1f, 2)), "{raw}");
        }
        let c = class_of(&format!("GET /ds/b1bb/s?offset=-1&live=sse HTTP/1.1\r\nStream-Incarnation: {token}\r\n\r\n"));
        assert!(matches!(c.route, Ok(Route::Sse(s)) if s.if_incarnation == Some(Incarnation::new(0x1f, 2))));
        let c = class_of("POST /ds/b1bb/s HTTP/1.1\r\n\r\n");
        assert!(
            matches!(c.route, Ok(Route::Shard(r)) if matches!(*r, ShardRequest::Stream { if_incarnation: None, .. }))
        );
    }

    #[test]
    fn a_malformed_or_repeated_stream_incarnation_is_a_bad_request() {
        let token = Incarnation::new(0x1f, 2).to_string();
        for value in [token.to_uppercase(), token[1..].to_string(), "\"x\"".into()] {
            let c = class_of(&format!("POST /v1/stream/a/b HTTP/1.1\r\nStream-Incarnation: {value}\r\n\r\n"));
            assert!(matches!(c.route, Err(RouteError::Protocol(Error::BadRequest(_)))), "{value}");
        }
        let twice =
            format!("GET /ds/b1bb/s HTTP/1.1\r\nStream-Incarnation: {token}\r\nStream-Incarnation: {token}\r\n\r\n");
        assert!(matches!(class_of(&twice).route, Err(RouteError::Protocol(Error::BadRequest(_)))));
    }

    fn fork_source(from: &str) -> Result<Option<StreamKey>, RouteError> {
        let raw = format!("PUT /ds/bucket1/fork HTTP/1.1\r\nStream-Forked-From: {from}\r\n\r\n");
        let limits =
            super::super::parse::ParseLimits { header_bytes_max: 8192, header_count_max: 32, body_bytes_max: 0 };
        let (head, _) = super::super::parse::parse_head(raw.as_bytes(), &limits).unwrap();
        fork_headers(&head).map(|f| f.map(|f| f.source))
    }

    #[test]
    fn fork_sources_follow_the_path_grammar_of_their_surface() {
        let key = |b: &str, s: &str| Some(StreamKey { bucket: b.into(), stream: s.into() });
        assert_eq!(fork_source("/ds/bucket1/src").unwrap(), key("bucket1", "src"));
        assert_eq!(fork_source("/ds/bucket1/src?offset=-1").unwrap(), key("bucket1", "src"));
        assert_eq!(fork_source("/v1/stream/a/b/c").unwrap(), key("a", "b/c"));
        assert_eq!(fork_source("/v1/stream/a/b%2Fc").unwrap(), key("a", "b/c"));
        // Under /ds a %2F stays in the ID it was sent in (and IDs refuse it),
        // as in request paths; a sub-resource or no stream names no stream.
        for bad in
            ["/ds/a%2Fbcd/src", "/ds/bucket1/s%2Fx", "/ds/bucket1/src/snapshot", "/ds/bucket1", "/ds/bucket1/", "/x/y"]
        {
            assert!(fork_source(bad).is_err(), "{bad}");
        }
    }
}
