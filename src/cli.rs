//! Settings -> [`Config`]: command-line flags, `RINGSTREAM_*` environment
//! variables and an optional TOML file (`--config`).
//!
//! Precedence, per setting: flag > environment variable > config file >
//! built-in default. An invalid value, or an unknown key in the file, fails
//! at startup with a message that names the setting and where the value came
//! from. docs/operations.md lists every setting.

use crate::cell::config::{CellConfig, CellConfigError};
use crate::config::DirectIoMode;
use crate::config::{online_cpus, Config, LogFormat, TierConfig};
use crate::limits::state_record_bytes_max;
use crate::limits::{
    CONN_BODY_TIMEOUT_MS, CONN_HEADER_TIMEOUT_MS, CONN_REQUEST_TIMEOUT_MS_MIN, LONG_POLL_TIMEOUT_MS_DEFAULT,
    LONG_POLL_TIMEOUT_MS_MAX, PRODUCERS_PER_STREAM_DEFAULT, PRODUCERS_PER_STREAM_MAX,
    PRODUCER_IDLE_EXPIRY_SECS_DEFAULT, PRODUCER_RECORD_BYTES_MAX, SEGMENT_BYTES_DEFAULT, SEGMENT_BYTES_MAX,
    SEGMENT_BYTES_MIN, SHARDS_MAX, SHARD_CONNECTIONS_MAX, SHARD_PENDING_BYTES_MAX, SHARD_PENDING_BYTES_MIN,
    STATE_RECORD_REST_BYTES, TIER_HOT_SEGMENTS_MIN,
};
use crate::tier::S3Settings;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, ValueEnum};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// ringstream: a durable-streams HTTP server.
///
/// Serves the product API under /ds/{bucket}/{stream} and the base Durable
/// Streams protocol under /v1/stream/{path} over one storage engine. One
/// pinned io_uring executor per shard; every append is acknowledged only
/// after it is on stable storage (group-committed O_DIRECT|O_DSYNC write,
/// or buffered write + fdatasync without O_DIRECT).
///
/// Every setting can be given as a flag, as the environment variable shown,
/// or as a key in the --config TOML file (the flag name without `--`, e.g.
/// `data-dir = "/var/lib/ringstream"`). A flag beats the environment, which
/// beats the file, which beats the default. See docs/operations.md.
///
/// Access control: with --auth-file, every request but /healthz, /readyz
/// and CORS preflights needs `Authorization: Bearer <token>` with a token
/// of the file. Without it the server is open to whoever reaches the port,
/// so it listens only on loopback unless --no-auth says otherwise.
///
/// Replicated cell: --node-id, --cell and --cell-secret-file, all three or
/// none, make this node one voter of a cell of 3, 5 or 7 nodes, where an
/// append is acknowledged only once its batch is durable on a majority of
/// them. Any node takes any request: a follower forwards writes (and what
/// only the leader can vouch for) to the leader and serves reads from its
/// committed records. Shard i of every node forms Raft group i. With
/// --tier, the leader of each group moves its segments to the object store
/// once for the whole cell (every node names the same bucket and prefix, no
/// other cell the same). Without them the server is a single node.
///
/// Subscriptions (`{root}/__ds/`): webhooks are signed with the Ed25519 key
/// in `webhook-signing.key` in the data directory (made at the first start;
/// in a cell derived from the cell secret). SIGHUP loads it again, with a
/// rotation's `webhook-signing.next.key` and `.previous.key`, published
/// beside it. See docs/operations.md, Subscriptions.
#[derive(Debug, Parser)]
#[command(version = crate::build_info::LONG_VERSION, about, long_about)]
pub struct Cli {
    /// TOML file of settings (keys: the flag names without `--`). Unknown
    /// keys are an error. Default: none.
    #[arg(long, env = "RINGSTREAM_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Address to listen on (every shard listens on it with SO_REUSEPORT).
    /// Port 0 picks a free port; the chosen address is printed at startup.
    #[arg(long, default_value = "127.0.0.1:4437", env = "RINGSTREAM_LISTEN")]
    pub listen: SocketAddr,

    /// Directory for the segment logs (one sub-directory per shard). Created
    /// if missing. A directory written with N shards must be served with N;
    /// only one server may use it at a time (ringstream.lock).
    #[arg(long, default_value = "./data", env = "RINGSTREAM_DATA_DIR")]
    pub data_dir: PathBuf,

    /// Number of shards (executors, one per core), 1 to 256. [default: the
    /// number of online CPUs]
    #[arg(long, env = "RINGSTREAM_SHARDS")]
    pub shards: Option<usize>,

    /// O_DIRECT use: `required` fails at boot if the data directory's file
    /// system cannot do it; `optional` uses it where possible; `disabled`
    /// uses buffered writes. Every mode makes a write durable (O_DSYNC, or
    /// fdatasync) before acknowledging it.
    #[arg(long, value_enum, default_value = "optional", env = "RINGSTREAM_DIRECT_IO")]
    pub direct_io: DirectIoMode,

    /// How long a long-poll read waits at the tail before answering 204
    /// (1 to 600000).
    #[arg(long, default_value_t = LONG_POLL_TIMEOUT_MS_DEFAULT, env = "RINGSTREAM_LONG_POLL_TIMEOUT_MS")]
    pub long_poll_timeout_ms: u64,

    /// Size of each segment file in bytes (advanced; a multiple of 4096,
    /// 65536 to 1073741824).
    #[arg(long, default_value_t = SEGMENT_BYTES_DEFAULT, env = "RINGSTREAM_SEGMENT_BYTES")]
    pub segment_bytes: u64,

    /// Per shard, bytes of appends accepted but not yet on disk beyond which
    /// new appends get 503 + Retry-After (backpressure; bounds memory). At
    /// least 65536; one append larger than it is still taken when nothing
    /// else is waiting.
    #[arg(long, default_value_t = SHARD_PENDING_BYTES_MAX, env = "RINGSTREAM_MAX_PENDING_BYTES")]
    pub max_pending_bytes: u64,

    /// Open connections per shard (at least 1). A new connection beyond it
    /// closes the connection that has waited longest for its next request
    /// (idle keep-alive, or a head still arriving); if every connection is
    /// busy with a request, the newcomer gets 503 + Retry-After.
    #[arg(long, default_value_t = SHARD_CONNECTIONS_MAX, env = "RINGSTREAM_MAX_CONNECTIONS")]
    pub max_connections: usize,

    /// A request head must be complete within this many milliseconds of its
    /// first byte, else 408 and the connection is closed (slowloris).
    #[arg(long, default_value_t = CONN_HEADER_TIMEOUT_MS, env = "RINGSTREAM_HEADER_TIMEOUT_MS")]
    pub header_timeout_ms: u64,

    /// A request body must be complete within this many milliseconds of the
    /// end of its head, else 408 and the connection is closed.
    #[arg(long, default_value_t = CONN_BODY_TIMEOUT_MS, env = "RINGSTREAM_BODY_TIMEOUT_MS")]
    pub body_timeout_ms: u64,

    /// Idempotent producers whose state one stream holds at most, 1 to
    /// 32768. An append from a producer the stream holds no state for,
    /// while it holds this many, gets 429 with a JSON body naming the limit
    /// (`producer_limit`) and writes nothing; the producers it knows go on.
    #[arg(long, default_value_t = PRODUCERS_PER_STREAM_DEFAULT, env = "RINGSTREAM_MAX_PRODUCERS_PER_STREAM", value_name = "N")]
    pub max_producers_per_stream: usize,

    /// A producer whose last accepted append is older than this many
    /// seconds (at least 1; default 7 days) is forgotten: it no longer
    /// counts toward --max-producers-per-stream, and its next append starts
    /// it anew (Producer-Seq 0), so retries older than this are not
    /// recognised as duplicates.
    #[arg(long, default_value_t = PRODUCER_IDLE_EXPIRY_SECS_DEFAULT, env = "RINGSTREAM_PRODUCER_IDLE_EXPIRY_SECS", value_name = "SECS")]
    pub producer_idle_expiry_secs: u64,

    /// Do not pin shard executors to CPUs (for running many test servers on
    /// a small machine; production wants pinning). The variable and the
    /// file key take true/false. [default: false]
    #[arg(long, env = "RINGSTREAM_NO_PIN", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_pin: bool,

    /// Log filter: a level (error, warn, info, debug, trace, off) or tracing
    /// directives such as `info,ringstream::storage=debug`. Without the flag
    /// or RINGSTREAM_LOG: `log-level` in the config file, then RUST_LOG.
    #[arg(long, default_value = "info", env = "RINGSTREAM_LOG", value_name = "FILTER")]
    pub log_level: String,

    /// Format of the log lines on stderr.
    #[arg(long, value_enum, default_value = "text", env = "RINGSTREAM_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// A reverse proxy that terminates TLS sits in front and sets
    /// `Forwarded` (proto=, host=) or `X-Forwarded-Proto` /
    /// `X-Forwarded-Host`: absolute URLs (`Location`) then use the scheme and
    /// host the client used. Without it those headers are ignored (any
    /// client could send them). The variable and the file key take
    /// true/false. [default: false]
    #[arg(long, env = "RINGSTREAM_TRUST_PROXY", value_parser = clap::builder::BoolishValueParser::new())]
    pub trust_proxy: bool,

    /// Check the settings, the host (io_uring, locked memory, O_DIRECT) and
    /// the data directory (not in use, storage format, shard count) as a
    /// start would, print what a start would use, and exit without serving:
    /// status 0 when a start would get past these checks, 78 (EX_CONFIG)
    /// with the reason when not. Creates nothing but the lock file of an
    /// existing data directory.
    #[arg(long)]
    pub check_config: bool,

    /// Make a new data directory (absent or empty) for this node of a cell
    /// whose every disk was lost, from the cell's objects in the object
    /// store (--tier s3 and its settings, and --cell, as the nodes ran
    /// with), then exit: for each group its segments there, checked, and
    /// the Raft state saying the last entry they close is committed. Run it
    /// on every node of the cell, then start them. What only the lost disks
    /// held (the hot tail, up to --hot-bytes a node) is gone.
    #[arg(long, conflicts_with = "check_config")]
    pub restore_from_tier: bool,

    /// Access control: a TOML file of bearer tokens (each with the buckets
    /// it covers, exact names or prefixes ending in `*`, and its rights:
    /// read, append, manage, admin) and bucket quotas (max_streams,
    /// max_bytes). Requests then need `Authorization: Bearer <token>`: none
    /// or an unknown one gets 401, a covered bucket without the right 403,
    /// a bucket the token does not cover 404. SIGHUP re-reads the file (one
    /// that does not parse keeps the grants in force). /healthz and /readyz
    /// stay open. See docs/operations.md, "Access control". Default: none.
    #[arg(long, env = "RINGSTREAM_AUTH_FILE", value_name = "PATH")]
    pub auth_file: Option<PathBuf>,

    /// Serve without access control on a non-loopback --listen address.
    /// Without --auth-file the server refuses to listen anywhere but
    /// loopback unless this is given; anyone who can reach the port may
    /// then read, write and delete every stream. The variable and the file
    /// key take true/false. [default: false]
    #[arg(long, env = "RINGSTREAM_NO_AUTH", value_parser = clap::builder::BoolishValueParser::new())]
    pub no_auth: bool,

    /// Tiered storage: `s3` moves sealed segments beyond --hot-bytes to an
    /// S3-compatible object store (--tier-endpoint, --tier-bucket) and reads
    /// cold ranges back from it; credentials only from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY. `none` keeps everything on the local disk.
    /// See docs/operations.md, "Tiered storage".
    #[arg(long, value_enum, default_value = "none", env = "RINGSTREAM_TIER")]
    pub tier: TierKind,

    /// Tiered storage: the object store's URL, e.g. `https://s3.eu-west-1.amazonaws.com`
    /// or `http://127.0.0.1:8333` (path-style requests). Default: none.
    #[arg(long, env = "RINGSTREAM_TIER_ENDPOINT", value_name = "URL")]
    pub tier_endpoint: Option<String>,

    /// Tiered storage: the bucket (it must exist). Default: none.
    #[arg(long, env = "RINGSTREAM_TIER_BUCKET", value_name = "NAME")]
    pub tier_bucket: Option<String>,

    /// Tiered storage: the region requests are signed for.
    #[arg(long, default_value = "us-east-1", env = "RINGSTREAM_TIER_REGION", value_name = "R")]
    pub tier_region: String,

    /// Tiered storage: keys start with `P/<node id>/shard-<i>/` (the node id
    /// is made once per data directory, so nodes may share a bucket and a
    /// prefix). In a cell `P/cell/shard-<group>/`, one copy for every node:
    /// each node of a cell names the same prefix, and each cell its own.
    #[arg(long, default_value = "ringstream", env = "RINGSTREAM_TIER_PREFIX", value_name = "P")]
    pub tier_prefix: String,

    /// Tiered storage: bytes of segment files (and skeletons of remote
    /// ones) the node keeps on its local disk, a plain integer, split evenly
    /// over the shards; each shard's share must hold at least 3 segments.
    /// Past it the oldest sealed segments go to the object store; while the
    /// store is down the disk overshoots (logged; ringstream_tier_local_bytes).
    /// Default: none.
    #[arg(long, env = "RINGSTREAM_HOT_BYTES", value_name = "N")]
    pub hot_bytes: Option<u64>,

    /// Replicated cell: this node's id, one of the ids in --cell. Give
    /// --node-id, --cell and --cell-secret-file together, or none of them
    /// (a single node). Default: none.
    #[arg(long, env = "RINGSTREAM_NODE_ID", value_name = "N")]
    pub node_id: Option<u64>,

    /// Replicated cell: its voters, `ID@HOST:PORT,...` (ids positive and
    /// unique), 3, 5 or 7 of them (tolerating 1, 2 or 3 down), every node
    /// started with the same list and the same --shards. Shard i of each
    /// node forms Raft group i, whose replica listens for its peers on the
    /// node's own PORT + i: each voter uses ports PORT to PORT + shards - 1
    /// (all at most 65535). In a cell an append is acknowledged only once
    /// its batch is durable (O_DIRECT|O_DSYNC, or fdatasync) on a majority
    /// of the voters, and reads show only what a majority holds. Any node
    /// takes any request (followers forward writes to the leader). Every
    /// group is steered to be led by the first voter of the list that is
    /// up; with more than one shard a node, requests that span groups
    /// (creates, deletes, bucket requests, listings, subscriptions, writes
    /// to a bucket with a quota) answer 503 while no node leads every group
    /// (a failover, seconds). Each node dials its peers from its own
    /// address in this list. Once the members change (POST/DELETE
    /// /_cell/members/{id}), each node keeps them with their addresses, and
    /// this list only says where the cell is. Default: none (a single node).
    #[arg(long, env = "RINGSTREAM_CELL", value_name = "ID@HOST:PORT,...")]
    pub cell: Option<String>,

    /// Replicated cell: a file holding the secret every voter shares, 16 to
    /// 4096 bytes (one trailing newline is not counted); peers prove they
    /// hold it (an HMAC-SHA256 challenge both ways) before any message
    /// crosses. A regular file that users other than its owner and group
    /// can neither read nor write (chmod 600). Only its length is printed.
    /// To rotate it without cutting a node off, PATH.next (then
    /// PATH.previous) holds one more secret peers may prove themselves with,
    /// read at start like PATH (docs/operations.md). Default: none.
    #[arg(long, env = "RINGSTREAM_CELL_SECRET_FILE", value_name = "PATH")]
    pub cell_secret_file: Option<PathBuf>,

    /// Replicated cell: this node lost its data, or joins a cell, and must
    /// copy its peers' before it takes part. With an empty data directory
    /// it waits, however long, until a peer offers its sealed segment files
    /// (or every peer says it holds none), copies them whole with the
    /// members its peers applied, and then catches up; a node new to the
    /// cell waits until it is added (POST /_cell/members/{id} on any node),
    /// and its --cell may name 2 to 8 nodes: itself and members it knows
    /// of. Without the flag an empty node does not wait for peers that are
    /// down (a new cell), and if they come back having reclaimed entries it
    /// needs, it must be restarted. A node that holds segments starts as
    /// always. The variable and the file key take true/false. [default:
    /// false]
    #[arg(long, env = "RINGSTREAM_CELL_JOIN", value_parser = clap::builder::BoolishValueParser::new())]
    pub cell_join: bool,
}

/// The tier settings as given (flags and environment, and the file's).
struct TierArgs {
    kind: TierKind,
    endpoint: Option<String>,
    bucket: Option<String>,
    region: String,
    prefix: String,
    hot_bytes: Option<u64>,
    file: FileSettings,
}

/// `--tier`: where sealed segments go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TierKind {
    /// Keep every segment on the local disk.
    None,
    /// Move sealed segments beyond --hot-bytes to an S3-compatible store.
    S3,
}

/// What the command line asks for: the configuration, and whether only to
/// check it (`--check-config`) or to restore a cell's node from the object
/// store (`--restore-from-tier`).
#[derive(Debug, Clone)]
pub struct Invocation {
    pub config: Config,
    pub check_only: bool,
    pub restore_only: bool,
}

/// The config file. Keys are the flag names; anything else is an error.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct FileSettings {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    shards: Option<usize>,
    direct_io: Option<String>,
    long_poll_timeout_ms: Option<u64>,
    segment_bytes: Option<u64>,
    max_pending_bytes: Option<u64>,
    max_connections: Option<usize>,
    header_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    max_producers_per_stream: Option<usize>,
    producer_idle_expiry_secs: Option<u64>,
    no_pin: Option<bool>,
    log_level: Option<String>,
    log_format: Option<String>,
    trust_proxy: Option<bool>,
    auth_file: Option<PathBuf>,
    no_auth: Option<bool>,
    tier: Option<String>,
    tier_endpoint: Option<String>,
    tier_bucket: Option<String>,
    tier_region: Option<String>,
    tier_prefix: Option<String>,
    hot_bytes: Option<u64>,
    node_id: Option<u64>,
    cell: Option<String>,
    cell_secret_file: Option<PathBuf>,
    cell_join: Option<bool>,
}

/// Parses the process's arguments and environment and resolves them.
/// `--help` and `--version` print and exit 0 here; a malformed flag or
/// value is an error like any other bad setting (the caller exits 78).
pub fn load() -> Result<Invocation, String> {
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => return Err(e.render().to_string().trim_end().trim_start_matches("error: ").to_string()),
    };
    let config = resolve(&matches, std::env::var("RUST_LOG").ok())?;
    let (check_only, restore_only) = (matches.get_flag("check_config"), matches.get_flag("restore_from_tier"));
    Ok(Invocation { config, check_only, restore_only })
}

/// Resolves parsed flags (which already include the environment), the
/// config file they name, and the RUST_LOG fallback into a [`Config`].
/// Each setting is checked in the order of the steps below; the first bad
/// one is the error.
pub fn resolve(matches: &ArgMatches, rust_log: Option<String>) -> Result<Config, String> {
    let cli = Cli::from_arg_matches(matches).map_err(|e| e.to_string())?;
    let file = match &cli.config {
        Some(path) => read_file(path)?,
        None => FileSettings::default(),
    };
    let r = Resolver { matches, command: Cli::command(), file_path: cli.config.as_deref() };
    let choices = FileChoices::parse(&r, &file)?;
    let (listen, listen_from) = r.pick("listen", cli.listen, choices.listen);
    let (data_dir, _) = r.pick("data_dir", cli.data_dir.clone(), file.data_dir.clone());
    let shards = resolve_shards(&r, cli.shards, file.shards)?;
    let (direct_io, _) = r.pick("direct_io", cli.direct_io, choices.direct_io);
    let long_poll_timeout_ms = resolve_long_poll(&r, cli.long_poll_timeout_ms, file.long_poll_timeout_ms)?;
    let segment_bytes = resolve_segment_bytes(&r, cli.segment_bytes, file.segment_bytes)?;
    let tier = resolve_tier(&r, &TierArgs::new(&cli, &file), shards, segment_bytes)?;
    let limits = Limits::resolve(&r, &cli, &file, segment_bytes)?;
    let (no_pin, _) = r.pick("no_pin", cli.no_pin, file.no_pin);
    let log_level = resolve_log_level(&r, cli.log_level.clone(), file.log_level.clone(), rust_log)?;
    let (log_format, _) = r.pick("log_format", cli.log_format, choices.log_format);
    let (trust_proxy, _) = r.pick("trust_proxy", cli.trust_proxy, file.trust_proxy);
    let auth_file = if r.explicit("auth_file").is_some() { cli.auth_file.clone() } else { file.auth_file.clone() };
    let (no_auth, _) = r.pick("no_auth", cli.no_auth, file.no_auth);
    check_access(listen, &listen_from, auth_file.is_some(), no_auth)?;
    let (mut cell, cell_secret_file) = resolve_cell(&r, &cli, &file, shards)?;
    let (cell_join, join_from) = r.pick("cell_join", cli.cell_join, file.cell_join);
    match &mut cell {
        Some(cell) => cell.join = cell_join,
        None if cell_join => {
            return Err(format!(
                "--cell-join (set by {join_from}) needs a cell: --node-id, --cell, --cell-secret-file"
            ));
        }
        None => {}
    }
    if let Some(cell) = &cell {
        check_peer_ports(listen, &listen_from, cell, shards)?;
    }
    Ok(Config {
        listen,
        data_dir,
        shards,
        direct_io,
        long_poll_timeout_ms,
        segment_bytes,
        max_pending_bytes: limits.max_pending_bytes,
        max_connections: limits.max_connections,
        header_timeout_ms: limits.header_timeout_ms,
        body_timeout_ms: limits.body_timeout_ms,
        max_producers_per_stream: limits.max_producers_per_stream,
        producer_idle_expiry_secs: limits.producer_idle_expiry_secs,
        pin: !no_pin,
        log_level,
        log_format,
        trust_proxy,
        auth_file,
        no_auth,
        tier,
        cell,
        cell_secret_file,
        config_file: cli.config,
    })
}

/// The file's settings that are text to be parsed into a type, parsed; the
/// error names the setting and the file.
struct FileChoices {
    listen: Option<SocketAddr>,
    direct_io: Option<DirectIoMode>,
    log_format: Option<LogFormat>,
}

impl FileChoices {
    fn parse(r: &Resolver, file: &FileSettings) -> Result<FileChoices, String> {
        let listen = match &file.listen {
            Some(s) => Some(s.parse::<SocketAddr>().map_err(|e| {
                format!(
                    "--listen: {s:?} is not an address like 127.0.0.1:4437 ({e}) (set by {})",
                    r.file_origin("listen")
                )
            })?),
            None => None,
        };
        let direct_io = file_choice(r, "direct-io", &file.direct_io, "required, optional, disabled")?;
        let log_format = file_choice(r, "log-format", &file.log_format, "text, json")?;
        Ok(FileChoices { listen, direct_io, log_format })
    }
}

/// A file setting that names one of a flag's values (`key`: the flag
/// without `--`; `allowed`: its values, for the error).
fn file_choice<T: ValueEnum>(
    r: &Resolver,
    key: &str,
    value: &Option<String>,
    allowed: &str,
) -> Result<Option<T>, String> {
    let Some(s) = value else { return Ok(None) };
    T::from_str(s, true)
        .map(Some)
        .map_err(|_| format!("--{key}: {s:?} is not one of {allowed} (set by {})", r.file_origin(key)))
}

/// `--shards`: the flag, the file, or the online CPUs; 1 to SHARDS_MAX.
fn resolve_shards(r: &Resolver, cli: Option<usize>, file: Option<usize>) -> Result<usize, String> {
    let (shards, from) = match r.explicit("shards") {
        Some(from) => (cli.unwrap_or(0), from),
        None => match file {
            Some(n) => (n, r.file_origin("shards")),
            None => (online_cpus(), "the default (online CPUs)".to_string()),
        },
    };
    if shards == 0 || shards > SHARDS_MAX {
        return Err(format!("--shards must be between 1 and {SHARDS_MAX}, got {shards} (set by {from})"));
    }
    Ok(shards)
}

fn resolve_long_poll(r: &Resolver, cli: u64, file: Option<u64>) -> Result<u64, String> {
    let (ms, from) = r.pick("long_poll_timeout_ms", cli, file);
    if ms == 0 || ms > LONG_POLL_TIMEOUT_MS_MAX {
        return Err(format!(
            "--long-poll-timeout-ms must be between 1 and {LONG_POLL_TIMEOUT_MS_MAX}, got {ms} (set by {from})"
        ));
    }
    Ok(ms)
}

fn resolve_segment_bytes(r: &Resolver, cli: u64, file: Option<u64>) -> Result<u64, String> {
    let (bytes, from) = r.pick("segment_bytes", cli, file);
    if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&bytes) || !bytes.is_multiple_of(4096) {
        return Err(format!(
            "--segment-bytes must be a multiple of 4096 between {SEGMENT_BYTES_MIN} and {SEGMENT_BYTES_MAX}, got {bytes} (set by {from})"
        ));
    }
    Ok(bytes)
}

/// The per-shard limits on pending bytes and connections, the request
/// deadlines, and the per-stream producer bound and expiry, each with its
/// bounds.
struct Limits {
    max_pending_bytes: u64,
    max_connections: usize,
    header_timeout_ms: u64,
    body_timeout_ms: u64,
    max_producers_per_stream: usize,
    producer_idle_expiry_secs: u64,
}

impl Limits {
    fn resolve(r: &Resolver, cli: &Cli, file: &FileSettings, segment_bytes: u64) -> Result<Limits, String> {
        let min_ms = CONN_REQUEST_TIMEOUT_MS_MIN;
        Ok(Limits {
            max_pending_bytes: r.pick_at_least(
                "max_pending_bytes",
                cli.max_pending_bytes,
                file.max_pending_bytes,
                SHARD_PENDING_BYTES_MIN,
            )?,
            max_connections: r.pick_at_least("max_connections", cli.max_connections, file.max_connections, 1)?,
            header_timeout_ms: r.pick_at_least(
                "header_timeout_ms",
                cli.header_timeout_ms,
                file.header_timeout_ms,
                min_ms,
            )?,
            body_timeout_ms: r.pick_at_least("body_timeout_ms", cli.body_timeout_ms, file.body_timeout_ms, min_ms)?,
            max_producers_per_stream: resolve_max_producers(r, cli, file, segment_bytes)?,
            producer_idle_expiry_secs: r.pick_at_least(
                "producer_idle_expiry_secs",
                cli.producer_idle_expiry_secs,
                file.producer_idle_expiry_secs,
                1,
            )?,
        })
    }
}

/// `--max-producers-per-stream`: 1 to PRODUCERS_PER_STREAM_MAX, and no more
/// than a state record in one segment holds (see [`producers_fitting`]).
/// The default is lowered to that where segments are small; a value given
/// that does not fit is refused.
fn resolve_max_producers(r: &Resolver, cli: &Cli, file: &FileSettings, segment_bytes: u64) -> Result<usize, String> {
    let (n, from) = r.pick("max_producers_per_stream", cli.max_producers_per_stream, file.max_producers_per_stream);
    if n == 0 || n > PRODUCERS_PER_STREAM_MAX {
        return Err(format!(
            "--max-producers-per-stream must be between 1 and {PRODUCERS_PER_STREAM_MAX}, got {n} (set by {from})"
        ));
    }
    let fits = producers_fitting(segment_bytes);
    if n <= fits {
        return Ok(n);
    }
    if r.explicit("max_producers_per_stream").is_none() && file.max_producers_per_stream.is_none() {
        return Ok(fits.max(1));
    }
    Err(format!(
        "--max-producers-per-stream {n} (set by {from}) does not fit --segment-bytes {segment_bytes}: a stream's \
         state record with that many producers takes up to {} bytes ({PRODUCER_RECORD_BYTES_MAX} per producer), and a \
         record in a segment of {segment_bytes} bytes holds at most {}; give at most {fits} producers, or larger \
         segments",
        state_record_bytes_max(n),
        crate::storage::record::body_max(segment_bytes)
    ))
}

/// The most producers whose full table fits one state record in a segment
/// of `segment_bytes`: else such a stream's state records could not be
/// written, and reclamation, which re-logs them, would stall.
pub(crate) fn producers_fitting(segment_bytes: u64) -> usize {
    let room = crate::storage::record::body_max(segment_bytes);
    (room.saturating_sub(STATE_RECORD_REST_BYTES) / PRODUCER_RECORD_BYTES_MAX).min(PRODUCERS_PER_STREAM_MAX)
}

/// `--log-level`: flag > file > RUST_LOG (when not blank) > the default;
/// checked by [`check_log_filter`].
fn resolve_log_level(
    r: &Resolver,
    cli: String,
    file: Option<String>,
    rust_log: Option<String>,
) -> Result<String, String> {
    let (level, from) = match r.explicit("log_level") {
        Some(from) => (cli, from),
        None => match (file, rust_log.filter(|s| !s.trim().is_empty())) {
            (Some(l), _) => (l, r.file_origin("log-level")),
            (None, Some(l)) => (l, "RUST_LOG".to_string()),
            (None, None) => (cli, "the default".to_string()),
        },
    };
    check_log_filter(&level).map_err(|e| format!("--log-level: {e} (set by {from})"))?;
    Ok(level)
}

impl TierArgs {
    fn new(cli: &Cli, file: &FileSettings) -> TierArgs {
        TierArgs {
            kind: cli.tier,
            endpoint: cli.tier_endpoint.clone(),
            bucket: cli.tier_bucket.clone(),
            region: cli.tier_region.clone(),
            prefix: cli.tier_prefix.clone(),
            hot_bytes: cli.hot_bytes,
            file: FileSettings {
                tier: file.tier.clone(),
                tier_endpoint: file.tier_endpoint.clone(),
                tier_bucket: file.tier_bucket.clone(),
                tier_region: file.tier_region.clone(),
                tier_prefix: file.tier_prefix.clone(),
                hot_bytes: file.hot_bytes,
                ..FileSettings::default()
            },
        }
    }
}

/// The `--tier*` and `--hot-bytes` settings: none, or every one that S3
/// needs, checked against the shard count and the segment size.
fn resolve_tier(r: &Resolver, a: &TierArgs, shards: usize, segment_bytes: u64) -> Result<Option<TierConfig>, String> {
    let file = &a.file;
    let file_tier = match &file.tier {
        Some(s) => Some(
            TierKind::from_str(s, true)
                .map_err(|_| format!("--tier: {s:?} is not one of none, s3 (set by {})", r.file_origin("tier")))?,
        ),
        None => None,
    };
    let (kind, _) = r.pick("tier", a.kind, file_tier);
    let opt = |id: &str, cli: &Option<String>, file: &Option<String>| match r.explicit(id) {
        Some(_) => cli.clone(),
        None => file.clone(),
    };
    let endpoint = opt("tier_endpoint", &a.endpoint, &file.tier_endpoint);
    let bucket = opt("tier_bucket", &a.bucket, &file.tier_bucket);
    let hot_bytes = if r.explicit("hot_bytes").is_some() { a.hot_bytes } else { file.hot_bytes };
    let (region, _) = r.pick("tier_region", a.region.clone(), file.tier_region.clone());
    let (prefix, _) = r.pick("tier_prefix", a.prefix.clone(), file.tier_prefix.clone());
    if kind == TierKind::None {
        if endpoint.is_some() || bucket.is_some() || hot_bytes.is_some() {
            return Err("--tier-endpoint, --tier-bucket and --hot-bytes take effect only with --tier s3".into());
        }
        return Ok(None);
    }
    let endpoint = endpoint.ok_or("--tier s3 needs --tier-endpoint URL")?;
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(format!("--tier-endpoint: {endpoint:?} is not an http:// or https:// URL"));
    }
    let bucket = bucket.filter(|b| !b.is_empty()).ok_or("--tier s3 needs --tier-bucket NAME")?;
    let prefix = prefix.trim_matches('/').to_string();
    let prefix_ok = |c: char| c.is_ascii_alphanumeric() || "-_./".contains(c);
    if prefix.is_empty() || !prefix.chars().all(prefix_ok) || prefix.split('/').any(|p| p.is_empty() || p == "..") {
        return Err(format!("--tier-prefix: {prefix:?} must be path segments of letters, digits, '-', '_', '.'"));
    }
    let hot_bytes = hot_bytes.ok_or("--tier s3 needs --hot-bytes N (the local budget, in bytes)")?;
    let floor = TIER_HOT_SEGMENTS_MIN * segment_bytes * shards as u64;
    if hot_bytes < floor {
        return Err(format!(
            "--hot-bytes {hot_bytes} leaves each of the {shards} shards less than {TIER_HOT_SEGMENTS_MIN} segments of \
             {segment_bytes} bytes (the active one, the one prepared ahead, one sealed): give at least {floor}"
        ));
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some(access_key_id), Some(secret_access_key)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
    else {
        return Err("--tier s3 needs the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into());
    };
    let s3 = S3Settings { endpoint, bucket, region, access_key_id, secret_access_key };
    Ok(Some(TierConfig { s3, prefix, hot_bytes }))
}

/// `--node-id`, `--cell`, `--cell-secret-file`: none of them (a single
/// node) or all three, resolved and checked by [`CellConfig::resolve`], and
/// each voter's peer ports (its PORT to PORT + shards - 1) real ports. The
/// error names the setting at fault and where its value came from. Returns
/// the cell and the file its secret was read from.
fn resolve_cell(
    r: &Resolver,
    cli: &Cli,
    file: &FileSettings,
    shards: usize,
) -> Result<(Option<CellConfig>, Option<PathBuf>), String> {
    let (node_id, node_from) = r.pick_opt("node_id", cli.node_id, file.node_id);
    let (spec, cell_from) = r.pick_opt("cell", cli.cell.clone(), file.cell.clone());
    let (secret_file, secret_from) =
        r.pick_opt("cell_secret_file", cli.cell_secret_file.clone(), file.cell_secret_file.clone());
    let origins = [("--node-id", node_from), ("--cell", cell_from), ("--cell-secret-file", secret_from)];
    let (join, _) = r.pick("cell_join", cli.cell_join, file.cell_join);
    let cell = CellConfig::resolve(node_id, spec.as_deref(), secret_file.as_deref(), join)
        .map_err(|e| format!("{e} ({})", cell_error_origin(&e, &origins)))?;
    let Some(cell) = cell else { return Ok((None, None)) };
    for voter in &cell.voters {
        if voter.group_ports(shards).is_none() {
            let (id, addr, port) = (voter.id, voter.addr, voter.addr.port());
            let last = u64::from(port) + shards as u64 - 1;
            return Err(format!(
                "--cell entry {id}@{addr}: with --shards {shards} its groups would listen on ports {port} to {last}, \
                 but a port is 1 to 65535: give it a port from 1 to {} (set by {})",
                65536 - shards,
                origins[1].1.as_deref().unwrap_or_default()
            ));
        }
    }
    Ok((Some(cell), secret_file))
}

/// The HTTP listener must not share a port with this node's peer
/// listeners (its `--cell` port and the next `shards - 1`) on an address
/// both take: both bind with SO_REUSEPORT, so the kernel would hand peers'
/// connections to the HTTP edge and clients' to the peer links.
fn check_peer_ports(listen: SocketAddr, listen_from: &str, cell: &CellConfig, shards: usize) -> Result<(), String> {
    let me = cell.me();
    let Some(ports) = me.group_ports(shards) else { return Ok(()) };
    let same_address = listen.ip() == me.addr.ip() || listen.ip().is_unspecified() || me.addr.ip().is_unspecified();
    if same_address && ports.contains(&listen.port()) {
        return Err(format!(
            "--listen {listen} (set by {listen_from}) takes port {}, which this node's peers use (--cell entry {}@{}: \
             ports {} to {} with --shards {shards}): give them different ports",
            listen.port(),
            me.id,
            me.addr,
            ports.start(),
            ports.end()
        ));
    }
    Ok(())
}

/// `set by X`: where the value at fault in `e` came from, given each cell
/// setting's origin (None: not given); for a missing setting, where those
/// that were given came from (`--cell set by X`).
fn cell_error_origin(e: &CellConfigError, origins: &[(&str, Option<String>); 3]) -> String {
    let [(_, node), (_, cell), (_, secret)] = origins;
    let from = match e {
        CellConfigError::Missing { .. } => {
            let given = origins.iter().filter_map(|(flag, from)| from.as_ref().map(|f| format!("{flag} set by {f}")));
            return given.collect::<Vec<_>>().join(", ");
        }
        CellConfigError::NotAVoter { .. } => node,
        CellConfigError::SecretIo { .. }
        | CellConfigError::SecretNotAFile { .. }
        | CellConfigError::SecretMode { .. }
        | CellConfigError::SecretSize { .. }
        | CellConfigError::SecretRotation { .. } => secret,
        _ => cell,
    };
    format!("set by {}", from.as_deref().unwrap_or_default())
}

/// The safe default: without an auth file the server serves loopback only,
/// unless `--no-auth` says that an open server on the network is meant.
fn check_access(listen: SocketAddr, listen_from: &str, auth_file: bool, no_auth: bool) -> Result<(), String> {
    if auth_file && no_auth {
        return Err("--auth-file and --no-auth contradict each other: give one of them".to_string());
    }
    if auth_file || no_auth || listen.ip().to_canonical().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "--listen {listen} (set by {listen_from}) is not a loopback address, and no --auth-file is given: \
         anyone who can reach it could read, append to and delete every stream. Either give --auth-file PATH \
         (bearer tokens scoped to buckets; docs/operations.md, \"Access control\"), or pass --no-auth \
         (RINGSTREAM_NO_AUTH=true) to serve without access control on purpose"
    ))
}

fn show(p: &Path) -> String {
    p.display().to_string()
}

fn read_file(path: &Path) -> Result<FileSettings, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config: reading {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("--config: {}: {}", path.display(), e.to_string().trim_end()))
}

struct Resolver<'a> {
    matches: &'a ArgMatches,
    command: clap::Command,
    file_path: Option<&'a Path>,
}

impl Resolver<'_> {
    /// Where a value given on the command line or in the environment came
    /// from; None when clap fell back to its default (or nothing).
    fn explicit(&self, id: &str) -> Option<String> {
        match self.matches.value_source(id) {
            Some(ValueSource::CommandLine) => Some(format!("--{}", id.replace('_', "-"))),
            Some(ValueSource::EnvVariable) => {
                let arg = self.command.get_arguments().find(|a| a.get_id() == id);
                let env = arg.and_then(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned());
                Some(env.unwrap_or_else(|| "the environment".to_string()))
            }
            _ => None,
        }
    }

    fn file_origin(&self, key: &str) -> String {
        format!("`{key}` in {}", self.file_path.map_or(String::new(), show))
    }

    /// flag > environment > file > clap's default.
    fn pick<T>(&self, id: &str, cli: T, file: Option<T>) -> (T, String) {
        match (self.explicit(id), file) {
            (Some(from), _) => (cli, from),
            (None, Some(v)) => (v, self.file_origin(&id.replace('_', "-"))),
            (None, None) => (cli, "the default".to_string()),
        }
    }

    /// flag > environment > file for a setting without a default; the value
    /// and where it came from (None when not given).
    fn pick_opt<T>(&self, id: &str, cli: Option<T>, file: Option<T>) -> (Option<T>, Option<String>) {
        match (self.explicit(id), file) {
            (Some(from), _) => (cli, Some(from)),
            (None, Some(v)) => (Some(v), Some(self.file_origin(&id.replace('_', "-")))),
            (None, None) => (None, None),
        }
    }

    /// [`Resolver::pick`] for a setting with a lower bound; the error names
    /// the flag, the bound, the value and where it came from.
    fn pick_at_least<T: PartialOrd + std::fmt::Display>(
        &self,
        id: &str,
        cli: T,
        file: Option<T>,
        min: T,
    ) -> Result<T, String> {
        let (v, from) = self.pick(id, cli, file);
        if v < min {
            return Err(format!("--{} must be at least {min}, got {v} (set by {from})", id.replace('_', "-")));
        }
        Ok(v)
    }
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// A log filter is a level, or comma-separated `tracing` directives. A bare
/// word that is not a level would silently mean "trace for target `<word>`",
/// so it is refused.
pub fn check_log_filter(filter: &str) -> Result<(), String> {
    if filter.trim().is_empty() {
        return Err("empty log filter; use one of off, error, warn, info, debug, trace".to_string());
    }
    for d in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !d.contains('=') && !d.contains('[') && !LEVELS.contains(&d.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{d:?} is not a level (off, error, warn, info, debug, trace) or a target=level directive"
            ));
        }
    }
    tracing_subscriber::EnvFilter::builder().parse(filter).map(|_| ()).map_err(|e| format!("{filter:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_args(args: &[&str], rust_log: Option<&str>) -> Result<Config, String> {
        let mut argv = vec!["ringstream"];
        argv.extend_from_slice(args);
        let m = Cli::command().try_get_matches_from(argv).map_err(|e| e.to_string())?;
        resolve(&m, rust_log.map(String::from))
    }

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ringstream-cli-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn the_file_fills_what_flags_leave_out_and_flags_win() {
        let f = temp_file("prec", "shards = 3\nsegment-bytes = 131072\nlog-level = \"warn\"\nno-pin = true\n");
        let path = f.to_str().unwrap();
        let c = resolve_args(&["--config", path, "--segment-bytes", "262144"], Some("debug")).unwrap();
        assert_eq!(c.shards, 3);
        assert_eq!(c.segment_bytes, 262144);
        assert_eq!(c.log_level, "warn", "the file beats RUST_LOG");
        assert!(!c.pin);
        let c = resolve_args(&[], Some("debug")).unwrap();
        assert_eq!(c.log_level, "debug", "RUST_LOG is the fallback");
        assert_eq!(c.segment_bytes, SEGMENT_BYTES_DEFAULT);
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn bad_values_name_the_setting_and_the_source() {
        let f = temp_file("bad", "segment-bytes = 1000\n");
        let e = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap_err();
        assert!(e.contains("--segment-bytes") && e.contains("`segment-bytes` in"), "{e}");
        let e = resolve_args(&["--shards", "0"], None).unwrap_err();
        assert!(e.contains("--shards must be between 1 and") && e.contains("(set by --shards)"), "{e}");
        std::fs::write(&f, "colour = \"blue\"\n").unwrap();
        let e = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap_err();
        assert!(e.contains("colour"), "{e}");
        std::fs::write(&f, "listen = \"nowhere\"\n").unwrap();
        let e = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap_err();
        assert!(e.contains("--listen") && e.contains("nowhere"), "{e}");
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn tiering_needs_every_setting_and_a_budget_of_three_segments_per_shard() {
        assert!(resolve_args(&[], None).unwrap().tier.is_none());
        let e = resolve_args(&["--hot-bytes", "100000000"], None).unwrap_err();
        assert!(e.contains("only with --tier s3"), "{e}");
        let e = resolve_args(&["--tier", "s3"], None).unwrap_err();
        assert!(e.contains("--tier-endpoint"), "{e}");
        let base = ["--tier", "s3", "--tier-endpoint", "http://127.0.0.1:8333", "--tier-bucket", "b"];
        let bad_url = ["--tier", "s3", "--tier-endpoint", "s3.example.com", "--tier-bucket", "b"];
        let e = resolve_args(&bad_url, None).unwrap_err();
        assert!(e.contains("not an http:// or https:// URL"), "{e}");
        let e = resolve_args(&base, None).unwrap_err();
        assert!(e.contains("--hot-bytes"), "{e}");
        let small = ["--shards", "2", "--segment-bytes", "1048576", "--hot-bytes", "6291455"];
        let e = resolve_args(&[&base[..], &small].concat(), None).unwrap_err();
        assert!(e.contains("give at least 6291456"), "{e}");
        let e = resolve_args(&[&base[..], &["--tier-prefix", "a/../b", "--hot-bytes", "1"]].concat(), None);
        assert!(e.unwrap_err().contains("--tier-prefix"));
    }

    #[test]
    fn a_network_address_needs_an_auth_file_or_no_auth() {
        let e = resolve_args(&["--listen", "0.0.0.0:4437"], None).unwrap_err();
        assert!(e.contains("--listen 0.0.0.0:4437 (set by --listen) is not a loopback address"), "{e}");
        assert!(e.contains("--auth-file PATH") && e.contains("--no-auth"), "both ways out: {e}");
        let e = resolve_args(&["--listen", "[::]:4437"], None).unwrap_err();
        assert!(e.contains("not a loopback"), "{e}");
        let c = resolve_args(&["--listen", "0.0.0.0:4437", "--no-auth"], None).unwrap();
        assert!(c.no_auth && c.auth_file.is_none());
        let c = resolve_args(&["--listen", "0.0.0.0:4437", "--auth-file", "/x/auth.toml"], None).unwrap();
        assert_eq!(c.auth_file.as_deref(), Some(Path::new("/x/auth.toml")));
        for loopback in ["127.0.0.1:0", "127.8.9.10:1", "[::1]:4437", "[::ffff:127.0.0.1]:4437"] {
            assert!(resolve_args(&["--listen", loopback], None).is_ok(), "{loopback}");
        }
        let e = resolve_args(&["--auth-file", "/x", "--no-auth"], None).unwrap_err();
        assert!(e.contains("contradict"), "{e}");
        let f = temp_file("auth", "listen = \"0.0.0.0:1\"\nauth-file = \"/etc/auth.toml\"\n");
        let c = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap();
        assert_eq!(c.auth_file.as_deref(), Some(Path::new("/etc/auth.toml")));
        std::fs::write(&f, "listen = \"0.0.0.0:1\"\n").unwrap();
        let e = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap_err();
        assert!(e.contains("(set by `listen` in"), "{e}");
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn file_choices_and_limits_name_the_value_the_setting_and_the_file() {
        let f = temp_file("choices", "direct-io = \"sometimes\"\n");
        let e = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap_err();
        assert!(e.starts_with("--direct-io: \"sometimes\" is not one of required, optional, disabled"), "{e}");
        assert!(e.contains("(set by `direct-io` in"), "{e}");
        std::fs::write(&f, "log-format = \"xml\"\nlog-level = \"loud\"\n").unwrap();
        let e = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap_err();
        assert!(e.starts_with("--log-format: \"xml\" is not one of text, json"), "the file's text first: {e}");
        std::fs::write(&f, "log-format = \"JSON\"\ndirect-io = \"disabled\"\nmax-connections = 7\n").unwrap();
        let c = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap();
        assert_eq!((c.log_format, c.direct_io, c.max_connections), (LogFormat::Json, DirectIoMode::Disabled, 7));
        std::fs::write(&f, "header-timeout-ms = 1\n").unwrap();
        let e = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap_err();
        let want = format!(
            "--header-timeout-ms must be at least {CONN_REQUEST_TIMEOUT_MS_MIN}, got 1 (set by `header-timeout-ms` in"
        );
        assert!(e.starts_with(&want), "{e}");
        let e = resolve_args(&["--max-connections", "0"], None).unwrap_err();
        assert_eq!(e, "--max-connections must be at least 1, got 0 (set by --max-connections)");
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn a_producer_bound_whose_state_record_does_not_fit_a_segment_is_refused() {
        use crate::limits::{state_record_bytes_max, SEGMENT_BYTES_MIN};
        let seg = SEGMENT_BYTES_MIN.to_string();
        let fits = producers_fitting(SEGMENT_BYTES_MIN);
        assert!(fits > 0 && state_record_bytes_max(fits) <= crate::storage::record::body_max(SEGMENT_BYTES_MIN));
        assert!(state_record_bytes_max(fits + 1) > crate::storage::record::body_max(SEGMENT_BYTES_MIN));
        let over = (fits + 1).to_string();
        let e = resolve_args(&["--segment-bytes", &seg, "--max-producers-per-stream", &over], None).unwrap_err();
        assert!(
            e.starts_with(&format!("--max-producers-per-stream {over} (set by --max-producers-per-stream)")),
            "{e}"
        );
        assert!(e.contains(&format!("does not fit --segment-bytes {seg}")), "{e}");
        assert!(e.contains(&format!("give at most {fits} producers")), "{e}");
        let c = resolve_args(&["--segment-bytes", &seg, "--max-producers-per-stream", &fits.to_string()], None);
        assert_eq!(c.unwrap().max_producers_per_stream, fits);
        // The default is lowered to what small segments hold, not refused.
        let c = resolve_args(&["--segment-bytes", &seg], None).unwrap();
        assert_eq!(c.max_producers_per_stream, fits);
        let c = resolve_args(&[], None).unwrap();
        assert_eq!(c.max_producers_per_stream, PRODUCERS_PER_STREAM_DEFAULT, "a default segment holds the default");
    }

    #[test]
    fn the_producer_bound_and_expiry_have_defaults_and_bounds() {
        let c = resolve_args(&[], None).unwrap();
        assert_eq!((c.max_producers_per_stream, c.producer_idle_expiry_secs), (4_096, 7 * 24 * 3600));
        let f = temp_file("producers", "max-producers-per-stream = 3\nproducer-idle-expiry-secs = 1\n");
        let c = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap();
        assert_eq!((c.max_producers_per_stream, c.producer_idle_expiry_secs), (3, 1));
        let c = resolve_args(&["--config", f.to_str().unwrap(), "--max-producers-per-stream", "9"], None).unwrap();
        assert_eq!(c.max_producers_per_stream, 9, "the flag beats the file");
        std::fs::remove_file(f).unwrap();
        let e = resolve_args(&["--max-producers-per-stream", "0"], None).unwrap_err();
        let want = format!("--max-producers-per-stream must be between 1 and {PRODUCERS_PER_STREAM_MAX}, got 0");
        assert_eq!(e, format!("{want} (set by --max-producers-per-stream)"));
        let over = (PRODUCERS_PER_STREAM_MAX + 1).to_string();
        assert!(resolve_args(&["--max-producers-per-stream", &over], None).is_err());
        let e = resolve_args(&["--producer-idle-expiry-secs", "0"], None).unwrap_err();
        assert_eq!(e, "--producer-idle-expiry-secs must be at least 1, got 0 (set by --producer-idle-expiry-secs)");
        let help = Cli::command().render_long_help().to_string();
        for flag in ["RINGSTREAM_MAX_PRODUCERS_PER_STREAM", "RINGSTREAM_PRODUCER_IDLE_EXPIRY_SECS", "producer_limit"] {
            assert!(help.contains(flag), "--help lacks {flag}");
        }
    }

    #[test]
    fn a_blank_rust_log_is_no_setting_and_a_bad_one_is_named() {
        assert_eq!(resolve_args(&[], Some("  ")).unwrap().log_level, resolve_args(&[], None).unwrap().log_level);
        let e = resolve_args(&[], Some("chatty")).unwrap_err();
        assert!(e.starts_with("--log-level: ") && e.ends_with("(set by RUST_LOG)"), "{e}");
        let c = resolve_args(&["--log-level", "error"], Some("chatty")).unwrap();
        assert_eq!(c.log_level, "error", "the flag beats RUST_LOG");
    }

    /// A cell secret file of `mode`.
    fn secret_file(name: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let p = std::env::temp_dir().join(format!("ringstream-cli-{}-{name}.secret", std::process::id()));
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    const THREE: &str = "1@127.0.0.1:7001,2@127.0.0.2:7001,3@127.0.0.3:7001";

    #[test]
    fn a_cell_comes_from_the_file_keys_and_flags_win() {
        assert!(resolve_args(&[], None).unwrap().cell.is_none(), "no cell settings: a single node");
        let secret = secret_file("cell", 0o600);
        let f = temp_file("cell", &format!("node-id = 1\ncell = \"{THREE}\"\ncell-secret-file = {:?}\n", secret));
        let c = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap();
        let cell = c.cell.as_ref().unwrap();
        assert_eq!((cell.node_id, cell.voters.len()), (1, 3));
        assert_eq!(cell.secret.as_bytes(), b"0123456789abcdef0123");
        assert_eq!(c.cell_secret_file.as_deref(), Some(secret.as_path()));
        assert!(!format!("{c:?}").contains("0123456789abcdef"), "Debug shows the secret: {c:?}");
        let c = resolve_args(&["--config", f.to_str().unwrap(), "--node-id", "3"], None).unwrap();
        assert_eq!(c.cell.unwrap().node_id, 3, "the flag beats the file");
        std::fs::remove_file(f).unwrap();
        std::fs::remove_file(secret).unwrap();
    }

    #[test]
    fn cell_join_comes_from_the_flag_or_the_file_and_needs_a_cell() {
        let secret = secret_file("cell-join", 0o600);
        let s = secret.to_str().unwrap();
        let cell = ["--node-id", "1", "--cell", THREE, "--cell-secret-file", s];
        assert!(!resolve_args(&cell, None).unwrap().cell.unwrap().join, "off by default");
        assert!(resolve_args(&[&cell[..], &["--cell-join"]].concat(), None).unwrap().cell.unwrap().join);
        let f = temp_file("cell-join", "cell-join = true\n");
        let from_file = resolve_args(&[&cell[..], &["--config", f.to_str().unwrap()]].concat(), None);
        assert!(from_file.unwrap().cell.unwrap().join, "the file key");
        let e = resolve_args(&["--cell-join"], None).unwrap_err();
        assert!(e.starts_with("--cell-join (set by --cell-join) needs a cell"), "{e}");
        std::fs::remove_file(f).unwrap();
        std::fs::remove_file(secret).unwrap();
    }

    #[test]
    fn the_http_port_may_not_be_one_of_the_peer_ports() {
        let secret = secret_file("cell-ports", 0o600);
        let s = secret.to_str().unwrap();
        let cell = |listen: &str, shards: &str| {
            let args = ["--node-id", "1", "--cell", THREE, "--cell-secret-file", s, "--listen", listen, "--no-auth"];
            resolve_args(&[&args[..], &["--shards", shards]].concat(), None)
        };
        let e = cell("127.0.0.1:7001", "1").unwrap_err();
        assert!(e.starts_with("--listen 127.0.0.1:7001 (set by --listen) takes port 7001"), "{e}");
        assert!(e.contains("ports 7001 to 7001 with --shards 1"), "{e}");
        assert!(cell("0.0.0.0:7002", "2").unwrap_err().contains("ports 7001 to 7002"), "every address takes it");
        assert!(cell("127.0.0.1:7002", "1").is_ok(), "past the peer ports");
        assert!(cell("127.0.0.9:7001", "1").is_ok(), "another address");
        assert!(cell("127.0.0.2:7001", "1").is_ok(), "node 2's peer address is not this node's");
        std::fs::remove_file(secret).unwrap();
    }

    #[test]
    fn cell_errors_name_the_setting_and_where_it_came_from() {
        let secret = secret_file("cell-errors", 0o600);
        let s = secret.to_str().unwrap();
        let f = temp_file("cell-errors", "cell = \"1@127.0.0.1:7001,2@127.0.0.1:7001,3@127.0.0.1:7003\"\n");
        let e = resolve_args(&["--config", f.to_str().unwrap(), "--node-id", "1", "--cell-secret-file", s], None);
        let e = e.unwrap_err();
        assert!(e.starts_with("--cell entry \"2@127.0.0.1:7001\"") && e.contains("(set by `cell` in"), "{e}");
        let e = resolve_args(&["--config", f.to_str().unwrap()], None).unwrap_err();
        assert!(e.starts_with("--cell needs --node-id") && e.contains("(--cell set by `cell` in"), "{e}");
        let e = resolve_args(&["--node-id", "9", "--cell", THREE, "--cell-secret-file", s], None).unwrap_err();
        assert!(e.starts_with("--node-id 9 is not one of") && e.ends_with("(set by --node-id)"), "{e}");
        let open = secret_file("cell-open", 0o644);
        let e = resolve_args(&["--node-id", "1", "--cell", THREE, "--cell-secret-file", open.to_str().unwrap()], None);
        let e = e.unwrap_err();
        assert!(e.starts_with("--cell-secret-file") && e.ends_with("(set by --cell-secret-file)"), "{e}");
        let high = "1@127.0.0.1:7001,2@127.0.0.2:65533,3@127.0.0.3:7001";
        let args = ["--node-id", "1", "--cell", high, "--cell-secret-file", s, "--shards", "3"];
        assert!(resolve_args(&args, None).is_ok(), "65533 + 2 is a port");
        let args = ["--node-id", "1", "--cell", high, "--cell-secret-file", s, "--shards", "4"];
        let e = resolve_args(&args, None).unwrap_err();
        assert!(e.starts_with("--cell entry 2@127.0.0.2:65533: with --shards 4"), "{e}");
        assert!(e.contains("65536") && e.contains("port from 1 to 65532") && e.ends_with("(set by --cell)"), "{e}");
        let zero = "1@127.0.0.1:0,2@127.0.0.2:1,3@127.0.0.3:2";
        let e = resolve_args(&["--node-id", "1", "--cell", zero, "--cell-secret-file", s], None).unwrap_err();
        assert!(e.starts_with("--cell entry 1@127.0.0.1:0:"), "{e}");
        for p in [f, secret, open] {
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn the_cell_secret_help_gives_the_limits() {
        use crate::limits::{CELL_SECRET_BYTES_MAX, CELL_SECRET_BYTES_MIN};
        let help = Cli::command().render_long_help().to_string();
        let want = format!("{CELL_SECRET_BYTES_MIN} to {CELL_SECRET_BYTES_MAX} bytes");
        assert!(help.contains(&want), "--cell-secret-file's help does not say {want:?}");
        for flag in ["--node-id", "--cell ", "--cell-secret-file", "RINGSTREAM_NODE_ID", "RINGSTREAM_CELL="] {
            assert!(help.contains(flag), "--help lacks {flag}");
        }
    }

    #[test]
    fn log_filters() {
        for ok in ["info", "WARN", "off", "info,ringstream::storage=debug", "glommio=error"] {
            check_log_filter(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["", "verbose", "info,loud"] {
            assert!(check_log_filter(bad).is_err(), "{bad:?} accepted");
        }
    }
}
