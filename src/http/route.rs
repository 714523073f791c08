//! Turns a parsed request into a typed shard request: method + path + query
//! + headers -> (stream key, operation). No I/O, and no storage.

use super::parse::{Method, RequestHead};
use crate::protocol::headers::{parse_lifetime, parse_producer, stream_closed_requested};
use crate::protocol::names::{split_v1_path, validate_bucket_id, validate_ds_stream_id};
use crate::protocol::offset::{parse_read_from, ReadFrom};
use crate::protocol::{AppendReq, BucketOp, CreateReq, Error, Live, ReadReq, StreamKey, StreamOp, Surface};
use crate::shard::router::ShardRequest;

#[derive(Debug)]
pub enum Route {
    /// Run on the owning shard.
    Shard(ShardRequest),
    /// CORS preflight.
    Options,
    /// Server counters.
    Metrics,
}

/// Routing failures the HTTP edge answers itself.
#[derive(Debug, PartialEq, Eq)]
pub enum RouteError {
    Protocol(Error),
    MethodNotAllowed(&'static str),
    NotImplemented(&'static str),
}

impl From<Error> for RouteError {
    fn from(e: Error) -> Self {
        RouteError::Protocol(e)
    }
}

fn bad(msg: &str) -> RouteError {
    RouteError::Protocol(Error::BadRequest(msg.into()))
}

pub fn surface_of(path: &str) -> Surface {
    if path.starts_with("/ds/") || path == "/ds" {
        Surface::Ds
    } else {
        Surface::V1
    }
}

pub fn route(head: &RequestHead, body: Vec<u8>) -> Result<Route, RouteError> {
    if head.method == Method::Options {
        return Ok(Route::Options);
    }
    let path = head.path.as_str();
    if path == "/metrics" {
        return match head.method {
            Method::Get => Ok(Route::Metrics),
            _ => Err(RouteError::MethodNotAllowed("GET")),
        };
    }
    if let Some(rest) = path.strip_prefix("/v1/stream/") {
        let (bucket, stream) = split_v1_path(rest)?;
        let key = StreamKey { bucket, stream };
        return stream_route(head, body, key, Surface::V1);
    }
    if let Some(rest) = path.strip_prefix("/ds/") {
        let mut parts = rest.splitn(2, '/');
        let bucket = parts.next().unwrap_or_default();
        validate_bucket_id(bucket)?;
        return match parts.next() {
            None | Some("") => {
                let op = match head.method {
                    Method::Put => BucketOp::Create,
                    Method::Get => BucketOp::Get,
                    Method::Delete => BucketOp::Delete,
                    _ => return Err(RouteError::MethodNotAllowed("PUT, GET, DELETE")),
                };
                Ok(Route::Shard(ShardRequest::Bucket { bucket: bucket.to_string(), op }))
            }
            Some("streams") => Err(RouteError::NotImplemented("listing streams is not implemented yet")),
            Some(stream) => {
                if stream.contains('/') {
                    return Err(RouteError::NotImplemented("snapshots and bootstrap are not implemented yet"));
                }
                validate_ds_stream_id(stream)?;
                let key = StreamKey { bucket: bucket.to_string(), stream: stream.to_string() };
                stream_route(head, body, key, Surface::Ds)
            }
        };
    }
    Err(RouteError::Protocol(Error::NotFound))
}

fn stream_route(head: &RequestHead, body: Vec<u8>, key: StreamKey, surface: Surface) -> Result<Route, RouteError> {
    let h = |name: &str| head.header(name).map(str::to_string);
    let op = match head.method {
        Method::Put => {
            if head.header("stream-forked-from").is_some() || head.header("stream-fork-sub-offset").is_some() {
                return Err(RouteError::NotImplemented("forks are not implemented yet"));
            }
            StreamOp::Create(CreateReq {
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
            stream_seq: h("stream-seq"),
            producer: parse_producer(head.header("producer-id"), head.header("producer-epoch"), head.header("producer-seq"))?,
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
        Method::Head => StreamOp::Head,
        Method::Delete => StreamOp::Delete,
        _ => return Err(RouteError::MethodNotAllowed("GET, HEAD, PUT, POST, DELETE, OPTIONS")),
    };
    Ok(Route::Shard(ShardRequest::Stream { key, surface, op }))
}
