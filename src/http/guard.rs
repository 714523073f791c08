//! Who may send a request. With access control on (`--auth-file`), every
//! request is checked once its head has arrived and before it reaches a
//! shard: no usable token is 401, a covered bucket without the right 403,
//! a bucket the token does not cover 404, the very answer a bucket that
//! does not exist gets. [`needs`] is the rights table of docs/operations.md.

use super::parse::RequestHead;
use super::respond::{self, Response};
use super::route::{Class, Fixed, Route, RouteError};
use crate::auth::access::Access;
use crate::auth::bearer::Unauthenticated;
use crate::auth::counters::Count;
use crate::auth::grants::{authorize, Need, Right, Verdict};
use crate::metrics::EdgeMetrics;
use crate::protocol::subs::{Root, SubOp, SubRequest};
use crate::protocol::{BucketOp, CreateReq, Error, StreamOp};
use crate::shard::message::ShardRequest;

/// What one request needs: at most two things (a fork needs the right to
/// create in its bucket and to read its source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs<'a> {
    list: [Need<'a>; 2],
    len: usize,
}

impl<'a> Needs<'a> {
    const NONE: Needs<'static> = Needs { list: [Need::AllBuckets(Right::Admin); 2], len: 0 };

    fn one(n: Need<'a>) -> Needs<'a> {
        Needs { list: [n, n], len: 1 }
    }

    fn two(a: Need<'a>, b: Need<'a>) -> Needs<'a> {
        Needs { list: [a, b], len: 2 }
    }

    pub fn as_slice(&self) -> &[Need<'a>] {
        &self.list[..self.len]
    }
}

/// The right a stream operation needs in its bucket.
fn stream_right(op: &StreamOp) -> Right {
    match op {
        StreamOp::Read(_)
        | StreamOp::Head { .. }
        | StreamOp::SnapshotLatest
        | StreamOp::SnapshotRead { .. }
        | StreamOp::Bootstrap => Right::Read,
        StreamOp::Append(_) => Right::Append,
        // Retention removes data, as a snapshot's trim does: the right
        // that publishes snapshots, not the one that only adds data.
        StreamOp::Create(_)
        | StreamOp::Delete
        | StreamOp::SnapshotPublish(_)
        | StreamOp::SnapshotDelete { .. }
        | StreamOp::Retain { .. } => Right::Manage,
    }
}

/// What a routed request needs; None for the endpoints that stay open
/// (`/healthz`, `/readyz`, `/leaderz`, CORS preflights); `/cellz`, like
/// `/metrics`, needs the admin right over every bucket (it shows the
/// cell's shape), and so does `/_cell/members/{id}` (it changes it). A
/// request that did not route needs only a known token: it is then
/// answered with its routing error.
pub fn needs(routed: &Result<Route, RouteError>) -> Option<Needs<'_>> {
    let req = match routed {
        Ok(Route::Edge(Fixed::Metrics | Fixed::Cell) | Route::Members(_)) => {
            return Some(Needs::one(Need::AllBuckets(Right::Admin)))
        }
        Ok(Route::Edge(Fixed::Options | Fixed::Health | Fixed::Ready | Fixed::Leader)) => return None,
        Ok(Route::Sse(sse)) => return Some(Needs::one(bucket(&sse.key.bucket, Right::Read))),
        Ok(Route::Shard(req)) => req,
        Err(_) => return Some(Needs::NONE),
    };
    Some(match &**req {
        ShardRequest::Stream { key, op, .. } => {
            let here = bucket(&key.bucket, stream_right(op));
            match op {
                StreamOp::Create(CreateReq { fork: Some(f), .. }) => {
                    Needs::two(here, bucket(&f.source.bucket, Right::Read))
                }
                _ => Needs::one(here),
            }
        }
        ShardRequest::Bucket { bucket: b, op: BucketOp::Get } | ShardRequest::ListBucket { bucket: b, .. } => {
            Needs::one(bucket(b, Right::Read))
        }
        ShardRequest::Bucket { bucket: b, op: BucketOp::Create | BucketOp::Delete } => {
            Needs::one(bucket(b, Right::Admin))
        }
        ShardRequest::Subs(r) => return sub_needs(r),
        ShardRequest::Members { .. } => Needs::one(Need::AllBuckets(Right::Admin)),
    })
}

/// The subscription API: the JWK set is public. An ack, a webhook
/// callback and a release carry the wake's own bearer token, not an auth
/// file's (a webhook receiver holds only that one): the shard checks it
/// (192 random bits, compared in constant time), so they need nothing
/// here. The rest manages what a root's streams deliver, so needs the
/// admin right over the bucket (over every bucket for `/v1`, which reaches
/// them all).
fn sub_needs(r: &SubRequest) -> Option<Needs<'_>> {
    if matches!(r.op, SubOp::Jwks | SubOp::Ack { .. } | SubOp::Release { .. }) {
        return None;
    }
    Some(match &r.root {
        Root::V1 => Needs::one(Need::AllBuckets(Right::Admin)),
        Root::Ds(b) => Needs::one(bucket(b, Right::Admin)),
    })
}

fn bucket(bucket: &str, right: Right) -> Need<'_> {
    Need::Bucket { bucket, right }
}

fn unauthenticated(why: Unauthenticated) -> Response {
    let error = match why {
        Unauthenticated::Missing => None,
        Unauthenticated::Malformed => Some("invalid_request"),
        Unauthenticated::Unknown => Some("invalid_token"),
    };
    respond::unauthenticated(why.message(), error)
}

fn forbidden(token: &str, need: Need<'_>) -> Response {
    respond::forbidden(&match need {
        Need::Bucket { bucket, right } => {
            format!("token {token:?} may not do this in bucket {bucket:?}: it needs the {} right", right.as_str())
        }
        Need::AllBuckets(right) => {
            format!("token {token:?} may not do this: it needs the {} right over every bucket (\"*\")", right.as_str())
        }
    })
}

/// The answer a request gets instead of being run, if any; counts what it
/// decided (per token on this shard's slot, 401s by reason).
pub fn check(access: &Access, shard: usize, edge: &EdgeMetrics, head: &RequestHead, class: &Class) -> Option<Response> {
    let needs = needs(&class.route)?;
    let grants = access.grants();
    let (header, count) = (head.header("authorization"), head.header_count("authorization"));
    let (token, verdict) = match authorize(&grants, header, count, needs.as_slice()) {
        Ok(x) => x,
        Err(why) => {
            let c = &edge.unauthorized[why as usize];
            c.set(c.get() + 1);
            return Some(unauthenticated(why));
        }
    };
    token.counters.add(shard, Count::Requests);
    match verdict {
        Verdict::Allowed => None,
        Verdict::Forbidden(_) => {
            token.counters.add(shard, Count::Forbidden);
            let need = needs.as_slice().iter().copied().find(|&n| token.check(n) != Verdict::Allowed);
            Some(forbidden(&token.name, need.expect("a need was refused")))
        }
        Verdict::Hidden => {
            token.counters.add(shard, Count::Hidden);
            Some(respond::error(class.surface, &Error::NotFound))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse::{parse_head, ParseLimits};
    use crate::http::route::classify;

    fn needs_of(raw: &str) -> Option<Vec<Need<'static>>> {
        let limits = ParseLimits { header_bytes_max: 8192, header_count_max: 32, body_bytes_max: 1 << 20 };
        let (head, _) = parse_head(raw.as_bytes(), &limits).unwrap();
        let class = Box::leak(Box::new(classify(&head)));
        needs(&class.route).map(|n| n.as_slice().to_vec())
    }

    fn b(bucket: &'static str, right: Right) -> Need<'static> {
        Need::Bucket { bucket, right }
    }

    #[test]
    fn the_rights_table() {
        use Right::*;
        for (req, want) in [
            ("GET /ds/orders/s?offset=-1", vec![b("orders", Read)]),
            ("GET /ds/orders/s?offset=now&live=sse", vec![b("orders", Read)]),
            ("HEAD /ds/orders/s", vec![b("orders", Read)]),
            ("GET /ds/orders", vec![b("orders", Read)]),
            ("GET /ds/orders/streams", vec![b("orders", Read)]),
            ("GET /ds/orders/s/snapshot", vec![b("orders", Read)]),
            ("GET /ds/orders/s/snapshot/0000000000000000_0000000000000000", vec![b("orders", Read)]),
            ("GET /ds/orders/s/bootstrap", vec![b("orders", Read)]),
            ("POST /ds/orders/s", vec![b("orders", Append)]),
            ("PUT /ds/orders/s", vec![b("orders", Manage)]),
            ("DELETE /ds/orders/s", vec![b("orders", Manage)]),
            ("PUT /ds/orders/s/snapshot/0000000000000000_0000000000000000", vec![b("orders", Manage)]),
            ("DELETE /ds/orders/s/snapshot/0000000000000000_0000000000000000", vec![b("orders", Manage)]),
            ("PUT /ds/orders/s/retention/0000000000000000_0000000000000000", vec![b("orders", Manage)]),
            ("PUT /ds/orders", vec![b("orders", Admin)]),
            ("DELETE /ds/orders", vec![b("orders", Admin)]),
            ("GET /v1/stream/orders/a/b?offset=-1", vec![b("orders", Read)]),
            ("POST /v1/stream/orders/a", vec![b("orders", Append)]),
            ("PUT /v1/stream/orders/a", vec![b("orders", Manage)]),
            ("GET /v1/stream/solo?offset=-1", vec![b("_default", Read)]),
            ("GET /metrics", vec![Need::AllBuckets(Admin)]),
            ("GET /cellz", vec![Need::AllBuckets(Admin)]),
            ("POST /_cell/members/4", vec![Need::AllBuckets(Admin)]),
            ("DELETE /_cell/members/4", vec![Need::AllBuckets(Admin)]),
            ("GET /_cell/members/4", vec![]),
            ("GET /nowhere", vec![]),
            ("PATCH /ds/orders/s", vec![]),
        ] {
            assert_eq!(needs_of(&format!("{req} HTTP/1.1\r\n\r\n")), Some(want), "{req}");
        }
        for open in ["GET /healthz", "HEAD /readyz", "GET /leaderz", "HEAD /leaderz", "OPTIONS /ds/orders/s"] {
            assert_eq!(needs_of(&format!("{open} HTTP/1.1\r\n\r\n")), None, "{open}");
        }
        let fork = "PUT /ds/orders/f HTTP/1.1\r\nStream-Forked-From: /ds/archive/src\r\n\r\n";
        assert_eq!(needs_of(fork), Some(vec![b("orders", Manage), b("archive", Read)]));
        let fork = "PUT /v1/stream/orders/f HTTP/1.1\r\nStream-Forked-From: /v1/stream/other/x\r\n\r\n";
        assert_eq!(needs_of(fork), Some(vec![b("orders", Manage), b("other", Read)]));
    }

    #[test]
    fn unauthorized_reasons_line_up_with_their_metric_labels() {
        for (i, why) in Unauthenticated::ALL.iter().enumerate() {
            assert_eq!(*why as usize, i);
            assert_eq!(why.as_str(), crate::metrics::UNAUTHORIZED_REASONS[i]);
        }
    }
}
