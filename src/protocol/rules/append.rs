//! Appends (F19–F33): closure, content type, Stream-Seq, If-Match and the
//! producer rules, in the conflict precedence of F27.

use super::producer::{check_producer, ProducerState, ProducerVerdict};
use crate::protocol::error::Error;
use crate::protocol::headers::{content_types_match, etag_matches, ProducerHeaders};
use crate::protocol::offset::Offset;
use crate::protocol::op::AppendReq;

/// What the shard knows about a stream when it checks an append.
pub struct AppendContext<'a> {
    pub content_type: &'a str,
    pub closed: bool,
    pub next_offset: Offset,
    pub etag: &'a str,
    pub last_stream_seq: Option<&'a str>,
    /// State of the request's producer, if it sent producer headers and is known.
    pub producer: Option<ProducerState>,
    /// The producer tuple that closed the stream, if one did (F33 retries).
    pub closed_by: Option<&'a (String, u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendVerdict {
    /// Write `req.body` (and/or close). `producer`: the state to store.
    Write { producer: Option<ProducerHeaders> },
    /// Idempotent retry: answer with this, write nothing.
    Duplicate { epoch: u64, highest_seq: u64 },
    /// Close-only request on a stream that is already closed (F37): 204, nothing written.
    AlreadyClosed,
}

/// F19–F33 and F27's conflict precedence: closed, then content type, then
/// Stream-Seq; producer de-duplication before Stream-Seq.
pub fn check_append(cx: &AppendContext<'_>, req: &AppendReq) -> Result<AppendVerdict, Error> {
    if let Some(want) = &req.if_match {
        if !etag_matches(want, cx.etag) {
            return Err(Error::PreconditionFailed);
        }
    }
    if req.body.is_empty() && !req.close {
        return Err(Error::BadRequest("empty body: an append needs data, or Stream-Closed: true to close".into()));
    }
    let producer_verdict = req.producer.as_ref().map(|p| check_producer(cx.producer.as_ref(), p.epoch, p.seq));
    if cx.closed {
        // F33: a retry of the very request that closed the stream is a duplicate.
        if let (Some(p), Some((id, epoch, seq))) = (&req.producer, cx.closed_by) {
            if &p.id == id && p.epoch == *epoch && p.seq == *seq {
                return Ok(AppendVerdict::Duplicate { epoch: p.epoch, highest_seq: p.seq });
            }
        }
        if let Some(Ok(ProducerVerdict::Duplicate { epoch, highest_seq })) = producer_verdict {
            return Ok(AppendVerdict::Duplicate { epoch, highest_seq });
        }
        // Closing twice is idempotent, but only for a plain close-only
        // request: with producer headers the tuple must be the closing one.
        if req.close && req.body.is_empty() && req.producer.is_none() {
            return Ok(AppendVerdict::AlreadyClosed);
        }
        return Err(Error::StreamClosed { next_offset: cx.next_offset });
    }
    if !req.body.is_empty() {
        match &req.content_type {
            None => return Err(Error::BadRequest("Content-Type is required with a body".into())),
            Some(ct) if !content_types_match(ct, cx.content_type) => {
                return Err(Error::Conflict(format!(
                    "Content-Type {ct:?} does not match the stream's {:?}",
                    cx.content_type
                )))
            }
            Some(_) => {}
        }
    }
    match producer_verdict {
        Some(Err(e)) => return Err(e),
        Some(Ok(ProducerVerdict::Duplicate { epoch, highest_seq })) => {
            return Ok(AppendVerdict::Duplicate { epoch, highest_seq })
        }
        _ => {}
    }
    if let (Some(seq), Some(last)) = (&req.stream_seq, cx.last_stream_seq) {
        if seq.as_bytes() <= last.as_bytes() {
            return Err(Error::Conflict(format!("Stream-Seq {seq:?} is not greater than the last accepted {last:?}")));
        }
    }
    Ok(AppendVerdict::Write { producer: req.producer.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: &[u8], ct: Option<&str>) -> AppendReq {
        AppendReq {
            content_type: ct.map(Into::into),
            body: body.to_vec(),
            close: false,
            stream_seq: None,
            producer: None,
            if_match: None,
        }
    }

    fn cx<'a>(closed: bool) -> AppendContext<'a> {
        AppendContext {
            content_type: "text/plain",
            closed,
            next_offset: Offset::new(0, 10),
            etag: "\"1.1:10\"",
            last_stream_seq: Some("5"),
            producer: None,
            closed_by: None,
        }
    }

    #[test]
    fn conflict_precedence_f27() {
        // Closed wins over a content-type mismatch and a Stream-Seq regression.
        let mut r = req(b"x", Some("application/json"));
        r.stream_seq = Some("1".into());
        assert_eq!(check_append(&cx(true), &r), Err(Error::StreamClosed { next_offset: Offset::new(0, 10) }));
        // Then content type beats Stream-Seq.
        assert!(matches!(check_append(&cx(false), &r), Err(Error::Conflict(m)) if m.contains("Content-Type")));
        r.content_type = Some("TEXT/plain; charset=utf-8".into());
        assert!(matches!(check_append(&cx(false), &r), Err(Error::Conflict(m)) if m.contains("Stream-Seq")));
        r.stream_seq = Some("6".into());
        assert_eq!(check_append(&cx(false), &r), Ok(AppendVerdict::Write { producer: None }));
    }

    #[test]
    fn stream_seq_is_byte_order() {
        let mut c = cx(false);
        c.last_stream_seq = Some("2");
        let mut r = req(b"x", Some("text/plain"));
        r.stream_seq = Some("10".into());
        assert!(check_append(&c, &r).is_err(), "\"10\" < \"2\" in byte order");
        c.last_stream_seq = Some("09");
        assert!(check_append(&c, &r).is_ok());
    }

    #[test]
    fn empty_body_needs_close_and_close_ignores_content_type() {
        assert!(matches!(check_append(&cx(false), &req(b"", None)), Err(Error::BadRequest(_))));
        let mut r = req(b"", Some("application/json"));
        r.close = true;
        assert!(check_append(&cx(false), &r).is_ok());
        assert!(matches!(check_append(&cx(false), &req(b"x", None)), Err(Error::BadRequest(_))));
    }

    #[test]
    fn if_match_mismatch_is_412() {
        let mut r = req(b"x", Some("text/plain"));
        r.if_match = Some("\"nope\"".into());
        assert_eq!(check_append(&cx(false), &r), Err(Error::PreconditionFailed));
        r.if_match = Some("\"1.1:10\"".into());
        assert!(check_append(&cx(false), &r).is_ok());
    }

    #[test]
    fn closing_tuple_retry_is_duplicate() {
        let tuple = ("p".to_string(), 1, 3);
        let mut c = cx(true);
        c.closed_by = Some(&tuple);
        let mut r = req(b"", None);
        r.close = true;
        r.producer = Some(ProducerHeaders { id: "p".into(), epoch: 1, seq: 3 });
        assert_eq!(check_append(&c, &r), Ok(AppendVerdict::Duplicate { epoch: 1, highest_seq: 3 }));
        r.producer = Some(ProducerHeaders { id: "p".into(), epoch: 1, seq: 4 });
        assert!(matches!(check_append(&c, &r), Err(Error::StreamClosed { .. })));
        // Without producer headers a second close is idempotent; an append is not.
        r.producer = None;
        assert_eq!(check_append(&c, &r), Ok(AppendVerdict::AlreadyClosed));
        r.body = b"x".to_vec();
        assert!(matches!(check_append(&c, &r), Err(Error::StreamClosed { .. })));
    }
}
