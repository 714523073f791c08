//! In-memory segment store with crash and torn-write injection, for tests.
//!
//! Every file has a `live` image (what reads see) and a `durable` image (what
//! survives a crash). `sync` copies live to durable. `crash_image` builds the
//! store a restarted process would find: the durable images, plus optionally a
//! torn prefix of the last unsynced write. A fault plan makes the N-th
//! write or sync fail, after which every operation fails, like a dead process.
//! Never a substitute for the real files: only fault-injection tests use it.

use super::io::{SealedBytes, SegmentFile, SegmentStore};
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
    ops: u64,
    dead: bool,
    /// The last write not yet covered by a sync: (segment, position, bytes).
    last_unsynced: Option<(u64, u64, Vec<u8>)>,
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
        Ok(())
    }
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
        SimStore { disk: Rc::new(RefCell::new(Disk { files, ..Disk::default() })) }
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
        let f = d.files.get_mut(&self.no).ok_or_else(|| io::Error::other("no such file"))?;
        let end = pos as usize + buf.len();
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
        let zeros = vec![0; len as usize];
        d.files.insert(no, FileImage { live: zeros.clone(), durable: zeros });
        Ok(SimFile { no, disk: self.disk.clone() })
    }
    fn map(&self, no: u64) -> io::Result<Rc<dyn SealedBytes>> {
        let d = self.disk.borrow();
        let f = d.files.get(&no).ok_or_else(|| io::Error::other("no such file"))?;
        Ok(Rc::new(SimBytes(f.live.clone())))
    }
    async fn truncate(&self, no: u64, len: u64) -> io::Result<()> {
        let mut d = self.disk.borrow_mut();
        let f = d.files.get_mut(&no).ok_or_else(|| io::Error::other("no such file"))?;
        f.live.truncate(len as usize);
        f.durable = f.live.clone();
        Ok(())
    }
    async fn remove(&self, no: u64) -> io::Result<()> {
        self.disk.borrow_mut().files.remove(&no);
        Ok(())
    }
    fn describe(&self) -> String {
        "in-memory simulator".into()
    }
}
