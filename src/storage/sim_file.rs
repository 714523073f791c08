//! In-memory segment store with crash and torn-write injection, for tests.
//!
//! Every file has a `live` image (what reads see) and a `durable` image (what
//! survives a crash). `sync` copies live to durable. `crash_image` builds the
//! store a restarted process would find: the durable images, plus optionally a
//! torn prefix of the last unsynced write. A fault plan makes the N-th
//! write or sync fail, after which every operation fails, like a dead process.
//!
//! Disk faults a live process survives: `error_at_op` makes one write or sync
//! fail with a chosen errno (EIO, ENOSPC, ...) and leaves the disk working;
//! `set_capacity` bounds the bytes all files may hold, so creating a segment
//! or growing a file beyond it fails with ENOSPC.
//!
//! Power loss: `crash_image_with` keeps any subset of the sectors of the last
//! unsynced write and garbles chosen bits of the bytes it changed, modelling
//! a device that writes sectors atomically but in no particular order, and
//! whose unsynced blocks may hold garbage.
//!
//! Small files (`write_small`, the two-slot file of `storage/slots.rs`) are
//! durable when a write returns, so a crash keeps every completed one; the
//! last one is remembered with the bytes it replaced, and
//! `crash_image_tearing_small` builds what a power cut during it would
//! leave: each sector old or new.
//!
//! Never a substitute for the real files: only fault-injection tests use it.

use super::io::{check_small_name, check_small_write, SealedBytes, SegmentFile, SegmentStore};
use super::tiered::TierFiles;
use crate::limits::SECTOR_BYTES;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io;
use std::rc::Rc;

#[derive(Clone, Default)]
struct FileImage {
    live: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Default)]
struct Disk {
    files: BTreeMap<u64, FileImage>,
    /// Fail the operation when `ops` reaches this count.
    fail_at_op: Option<u64>,
    /// Fail the operation when `ops` reaches this count with this errno, and
    /// keep working afterwards (nothing of a failed write reaches the file).
    error_at_op: Option<(u64, i32)>,
    /// Most bytes all files together may hold.
    capacity: Option<u64>,
    ops: u64,
    dead: bool,
    /// The last write not yet covered by a sync: (segment, position, bytes).
    last_unsynced: Option<(u64, u64, Vec<u8>)>,
    /// Skeletons of tiered segments, durable once written.
    skeletons: BTreeMap<u64, Vec<u8>>,
    /// Small files by name. One image each, no live/durable pair: a small
    /// write is durable when it returns, so what reads see is what a crash
    /// keeps.
    smalls: BTreeMap<String, Vec<u8>>,
    /// The last small write, for `crash_image_tearing_small`.
    last_small: Option<SmallWrite>,
}

/// A completed small write and what it replaced.
#[derive(Clone)]
struct SmallWrite {
    name: String,
    pos: u64,
    new: Vec<u8>,
    /// The bytes the write covered before it (zeros past the old end);
    /// None: the write created the file.
    old: Option<Vec<u8>>,
}

impl Disk {
    fn tick(&mut self) -> io::Result<()> {
        if self.dead {
            return Err(io::Error::other("simulated crash: disk gone"));
        }
        self.ops += 1;
        if Some(self.ops) == self.fail_at_op {
            self.dead = true;
            return Err(io::Error::other("simulated crash"));
        }
        if let Some((at, errno)) = self.error_at_op {
            if at == self.ops {
                return Err(io::Error::from_raw_os_error(errno));
            }
        }
        Ok(())
    }

    fn used(&self) -> u64 {
        let segments: u64 = self.files.values().map(|f| f.live.len() as u64).sum();
        segments + self.smalls.values().map(|f| f.len() as u64).sum::<u64>()
    }

    /// Applies a small write to its file and remembers it.
    fn write_small(&mut self, name: &str, pos: u64, block: Vec<u8>) -> io::Result<()> {
        let (start, end) = (pos as usize, pos as usize + block.len());
        let had = self.smalls.get(name).map(Vec::len);
        self.reserve(end.saturating_sub(had.unwrap_or(0)) as u64)?;
        let f = self.smalls.entry(name.to_string()).or_default();
        let old = had.map(|_| {
            let mut old = vec![0; block.len()];
            let kept = f.len().clamp(start, end);
            old[..kept - start].copy_from_slice(&f[start..kept]);
            old
        });
        if f.len() < end {
            f.resize(end, 0);
        }
        f[start..end].copy_from_slice(&block);
        self.last_small = Some(SmallWrite { name: name.to_string(), pos, new: block, old });
        Ok(())
    }

    /// ENOSPC if `more` bytes would not fit.
    fn reserve(&self, more: u64) -> io::Result<()> {
        match self.capacity {
            Some(cap) if self.used() + more > cap => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            _ => Ok(()),
        }
    }
}

/// The last write not yet covered by a sync, as a crash would find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsyncedWrite {
    pub segment: u64,
    pub pos: u64,
    pub len: usize,
    /// Offset in the write of the first byte that differs from the durable
    /// image (None: the write changed nothing). Bytes before it are durable
    /// bytes rewritten unchanged (the partial block the log rewrites).
    pub changed_from: Option<usize>,
}

#[derive(Clone, Default)]
pub struct SimStore {
    disk: Rc<RefCell<Disk>>,
}

impl SimStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Make the `n`-th write/sync from now fail and kill the disk.
    pub fn fail_after_ops(&self, n: u64) {
        let mut d = self.disk.borrow_mut();
        d.fail_at_op = Some(d.ops + n);
    }

    /// Make the `n`-th write/sync from now fail with `errno`; the disk keeps
    /// working afterwards.
    pub fn error_after_ops(&self, n: u64, errno: i32) {
        let mut d = self.disk.borrow_mut();
        d.error_at_op = Some((d.ops + n, errno));
    }

    /// Bound the bytes all files may hold (None: unbounded). Creating a file
    /// or growing one beyond it fails with ENOSPC.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.disk.borrow_mut().capacity = bytes;
    }

    /// Bytes all files hold now.
    pub fn used_bytes(&self) -> u64 {
        self.disk.borrow().used()
    }

    pub fn unsynced_write(&self) -> Option<UnsyncedWrite> {
        let d = self.disk.borrow();
        let (no, pos, bytes) = d.last_unsynced.as_ref()?;
        let durable = &d.files.get(no)?.durable;
        let changed_from =
            bytes.iter().enumerate().position(|(i, b)| durable.get(*pos as usize + i).copied().unwrap_or(0) != *b);
        Some(UnsyncedWrite { segment: *no, pos: *pos, len: bytes.len(), changed_from })
    }

    /// What a restarted process finds after a power cut now: the durable
    /// images; of the last unsynced write, the sectors (numbered from its
    /// start) for which `reached` is true; then each bit in `flips` (bit
    /// numbers from the write's start) inverted, if it lies in a byte the
    /// write changed: bytes it rewrote unchanged are durable data, which an
    /// atomic sector write cannot garble.
    pub fn crash_image_with(&self, reached: &dyn Fn(usize) -> bool, flips: &[usize]) -> SimStore {
        let image = self.crash_image(None);
        let Some(w) = self.unsynced_write() else {
            return image;
        };
        let d = self.disk.borrow();
        let (_, _, bytes) = d.last_unsynced.as_ref().expect("unsynced_write saw it");
        let mut img = image.disk.borrow_mut();
        let f = img.files.get_mut(&w.segment).expect("the crash image has the written file");
        let start = w.pos as usize;
        if f.live.len() < start + w.len {
            f.live.resize(start + w.len, 0);
        }
        let sector = SECTOR_BYTES as usize;
        for (i, chunk) in bytes.chunks(sector).enumerate() {
            if reached(i) {
                f.live[start + i * sector..start + i * sector + chunk.len()].copy_from_slice(chunk);
            }
        }
        if let Some(from) = w.changed_from {
            for &bit in flips {
                let byte = bit / 8;
                if byte >= from && byte < w.len {
                    f.live[start + byte] ^= 1 << (bit % 8);
                }
            }
        }
        f.durable = f.live.clone();
        drop(img);
        image
    }

    pub fn ops(&self) -> u64 {
        self.disk.borrow().ops
    }

    pub fn is_dead(&self) -> bool {
        self.disk.borrow().dead
    }

    /// What a restarted process finds after a crash now. `torn_bytes`: how
    /// many leading bytes of the last unsynced write reached the media
    /// (None = none did).
    pub fn crash_image(&self, torn_bytes: Option<usize>) -> SimStore {
        let d = self.disk.borrow();
        let mut files: BTreeMap<u64, FileImage> = d
            .files
            .iter()
            .map(|(no, f)| (*no, FileImage { live: f.durable.clone(), durable: f.durable.clone() }))
            .collect();
        if let (Some(n), Some((no, pos, bytes))) = (torn_bytes, &d.last_unsynced) {
            if let Some(f) = files.get_mut(no) {
                let n = n.min(bytes.len());
                let end = *pos as usize + n;
                if f.live.len() < end {
                    f.live.resize(end, 0);
                }
                f.live[*pos as usize..end].copy_from_slice(&bytes[..n]);
                f.durable = f.live.clone();
            }
        }
        let (skeletons, smalls) = (d.skeletons.clone(), d.smalls.clone());
        SimStore { disk: Rc::new(RefCell::new(Disk { files, skeletons, smalls, ..Disk::default() })) }
    }

    /// What a restarted process finds after a power cut during the last
    /// small write: the durable images (`crash_image(None)`), with each
    /// `SECTOR_BYTES` sector of that write new if `keep(sector index from
    /// the write's start)`, old otherwise (a device writes sectors
    /// atomically, in no particular order). A write that created its file
    /// is whole or absent, as the real backend renames it in: present only
    /// if `keep` keeps every sector.
    pub fn crash_image_tearing_small(&self, keep: &dyn Fn(usize) -> bool) -> SimStore {
        let image = self.crash_image(None);
        let Some(w) = self.disk.borrow().last_small.clone() else {
            return image;
        };
        let sector = SECTOR_BYTES as usize;
        let sectors = w.new.len().div_ceil(sector);
        let mut img = image.disk.borrow_mut();
        match &w.old {
            None if (0..sectors).all(keep) => {}
            None => drop(img.smalls.remove(&w.name)),
            Some(old) => {
                let f = img.smalls.get_mut(&w.name).expect("the crash image has the written small file");
                for i in (0..sectors).filter(|&i| !keep(i)) {
                    let (from, to) = (i * sector, ((i + 1) * sector).min(old.len()));
                    let at = w.pos as usize + from;
                    f[at..at + to - from].copy_from_slice(&old[from..to]);
                }
            }
        }
        drop(img);
        image
    }

    /// Direct access for corruption tests: zeroes bytes `range` of segment
    /// `no` (a lost or zeroed block, a cut).
    pub fn zero(&self, no: u64, range: std::ops::Range<usize>) {
        let mut d = self.disk.borrow_mut();
        let f = d.files.get_mut(&no).expect("segment exists");
        let end = range.end.min(f.live.len());
        f.live[range.start..end].fill(0);
        f.durable = f.live.clone();
    }

    /// Direct access for corruption tests.
    pub fn corrupt(&self, no: u64, pos: usize) {
        let mut d = self.disk.borrow_mut();
        let f = d.files.get_mut(&no).expect("segment exists");
        f.live[pos] ^= 0xff;
        f.durable[pos] ^= 0xff;
    }
}

pub struct SimFile {
    no: u64,
    disk: Rc<RefCell<Disk>>,
}

struct SimBytes(Vec<u8>);
impl SealedBytes for SimBytes {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl SegmentFile for SimFile {
    type Buf = Vec<u8>;
    fn alloc_buf(&self, len: usize) -> Vec<u8> {
        vec![0; len]
    }
    async fn write_at(&self, buf: Vec<u8>, pos: u64) -> io::Result<()> {
        let mut d = self.disk.borrow_mut();
        d.tick()?;
        let end = pos as usize + buf.len();
        let len = d.files.get(&self.no).ok_or_else(|| io::Error::other("no such file"))?.live.len();
        d.reserve((end as u64).saturating_sub(len as u64))?;
        let f = d.files.get_mut(&self.no).expect("checked above");
        if f.live.len() < end {
            f.live.resize(end, 0);
        }
        f.live[pos as usize..end].copy_from_slice(&buf);
        d.last_unsynced = Some((self.no, pos, buf));
        Ok(())
    }
    async fn sync(&self) -> io::Result<()> {
        let mut d = self.disk.borrow_mut();
        d.tick()?;
        let f = d.files.get_mut(&self.no).ok_or_else(|| io::Error::other("no such file"))?;
        f.durable = f.live.clone();
        if matches!(d.last_unsynced, Some((no, _, _)) if no == self.no) {
            d.last_unsynced = None;
        }
        Ok(())
    }
}

impl SegmentStore for SimStore {
    type File = SimFile;
    async fn list(&self) -> io::Result<Vec<(u64, u64)>> {
        let d = self.disk.borrow();
        Ok(d.files.iter().map(|(no, f)| (*no, f.live.len() as u64)).collect())
    }
    async fn create(&self, no: u64, len: u64) -> io::Result<SimFile> {
        let mut d = self.disk.borrow_mut();
        if d.dead {
            return Err(io::Error::other("simulated crash: disk gone"));
        }
        let replaced = d.files.get(&no).map_or(0, |f| f.live.len() as u64);
        d.reserve(len.saturating_sub(replaced))?;
        let zeros = vec![0; len as usize];
        d.files.insert(no, FileImage { live: zeros.clone(), durable: zeros });
        Ok(SimFile { no, disk: self.disk.clone() })
    }
    async fn reopen(&self, no: u64) -> io::Result<SimFile> {
        let mut d = self.disk.borrow_mut();
        d.tick()?;
        if !d.files.contains_key(&no) {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("segment {no} does not exist")));
        }
        Ok(SimFile { no, disk: self.disk.clone() })
    }
    fn map(&self, no: u64) -> io::Result<Rc<dyn SealedBytes>> {
        let d = self.disk.borrow();
        let f = d.files.get(&no).ok_or_else(|| io::Error::other("no such file"))?;
        Ok(Rc::new(SimBytes(f.live.clone())))
    }
    async fn finish(&self, no: u64, at: u64, tail: &[u8]) -> io::Result<()> {
        let mut d = self.disk.borrow_mut();
        let f = d.files.get_mut(&no).ok_or_else(|| io::Error::other("no such file"))?;
        f.live.truncate(at as usize);
        f.live.resize(at as usize, 0);
        f.live.extend_from_slice(tail);
        f.durable = f.live.clone();
        Ok(())
    }
    async fn remove(&self, no: u64) -> io::Result<()> {
        self.disk.borrow_mut().files.remove(&no);
        Ok(())
    }
    async fn read_small(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        check_small_name(name)?;
        let d = self.disk.borrow();
        if d.dead {
            return Err(io::Error::other("simulated crash: disk gone"));
        }
        Ok(d.smalls.get(name).cloned())
    }
    async fn write_small(&self, name: &str, pos: u64, block: Vec<u8>) -> io::Result<()> {
        check_small_write(name, pos, block.len())?;
        let mut d = self.disk.borrow_mut();
        d.tick()?;
        d.write_small(name, pos, block)
    }
    fn tier_files(&self) -> Option<&dyn TierFiles> {
        Some(self)
    }

    fn describe(&self) -> String {
        "in-memory simulator".into()
    }

    fn location(&self) -> String {
        "in-memory simulator".into()
    }
}

impl TierFiles for SimStore {
    fn upload_source(&self, no: u64) -> io::Result<crate::tier::Source> {
        let d = self.disk.borrow();
        let f = d.files.get(&no).ok_or_else(|| io::Error::other("no such file"))?;
        Ok(crate::tier::Source::Bytes(f.durable.clone()))
    }
    fn write_skeleton(&self, no: u64, bytes: &[u8]) -> io::Result<()> {
        let mut d = self.disk.borrow_mut();
        d.tick()?;
        d.skeletons.insert(no, bytes.to_vec());
        Ok(())
    }
    fn read_skeleton(&self, no: u64) -> io::Result<Vec<u8>> {
        self.disk.borrow().skeletons.get(&no).cloned().ok_or_else(|| io::Error::other("no such skeleton"))
    }
    fn remove_skeleton(&self, no: u64) -> io::Result<()> {
        self.disk.borrow_mut().skeletons.remove(&no);
        Ok(())
    }
    fn list_skeletons(&self) -> io::Result<Vec<(u64, u64)>> {
        Ok(self.disk.borrow().skeletons.iter().map(|(no, s)| (*no, s.len() as u64)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    const BLOCK: usize = crate::limits::DIRECT_IO_ALIGNMENT_BYTES as usize;

    fn durable(store: &SimStore, no: u64) -> Vec<u8> {
        store.crash_image(None).map(no).unwrap().bytes().to_vec()
    }

    #[test]
    fn reopen_needs_an_existing_segment_and_never_creates_one() {
        let store = SimStore::new();
        let e = block_on(store.reopen(3)).err().expect("segment 3 does not exist");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(block_on(store.list()).unwrap(), vec![]);
    }

    #[test]
    fn a_reopened_segment_is_written_durably_by_write_and_sync() {
        let store = SimStore::new();
        drop(block_on(store.create(1, 2 * BLOCK as u64)).unwrap());
        let f = block_on(store.reopen(1)).unwrap();
        block_on(f.write_at(vec![7; BLOCK], BLOCK as u64)).unwrap();
        assert_eq!(durable(&store, 1), vec![0; 2 * BLOCK], "durable before its sync");
        block_on(f.sync()).unwrap();
        assert_eq!(durable(&store, 1)[BLOCK..], vec![7; BLOCK][..]);
        assert_eq!(durable(&store, 1)[..BLOCK], vec![0; BLOCK][..]);
    }

    #[test]
    fn reopen_counts_as_an_op_and_fails_on_a_dead_disk() {
        let store = SimStore::new();
        drop(block_on(store.create(1, BLOCK as u64)).unwrap());
        let ops = store.ops();
        drop(block_on(store.reopen(1)).unwrap());
        assert_eq!(store.ops(), ops + 1);
        store.fail_after_ops(1);
        assert!(block_on(store.reopen(1)).is_err());
        assert!(store.is_dead());
        assert!(block_on(store.reopen(1)).is_err());
    }

    #[test]
    fn small_files_survive_crashes_but_are_never_segments() {
        let store = SimStore::new();
        drop(block_on(store.create(1, BLOCK as u64)).unwrap());
        block_on(store.write_small("raft-state", BLOCK as u64, vec![5; BLOCK])).unwrap();
        assert_eq!(block_on(store.list()).unwrap(), vec![(1, BLOCK as u64)]);
        assert_eq!(store.used_bytes(), 3 * BLOCK as u64);
        let image = store.crash_image(None);
        let mut expect = vec![0; BLOCK];
        expect.extend_from_slice(&[5; BLOCK]);
        assert_eq!(block_on(image.read_small("raft-state")).unwrap(), Some(expect));
        assert_eq!(block_on(image.read_small("other")).unwrap(), None);
        assert!(block_on(store.write_small("1.seg", 0, vec![0; BLOCK])).is_err());
        assert!(block_on(store.write_small("raft-state", 512, vec![0; BLOCK])).is_err());
    }

    #[test]
    fn a_small_write_on_a_failing_disk_does_not_happen() {
        let store = SimStore::new();
        block_on(store.write_small("raft-state", 0, vec![1; BLOCK])).unwrap();
        store.fail_after_ops(1);
        assert!(block_on(store.write_small("raft-state", 0, vec![2; BLOCK])).is_err());
        assert_eq!(block_on(store.crash_image(None).read_small("raft-state")).unwrap(), Some(vec![1; BLOCK]));
        assert!(block_on(store.read_small("raft-state")).is_err(), "a dead disk still read");
    }

    #[test]
    fn tearing_a_small_write_keeps_each_sector_old_or_new() {
        let store = SimStore::new();
        block_on(store.write_small("raft-state", 0, vec![1; BLOCK])).unwrap();
        block_on(store.write_small("raft-state", 0, vec![2; BLOCK])).unwrap();
        let torn = store.crash_image_tearing_small(&|i| i % 3 == 0);
        let file = block_on(torn.read_small("raft-state")).unwrap().unwrap();
        for (i, sector) in file.chunks(SECTOR_BYTES as usize).enumerate() {
            let want = if i % 3 == 0 { 2 } else { 1 };
            assert!(sector.iter().all(|&b| b == want), "sector {i}");
        }
        // A write that grew the file: its old sectors are the zeros past the old end.
        block_on(store.write_small("raft-state", BLOCK as u64, vec![3; BLOCK])).unwrap();
        let torn = store.crash_image_tearing_small(&|_| false);
        let file = block_on(torn.read_small("raft-state")).unwrap().unwrap();
        assert_eq!(file[..BLOCK], vec![2; BLOCK][..]);
        assert_eq!(file[BLOCK..], vec![0; BLOCK][..]);
    }
}
