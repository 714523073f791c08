//! One HTTP/1.1 connection, top-down: [`admit`] takes it (or refuses it),
//! [`adopt`] takes one another shard moved here (`admit.rs`, with the move
//! itself); `requests.rs` runs its keep-alive loop and gives the answers
//! that need no shard; `sse_session.rs` serves an SSE read; `io.rs` reads
//! and writes the socket within its deadlines. Requests reach their shard
//! through the shard's [`Dispatch`], where they run decided once per request.

mod admit;
mod io;
mod requests;
mod sse_session;

pub use admit::{admit, adopt};

use super::stop::Stop;
use crate::auth::access::Access;
use crate::metrics::EdgeMetrics;
use crate::shard::message::{Dispatch, MovedConnection};
use std::rc::Rc;

/// What the connection loop needs from its shard and from the server.
pub trait ConnContext {
    /// The shard, through which requests reach their owner.
    type Shard: Dispatch;
    fn shard(&self) -> &Self::Shard;
    /// Text for GET /metrics (gathered from every shard).
    fn metrics(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + '_>>;
    /// This shard's HTTP counters.
    fn edge(&self) -> &EdgeMetrics;
    /// This shard's stop broadcast (graceful shutdown).
    fn stop(&self) -> &Rc<Stop>;
    /// For GET /readyz: recovery finished, every shard serves, and the
    /// server is not shutting down.
    fn ready(&self) -> bool;
    /// Why the server serves only in part (tiered storage: the object store
    /// is down), for GET /readyz; None when whole.
    fn degraded(&self) -> Option<&'static str> {
        None
    }
    /// For GET /leaderz: whether this node leads every group of its cell
    /// and lets each shard write (a single node always does), and why.
    fn leaderz(&self) -> (bool, String) {
        (true, "single node: it takes every write".to_string())
    }
    /// For GET /cellz: the cell as this node sees it, as JSON; None when
    /// the node is not in a cell.
    fn cellz(&self) -> Option<String> {
        None
    }
    /// Hands a connection to shard `to`, which serves it from then on; gives
    /// it back when that shard cannot take it.
    fn move_to(&self, to: usize, c: MovedConnection) -> Result<(), MovedConnection>;
    /// `--trust-proxy`: absolute URLs follow `Forwarded` / `X-Forwarded-*`.
    fn trust_proxy(&self) -> bool;
    /// The grants in force; None when access control is off.
    fn access(&self) -> Option<&Access>;
    /// This shard's id (its slot in per-token counters).
    fn shard_id(&self) -> usize;
    /// How many shards the node runs: in a cell, its groups (shard *i*'s
    /// replica is of group *i*).
    fn shards(&self) -> usize;
}
