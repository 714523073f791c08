//! Segment shipping's second part, with tiering: a replica given its
//! peer's sealed segments also copies the skeletons of the peer's segments
//! in the object store (older than any it holds), whose records its
//! recovery replays as a boot on that peer would; their bytes stay in the
//! store, where cold reads fetch them (`storage/tiered/`).
//!
//! Requests: `4` (the list: answered as a manifest, `cell::ship`, of
//! skeletons and their lengths, or `1`, not ready), and `5 | segment u64 |
//! offset u64 | max u32` (bytes of one skeleton, answered as a chunk).

use super::board::Slot;
use super::link::Links;
use super::ship::{decode_manifest, encode_manifest, fetch_chunk_as, Chunk, Fetch, ShipError, NOT_READY};
use crate::limits::CELL_SHIP_CHUNK_BYTES;
use crate::storage::io::SegmentStore;
use crate::storage::log::LocalLog;
use std::time::Duration;

const ASK_SKELETONS: u8 = 4;
const ASK_SKELETON_CHUNK: u8 = 5;
/// How long the list may take to come.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// The answer to a skeleton request, from `log` (None: the request is not
/// one; the caller answers it).
pub(super) fn answer<S: SegmentStore>(
    log: Option<&LocalLog<S>>,
    request: &[u8],
    slot: Option<&Slot>,
) -> Option<Vec<u8>> {
    if request == [ASK_SKELETONS] {
        return Some(match log {
            Some(l) => encode_manifest(&offered(l).unwrap_or_default()),
            None => vec![NOT_READY],
        });
    }
    let f = Fetch::decode_as(request, ASK_SKELETON_CHUNK)?;
    let bytes = log.and_then(|l| l.store().tier_files()).and_then(|files| files.read_skeleton(f.segment).ok());
    let Some(bytes) = bytes else { return Some(Chunk::NotHeld.encode()) };
    let start = (f.offset as usize).min(bytes.len());
    let end = start.saturating_add((f.max as usize).min(CELL_SHIP_CHUNK_BYTES)).min(bytes.len());
    if let Some(slot) = slot {
        slot.served_segment((end - start) as u64);
    }
    Some(Chunk::Bytes { length: bytes.len() as u64, bytes: bytes[start..end].to_vec() }.encode())
}

/// The skeletons of segments older than every one `log` holds.
fn offered<S: SegmentStore>(log: &LocalLog<S>) -> Option<Vec<(u64, u64)>> {
    let files = log.store().tier_files()?;
    let oldest = log.held_start().segment;
    let mut list = files.list_skeletons().ok()?;
    list.retain(|&(no, _)| no < oldest);
    Some(list)
}

/// Copies the skeletons replica `from` offers into `into`, whose own (left
/// by a shipping cut short) go first. Returns how many it copied and their
/// bytes; on Err the caller starts the shipping over.
pub async fn copy_skeletons<S: SegmentStore>(links: &Links, from: u64, into: &S) -> Result<(usize, u64), ShipError> {
    let refused = |why: String| ShipError::Refused { segment: 0, offset: 0, why };
    let answer = links
        .fetch(from, vec![ASK_SKELETONS], LIST_TIMEOUT)
        .await
        .map_err(|source| ShipError::Link { segment: 0, source })?;
    let list = decode_manifest(&answer).map_err(refused)?.ok_or_else(|| refused("its log is not open".into()))?;
    let Some(files) = into.tier_files() else {
        return match list.first() {
            None => Ok((0, 0)),
            Some(&(segment, _)) => Err(ShipError::Io {
                segment,
                source: std::io::Error::other("the peer's segments are in an object store: start with --tier"),
            }),
        };
    };
    for (no, _) in files.list_skeletons().map_err(|source| ShipError::Io { segment: 0, source })? {
        files.remove_skeleton(no).map_err(|source| ShipError::Io { segment: no, source })?;
    }
    let mut total = 0;
    for &(no, len) in &list {
        let bytes = fetch_skeleton(links, from, no, len).await?;
        files.write_skeleton(no, &bytes).map_err(|source| ShipError::Io { segment: no, source })?;
        total += len;
    }
    Ok((list.len(), total))
}

/// The `len` bytes of segment `no`'s skeleton on `from`, chunk after chunk.
async fn fetch_skeleton(links: &Links, from: u64, no: u64, len: u64) -> Result<Vec<u8>, ShipError> {
    let mut bytes = Vec::with_capacity(len as usize);
    while (bytes.len() as u64) < len {
        let (length, chunk) = fetch_chunk_as(links, from, no, bytes.len() as u64, ASK_SKELETON_CHUNK).await?;
        if length != len || chunk.is_empty() {
            let why = format!("a skeleton listed as {len} bytes came as {length}");
            return Err(ShipError::Refused { segment: no, offset: bytes.len() as u64, why });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::sim_file::SimStore;

    #[test]
    fn a_skeleton_chunk_request_is_told_from_a_segment_chunk() {
        let f = Fetch { segment: 3, offset: 4096, max: 100 };
        let asked = f.encode_as(ASK_SKELETON_CHUNK);
        assert_eq!(Fetch::decode_as(&asked, ASK_SKELETON_CHUNK), Some(f));
        assert_eq!(Fetch::decode(&asked), None, "not a segment's chunk");
        assert_eq!(Fetch::decode_as(&f.encode(), ASK_SKELETON_CHUNK), None);
    }

    #[test]
    fn a_source_without_a_log_is_not_ready_and_other_requests_pass() {
        assert_eq!(answer::<SimStore>(None, &[ASK_SKELETONS], None), Some(vec![NOT_READY]));
        assert_eq!(answer::<SimStore>(None, &[2], None), None);
        let f = Fetch { segment: 3, offset: 0, max: 100 }.encode_as(ASK_SKELETON_CHUNK);
        assert_eq!(answer::<SimStore>(None, &f, None), Some(Chunk::NotHeld.encode()));
    }
}
