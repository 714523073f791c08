//! Outcomes and errors to HTTP responses: the only place that knows status
//! codes, and where the /ds and /v1 dialects differ (snakream.md's table).

use crate::limits::RETRY_AFTER_UNAVAILABLE_SECS;
use crate::protocol::{digits, Bootstrap, Error, Listing, Outcome, QuotaKind, StreamInfo, Surface};
use std::fmt::Write;

/// A response before serialisation.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub close: bool,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response { status, headers: Vec::new(), body: Vec::new(), close: false }
    }
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
    fn text(mut self, msg: &str) -> Self {
        self.body = format!("{msg}\n").into_bytes();
        self.header("Content-Type", "text/plain; charset=utf-8")
    }
}

const EXPOSE: &str = "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, \
Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, \
Producer-Received-Seq, ETag, Content-Type, Location, Retry-After, Stream-Snapshot-Offset, WWW-Authenticate";

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "",
    }
}

fn encode_head(r: &Response, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    digits::push_decimal(out, u64::from(r.status));
    out.push(b' ');
    out.extend_from_slice(reason(r.status).as_bytes());
    out.extend_from_slice(b"\r\n");
    super::date::write_header(out);
    for (k, v) in &r.headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // On every response, errors included (F107-F109).
    out.extend_from_slice(b"X-Content-Type-Options: nosniff\r\nCross-Origin-Resource-Policy: cross-origin\r\nAccess-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: ");
    out.extend_from_slice(EXPOSE.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The head of an SSE response: no Content-Length, the body ends when the
/// connection closes (F64).
pub fn sse_head(base64: bool, out: &mut Vec<u8>) {
    let mut r = Response::new(200).header("Content-Type", "text/event-stream").header("Cache-Control", "no-cache");
    if base64 {
        r = r.header("Stream-SSE-Data-Encoding", "base64");
    }
    encode_head(&r.header("Connection", "close"), out);
    out.extend_from_slice(b"\r\n");
}

/// Serialises a response. `head_only`: HEAD request, no body bytes.
pub fn encode(r: &Response, head_only: bool, keep_alive: bool, out: &mut Vec<u8>) {
    encode_head(r, out);
    if r.status != 204 && r.status != 304 && r.status >= 200 {
        out.extend_from_slice(b"Content-Length: ");
        digits::push_decimal(out, r.body.len() as u64);
        out.extend_from_slice(b"\r\n");
    }
    if !keep_alive || r.close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only && r.status != 204 && r.status != 304 {
        out.extend_from_slice(&r.body);
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

/// The headers every answer about a stream carries (moves the ETag out of `info`).
fn stream_headers(mut r: Response, info: &mut StreamInfo) -> Response {
    r = r.header("Stream-Next-Offset", info.next_offset.to_string()).header("ETag", std::mem::take(&mut info.etag));
    if info.closed {
        r = r.header("Stream-Closed", "true");
    }
    r
}

/// The response to a successful outcome. `location`: absolute URL of the
/// request path, for 201.
pub fn outcome(surface: Surface, o: Outcome, location: impl FnOnce() -> String) -> Response {
    match o {
        Outcome::Created { mut info, new } => {
            let mut r = Response::new(if new { 201 } else { 200 }).header("Content-Type", info.content_type.clone());
            if new {
                r = r.header("Location", location());
            }
            stream_headers(r, &mut info)
        }
        Outcome::Appended { mut info, producer, duplicate, close_only } => {
            let status = match (surface, &producer) {
                (Surface::Ds, _) => 200,
                (Surface::V1, None) => 204,
                (Surface::V1, Some(_)) if duplicate || close_only => 204,
                (Surface::V1, Some(_)) => 200,
            };
            let mut r = stream_headers(Response::new(status), &mut info);
            if let Some(p) = producer {
                r = r.header("Producer-Epoch", p.epoch.to_string()).header("Producer-Seq", p.seq.to_string());
            }
            r
        }
        Outcome::Read(rd) => {
            if rd.not_modified {
                let mut r = Response::new(304);
                if let Some(e) = rd.etag {
                    r = r.header("ETag", e);
                }
                return r;
            }
            if rd.timed_out {
                // Long-poll without data: timeout, or closed at the tail (F58/F59).
                let mut r = Response::new(204)
                    .header("Stream-Next-Offset", rd.next_offset.to_string())
                    .header("Stream-Up-To-Date", "true")
                    .header("Cache-Control", "no-store");
                if let Some(c) = rd.cursor {
                    r = r.header("Stream-Cursor", c.to_string());
                }
                if rd.closed_at_end {
                    r = r.header("Stream-Closed", "true");
                }
                return r;
            }
            let at_tail_open_ds = surface == Surface::Ds
                && rd.up_to_date
                && !rd.closed_at_end
                && rd.next_offset == rd.info.next_offset
                && !rd.has_data();
            let mut r = Response::new(if at_tail_open_ds { 204 } else { 200 })
                .header("Content-Type", rd.info.content_type.clone())
                .header("Stream-Next-Offset", rd.next_offset.to_string());
            if rd.up_to_date {
                r = r.header("Stream-Up-To-Date", "true");
            }
            if rd.closed_at_end {
                r = r.header("Stream-Closed", "true");
            }
            if let Some(e) = rd.etag {
                r = r.header("ETag", e);
            }
            if let Some(c) = rd.cursor {
                r = r.header("Stream-Cursor", c.to_string());
            }
            let cache = if rd.offset_now {
                "no-store"
            } else if rd.up_to_date {
                // The tail moves: let caches revalidate with the ETag.
                "no-cache"
            } else {
                // A range strictly before the tail never changes.
                "public, max-age=60, stale-while-revalidate=300"
            };
            r = r.header("Cache-Control", cache);
            r.body = rd.body;
            r
        }
        Outcome::Head { info, not_modified: true } => Response::new(304).header("ETag", info.etag),
        Outcome::Head { mut info, .. } => {
            let mut r = stream_headers(Response::new(200), &mut info)
                .header("Content-Type", info.content_type.clone())
                .header("Cache-Control", "no-store");
            if let Some(t) = info.ttl_secs {
                r = r.header("Stream-TTL", t.to_string());
            }
            if let Some(e) = &info.expires_at {
                r = r.header("Stream-Expires-At", e.clone());
            }
            if let Some(o) = info.snapshot_offset {
                r = r.header("Stream-Snapshot-Offset", o.to_string());
            }
            r
        }
        Outcome::SnapshotPublished { info, offset } => Response::new(204)
            .header("Stream-Next-Offset", info.next_offset.to_string())
            .header("ETag", info.etag)
            .header("Stream-Snapshot-Offset", offset.to_string()),
        Outcome::SnapshotAt { offset } => Response::new(307)
            .header("Location", format!("{}/{offset}", location()))
            .header("Stream-Snapshot-Offset", offset.to_string())
            .header("Cache-Control", "no-store"),
        Outcome::Snapshot { info, offset, content_type, body } => {
            let up_to_date = offset == info.next_offset;
            snapshot_answer(
                content_type,
                info.next_offset,
                offset.to_string(),
                up_to_date,
                up_to_date && info.closed,
                body,
            )
        }
        Outcome::Bootstrap(b) => bootstrap(b),
        Outcome::Deleted | Outcome::BucketDeleted => Response::new(204),
        Outcome::BucketCreated => Response::new(201),
        Outcome::BucketInfo { bucket, streams } => {
            let mut r = Response::new(200).header("Content-Type", "application/json");
            r.body = bucket_json(&bucket, streams).into_bytes();
            r
        }
        Outcome::Listing(l) => {
            let mut r =
                Response::new(200).header("Content-Type", "application/json").header("Cache-Control", "no-store");
            r.body = listing_json(&l).into_bytes();
            r
        }
    }
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
    next_offset: crate::protocol::Offset,
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
        Error::Conflict(m) => Response::new(409).text(m),
        Error::TooLarge => Response::new(413).text("payload too large"),
        Error::StreamClosed { next_offset } => Response::new(409)
            .header("Stream-Closed", "true")
            .header("Stream-Next-Offset", next_offset.to_string())
            .text("stream is closed"),
        Error::StaleEpoch { current } => Response::new(if surface == Surface::Ds { 409 } else { 403 })
            .header("Producer-Epoch", current.to_string())
            .text(&e.to_string()),
        Error::SeqGap { expected, received } => Response::new(409)
            .header("Producer-Expected-Seq", expected.to_string())
            .header("Producer-Received-Seq", received.to_string())
            .text(&e.to_string()),
        Error::PreconditionFailed => Response::new(412).text(&e.to_string()),
        Error::Overloaded { retry_after_secs } => {
            Response::new(503).header("Retry-After", retry_after_secs.to_string()).text(&e.to_string())
        }
        Error::Unavailable(m) => {
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

pub fn preflight() -> Response {
    Response::new(204)
        .header("Access-Control-Allow-Methods", "GET, HEAD, PUT, POST, DELETE, OPTIONS")
        .header("Access-Control-Allow-Headers", "*, Authorization, Content-Type, If-Match, If-None-Match, Stream-Closed, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset, Producer-Id, Producer-Epoch, Producer-Seq")
        .header("Access-Control-Max-Age", "86400")
}

pub fn plain(status: u16, msg: &str) -> Response {
    Response::new(status).text(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ListedStream, Offset};

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
