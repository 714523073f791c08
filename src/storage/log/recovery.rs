//! Opening a log: scan every segment, verify each record, cut a torn tail,
//! seal the newest segment, and hand the records back for the shard to replay.

use super::tier::{self, Skeleton};
use super::*;
use std::collections::HashSet;

impl<S: SegmentStore> Log<S> {
    /// Recovers the log in `store` and returns it with every valid record in
    /// log order. A torn tail of the newest segment is cut; an older segment
    /// that does not end in its seal (an invalid record, or a clean-looking
    /// end before the seal) is corruption and fails the open. The newest
    /// segment is sealed before writing resumes in a new one.
    pub async fn open(store: S, cfg: LogConfig) -> Result<(Self, Vec<Recovered>, RecoveryReport)> {
        Self::open_tiered(store, cfg, None).await
    }

    /// [`Log::open`] with tiered storage: segments in the object store are
    /// recovered from their skeletons, and a move that a crash interrupted
    /// is finished or dropped (see `tier.rs`).
    pub async fn open_tiered(
        store: S,
        cfg: LogConfig,
        tier: Option<Tiering>,
    ) -> Result<(Self, Vec<Recovered>, RecoveryReport)> {
        assert!(cfg.segment_bytes.is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES));
        let io = |op, segment| move |source| Error::io(op, segment, source);
        let list = store.list().await.map_err(io("list", 0))?;
        let mut skeletons = BTreeMap::new();
        for (no, skel_len) in store.list_skeletons().map_err(io("list skeletons", 0))? {
            let bytes = store.read_skeleton(no).map_err(io("read skeleton", no))?;
            let (sk, seg_len) = Skeleton::decode(no, bytes)?;
            skeletons.insert(no, (sk, seg_len, skel_len));
        }
        if tier.is_none() && !skeletons.is_empty() {
            let source = std::io::Error::other("segments are in an object store: start with --tier");
            return Err(Error::io("open", *skeletons.keys().next().expect("not empty"), source));
        }
        let local: HashSet<u64> = list.iter().map(|l| l.0).collect();
        let mut recovered = Vec::new();
        // Segments the log's tier records say are remote.
        let mut tiered: HashSet<u64> = skeletons.values().flat_map(|(sk, _, _)| sk.tiered()).collect();
        // (segment, valid end, number of records, ended cleanly, sealed)
        let mut scans: Vec<(u64, u64, usize, bool, bool)> = Vec::new();
        let mut order: Vec<u64> = local.iter().chain(skeletons.keys()).copied().collect();
        order.sort();
        order.dedup();
        for no in order {
            if !local.contains(&no) {
                let (sk, _, _) = &skeletons[&no];
                for e in &sk.entries {
                    let loc = RecordLoc { segment: no, pos: e.pos, body_len: e.header.body_len };
                    if e.header.kind != record::KIND_TIER {
                        recovered.push(Recovered { header: e.header, loc });
                    }
                }
                scans.push((no, 0, sk.entries.len().max(1), true, true));
                continue;
            }
            let map = store.map(no).map_err(io("map", no))?;
            let bytes = map.bytes();
            let mut pos = 0usize;
            let mut count = 0usize;
            let mut sealed = false;
            let clean = loop {
                if pos >= bytes.len() {
                    break true;
                }
                match record::decode(no, &bytes[pos..]) {
                    Ok((h, body, _)) if h.kind == record::KIND_SEAL => {
                        // A seal anywhere but after this segment's records is
                        // not ours here: treat it like any invalid record.
                        sealed = record::is_seal_of(&h, &bytes[pos..][body], pos as u64, count as u64);
                        break sealed;
                    }
                    Ok((h, _, framed)) if h.kind == record::KIND_PAD => {
                        pos += framed;
                        count += 1;
                    }
                    Ok((h, body, framed)) if h.kind == record::KIND_TIER => {
                        tiered.extend(tier::decode_tier_body(&bytes[pos..][body]).map(|(no, _)| no));
                        pos += framed;
                        count += 1;
                    }
                    Ok((h, _body, framed)) => {
                        // No assertion on what a record says: these are disk
                        // bytes, not our state (a record written twice still
                        // verifies). The shard's replay checks each stream's
                        // records are contiguous and fails the boot if not.
                        recovered.push(Recovered {
                            header: h,
                            loc: RecordLoc { segment: no, pos: pos as u64, body_len: h.body_len },
                        });
                        pos += framed;
                        count += 1;
                    }
                    Err(DecodeError::End) => break true,
                    Err(DecodeError::Truncated | DecodeError::Invalid) => break false,
                }
            };
            scans.push((no, pos as u64, count, clean, sealed));
        }
        let last_with_data = scans.iter().rev().find(|s| s.2 > 0).map(|s| s.0);
        let mut report = RecoveryReport { records: recovered.len(), ..Default::default() };
        let mut segments = BTreeMap::new();
        for &(no, end, count, clean, sealed) in &scans {
            if !local.contains(&no) {
                continue;
            }
            let newer_data = last_with_data.is_some_and(|l| l > no);
            // Older segments were sealed and synced before their successors
            // got a byte: one that does not end in its seal lost records.
            if newer_data && !sealed {
                return Err(Error::Corrupt { segment: no, position: end });
            }
            if count == 0 && !newer_data {
                // A segment prepared ahead and never used, or whose first
                // batch was torn: nothing acknowledged lives there.
                store.remove(no).await.map_err(io("remove", no))?;
                if !clean {
                    report.torn_tail = Some((no, 0));
                }
                continue;
            }
            if !clean {
                report.torn_tail = Some((no, end));
            }
            if !sealed {
                // The newest segment with records: cut a torn tail, seal.
                let mut tail = Vec::with_capacity(SEAL_FRAMED_BYTES);
                record::seal(no, end, count as u64, &mut tail);
                store.finish(no, end, &tail).await.map_err(io("seal", no))?;
                report.sealed_at_boot = Some(no);
            }
            segments.insert(no, SegData::Mapped(store.map(no).map_err(io("map", no))?));
        }
        for (no, (sk, len, skel_len)) in skeletons {
            if local.contains(&no) && !tiered.contains(&no) {
                // Uploaded, but its tier record never became durable: the
                // segment stays local (the object is overwritten or swept).
                store.remove_skeleton(no).map_err(io("remove skeleton", no))?;
                continue;
            }
            if local.contains(&no) {
                // Its tier record is durable: finish the move.
                segments.remove(&no);
                store.remove(no).await.map_err(io("remove after upload", no))?;
            }
            segments.insert(no, SegData::Remote(tier::RemoteSeg { len, skel_len, skeleton: Some(Rc::new(sk)) }));
        }
        report.segments = segments.len();
        // After every segment there was, local (even one removed above) or remote.
        let last = list.last().map(|l| l.0).into_iter().chain(segments.keys().next_back().copied()).max();
        let active = last.map(|l| l + 1).unwrap_or(0);
        report.active_segment = active;
        let buf = new_mirror(&cfg);
        segments.insert(active, SegData::Mirror { buf, records: 0, cut_len: 0, sealed: false, file: None });
        let log = Log {
            store,
            cfg,
            st: RefCell::new(State {
                segments,
                active,
                prepared: BTreeMap::new(),
                spare_mirror: None,
                lsn_tail: 0,
                lsn_cut: 0,
                lsn_durable: 0,
                records_pending: 0,
                flights: 0,
                last_cut: Default::default(),
                waiters: VecDeque::new(),
                poisoned: None,
                stats: LogStats::default(),
            }),
            wake_writer: Notify::default(),
            wake_preparer: Notify::default(),
            segment_ready: Notify::default(),
            zero_pace: Notify::default(),
            zero_gate: Cell::new(u64::MAX),
            stopped: Cell::new(false),
            sealed: Notify::default(),
            sweep_due: Cell::new(tier.is_some()),
            tier,
            cache: RefCell::default(),
            moving: RefCell::default(),
        };
        // Create the active segment now so the first append does not wait
        // for it; the preparer task makes the next one in the background.
        log.prepare_missing(false).await?;
        Ok((log, recovered, report))
    }
}
