//! A small value kept durably in two slots of one file beside the segments:
//! a replica's Raft term and vote, rewritten on every vote and term change,
//! which must survive a power cut.
//!
//! Why two slots: a value rewritten in place and torn by a power cut would
//! be neither the old value nor the new one. Here each write goes to the
//! slot that does not hold the newest valid value, with the next sequence
//! number, so the newest acknowledged value is never overwritten: a torn
//! write garbles only the slot it aimed at, that slot's checksum fails, and
//! a read falls back to the other. Each slot is one block, so a torn write
//! never reaches its neighbour. docs/storage-format.md, "Two-slot files",
//! draws the format.

use super::io::{is_small_name, SegmentStore};
use crate::limits::{DIRECT_IO_ALIGNMENT_BYTES, SLOT_PAYLOAD_BYTES_MAX};
use std::io;

/// A slot is one block; slot `i` starts at `i * SLOT_BYTES`.
const SLOT_BYTES: usize = DIRECT_IO_ALIGNMENT_BYTES as usize;
const MAGIC: [u8; 4] = *b"RSSL";
const VERSION: u32 = 1;
/// Magic, version u32, sequence u64, payload length u32.
const HEADER_BYTES: usize = 20;
const CRC_BYTES: usize = 4;
const _: () = assert!(HEADER_BYTES + SLOT_PAYLOAD_BYTES_MAX + CRC_BYTES == SLOT_BYTES);

/// What one slot holds.
#[derive(Debug, PartialEq, Eq)]
enum Slot<'a> {
    /// A value that verifies.
    Value { seq: u64, payload: &'a [u8] },
    /// Never written, torn or garbled: ignored.
    Invalid,
    /// A value that verifies, in a format version this build cannot read.
    Unsupported(u32),
}

/// One two-slot file: its name, and which slot holds its newest value.
///
/// It holds no store: `open` and `write` take the one the file lives in,
/// so whoever owns the store (a log, a test) keeps it where it likes; pass
/// the same store to both.
#[derive(Debug)]
pub struct Slots {
    name: &'static str,
    /// The slot holding the newest valid value, and its sequence number;
    /// None: no value was ever written.
    newest: Option<(usize, u64)>,
}

impl Slots {
    /// Opens two-slot file `name` of `store` and reads its newest value;
    /// None if the file does not exist (nothing was ever written). A file
    /// present with no valid slot is an InvalidData error naming it, never
    /// None: the value it held is lost, and taking that for "never
    /// written" could let a replica vote twice in one term.
    pub async fn open<S: SegmentStore>(store: &S, name: &'static str) -> io::Result<(Slots, Option<Vec<u8>>)> {
        assert!(is_small_name(name), "{name:?} is not a small file's name");
        let Some(file) = store.read_small(name).await? else {
            return Ok((Slots { name, newest: None }, None));
        };
        let (slot, seq, payload) = newest(&file).map_err(|why| {
            io::Error::new(io::ErrorKind::InvalidData, format!("two-slot file {}/{name}: {why}", store.location()))
        })?;
        Ok((Slots { name, newest: Some((slot, seq)) }, Some(payload.to_vec())))
    }

    /// Makes `payload` the value, durable when this returns. An error or a
    /// crash during the write leaves the previous value, or the new one if
    /// the write reached the media whole; never neither, since the slot
    /// written is not the one holding the newest value. A retry after an
    /// error rewrites that same whole slot, so it needs no poisoning.
    ///
    /// Panics if `payload` is longer than `SLOT_PAYLOAD_BYTES_MAX`: callers
    /// store a fixed set of small fields, so a longer one is a bug.
    pub async fn write<S: SegmentStore>(&mut self, store: &S, payload: &[u8]) -> io::Result<()> {
        assert!(payload.len() <= SLOT_PAYLOAD_BYTES_MAX, "{} bytes do not fit in a slot", payload.len());
        let (slot, seq) = match self.newest {
            None => (0, 1),
            Some((slot, seq)) => (1 - slot, seq + 1),
        };
        store.write_small(self.name, (slot * SLOT_BYTES) as u64, encode(seq, payload)).await?;
        self.newest = Some((slot, seq));
        Ok(())
    }
}

/// The bytes of a two-slot file whose one value is `payload` (slot 0; what a
/// first [`Slots::write`] leaves), for a tool that makes a data directory
/// without a store: the file is written through the file system whole.
pub fn file_holding(payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() <= SLOT_PAYLOAD_BYTES_MAX, "{} bytes do not fit in a slot", payload.len());
    encode(1, payload)
}

/// The slot, sequence number and payload of the file's newest valid value,
/// or why there is none.
fn newest(file: &[u8]) -> Result<(usize, u64, &[u8]), String> {
    let mut best: Option<(usize, u64, &[u8])> = None;
    for slot in 0..2 {
        let bytes = file.get(slot * SLOT_BYTES..).unwrap_or_default();
        match decode(&bytes[..bytes.len().min(SLOT_BYTES)]) {
            Slot::Value { seq, payload } if best.is_none_or(|(_, newest, _)| seq > newest) => {
                best = Some((slot, seq, payload))
            }
            Slot::Value { .. } | Slot::Invalid => {}
            // Refused, not skipped: the other slot's value would be older.
            Slot::Unsupported(v) => {
                return Err(format!("slot {slot} has format version {v}; this build reads {VERSION}"))
            }
        }
    }
    best.ok_or_else(|| "neither slot holds a valid value".to_string())
}

/// One slot's block: header, payload, CRC32C of both, zeros to the end.
fn encode(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(SLOT_BYTES);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(payload);
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b.resize(SLOT_BYTES, 0);
    // Pair assertion: what we write, we can read back.
    debug_assert_eq!(decode(&b), Slot::Value { seq, payload });
    b
}

/// What the bytes of one slot hold (fewer than a block: a file cut short).
fn decode(b: &[u8]) -> Slot<'_> {
    let (Some(magic), Some(len)) = (b.get(..4), b.get(16..HEADER_BYTES)) else {
        return Slot::Invalid;
    };
    let len = le_u32(len) as usize;
    if magic != MAGIC || len > SLOT_PAYLOAD_BYTES_MAX {
        return Slot::Invalid;
    }
    let end = HEADER_BYTES + len;
    match b.get(end..end + CRC_BYTES) {
        Some(crc) if le_u32(crc) == crc32c::crc32c(&b[..end]) => {}
        _ => return Slot::Invalid,
    }
    match le_u32(&b[4..8]) {
        VERSION => Slot::Value {
            seq: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            payload: &b[HEADER_BYTES..end],
        },
        other => Slot::Unsupported(other),
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::SECTOR_BYTES;
    use crate::storage::dma_file::DiskStore;
    use crate::storage::sim_file::SimStore;
    use futures::executor::block_on;

    const NAME: &str = "raft-state";

    fn read<S: SegmentStore>(store: &S) -> Option<Vec<u8>> {
        block_on(Slots::open(store, NAME)).unwrap().1
    }

    fn write<S: SegmentStore>(store: &S, payload: &[u8]) {
        let (mut slots, _) = block_on(Slots::open(store, NAME)).unwrap();
        block_on(slots.write(store, payload)).unwrap();
    }

    /// A payload that fills its slot, so every sector of a write of it
    /// differs from a write of another `full(..)`.
    fn full(seed: u8) -> Vec<u8> {
        (0..SLOT_PAYLOAD_BYTES_MAX).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    fn raw(store: &SimStore) -> Vec<u8> {
        block_on(store.read_small(NAME)).unwrap().unwrap()
    }

    #[test]
    fn a_file_made_whole_reads_back_and_takes_the_next_write() {
        let store = SimStore::new();
        block_on(store.write_small(NAME, 0, file_holding(b"restored"))).unwrap();
        assert_eq!(read(&store).as_deref(), Some(&b"restored"[..]));
        write(&store, b"next");
        assert_eq!(read(&store).as_deref(), Some(&b"next"[..]));
        assert_eq!(&raw(&store)[..file_holding(b"restored").len()], &file_holding(b"restored")[..], "slot 0 kept");
    }

    #[test]
    fn an_absent_file_reads_none_and_open_creates_nothing() {
        let store = SimStore::new();
        assert_eq!(read(&store), None);
        assert_eq!(block_on(store.read_small(NAME)).unwrap(), None);
    }

    #[test]
    fn each_value_written_reads_back_after_reopening() {
        let store = SimStore::new();
        let (mut slots, _) = block_on(Slots::open(&store, NAME)).unwrap();
        block_on(slots.write(&store, b"a")).unwrap();
        assert_eq!(read(&store).as_deref(), Some(&b"a"[..]));
        block_on(slots.write(&store, b"")).unwrap();
        assert_eq!(read(&store).as_deref(), Some(&b""[..]));
        block_on(slots.write(&store, &full(1))).unwrap();
        assert_eq!(read(&store), Some(full(1)));
        assert_eq!(read(&store.crash_image(None)), Some(full(1)));
    }

    #[test]
    fn writes_alternate_slots_and_never_touch_the_newest_value() {
        let store = SimStore::new();
        write(&store, b"v0");
        for i in 1..12u8 {
            let mut before = raw(&store);
            before.resize(2 * SLOT_BYTES, 0);
            // Through a fresh `open` every other time: the choice of slot
            // must come from the file, not only from memory.
            write(&store, &[b'v', i]);
            let after = raw(&store);
            let (kept, written) = if i % 2 == 0 { (1, 0) } else { (0, 1) };
            let block = |b: &[u8], s: usize| b[s * SLOT_BYTES..(s + 1) * SLOT_BYTES].to_vec();
            assert_eq!(block(&after, kept), block(&before, kept), "write {i} touched the newest value");
            assert_ne!(block(&after, written), block(&before, written), "write {i}");
            assert_eq!(read(&store), Some(vec![b'v', i]));
        }
    }

    /// Every pattern of old and new sectors of the write of `c` over the
    /// slot that held `a` (`b` the newest value) leaves `b` or `c`, and the
    /// value found can be overwritten, still never in the newest slot.
    fn every_tear_leaves_old_or_new(a: &[u8], b: &[u8], c: &[u8], exact: bool) {
        let store = SimStore::new();
        for v in [a, b, c] {
            write(&store, v);
        }
        let sectors = SLOT_BYTES / SECTOR_BYTES as usize;
        for mask in 0..1u32 << sectors {
            let torn = store.crash_image_tearing_small(&|i| mask >> i & 1 == 1);
            let found = read(&torn).expect("a value survives");
            assert!(found == b || found == c, "pattern {mask:#b} left neither value");
            if exact {
                assert_eq!(found == c, mask == (1 << sectors) - 1, "pattern {mask:#b}");
            }
            write(&torn, b"d");
            assert_eq!(read(&torn).as_deref(), Some(&b"d"[..]), "pattern {mask:#b}");
            assert_eq!(read(&torn.crash_image_tearing_small(&|_| false)), Some(found), "pattern {mask:#b}");
        }
    }

    #[test]
    fn a_torn_write_of_full_slots_leaves_the_old_value_unless_whole() {
        every_tear_leaves_old_or_new(&full(1), &full(2), &full(3), true);
    }

    #[test]
    fn a_torn_write_of_short_values_leaves_the_old_or_the_new_value() {
        every_tear_leaves_old_or_new(b"term 1 vote 2", b"term 2 vote 3", b"term 3 vote none", false);
    }

    #[test]
    fn a_torn_first_write_leaves_no_file_or_the_whole_value() {
        let store = SimStore::new();
        write(&store, b"first");
        assert_eq!(read(&store.crash_image_tearing_small(&|i| i != 3)), None);
        assert_eq!(read(&store.crash_image_tearing_small(&|_| true)).as_deref(), Some(&b"first"[..]));
    }

    #[test]
    fn a_failed_write_keeps_the_previous_value() {
        let store = SimStore::new();
        write(&store, b"a");
        let (mut slots, _) = block_on(Slots::open(&store, NAME)).unwrap();
        store.error_after_ops(1, libc::EIO);
        assert!(block_on(slots.write(&store, b"b")).is_err());
        assert_eq!(read(&store).as_deref(), Some(&b"a"[..]));
        // The retry goes to the same slot: `a` stays until it lands.
        block_on(slots.write(&store, b"c")).unwrap();
        assert_eq!(read(&store).as_deref(), Some(&b"c"[..]));
        assert_eq!(read(&store.crash_image_tearing_small(&|_| false)).as_deref(), Some(&b"a"[..]));
        store.fail_after_ops(1);
        assert!(block_on(slots.write(&store, b"d")).is_err());
        assert_eq!(read(&store.crash_image(None)).as_deref(), Some(&b"c"[..]));
    }

    #[test]
    fn both_slots_corrupt_is_an_error_naming_the_file() {
        let store = SimStore::new();
        write(&store, b"a");
        write(&store, b"b");
        let mut file = raw(&store);
        file[HEADER_BYTES] ^= 1;
        file[SLOT_BYTES + HEADER_BYTES] ^= 1;
        block_on(store.write_small(NAME, 0, file)).unwrap();
        let e = block_on(Slots::open(&store, NAME)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains(NAME), "{e}");
        // A file of zeros (a slot file whose blocks were lost) is no better.
        block_on(store.write_small(NAME, 0, vec![0; 2 * SLOT_BYTES])).unwrap();
        assert_eq!(block_on(Slots::open(&store, NAME)).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_newer_format_version_is_refused_not_skipped() {
        let store = SimStore::new();
        write(&store, b"a");
        let mut block = encode(2, b"b");
        block[4..8].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let crc = crc32c::crc32c(&block[..HEADER_BYTES + 1]);
        block[HEADER_BYTES + 1..HEADER_BYTES + 1 + CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
        block_on(store.write_small(NAME, SLOT_BYTES as u64, block)).unwrap();
        let e = block_on(Slots::open(&store, NAME)).unwrap_err();
        assert!(e.to_string().contains("format version 2"), "{e}");
    }

    #[test]
    fn every_flipped_bit_of_a_slot_is_caught() {
        let block = encode(7, b"term 3 vote 2");
        for bit in 0..(HEADER_BYTES + 13 + CRC_BYTES) * 8 {
            let mut b = block.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(decode(&b), Slot::Invalid, "bit {bit}");
        }
        assert_eq!(decode(&block[..HEADER_BYTES + 13]), Slot::Invalid, "cut before its checksum");
    }

    #[test]
    #[should_panic(expected = "do not fit in a slot")]
    fn a_payload_over_the_bound_is_a_bug() {
        let store = SimStore::new();
        let (mut slots, _) = block_on(Slots::open(&store, NAME)).unwrap();
        let _ = block_on(slots.write(&store, &[0; SLOT_PAYLOAD_BYTES_MAX + 1]));
    }

    #[test]
    fn on_disk_values_round_trip_beside_segments_they_never_join() {
        let dir = std::env::temp_dir().join(format!("ringstream-slots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Buffered: small files never use O_DIRECT, and this needs no executor.
        let store = block_on(DiskStore::open(&dir, false)).unwrap();
        assert_eq!(read(&store), None);
        write(&store, b"a");
        write(&store, &full(2));
        assert_eq!(read(&store), Some(full(2)));
        let again = block_on(DiskStore::open(&dir, false)).unwrap();
        assert_eq!(read(&again), Some(full(2)));
        assert_eq!(std::fs::metadata(dir.join(NAME)).unwrap().len(), 2 * SLOT_BYTES as u64);
        assert!(!dir.join(format!("{NAME}.tmp")).exists());
        assert_eq!(block_on(store.list()).unwrap(), vec![], "a small file listed as a segment");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
