//! Fault injection for tiered storage, over the in-memory `SimStore` and an
//! in-memory object store (the real path, SeaweedFS over S3, is driven by
//! scripts/tiering.sh). What must hold:
//!
//! - a moved segment reads back byte-exact through block fetches, and its
//!   local file is gone while its skeleton stays;
//! - with the store down, a move fails and changes nothing, a cold read
//!   fails with `ObjectStore` (never other bytes), hot reads go on;
//! - a crash at every step of a move (the disk dies at each operation in
//!   turn) recovers exactly the records appended, each readable byte-exact
//!   after the restart, and a sweep then leaves exactly one object per
//!   remote segment: nothing lost, no orphan kept.

mod common;

use common::sim::{config, drive_until};
use futures::executor::block_on;
use ringstream::storage::error::Error;
use ringstream::storage::io::SegmentStore;
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::tiered::TierFiles;
use ringstream::storage::{Log, RecordHeader, RecordLoc};
use ringstream::tier::TierClient;
use std::rc::Rc;

const KIND_DATA: u8 = 2;
/// What a skeleton keeps of each test record: its first 8 bytes.
const META_BYTES: usize = 8;

fn keep(_: &RecordHeader, body: &[u8]) -> usize {
    META_BYTES.min(body.len())
}

fn body(i: u64) -> Vec<u8> {
    let len = 500 + (i * 7919) % 2500;
    (0..len).map(|j| (i.wrapping_mul(31) ^ j.wrapping_mul(17)) as u8).collect()
}

fn open(store: SimStore, client: &TierClient) -> (Rc<Log<SimStore>>, Vec<(RecordHeader, RecordLoc)>) {
    let (log, recovered, _) = common::sim::open_tiered(store, config(), client);
    (log, recovered.iter().map(|r| (r.header, r.loc)).collect())
}

/// Appends `n` records and waits until they are durable.
fn fill(log: &Rc<Log<SimStore>>, n: u64) -> Vec<(RecordHeader, RecordLoc)> {
    let l = log.clone();
    drive_until(log, async move {
        let mut out = Vec::new();
        let mut last = 0;
        for i in 0..n {
            let h = RecordHeader { kind: KIND_DATA, stream_id: 1, incarnation: 1, stream_offset: i, body_len: 0 };
            let (loc, lsn) = l.append(h, &body(i)).unwrap();
            out.push((RecordHeader { body_len: loc.body_len, ..h }, loc));
            last = lsn;
        }
        l.durable(last).await.unwrap();
        out
    })
}

fn tier(log: &Rc<Log<SimStore>>, no: u64) -> Result<u64, Error> {
    let l = log.clone();
    drive_until(log, async move { l.tier_segment(no, keep).await })
}

/// Reads a whole record body, fetching cold blocks as the shard does.
fn read(log: &Rc<Log<SimStore>>, loc: RecordLoc) -> Result<Vec<u8>, Error> {
    let l = log.clone();
    drive_until(log, async move {
        loop {
            let mut out = Vec::new();
            match l.read_body(loc, 0..loc.body_len as usize, &mut out) {
                Err(Error::Cold(need)) => l.fetch_cold(need).await?,
                r => return r.map(|()| out),
            }
        }
    })
}

fn objects(client: &TierClient) -> usize {
    block_on(client.list(client.shard_prefix(0))).unwrap().len()
}

#[test]
fn a_moved_segment_reads_back_through_block_fetches() {
    let (client, _) = TierClient::in_memory("moved");
    let (log, _) = open(SimStore::new(), &client);
    let records = fill(&log, 120);
    let sealed = log.sealed_segments();
    assert!(sealed.len() >= 3, "the records span several segments: {sealed:?}");
    let before = log.local_bytes();
    for &no in &sealed[..2] {
        let len = tier(&log, no).unwrap();
        assert!(len > 0);
    }
    assert_eq!(log.remote_segments().0, 2);
    assert_eq!(objects(&client), 2);
    assert!(log.local_bytes() < before, "the moved files left the local disk");
    let files: Vec<u64> = block_on(log.store().list()).unwrap().iter().map(|f| f.0).collect();
    assert!(!files.contains(&sealed[0]) && !files.contains(&sealed[1]), "{files:?}");
    let skeletons: Vec<u64> = log.store().list_skeletons().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(skeletons, sealed[..2].to_vec());
    for (i, (_, loc)) in records.iter().enumerate() {
        assert_eq!(read(&log, *loc).unwrap(), body(i as u64), "record {i} in segment {}", loc.segment);
    }
    assert!(log.stats().tier.cold_fetched > 0);
}

#[test]
fn a_down_store_fails_moves_and_cold_reads_but_not_hot_reads() {
    let (client, down) = TierClient::in_memory("down");
    let (log, _) = open(SimStore::new(), &client);
    let records = fill(&log, 120);
    let sealed = log.sealed_segments();
    tier(&log, sealed[0]).unwrap();
    down.set_down(true);
    let moved = tier(&log, sealed[1]);
    assert!(matches!(moved, Err(Error::ObjectStore { .. })), "{moved:?}");
    assert_eq!(log.remote_segments().0, 1, "the failed move changed nothing");
    assert_eq!(log.store().list_skeletons().unwrap().len(), 1);
    assert!(!client.is_up());
    for (i, (_, loc)) in records.iter().enumerate() {
        let got = read(&log, *loc);
        if loc.segment == sealed[0] {
            assert!(matches!(got, Err(Error::ObjectStore { .. })), "record {i}: {got:?}");
        } else {
            assert_eq!(got.unwrap(), body(i as u64), "hot record {i}");
        }
    }
    down.set_down(false);
    tier(&log, sealed[1]).unwrap();
    for (i, (_, loc)) in records.iter().enumerate() {
        assert_eq!(read(&log, *loc).unwrap(), body(i as u64), "record {i} after the store came back");
    }
}

/// Kills the disk at the k-th operation of a move, for every k until a move
/// completes untouched; after each crash the restarted log has every record.
#[test]
fn a_crash_at_any_step_of_a_move_loses_nothing_and_leaves_no_orphan() {
    for k in 1.. {
        let (client, _) = TierClient::in_memory(&format!("crash-{k}"));
        let store = SimStore::new();
        let (log, _) = open(store.clone(), &client);
        let records = fill(&log, 120);
        let sealed = log.sealed_segments();
        tier(&log, sealed[0]).unwrap();
        store.fail_after_ops(k);
        let moved = tier(&log, sealed[1]);
        let image = store.crash_image(None);
        drop(log);
        let (log, recovered) = open(image, &client);
        let want: Vec<_> = records.iter().map(|(h, loc)| (*h, *loc)).collect();
        assert_eq!(recovered, want, "crash at op {k}: the recovered records differ");
        for (i, (_, loc)) in records.iter().enumerate() {
            assert_eq!(read(&log, *loc).unwrap(), body(i as u64), "crash at op {k}: record {i}");
        }
        let l = log.clone();
        drive_until(&log, async move { l.sweep_remote().await }).unwrap();
        assert_eq!(objects(&client), log.remote_segments().0 as usize, "crash at op {k}: orphaned objects");
        let remote = log.remote_segments().0;
        assert!(remote == 1 || remote == 2, "crash at op {k}: {remote} remote segments");
        if moved.is_ok() {
            assert_eq!(remote, 2, "a move that completed is remote after the restart");
            // The skeleton, then the tier record's write (and sync): at least
            // two crash points were tried before one that does not hit the move.
            assert!(k > 2, "the move touched the disk {} times", k - 1);
            break;
        }
    }
}

/// The last gap: the tier record is durable but the process died before
/// unlinking the local file. Recovery finishes the move.
#[test]
fn a_crash_between_the_tier_record_and_the_unlink_finishes_the_move() {
    use ringstream::storage::io::SegmentFile;
    let (client, _) = TierClient::in_memory("unlink");
    let store = SimStore::new();
    let (log, _) = open(store.clone(), &client);
    let records = fill(&log, 120);
    let no = log.sealed_segments()[0];
    let bytes = block_on(log.store().list()).unwrap().into_iter().find(|f| f.0 == no).unwrap();
    let image_of_file = log.store().map(no).unwrap().bytes().to_vec();
    assert_eq!(image_of_file.len() as u64, bytes.1);
    tier(&log, no).unwrap();
    drop(log);
    // Put the file back, as if the unlink never happened.
    let image = store.crash_image(None);
    let file = block_on(image.create(no, image_of_file.len() as u64)).unwrap();
    let mut buf = file.alloc_buf(image_of_file.len());
    buf.as_mut_slice().copy_from_slice(&image_of_file);
    block_on(file.write_at(buf, 0)).unwrap();
    block_on(file.sync()).unwrap();
    let (log, recovered) = open(image, &client);
    let files: Vec<u64> = block_on(log.store().list()).unwrap().iter().map(|f| f.0).collect();
    assert!(!files.contains(&no), "recovery deleted the local file of the remote segment: {files:?}");
    assert_eq!(log.remote_segments().0, 1);
    assert_eq!(recovered, records);
    for (i, (_, loc)) in records.iter().enumerate() {
        assert_eq!(read(&log, *loc).unwrap(), body(i as u64), "record {i}");
    }
}
