//! Inputs the fuzz targets in fuzz/ (cargo-fuzz, see docs/testing.md) found
//! to crash, rebuilt as plain tests so `cargo test` keeps them fixed without
//! cargo-fuzz. The raw crash inputs live in fuzz/regressions/<target>/ and
//! scripts/fuzz-smoke.sh replays them through the targets.

use futures::executor::block_on;
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::storage::io::{SegmentFile, SegmentStore};
use ringstream::storage::record::{self, RecordHeader};
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{Log, LogConfig};

fn header(stream_offset: u64, body_len: usize) -> RecordHeader {
    RecordHeader { kind: 0x17, stream_id: 3, incarnation: 1, stream_offset, body_len: body_len as u32 }
}

/// log_recovery, fuzz/regressions/log_recovery/record-repeated-after-segment-end:
/// a segment's first record appears again right after its last one (a
/// replayed or misdirected write). The copy verifies, since its CRC is seeded
/// with the same segment number, and its stream offset goes backwards. The
/// scan used to `debug_assert!` that offsets never go backwards, so a debug
/// build panicked at boot on these disk bytes. Recovery now returns what the
/// disk holds, in order; judging a stream's offsets is the shard replay's job
/// (it fails the boot with an error on a gap or overlap).
#[test]
fn record_repeated_after_the_last_one_does_not_panic_recovery() {
    let first = vec![0xa5; 435];
    let second = vec![0x5a; 615];
    let mut image = Vec::new();
    record::encode(1, &header(0, first.len()), &first, &mut image);
    let first_len = image.len();
    record::encode(1, &header(435, second.len()), &second, &mut image);
    let copy = image[..first_len].to_vec();
    image.extend_from_slice(&copy);
    let repeated_at = (image.len() - first_len) as u64;
    image.resize(8192, 0);

    let store = SimStore::new();
    block_on(async {
        let file = store.create(1, image.len() as u64).await.unwrap();
        file.write_at(image, 0).await.unwrap();
        file.sync().await.unwrap();
    });
    let cfg = LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: SEGMENT_BYTES_MIN };
    let (_log, recovered, report) = block_on(Log::open(store, cfg)).expect("open");
    let found: Vec<(u64, u64)> = recovered.iter().map(|r| (r.loc.pos, r.header.stream_offset)).collect();
    assert_eq!(found, vec![(0, 0), (first_len as u64, 435), (repeated_at, 0)]);
    assert_eq!(report.torn_tail, None);
}
