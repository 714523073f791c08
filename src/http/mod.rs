//! HTTP/1.1 edge: bytes -> requests -> shard requests -> responses.
//!
//! `parse` (httparse, "incomplete" is not an error) -> `route` (the request's
//! class, once) -> `guard` (who may: the bearer token against the grants) ->
//! the shard's `Dispatch` -> `respond` (status dialect) -> `encode` (HTTP/1.1
//! on the wire). `conn` is the glommio side (socket I/O, admission and moves,
//! the keep-alive loop, SSE sessions), `gate` bounds its connections.

pub mod affinity;
pub mod conn;
pub mod encode;
pub mod forwarded;
pub mod gate;
pub mod guard;
pub mod parse;
pub mod respond;
pub mod route;
pub mod sse;
pub mod stop;
