//! An SSE session (F63–F73): catch-up reads, then long-polls on the owning
//! shard (over the mesh when it is another core), each answer sent as a
//! data event followed by a control event.

use super::super::encode::{encode, sse_head};
use super::super::respond;
use super::super::route::SseRead;
use super::super::sse;
use super::super::stop::StopSlot;
use super::io::write_all;
use super::requests::owner;
use super::ConnContext;
use crate::limits::SSE_CONNECTION_MS_MAX;
use crate::metrics::{Held, RouteLabel};
use crate::protocol::headers::sse_is_text;
use crate::protocol::offset::ReadFrom;
use crate::protocol::{Incarnation, Live, Outcome, ReadOutcome, ReadReq, StreamOp};
use crate::shard::message::{Dispatch, Reply, ShardRequest};
use glommio::net::TcpStream;
use std::time::{Duration, Instant};

/// Serves the session. Ends after the stream closes, on a write error,
/// after SSE_CONNECTION_MS_MAX so that clients reconnect (and CDNs can
/// collapse requests), or when the shard stops (graceful shutdown: after
/// the event that answers the read in flight).
pub(super) async fn serve<C: ConnContext + ?Sized>(
    stream: &mut TcpStream,
    cx: &C,
    stop: &StopSlot,
    label: RouteLabel,
    sse: SseRead,
) {
    let started = Instant::now();
    let _live = Held::new(&cx.edge().sse);
    let mut r = match read(cx, &sse, sse.if_incarnation, sse.read.from, Live::Sse).await {
        Ok(Outcome::Read(r)) => r,
        Ok(_) => return,
        Err(e) => {
            let mut out = Vec::new();
            let resp = respond::error(sse.surface, &e);
            cx.edge().count_request(label, resp.status);
            encode(&resp, false, false, &mut out);
            let _ = write_all(stream, &out).await;
            return;
        }
    };
    cx.edge().count_request(label, 200);
    let base64 = !sse_is_text(&r.info.content_type);
    // Every later read names the creation the first one found: a session
    // ends (as on a delete) rather than follow a new stream at its path.
    let incarnation = Some(r.info.incarnation);
    let mut out = Vec::with_capacity(4096);
    sse_head(base64, &r.info.incarnation.token(), &mut out);
    loop {
        events(&r, base64, &mut out);
        if write_all(stream, &out).await.is_err() || r.closed_at_end || stop.is_stopped() {
            return;
        }
        out.clear();
        if started.elapsed() >= Duration::from_millis(SSE_CONNECTION_MS_MAX) {
            return;
        }
        let live = if r.up_to_date { Live::LongPoll } else { Live::Sse };
        r = match read(cx, &sse, incarnation, ReadFrom::At(r.next_offset), live).await {
            Ok(Outcome::Read(next)) => next,
            _ => return,
        };
    }
}

/// One read of the session's stream on its owner, of the creation
/// `if_incarnation` names, if it names one.
async fn read<C: ConnContext + ?Sized>(
    cx: &C,
    sse: &SseRead,
    if_incarnation: Option<Incarnation>,
    from: ReadFrom,
    live: Live,
) -> Reply {
    let cursor = sse.read.cursor.clone();
    let op = StreamOp::Read(ReadReq { from, live, cursor, if_none_match: None });
    let req = ShardRequest::Stream { key: sse.key.clone(), surface: sse.surface, if_incarnation, op };
    let owner = owner(cx, &req);
    cx.shard().run(owner, req).await
}

/// A read's events: its data, if any, then where the next read starts.
fn events(r: &ReadOutcome, base64: bool, out: &mut Vec<u8>) {
    if r.has_data() {
        sse::data_event(out, &r.body, base64);
    }
    // The cursor comes from the stream's shard (its clock, its jitter).
    sse::control_event(out, r.next_offset, r.cursor, r.up_to_date, r.closed_at_end);
}
