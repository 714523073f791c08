//! HTTP/1.1 edge: bytes -> requests -> shard requests -> responses.
//!
//! `parse` (httparse, "incomplete" is not an error) -> `route` (the request's
//! class, once) -> `guard` (who may: the bearer token against the grants) ->
//! the shard's `Dispatch` -> `respond` (status dialect) -> `encode` (HTTP/1.1
//! on the wire). `conn` is the glommio side (socket I/O, admission and moves,
//! the keep-alive loop, SSE sessions), `gate` bounds its connections.
//! `members` is the one request the edge runs on every shard in turn: a
//! change of the cell's members, made in each group.

pub mod affinity;
pub mod conn;
pub mod encode;
pub mod forwarded;
pub mod gate;
pub mod guard;
pub mod members;
pub mod parse;
pub mod respond;
pub mod route;
pub mod sse;
pub mod stop;
