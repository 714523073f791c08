//! Before any executor starts: the data directory's lock and layout, the
//! host checks (io_uring, locked memory, O_DIRECT) and the listen address.

use super::config_error;
use crate::config::Config;
use crate::config::DirectIoMode;
use crate::limits::EXECUTOR_IO_MEMORY_BYTES;
use crate::preflight;
use crate::preflight::supports_direct_io;
use anyhow::Context;
use std::net::SocketAddr;
use std::path::Path;

/// What the checks decided, held for the life of the server.
pub(super) struct Host {
    /// The data directory's lock (the kernel drops it if the process dies).
    _lock: preflight::DataDirLock,
    /// Segments are written O_DIRECT (else buffered + fdatasync).
    pub direct: bool,
}

/// Locks and checks the data directory, checks the host, decides on O_DIRECT.
/// Failures that retrying cannot fix are [`config_error`]s (exit 78): the
/// directory cannot be created, another layout, no io_uring, too little
/// locked memory, O_DIRECT required but refused. A directory in use by
/// another server is not: it may be free on the next try.
pub(super) fn claim(cfg: &Config) -> anyhow::Result<Host> {
    create_data_dir(&cfg.data_dir)?;
    let lock = preflight::lock_data_dir(&cfg.data_dir).map_err(anyhow::Error::msg)?;
    tracing::debug!("holding {}", lock.path.display());
    check_layout(&cfg.data_dir, cfg.shards)?;
    preflight::probe_io_uring().map_err(config_error)?;
    let memlock = preflight::ensure_memlock(cfg.shards, EXECUTOR_IO_MEMORY_BYTES).map_err(config_error)?;
    if let Some(to) = memlock.raised_to {
        tracing::info!(from = memlock.facts.soft, to, need = memlock.need, "raised the RLIMIT_MEMLOCK soft limit");
    }
    if let Some(w) = &memlock.warning {
        tracing::warn!("{w}");
    }
    let supported = match cfg.direct_io {
        DirectIoMode::Disabled => false,
        _ => supports_direct_io(&cfg.data_dir).context("probing O_DIRECT support")?,
    };
    let direct = preflight::direct_io_decision(cfg.direct_io, supported, &cfg.data_dir).map_err(config_error)?;
    tracing::info!(
        "direct I/O: {} (--direct-io {})",
        if direct { "on (O_DIRECT)" } else { "off (buffered + fdatasync)" },
        clap::ValueEnum::to_possible_value(&cfg.direct_io).map_or_else(String::new, |v| v.get_name().to_string())
    );
    Ok(Host { _lock: lock, direct })
}

/// The object store client of `--tier s3`, with this data directory's node
/// id (made once, kept in `ringstream.node-id`) in every key, so that nodes
/// sharing a bucket and prefix never touch each other's objects; in a cell,
/// `cell` instead: its nodes share their groups' keys, and each cell needs
/// a prefix (or bucket) of its own.
pub(super) fn tier_client(cfg: &Config) -> anyhow::Result<Option<crate::tier::TierClient>> {
    let Some(t) = &cfg.tier else { return Ok(None) };
    let id = match cfg.cell {
        // Every node of a cell names the same keys (one copy per group).
        Some(_) => "cell".to_string(),
        None => node_id(cfg)?,
    };
    let client = crate::tier::TierClient::s3(&t.s3, &t.prefix, &id).map_err(config_error)?;
    tracing::info!("tiered storage: {} (keep {} bytes local)", client.describe(), t.hot_bytes);
    Ok(Some(client))
}

/// This data directory's node id, made the first time it is asked for.
fn node_id(cfg: &Config) -> anyhow::Result<String> {
    let path = cfg.data_dir.join("ringstream.node-id");
    let id = match std::fs::read_to_string(&path) {
        Ok(id) => id.trim().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut raw = [0u8; 8];
            std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut raw))?;
            let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            let tmp = cfg.data_dir.join("ringstream.node-id.tmp");
            std::fs::write(&tmp, format!("{id}\n"))?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&cfg.data_dir)?.sync_all()?;
            id
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(config_error(format!("{}: {id:?} is not a node id (hex digits)", path.display())));
    }
    Ok(id)
}

/// The storage format this version writes and reads (ringstream.meta).
/// 1: the first; 2: every segment but the newest ends in a seal record.
pub(super) const FORMAT_VERSION: u32 = 2;

pub(super) fn create_data_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| config_error(format!("creating data directory {}: {e}", dir.display())))
}

/// What `ringstream.meta` says about a data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// Written by this format with this shard count.
    Matches,
    /// No meta file yet: a new data directory.
    New,
}

fn meta_text(shards: usize) -> String {
    format!("format={FORMAT_VERSION}\nshards={shards}\n")
}

/// The data directory remembers how many shards wrote it: streams are placed
/// by hash modulo the shard count, so another count would lose them. Reads
/// only; another format or shard count is a [`config_error`].
pub(super) fn read_layout(dir: &Path, shards: usize) -> anyhow::Result<Layout> {
    let meta = dir.join("ringstream.meta");
    match std::fs::read_to_string(&meta) {
        Ok(have) if have == meta_text(shards) => Ok(Layout::Matches),
        Ok(have) if !have.starts_with(&format!("format={FORMAT_VERSION}\n")) => Err(config_error(format!(
            "data directory {} has a storage format this version does not read ({}; this version reads \
             format={FORMAT_VERSION}): run the version that wrote it, or use another --data-dir",
            dir.display(),
            have.trim().replace('\n', ", ")
        ))),
        Ok(have) => {
            let written = have.lines().find_map(|l| l.strip_prefix("shards=")).unwrap_or("?");
            Err(config_error(format!(
                "data directory {} was written by {written} shards ({}), but this server has {shards} (--shards, \
                 RINGSTREAM_SHARDS or `shards` in the config file; the default is the number of CPUs it may use): \
                 streams are placed by shard, so start with --shards {written}, or use another --data-dir",
                dir.display(),
                have.trim().replace('\n', ", ")
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Layout::New),
        Err(e) => Err(e).with_context(|| format!("reading {}", meta.display())),
    }
}

/// [`read_layout`], then writes the meta file of a new directory (durably).
pub(super) fn check_layout(dir: &Path, shards: usize) -> anyhow::Result<()> {
    if read_layout(dir, shards)? == Layout::Matches {
        return Ok(());
    }
    let tmp = dir.join("ringstream.meta.tmp");
    std::fs::write(&tmp, meta_text(shards))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join("ringstream.meta"))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Resolves the listen address (port 0 -> a real port) with a socket bound
/// under SO_REUSEPORT but not listening, so every shard can bind the same
/// concrete address. Dropped once all shards listen.
pub(super) fn reserve(addr: SocketAddr) -> anyhow::Result<(socket2::Socket, SocketAddr)> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    s.set_reuse_port(true)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into()).map_err(|e| {
        let msg = format!("binding {addr}: {e}");
        // Taken by someone else: maybe free on the next try. Anything else
        // (not this host's address, a privileged port) will fail again.
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!(msg)
        } else {
            config_error(msg)
        }
    })?;
    let real = s.local_addr()?.as_socket().context("listen address is not IP")?;
    Ok((s, real))
}
