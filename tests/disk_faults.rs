//! Disk faults a running server must survive, injected through the
//! in-memory backend (`SimStore::error_after_ops`, `set_capacity`):
//!
//! - a failed write or fdatasync (EIO) poisons the log: the appends waiting
//!   on that flush and every later one fail, nothing is written again,
//!   durable records stay readable, and a restart recovers exactly the
//!   acknowledged records;
//! - ENOSPC on a write, a sync or a segment creation does the same with the
//!   distinct `NoSpace` error, corrupts nothing, and a restart with space
//!   available again takes writes;
//! - through the shard: writes answer 503 (EIO) or 507 (ENOSPC), both with
//!   Retry-After, while reads and HEAD keep serving the durable data.
//!
//! The real server cannot inject these faults, so the HTTP status mapping is
//! checked by passing the shard's errors through `http::respond::error`.

mod common;

use common::sim::{config, drive_one, open, read_body};
use futures::executor::block_on;
use ringstream::http::respond;
use ringstream::protocol::headers::Lifetime;
use ringstream::protocol::names::split_v1_path;
use ringstream::protocol::offset::ReadFrom;
use ringstream::protocol::rules::ProducerPolicy;
use ringstream::protocol::{self, AppendReq, CreateReq, Live, Outcome, ReadReq, StreamKey, StreamOp, Surface};
use ringstream::shard::{Reply, Shard, ShardRequest};
use ringstream::storage::io::SegmentStore;
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{Error, Log, RecordHeader, RecordLoc};
use std::rc::Rc;

fn header(stream: u64, offset: u64) -> RecordHeader {
    RecordHeader { kind: 1, stream_id: stream, incarnation: 1, stream_offset: offset, body_len: 0 }
}

fn body(stream: u64, i: u64) -> Vec<u8> {
    let len = 100 + ((stream * 7919 + i * 104_729) % 2900) as usize;
    (0..len).map(|k| (k as u64 ^ (stream << 3) ^ i.wrapping_mul(31)) as u8).collect()
}

/// Appends `n` records of `stream` concurrently and waits for all; returns
/// each record's location, body and result.
fn append_batch(log: &Rc<Log<SimStore>>, stream: u64, n: u64) -> Vec<(RecordLoc, Vec<u8>, Result<(), Error>)> {
    let l = log.clone();
    drive_one(log, async move {
        let mut pending = Vec::new();
        for i in 0..n {
            let b = body(stream, i);
            let (loc, lsn) = l.append(header(stream, i), &b).expect("append before the fault");
            pending.push((loc, b, lsn));
        }
        let mut out = Vec::new();
        for (loc, b, lsn) in pending {
            out.push((loc, b, l.durable(lsn).await));
        }
        out
    })
}

fn is_kind(e: &Error, op: &str, no_space: bool) -> bool {
    match e {
        Error::Io { op: got, .. } => !no_space && *got == op,
        Error::NoSpace { op: got, .. } => no_space && *got == op,
        _ => false,
    }
}

#[test]
fn write_or_sync_error_poisons_the_log_and_durable_reads_go_on() {
    // (n-th I/O from now, errno, failing op, is it ENOSPC)
    let cases = [
        (1, libc::EIO, "write", false),
        (2, libc::EIO, "fdatasync", false),
        (1, libc::ENOSPC, "write", true),
        (2, libc::ENOSPC, "fdatasync", true),
        (1, libc::EDQUOT, "write", true),
    ];
    for (n, errno, op, no_space) in cases {
        let ctx = format!("errno {errno} on {op}");
        let store = SimStore::new();
        let (log, _, _) = open(store.clone(), config());
        // ~100 KiB acknowledged: a sealed (mapped) segment and a mirrored one.
        let before: Vec<_> = (0..3).flat_map(|s| append_batch(&log, s, 20)).collect();
        assert!(before.iter().all(|r| r.2.is_ok()), "{ctx}: healthy log failed an append");
        assert!(before.iter().any(|r| r.0.segment == 0) && before.iter().any(|r| r.0.segment == 1), "{ctx}");
        let durable = log.durable_lsn();

        store.error_after_ops(n, errno);
        let failed = append_batch(&log, 10, 3);
        for (_, _, r) in &failed {
            let e = r.as_ref().expect_err(&ctx);
            assert!(is_kind(e, op, no_space), "{ctx}: waiter got {e:?}");
        }
        assert!(log.is_poisoned(), "{ctx}");
        assert_eq!(log.durable_lsn(), durable, "{ctx}: a failed flush moved the durable point");
        // Every later append fails with the first error; nothing more is written.
        let ops = store.ops();
        for i in 0..3 {
            let e = log.append(header(11, i), b"later").expect_err(&ctx);
            assert!(is_kind(&e, op, no_space), "{ctx}: later append got {e:?}");
        }
        let l = log.clone();
        assert!(
            drive_one(&log, async move { l.durable(durable).await }).is_ok(),
            "{ctx}: durable lsn no longer durable"
        );
        assert_eq!(store.ops(), ops, "{ctx}: the poisoned log kept doing I/O");
        // Durable records read back, from the mapped and the mirrored segment.
        for (loc, b, _) in &before {
            assert!(read_body(&log, *loc) == *b, "{ctx}: record at {loc:?} changed");
        }
        drop(log);

        // A restart (power cut now: unsynced bytes dropped, or kept whole)
        // recovers exactly the acknowledged records, then takes writes again.
        for image in [store.crash_image(None), store.crash_image(Some(usize::MAX))] {
            let (log, recovered, _) = open(image, config());
            let kept = recovered.len();
            assert!(kept == before.len() || (op == "fdatasync" && kept == before.len() + 3), "{ctx}: {kept}");
            for (r, (loc, b, _)) in recovered.iter().zip(&before) {
                assert_eq!(r.loc, *loc, "{ctx}");
                assert!(read_body(&log, r.loc) == *b, "{ctx}: recovered record differs");
            }
            let after = append_batch(&log, 12, 4);
            assert!(after.iter().all(|r| r.2.is_ok()), "{ctx}: recovered log refused writes");
        }
    }
}

#[test]
fn enospc_creating_a_segment_stops_writes_without_damage_and_restart_recovers() {
    let store = SimStore::new();
    let (log, _, _) = open(store.clone(), config());
    let first = append_batch(&log, 1, 5);
    assert!(first.iter().all(|r| r.2.is_ok()));
    // The active segment and the one prepared ahead exist; nothing more fits.
    let files = block_on(store.list()).unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    store.set_capacity(Some(store.used_bytes()));

    // One burst rolls into the prepared segment 1 and on into segment 2,
    // whose file cannot be created: those appends cannot become durable.
    let results = append_batch(&log, 2, 100);
    assert!(results.iter().any(|r| r.0.segment == 2), "the burst did not reach a third segment");
    let errs: Vec<_> = results.iter().filter_map(|r| r.2.as_ref().err()).collect();
    assert!(!errs.is_empty(), "no append failed although no segment could be created");
    for e in &errs {
        assert!(matches!(e, Error::NoSpace { op: "create", .. }), "got {e:?}");
    }
    // Acknowledged ones form a prefix; the rest failed with NoSpace.
    let acked = results.iter().take_while(|r| r.2.is_ok()).count();
    assert!(results[acked..].iter().all(|r| r.2.is_err()), "an acknowledgement after a failure");
    assert!(matches!(log.append(header(3, 0), b"x"), Err(Error::NoSpace { .. })));
    assert_eq!(block_on(store.list()).unwrap().len(), 2, "a half-made segment was left behind");
    for (loc, b, _) in first.iter().chain(&results[..acked]) {
        assert!(read_body(&log, *loc) == *b, "durable record unreadable after ENOSPC");
    }
    drop(log);
    let must: Vec<_> = first.iter().chain(&results[..acked]).collect();

    // Restart with the disk still full: recovery frees the unused prepared
    // segment, so it boots, but writes stop again at the next rollover.
    let full = store.crash_image(Some(usize::MAX));
    full.set_capacity(Some(store.used_bytes()));
    let (log, recovered, _) = open(full.clone(), config());
    assert!(recovered.len() >= must.len());
    for (r, (loc, b, _)) in recovered.iter().zip(&must) {
        assert_eq!(r.loc, *loc);
        assert!(read_body(&log, r.loc) == *b);
    }
    let l = log.clone();
    let again = drive_one(&log, async move {
        let mut out = Vec::new();
        for i in 0..100 {
            out.push(match l.append(header(4, i), &body(4, i)) {
                Ok((_, lsn)) => l.durable(lsn).await,
                Err(e) => Err(e),
            });
        }
        out
    });
    assert!(again.iter().any(|r| matches!(r, Err(Error::NoSpace { .. }))), "still full, yet no ENOSPC");
    assert!(again.iter().all(|r| matches!(r, Ok(()) | Err(Error::NoSpace { .. }))), "{again:?}");
    drop(log);

    // Space freed: everything acknowledged is there and writes work.
    let freed = full.crash_image(None);
    let (log, recovered, _) = open(freed, config());
    for (r, (loc, b, _)) in recovered.iter().zip(&must) {
        assert_eq!(r.loc, *loc);
        assert!(read_body(&log, r.loc) == *b);
    }
    let ok = append_batch(&log, 5, 60);
    assert!(ok.iter().all(|r| r.2.is_ok()), "writes still fail after space was freed");
}

// ---------------------------------------------------------------------------
// Through the shard and the HTTP status mapping

fn key() -> StreamKey {
    let (bucket, stream) = split_v1_path("faults/s1").unwrap();
    StreamKey { bucket, stream }
}

fn req(op: StreamOp) -> ShardRequest {
    ShardRequest::Stream { key: key(), surface: Surface::V1, if_incarnation: None, op }
}

fn create() -> StreamOp {
    StreamOp::Create(CreateReq {
        content_type: Some("application/octet-stream".into()),
        lifetime: Lifetime::Forever,
        closed: false,
        body: Vec::new(),
        if_match: None,
        fork: None,
    })
}

fn append(data: &[u8]) -> StreamOp {
    StreamOp::Append(AppendReq {
        content_type: Some("application/octet-stream".into()),
        body: data.to_vec(),
        close: false,
        stream_seq: None,
        producer: None,
        if_match: None,
    })
}

fn read_all() -> StreamOp {
    StreamOp::Read(ReadReq { from: ReadFrom::Start, live: Live::No, cursor: None, if_none_match: None })
}

fn handle(shard: &Rc<Shard<SimStore>>, op: StreamOp) -> Reply {
    let s = shard.clone();
    drive_one(shard.log(), async move { s.handle(req(op)).await })
}

fn status_of(e: &protocol::Error) -> (u16, bool) {
    let r = respond::error(Surface::V1, e);
    (r.status, r.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("retry-after")))
}

#[test]
fn poisoned_shard_answers_503_or_507_to_writes_and_keeps_serving_reads() {
    for (errno, status) in [(libc::EIO, 503u16), (libc::ENOSPC, 507)] {
        let store = SimStore::new();
        let (log, records, _) = open(store.clone(), config());
        let shard = Rc::new(Shard::recover(0, 1, log, &records, ProducerPolicy::default()).expect("shard"));
        assert!(matches!(handle(&shard, create()), Ok(Outcome::Created { new: true, .. })));
        for part in ["one,", "two,", "three"] {
            assert!(matches!(handle(&shard, append(part.as_bytes())), Ok(Outcome::Appended { .. })));
        }
        let durable = b"one,two,three".to_vec();

        store.error_after_ops(1, errno);
        for (i, op) in [append(b"lost"), append(b"lost too"), create(), StreamOp::Delete].into_iter().enumerate() {
            let e = handle(&shard, op).expect_err("a write on a poisoned shard succeeded");
            assert_eq!(status_of(&e), (status, true), "errno {errno}, write {i}: {e}");
        }
        // The stream's last record failed; reads and HEAD serve the durable part.
        match handle(&shard, read_all()) {
            Ok(Outcome::Read(r)) => {
                assert_eq!(r.body, durable, "errno {errno}: read after poison");
                assert_eq!(r.next_offset.pos, durable.len() as u64);
            }
            other => panic!("errno {errno}: read after poison: {other:?}"),
        }
        match handle(&shard, StreamOp::Head { if_none_match: None }) {
            Ok(Outcome::Head { info, .. }) => assert_eq!(info.next_offset.pos, durable.len() as u64),
            other => panic!("errno {errno}: HEAD after poison: {other:?}"),
        }
        let log = shard.log().clone();
        drop(shard);
        drop(log);

        // After a restart the stream holds exactly the acknowledged bytes and takes writes.
        let (log, records, _) = open(store.crash_image(None), config());
        let shard =
            Rc::new(Shard::recover(0, 1, log, &records, ProducerPolicy::default()).expect("shard after restart"));
        assert!(matches!(handle(&shard, append(b",four")), Ok(Outcome::Appended { .. })));
        match handle(&shard, read_all()) {
            Ok(Outcome::Read(r)) => assert_eq!(r.body, b"one,two,three,four", "errno {errno}: after restart"),
            other => panic!("errno {errno}: read after restart: {other:?}"),
        }
    }
}

#[test]
fn storage_errors_map_to_their_statuses() {
    // Backpressure, disk broken, disk full: each has its own answer.
    let overloaded = protocol::Error::Overloaded { retry_after_secs: 1 };
    assert_eq!(status_of(&overloaded), (503, true));
    assert_eq!(status_of(&protocol::Error::Unavailable("x".into())), (503, true));
    assert_eq!(status_of(&protocol::Error::InsufficientStorage("x".into())), (507, true));
    let r = respond::error(Surface::Ds, &protocol::Error::InsufficientStorage("disk full".into()));
    assert_eq!(r.status, 507);
}
