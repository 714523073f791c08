//! `--restore-from-tier`: the data directory of a node of a cell that lost
//! every disk, made again from the cell's objects in the object store
//! (docs/operations.md, runbook "Lose every node's disk"). For each group,
//! the remote segments (a contiguous run: moves and reclamation both take
//! the oldest first) are copied whole and checked (every record, the seal),
//! those a reclaim record among them named are left out, and the Raft state
//! says the last entry they close is committed. Run on every node of the
//! new cell (with the same `--cell`), then start them: their logs are the
//! same, so they elect a leader and serve what the store held. The hot tail,
//! which only the lost disks held, is gone.

use super::{config_error, host};
use crate::config::Config;
use crate::protocol::persist;
use crate::storage::record::{self, BatchClose, RecordHeader, KIND_BATCH};
use crate::tier::TierClient;
use anyhow::Context;
use futures_lite::future::block_on;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::ops::Range;
use std::path::Path;

/// A segment fetched from the store, checked, with its records (before
/// its seal, each header with its body's range in `bytes`).
struct Segment {
    no: u64,
    bytes: Vec<u8>,
    records: Vec<(RecordHeader, Range<usize>)>,
}

/// One group's segments fetched from the store, oldest first.
struct Fetched {
    segments: Vec<Segment>,
    /// The newest term a key of the group names: the restored replica
    /// starts there (or at its last entry's, if newer), so that every term
    /// the new cell leads in is newer than every object's, and its sweep
    /// deletes those no record of its log names (a term's own keys it never
    /// deletes).
    newest_key_term: u64,
}

/// Makes `cfg.data_dir` (absent or empty) from the cell's objects; returns
/// what it restored, a line a group.
pub fn restore(cfg: &Config) -> anyhow::Result<String> {
    cfg.cell.as_ref().ok_or_else(|| config_error("--restore-from-tier needs --cell, --node-id, --cell-secret-file"))?;
    let client = host::tier_client(cfg)?.ok_or_else(|| config_error("--restore-from-tier needs --tier s3"))?;
    let dir = &cfg.data_dir;
    let used = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
    if used {
        return Err(config_error(format!(
            "--restore-from-tier: {} is not empty: it makes a new data directory only",
            dir.display()
        )));
    }
    let past = block_on(client.list(client.shard_prefix(cfg.shards))).context("listing the object store")?;
    if !past.is_empty() {
        return Err(config_error(format!(
            "--restore-from-tier: the object store holds segments of group {}: the cell ran with more shards than \
             --shards {}",
            cfg.shards, cfg.shards
        )));
    }
    host::create_data_dir(dir)?;
    let mut report = String::new();
    for group in 0..cfg.shards {
        let fetched = fetch_group(&client, group)?;
        let line = write_group(&dir.join(format!("shard-{group}")), &fetched)
            .with_context(|| format!("group {group}: writing {}", dir.display()))?;
        let _ = writeln!(report, "group {group}: {line}");
    }
    host::check_layout(dir, cfg.shards)?;
    Ok(report)
}

/// The group's segments in the store: listed, the run to restore chosen,
/// each fetched and checked; those a reclaim record among them names left out.
fn fetch_group(client: &TierClient, group: usize) -> anyhow::Result<Fetched> {
    let keys = block_on(client.list(client.shard_prefix(group))).context("listing the object store")?;
    let mut segments = Vec::new();
    for (no, key, size) in plan(&keys) {
        let bytes = block_on(client.get_range(key.clone(), 0..size)).with_context(|| format!("reading {key}"))?;
        let records = record::sealed_records(no, &bytes)
            .map_err(|pos| anyhow::anyhow!("{key}: not a sealed segment: a bad record or seal at byte {pos}"))?;
        segments.push(Segment { no, bytes, records });
    }
    let through = reclaimed_through(&segments);
    segments.retain(|s| through.is_none_or(|t| s.no > t));
    let newest_key_term = keys.iter().filter_map(|(k, _)| TierClient::segment_of(k)).map(|(_, t)| t).max();
    Ok(Fetched { segments, newest_key_term: newest_key_term.unwrap_or(0) })
}

/// Writes the segments and the Raft state into `dir` (new), durably.
fn write_group(dir: &Path, f: &Fetched) -> anyhow::Result<String> {
    std::fs::create_dir_all(dir)?;
    let Some(close) = last_close(&f.segments) else {
        std::fs::File::open(dir)?.sync_all()?;
        return Ok("nothing in the object store: it starts empty".into());
    };
    let mut bytes = 0;
    for s in &f.segments {
        durable_write(&dir.join(format!("{:016}.seg", s.no)), &s.bytes)?;
        bytes += s.bytes.len();
    }
    let term = close.term.max(f.newest_key_term);
    let state = crate::cell::store::restored_state(term, close.index);
    durable_write(&dir.join(crate::cell::store::HARD_STATE_FILE), &crate::storage::slots::file_holding(&state))?;
    std::fs::File::open(dir)?.sync_all()?;
    let (first, last) = (f.segments[0].no, f.segments[f.segments.len() - 1].no);
    Ok(format!(
        "segments {first}..={last} ({} files, {bytes} bytes), entries through {} (term {}); it starts in term {term}",
        f.segments.len(),
        close.index,
        close.term
    ))
}

fn durable_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Which objects to fetch, oldest first: one a segment (any copy: every
/// object of a segment is that sealed segment, byte for byte), the run of
/// consecutive segments that ends with the newest (an older one past a gap
/// was reclaimed; a reclaim that failed part way may leave such objects).
fn plan(keys: &[(String, u64)]) -> Vec<(u64, String, u64)> {
    let mut by_no: BTreeMap<u64, (u64, &str, u64)> = BTreeMap::new();
    for (key, size) in keys {
        let Some((no, term)) = TierClient::segment_of(key) else { continue };
        if by_no.get(&no).is_none_or(|(t, _, _)| term > *t) {
            by_no.insert(no, (term, key, *size));
        }
    }
    let mut run: Vec<(u64, String, u64)> = Vec::new();
    for (no, (_, key, size)) in by_no.into_iter().rev() {
        if run.last().is_some_and(|(next, _, _)| *next != no + 1) {
            break;
        }
        run.push((no, key.to_string(), size));
    }
    run.reverse();
    run
}

/// The newest segment a reclaim record among `segments` names.
fn reclaimed_through(segments: &[Segment]) -> Option<u64> {
    let reclaims = segments.iter().flat_map(|s| s.records.iter().map(move |(h, body)| (h, &s.bytes[body.clone()])));
    reclaims.filter(|(h, _)| h.kind == persist::KIND_RECLAIM).filter_map(|(_, b)| persist::decode_reclaim(b).ok()).max()
}

/// The last entry the segments close (its term and index).
fn last_close(segments: &[Segment]) -> Option<BatchClose> {
    let s = segments.last()?;
    let mut batches = s.records.iter().rev().filter(|(h, _)| h.kind == KIND_BATCH);
    batches.find_map(|(h, b)| record::batch_close_of(h, &s.bytes[b.clone()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(no: u64, term: u64) -> (String, u64) {
        (format!("p/cell/shard-0/{no:020}.t{term}.seg"), 100 + no)
    }

    #[test]
    fn the_run_that_ends_with_the_newest_segment_is_restored_one_copy_each() {
        let keys = vec![key(2, 1), key(5, 3), key(6, 3), key(6, 4), key(7, 4), ("p/cell/shard-0/junk".into(), 1)];
        let got: Vec<(u64, String)> = plan(&keys).into_iter().map(|(no, k, _)| (no, k)).collect();
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec![5, 6, 7], "2 is past a gap: reclaimed");
        assert!(got[1].1.ends_with(".t4.seg"), "one copy of 6: {got:?}");
        assert!(plan(&[]).is_empty());
    }

    /// A sealed segment of `records`, each a header and a body.
    fn segment(no: u64, records: &[(RecordHeader, Vec<u8>)]) -> Vec<u8> {
        let mut buf = Vec::new();
        for (h, body) in records {
            record::encode(no, h, body, &mut buf);
        }
        record::seal(no, buf.len() as u64, records.len() as u64, &mut buf);
        buf
    }

    fn plain(kind: u8, body: Vec<u8>) -> (RecordHeader, Vec<u8>) {
        (RecordHeader { kind, stream_id: 0, incarnation: 0, stream_offset: 0, body_len: body.len() as u32 }, body)
    }

    /// The close of entry `index` of `term`, as a batched log writes it in segment `no`.
    fn close(no: u64, term: u64, index: u64) -> (RecordHeader, Vec<u8>) {
        let mut buf = Vec::new();
        record::batch_close(no, &BatchClose { term, index, start: (no, 0) }, &mut buf);
        let (h, body, _) = record::decode(no, &buf).unwrap();
        (h, buf[body].to_vec())
    }

    fn checked(no: u64, bytes: Vec<u8>) -> Segment {
        let records = record::sealed_records(no, &bytes).expect("a sealed segment");
        Segment { no, bytes, records }
    }

    #[test]
    fn segments_are_checked_and_what_a_reclaim_record_names_is_left_out() {
        let a = segment(3, &[plain(persist::KIND_CREATE, b"x".to_vec()), close(3, 5, 40)]);
        let b = segment(4, &[close(4, 6, 41), plain(persist::KIND_RECLAIM, persist::encode_reclaim(3))]);
        assert_eq!(record::sealed_records(3, &a).unwrap().len(), 2);
        assert!(record::sealed_records(4, &a).is_err(), "another segment's bytes");
        assert!(record::sealed_records(3, &a[..a.len() - 1]).is_err(), "cut short");
        let mut room = a.clone();
        room.extend_from_slice(&[0; 4096]);
        assert_eq!(record::sealed_records(3, &room).unwrap().len(), 2, "a file's unused room after its seal");
        let segs = vec![checked(3, a), checked(4, b)];
        assert_eq!(reclaimed_through(&segs), Some(3));
        assert_eq!(reclaimed_through(&segs[..1]), None);
        let c = last_close(&segs).unwrap();
        assert_eq!((c.term, c.index), (6, 41));
        assert!(last_close(&segs[..0]).is_none());
    }
}
