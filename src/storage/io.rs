//! The file backend the log is generic over: real O_DIRECT files through
//! io_uring in production, an in-memory model with crash injection in tests.

use super::tiered::TierFiles;
use crate::limits::DIRECT_IO_ALIGNMENT_BYTES;
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
    /// [`SegmentStore::create`] for a segment every byte of which is
    /// written next (one copied whole from a peer): its space is allocated,
    /// not zero-filled, so its bytes are written once. By default (backends
    /// without a disk) as `create`.
    async fn create_unfilled(&self, no: u64, len: u64) -> io::Result<Self::File> {
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
    /// The whole small file `name` ([`is_small_name`]) beside the segments;
    /// None if it does not exist.
    async fn read_small(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Writes `block` at `pos` of small file `name` (both block-aligned),
    /// durable when it returns. A write that creates the file makes it
    /// appear holding the whole write, or not at all (after a crash during
    /// it), so a crash never leaves a present file that was never written.
    /// Small files hold state kept beside the log (the two-slot file of
    /// `storage/slots.rs`); `list` never reports them.
    async fn write_small(&self, name: &str, pos: u64, block: Vec<u8>) -> io::Result<()>;
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

/// Whether `name` may name a small file: ASCII lowercase letters, digits
/// and `-`, starting with a letter. Without a dot it can never end like a
/// segment (`.seg`), a skeleton (`.skel`) or a file being made (`.tmp`),
/// so no listing of those mistakes it for one; without a `/` it stays in
/// the segments' directory.
pub fn is_small_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// InvalidInput unless [`is_small_name`]: what every backend checks before
/// touching a small file, so no caller reaches a segment through it.
pub fn check_small_name(name: &str) -> io::Result<()> {
    if is_small_name(name) {
        return Ok(());
    }
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name:?} is not a small file's name")))
}

/// What every backend checks before a small write: a small file's name, a
/// block-aligned position and a non-empty block-aligned length (a slot is
/// one block, so a torn write never reaches a neighbouring one).
pub fn check_small_write(name: &str, pos: u64, len: usize) -> io::Result<()> {
    check_small_name(name)?;
    let aligned =
        pos.is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES) && (len as u64).is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES);
    if len == 0 || !aligned {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("small write of {len} bytes at {pos} is not block-aligned"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_names_never_look_like_segment_files() {
        for ok in ["raft-state", "vote", "a1-b2"] {
            assert!(is_small_name(ok), "{ok}");
        }
        for bad in [
            "",
            "0000000000000001.seg",
            "0000000000000001.skel",
            "x.tmp",
            "-x",
            "1x",
            "a/b",
            "../x",
            "Raft",
            ".io-probe",
        ] {
            assert!(!is_small_name(bad), "{bad}");
        }
    }

    #[test]
    fn small_writes_are_whole_blocks() {
        let block = DIRECT_IO_ALIGNMENT_BYTES as usize;
        assert!(check_small_write("raft-state", 0, block).is_ok());
        assert!(check_small_write("raft-state", block as u64, 2 * block).is_ok());
        for (pos, len) in [(0, 0), (0, block - 1), (512, block), (0, block + 512)] {
            let e = check_small_write("raft-state", pos, len).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{pos} {len}");
        }
        assert_eq!(check_small_write("x.seg", 0, block).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
