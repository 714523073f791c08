//! The batched log's cut-back while other work runs beside it (writes and
//! zero-fills held, as real I/O takes its time): appends during it are
//! refused, not a panic; a zero-fill made ahead that completes meanwhile
//! never replaces a segment the cut keeps; a wait for a record that a cut
//! discarded fails even after a second cut-back; a batch closes only what
//! was proposed.

use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::storage::log::LocalLog;
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{Error, LogConfig, RecordHeader};
use std::cell::RefCell;
use std::rc::Rc;

fn cfg() -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: 4 * 1024 * 1024 }
}

fn h() -> RecordHeader {
    RecordHeader { kind: 1, stream_id: 1, incarnation: 0, stream_offset: 0, body_len: 0 }
}

/// Appends `body` and closes it as entry `index` of term 1.
fn entry<S: ringstream::storage::io::SegmentStore>(log: &LocalLog<S>, index: u64, body: &[u8]) {
    log.append(h(), body).unwrap();
    log.close_batch(1, index, log.tail_position()).unwrap();
}

/// A store whose writes and made-ahead zero-fills can be held, as real I/O
/// takes its time, so a test can act while one is out.
mod gated {
    use ringstream::storage::io::{SealedBytes, SegmentFile, SegmentStore, ZeroPace};
    use ringstream::storage::sim_file::{SimFile, SimStore};
    use std::cell::{Cell, RefCell};
    use std::future::poll_fn;
    use std::io;
    use std::rc::Rc;
    use std::task::{Poll, Waker};

    #[derive(Default)]
    pub struct Gate {
        closed: Cell<bool>,
        wakers: RefCell<Vec<Waker>>,
    }
    impl Gate {
        pub fn set(&self, closed: bool) {
            self.closed.set(closed);
            if !closed {
                for w in self.wakers.borrow_mut().drain(..) {
                    w.wake();
                }
            }
        }
        async fn pass(&self) {
            poll_fn(|cx| {
                if self.closed.get() {
                    self.wakers.borrow_mut().push(cx.waker().clone());
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await
        }
    }

    #[derive(Clone)]
    pub struct GStore {
        pub sim: SimStore,
        pub writes: Rc<Gate>,
        pub creates: Rc<Gate>,
    }
    pub struct GFile(SimFile, Rc<Gate>);
    impl SegmentFile for GFile {
        type Buf = Vec<u8>;
        fn alloc_buf(&self, len: usize) -> Vec<u8> {
            vec![0; len]
        }
        async fn write_at(&self, buf: Vec<u8>, pos: u64) -> io::Result<()> {
            self.1.pass().await;
            self.0.write_at(buf, pos).await
        }
        async fn sync(&self) -> io::Result<()> {
            self.0.sync().await
        }
    }
    impl SegmentStore for GStore {
        type File = GFile;
        async fn list(&self) -> io::Result<Vec<(u64, u64)>> {
            self.sim.list().await
        }
        async fn create(&self, no: u64, len: u64) -> io::Result<GFile> {
            Ok(GFile(self.sim.create(no, len).await?, self.writes.clone()))
        }
        async fn create_paced(&self, no: u64, len: u64, _pace: &impl ZeroPace) -> io::Result<GFile> {
            // A zero-fill made ahead takes a while.
            self.creates.pass().await;
            self.create(no, len).await
        }
        async fn reopen(&self, no: u64) -> io::Result<GFile> {
            Ok(GFile(self.sim.reopen(no).await?, self.writes.clone()))
        }
        fn map(&self, no: u64) -> io::Result<Rc<dyn SealedBytes>> {
            self.sim.map(no)
        }
        async fn finish(&self, no: u64, at: u64, tail: &[u8]) -> io::Result<()> {
            self.sim.finish(no, at, tail).await
        }
        async fn remove(&self, no: u64) -> io::Result<()> {
            self.sim.remove(no).await
        }
        async fn read_small(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
            self.sim.read_small(name).await
        }
        async fn write_small(&self, name: &str, pos: u64, block: Vec<u8>) -> io::Result<()> {
            self.sim.write_small(name, pos, block).await
        }
        fn describe(&self) -> String {
            "gated sim".into()
        }
        fn location(&self) -> String {
            "gated sim".into()
        }
    }
}

fn gstore() -> gated::GStore {
    gated::GStore { sim: SimStore::new(), writes: Default::default(), creates: Default::default() }
}

/// A log over `st` with its writer and preparer on a pool.
fn running(st: &gated::GStore) -> (Rc<LocalLog<gated::GStore>>, LocalPool) {
    let log = Rc::new(block_on(LocalLog::open_batched(st.clone(), cfg())).unwrap().0);
    let pool = LocalPool::new();
    let (w, p) = (log.clone(), log.clone());
    pool.spawner().spawn_local(async move { w.run_writer().await }).unwrap();
    pool.spawner().spawn_local(async move { p.run_preparer().await }).unwrap();
    (log, pool)
}

#[test]
fn an_append_during_a_cut_back_is_refused_not_a_panic() {
    let st = gstore();
    let (log, mut pool) = running(&st);
    entry(&log, 1, b"kept");
    let kept = log.last_mark();
    entry(&log, 2, &[9; 900]);
    pool.run_until_stalled();
    assert_eq!(log.durable_lsn(), log.tail_lsn());
    st.writes.set(true);
    let l = log.clone();
    pool.spawner().spawn_local(async move { l.cut_back(kept).await.unwrap() }).unwrap();
    pool.run_until_stalled(); // the cut-back waits for its zeroing write
    assert!(matches!(log.append(h(), b"client"), Err(Error::CutBack)));
    assert!(matches!(log.close_batch(1, 2, log.tail_position()), Err(Error::CutBack)));
    let l = log.clone();
    assert!(matches!(block_on(l.cut_back(kept)), Err(Error::Batch(_))), "a second cut-back at once");
    st.writes.set(false);
    pool.run_until_stalled();
    entry(&log, 2, b"after");
    assert_eq!(log.last_index(), 2);
}

/// Entries in segment 1 and a cut-back within it; `race`: a zero-fill made
/// ahead completes while the cut-back waits for its zeroing write.
fn cut_back_in_segment_one(race: bool) {
    let st = gstore();
    let (log, mut pool) = running(&st);
    pool.run_until_stalled(); // segment 1 made ahead
    st.creates.set(race); // the next zero-fill made ahead takes long
    let mut index = 0;
    while log.batch_start().segment == 0 {
        index += 1;
        entry(&log, index, &[1; 1000]);
        pool.run_until_stalled();
    }
    // Entries in segment 1, well past its first block; the last is discarded.
    for _ in 0..8 {
        index += 1;
        entry(&log, index, &[2; 1000]);
    }
    let kept = log.last_mark();
    entry(&log, index + 1, &[3; 1000]);
    pool.run_until_stalled();
    assert_eq!(log.durable_lsn(), log.tail_lsn(), "all flushed");
    st.writes.set(true);
    let l = log.clone();
    pool.spawner().spawn_local(async move { l.cut_back(kept).await.unwrap() }).unwrap();
    pool.run_until_stalled(); // the cut-back waits on its zeroing write
    st.creates.set(false); // the zero-fill ahead completes meanwhile
    pool.run_until_stalled();
    st.writes.set(false);
    pool.run_until_stalled();
    assert_eq!(log.last_index(), index);
    let (_, _, marks, _) = block_on(LocalLog::open_batched(st.sim.crash_image(None), cfg())).unwrap();
    assert_eq!(marks.len() as u64, index, "entries kept by the cut-back were lost");
}

#[test]
fn a_cut_back_racing_the_preparer_keeps_the_kept_entries() {
    cut_back_in_segment_one(true);
}

#[test]
fn a_cut_back_without_a_race_keeps_the_kept_entries() {
    cut_back_in_segment_one(false);
}

/// `durable(L)` awaited before a cut-back that discarded L fails, even when
/// a second cut-back, with nothing waiting at that moment, follows.
#[test]
fn a_discarded_lsn_stays_discarded_across_two_cut_backs() {
    let log = Rc::new(block_on(LocalLog::open_batched(SimStore::new(), cfg())).unwrap().0);
    entry(&log, 1, b"kept");
    let kept = log.last_mark();
    let (_, lsn) = log.append(h(), b"discarded").unwrap();
    log.close_batch(1, 2, log.tail_position()).unwrap();
    let mut clients = LocalPool::new();
    let result = Rc::new(RefCell::new(None));
    let (l, r) = (log.clone(), result.clone());
    clients.spawner().spawn_local(async move { *r.borrow_mut() = Some(l.durable(lsn).await) }).unwrap();
    clients.run_until_stalled();
    // Cut-back 1 wakes the waiter, which has not run yet.
    block_on(log.cut_back(kept)).unwrap();
    // New entries, longer than the discarded one, then cut-back 2.
    entry(&log, 2, &[7u8; 2000]);
    let kept2 = log.last_mark();
    entry(&log, 3, b"x");
    block_on(log.cut_back(kept2)).unwrap();
    log.commit_to(2);
    let w = log.clone();
    clients.spawner().spawn_local(async move { w.run_writer().await }).unwrap();
    clients.run_until_stalled();
    assert!(
        matches!(*result.borrow(), Some(Err(Error::CutBack))),
        "the record was cut back, yet durable({lsn}) returned {:?}",
        result.borrow()
    );
}

#[test]
fn a_batch_closes_only_what_was_proposed() {
    let log = block_on(LocalLog::open_batched(SimStore::new(), cfg())).unwrap().0;
    log.append(h(), b"a").unwrap();
    let end = log.tail_position();
    let proposed = log.pending_batch().unwrap();
    log.append(h(), b"b (another connection, same turn)").unwrap();
    assert!(matches!(log.close_batch(1, 1, end), Err(Error::Batch(_))));
    assert_ne!(log.pending_batch().unwrap(), proposed);
}

/// An lsn handed out before a cut-back and first awaited after it (a task
/// that had not run yet) fails, however far new records go past it.
#[test]
fn an_lsn_first_awaited_after_its_cut_back_fails() {
    let log = Rc::new(block_on(LocalLog::open_batched(SimStore::new(), cfg())).unwrap().0);
    entry(&log, 1, b"kept");
    let kept = log.last_mark();
    let (_, lsn) = log.append(h(), b"discarded").unwrap();
    log.close_batch(1, 2, log.tail_position()).unwrap();
    block_on(log.cut_back(kept)).unwrap();
    entry(&log, 2, &[7u8; 3000]);
    log.commit_to(2);
    let mut pool = LocalPool::new();
    let w = log.clone();
    pool.spawner().spawn_local(async move { w.run_writer().await }).unwrap();
    pool.run_until_stalled();
    let result = pool.run_until(log.durable(lsn));
    assert!(matches!(result, Err(Error::CutBack)), "durable({lsn}) returned {result:?}");
    let (_, newer) = log.append(h(), b"newer").unwrap();
    assert!(newer > lsn, "lsns are never reused");
}

/// A replica that does not lead takes no append, whenever the write was
/// admitted (the replica says so at once, the log checks at each append).
#[test]
fn a_log_whose_replica_does_not_lead_takes_no_append() {
    let log = block_on(LocalLog::open_batched(SimStore::new(), cfg())).unwrap().0;
    entry(&log, 1, b"while leading");
    log.set_appendable(false);
    assert!(matches!(log.append(h(), b"after"), Err(Error::NotLeader)));
    assert!(!log.has_unclosed(), "nothing was appended");
    log.set_appendable(true);
    entry(&log, 2, b"leading again");
}

/// A cut-back into a segment whose file is still being made keeps the
/// entries before the cut (they are in memory only, and go to disk once
/// the file exists).
#[test]
fn a_cut_back_into_a_segment_without_its_file_yet_keeps_its_entries() {
    let st = gstore();
    let (log, mut pool) = running(&st);
    pool.run_until_stalled(); // segment 1 made ahead
    st.creates.set(true); // the zero-fill of segment 2, made ahead, is held
    let mut index = 0;
    while log.batch_start().segment < 2 {
        index += 1;
        entry(&log, index, &[1; 1000]);
        pool.run_until_stalled();
    }
    for _ in 0..3 {
        index += 1;
        entry(&log, index, &[2; 1000]);
    }
    let kept = log.last_mark();
    entry(&log, index + 1, &[3; 1000]);
    pool.run_until_stalled();
    let l = log.clone();
    pool.spawner().spawn_local(async move { l.cut_back(kept).await.unwrap() }).unwrap();
    pool.run_until_stalled();
    st.creates.set(false);
    pool.run_until_stalled();
    assert_eq!(log.last_index(), index);
    entry(&log, index + 1, b"after the cut");
    pool.run_until_stalled();
    assert_eq!(log.durable_lsn(), log.tail_lsn(), "all flushed");
    let (_, _, marks, _) = block_on(LocalLog::open_batched(st.sim.crash_image(None), cfg())).unwrap();
    assert_eq!(marks.len() as u64, index + 1, "entries kept by the cut-back were lost");
}
