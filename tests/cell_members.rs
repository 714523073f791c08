//! A membership change through `cell::replica::Replica` over its batched log
//! on the simulated disk: a one-voter group (it leads alone) adds a learner.
//! The change is an entry of its own in the log (one CONF record, its
//! batch), every record the shard appended before it went out first as an
//! entry of its own, the members change once it is committed, and a
//! restart takes them back from the Raft state file without applying the
//! change again.

use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use raft::prelude::{ConfChangeSingle, ConfChangeType, ConfChangeV2, Message};
use ringstream::cell::group::Refused;
use ringstream::cell::replica::{Outbox, Replica};
use ringstream::limits::SEGMENT_BYTES_MIN;
use ringstream::storage::log::LocalLog;
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{LogConfig, RecordHeader};
use std::rc::Rc;

/// A one-voter group sends nothing.
struct Nowhere;

impl Outbox for Nowhere {
    fn send(&self, _: Message) -> bool {
        false
    }
}

/// The replica of node 1, sole voter, over `disk`, its log's writer and
/// preparer spawned on `pool`.
fn open(disk: &SimStore, pool: &mut LocalPool) -> (Replica<SimStore>, Rc<LocalLog<SimStore>>) {
    let cfg = LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: 4 * 1024 * 1024 };
    let (log, _, _, _) = block_on(LocalLog::open_batched(disk.clone(), cfg)).expect("recovery");
    let log = Rc::new(log);
    let (w, p) = (log.clone(), log.clone());
    pool.spawner().spawn_local(async move { w.run_writer().await }).unwrap();
    pool.spawner().spawn_local(async move { p.run_preparer().await }).unwrap();
    let replica = pool.run_until(Replica::open(1, 0, vec![1], log.clone())).expect("open the replica");
    (replica, log)
}

/// Ticks and turns until `done` holds (at most 200 ticks).
fn turn_until(r: &mut Replica<SimStore>, pool: &mut LocalPool, done: impl Fn(&Replica<SimStore>) -> bool) {
    for _ in 0..200 {
        if done(r) {
            return;
        }
        r.tick();
        pool.run_until(r.turn(&Nowhere)).expect("a turn");
        pool.run_until_stalled();
        pool.run_until(r.turn(&Nowhere)).expect("a turn");
    }
    panic!("not done in 200 ticks");
}

fn add_learner(id: u64) -> ConfChangeV2 {
    let one = ConfChangeSingle { change_type: ConfChangeType::AddLearnerNode.into(), node_id: id };
    ConfChangeV2 { changes: vec![one], ..ConfChangeV2::default() }
}

#[test]
fn a_leader_adds_a_learner_through_its_log_and_keeps_it_across_a_restart() {
    let disk = SimStore::new();
    let mut pool = LocalPool::new();
    let (mut r, log) = open(&disk, &mut pool);
    turn_until(&mut r, &mut pool, |r| r.status().leading.get());
    assert_eq!((r.members().voters, r.members().learners), (vec![1], vec![]));

    // A record of the shard waits, unproposed, when the change comes.
    let h = RecordHeader { kind: 1, stream_id: 1, incarnation: 0, stream_offset: 0, body_len: 0 };
    log.append(h, b"the shard's").unwrap();
    let index = pool.run_until(r.propose_conf_change(add_learner(2))).expect("proposed");
    assert_eq!(pool.run_until(r.propose_conf_change(add_learner(3))), Err(Refused::Busy), "one change at a time");
    let mark = |i: u64| log.mark(i).unwrap().expect("in the log");
    let before = log.batch_of(&mark(index - 1)).unwrap();
    assert!(before.conf_body().is_none() && before.len_bytes() > 0, "the shard's record went first, alone");
    let change = log.batch_of(&mark(index)).unwrap();
    assert_eq!(change.conf_body(), Some(&prost::Message::encode_to_vec(&add_learner(2))[..]));

    turn_until(&mut r, &mut pool, |r| r.members().learners == vec![2]);
    assert_eq!(r.members().voters, vec![1]);
    assert_eq!(log.records_between(ringstream::storage::log::LOG_START, log.tail_position()).unwrap().len(), 1);
    drop(r);

    let mut pool = LocalPool::new();
    let (mut back, _) = open(&disk.crash_image(None), &mut pool);
    assert_eq!((back.members().voters, back.members().learners), (vec![1], vec![2]), "kept");
    turn_until(&mut back, &mut pool, |r| r.status().leading.get());
    assert_eq!((back.members().voters, back.members().learners), (vec![1], vec![2]));
    let next = pool.run_until(back.propose_conf_change(add_learner(3))).expect("the next change");
    turn_until(&mut back, &mut pool, |r| {
        let mut learners = r.members().learners;
        learners.sort_unstable();
        learners == vec![2, 3]
    });
    assert!(next > index);
}
