//! The real segment backend: files written through glommio's io_uring, with
//! O_DIRECT | O_DSYNC (`DmaFile`: a completed write is durable, no separate
//! sync) or, where the file system has no O_DIRECT (tmpfs) or the operator
//! disabled it, buffered (`BufferedFile`) with an fdatasync ending every
//! flush. Sealed segments are read through memmap2. Small files beside the
//! segments (`write_small`) are plain std::fs files.
//!
//! This is the only storage file that knows glommio.

use super::io::{check_small_name, check_small_write, SealedBytes, SegmentFile, SegmentStore, ZeroPace};
use super::tiered::TierFiles;
use crate::limits::{DIRECT_IO_ALIGNMENT_BYTES, ZERO_CHUNK_BYTES};
use glommio::io::{BufferedFile, DmaBuffer, DmaFile, OpenOptions};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

pub enum GFile {
    /// O_DIRECT | O_DSYNC: a write is durable when it completes (FUA or a
    /// device flush inside the write), so no separate fdatasync round trip
    /// through the executor and the io-wq worker pool is needed.
    Direct(DmaFile),
    /// Buffered writes, made durable by fdatasync.
    Buffered(BufferedFile),
}

pub enum GBuf {
    Direct(DmaBuffer),
    Buffered(Vec<u8>),
}

impl AsRef<[u8]> for GBuf {
    fn as_ref(&self) -> &[u8] {
        match self {
            GBuf::Direct(b) => b.as_bytes(),
            GBuf::Buffered(v) => v,
        }
    }
}
impl AsMut<[u8]> for GBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            GBuf::Direct(b) => b.as_bytes_mut(),
            GBuf::Buffered(v) => v,
        }
    }
}

impl SegmentFile for GFile {
    type Buf = GBuf;
    fn alloc_buf(&self, len: usize) -> GBuf {
        match self {
            GFile::Direct(f) => {
                let mut b = f.alloc_dma_buffer(len);
                b.as_bytes_mut().fill(0);
                GBuf::Direct(b)
            }
            GFile::Buffered(_) => GBuf::Buffered(vec![0; len]),
        }
    }
    fn filled_buf(&self, len: usize, data: &[u8]) -> GBuf {
        match self {
            GFile::Direct(f) => {
                // Each byte written once: the data, then zeros to the end.
                let mut b = f.alloc_dma_buffer(len);
                let bytes = b.as_bytes_mut();
                bytes[..data.len()].copy_from_slice(data);
                bytes[data.len()..].fill(0);
                GBuf::Direct(b)
            }
            GFile::Buffered(_) => {
                let mut v = Vec::with_capacity(len);
                v.extend_from_slice(data);
                v.resize(len, 0);
                GBuf::Buffered(v)
            }
        }
    }
    async fn write_at(&self, buf: GBuf, pos: u64) -> io::Result<()> {
        let len = buf.as_ref().len();
        let n = match (self, buf) {
            (GFile::Direct(f), GBuf::Direct(b)) => f.write_at(b, pos).await?,
            (GFile::Buffered(f), GBuf::Buffered(b)) => f.write_at(b, pos).await?,
            _ => return Err(io::Error::other("buffer from another backend")),
        };
        if n != len {
            return Err(io::Error::new(io::ErrorKind::WriteZero, format!("short write: {n} of {len} bytes")));
        }
        Ok(())
    }
    async fn sync(&self) -> io::Result<()> {
        match self {
            // Every completed write on an O_DSYNC file is already durable.
            GFile::Direct(_) => {}
            GFile::Buffered(f) => f.fdatasync().await?,
        }
        Ok(())
    }
}

/// A zero-fill nothing waits for (the segment is needed now).
struct Unpaced;
impl ZeroPace for Unpaced {
    async fn allow(&self, _zeroed: u64) {}
}

struct Mapped(memmap2::Mmap);
impl SealedBytes for Mapped {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}
struct Empty;
impl SealedBytes for Empty {
    fn bytes(&self) -> &[u8] {
        &[]
    }
}

/// One shard's segment directory on a real file system.
pub struct DiskStore {
    dir: PathBuf,
    direct: bool,
    /// Small files whose directory entry this process has made durable. A
    /// file found may have been renamed in by a process killed before it
    /// synced the directory: the entry is then only in the page cache, and
    /// a power cut could lose the file with every write to it since.
    small_entries_synced: RefCell<BTreeSet<String>>,
}

impl DiskStore {
    /// Opens (creating) `dir`. `direct` selects O_DIRECT; the caller decided it
    /// from `--direct-io` and `preflight::supports_direct_io`.
    ///
    /// Must run on the shard's executor thread: it also works around a glommio
    /// 0.9 pitfall, where the first DmaFile opened on a thread decides whether
    /// reads use a polled ring; an empty first file makes that probe wrongly
    /// succeed and every later O_DIRECT read fail with EOPNOTSUPP. So we first
    /// open a non-empty file and check a write/read round trip.
    pub async fn open(dir: &Path, direct: bool) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        if direct {
            let probe = dir.join(".io-probe");
            std::fs::write(&probe, vec![0x5au8; DIRECT_IO_ALIGNMENT_BYTES as usize])?;
            tracing::debug!("{}: O_DIRECT self-test", dir.display());
            let f = OpenOptions::new().read(true).write(true).dma_open(&probe).await?;
            tracing::debug!("{}: O_DIRECT self-test: opened", dir.display());
            let first = f.read_at(0, DIRECT_IO_ALIGNMENT_BYTES as usize).await?;
            if first.first() != Some(&0x5a) {
                return Err(io::Error::other("O_DIRECT self-test read back the wrong bytes"));
            }
            let mut b = f.alloc_dma_buffer(DIRECT_IO_ALIGNMENT_BYTES as usize);
            b.as_bytes_mut().fill(0xa5);
            f.write_at(b, 0).await?;
            f.fdatasync().await?;
            let back = f.read_at(0, DIRECT_IO_ALIGNMENT_BYTES as usize).await?;
            if back.iter().any(|&x| x != 0xa5) {
                return Err(io::Error::other("O_DIRECT self-test: write then read-back mismatch"));
            }
            f.close().await?;
            tracing::debug!("{}: O_DIRECT self-test: done", dir.display());
            std::fs::remove_file(&probe)?;
        }
        Ok(DiskStore { dir: dir.to_path_buf(), direct, small_entries_synced: RefCell::default() })
    }

    pub fn path_of(&self, no: u64) -> PathBuf {
        self.dir.join(format!("{no:016}.seg"))
    }

    /// Creates segment `no` under `tmp` (zero-filled unless `fill` is
    /// None), then renames it in place.
    async fn create_via(&self, tmp: &Path, no: u64, len: u64, fill: Option<&impl ZeroPace>) -> io::Result<GFile> {
        let path = self.path_of(no);
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(true);
        let chunk = ZERO_CHUNK_BYTES;
        tracing::debug!("creating segment {}", path.display());
        let file = if self.direct {
            let f = opts.dma_open(tmp).await?;
            tracing::debug!("creating segment {}: opened", path.display());
            f.pre_allocate(len, false).await?;
            tracing::debug!("creating segment {}: allocated", path.display());
            let mut pos = 0;
            while let Some(pace) = fill.filter(|_| pos < len) {
                pace.allow(pos).await;
                let n = chunk.min(len - pos) as usize;
                let mut b = f.alloc_dma_buffer(n);
                b.as_bytes_mut().fill(0);
                f.write_at(b, pos).await?;
                pos += n as u64;
            }
            f.fdatasync().await?;
            tracing::debug!("creating segment {}: {} bytes zeroed", path.display(), pos);
            // Closed before the rename: a handle without O_DSYNC must never
            // be open on a `.seg` name (tests/process_shape.rs checks).
            f.close().await?;
            std::fs::rename(tmp, &path)?;
            tracing::debug!("creating segment {}: renamed", path.display());
            // Zero-filled without O_DSYNC (one sync at the end); written with it.
            let f = OpenOptions::new().read(true).write(true).custom_flags(libc::O_DSYNC).dma_open(&path).await?;
            GFile::Direct(f)
        } else {
            let mut f = opts.buffered_open(tmp).await?;
            f.pre_allocate(len, false).await?;
            let mut pos = 0;
            while let Some(pace) = fill.filter(|_| pos < len) {
                pace.allow(pos).await;
                let n = chunk.min(len - pos) as usize;
                f.write_at(vec![0; n], pos).await?;
                pos += n as u64;
            }
            f.fdatasync().await?;
            f.rename(&path).await?;
            GFile::Buffered(f)
        };
        self.sync_dir()?;
        Ok(file)
    }

    /// Zero-fills (or only allocates) through a temporary name so a
    /// half-made file is never mistaken for a segment after a crash.
    async fn create_through_tmp(&self, no: u64, len: u64, fill: Option<&impl ZeroPace>) -> io::Result<GFile> {
        let tmp = self.dir.join(format!("{no:016}.seg.tmp"));
        let r = self.create_via(&tmp, no, len, fill).await;
        if r.is_err() {
            // Give back the space of a half-made file (ENOSPC while zero-filling).
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }

    fn skeleton_path(&self, no: u64) -> PathBuf {
        self.dir.join(format!("{no:016}.skel"))
    }

    fn sync_dir(&self) -> io::Result<()> {
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// The first write of small file `name`: the whole file (zeros before
    /// `pos`) under a temporary name, synced, renamed in, the directory
    /// synced. A crash before the rename leaves no file, after it the file
    /// whole: never a present file whose content was never written.
    fn create_small(&self, name: &str, pos: u64, block: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!("{name}.tmp"));
        let f = std::fs::File::create(&tmp)?;
        f.write_all_at(block, pos)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(name))?;
        self.sync_dir()?;
        self.small_entries_synced.borrow_mut().insert(name.to_string());
        Ok(())
    }

    /// Makes small file `name`'s directory entry durable, once per process.
    fn sync_small_entry(&self, name: &str) -> io::Result<()> {
        if self.small_entries_synced.borrow().contains(name) {
            return Ok(());
        }
        self.sync_dir()?;
        self.small_entries_synced.borrow_mut().insert(name.to_string());
        Ok(())
    }
}

impl SegmentStore for DiskStore {
    type File = GFile;

    async fn list(&self) -> io::Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".seg")) else {
                continue;
            };
            let Ok(no) = stem.parse::<u64>() else {
                continue;
            };
            out.push((no, e.metadata()?.len()));
        }
        out.sort();
        Ok(out)
    }

    async fn create(&self, no: u64, len: u64) -> io::Result<GFile> {
        self.create_paced(no, len, &Unpaced).await
    }

    async fn create_paced(&self, no: u64, len: u64, pace: &impl ZeroPace) -> io::Result<GFile> {
        self.create_through_tmp(no, len, Some(pace)).await
    }

    async fn create_unfilled(&self, no: u64, len: u64) -> io::Result<GFile> {
        self.create_through_tmp(no, len, None::<&Unpaced>).await
    }

    async fn reopen(&self, no: u64) -> io::Result<GFile> {
        // The handle `create_via` leaves after its rename; neither create
        // nor truncate, so a missing segment is NotFound.
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        let path = self.path_of(no);
        Ok(if self.direct {
            GFile::Direct(opts.custom_flags(libc::O_DSYNC).dma_open(&path).await?)
        } else {
            GFile::Buffered(opts.buffered_open(&path).await?)
        })
    }

    fn map(&self, no: u64) -> io::Result<Rc<dyn SealedBytes>> {
        let f = std::fs::File::open(self.path_of(no))?;
        if f.metadata()?.len() == 0 {
            return Ok(Rc::new(Empty));
        }
        // Safety: sealed segments are never written again while mapped
        // (the log only maps a segment after its last write was synced, and
        // recovery finishes a segment before mapping it).
        let m = unsafe { memmap2::Mmap::map(&f)? };
        Ok(Rc::new(Mapped(m)))
    }

    async fn finish(&self, no: u64, at: u64, tail: &[u8]) -> io::Result<()> {
        // Buffered, not O_DIRECT: a one-off write at boot, before the file is
        // mapped and while no O_DIRECT handle on it is open.
        let f = std::fs::OpenOptions::new().write(true).open(self.path_of(no))?;
        f.set_len(at)?;
        f.write_all_at(tail, at)?;
        f.sync_all()
    }

    async fn remove(&self, no: u64) -> io::Result<()> {
        std::fs::remove_file(self.path_of(no))?;
        self.sync_dir()
    }

    async fn read_small(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        check_small_name(name)?;
        match std::fs::read(self.dir.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn write_small(&self, name: &str, pos: u64, block: Vec<u8>) -> io::Result<()> {
        check_small_write(name, pos, block.len())?;
        // A buffered pwrite + fdatasync through std::fs, blocking the
        // shard's thread like `finish` does: a small file is written rarely
        // (a vote, a new term) and a block at a time, so an O_DIRECT handle
        // kept open with its aligned buffers would buy nothing worth its
        // code; one fdatasync's stall per vote is the price.
        let f = match std::fs::OpenOptions::new().write(true).open(self.dir.join(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.create_small(name, pos, &block),
            Err(e) => return Err(e),
        };
        f.write_all_at(&block, pos)?;
        f.sync_data()?;
        self.sync_small_entry(name)
    }

    fn tier_files(&self) -> Option<&dyn TierFiles> {
        Some(self)
    }

    fn write_is_durable(&self) -> bool {
        self.direct
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn describe(&self) -> String {
        if self.direct {
            format!("{}: O_DIRECT|O_DSYNC via io_uring, durable at write completion", self.dir.display())
        } else {
            format!("{}: buffered via io_uring (no O_DIRECT), fdatasync per batch", self.dir.display())
        }
    }
}

impl TierFiles for DiskStore {
    fn upload_source(&self, no: u64) -> io::Result<crate::tier::Source> {
        Ok(crate::tier::Source::File(self.path_of(no)))
    }

    fn write_skeleton(&self, no: u64, bytes: &[u8]) -> io::Result<()> {
        // Through a temporary name: a skeleton is either whole or absent.
        let tmp = self.dir.join(format!("{no:016}.skel.tmp"));
        let f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut &f, bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.skeleton_path(no))?;
        self.sync_dir()
    }

    fn read_skeleton(&self, no: u64) -> io::Result<Vec<u8>> {
        std::fs::read(self.skeleton_path(no))
    }

    fn remove_skeleton(&self, no: u64) -> io::Result<()> {
        std::fs::remove_file(self.skeleton_path(no))?;
        self.sync_dir()
    }

    fn list_skeletons(&self) -> io::Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(no) = name.to_str().and_then(|n| n.strip_suffix(".skel")).and_then(|n| n.parse().ok()) else {
                continue;
            };
            out.push((no, e.metadata()?.len()));
        }
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glommio::{LocalExecutorBuilder, Placement};

    const BLOCK: usize = DIRECT_IO_ALIGNMENT_BYTES as usize;

    fn on_executor(f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Send + 'static) {
        LocalExecutorBuilder::new(Placement::Unbound).spawn(f).unwrap().join().unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ringstream-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Reopens a segment of `store` and rewrites its second block there.
    async fn reopen_and_write(store: &DiskStore) {
        let e = store.reopen(9).await.err().expect("segment 9 does not exist");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!store.path_of(9).exists(), "reopen created a segment");
        drop(store.create(1, 2 * BLOCK as u64).await.unwrap());
        let f = store.reopen(1).await.unwrap();
        assert_eq!(matches!(f, GFile::Direct(_)), store.direct);
        f.write_at(f.filled_buf(BLOCK, b"resumed"), BLOCK as u64).await.unwrap();
        f.sync().await.unwrap();
        let bytes = std::fs::read(store.path_of(1)).unwrap();
        assert_eq!(bytes.len(), 2 * BLOCK);
        assert_eq!(&bytes[BLOCK..BLOCK + 7], b"resumed");
        assert!(bytes[..BLOCK].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_reopened_segment_is_written_in_place_buffered() {
        on_executor(|| {
            Box::pin(async {
                let dir = scratch("reopen-buffered");
                reopen_and_write(&DiskStore::open(&dir, false).await.unwrap()).await;
                std::fs::remove_dir_all(&dir).unwrap();
            })
        });
    }

    /// With O_DIRECT where the scratch directory has it (not on tmpfs).
    #[test]
    fn a_reopened_segment_is_written_in_place_direct() {
        on_executor(|| {
            Box::pin(async {
                let dir = scratch("reopen-direct");
                match DiskStore::open(&dir, true).await {
                    Ok(store) => reopen_and_write(&store).await,
                    Err(e) => eprintln!("no O_DIRECT in {}: {e}; skipped", dir.display()),
                }
                std::fs::remove_dir_all(&dir).unwrap();
            })
        });
    }
}
