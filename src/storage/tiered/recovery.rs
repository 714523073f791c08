//! Opening a tiered log (docs/recovery.md, step 4): read the skeletons,
//! open the local log, take the tier records out of what it found, add the
//! remote segments' records, and finish or drop each move a crash
//! interrupted. A boot never asks the object store.

use super::skeleton::{decode_tier_body, Skeleton};
use super::state::{RemoteSeg, Tier, Tiering};
use super::Log;
use crate::storage::error::{Error, Result};
use crate::storage::io::SegmentStore;
use crate::storage::log::{LocalLog, LogConfig, RecordLoc, Recovered, RecoveryReport};
use crate::storage::record;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// A skeleton read back at boot.
pub(super) struct Loaded {
    pub skeleton: Skeleton,
    /// The length of its segment.
    pub seg_len: u64,
    /// The length of the skeleton file.
    pub skel_len: u64,
}

impl<S: SegmentStore> Log<S> {
    /// [`Log::open`] with tiered storage: recovers the local log (see
    /// [`LocalLog::open`]) and the remote segments from their skeletons, and
    /// returns every record in log order; a move a crash interrupted is
    /// finished or dropped.
    pub async fn open_tiered(
        store: S,
        cfg: LogConfig,
        tiering: Option<Tiering>,
    ) -> Result<(Self, Vec<Recovered>, RecoveryReport)> {
        let skeletons = load_skeletons(&store)?;
        if let (None, Some(&no)) = (&tiering, skeletons.keys().next()) {
            let source = std::io::Error::other("segments are in an object store: start with --tier");
            return Err(Error::io("open", no, source));
        }
        let held_above = skeletons.keys().next_back().copied();
        let (local, found, mut report) = LocalLog::open(store, cfg, held_above).await?;
        let (records, tiered) = take_tier_records(&local, found, &skeletons)?;
        let held: BTreeSet<u64> = local.sealed_segments().into_iter().collect();
        let records = with_remote_records(records, &skeletons, &held);
        let remote = settle_moves(&local, skeletons, &held, &tiered).await?;
        report.records = records.len();
        report.segments = local.sealed_segments().len() + remote.len();
        let tier = tiering.map(|link| Tier::new(link, remote));
        Ok((Log { local: std::rc::Rc::new(local), tier }, records, report))
    }
}

/// Reads and verifies every skeleton beside the segments.
pub(super) fn load_skeletons<S: SegmentStore>(store: &S) -> Result<BTreeMap<u64, Loaded>> {
    let Some(files) = store.tier_files() else { return Ok(BTreeMap::new()) };
    let mut out = BTreeMap::new();
    for (no, skel_len) in files.list_skeletons().map_err(Error::io_at("list skeletons", 0))? {
        let bytes = files.read_skeleton(no).map_err(Error::io_at("read skeleton", no))?;
        let (skeleton, seg_len) = Skeleton::decode(no, bytes)?;
        out.insert(no, Loaded { skeleton, seg_len, skel_len });
    }
    Ok(out)
}

/// Takes the tier records out of what the local log found (the shard never
/// sees them), and returns the rest with the segments that the tier
/// records, local or in skeletons, say are remote.
fn take_tier_records<S: SegmentStore>(
    local: &LocalLog<S>,
    found: Vec<Recovered>,
    skeletons: &BTreeMap<u64, Loaded>,
) -> Result<(Vec<Recovered>, BTreeSet<u64>)> {
    let mut tiered: BTreeSet<u64> = skeletons.values().flat_map(|l| l.skeleton.tiered().map(|m| m.no)).collect();
    let mut records = Vec::with_capacity(found.len());
    for r in found {
        if r.header.kind != record::KIND_TIER {
            records.push(r);
            continue;
        }
        let mut body = Vec::new();
        local.read_body(r.loc, 0..r.loc.body_len as usize, &mut body)?;
        tiered.extend(decode_tier_body(&body).map(|m| m.no));
    }
    Ok((records, tiered))
}

/// Adds the records of the segments only a skeleton holds (tier records
/// left out) to the local ones, in log order.
pub(super) fn with_remote_records(
    local: Vec<Recovered>,
    skeletons: &BTreeMap<u64, Loaded>,
    held: &BTreeSet<u64>,
) -> Vec<Recovered> {
    let remote = skeletons.iter().filter(|(no, _)| !held.contains(no)).flat_map(|(&no, l)| {
        // The layers' records above the log: not its own (tier records, and
        // in a cell the batch closes and membership changes).
        let entries = l.skeleton.entries.iter().filter(|e| e.header.kind < record::KIND_CONF);
        entries.map(move |e| Recovered {
            header: e.header,
            loc: RecordLoc { segment: no, pos: e.pos, body_len: e.header.body_len },
        })
    });
    // Both are in log order and no segment is in both: merge by segment.
    let mut remote = remote.peekable();
    let mut out = Vec::with_capacity(local.len());
    for r in local {
        while let Some(x) = remote.next_if(|x| x.loc.segment < r.loc.segment) {
            out.push(x);
        }
        out.push(r);
    }
    out.extend(remote);
    out
}

/// Finishes or drops each move a crash interrupted (a skeleton beside its
/// segment file), and returns the remote segments.
async fn settle_moves<S: SegmentStore>(
    local: &LocalLog<S>,
    skeletons: BTreeMap<u64, Loaded>,
    held: &BTreeSet<u64>,
    tiered: &BTreeSet<u64>,
) -> Result<BTreeMap<u64, RemoteSeg>> {
    let mut remote = BTreeMap::new();
    for (no, l) in skeletons {
        if held.contains(&no) && !tiered.contains(&no) {
            // Uploaded, but its tier record never became durable: the
            // segment stays local (the object is overwritten or swept).
            let files = local.store().tier_files().expect("skeletons were listed");
            files.remove_skeleton(no).map_err(Error::io_at("remove skeleton", no))?;
            continue;
        }
        if held.contains(&no) {
            // Its tier record is durable: finish the move.
            local.remove_segment(no).await?;
        }
        let skeleton = Some(Rc::new(l.skeleton));
        remote.insert(no, RemoteSeg { len: l.seg_len, term: 0, skel_len: l.skel_len, skeleton });
    }
    Ok(remote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::record::RecordHeader;

    fn header(kind: u8, offset: u64) -> RecordHeader {
        RecordHeader { kind, stream_id: 1, incarnation: 1, stream_offset: offset, body_len: 3 }
    }

    /// A skeleton of segment `no` holding records with `offsets`, then a tier record.
    fn loaded(no: u64, offsets: &[u64]) -> Loaded {
        let mut seg = Vec::new();
        for &o in offsets {
            record::encode(no, &header(1, o), b"abc", &mut seg);
        }
        let tier = RecordHeader { body_len: 16, ..header(record::KIND_TIER, 0) };
        record::encode(
            no,
            &tier,
            &super::super::skeleton::tier_body(super::super::skeleton::Moved { no: 7, len: 4096, term: 0 }),
            &mut seg,
        );
        record::seal(no, seg.len() as u64, offsets.len() as u64 + 1, &mut seg);
        let bytes = Skeleton::build(no, &seg, |_, body| body.len()).unwrap();
        let (skeleton, seg_len) = Skeleton::decode(no, bytes).unwrap();
        Loaded { skeleton, seg_len, skel_len: 0 }
    }

    fn local(segment: u64, offset: u64) -> Recovered {
        Recovered { header: header(1, offset), loc: RecordLoc { segment, pos: offset * 8, body_len: 3 } }
    }

    #[test]
    fn remote_records_merge_into_log_order_without_tier_records() {
        // Remote: 0 and 2; 3 has a skeleton but its file is still local.
        let skeletons = BTreeMap::from([(0, loaded(0, &[10, 11])), (2, loaded(2, &[30])), (3, loaded(3, &[99]))]);
        let held = BTreeSet::from([1, 3, 4]);
        let found = vec![local(1, 20), local(1, 21), local(3, 40), local(4, 50)];
        let merged = with_remote_records(found, &skeletons, &held);
        let order: Vec<(u64, u64)> = merged.iter().map(|r| (r.loc.segment, r.header.stream_offset)).collect();
        assert_eq!(order, vec![(0, 10), (0, 11), (1, 20), (1, 21), (2, 30), (3, 40), (4, 50)]);
        assert!(merged.iter().all(|r| r.header.kind != record::KIND_TIER));
        // A record's place in a remote segment is where the skeleton says.
        assert_eq!(merged[1].loc.pos, skeletons[&0].skeleton.entries[1].pos);
        let tiered: Vec<u64> = skeletons[&0].skeleton.tiered().map(|m| m.no).collect();
        assert_eq!(tiered, vec![7]);
    }
}
