//! `cell::store::LogStore`, a group's Raft log in its shard's segments, on
//! the simulated disk: the term and vote survive a restart (a torn write of
//! them leaves the old or the new pair), the saved commit index never runs
//! past the log, a leader's own batches are not written twice, and entries
//! that conflict wait in memory, readable, until `persist` cut the log
//! back. `tests/cell_sim.rs` runs whole groups over it.

use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use raft::prelude::{ConfState, Entry, EntryType, HardState};
use raft::{GetEntriesContext, Storage};
use ringstream::cell::group::GroupStore;
use ringstream::cell::store::LogStore;
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::storage::io::SegmentStore;
use ringstream::storage::log::{Batch, LocalLog};
use ringstream::storage::record::KIND_CONF;
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{LogConfig, RecordHeader};
use std::rc::Rc;

fn cfg() -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: 4 * 1024 * 1024 }
}

fn open(disk: &SimStore) -> (LogStore<SimStore>, Rc<LocalLog<SimStore>>) {
    let (log, _, _, _) = block_on(LocalLog::open_batched(disk.clone(), cfg())).expect("recovery");
    let log = Rc::new(log);
    (block_on(LogStore::open(log.clone(), vec![1, 2, 3])).expect("open the store"), log)
}

/// Runs `persist` beside the log's writer, then waits until the log is
/// durable to what it returned.
fn persist(store: &mut LogStore<SimStore>, log: &Rc<LocalLog<SimStore>>) {
    let mut pool = LocalPool::new();
    let (w, p) = (log.clone(), log.clone());
    pool.spawner().spawn_local(async move { w.run_writer().await }).unwrap();
    pool.spawner().spawn_local(async move { p.run_preparer().await }).unwrap();
    let lsn = pool.run_until(store.persist()).expect("persist");
    pool.run_until_stalled();
    assert!(log.durable_lsn() >= lsn, "the writer made the turn durable");
}

fn hs(term: u64, vote: u64, commit: u64) -> HardState {
    HardState { term, vote, commit }
}

/// A leader's entry: one record appended and closed as `index`.
fn lead(log: &LocalLog<SimStore>, term: u64, index: u64, body: &[u8]) -> Entry {
    let h = RecordHeader { kind: 1, stream_id: 1, incarnation: 0, stream_offset: 0, body_len: 0 };
    log.append(h, body).unwrap();
    let data = log.pending_batch().unwrap().encode();
    log.close_batch(term, index, log.tail_position()).unwrap();
    Entry { term, index, data, ..Entry::default() }
}

#[test]
fn the_term_and_vote_survive_a_restart_and_the_commit_saved_is_only_what_was_applied() {
    let disk = SimStore::new();
    let (mut store, log) = open(&disk);
    assert_eq!(store.initial_state().unwrap().hard_state, HardState::default());
    assert_eq!(store.initial_state().unwrap().conf_state.voters, vec![1, 2, 3]);
    let e = lead(&log, 4, 1, b"one");
    store.append(&[e]);
    store.set_hard_state(&hs(4, 2, 1));
    persist(&mut store, &log);
    let (back, _) = open(&disk.crash_image(None));
    assert_eq!(back.initial_state().unwrap().hard_state, hs(4, 2, 0), "entry 1 was not applied yet");
    // A commit index ahead of what was applied (a follower learns it before
    // its entries are durable) is saved only as far as what was applied.
    log.commit_to(1);
    store.set_hard_state(&hs(5, 3, 9));
    persist(&mut store, &log);
    let (back, _) = open(&disk.crash_image(None));
    assert_eq!(back.initial_state().unwrap().hard_state, hs(5, 3, 1));
    assert_eq!((back.first_index().unwrap(), back.last_index().unwrap()), (1, 1));
    assert_eq!(back.term(1).unwrap(), 4);
}

#[test]
fn only_a_change_of_term_or_vote_is_written() {
    let disk = SimStore::new();
    let (mut store, log) = open(&disk);
    store.set_hard_state(&hs(1, 1, 0));
    persist(&mut store, &log);
    let ops = disk.ops();
    store.set_hard_state(&hs(1, 1, 0));
    persist(&mut store, &log);
    assert_eq!(disk.ops(), ops, "a commit index alone is not worth a write");
    store.set_hard_state(&hs(2, 0, 0));
    persist(&mut store, &log);
    assert!(disk.ops() > ops);
}

#[test]
fn a_torn_write_of_the_vote_leaves_the_old_or_the_new_one() {
    for keep in 0..8u32 {
        let disk = SimStore::new();
        let (mut store, log) = open(&disk);
        store.set_hard_state(&hs(3, 1, 0));
        persist(&mut store, &log);
        store.set_hard_state(&hs(4, 2, 0));
        persist(&mut store, &log);
        let image = disk.crash_image_tearing_small(&|sector| keep >> (sector % 3) & 1 == 1);
        let (back, _) = open(&image);
        let got = back.initial_state().unwrap().hard_state;
        assert!(got == hs(3, 1, 0) || got == hs(4, 2, 0), "tear {keep}: {got:?}");
    }
}

#[test]
fn a_leaders_own_batch_is_not_written_twice() {
    let disk = SimStore::new();
    let (mut store, log) = open(&disk);
    let e = lead(&log, 1, 1, b"mine");
    let tail = log.tail_lsn();
    store.append(std::slice::from_ref(&e));
    assert_eq!(log.tail_lsn(), tail, "the store wrote the leader's batch again");
    assert!(store.failed().is_none());
    let got = store.entries(1, 2, None, GetEntriesContext::empty(false)).unwrap();
    assert_eq!((got[0].term, got[0].index, &got[0].data), (1, 1, &e.data));
}

#[test]
fn conflicting_entries_wait_readable_until_the_log_is_cut_back() {
    // A follower of an old leader (term 1, entries 1..=3)...
    let (old_disk, new_disk) = (SimStore::new(), SimStore::new());
    let (_, old) = open(&old_disk);
    let old_entries: Vec<Entry> = (1..=3).map(|i| lead(&old, 1, i, format!("old{i}").as_bytes())).collect();
    // ...and a new leader that kept entry 1 and wrote 2 and 3 in term 2.
    let (_, new) = open(&new_disk);
    let mut new_entries = vec![old_entries[0].clone()];
    new.append_batch(&Batch::decode(&old_entries[0].data).unwrap(), 1, 1).unwrap();
    new_entries.extend((2..=3).map(|i| lead(&new, 2, i, format!("new{i}").as_bytes())));
    let disk = SimStore::new();
    let (mut store, log) = open(&disk);
    store.append(&old_entries);
    persist(&mut store, &log);
    store.append(&new_entries[1..]);
    assert!(store.failed().is_none());
    // Before `persist`: raft-rs reads the new entries back from the store.
    assert_eq!((store.term(1).unwrap(), store.term(2).unwrap(), store.term(3).unwrap()), (1, 2, 2));
    assert_eq!(store.last_index().unwrap(), 3);
    let got = store.entries(2, 4, None, GetEntriesContext::empty(false)).unwrap();
    assert_eq!(got, new_entries[1..].to_vec());
    assert_eq!(log.last_mark().unwrap().close.term, 1, "the log itself is cut back only by persist");
    persist(&mut store, &log);
    assert_eq!(store.cut_backs(), 1);
    assert_eq!(log.last_mark().unwrap().close.term, 2);
    let (back, _) = open(&disk.crash_image(None));
    assert_eq!((back.term(2).unwrap(), back.term(3).unwrap()), (2, 2));
    let read = back.entries(1, 4, None, GetEntriesContext::empty(false)).unwrap();
    assert_eq!(
        read.iter().map(|e| e.data.clone()).collect::<Vec<_>>(),
        new_entries.iter().map(|e| e.data.clone()).collect::<Vec<_>>()
    );
}

#[test]
fn a_new_leaders_empty_entry_does_not_close_records_never_proposed() {
    let disk = SimStore::new();
    let (mut store, log) = open(&disk);
    let e = lead(&log, 1, 1, b"one");
    store.append(&[e]);
    persist(&mut store, &log);
    // Records appended as leader, not yet proposed, when leadership moves;
    // then the new leader's empty entry 2 arrives.
    let h = RecordHeader { kind: 1, stream_id: 1, incarnation: 0, stream_offset: 0, body_len: 0 };
    log.append(h, b"never proposed").unwrap();
    store.append(&[Entry { term: 2, index: 2, ..Entry::default() }]);
    assert!(store.failed().is_none());
    persist(&mut store, &log);
    let got = store.entries(2, 3, None, GetEntriesContext::empty(false)).unwrap();
    assert!(got[0].data.is_empty(), "entry 2 holds {} bytes of records never proposed", got[0].data.len());
    assert!(!log.has_unclosed());
}

#[test]
fn an_entry_that_does_not_fit_stops_the_store() {
    let disk = SimStore::new();
    let (mut store, _log) = open(&disk);
    // Entry 2 with no entry 1 before it: this log is not its leader's.
    store.append(&[Entry { term: 1, index: 2, ..Entry::default() }]);
    assert!(store.failed().is_some());
    assert!(block_on(store.persist()).is_err());
}

/// A replica whose oldest segments are gone (given its leader's newer ones,
/// or, later, reclaimed): its Raft log starts after the first batch it holds
/// whole, the entry before that known by its term, every later entry
/// readable; the saved commit index is at least that entry (it was
/// committed, or it would not be gone), so raft-rs starts over it.
#[test]
fn a_log_missing_its_oldest_segments_is_a_raft_log_from_its_first_whole_entry() {
    let disk = SimStore::new();
    let (mut store, log) = open(&disk);
    let entries: Vec<Entry> = (1..=40).map(|i| lead(&log, 1 + i / 20, i, &[i as u8; 5000])).collect();
    store.append(&entries);
    persist(&mut store, &log);
    let image = disk.crash_image(None);
    let segments = block_on(image.list()).unwrap();
    assert!(segments.len() >= 3, "{segments:?}");
    block_on(image.remove(segments[0].0)).unwrap();
    let (store, log) = open(&image);
    let first = store.first_index().unwrap();
    assert!(first > 1 && first <= 40, "first index {first}");
    assert_eq!(store.term(first - 1).unwrap(), entries[first as usize - 2].term);
    assert!(store.term(first - 2).is_err(), "an entry before the first whole one has no term");
    let got = store.entries(first, 41, None, GetEntriesContext::empty(false)).unwrap();
    assert_eq!(
        got.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(),
        entries[first as usize - 1..].iter().map(|e| (e.index, e.term)).collect::<Vec<_>>()
    );
    assert_eq!(store.initial_state().unwrap().hard_state.commit, first - 1, "raised to the first entry's");
    let cfg = ringstream::cell::group::config(1, 0);
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let group = ringstream::cell::group::Group::new(&cfg, store, &logger).expect("raft-rs starts over it");
    assert_eq!(group.last_index(), 40);
    drop(log);
}

/// A membership change is an entry of its own kind whose batch is one
/// record the shard never sees: raft-rs gets it back as a conf-change
/// entry (the change in `data`, the batch in `context`), a follower writes
/// the same bytes from it, and the membership it led to is kept across a
/// restart with its index (a store that never saw one keeps the cell's
/// voters, in the file's older form).
#[test]
fn a_membership_change_is_an_entry_of_its_own_and_the_members_are_kept() {
    let disk = SimStore::new();
    let (mut store, log) = open(&disk);
    let first = lead(&log, 1, 1, b"one");
    store.append(std::slice::from_ref(&first));
    let change = b"a ConfChangeV2, opaque to the log".to_vec();
    let h = RecordHeader { kind: KIND_CONF, stream_id: 0, incarnation: 0, stream_offset: 0, body_len: 0 };
    log.append(h, &change).unwrap();
    let batch = log.pending_batch().unwrap().encode();
    log.close_batch(1, 2, log.tail_position()).unwrap();
    let conf = Entry {
        entry_type: EntryType::EntryConfChangeV2.into(),
        term: 1,
        index: 2,
        data: change,
        context: batch,
        ..Entry::default()
    };
    store.append(std::slice::from_ref(&conf));
    let both = store.entries(1, 3, None, GetEntriesContext::empty(false)).unwrap();
    assert_eq!(both, vec![first, conf], "read back as they were proposed");

    let follower_disk = SimStore::new();
    let (mut follower, follower_log) = open(&follower_disk);
    follower.append(&both);
    assert!(follower.failed().is_none());
    assert_eq!(follower.entries(1, 3, None, GetEntriesContext::empty(false)).unwrap(), both);
    persist(&mut follower, &follower_log);
    log.commit_to(2);
    persist(&mut store, &log);
    let (_, records, _, _) = block_on(LocalLog::open_batched(disk.crash_image(None), cfg())).unwrap();
    assert_eq!(records.iter().map(|r| r.header.kind).collect::<Vec<_>>(), vec![1], "the shard's record only");
    let bytes = |d: &SimStore| d.crash_image(None).map(0).unwrap().bytes().to_vec();
    assert_eq!(bytes(&follower_disk), bytes(&disk), "the same bytes");

    let (back, _) = open(&disk.crash_image(None));
    assert_eq!((back.initial_state().unwrap().conf_state.voters, back.conf_index()), (vec![1, 2, 3], 0));
    let members = ConfState { voters: vec![1, 2, 3], learners: vec![4], ..ConfState::default() };
    store.set_conf_state(&members, 2, &Default::default());
    persist(&mut store, &log);
    let (back, _) = open(&disk.crash_image(None));
    assert_eq!((back.initial_state().unwrap().conf_state, back.conf_index()), (members, 2));
    assert_eq!(back.initial_state().unwrap().hard_state, store.initial_state().unwrap().hard_state);
}
