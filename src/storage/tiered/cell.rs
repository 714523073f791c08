//! Tiering in a cell (docs/ARCHITECTURE.md, "Tiering in a cell"): the move
//! of a sealed segment is an entry of its group's log, so every replica
//! makes the same moves in the same order.
//!
//! 1. The leader alone uploads a committed, sealed segment, under a key
//!    that names its term ([`Log::tier_in_term`]), then appends the tier
//!    record through the batched log and waits until it is committed.
//! 2. Every replica that applies the committed record (the leader once it
//!    is committed) builds the segment's skeleton from its own copy (the
//!    replicas' segments are byte-identical), writes it, and deletes its
//!    file ([`Log::finish_committed`]). A moved segment is always the
//!    oldest one held, so to the log this is the removal of a prefix, as
//!    reclamation's is: the log's first entry moves on.
//! 3. A replica that crashes between the skeleton and the deletion finds
//!    the skeleton beside its file at boot: it deletes the skeleton, and
//!    the tier record, applied again, makes the move again.
//!
//! The object store holds one copy of a segment: a leader deposed part way
//! leaves an object whose key names an older term than its successor's, and
//! no tier record of an older term that the successor has not applied can
//! ever commit (Raft's log matching), so the successor deletes such objects
//! once its term's first entry is applied ([`Log::sweep_older_terms`]).

use super::recovery::{load_skeletons, with_remote_records, Loaded};
use super::skeleton::{decode_tier_body, tier_body, Moved, Skeleton};
use super::state::{KeepFn, RemoteSeg, Tier, Tiering};
use super::Log;
use crate::storage::error::{Error, Result};
use crate::storage::io::SegmentStore;
use crate::storage::log::{BatchMark, LocalLog, LogConfig, Recovered, RecoveryReport};
use crate::storage::record::{self, RecordHeader};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

impl<S: SegmentStore> Log<S> {
    /// Recovers a batched log (a replica's, in a cell: see
    /// `storage/log/batches.rs`) and, with tiering, its remote segments.
    /// The records come in log order, tier records included: the shard
    /// applies those of committed entries ([`Log::tier_committed`]).
    pub async fn open_batched(
        store: S,
        cfg: LogConfig,
        tiering: Option<Tiering>,
    ) -> Result<(Self, Vec<Recovered>, Vec<BatchMark>, RecoveryReport)> {
        let mut skeletons = load_skeletons(&store)?;
        if let (None, Some(&no)) = (&tiering, skeletons.keys().next()) {
            let source = std::io::Error::other("segments are in an object store: start with --tier");
            return Err(Error::io("open", no, source));
        }
        let (local, found, marks, mut report) = LocalLog::open_batched(store, cfg).await?;
        let held: BTreeSet<u64> = local.sealed_segments().into_iter().collect();
        drop_unfinished(&local, &mut skeletons, &held)?;
        let records = with_remote_records(found, &skeletons, &held);
        let mut remote = BTreeMap::new();
        for (no, l) in skeletons {
            if l.skeleton.term == 0 {
                let source = std::io::Error::other("a single node's skeleton in a replica's log");
                return Err(Error::io("open", no, source));
            }
            let term = l.skeleton.term;
            let skeleton = Some(Rc::new(l.skeleton));
            remote.insert(no, RemoteSeg { len: l.seg_len, term, skel_len: l.skel_len, skeleton });
        }
        report.records = records.len();
        report.segments = held.len() + remote.len();
        let tier = tiering.map(|link| Tier::new(link, remote));
        Ok((Log { local: Rc::new(local), tier }, records, marks, report))
    }

    /// The records of the remote segments, in log order, read again from
    /// their skeletons, which stay loaded until [`Log::recovery_done`] (for
    /// [`Log::read_recovered`]): a replica that stops leading rebuilds its
    /// state from every record it holds.
    pub fn remote_records(&self) -> Result<Vec<Recovered>> {
        let Some(t) = &self.tier else { return Ok(Vec::new()) };
        let mut loaded = load_skeletons(self.store())?;
        loaded.retain(|no, _| t.is_remote(*no));
        let records = with_remote_records(Vec::new(), &loaded, &BTreeSet::new());
        let mut remote = t.remote.borrow_mut();
        for (no, l) in loaded {
            if let Some(r) = remote.get_mut(&no) {
                r.skeleton = Some(Rc::new(l.skeleton));
            }
        }
        Ok(records)
    }

    /// In a cell, on the leader: uploads sealed segment `no` under the key
    /// of `term` (its own), verifies the object, appends the segment's tier
    /// record (refused unless this replica leads) and waits until it is
    /// committed; then finishes the move here ([`Log::finish_committed`]).
    /// `still_leads` is asked just before the append: a replica that lost
    /// its lead of `term` meanwhile (even to lead again in a later one,
    /// whose leader may have swept this object) appends nothing. Returns
    /// the bytes uploaded. On an error the segment stays local; an
    /// object left behind is swept by a later leader.
    pub async fn tier_in_term(&self, no: u64, term: u64, keep: KeepFn, still_leads: &dyn Fn() -> bool) -> Result<u64> {
        let t = self.tier("tier a segment");
        let Some((_, size)) = self.local.sealed_files().into_iter().find(|s| s.0 == no) else {
            return Err(Error::not_sealed("tier", no));
        };
        if !t.moving.borrow_mut().insert(no) {
            return Err(Error::not_sealed("tier (already moving)", no));
        }
        let r = self.upload_and_log(t, Moved { no, len: size, term }, keep, still_leads).await;
        t.moving.borrow_mut().remove(&no);
        t.count_move(&r);
        r
    }

    async fn upload_and_log(&self, t: &Tier, m: Moved, keep: KeepFn, still_leads: &dyn Fn() -> bool) -> Result<u64> {
        let files = self.tier_files();
        let source = files.upload_source(m.no).map_err(Error::io_at("read for upload", m.no))?;
        let key = t.link.client.segment_key(t.link.shard, m.no, m.term);
        // The skeleton is built from each replica's own copy when it applies the record.
        let (len, _) = t
            .link
            .client
            .put_verified(key.clone(), source, Box::new(|_| Ok(Vec::new())))
            .await
            .map_err(|e| Error::ObjectStore { op: "upload", segment: m.no, reason: e.to_string() })?;
        if len != m.len {
            let reason = format!("uploaded {len} bytes of a {}-byte segment", m.len);
            return Err(Error::ObjectStore { op: "upload", segment: m.no, reason });
        }
        if !still_leads() {
            let reason = format!("its lead of term {} ended during the upload", m.term);
            return Err(Error::ObjectStore { op: "upload", segment: m.no, reason });
        }
        if self.local.with_sealed(m.no, |_| ()).is_none() {
            // Reclaimed meanwhile (decided before the move began): no record
            // names this key, and only this call would, so it goes.
            let _ = t.link.client.delete(key).await;
            return Err(Error::not_sealed("tier (reclaimed during the upload)", m.no));
        }
        let body = tier_body(m);
        let h = RecordHeader {
            kind: record::KIND_TIER,
            stream_id: 0,
            incarnation: 0,
            stream_offset: m.no,
            body_len: body.len() as u32,
        };
        let (_, lsn) = self.local.append(h, &body)?;
        self.local.durable(lsn).await?;
        self.tier_committed(&body)?;
        self.finish_committed(keep).await?;
        Ok(len)
    }

    /// In a cell: this replica applied a committed tier record (`body`);
    /// the move is finished by [`Log::finish_committed`].
    pub fn tier_committed(&self, body: &[u8]) -> Result<()> {
        let bad = || Error::Corrupt { segment: 0, position: 0 };
        let m = decode_tier_body(body).filter(|m| m.term > 0).ok_or_else(bad)?;
        let Some(t) = &self.tier else {
            let source = std::io::Error::other("its group moves segments to an object store: start with --tier");
            return Err(Error::io("apply a tier record", m.no, source));
        };
        if !t.is_remote(m.no) {
            t.committed.borrow_mut().insert(m.no, m);
        }
        Ok(())
    }

    /// In a cell, on every replica: finishes, oldest first, the moves
    /// whose tier record it applied: the segment's skeleton is built from
    /// its own copy (off the executor) and written, then the file is
    /// deleted. A segment this replica does not hold (reclaimed since, or
    /// older than the segments it was given) is passed over. Returns how
    /// many it finished; an error leaves the rest for the next call.
    pub async fn finish_committed(&self, keep: KeepFn) -> Result<usize> {
        let Some(t) = self.tier.as_ref().filter(|t| !t.finishing.replace(true)) else { return Ok(0) };
        let r = self.finish_each(t, keep).await;
        t.finishing.set(false);
        r
    }

    async fn finish_each(&self, t: &Tier, keep: KeepFn) -> Result<usize> {
        let mut done = 0;
        loop {
            let Some(m) = t.committed.borrow().values().next().copied() else { return Ok(done) };
            let sealed = self.local.sealed_segments();
            if t.is_remote(m.no) || !sealed.contains(&m.no) {
                t.committed.borrow_mut().remove(&m.no);
                continue;
            }
            if let Some(&older) = sealed.first().filter(|&&s| s < m.no) {
                let why = format!("segment {older} is older and no record moved or reclaimed it");
                return Err(Error::io("finish a move", m.no, std::io::Error::other(why)));
            }
            self.finish_one(t, m, keep).await?;
            done += 1;
        }
    }

    async fn finish_one(&self, t: &Tier, m: Moved, keep: KeepFn) -> Result<()> {
        let files = self.tier_files();
        let source = files.upload_source(m.no).map_err(Error::io_at("read for a skeleton", m.no))?;
        let no = m.no;
        let term = m.term;
        let derive =
            Box::new(move |seg: &[u8]| Skeleton::build_in_term(no, seg, keep, term).map_err(|e| e.to_string()));
        let skeleton = t.link.client.derive(source, derive).await.map_err(Error::io_at("build a skeleton", m.no))?;
        let len = self.local.with_sealed(m.no, |b| b.len() as u64);
        if len.is_none() {
            // Reclaimed meanwhile.
            t.committed.borrow_mut().remove(&m.no);
            return Ok(());
        }
        if len != Some(m.len) {
            let why = format!("the tier record says {} bytes, the file holds {len:?}", m.len);
            return Err(Error::io("finish a move", m.no, std::io::Error::other(why)));
        }
        files.write_skeleton(m.no, &skeleton).map_err(Error::io_at("write skeleton", m.no))?;
        let remote = RemoteSeg { len: m.len, term: m.term, skel_len: skeleton.len() as u64, skeleton: None };
        t.remote.borrow_mut().insert(m.no, remote);
        t.committed.borrow_mut().remove(&m.no);
        // Reads go to the object store from here; the file goes last.
        self.local.remove_through(m.no).await
    }

    /// In a cell: removes the remote segments up to `through`, which a
    /// committed reclaim record named: their skeletons, and with
    /// `delete_objects` (the leader) their objects; an object left behind
    /// is swept by a later leader. Returns those it removed.
    pub async fn remove_remote_through(&self, through: u64, delete_objects: bool) -> Result<Vec<u64>> {
        let Some(t) = &self.tier else { return Ok(Vec::new()) };
        let doomed: Vec<u64> = t.remote.borrow().range(..=through).map(|(&no, _)| no).collect();
        for &no in &doomed {
            t.remove(self.tier_files(), no, delete_objects).await?;
        }
        Ok(doomed)
    }

    /// In a cell, on a leader of `term` whose term's first entry is
    /// applied: deletes every object of its group whose key names an
    /// older term and that neither a remote segment nor an applied tier
    /// record names. No tier record of an older term that this replica has
    /// not applied can commit any more; one of its own term could (after
    /// its lead ended unknown to it), so those are never deleted. Returns
    /// how many it deleted.
    pub async fn sweep_older_terms(&self, term: u64) -> Result<usize> {
        let t = self.tier("sweep the object store");
        t.sweep_where(|no, of| {
            let named = t.remote.borrow().get(&no).is_some_and(|r| r.term == of)
                || t.committed.borrow().get(&no).is_some_and(|m| m.term == of);
            of < term && !named
        })
        .await
    }

    /// In a cell: the oldest segment held on the local disk, if tiering is
    /// on, it is sealed and not the newest sealed one (a replica with no
    /// segments copies the sealed ones and is sent the entries after them:
    /// one always stays), the local files pass `budget`, and it is not
    /// being moved (nor moved already, the move not yet finished here).
    pub fn due_in_cell(&self, budget: u64) -> Option<u64> {
        let t = self.tier.as_ref()?;
        let sealed = self.local.sealed_files();
        let &[(oldest, _), _, ..] = sealed.as_slice() else { return None };
        let busy = t.moving.borrow().contains(&oldest) || t.committed.borrow().contains_key(&oldest);
        let due = self.local_bytes() > budget && !busy;
        due.then_some(oldest)
    }
}

/// A skeleton beside its file: the replica crashed between writing it and
/// deleting the file. The file stays and the skeleton goes; the tier record
/// (committed: a replica writes a skeleton only for one) makes the move again.
fn drop_unfinished<S: SegmentStore>(
    local: &LocalLog<S>,
    skeletons: &mut BTreeMap<u64, Loaded>,
    held: &BTreeSet<u64>,
) -> Result<()> {
    let unfinished: Vec<u64> = skeletons.keys().filter(|no| held.contains(no)).copied().collect();
    for no in unfinished {
        let files = local.store().tier_files().expect("skeletons were listed");
        files.remove_skeleton(no).map_err(Error::io_at("remove skeleton", no))?;
        skeletons.remove(&no);
    }
    Ok(())
}
