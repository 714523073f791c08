//! `--check-config`: the checks a start makes before its executors run,
//! without serving: the settings (already resolved by `cli`), the listen
//! address, the host (io_uring, locked memory, O_DIRECT), and the data
//! directory (not in use, storage format and shard count). A directory that
//! does not exist yet is not created: its nearest existing parent must be
//! writable. A cell's settings are checked by `cli` and reported here.

use super::config_error;
use super::host::{self, Layout, FORMAT_VERSION};
use crate::config::{Config, DirectIoMode};
use crate::limits::EXECUTOR_IO_MEMORY_BYTES;
use crate::preflight;
use std::fmt::Write;
use std::path::Path;

/// Runs the checks; Ok is the report to print (what a start would use),
/// Err the first check that failed (every failure here is a [`ConfigError`](super::ConfigError)).
pub fn check(cfg: &Config) -> anyhow::Result<String> {
    let mut out = String::new();
    let _ = writeln!(out, "ringstream {}: checking the configuration", crate::build_info::LONG_VERSION);
    if let Some(f) = &cfg.config_file {
        let _ = writeln!(out, "config file      {}", f.display());
    }
    let (reservation, _) = host::reserve(cfg.listen).map_err(|e| config_error(format!("{e:#}")))?;
    drop(reservation);
    let _ = writeln!(out, "listen           {} (bind ok)", cfg.listen);
    let _ = writeln!(out, "shards           {} ({})", cfg.shards, if cfg.pin { "pinned" } else { "not pinned" });
    preflight::probe_io_uring().map_err(config_error)?;
    let _ = writeln!(out, "io_uring         available");
    let memlock = preflight::ensure_memlock(cfg.shards, EXECUTOR_IO_MEMORY_BYTES).map_err(config_error)?;
    let _ = match &memlock.warning {
        Some(w) => writeln!(out, "locked memory    WARNING: {w}"),
        None => writeln!(out, "locked memory    enough for {} bytes of registered buffers", memlock.need),
    };
    let _ = writeln!(
        out,
        "producers        at most {} per stream (a state record of up to {} bytes; a segment holds {}); one idle for \
         more than {} s is forgotten",
        cfg.max_producers_per_stream,
        crate::limits::state_record_bytes_max(cfg.max_producers_per_stream),
        crate::storage::record::body_max(cfg.segment_bytes),
        cfg.producer_idle_expiry_secs
    );
    data_dir(cfg, &mut out)?;
    tier(cfg, &mut out)?;
    cell(cfg, &mut out);
    let _ = writeln!(out, "configuration ok");
    Ok(out)
}

/// Tiered storage: the settings, and whether the store answers a listing
/// (a store that does not answer is reported, not an error: a start serves
/// without it, with cold reads answering 503).
fn tier(cfg: &Config, out: &mut String) -> anyhow::Result<()> {
    let Some(t) = &cfg.tier else { return Ok(()) };
    let client = crate::tier::TierClient::s3(&t.s3, &t.prefix, "check").map_err(config_error)?;
    let per_shard = t.hot_bytes / cfg.shards as u64;
    let _ = writeln!(
        out,
        "tiered storage   s3 {} bucket {} prefix {}, {} bytes local ({per_shard} per shard)",
        t.s3.endpoint, t.s3.bucket, t.prefix, t.hot_bytes
    );
    let _ = match futures_lite::future::block_on(client.list(format!("{}/", t.prefix))) {
        Ok(keys) => writeln!(out, "object store     answers ({} objects under {}/)", keys.len(), t.prefix),
        Err(e) => writeln!(out, "object store     WARNING: does not answer: {e} (a start serves; cold reads 503)"),
    };
    Ok(())
}

/// The replicated cell, as `cli` resolved and checked it: this node, each
/// voter's peer ports (group *i* at its port + *i*), and the secret's
/// length (never its bytes).
fn cell(cfg: &Config, out: &mut String) {
    let Some(cell) = &cfg.cell else { return };
    let listed = if cell.join { "nodes named (itself and members it knows of)" } else { "voters" };
    let _ = writeln!(out, "cell             node {} of {} {listed}", cell.node_id, cell.voters.len());
    for v in &cell.voters {
        // `cli` refused a cell whose ports overflow; this is only the report.
        let ports = v.group_ports(cfg.shards).map_or("none".to_string(), |p| format!("{}-{}", p.start(), p.end()));
        let me = if v.id == cell.node_id { ", this node: its replicas listen here" } else { "" };
        let _ = writeln!(out, "voter {:<10} {}, groups 0-{} on ports {ports}{me}", v.id, v.addr, cfg.shards - 1);
    }
    let file = cfg.cell_secret_file.as_deref().map_or(String::new(), |p| p.display().to_string());
    let rotating =
        if cell.secret.rotating() { "; a rotation is under way (its .next or .previous accepted too)" } else { "" };
    let _ = writeln!(out, "cell secret      {file}: read, {} bytes{rotating}", cell.secret.as_bytes().len());
    if cell.join {
        let _ = writeln!(
            out,
            "cell join        yes: a shard with no segments waits, however long, until a peer offers its sealed \
             segments (or every peer holds none), and copies them and the members before it takes part (a node \
             new to the cell: once added, POST /_cell/members/{{id}})"
        );
    }
    let _ = writeln!(
        out,
        "cell             any node takes any request: writes and bucket requests are forwarded to the \
         leader; reads are served from this node's committed records (caught up with the leader's commit \
         first when they claim freshness)"
    );
    if let Some(t) = &cfg.tier {
        let _ = writeln!(
            out,
            "cell tier        the leader of each group moves its segments under {}/cell/shard-<group>/: every \
             node of this cell must name the same --tier-bucket and --tier-prefix, and no other cell the same",
            t.prefix.trim_matches('/')
        );
    }
}

/// The data directory's part of the report.
fn data_dir(cfg: &Config, out: &mut String) -> anyhow::Result<()> {
    let dir = &cfg.data_dir;
    if !dir.exists() {
        let parent = writable_ancestor(dir)?;
        let _ = writeln!(
            out,
            "data directory   {} does not exist; a start creates it ({} is writable) with format={FORMAT_VERSION}, shards={}",
            dir.display(),
            parent.display(),
            cfg.shards
        );
        let _ = writeln!(out, "direct I/O       probed at the first start (--direct-io {})", mode(cfg.direct_io));
        return Ok(());
    }
    if !dir.is_dir() {
        return Err(config_error(format!("data directory {} is not a directory", dir.display())));
    }
    let lock = preflight::lock_data_dir(dir).map_err(config_error)?;
    let layout = host::read_layout(dir, cfg.shards).map_err(|e| config_error(format!("{e:#}")))?;
    let _ = match layout {
        Layout::Matches => writeln!(
            out,
            "data directory   {} (format={FORMAT_VERSION}, shards={}, not in use)",
            dir.display(),
            cfg.shards
        ),
        Layout::New => writeln!(out, "data directory   {} (new: no ringstream.meta yet; not in use)", dir.display()),
    };
    let supported = match cfg.direct_io {
        DirectIoMode::Disabled => false,
        _ => preflight::supports_direct_io(dir)
            .map_err(|e| config_error(format!("probing O_DIRECT support in {}: {e}", dir.display())))?,
    };
    let direct = preflight::direct_io_decision(cfg.direct_io, supported, dir).map_err(config_error)?;
    let _ = writeln!(
        out,
        "direct I/O       {} (--direct-io {})",
        if direct { "on (O_DIRECT)" } else { "off (buffered + fdatasync)" },
        mode(cfg.direct_io)
    );
    drop(lock);
    Ok(())
}

fn mode(m: DirectIoMode) -> String {
    clap::ValueEnum::to_possible_value(&m).map_or_else(String::new, |v| v.get_name().to_string())
}

/// The nearest existing ancestor of `dir`, which must be a directory this
/// process may create entries in.
fn writable_ancestor(dir: &Path) -> anyhow::Result<&Path> {
    let parent = dir.ancestors().skip(1).find(|p| p.exists()).unwrap_or(Path::new("."));
    let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
    let c = std::ffi::CString::new(parent.as_os_str().as_encoded_bytes()).map_err(|e| config_error(e.to_string()))?;
    // Safety: access(2) reads the NUL-terminated path we pass.
    let ok = parent.is_dir() && unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0;
    if !ok {
        return Err(config_error(format!(
            "data directory {} does not exist and cannot be created: {} is not a writable directory",
            dir.display(),
            parent.display()
        )));
    }
    Ok(parent)
}
