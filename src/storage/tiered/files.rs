//! What the tier layer keeps beside a shard's segments, implemented by each
//! segment store that can tier (`SegmentStore::tier_files`).

use crate::tier::Source;
use std::io;

/// The skeleton files of remote segments (`NNN.skel`, docs/storage-format.md)
/// and where an upload reads a sealed segment's bytes.
pub trait TierFiles {
    /// What an upload of sealed segment `no` reads: its file's path, or its
    /// bytes where there is no file.
    fn upload_source(&self, no: u64) -> io::Result<Source>;
    /// Durably writes the skeleton of segment `no`: whole or absent after a crash.
    fn write_skeleton(&self, no: u64, bytes: &[u8]) -> io::Result<()>;
    fn read_skeleton(&self, no: u64) -> io::Result<Vec<u8>>;
    /// Deletes a skeleton durably.
    fn remove_skeleton(&self, no: u64) -> io::Result<()>;
    /// Segment numbers with a skeleton, with the skeletons' lengths, ascending.
    fn list_skeletons(&self) -> io::Result<Vec<(u64, u64)>>;
}
