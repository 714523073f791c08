//! Opening a log: scan every segment, verify each record, cut a torn tail,
//! seal the newest segment, and hand the records back for the layers above
//! to replay (docs/recovery.md, steps 1 to 4).

use super::*;

/// What the scan of one segment found.
struct Scan {
    segment: u64,
    /// Where its valid records end.
    end: u64,
    /// Records before `end`, pads included (what its seal counts).
    records: u64,
    /// The scan stopped at zeros, the end of the file or a seal, not at a
    /// record that does not verify.
    clean: bool,
    /// It ends in its own seal.
    sealed: bool,
    /// The batch closes in it (a batched log's), in order.
    closes: Vec<BatchMark>,
}

impl<S: SegmentStore> LocalLog<S> {
    /// Recovers the log in `store` and returns it with every valid record in
    /// log order. A torn tail of the newest segment is cut; an older segment
    /// that does not end in its seal (an invalid record, or a clean-looking
    /// end before the seal) is corruption and fails the open. The newest
    /// segment is sealed before writing resumes in a new one.
    ///
    /// `held_above`: the newest segment whose records a layer above holds
    /// instead of this directory (tiered storage). It counts as a newer
    /// segment with data: older local segments must be sealed, and new
    /// segments are numbered after it.
    pub async fn open(
        store: S,
        cfg: LogConfig,
        held_above: Option<u64>,
    ) -> Result<(Self, Vec<Recovered>, RecoveryReport)> {
        assert!(cfg.segment_bytes.is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES));
        let list = store.list().await.map_err(Error::io_at("list", 0))?;
        let mut recovered = Vec::new();
        let mut scans = Vec::with_capacity(list.len());
        for &(no, _) in &list {
            let map = store.map(no).map_err(Error::io_at("map", no))?;
            scans.push(scan(no, map.bytes(), &mut recovered));
        }
        let mut report = RecoveryReport { records: recovered.len(), ..Default::default() };
        let newest_with_data = scans.iter().rev().find(|s| s.records > 0).map(|s| s.segment).max(held_above);
        let mut segments = BTreeMap::new();
        for s in &scans {
            if let Some(map) = settle(&store, s, newest_with_data, &mut report).await? {
                segments.insert(s.segment, SegData::Mapped(map));
            }
        }
        report.segments = segments.len();
        // After every segment there was: local (even one removed above) or held above.
        let active = list.last().map(|l| l.0).max(held_above).map_or(0, |l| l + 1);
        report.active_segment = active;
        let log = Self::with_segments(store, cfg, segments, active, false);
        // Create the active segment now so the first append does not wait
        // for it; the preparer task makes the next one in the background.
        log.prepare_missing(false).await?;
        Ok((log, recovered, report))
    }

    /// Recovers a batched log (see `batches.rs`): the records of its closed
    /// batches, in log order, and the marks of its recent batches (at most
    /// `BATCH_MARKS_KEPT`, oldest first). Whatever follows the
    /// last close is cut: newer segments are removed and the rest of the
    /// last close's segment is zeroed on disk; that segment is written on
    /// from there, not sealed, so the replicas' segments stay the same.
    /// Segments before it must end in their seals, and the closes must
    /// number their entries one after the other, each batch starting where
    /// the one before ended.
    pub async fn open_batched(
        store: S,
        cfg: LogConfig,
    ) -> Result<(Self, Vec<Recovered>, Vec<BatchMark>, RecoveryReport)> {
        assert!(cfg.segment_bytes.is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES));
        let list = store.list().await.map_err(Error::io_at("list", 0))?;
        let (mut recovered, mut scans) = (Vec::new(), Vec::with_capacity(list.len()));
        // Only the recent marks are kept (memory stays bounded however
        // long the log); every close is checked against the one before.
        let mut marks = marks::Marks::default();
        for &(no, _) in &list {
            let map = store.map(no).map_err(Error::io_at("map", no))?;
            let mut s = scan(no, map.bytes(), &mut recovered);
            for close in s.closes.drain(..) {
                check_follows(marks.last(), close)?;
                marks.push(close);
            }
            scans.push(s);
        }
        let end = marks.last().map_or(batches::LOG_START, |m| m.end);
        recovered.retain(|r| (r.loc.segment, r.loc.pos) < (end.segment, end.pos));
        let mut report = RecoveryReport { records: recovered.len(), active_segment: end.segment, ..Default::default() };
        let mut segments = BTreeMap::new();
        for s in scans.iter().rev() {
            if s.segment > end.segment {
                store.remove(s.segment).await.map_err(Error::io_at("remove", s.segment))?;
                report.torn_tail = Some((s.segment, 0));
            } else if s.segment < end.segment {
                if !s.sealed {
                    return Err(Error::Corrupt { segment: s.segment, position: s.end });
                }
                segments
                    .insert(s.segment, SegData::Mapped(store.map(s.segment).map_err(Error::io_at("map", s.segment))?));
            }
        }
        report.segments = segments.len() + 1;
        let resumed = resume(&store, &list, end, &mut report).await?;
        let log = Self::with_segments(store, cfg, segments, end.segment, true);
        {
            let mut st = log.st.borrow_mut();
            st.marks = marks;
            log.start_segment(&mut st, end.segment, resumed);
        }
        log.prepare_missing(false).await?;
        let recent = log.st.borrow().marks.recent_all();
        Ok((log, recovered, recent, report))
    }

    /// A log of the recovered `segments`, writing next into `active`.
    fn with_segments(
        store: S,
        cfg: LogConfig,
        mut segments: BTreeMap<u64, SegData<S::File>>,
        active: u64,
        batched: bool,
    ) -> Self {
        let buf = new_mirror(&cfg);
        segments.insert(active, SegData::Mirror { buf, records: 0, cut_len: 0, sealed: false, file: None });
        LocalLog {
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
                marks: Default::default(),
                generation: 0,
                voids: Vec::new(),
                abandoned: None,
                lsn_committed: 0,
                lsn_closed: 0,
                committed: 0,
                older: None,
                uncommitted: VecDeque::new(),
                last_committed_close: None,
                cutting_back: false,
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
            flights_done: Notify::default(),
            appended: Notify::default(),
            flushed: Notify::default(),
            batched,
            appendable: Cell::new(true),
        }
    }
}

/// Scans segment `no` from its start, pushing each record of the layers
/// above onto `out`, and says where and how its records end.
fn scan(no: u64, bytes: &[u8], out: &mut Vec<Recovered>) -> Scan {
    let mut s = Scan { segment: no, end: 0, records: 0, clean: false, sealed: false, closes: Vec::new() };
    let mut pos = 0usize;
    s.clean = loop {
        if pos >= bytes.len() {
            break true;
        }
        match record::decode(no, &bytes[pos..]) {
            Ok((h, body, _)) if h.kind == record::KIND_SEAL => {
                // A seal anywhere but after this segment's records is not
                // ours here: treat it like any invalid record.
                s.sealed = record::is_seal_of(&h, &bytes[pos..][body], pos as u64, s.records);
                break s.sealed;
            }
            Ok((h, body, framed)) if h.kind == record::KIND_BATCH => {
                let Some(close) = record::batch_close_of(&h, &bytes[pos..][body]) else { break false };
                pos += framed;
                s.records += 1;
                s.closes.push(BatchMark { close, end: batches::BatchEnd { segment: no, pos: pos as u64 } });
            }
            Ok((h, _body, framed)) => {
                // No assertion on what a record says: these are disk bytes,
                // not our state (a record written twice still verifies).
                // The shard's replay checks each stream's records are
                // contiguous and fails the boot if not.
                if h.kind != record::KIND_PAD && h.kind != record::KIND_CONF {
                    let loc = RecordLoc { segment: no, pos: pos as u64, body_len: h.body_len };
                    out.push(Recovered { header: h, loc });
                }
                pos += framed;
                s.records += 1;
            }
            Err(DecodeError::End) => break true,
            Err(DecodeError::Truncated | DecodeError::Invalid) => break false,
        }
    };
    s.end = pos as u64;
    s
}

/// Decides what the end of a scanned segment means: fails the open on one
/// that lost records, removes one that holds none, cuts a torn tail and
/// seals the newest. Returns the segment mapped, or None if it was removed.
async fn settle<S: SegmentStore>(
    store: &S,
    s: &Scan,
    newest_with_data: Option<u64>,
    report: &mut RecoveryReport,
) -> Result<Option<Rc<dyn SealedBytes>>> {
    let no = s.segment;
    let newer_data = newest_with_data.is_some_and(|l| l > no);
    // Older segments were sealed and synced before their successors got a
    // byte: one that does not end in its seal lost records.
    if newer_data && !s.sealed {
        return Err(Error::Corrupt { segment: no, position: s.end });
    }
    if s.records == 0 && !newer_data {
        // A segment prepared ahead and never used, or whose first batch was
        // torn: nothing acknowledged lives there.
        store.remove(no).await.map_err(Error::io_at("remove", no))?;
        if !s.clean {
            report.torn_tail = Some((no, 0));
        }
        return Ok(None);
    }
    if !s.clean {
        report.torn_tail = Some((no, s.end));
    }
    if !s.sealed {
        // The newest segment with records: cut a torn tail, seal.
        let mut tail = Vec::with_capacity(SEAL_FRAMED_BYTES);
        record::seal(no, s.end, s.records, &mut tail);
        store.finish(no, s.end, &tail).await.map_err(Error::io_at("seal", no))?;
        report.sealed_at_boot = Some(no);
    }
    store.map(no).map(Some).map_err(Error::io_at("map", no))
}

/// A batched log's closes must number entries one after the other, each
/// batch starting where the one before ended.
fn check_follows(before: Option<BatchMark>, b: BatchMark) -> Result<()> {
    let Some(a) = before else { return Ok(()) };
    if b.close.index != a.close.index + 1 || b.close.start != (a.end.segment, a.end.pos) {
        return Err(Error::Corrupt { segment: b.end.segment, position: b.end.pos });
    }
    Ok(())
}

/// The segment a batched log writes on after boot: its bytes up to `end`,
/// with what follows zeroed on disk first (a torn batch, or one never
/// closed). None when it has no file yet (an empty log).
async fn resume<S: SegmentStore>(
    store: &S,
    list: &[(u64, u64)],
    end: batches::BatchEnd,
    report: &mut RecoveryReport,
) -> Result<Option<Resumed<S::File>>> {
    let no = end.segment;
    if !list.iter().any(|&(n, _)| n == no) {
        return Ok(None);
    }
    let pos = end.pos as usize;
    let (bytes, reach) = {
        let map = store.map(no).map_err(Error::io_at("map", no))?;
        let kept = map.bytes().get(..pos).ok_or(Error::Corrupt { segment: no, position: end.pos })?;
        let mut bytes = Vec::with_capacity(map.bytes().len());
        bytes.extend_from_slice(kept);
        (bytes, batches::last_nonzero(map.bytes(), pos))
    };
    let file = store.reopen(no).await.map_err(Error::io_at("reopen", no))?;
    if reach > pos {
        report.torn_tail = Some((no, end.pos));
        batches::zero_after(&file, &bytes, reach).await.map_err(Error::io_at("zero", no))?;
    }
    let records = batches::count_records(no, &bytes)?;
    Ok(Some(Resumed { bytes, records, file: Some(Rc::new(file)), cut_len: pos }))
}
