//! Recovery (`storage::Log::open`) over segment images built from fuzzer
//! bytes, on the in-memory `SimStore` (no executor needed: its futures
//! complete at once).
//!
//! Input byte 0 picks the mode:
//! - even, raw: 1..=3 segments whose images are fuzzer bytes.
//! - odd, damaged log: a log laid out like the writer does (records with
//!   per-stream running offsets, segments rolled when full and sealed,
//!   zero-filled tails, maybe a prepared empty segment after the last), then up to 7
//!   mutations: bit flip, zeroed range, overwrite with fuzzer bytes,
//!   truncation, a range copied from elsewhere (a misdirected write), or a
//!   record of a segment repeated right after that segment's last record.
//!
//! Checked always: no panic; the open fails only with `Corrupt`, and only for
//! a segment that holds something other than what the writer wrote; every
//! recovered record verifies (CRC) at its place in the image it was found in;
//! per segment, recovered records are back to back from byte 0, segments in
//! order; `read_body` serves each recovered body exactly; opening again
//! finds the same records and no torn tail (recovery is idempotent).
//! Checked for the damaged log: with no mutation, exactly the written records
//! come back; every written record that lies before the first damaged byte of
//! its segment comes back; with no forging mutation (overwrite/copy), every
//! recovered record is the one written at that place; damage confined to the
//! newest segment with records (or later) never fails the open.
#![no_main]

use futures::executor::block_on;
use libfuzzer_sys::fuzz_target;
use ringstream::limits::{RECORD_HEADER_BYTES, SEGMENT_BYTES_MIN};
use ringstream::storage::io::{SegmentFile, SegmentStore};
use ringstream::storage::record::{self, RecordHeader};
use ringstream::storage::sim_file::SimStore;
use ringstream::storage::{Error, Log, LogConfig, Recovered};
use std::collections::BTreeMap;

/// Bytes are taken from the front of the input; an exhausted input reads zeros.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// What the writer put where, for the damaged-log mode.
struct Written {
    segment: u64,
    pos: u64,
    header: RecordHeader,
}

#[derive(Default)]
struct Damage {
    /// First damaged byte per segment.
    first: BTreeMap<u64, usize>,
    /// An overwrite or copy happened: valid records may exist that the writer never wrote.
    forged: bool,
}

impl Damage {
    fn mark(&mut self, segment: u64, pos: usize) {
        let e = self.first.entry(segment).or_insert(pos);
        *e = (*e).min(pos);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let sel = input.byte();
    if sel & 1 == 0 {
        let count = 1 + usize::from(sel >> 1) % 3;
        let base = u64::from(sel >> 3) % 4;
        let mut images = BTreeMap::new();
        for i in 0..count {
            let len = if i + 1 == count { input.0.len() } else { usize::from(input.u16()) };
            images.insert(base + i as u64, input.take(len).to_vec());
        }
        check(&images, None);
    } else {
        let (mut images, written) = write_log(&mut input, sel);
        let damage = mutate(&mut input, &mut images, &written);
        check(&images, Some((&written, &damage)));
    }
});

/// Lays out records the way `Log::append` does and returns the segment images.
fn write_log(input: &mut Input, sel: u8) -> (BTreeMap<u64, Vec<u8>>, Vec<Written>) {
    let capacity = 4096 * (1 + usize::from(sel >> 1) % 3);
    let base = u64::from(sel >> 3) % 4;
    let records = usize::from(input.byte() % 64);
    let prepared_ahead = input.byte() & 1 == 1;
    let mut images: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut written = Vec::new();
    let mut tails = [0u64; 4];
    let mut segment = base;
    images.insert(segment, vec![0; capacity]);
    let mut pos = 0usize;
    let mut in_segment = 0u64;
    for i in 0..records {
        let stream = input.byte();
        let body_len = usize::from(input.u16() % 700);
        let body: Vec<u8> = (0..body_len).map(|j| (i * 31 + j) as u8).collect();
        let framed = record::framed_len(body_len);
        if pos + framed + record::SEAL_FRAMED_BYTES > capacity {
            // A full segment ends in its seal.
            let mut seal = Vec::new();
            record::seal(segment, pos as u64, in_segment, &mut seal);
            images.get_mut(&segment).unwrap()[pos..pos + seal.len()].copy_from_slice(&seal);
            segment += 1;
            images.insert(segment, vec![0; capacity]);
            pos = 0;
            in_segment = 0;
        }
        let sid = usize::from(stream % 4);
        let header = RecordHeader {
            kind: stream >> 2,
            stream_id: sid as u64,
            incarnation: 1,
            stream_offset: tails[sid],
            body_len: body_len as u32,
        };
        tails[sid] += body_len as u64;
        let mut framed_bytes = Vec::new();
        record::encode(segment, &header, &body, &mut framed_bytes);
        images.get_mut(&segment).unwrap()[pos..pos + framed].copy_from_slice(&framed_bytes);
        written.push(Written { segment, pos: pos as u64, header });
        pos += framed;
        in_segment += 1;
    }
    if prepared_ahead {
        images.insert(segment + 1, vec![0; capacity]);
    }
    (images, written)
}

fn mutate(input: &mut Input, images: &mut BTreeMap<u64, Vec<u8>>, written: &[Written]) -> Damage {
    let mut damage = Damage::default();
    let segments: Vec<u64> = images.keys().copied().collect();
    let count = input.byte() % 8;
    for _ in 0..count {
        let op = input.byte() % 6;
        let seg = segments[usize::from(input.byte()) % segments.len()];
        let len_now = images[&seg].len();
        let pos = usize::from(input.u16()) % (len_now + 1);
        let n = usize::from(input.byte());
        match op {
            0 if pos < len_now => {
                images.get_mut(&seg).unwrap()[pos] ^= 1 << (n % 8);
                damage.mark(seg, pos);
            }
            1 => {
                let end = (pos + n).min(len_now);
                images.get_mut(&seg).unwrap()[pos..end].fill(0);
                if end > pos {
                    damage.mark(seg, pos);
                }
            }
            2 => {
                let bytes = input.take(n).to_vec();
                let end = (pos + bytes.len()).min(len_now);
                images.get_mut(&seg).unwrap()[pos..end].copy_from_slice(&bytes[..end - pos]);
                if end > pos {
                    damage.mark(seg, pos);
                    damage.forged = true;
                }
            }
            3 => {
                images.get_mut(&seg).unwrap().truncate(pos);
                damage.mark(seg, pos);
            }
            4 => {
                let from_seg = segments[usize::from(input.byte()) % segments.len()];
                let src = &images[&from_seg];
                let from = usize::from(input.u16()) % (src.len() + 1);
                let len = (n * 4).min(src.len() - from).min(len_now - pos);
                let bytes = src[from..from + len].to_vec();
                images.get_mut(&seg).unwrap()[pos..pos + len].copy_from_slice(&bytes);
                if len > 0 {
                    damage.mark(seg, pos);
                    damage.forged = true;
                }
            }
            5 if !written.is_empty() => {
                // A record of this segment shows up again right after its last
                // record (a replayed or misdirected write): it verifies there.
                let w = &written[n % written.len()];
                let image = &images[&w.segment];
                let len = record::framed_len(w.header.body_len as usize);
                let bytes = image.get(w.pos as usize..w.pos as usize + len).map(<[u8]>::to_vec);
                let last = written.iter().rev().find(|v| v.segment == w.segment);
                let end = last.map(|v| v.pos as usize + record::framed_len(v.header.body_len as usize));
                if let (Some(bytes), Some(at)) = (bytes, end) {
                    let image = images.get_mut(&w.segment).unwrap();
                    if at + bytes.len() <= image.len() {
                        image[at..at + bytes.len()].copy_from_slice(&bytes);
                        damage.mark(w.segment, at);
                        damage.forged = true;
                    }
                }
            }
            _ => {}
        }
    }
    damage
}

fn config() -> LogConfig {
    LogConfig { segment_bytes: SEGMENT_BYTES_MIN, pending_bytes_max: SEGMENT_BYTES_MIN }
}

fn store_with(images: &BTreeMap<u64, Vec<u8>>) -> SimStore {
    let store = SimStore::new();
    block_on(async {
        for (&no, image) in images {
            let file = store.create(no, image.len() as u64).await.expect("sim create");
            file.write_at(image.clone(), 0).await.expect("sim write");
            file.sync().await.expect("sim sync");
        }
    });
    store
}

fn check(images: &BTreeMap<u64, Vec<u8>>, log: Option<(&[Written], &Damage)>) {
    let store = store_with(images);
    let opened = block_on(Log::open(store.clone(), config()));
    let (recovered, report) = match opened {
        Ok((log, recovered, report)) => {
            check_found(images, &recovered);
            // Every body is served as found.
            for r in &recovered {
                let mut out = Vec::new();
                log.read_body(r.loc, 0..r.loc.body_len as usize, &mut out).expect("read a recovered body");
                let start = r.loc.pos as usize + RECORD_HEADER_BYTES;
                assert_eq!(out, images[&r.loc.segment][start..start + out.len()], "served body differs");
            }
            (recovered, report)
        }
        Err(Error::Corrupt { segment, .. }) => {
            if let Some((_, damage)) = log {
                assert!(damage.first.contains_key(&segment), "Corrupt blamed on undamaged segment {segment}");
                let newest = log.unwrap().0.last().map(|w| w.segment);
                let confined = damage.first.keys().all(|&s| Some(s) >= newest);
                assert!(damage.forged || !confined, "damage confined to the newest segment failed the open");
            }
            return;
        }
        Err(e) => panic!("open failed with {e}"),
    };
    assert_eq!(report.records, recovered.len());
    // Idempotent: a second boot finds the same log, nothing left to cut.
    let (_, again, report2) = block_on(Log::open(store, config())).expect("second open");
    assert_eq!(report2.torn_tail, None, "second open cut again");
    assert_eq!(again.len(), recovered.len(), "second open found other records");
    for (a, b) in again.iter().zip(&recovered) {
        assert_eq!((a.header, a.loc), (b.header, b.loc), "second open found other records");
    }
    if let Some((written, damage)) = log {
        if damage.first.is_empty() {
            assert_eq!(recovered.len(), written.len(), "undamaged log lost records");
        }
        let found: BTreeMap<(u64, u64), RecordHeader> =
            recovered.iter().map(|r| ((r.loc.segment, r.loc.pos), r.header)).collect();
        for w in written {
            let end = w.pos as usize + RECORD_HEADER_BYTES + w.header.body_len as usize;
            if damage.first.get(&w.segment).is_none_or(|&f| end <= f) {
                assert_eq!(found.get(&(w.segment, w.pos)), Some(&w.header), "undamaged record lost");
            }
        }
        if !damage.forged {
            let at: BTreeMap<(u64, u64), RecordHeader> =
                written.iter().map(|w| ((w.segment, w.pos), w.header)).collect();
            for r in &recovered {
                assert_eq!(at.get(&(r.loc.segment, r.loc.pos)), Some(&r.header), "recovered a record never written");
            }
        }
    }
}

/// Recovered records verify where they were found and sit back to back from
/// the start of each segment, segments ascending.
fn check_found(images: &BTreeMap<u64, Vec<u8>>, recovered: &[Recovered]) {
    let mut expect: Option<(u64, u64)> = None; // (segment, next position)
    for r in recovered {
        let image = &images[&r.loc.segment];
        let (h, body, framed) =
            record::decode(r.loc.segment, &image[r.loc.pos as usize..]).expect("recovered record does not verify");
        assert_eq!(h, r.header);
        assert_eq!(body.len(), r.loc.body_len as usize);
        match expect {
            Some((seg, next)) if seg == r.loc.segment => assert_eq!(r.loc.pos, next, "gap inside segment {seg}"),
            Some((seg, _)) => {
                assert!(r.loc.segment > seg, "segments out of order");
                assert_eq!(r.loc.pos, 0, "segment does not start with its first record");
            }
            None => assert_eq!(r.loc.pos, 0, "segment does not start with its first record"),
        }
        expect = Some((r.loc.segment, r.loc.pos + framed as u64));
    }
}
