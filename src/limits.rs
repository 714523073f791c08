//! Every bound in the server, named once, units last.
//!
//! Why one file: a limit that lives next to the code using it is easy to
//! change without noticing what depends on it. The compile-time asserts at the
//! bottom keep the relations between limits true.

/// O_DIRECT alignment we write with. 4 KiB covers every common logical block
/// size (512 B and 4 KiB sectors), so a segment written on one device stays
/// valid on another.
pub const DIRECT_IO_ALIGNMENT_BYTES: u64 = 4096;
/// The unit a device writes atomically on power loss (a logical sector):
/// recovery assumes a sector holds either its old or its new bytes, never a
/// mix. The fault-injection backend tears writes at these boundaries.
pub const SECTOR_BYTES: u64 = 512;

/// Default size of one segment file. Also the bound on the in-memory mirror
/// of the active segment that serves recent reads.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// Smallest segment size accepted (tests use small segments to force rollover).
pub const SEGMENT_BYTES_MIN: u64 = 64 * 1024;
/// Largest segment size accepted.
pub const SEGMENT_BYTES_MAX: u64 = 1024 * 1024 * 1024;
/// Bytes of zeros per write when a new segment file is zero-filled. Small,
/// so that a paced fill (made ahead of use) adds little to any one of the
/// log's cache flushes, which must also flush what the fill wrote.
pub const ZERO_CHUNK_BYTES: u64 = 256 * 1024;
/// A segment made ahead of use is zero-filled in step with the active one:
/// by the time the active segment is this fraction full (numerator over
/// denominator), its successor is ready.
pub const ZERO_AHEAD_DONE_AT: (u64, u64) = (3, 4);

/// Batch marks a replicated (batched) log keeps in memory, newest first
/// (about 48 bytes each, so 3 MiB a shard): an older entry is found by
/// reading the closes of the one segment it is in.
pub const BATCH_MARKS_KEPT: usize = 65_536;

/// Size of a record header on disk.
pub const RECORD_HEADER_BYTES: usize = 32;
/// Largest record body. A record must fit in one segment with its header.
pub const RECORD_BODY_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Largest value kept in a two-slot file (`storage/slots.rs`, a replica's
/// term and vote): a slot is one block, so a torn write stays in the slot it
/// aimed at, and this is that block less the slot's 20-byte header and
/// 4-byte checksum.
pub const SLOT_PAYLOAD_BYTES_MAX: usize = DIRECT_IO_ALIGNMENT_BYTES as usize - 24;

/// Largest request body accepted (an append or an initial PUT body). Beyond
/// it the request gets 413. Keeps one request from pinning unbounded memory.
pub const REQUEST_BODY_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// Largest request head (request line + headers): beyond it, 431.
pub const REQUEST_HEADER_BYTES_MAX: usize = 32 * 1024;
/// Most header fields in one request: beyond it, 431.
pub const REQUEST_HEADER_COUNT_MAX: usize = 64;

/// Bytes of appends accepted but not yet durable, per shard. Beyond it new
/// appends get 503 + Retry-After instead of growing memory. The default of
/// `--max-pending-bytes`.
pub const SHARD_PENDING_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Smallest `--max-pending-bytes` accepted. A single append larger than the
/// bound is still taken when nothing else is pending, so a small bound
/// throttles without refusing large requests forever.
pub const SHARD_PENDING_BYTES_MIN: u64 = 64 * 1024;
/// Seconds a client is told to wait on backpressure.
pub const RETRY_AFTER_SECS: u64 = 1;
/// Seconds a client is told to wait when a shard refuses writes until an
/// operator acts (its disk failed or filled up) or a shard is unreachable.
pub const RETRY_AFTER_UNAVAILABLE_SECS: u64 = 5;

/// Largest body of one catch-up read response; longer ranges are cut at a
/// record boundary and the client continues from Stream-Next-Offset.
pub const READ_CHUNK_BYTES_MAX: usize = 1024 * 1024;

/// Idle time allowed between requests on a keep-alive connection.
pub const CONN_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Time allowed for one read while a request is being received.
pub const CONN_READ_TIMEOUT_MS: u64 = 30_000;
/// Time allowed for one socket write.
pub const CONN_WRITE_TIMEOUT_MS: u64 = 30_000;
/// A whole request head must arrive within this time of its first byte, or
/// the connection gets 408 and is closed (slowloris: a trickle of header
/// bytes cannot hold a connection). The default of `--header-timeout-ms`.
pub const CONN_HEADER_TIMEOUT_MS: u64 = 10_000;
/// A whole request body must arrive within this time of the end of its head,
/// or 408 and close. 120 s lets a maximal body (16 MiB) come at ~140 KB/s.
/// The default of `--body-timeout-ms`.
pub const CONN_BODY_TIMEOUT_MS: u64 = 120_000;
/// Smallest `--header-timeout-ms` / `--body-timeout-ms` accepted.
pub const CONN_REQUEST_TIMEOUT_MS_MIN: u64 = 100;
/// After an error answer that closes the connection, unread request bytes
/// are read and dropped for at most this long (and at most
/// CONN_LINGER_BYTES_MAX), so closing with unread data (a TCP reset) does
/// not destroy the answer before the client reads it.
pub const CONN_LINGER_MS: u64 = 1_000;
pub const CONN_LINGER_BYTES_MAX: usize = 1024 * 1024;
/// Open connections per shard (the default of `--max-connections`). A new
/// connection beyond it closes the connection that has waited longest for
/// its next request; when none is waiting, the newcomer gets 503.
pub const SHARD_CONNECTIONS_MAX: usize = 16 * 1024;
/// Refusals (503 to a connection over the bound) being written at once per
/// shard; beyond it a refused connection is closed without an answer.
pub const SHARD_REFUSALS_IN_FLIGHT_MAX: usize = 64;
/// Bytes one socket read may return (per-connection read space).
pub const CONN_READ_CHUNK_BYTES: usize = 16 * 1024;
/// A connection whose last CONN_MOVE_STREAK requests all went to the same
/// other shard moves to that shard (its socket is handed over), so that its
/// next requests run where they land instead of crossing cores each time.
pub const CONN_MOVE_STREAK: u32 = 3;
/// At most this many moves per connection: a client that alternates between
/// streams of different shards settles instead of bouncing between them.
pub const CONN_MOVES_MAX: u8 = 4;

/// Deepest nesting of arrays/objects accepted in a JSON-mode body; deeper
/// gets 400. 128 is serde_json's recursion limit, so every message stored
/// can be parsed back by common recursive parsers.
pub const JSON_DEPTH_MAX: usize = 128;

/// Long-poll timeout default and bounds (milliseconds).
pub const LONG_POLL_TIMEOUT_MS_DEFAULT: u64 = 20_000;
pub const LONG_POLL_TIMEOUT_MS_MAX: u64 = 600_000;

/// An SSE connection is closed after this long so clients reconnect from
/// their last offset (F72), which lets CDNs collapse requests.
pub const SSE_CONNECTION_MS_MAX: u64 = 60_000;

/// Graceful shutdown (SIGTERM/SIGINT): the process exits 0 once every shard
/// drained and synced, and exits 1 (with an error line) if that takes longer
/// than this.
pub const SHUTDOWN_TIMEOUT_MS: u64 = 10_000;
/// During shutdown, how long connections get to finish their request in
/// flight before the shards make their final sync anyway.
pub const SHUTDOWN_DRAIN_MS: u64 = 5_000;
/// Largest value the latency histograms of /metrics track (microseconds);
/// longer latencies count as this.
pub const HISTOGRAM_LATENCY_US_MAX: u64 = 60_000_000;
/// Largest group-commit batch (records per flush) the batch histogram tracks.
pub const HISTOGRAM_BATCH_RECORDS_MAX: u64 = 1 << 20;

/// A boot in which no shard reported progress for this long is reported
/// (a warning naming each shard's step) and waited for; see
/// `server::next_boot_message`.
pub const BOOT_STALL_SECS: u64 = 10;

/// Accepted appends remembered per idempotent producer, so that a retried
/// duplicate answers with its original offset.
pub const PRODUCER_ACKS_KEPT: usize = 16;

/// Idempotent producers whose state a stream holds at once (the default of
/// `--max-producers-per-stream`): an append from a producer beyond it gets
/// 429 until one of them has been idle for `--producer-idle-expiry-secs`.
pub const PRODUCERS_PER_STREAM_DEFAULT: usize = 4_096;
/// Largest `--max-producers-per-stream` accepted: a stream's whole state,
/// producers included, must fit one state record (checked below).
pub const PRODUCERS_PER_STREAM_MAX: usize = 32_768;
/// A producer whose last accepted append is older than this is forgotten
/// (the default of `--producer-idle-expiry-secs`: 7 days).
pub const PRODUCER_IDLE_EXPIRY_SECS_DEFAULT: u64 = 7 * 24 * 3600;
/// Longest `Producer-Id` accepted (bytes); longer gets 400. Bounds what one
/// producer's state costs in memory and in a state record.
pub const PRODUCER_ID_BYTES_MAX: usize = 256;
/// Longest `Stream-Seq` accepted (bytes); longer gets 400. A stream keeps
/// its last one in memory and in its state record.
pub const STREAM_SEQ_BYTES_MAX: usize = 256;
/// Bytes one producer takes at most in a state record: its id, epoch, last
/// seq, last append time, the count and the remembered acks (3 u64 each).
pub const PRODUCER_RECORD_BYTES_MAX: usize = 8 + PRODUCER_ID_BYTES_MAX + 4 * 8 + PRODUCER_ACKS_KEPT * 24;
/// Bytes of a state record besides its producers, allowed for when a full
/// producer table is checked to fit one record (`--max-producers-per-stream`
/// against `--segment-bytes`): names, lifetime, fork, closer, Stream-Seq and
/// the snapshot list take about 3 KiB at their limits; content types, whose
/// length only the request head bounds, get the rest.
pub const STATE_RECORD_REST_BYTES: usize = 16 * 1024;

/// The largest state record of a stream holding `producers` producers (a
/// function of the limits above, not a limit of its own).
pub(crate) const fn state_record_bytes_max(producers: usize) -> usize {
    producers * PRODUCER_RECORD_BYTES_MAX + STATE_RECORD_REST_BYTES
}

/// Snapshots kept per stream: publishing one more forgets the oldest.
pub const SNAPSHOTS_PER_STREAM_MAX: usize = 8;
/// Interval of each shard's reclaim pass (segment deletion, TTL sweep).
pub const RECLAIM_INTERVAL_MS: u64 = 1_000;
/// State records one reclaim pass may re-log to free old segments.
pub const RECLAIM_RELOG_MAX: usize = 4_096;

/// Tiered storage: how long the object store may take to accept a TCP
/// connection before a job fails (the store counts as down).
pub const TIER_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Tiered storage: the longest a range read, delete or listing may take
/// (retries included); a cold read past it answers 503.
pub const TIER_REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Tiered storage: the longest one segment upload (and its verification) may take.
pub const TIER_UPLOAD_TIMEOUT_MS: u64 = 120_000;
/// Tiered storage: cold reads fetch whole blocks of this size (aligned in the
/// segment), so a catch-up read of a cold range costs one GET per block.
pub const TIER_BLOCK_BYTES: u64 = 1024 * 1024;
/// Tiered storage: fetched blocks kept in memory per shard (least recently
/// used go first).
pub const TIER_CACHE_BYTES: u64 = 32 * 1024 * 1024;
/// Tiered storage: segment moves a shard runs at once (each waits mostly
/// on the object store), oldest first, as far as [`TIER_UPLOAD_BYTES_MAX`] allows.
pub const TIER_MOVES_MAX: usize = 4;
/// Tiered storage: bytes of segments a shard holds in memory for uploads at
/// once (an upload reads its segment whole); at least one segment always.
pub const TIER_UPLOAD_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Tiered storage: the first wait after a failed upload; it doubles per
/// failure up to [`TIER_RETRY_MAX_MS`].
pub const TIER_RETRY_MIN_MS: u64 = 500;
/// Tiered storage: the longest wait between upload attempts.
pub const TIER_RETRY_MAX_MS: u64 = 30_000;
/// Tiered storage: a shard's share of `--hot-bytes` must hold at least this
/// many segments (the active one, the one prepared ahead, and one sealed).
pub const TIER_HOT_SEGMENTS_MIN: u64 = 3;

/// Most shards (executors) one server runs.
pub const SHARDS_MAX: usize = 256;

/// glommio I/O memory per executor (DMA buffer pool).
pub const EXECUTOR_IO_MEMORY_BYTES: usize = 4 * 1024 * 1024;
/// glommio 0.9 refuses to start an executor when RLIMIT_MEMLOCK is below
/// this (its `Reactor::new`), whatever the capabilities; see `preflight`.
pub const GLOMMIO_MEMLOCK_FLOOR_BYTES: u64 = 512 * 1024;
/// glommio preemption timer: how long the executor runs ready tasks before
/// it goes back to polling its rings when they never run out (each task
/// still runs to its next await; completions are reaped whenever the run
/// queue empties, which under load is every few tasks). A shard has one
/// task queue, so the timer only bounds that batch. Unpatched glommio armed
/// it anew on every turn of its loop, and at 500 µs that cost about 16 %
/// more CPU per append than at 10 ms (paired runs in docs/benchmarks-journal.md,
/// issue 14 after the first levers;
/// likely because a deadline before the kernel's next tick reprograms the
/// timer device, a VM exit here); patched, it keeps a timer due between
/// half and all of the period away (vendor/glommio/PATCHES.md, 5).
pub const EXECUTOR_PREEMPT_TIMER_US: u64 = 10_000;

/// Bucket IDs (snakream.md): `[a-z0-9_-]{4,64}`.
pub const BUCKET_ID_BYTES_MIN: usize = 4;
pub const BUCKET_ID_BYTES_MAX: usize = 64;
/// Stream IDs on /ds (snakream.md).
pub const DS_STREAM_ID_BYTES_MAX: usize = 122;
/// Stream paths on /v1 (after `/v1/stream/`).
pub const V1_PATH_BYTES_MAX: usize = 1024;
/// Largest (and default) page of a bucket listing (snakream.md: 1-1000).
/// Each shard sends the owner at most this many entries per listing.
pub const BUCKET_LIST_LIMIT_MAX: usize = 1000;

/// Largest auth file (`--auth-file`) accepted.
pub const AUTH_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// Most `[[token]]` entries in an auth file.
pub const AUTH_TOKENS_MAX: usize = 10_000;
/// Most `[[bucket]]` (quota) entries in an auth file.
pub const AUTH_QUOTAS_MAX: usize = 10_000;
/// Longest bearer token a request may present (it is hashed per request).
pub const AUTH_TOKEN_BYTES_MAX: usize = 1024;
/// How long a reload (SIGHUP) waits for every shard to count its streams
/// into the counters of newly limited buckets; past it the reload is
/// refused and the previous grants stay.
pub const RELOAD_COUNT_TIMEOUT_MS: u64 = 10_000;

/// A replica's Raft tick: heartbeats go out every 2 ticks and a follower
/// that hears none for 10 to 20 ticks stands for election, so a leader
/// that died is replaced in 0.5 to 1 s, and a leader that hears no majority
/// for as long steps down. At 10 ms a 2-core machine under load deposed
/// working leaders every few seconds (heartbeat answers late by 100 ms).
pub const CELL_TICK_MS: u64 = 50;

/// Replicated cells: fewest voters in a cell (`--cell`). Fewer tolerate no
/// failure at all: two need both for a majority.
pub const CELL_VOTERS_MIN: usize = 3;
/// Replicated cells: most voters in a cell. Each commit waits on a majority,
/// so more voters make every append slower for failures a cell of 7 (which
/// tolerates 3) does not plan for.
pub const CELL_VOTERS_MAX: usize = 7;
/// Replicated cells: how long a group's leader waits for a membership
/// change it proposed to be applied and, for a node added, for the node to
/// catch up and be made a voter; past it an add is answered "learner" (the
/// leader promotes it once caught up). Below CELL_FORWARD_TIMEOUT_MS, so a
/// change forwarded from a follower is answered, not timed out.
pub const CELL_MEMBER_WAIT_MS: u64 = 6_000;
/// Replicated cells: shortest shared secret (`--cell-secret-file`), bytes:
/// 128 bits, what HMAC-SHA256 needs against guessing.
pub const CELL_SECRET_BYTES_MIN: usize = 16;
/// Replicated cells: longest shared secret, bytes (the file is read whole).
pub const CELL_SECRET_BYTES_MAX: usize = 4096;
/// Replicated cells: largest frame on a peer link, bytes after its length
/// prefix (kind and body). A longer length is refused before anything is
/// allocated for it; Raft's messages are kept well under it by their sender.
pub const CELL_FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Replicated cells: largest entry a leader proposes, bytes (one
/// group-commit batch). raft-rs sends at least one entry per message
/// whatever its size, so an entry must fit a frame with room to spare.
pub const CELL_ENTRY_BYTES_MAX: usize = CELL_FRAME_BYTES_MAX / 2;
/// Replicated cells: bytes a leader holds proposed and not yet committed;
/// past it proposals are refused (busy) until commits catch up, so a leader
/// cut off from its peers stops taking data at once, not only when
/// check-quorum deposes it.
pub const CELL_UNCOMMITTED_BYTES_MAX: u64 = SHARD_PENDING_BYTES_MAX;
/// Replicated cells: committed bytes one turn of a group hands out to be
/// applied (a restarted replica applies its log in turns of this size).
pub const CELL_APPLY_BYTES_PER_TURN: u64 = 16 * 1024 * 1024;
/// Replicated cells: bytes queued for one peer at most (with
/// CELL_LINK_QUEUE_FRAMES); past either a frame is dropped and counted.
pub const CELL_LINK_QUEUE_BYTES: usize = 64 * 1024 * 1024;
/// Segment shipping: the bytes of a sealed segment one fetch asks its
/// leader for (a multiple of DIRECT_IO_ALIGNMENT_BYTES, so each chunk but a
/// file's last is written as it came). One is in flight at a time.
pub const CELL_SHIP_CHUNK_BYTES: usize = 1024 * 1024;
/// Segment shipping: how long one chunk's answer may take.
pub const CELL_SHIP_CHUNK_TIMEOUT_MS: u64 = 10_000;
/// Segment shipping: how long a replica that boots with no segment waits
/// for its peers' manifests (a new cell's nodes answer "none" as soon as
/// their links are up; a peer that is up and does not answer costs this
/// long). With `--cell-join` it waits until a peer offers segments or
/// every peer answered, however long.
pub const CELL_SHIP_BOOT_WAIT_MS: u64 = 5_000;
/// Replicated cells: how long a peer link's data may go unacknowledged by
/// the peer's kernel before the connection is dropped and dialled again
/// (TCP_USER_TIMEOUT). Heartbeats flow every 100 ms, so a link silent this
/// long crosses a broken path; without it a healed partition left links
/// waiting on TCP's retransmission backoff for seconds to minutes.
pub const CELL_LINK_STALL_MS: u64 = 2_000;
/// Replicated cells: peer handshakes in progress at once on one listener;
/// a connection past it is closed at once (a flood of half-open
/// connections cannot take the process's descriptors).
pub const CELL_HANDSHAKES_MAX: usize = 16;
/// Replicated cells: frames queued for one peer (and frames arrived and
/// not yet stepped) at most; past it a frame is dropped and counted (Raft
/// resends what matters), so a peer that is down or slow costs bounded memory.
pub const CELL_LINK_QUEUE_FRAMES: usize = 4096;
/// Replicated cells: requests a replica that does not lead has forwarded to
/// its leader and still waits on, at most; past it a request is answered
/// 503 at once. A leader runs at most this many per follower.
pub const CELL_FORWARDS_MAX: usize = 1024;
/// Replicated cells: how long a follower waits for its leader's answer to a
/// forwarded request (a write waits there for its commit); then 503, so a
/// node cut off from its leader answers a write within 10 s. A forwarded
/// long-poll waits the long-poll timeout more.
pub const CELL_FORWARD_TIMEOUT_MS: u64 = 8_000;
/// Replicated cells: how long a follower that knows no reachable leader
/// (an election under way, the leader just died) holds a request that must
/// go to the leader, looking again every tick, before it answers 503.
pub const CELL_LEADER_WAIT_MS: u64 = 2_000;
/// Replicated cells: how many times a write of one record (a create, an
/// append, a delete, a retention) runs when it comes back discarded before
/// it was proposed (the lead changed hands meanwhile: nothing of it was
/// written anywhere), a tick apart, before the client gets the 503.
pub const CELL_DISCARDED_RUNS_MAX: usize = 4;
/// Replicated cells: requests a leader holds while it confirms that it still
/// leads before answering them (a freshness claim: HEAD, a 404, a read at
/// the tail); past it a request is answered 503 at once. Room for every
/// follower's forwards and as many of its own.
pub const CELL_CONFIRMS_MAX: usize = CELL_VOTERS_MAX * CELL_FORWARDS_MAX;
/// Replicated cells: live reads (long-poll, SSE) and reads that claim
/// freshness (at the tail, HEAD, a 404) a follower holds while it catches
/// up with what its leader had committed when they arrived (one read index
/// round, then the apply: `cell::catch_up`); past it such a read there
/// answers 503 at once (a catch-up read with data: its data, not "up to
/// date"). A waiting read costs a few dozen bytes.
pub const CELL_CATCH_UPS_MAX: usize = 16_384;
/// Replicated cells: ticks a leader waits for a majority to confirm that it
/// still leads (one read index round) before those waiting get 503: two
/// election timeouts, by when check-quorum has stepped a leader cut off
/// from its majority down. A healthy round takes one round trip; a lost
/// heartbeat is made good at the next (every 2 ticks).
pub const CELL_CONFIRM_TICKS: u64 = 20;
/// Replicated cells: how long `POST`/`DELETE /_cell/members/{id}` may go
/// on making its change in every group, group after group: a group that
/// answers 503 (an election or a hand-over under way) is asked again every
/// CELL_MEMBERS_RETRY_MS until then; no attempt starts after it, and the
/// client gets that group's 503 (the groups before it keep the change).
pub const CELL_MEMBERS_DEADLINE_MS: u64 = 30_000;
/// Replicated cells: the pause before a group that answered a membership
/// change 503 is asked again (two ticks: a new leader's first entry has
/// about that long to commit).
pub const CELL_MEMBERS_RETRY_MS: u64 = 100;
/// Subscriptions (`__ds/subscriptions`): how many one stream root (`/v1/stream`,
/// or one `/ds` bucket) may hold; a PUT past it answers 429. Every shard
/// keeps the registry of every subscription's pattern, so this bounds that too.
pub const SUBSCRIPTIONS_PER_ROOT_MAX: usize = 1_024;
/// Subscriptions: streams one subscription tracks at most (explicit ones and
/// those its pattern matched), so its record and its GET stay bounded.
pub const SUBSCRIPTION_STREAMS_MAX: usize = 256;
/// Subscriptions: bytes of a subscription's id, pattern, description,
/// webhook URL, wake stream or worker name, at most.
pub const SUBSCRIPTION_FIELD_BYTES_MAX: usize = 1_024;
/// Subscriptions: a wake's lease, milliseconds: the least, the default and
/// the most a subscription may ask (`lease_ttl_ms`).
pub const SUBSCRIPTION_LEASE_MS_MIN: u64 = 1_000;
pub const SUBSCRIPTION_LEASE_MS_DEFAULT: u64 = 30_000;
pub const SUBSCRIPTION_LEASE_MS_MAX: u64 = 600_000;
/// Subscriptions: how often an owner looks for work to hand out besides
/// when told (leases that ran out, retries that came due), milliseconds.
pub const SUBSCRIPTION_TICK_MS: u64 = 200;
/// Webhooks: the first retry's delay and the longest, milliseconds (doubling
/// in between, each with up to 20 % jitter).
pub const WEBHOOK_RETRY_MIN_MS: u64 = 1_000;
pub const WEBHOOK_RETRY_MAX_MS: u64 = 60_000;
/// Webhooks: deliveries queued for (or running on) the delivery thread at
/// once, all shards together; past it a delivery waits for its retry.
pub const WEBHOOK_QUEUE_MAX: usize = 4_096;
/// Webhooks: how long one delivery may take (connect, send, answer).
pub const WEBHOOK_TIMEOUT_MS: u64 = 10_000;
/// Webhooks: bytes of a receiver's answer read at most.
pub const WEBHOOK_ANSWER_BYTES_MAX: usize = 64 * 1024;

const _: () = assert!(SEGMENT_BYTES_DEFAULT.is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES));
const _: () = assert!(SEGMENT_BYTES_MIN.is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES));
const _: () = assert!(DIRECT_IO_ALIGNMENT_BYTES.is_multiple_of(SECTOR_BYTES));
const _: () = assert!(SEGMENT_BYTES_MIN <= SEGMENT_BYTES_DEFAULT);
const _: () = assert!(SEGMENT_BYTES_DEFAULT <= SEGMENT_BYTES_MAX);
// A maximal request body must fit in one record and one record in a default segment.
const _: () = assert!(REQUEST_BODY_BYTES_MAX as usize + 4096 <= RECORD_BODY_BYTES_MAX);
// (plus the seal every segment ends with: a header and an 8-byte body)
const _: () = assert!((RECORD_BODY_BYTES_MAX + 2 * RECORD_HEADER_BYTES + 8) as u64 <= SEGMENT_BYTES_DEFAULT);
// Backpressure must admit at least one maximal request.
const _: () = assert!(SHARD_PENDING_BYTES_MAX >= REQUEST_BODY_BYTES_MAX);
const _: () = assert!(SHARD_PENDING_BYTES_MIN <= SHARD_PENDING_BYTES_MAX);
const _: () = assert!(LONG_POLL_TIMEOUT_MS_DEFAULT <= LONG_POLL_TIMEOUT_MS_MAX);
const _: () = assert!(SHUTDOWN_DRAIN_MS + 1_000 <= SHUTDOWN_TIMEOUT_MS);
const _: () = assert!(CONN_REQUEST_TIMEOUT_MS_MIN <= CONN_HEADER_TIMEOUT_MS);
const _: () = assert!(CONN_REQUEST_TIMEOUT_MS_MIN <= CONN_BODY_TIMEOUT_MS);
const _: () = assert!(AUTH_TOKEN_BYTES_MAX + 64 <= REQUEST_HEADER_BYTES_MAX);
const _: () = assert!(CELL_VOTERS_MIN % 2 == 1 && CELL_VOTERS_MAX % 2 == 1 && CELL_VOTERS_MIN <= CELL_VOTERS_MAX);
const _: () = assert!(CELL_SECRET_BYTES_MIN <= CELL_SECRET_BYTES_MAX);
// A stream's full producer table (plus room for the rest of its state) fits one state record.
const _: () = assert!(state_record_bytes_max(PRODUCERS_PER_STREAM_MAX) <= RECORD_BODY_BYTES_MAX);
const _: () = assert!(PRODUCERS_PER_STREAM_DEFAULT <= PRODUCERS_PER_STREAM_MAX);
const _: () = assert!(CELL_ENTRY_BYTES_MAX + 1024 * 1024 <= CELL_FRAME_BYTES_MAX);
const _: () = assert!(CELL_ENTRY_BYTES_MAX <= CELL_LINK_QUEUE_BYTES);
// A round outlives a lost heartbeat (one goes out every 2 ticks).
const _: () = assert!(CELL_CONFIRM_TICKS > 2);
const _: () = assert!(CELL_MEMBERS_RETRY_MS < CELL_MEMBERS_DEADLINE_MS);
const _: () = assert!(SUBSCRIPTION_LEASE_MS_MIN <= SUBSCRIPTION_LEASE_MS_DEFAULT);
const _: () = assert!(SUBSCRIPTION_LEASE_MS_DEFAULT <= SUBSCRIPTION_LEASE_MS_MAX);
const _: () = assert!(WEBHOOK_RETRY_MIN_MS <= WEBHOOK_RETRY_MAX_MS);
// A subscription's whole record (every stream's path and cursor) fits one record.
const _: () = assert!(
    SUBSCRIPTION_STREAMS_MAX * (V1_PATH_BYTES_MAX + 256) + 16 * SUBSCRIPTION_FIELD_BYTES_MAX <= RECORD_BODY_BYTES_MAX
);
