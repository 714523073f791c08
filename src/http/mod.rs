//! HTTP/1.1 edge: bytes -> requests -> shard requests -> responses.
//!
//! `parse` (httparse, "incomplete" is not an error) -> `route` (typed op) ->
//! `guard` (who may: the bearer token against the grants) -> shard dispatch ->
//! `respond` (status dialect). `conn` is the glommio loop, `gate` bounds its connections.

pub mod affinity;
pub mod conn;
pub mod date;
pub mod forwarded;
pub mod gate;
pub mod guard;
pub mod parse;
pub mod respond;
pub mod route;
pub mod sse;
pub mod stop;
