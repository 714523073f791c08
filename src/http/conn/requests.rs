//! A connection's keep-alive loop: a head, its class, its sender's rights,
//! its body, then its answer (from the owning shard, from every shard in
//! turn for a change of the cell's members, or from the edge for what
//! needs no shard), in order, until the connection ends; between
//! requests, the move to the shard its requests go to.

use super::super::affinity::Affinity;
use super::super::encode::{encode, Response};
use super::super::gate::Slot;
use super::super::guard;
use super::super::members::{self, MembersReq};
use super::super::parse::{BodyKind, Method, RequestHead};
use super::super::respond;
use super::super::route::{classify, set_body, Class, Fixed, Route, RouteError};
use super::super::stop::StopSlot;
use super::admit::move_connection;
use super::io::{fail, read_body, read_head, write_all, Deadline, Reader, RecvError};
use super::{sse_session, ConnContext};
use crate::metrics::{Held, RouteLabel};
use crate::protocol::{Live, Surface};
use crate::shard::message::{Dispatch, Owner, ShardRequest};
use glommio::net::TcpStream;
use std::rc::Rc;
use std::time::Instant;

/// A request received whole: its head, its class, and the answer it gets
/// instead of running, if its sender may not send it.
struct Received {
    head: RequestHead,
    class: Class,
    refused: Option<Response>,
}

/// Serves one connection until the peer closes it, a timeout, or an error
/// that makes the byte stream unusable.
pub(super) async fn serve<C: ConnContext + ?Sized>(
    mut stream: TcpStream,
    cx: Rc<C>,
    slot: Slot,
    mut rd: Reader,
    mut affinity: Affinity,
) {
    if affinity.moves() == 0 {
        let _ = stream.set_nodelay(true);
    }
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let stop = cx.stop().slot();
    loop {
        let Some(Received { head, class, refused }) = receive(&mut stream, &*cx, &slot, &mut rd, &stop, &mut out).await
        else {
            return;
        };
        let label = class.label;
        let (resp, remote) = match (refused, class.route) {
            (Some(r), _) => (r, None),
            (None, Ok(Route::Sse(sse))) => return sse_session::serve(&mut stream, &*cx, &stop, label, *sse).await,
            (None, Ok(Route::Shard(req))) => shard_answer(&*cx, &head, class.surface, class.live, *req).await,
            (None, Ok(Route::Edge(fixed))) => (edge_answer(&*cx, fixed).await, None),
            (None, Ok(Route::Members(m))) => (members_answer(&*cx, m).await, None),
            (None, Err(e)) => (refusal(class.surface, e), None),
        };
        cx.edge().count_request(label, resp.status);
        // Shutting down: this answer is the connection's last.
        let keep_alive = keeps_alive(head.keep_alive, stop.is_stopped(), resp.close);
        out.clear();
        encode(&resp, head.method == Method::Head, keep_alive, &mut out);
        if write_all(&mut stream, &out).await.is_err() || !keep_alive {
            return;
        }
        // Serve it where its requests go, once they keep going there.
        affinity.observe(remote);
        if let Some(to) = affinity.take_move() {
            stream = match move_connection(&*cx, stream, &mut rd, to, affinity.moves()) {
                Some(s) => s,
                None => return,
            };
        }
    }
}

/// Where `req` runs, asked of the shard once; a hand-off to another core
/// is counted here.
pub(super) fn owner<C: ConnContext + ?Sized>(cx: &C, req: &ShardRequest) -> Owner {
    let owner = cx.shard().owner(req);
    if let Owner::Peer(_) = owner {
        cx.edge().handoffs.set(cx.edge().handoffs.get() + 1);
    }
    owner
}

/// Whether the connection serves another request after this answer.
fn keeps_alive(asked: bool, stopping: bool, answer_closes: bool) -> bool {
    asked && !stopping && !answer_closes
}

/// A refusal that closes at once, its body unread: nobody known sends it.
fn unknown_sender_with_body(refused: &Option<Response>, body: &BodyKind) -> bool {
    refused.as_ref().is_some_and(|r| r.status == 401) && !matches!(body, BodyKind::None | BodyKind::Length(0))
}

/// Whether the client waits for a `100 Continue` before sending its body.
fn wants_continue(head: &RequestHead) -> bool {
    head.expect_continue && head.body != BodyKind::None
}

/// Receives one request: its head, classified and checked against the
/// grants, then its body, put into its operation. None once the connection
/// is over (closed, or answered with an error that closes it).
async fn receive<C: ConnContext + ?Sized>(
    stream: &mut TcpStream,
    cx: &C,
    slot: &Slot,
    rd: &mut Reader,
    stop: &StopSlot,
    out: &mut Vec<u8>,
) -> Option<Received> {
    let (head, head_len) = match read_head(stream, rd, slot, stop).await {
        Ok(x) => x,
        Err(e) => return closed(stream, cx, RouteLabel::Other, e, out).await,
    };
    let mut class = classify(&head);
    let refused = cx.access().and_then(|a| guard::check(a, cx.shard_id(), cx.edge(), &head, &class));
    if unknown_sender_with_body(&refused, &head.body) {
        let mut r = refused.expect("checked above");
        r.close = true;
        return closed(stream, cx, class.label, RecvError::Answer(r), out).await;
    }
    if wants_continue(&head) && write_all(stream, b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
        return None;
    }
    let mut deadline = Deadline::after(slot.gate.timeouts.body);
    let body = match read_body(stream, rd, &head, head_len, &mut deadline).await {
        Ok(x) => x,
        Err(e) => return closed(stream, cx, class.label, e, out).await,
    };
    rd.shrink();
    if let (None, Ok(route)) = (&refused, &mut class.route) {
        set_body(route, body);
    }
    Some(Received { head, class, refused })
}

/// Ends the connection after a failed receive: answers (and counts) when
/// there is an answer to give.
async fn closed<C: ConnContext + ?Sized>(
    stream: &mut TcpStream,
    cx: &C,
    label: RouteLabel,
    e: RecvError,
    out: &mut Vec<u8>,
) -> Option<Received> {
    if let RecvError::Answer(r) = e {
        cx.edge().count_request(label, r.status);
        fail(stream, &r, out).await;
    }
    None
}

/// Runs a request on its owner; also says which other shard ran it, if one did.
async fn shard_answer<C: ConnContext + ?Sized>(
    cx: &C,
    head: &RequestHead,
    surface: Surface,
    live: Live,
    mut req: ShardRequest,
) -> (Response, Option<usize>) {
    if let ShardRequest::Subs(r) = &mut req {
        // The URLs its answers and deliveries carry: as the client addressed us.
        let o = super::super::forwarded::origin(head, cx.trust_proxy());
        r.origin = format!("{}://{}", o.scheme, o.host);
    }
    let owner = owner(cx, &req);
    let _held = (live == Live::LongPoll).then(|| Held::new(&cx.edge().long_polls));
    let resp = match cx.shard().run(owner, req).await {
        Ok(o) => respond::outcome(surface, o, || location(head, cx.trust_proxy())),
        Err(e) => respond::error(surface, &e),
    };
    let remote = match owner {
        Owner::Here => None,
        Owner::Peer(n) => Some(n),
    };
    (resp, remote)
}

/// `POST`/`DELETE /_cell/members/{id}`: the change, checked, then made in
/// every group in turn, each on its shard, which hands it to its group's
/// leader (`members::in_every_group`: a group answering 503 is asked again).
async fn members_answer<C: ConnContext + ?Sized>(cx: &C, req: MembersReq) -> Response {
    let (id, shards) = (req.id, cx.shards());
    let change = match members::change(req, shards) {
        Ok(c) => c,
        Err(e) => return respond::error(Surface::V1, &e),
    };
    let run = |group| {
        let req = ShardRequest::Members { group, change: change.clone() };
        let owner = owner(cx, &req);
        async move { members::outcome_of(group, cx.shard().run(owner, req).await) }
    };
    let (groups, start) = (u32::try_from(shards).unwrap_or(u32::MAX), Instant::now());
    let changed = members::in_every_group(groups, run, glommio::timer::sleep, || start.elapsed()).await;
    respond::members(id, changed)
}

/// The answers that need no shard.
async fn edge_answer<C: ConnContext + ?Sized>(cx: &C, fixed: Fixed) -> Response {
    match fixed {
        Fixed::Options => respond::preflight(),
        Fixed::Metrics => {
            let mut r = Response::new(200).header("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            r.body = cx.metrics().await.into_bytes();
            r
        }
        Fixed::Health => respond::plain(200, "ok"),
        Fixed::Ready if cx.ready() => respond::plain(200, cx.degraded().unwrap_or("ready")),
        Fixed::Ready => respond::plain(503, "not ready (starting or shutting down)"),
        Fixed::Leader => {
            let (leads, why) = cx.leaderz();
            respond::leaderz(leads, &why)
        }
        Fixed::Cell => respond::cellz(cx.cellz()),
    }
}

/// A request that routes nowhere.
fn refusal(surface: Surface, e: RouteError) -> Response {
    match e {
        RouteError::Protocol(e) => respond::error(surface, &e),
        RouteError::MethodNotAllowed(allow) => respond::plain(405, "method not allowed").header("Allow", allow),
    }
}

/// Absolute URL of the request (F10: Location must be absolute), as the
/// client addressed it (see `forwarded`).
fn location(head: &RequestHead, trust_proxy: bool) -> String {
    let o = super::super::forwarded::origin(head, trust_proxy);
    format!("{}://{}{}", o.scheme, o.host, head.raw_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Error;

    #[test]
    fn the_connection_ends_when_asked_when_stopping_or_when_the_answer_closes() {
        assert!(keeps_alive(true, false, false));
        assert!(!keeps_alive(false, false, false), "the client asked to close");
        assert!(!keeps_alive(true, true, false), "shutting down: the last answer");
        assert!(!keeps_alive(true, false, true), "an answer that closes");
    }

    #[test]
    fn only_a_401_with_a_body_to_come_closes_unread() {
        let unknown = Some(respond::plain(401, "who?"));
        assert!(unknown_sender_with_body(&unknown, &BodyKind::Length(5)));
        assert!(unknown_sender_with_body(&unknown, &BodyKind::Chunked));
        assert!(!unknown_sender_with_body(&unknown, &BodyKind::Length(0)));
        assert!(!unknown_sender_with_body(&unknown, &BodyKind::None));
        assert!(!unknown_sender_with_body(&Some(respond::plain(403, "no")), &BodyKind::Length(5)));
        assert!(!unknown_sender_with_body(&None, &BodyKind::Length(5)));
    }

    #[test]
    fn continue_only_for_a_body_and_routing_refusals_by_surface() {
        let limits =
            crate::http::parse::ParseLimits { header_bytes_max: 8192, header_count_max: 32, body_bytes_max: 64 };
        let head = |raw: &str| crate::http::parse::parse_head(raw.as_bytes(), &limits).unwrap().0;
        assert!(wants_continue(&head("POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")));
        assert!(!wants_continue(&head("GET /x HTTP/1.1\r\nExpect: 100-continue\r\n\r\n")));
        assert!(!wants_continue(&head("POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")));
        let r = refusal(Surface::Ds, RouteError::MethodNotAllowed("GET, HEAD"));
        assert_eq!(r.status, 405);
        assert!(r.headers.contains(&("Allow", "GET, HEAD".into())));
        let stale = RouteError::Protocol(Error::StaleEpoch { current: 1 });
        assert_eq!(refusal(Surface::V1, stale).status, 403);
    }
}
