//! The batched log (a replica's copy of a replicated log) on the simulated
//! disk: a follower that copies its leader's batches holds byte for byte
//! the same segments; a follower that crashes anywhere recovers a prefix
//! of the leader's batches, every durable one included, and catches up to
//! the same bytes; a cut-back (a tail the consensus discarded) leaves, on
//! disk too, exactly the kept prefix, even when a crash interrupts it.
//!
//! Seeds: `BATCH_SEEDS` (default 12) runs of each randomized test, or
//! `BATCH_SEED=n` for one; every failure names its seed.

#[path = "common/rng.rs"]
mod rng;

use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::storage::io::SegmentStore;
use ringstream::storage::log::{Batch, BatchEnd, BatchMark, LocalLog, LOG_START};
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{Error, LogConfig, RecordHeader, RecordLoc};
use rng::Rng;
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

type Log = Rc<LocalLog<SimStore>>;

fn cfg() -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: 4 * 1024 * 1024 }
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("BATCH_SEED") {
        return vec![s.parse().expect("BATCH_SEED is a number")];
    }
    let n = std::env::var("BATCH_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    (1..=n).collect()
}

fn open(store: SimStore) -> Result<(Log, Vec<BatchMark>), Error> {
    open_with_records(store).map(|(log, marks, _)| (log, marks))
}

/// The records recovery hands up, as (header, where).
type Records = Vec<(RecordHeader, RecordLoc)>;

/// [`open`], with the records recovery hands up.
fn open_with_records(store: SimStore) -> Result<(Log, Vec<BatchMark>, Records), Error> {
    let (log, recovered, marks, report) = block_on(LocalLog::open_batched(store, cfg()))?;
    assert_eq!(report.records, recovered.len());
    Ok((Rc::new(log), marks, recovered.iter().map(|r| (r.header, r.loc)).collect()))
}

/// Runs `fut` beside the writers and preparers of `logs` until nothing can
/// make progress; the future must have finished (else a lost wake-up).
fn drive<T: 'static>(logs: &[&Log], fut: impl Future<Output = T> + 'static) -> T {
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    for log in logs {
        let (w, p) = ((*log).clone(), (*log).clone());
        spawner.spawn_local(async move { w.run_writer().await }).unwrap();
        spawner.spawn_local(async move { p.run_preparer().await }).unwrap();
    }
    let out = Rc::new(RefCell::new(None));
    let o = out.clone();
    spawner.spawn_local(async move { *o.borrow_mut() = Some(fut.await) }).unwrap();
    pool.run_until_stalled();
    let value = out.borrow_mut().take();
    value.expect("stalled: the task never finished")
}

/// One entry as the leader proposed it.
#[derive(Clone)]
struct Entry {
    batch: Batch,
    term: u64,
    index: u64,
}

/// Appends a few random records to `log` (none, sometimes: the entry a
/// new leader proposes first is empty) and closes them as entry `index`.
fn lead_one(log: &Log, rng: &mut Rng, term: u64, index: u64) -> Entry {
    let records = if rng.chance(100_000) { 0 } else { 1 + rng.below(6) };
    for i in 0..records {
        let body = rng.bytes(3000, true);
        let h = RecordHeader { kind: 1, stream_id: rng.below(4), incarnation: 0, stream_offset: i, body_len: 0 };
        log.append(h, &body).expect("append");
    }
    let batch = log.pending_batch().expect("pending batch");
    log.close_batch(term, index, log.tail_position()).expect("close");
    Entry { batch, term, index }
}

/// A leader's log of `n` entries of `term` after `prefix` (entries it
/// copied first as a follower), every one durable.
fn leader(rng: &mut Rng, prefix: &[Entry], n: u64, term: u64) -> (Log, Vec<Entry>) {
    let (log, _) = open(SimStore::new()).unwrap();
    let mut entries = prefix.to_vec();
    for e in prefix {
        log.append_batch(&e.batch, e.term, e.index).expect("copy the prefix");
    }
    for _ in 0..n {
        let index = entries.len() as u64 + 1;
        entries.push(lead_one(&log, rng, term, index));
    }
    settle(&log);
    (log, entries)
}

/// Runs `log`'s writer until it has nothing left to do; true if all the
/// log holds is durable then (false: the disk died).
fn flush(log: &Log) -> bool {
    drive(&[log], async {});
    log.durable_lsn() >= log.tail_lsn()
}

/// Waits until everything `log` holds is durable.
fn settle(log: &Log) {
    assert!(flush(log), "the log could not be made durable");
}

/// Copies `entries` into `log` one by one, each made durable before the
/// next (as a follower does before acknowledging); returns how many became
/// durable before the disk died.
fn follow(log: &Log, entries: &[Entry]) -> usize {
    let mut durable = 0;
    for e in entries {
        if log.append_batch(&e.batch, e.term, e.index).is_err() || !flush(log) {
            break;
        }
        durable += 1;
    }
    durable
}

/// The segments both logs hold up to their active ones must be the same
/// bytes, and so must the active segment numbers.
fn assert_same_bytes(a: &Log, b: &Log, seed: u64) {
    let list = |l: &Log| block_on(l.store().list()).unwrap();
    let (la, lb) = (list(a), list(b));
    let last = a.batch_start().segment;
    assert_eq!(last, b.batch_start().segment, "seed {seed}: the logs end in other segments");
    for no in 0..=last {
        let has = |l: &[(u64, u64)]| l.iter().any(|&(n, _)| n == no);
        assert!(has(&la) && has(&lb), "seed {seed}: segment {no} missing");
        let (ma, mb) = (a.store().map(no).unwrap(), b.store().map(no).unwrap());
        assert!(ma.bytes() == mb.bytes(), "seed {seed}: segment {no} differs");
    }
}

fn marks_of(entries: &[Entry]) -> Vec<(u64, u64)> {
    entries.iter().map(|e| (e.term, e.index)).collect()
}

fn closes(marks: &[BatchMark]) -> Vec<(u64, u64)> {
    marks.iter().map(|m| (m.close.term, m.close.index)).collect()
}

#[test]
fn a_follower_holds_the_leaders_bytes_and_a_lagging_one_catches_up_from_them() {
    for seed in seeds() {
        let mut rng = Rng::from_seed(seed);
        let (lead, entries) = leader(&mut rng, &[], 60, 1);
        assert!(lead.batch_start().segment >= 3, "seed {seed}: the test should cross rollovers");
        let (f, _) = open(SimStore::new()).unwrap();
        assert_eq!(follow(&f, &entries), entries.len());
        assert_same_bytes(&lead, &f, seed);
        // A follower that lags gets the entries read back from the
        // leader's segments, not the ones proposed: the same bytes.
        let (lagging, _) = open(SimStore::new()).unwrap();
        let (_, marks) = open(lead.store().crash_image(None)).unwrap();
        assert_eq!(closes(&marks), marks_of(&entries), "seed {seed}");
        for m in &marks {
            assert_eq!(f.mark(m.close.index).unwrap(), Some(*m), "seed {seed}");
        }
        assert_eq!((f.first_index(), f.last_index()), (Some(1), entries.len() as u64));
        assert_eq!(f.mark(entries.len() as u64 + 1).unwrap(), None);
        let reread: Vec<Entry> = marks
            .iter()
            .map(|m| Entry { batch: lead.batch_of(m).unwrap(), term: m.close.term, index: m.close.index })
            .collect();
        assert_eq!(follow(&lagging, &reread), entries.len());
        assert_same_bytes(&lead, &lagging, seed);
    }
}

#[test]
fn a_follower_crashing_anywhere_keeps_every_durable_batch_and_catches_up() {
    for seed in seeds() {
        let mut rng = Rng::from_seed(seed);
        let (lead, entries) = leader(&mut rng, &[], 40, 1);
        let (_, _, all_records) = open_with_records(lead.store().crash_image(None)).unwrap();
        let clean = SimStore::new();
        let (f, _) = open(clean.clone()).unwrap();
        follow(&f, &entries);
        let ops = clean.ops();
        for _ in 0..8 {
            let store = SimStore::new();
            store.fail_after_ops(1 + rng.below(ops));
            let Ok((f, _)) = open(store.clone()) else { continue };
            let durable = follow(&f, &entries);
            let flips: Vec<usize> = (0..rng.below(3)).map(|_| rng.below(1 << 20) as usize).collect();
            let keep = rng.next();
            let image = store.crash_image_with(&|sector| keep >> (sector % 64) & 1 == 1, &flips);
            let (back, marks, records) =
                open_with_records(image).unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
            let end = marks.last().map_or((0, 0), |m| (m.end.segment, m.end.pos));
            let expected: Vec<_> = all_records.iter().filter(|(_, l)| (l.segment, l.pos) < end).copied().collect();
            assert!(records == expected, "seed {seed}: recovery handed up records of no closed batch");
            assert!(marks.len() >= durable, "seed {seed}: {} batches recovered, {durable} were durable", marks.len());
            assert_eq!(closes(&marks), marks_of(&entries[..marks.len()]), "seed {seed}: not a prefix");
            assert_eq!(follow(&back, &entries[marks.len()..]), entries.len() - marks.len(), "seed {seed}");
            assert_same_bytes(&lead, &back, seed);
        }
    }
}

#[test]
fn a_cut_back_leaves_the_new_leaders_bytes_even_through_a_crash() {
    for seed in seeds() {
        let mut rng = Rng::from_seed(seed);
        let (_old, old_entries) = leader(&mut rng, &[], 40, 1);
        let keep = rng.below(old_entries.len() as u64) as usize;
        // Fewer new entries than discarded ones, mostly: the old bytes
        // beyond the new tail must be gone, not overwritten by chance.
        let more = 1 + rng.below(6);
        let (new, new_entries) = leader(&mut rng, &old_entries[..keep], more, 2);
        // A follower of the old leader learns from the new one that its
        // entries after `keep` conflict, cuts back and follows.
        let store = SimStore::new();
        let (f, _) = open(store.clone()).unwrap();
        assert_eq!(follow(&f, &old_entries), old_entries.len());
        let (_, marks) = open(store.crash_image(None)).unwrap();
        let to = keep.checked_sub(1).map(|i| marks[i]);
        let before = store.ops();
        let l = f.clone();
        drive(&[&f], async move { l.cut_back(to).await }).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let cut_ops = store.ops() - before;
        assert_eq!(f.last_mark().map(|m| m.close.index), to.map(|m| m.close.index));
        assert_eq!(follow(&f, &new_entries[keep..]), new_entries.len() - keep, "seed {seed}");
        assert_same_bytes(&new, &f, seed);
        // The same cut-back, interrupted by a crash at each of its
        // operations: what boots is a prefix of the old log at least as
        // long as the kept one, and cutting back again converges.
        for at in 1..=cut_ops {
            let store = SimStore::new();
            let (f, _) = open(store.clone()).unwrap();
            follow(&f, &old_entries);
            store.fail_after_ops(at);
            let l = f.clone();
            let _ = drive(&[&f], async move { l.cut_back(to).await });
            let (back, marks) = open(store.crash_image(Some(rng.below(4096) as usize)))
                .unwrap_or_else(|e| panic!("seed {seed}: crash {at} of the cut-back: {e}"));
            assert!(marks.len() >= keep, "seed {seed}: the cut-back lost kept batches");
            assert_eq!(closes(&marks), marks_of(&old_entries[..marks.len()]), "seed {seed}");
            let to = keep.checked_sub(1).map(|i| marks[i]);
            let l = back.clone();
            drive(&[&back], async move { l.cut_back(to).await }).unwrap();
            follow(&back, &new_entries[keep..]);
            assert_same_bytes(&new, &back, seed);
        }
    }
}

#[test]
fn recovery_cuts_records_never_closed_and_they_never_come_back() {
    let mut rng = Rng::from_seed(7);
    let store = SimStore::new();
    let (log, _) = open(store.clone()).unwrap();
    let first = lead_one(&log, &mut rng, 1, 1);
    // Records appended and flushed but never closed (a leader that lost
    // office before proposing them), then a crash.
    for i in 0..5 {
        let h = RecordHeader { kind: 1, stream_id: 9, incarnation: 0, stream_offset: i, body_len: 0 };
        log.append(h, &[0xAB; 700]).unwrap();
    }
    settle(&log);
    let (back, marks) = open(store.crash_image(None)).unwrap();
    assert_eq!(closes(&marks), vec![(1, 1)]);
    assert_eq!(back.batch_start(), marks[0].end, "writing resumes right after the last close");
    // A short batch after it, then a crash: the old records were zeroed,
    // so nothing of them is read back behind the new batch.
    back.append(header(), b"x").unwrap();
    back.close_batch(1, 2, back.tail_position()).unwrap();
    settle(&back);
    let image = back.store().crash_image(None);
    let (_, marks) = open(image.clone()).unwrap();
    assert_eq!(closes(&marks), vec![(1, 1), (1, 2)]);
    let bytes = image.map(marks[1].end.segment).unwrap();
    assert!(bytes.bytes()[marks[1].end.pos as usize..].iter().all(|&b| b == 0), "stale bytes after the last batch");
    let _ = first;
}

type Waited = Rc<RefCell<Option<Result<(), Error>>>>;

/// A log holding entry 1, durable, and entry 2 (one record) closed but not
/// written, and a task waiting for that record (no writer runs: it is still
/// waiting when a cut comes): the log, entry 1's mark, the pool running the
/// task and where its result lands.
fn waiting_on_entry_2(rng: &mut Rng) -> (Log, Option<BatchMark>, LocalPool, Waited) {
    let (log, _) = open(SimStore::new()).unwrap();
    lead_one(&log, rng, 1, 1);
    settle(&log);
    let kept = log.last_mark();
    let (_, lsn) = log.append(header(), b"gone").unwrap();
    log.close_batch(1, 2, log.tail_position()).unwrap();
    let pool = LocalPool::new();
    let result: Waited = Rc::default();
    let (l, r) = (log.clone(), result.clone());
    pool.spawner().spawn_local(async move { *r.borrow_mut() = Some(l.durable(lsn).await) }).unwrap();
    (log, kept, pool, result)
}

fn header() -> RecordHeader {
    RecordHeader { kind: 1, stream_id: 1, incarnation: 0, stream_offset: 0, body_len: 0 }
}

/// Cuts `log` back to `to` on `pool`, to the end.
fn cut(pool: &mut LocalPool, log: &Log, to: Option<BatchMark>) {
    let l = log.clone();
    pool.spawner().spawn_local(async move { l.cut_back(to).await.unwrap() }).unwrap();
    pool.run_until_stalled();
}

#[test]
fn a_waiter_for_a_discarded_record_fails() {
    let (log, kept, mut pool, result) = waiting_on_entry_2(&mut Rng::from_seed(3));
    pool.run_until_stalled();
    assert!(result.borrow().is_none());
    cut(&mut pool, &log, kept);
    assert!(matches!(*result.borrow(), Some(Err(Error::CutBack))), "got {:?}", result.borrow());
    assert_eq!(log.last_mark(), kept);
}

/// A leader's refused proposals leave voids after its last entry (their
/// records cut back, their lsns never reused); a later cut-back below that
/// entry must still fail its waiters, however many lsns the voids took.
#[test]
fn a_waiter_fails_when_a_cut_back_passes_earlier_voids() {
    let mut rng = Rng::from_seed(7);
    let (log, kept, mut pool, result) = waiting_on_entry_2(&mut rng);
    pool.run_until_stalled();
    for _ in 0..3 {
        log.append(header(), &[7; 500]).unwrap();
        cut(&mut pool, &log, log.last_mark());
    }
    cut(&mut pool, &log, kept);
    // Another entry 2 takes the discarded one's place, and is committed.
    lead_one(&log, &mut rng, 2, 2);
    log.commit_to(2);
    settle(&log);
    pool.run_until_stalled();
    assert!(matches!(*result.borrow(), Some(Err(Error::CutBack))), "got {:?}", result.borrow());
}

#[test]
fn a_record_is_acknowledged_once_durable_and_committed_and_never_cut_back() {
    let mut rng = Rng::from_seed(11);
    let (log, _) = open(SimStore::new()).unwrap();
    lead_one(&log, &mut rng, 1, 1);
    let (_, lsn) = log.append(header(), b"waits").unwrap();
    log.close_batch(1, 2, log.tail_position()).unwrap();
    settle(&log);
    let mut pool = LocalPool::new();
    let result = Rc::new(RefCell::new(None));
    let (l, r) = (log.clone(), result.clone());
    pool.spawner().spawn_local(async move { *r.borrow_mut() = Some(l.durable(lsn).await) }).unwrap();
    pool.run_until_stalled();
    assert!(result.borrow().is_none(), "durable here is not enough: it must be committed");
    log.commit_to(1);
    pool.run_until_stalled();
    assert!(result.borrow().is_none(), "committed to entry 1 only");
    log.commit_to(2);
    pool.run_until_stalled();
    assert!(matches!(*result.borrow(), Some(Ok(()))));
    let first = log.mark(1).unwrap();
    let l = log.clone();
    let refused = drive(&[&log], async move { l.cut_back(first).await });
    assert!(matches!(refused, Err(Error::Batch(_))), "cut back below the committed index: {refused:?}");
}

#[test]
fn a_batch_that_does_not_fit_is_refused_and_changes_nothing() {
    let mut rng = Rng::from_seed(5);
    let (lead, entries) = leader(&mut rng, &[], 3, 1);
    let (f, _) = open(SimStore::new()).unwrap();
    assert_eq!(follow(&f, &entries[..1]), 1);
    let tail = f.tail_lsn();
    let e = &entries[1];
    let refused = |batch: &Batch, index: u64| {
        let r = f.append_batch(batch, 1, index);
        assert!(matches!(r, Err(Error::Batch(_))), "accepted: {r:?}");
        assert_eq!(f.tail_lsn(), tail, "a refused batch changed the log");
    };
    refused(&e.batch, 3);
    let mut moved = e.batch.clone();
    moved.parts[0].pos += 8;
    refused(&moved, 2);
    let mut flipped = e.batch.clone();
    // A header byte (the padding after a body is not checked).
    flipped.parts[0].bytes[10] ^= 1;
    refused(&flipped, 2);
    let mut cut = e.batch.clone();
    // Records are whole multiples of 8 bytes: an odd length ends inside one.
    let half = (cut.parts[0].bytes.len() / 2) | 1;
    cut.parts[0].bytes.truncate(half);
    refused(&cut, 2);
    let other = lead.batch_of(&f.last_mark().unwrap()).unwrap();
    refused(&other, 2);
    assert_eq!(follow(&f, &entries[1..]), 2, "the right batches still go in");
    assert_same_bytes(&lead, &f, 5);
}

/// What segment shipping and reclamation need of recovery: a replica whose
/// oldest segments are gone (deleted, or never shipped to it) opens from
/// the segments it has, its log starting after the first batch it holds
/// whole, and goes on copying its leader's batches to the same bytes.
#[test]
fn a_log_missing_its_oldest_segments_opens_and_follows() {
    let mut rng = Rng::from_seed(21);
    let (lead, entries) = leader(&mut rng, &[], 60, 1);
    let image = lead.store().crash_image(None);
    let segments = block_on(image.list()).unwrap();
    assert!(segments.len() >= 4, "too few segments to drop some: {segments:?}");
    for &(no, _) in &segments[..2] {
        block_on(image.remove(no)).unwrap();
    }
    let (shipped, marks) = open(image).expect("a log missing its oldest segments opens");
    let held = block_on(shipped.store().list()).unwrap()[0].0;
    let oldest = marks[0];
    // The first batch it holds whole: the first closed in its oldest
    // segment, or the next one when that began in a segment it lacks.
    let whole = if oldest.close.start.0 < held { oldest.close.index + 1 } else { oldest.close.index };
    assert_eq!(shipped.first_index(), Some(whole));
    // Every entry from there reads back as the leader's does (a batch read
    // back holds the seal its close added, which the proposal did not).
    for e in &entries[whole as usize - 1..] {
        let mark = shipped.mark(e.index).unwrap().expect("a mark for every entry held");
        assert_eq!(Some(mark), lead.mark(e.index).unwrap());
        let theirs = lead.batch_of(&mark).unwrap();
        assert!(shipped.batch_of(&mark).unwrap() == theirs, "entry {} reads back otherwise", e.index);
    }
    // It goes on from its leader's next entries, to the same bytes.
    let mut all = entries.clone();
    for _ in 0..10 {
        let index = all.len() as u64 + 1;
        all.push(lead_one(&lead, &mut rng, 1, index));
    }
    settle(&lead);
    assert_eq!(follow(&shipped, &all[entries.len()..]), 10);
    for no in held..=lead.batch_start().segment {
        let (a, b) = (lead.store().map(no).unwrap(), shipped.store().map(no).unwrap());
        assert!(a.bytes() == b.bytes(), "segment {no} differs");
    }
}

/// Reclamation's part of the log: the oldest sealed segments removed while
/// it runs leave the log a reopen would find (the same first entry, the
/// same entries after it); segments holding an entry not yet committed, or
/// not sealed, are refused with nothing removed.
#[test]
fn the_oldest_segments_go_only_once_committed_and_sealed() {
    let mut rng = Rng::from_seed(23);
    let (log, entries) = leader(&mut rng, &[], 60, 1);
    let files = |l: &Log| block_on(l.store().list()).unwrap().iter().map(|f| f.0).collect::<Vec<_>>();
    let before = files(&log);
    assert!(before.len() >= 5, "{before:?}");
    let remove = |through: u64| {
        let l = log.clone();
        drive(&[&log], async move { l.remove_through(through).await })
    };
    log.commit_to(5);
    assert!(matches!(remove(before[1]), Err(Error::Batch(_))), "entries in them are not committed");
    assert_eq!(files(&log), before, "nothing removed");
    // The first entry closed after them (it may have begun in them) must
    // be committed too.
    let first_after =
        entries.iter().find(|e| log.mark(e.index).unwrap().unwrap().end.segment > before[1]).unwrap().index;
    log.commit_to(first_after - 1);
    assert!(matches!(remove(before[1]), Err(Error::Batch(_))), "entry {first_after} is not committed");
    assert_eq!(files(&log), before);
    log.commit_to(60);
    let active = log.batch_start().segment;
    assert!(matches!(remove(active), Err(Error::Batch(_))), "the active segment");
    assert_eq!(files(&log), before);
    remove(before[1]).expect("the two oldest go");
    assert_eq!(files(&log), before[2..].to_vec());
    let (reopened, _) = open(log.store().crash_image(None)).unwrap();
    let first = log.first_index().unwrap();
    assert_eq!(reopened.first_index(), Some(first), "as a reopen finds it");
    assert!(log.mark(first - 1).unwrap().is_some(), "the entry before the first is known by its close");
    assert_eq!(log.mark(first - 2).unwrap(), None, "older entries are gone");
    // The records a replica rebuilds its shard from begin where the log's
    // oldest segment does now (from the log's old start, they are gone).
    let end = log.mark(60).unwrap().unwrap().end;
    assert_eq!(log.held_start(), BatchEnd { segment: before[2], pos: 0 });
    let held = log.records_between(log.held_start(), end).expect("the records held");
    assert_eq!(held.first().map(|r| r.loc.segment), Some(before[2]));
    assert!(log.records_between(LOG_START, end).is_err(), "records of removed segments");
    for e in &entries[first as usize - 1..] {
        let mark = log.mark(e.index).unwrap().expect("every entry from the first");
        assert_eq!(reopened.mark(e.index).unwrap(), Some(mark));
        assert!(log.batch_of(&mark).unwrap() == reopened.batch_of(&mark).unwrap());
    }
    // Going on after it: one more entry, read back.
    lead_one(&log, &mut rng, 1, 61);
    settle(&log);
    assert!(log.mark(61).unwrap().is_some());
}

/// Segment shipping's part of the log: what a replica may be given is the
/// prefix of sealed segments whose entries are all committed (an entry
/// still open to a cut-back must not travel), and a log opened on just
/// those files (the newest one's tail after its last close, a batch that
/// goes on in the next segment, is cut by recovery) follows the leader's
/// next entries to the leader's bytes.
#[test]
fn the_shippable_segments_are_the_committed_sealed_prefix_and_a_log_opens_on_them() {
    let mut rng = Rng::from_seed(25);
    let (lead, entries) = leader(&mut rng, &[], 60, 1);
    let sealed = lead.sealed_files();
    assert!(sealed.len() >= 4, "{sealed:?}");
    // The last entry closed in each sealed segment.
    let last_in = |no: u64| entries.iter().rev().find(|e| lead.mark(e.index).unwrap().unwrap().end.segment == no);
    assert!(lead.shippable_segments().is_empty(), "nothing is committed");
    let second = last_in(sealed[1].0).expect("a close in the second segment").index;
    lead.commit_to(second - 1);
    assert_eq!(lead.shippable_segments(), sealed[..1].to_vec(), "the second's last entry is not committed");
    lead.commit_to(second);
    assert_eq!(lead.shippable_segments(), sealed[..2].to_vec());
    lead.commit_to(60);
    assert_eq!(lead.shippable_segments(), sealed, "every sealed segment, lengths and all");

    // A log of just those files, as a replica that copied them has.
    let image = lead.store().crash_image(None);
    for (no, _) in block_on(image.list()).unwrap() {
        if no > sealed.last().unwrap().0 {
            block_on(image.remove(no)).unwrap();
        }
    }
    let (shipped, _) = open(image).expect("a log of the shipped segments opens");
    let last = last_in(sealed.last().unwrap().0).unwrap().index;
    let next = lead.mark(last + 1).unwrap().unwrap();
    assert_eq!(next.close.start.0, sealed.last().unwrap().0, "the next batch begins in the last shipped segment");
    assert_eq!((shipped.first_index(), shipped.last_index()), (Some(1), last));
    let mut all = entries.clone();
    for _ in 0..10 {
        let index = all.len() as u64 + 1;
        all.push(lead_one(&lead, &mut rng, 1, index));
    }
    settle(&lead);
    let rest = &all[last as usize..];
    assert_eq!(follow(&shipped, rest), rest.len());
    assert_same_bytes(&lead, &shipped, 25);
}
