//! The file backend the log is generic over: real O_DIRECT files through
//! io_uring in production, an in-memory model with crash injection in tests.

use super::tiered::TierFiles;
use std::io;
use std::rc::Rc;

/// Bytes of a sealed (no longer written) segment, readable without I/O:
/// an mmap of the file in production, a copy in the simulator.
pub trait SealedBytes {
    fn bytes(&self) -> &[u8];
}

/// One segment file open for writing.
#[allow(async_fn_in_trait)]
pub trait SegmentFile {
    /// A buffer the backend can write without copying (aligned for O_DIRECT).
    type Buf: AsMut<[u8]> + AsRef<[u8]>;
    /// A zeroed buffer of exactly `len` bytes; `len` is a multiple of the alignment.
    fn alloc_buf(&self, len: usize) -> Self::Buf;
    /// A buffer of exactly `len` bytes that starts with `data` and is zero
    /// after it (`data.len() <= len`): what a flush writes, filled once.
    fn filled_buf(&self, len: usize, data: &[u8]) -> Self::Buf {
        let mut b = self.alloc_buf(len);
        b.as_mut()[..data.len()].copy_from_slice(data);
        b
    }
    /// Writes all of `buf` at `pos` (both aligned). Durable only after `sync`.
    async fn write_at(&self, buf: Self::Buf, pos: u64) -> io::Result<()>;
    /// fdatasync: everything written before it is on stable storage when it returns Ok.
    async fn sync(&self) -> io::Result<()>;
}

/// When the next chunk of a segment's zero-fill may be written.
#[allow(async_fn_in_trait)]
pub trait ZeroPace {
    /// Resolves once the chunk after the first `zeroed` bytes may go out.
    async fn allow(&self, zeroed: u64);
}

/// The directory of one shard's segments.
#[allow(async_fn_in_trait)]
pub trait SegmentStore {
    type File: SegmentFile;
    /// Segment numbers present with their file lengths, ascending.
    async fn list(&self) -> io::Result<Vec<(u64, u64)>>;
    /// Creates segment `no` of `len` bytes, written with zeros and made durable
    /// (file and directory entry), so later writes overwrite written blocks
    /// instead of converting unwritten extents.
    async fn create(&self, no: u64, len: u64) -> io::Result<Self::File>;
    /// [`SegmentStore::create`] for a segment made ahead of use: before each
    /// chunk of zeros the backend awaits `pace.allow(zeroed)`, so the
    /// zero-fill keeps in step with the log instead of flooding the disk
    /// (see `storage/log/preparer.rs`). Backends without a disk ignore it.
    async fn create_paced(&self, no: u64, len: u64, pace: &impl ZeroPace) -> io::Result<Self::File> {
        let _ = pace;
        self.create(no, len).await
    }
    /// Opens existing segment `no` for writing again, with the durability
    /// of the handle `create` returns. A replicated log resumes writing its
    /// newest segment after a restart instead of sealing it, and cuts an
    /// uncommitted tail by rewriting the segment's end. NotFound if the
    /// segment does not exist: it is never created here, since a missing
    /// segment means the caller's view of the directory is wrong.
    async fn reopen(&self, no: u64) -> io::Result<Self::File>;
    /// Maps a segment for reading. Only called for segments that are no
    /// longer written (recovery, and after rollover is durable).
    fn map(&self, no: u64) -> io::Result<Rc<dyn SealedBytes>>;
    /// Recovery's one write to an existing segment: durably makes `tail`
    /// the last bytes of segment `no`, written at `at`, cutting whatever
    /// followed (a torn tail, unused zeros). Used to seal the newest segment
    /// before writing resumes in a new one. Never called while it is mapped.
    async fn finish(&self, no: u64, at: u64, tail: &[u8]) -> io::Result<()>;
    /// Deletes a segment durably.
    async fn remove(&self, no: u64) -> io::Result<()>;
    /// What the tier layer keeps beside these segments (skeletons of remote
    /// segments, what an upload reads); None: this store cannot tier.
    fn tier_files(&self) -> Option<&dyn TierFiles> {
        None
    }
    /// Describes the backend for the boot log ("O_DIRECT via io_uring", ...).
    fn describe(&self) -> String;
    /// Where the segments are, for error messages (a directory, say).
    fn location(&self) -> String;
    /// Whether a completed `write_at` is already durable (O_DIRECT|O_DSYNC),
    /// making `sync` a no-op. Only changes what the metrics time.
    fn write_is_durable(&self) -> bool {
        false
    }
}
