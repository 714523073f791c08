//! Segment shipping: how a replica that has no segments (a new node, or
//! one whose disk was lost) gets its peers' sealed segment files whole at
//! boot, instead of replaying every entry one by one (or entries its
//! leader no longer holds).
//!
//! - A **manifest** request asks a peer which sealed segments it would
//!   give: from its oldest, through the newest whose entries are all
//!   committed there (`LocalLog::shippable_segments`), with their lengths.
//! - A **chunk** request asks for up to [`CELL_SHIP_CHUNK_BYTES`] of one of
//!   them from an offset; the answer carries the segment's length and the
//!   CRC-32C of its bytes, or "not held" for a segment that is not sealed
//!   and durable there.
//! - [`Source`] answers both at once from the log it is given. Before it
//!   has one, a manifest request is answered "not ready" (its log is
//!   opening: ask again), or, on a replica that holds no segment and is
//!   shipping itself, with an empty manifest (a new cell's nodes tell each
//!   other they hold nothing).
//! - [`fetch_segment`] asks chunk after chunk, one in flight, checks each,
//!   and writes them into a segment store at the offsets they came from;
//!   the file is durable and byte for byte the peer's when it returns Ok.
//! - [`manifests`] asks every peer for its manifest until all answered,
//!   or one offered segments (the others get a moment more), or a
//!   deadline passed (never, with `--cell-join`: see its doc);
//!   [`copy_best`] copies the longest one's segments; the receiver's log
//!   then opens on them as a log missing nothing but its newest entries,
//!   which its leader sends as entries.
//!
//! - A **members** request asks a peer for its group's members as it
//!   applied them ([`membership`]): a node joining a cell opens its log
//!   knowing them (the changes that made them may lie in segments long
//!   reclaimed).
//!
//! Requests: `1 | segment u64 | offset u64 | max u32` (a chunk), `2` (the
//! manifest), `3` (the members). Answers: a chunk `0 | length u64 | crc32c
//! u32 | bytes`, or `1` (not held); a manifest `0 | count u32 | (segment
//! u64 | length u64)* | crc32c u32` of what precedes it, or `1` (not
//! ready); the members `0 | the membership as the Raft state file keeps it
//! (`cell::store`) | crc32c u32`, or `1` (not ready). Little-endian.
//! Anything else, an empty answer included (a replica serving no
//! segments), is refused.

use super::board::Slot;
use super::link::{FetchHandler, ForwardError, Links};
use super::members::Membership;
use super::replica::Sleep;
use super::skeletons;
use super::store::{decode_membership, encode_membership};
use crate::limits::{CELL_SHIP_CHUNK_BYTES, CELL_SHIP_CHUNK_TIMEOUT_MS, DIRECT_IO_ALIGNMENT_BYTES};
use crate::storage::io::{SegmentFile, SegmentStore};
use crate::storage::log::LocalLog;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FETCH_BYTES: usize = 1 + 8 + 8 + 4;
const CHUNK_HEAD_BYTES: usize = 1 + 8 + 4;
const HELD: u8 = 0;
const NOT_HELD: u8 = 1;
const ASK_CHUNK: u8 = 1;
const ASK_MANIFEST: u8 = 2;
const ASK_MEMBERS: u8 = 3;
pub(super) const NOT_READY: u8 = 1;
const MANIFEST_ENTRY_BYTES: usize = 16;

/// One fetch: bytes `offset..offset + max` of segment `segment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetch {
    pub segment: u64,
    pub offset: u64,
    pub max: u32,
}

impl Fetch {
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(ASK_CHUNK)
    }

    pub fn decode(bytes: &[u8]) -> Option<Fetch> {
        Fetch::decode_as(bytes, ASK_CHUNK)
    }

    /// The request of kind `kind` for these bytes (a segment's, or a skeleton's).
    pub(super) fn encode_as(&self, kind: u8) -> Vec<u8> {
        let mut out = Vec::with_capacity(FETCH_BYTES);
        out.push(kind);
        out.extend_from_slice(&self.segment.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.max.to_le_bytes());
        out
    }

    pub(super) fn decode_as(bytes: &[u8], kind: u8) -> Option<Fetch> {
        let bytes: &[u8; FETCH_BYTES] = bytes.try_into().ok()?;
        let (&asked, rest) = bytes.split_first()?;
        if asked != kind {
            return None;
        }
        let (segment, rest) = rest.split_first_chunk::<8>()?;
        let (offset, max) = rest.split_first_chunk::<8>()?;
        Some(Fetch {
            segment: u64::from_le_bytes(*segment),
            offset: u64::from_le_bytes(*offset),
            max: u32::from_le_bytes(max.try_into().ok()?),
        })
    }
}

/// A fetch's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Bytes of the segment from the offset asked, and its whole length.
    Bytes { length: u64, bytes: Vec<u8> },
    /// The segment is not sealed and durable on the replica asked.
    NotHeld,
}

impl Chunk {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Chunk::NotHeld => vec![NOT_HELD],
            Chunk::Bytes { length, bytes } => {
                let mut out = Vec::with_capacity(CHUNK_HEAD_BYTES + bytes.len());
                out.push(HELD);
                out.extend_from_slice(&length.to_le_bytes());
                out.extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
                out.extend_from_slice(bytes);
                out
            }
        }
    }

    /// The chunk, its CRC checked; the reason when the answer is not one.
    pub fn decode(answer: &[u8]) -> Result<Chunk, String> {
        match answer.split_first() {
            None => Err("an empty answer (the replica asked serves no segments)".into()),
            Some((&NOT_HELD, [])) => Ok(Chunk::NotHeld),
            Some((&HELD, rest)) => {
                let (length, rest) = rest.split_first_chunk::<8>().ok_or("a chunk's head cut short")?;
                let (crc, bytes) = rest.split_first_chunk::<4>().ok_or("a chunk's head cut short")?;
                if crc32c::crc32c(bytes) != u32::from_le_bytes(*crc) {
                    return Err(format!("a chunk of {} bytes fails its CRC", bytes.len()));
                }
                Ok(Chunk::Bytes { length: u64::from_le_bytes(*length), bytes: bytes.to_vec() })
            }
            Some((kind, _)) => Err(format!("an answer of unknown kind {kind}")),
        }
    }
}

/// The sealed segments a peer offers, oldest first: (number, length).
pub type Manifest = Vec<(u64, u64)>;

pub(super) fn encode_manifest(m: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 4 + m.len() * MANIFEST_ENTRY_BYTES + 4);
    out.push(HELD);
    out.extend_from_slice(&(m.len() as u32).to_le_bytes());
    for (no, len) in m {
        out.extend_from_slice(&no.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    out.extend_from_slice(&crc32c::crc32c(&out).to_le_bytes());
    out
}

/// A manifest answer, checked: its CRC, and segments one after the other;
/// None: the peer's log is still opening (ask again).
pub fn decode_manifest(answer: &[u8]) -> Result<Option<Manifest>, String> {
    if answer == [NOT_READY] {
        return Ok(None);
    }
    let (body, crc) = answer.split_last_chunk::<4>().ok_or("a manifest cut short")?;
    if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
        return Err("a manifest fails its CRC".into());
    }
    let (&HELD, rest) = body.split_first().ok_or("a manifest cut short")? else {
        return Err("not a manifest".into());
    };
    let (count, rest) = rest.split_first_chunk::<4>().ok_or("a manifest cut short")?;
    if rest.len() != u32::from_le_bytes(*count) as usize * MANIFEST_ENTRY_BYTES {
        return Err("a manifest's count does not match its length".into());
    }
    let m: Manifest = rest
        .chunks_exact(MANIFEST_ENTRY_BYTES)
        .map(|c| (u64::from_le_bytes(c[..8].try_into().expect("8")), u64::from_le_bytes(c[8..].try_into().expect("8"))))
        .collect();
    if m.windows(2).any(|w| w[1].0 != w[0].0 + 1) {
        return Err("a manifest's segments do not follow each other".into());
    }
    Ok(Some(m))
}

/// A replica's side: answers its peers' requests from its log, once it
/// has one (before that, "not ready" or an empty manifest, and "not held").
pub struct Source<S: SegmentStore> {
    log: RefCell<Option<Rc<LocalLog<S>>>>,
    /// The group's members as this replica applied them, once it runs.
    members: RefCell<Option<MembersNow>>,
    /// No log yet, and none to open: this replica holds no segment.
    empty: Cell<bool>,
    /// Where the bytes it sends are counted.
    slot: Option<Arc<Slot>>,
}

impl<S: SegmentStore> Default for Source<S> {
    fn default() -> Self {
        Source { log: RefCell::new(None), members: RefCell::new(None), empty: Cell::new(false), slot: None }
    }
}

/// What a source asks for the members it answers with.
pub type MembersNow = Box<dyn Fn() -> Membership>;

impl<S: SegmentStore> Source<S> {
    pub fn new(log: Rc<LocalLog<S>>) -> Source<S> {
        Source { log: RefCell::new(Some(log)), ..Source::default() }
    }

    /// A source, with no log yet, that counts the bytes it sends in `slot`.
    pub fn counted(slot: Arc<Slot>) -> Source<S> {
        Source { slot: Some(slot), ..Source::default() }
    }

    /// Whether, until it serves a log, it says it holds nothing (it has no
    /// segment and is shipping itself) rather than "not ready".
    pub fn holds_nothing(&self, empty: bool) {
        self.empty.set(empty);
    }

    /// Serves from `log` from now on.
    pub fn serve(&self, log: Rc<LocalLog<S>>) {
        *self.log.borrow_mut() = Some(log);
    }

    /// Answers members requests from `now` from now on.
    pub fn serve_members(&self, now: MembersNow) {
        *self.members.borrow_mut() = Some(now);
    }
}

impl<S: SegmentStore> FetchHandler for Source<S> {
    fn fetch(&self, request: &[u8]) -> Vec<u8> {
        let log = self.log.borrow().clone();
        if request == [ASK_MEMBERS] {
            return match &*self.members.borrow() {
                Some(now) => checked(&encode_membership(&now())),
                None => vec![NOT_READY],
            };
        }
        if let Some(answer) = skeletons::answer(log.as_deref(), request, self.slot.as_deref()) {
            return answer;
        }
        if request == [ASK_MANIFEST] {
            return match log {
                Some(l) => encode_manifest(&l.shippable_segments()),
                None if self.empty.get() => encode_manifest(&[]),
                None => vec![NOT_READY],
            };
        }
        let Some(f) = Fetch::decode(request) else { return Vec::new() };
        let max = (f.max as usize).min(CELL_SHIP_CHUNK_BYTES);
        match log.and_then(|l| l.sealed_slice(f.segment, f.offset, max)) {
            Some((length, bytes)) => {
                if let Some(slot) = &self.slot {
                    slot.served_segment(bytes.len() as u64);
                }
                Chunk::Bytes { length, bytes }
            }
            None => Chunk::NotHeld,
        }
        .encode()
    }
}

/// Why a segment was not copied. Whatever was written of it is not to be
/// used (its caller removes it or starts over).
#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    #[error("segment {segment}: {source}")]
    Link { segment: u64, source: ForwardError },
    #[error("segment {segment} is not sealed on node {from}")]
    NotHeld { segment: u64, from: u64 },
    #[error("segment {segment} at {offset}: {why}")]
    Refused { segment: u64, offset: u64, why: String },
    #[error("segment {segment}: writing it: {source}")]
    Io { segment: u64, source: std::io::Error },
    #[error("no peer offered a segment")]
    NoOffer,
}

/// What [`copy_best`] copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shipped {
    pub from: u64,
    pub segments: usize,
    pub bytes: u64,
    pub took: Duration,
}

/// `HELD | body | crc32c` of what precedes the CRC.
fn checked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + body.len() + 4);
    out.push(HELD);
    out.extend_from_slice(body);
    out.extend_from_slice(&crc32c::crc32c(&out).to_le_bytes());
    out
}

/// A members answer, checked; None: not ready, or it does not add up.
fn decode_members(answer: &[u8]) -> Option<Membership> {
    let (body, crc) = answer.split_last_chunk::<4>()?;
    if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
        return None;
    }
    let (&HELD, rest) = body.split_first()? else { return None };
    decode_membership(rest)
}

/// The members of the group as the newest change any of `peers` applied
/// shows them (each connected peer asked once); None when none answered.
pub async fn membership(links: &Links, peers: &[u64]) -> Option<Membership> {
    let mut newest: Option<Membership> = None;
    for &peer in peers.iter().filter(|&&p| links.is_connected(p)) {
        let Ok(answer) = links.fetch(peer, vec![ASK_MEMBERS], MANIFEST_TIMEOUT).await else { continue };
        match decode_members(&answer) {
            Some(m) if newest.as_ref().is_none_or(|n| m.index > n.index) => newest = Some(m),
            Some(_) => {}
            None => tracing::debug!("segment shipping: node {peer} did not say its group's members"),
        }
    }
    newest
}

/// How long one manifest request may take.
const MANIFEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between rounds of asking the peers not yet answered.
const ASK_AGAIN: Duration = Duration::from_millis(50);
/// How much longer the other peers are waited for once one offered segments.
const OTHERS_GRACE: Duration = Duration::from_millis(500);
/// How often a replica waiting for its peers (`--cell-join`) says so.
const STILL_WAITING: Duration = Duration::from_secs(10);

/// Copies the segments of the longest manifest among `offers` into `into`
/// (which holds none), trying the next longest when a copy fails (what it
/// copied removed first); empty manifests are skipped. On Err, the last
/// failure (or `NoOffer`), `into` may still hold part of a copy: the
/// caller removes what it holds before it goes on without.
pub async fn copy_best<S: SegmentStore>(
    links: &Links,
    mut offers: Vec<(u64, Manifest)>,
    into: &S,
) -> Result<Shipped, ShipError> {
    // The longest first: the newest last segment, then the most segments.
    offers.sort_by_key(|(_, m)| std::cmp::Reverse((m.last().map(|l| l.0), m.len())));
    let mut failure = None;
    for (from, manifest) in offers.into_iter().filter(|(_, m)| !m.is_empty()) {
        let started = Instant::now();
        match copy_manifest(links, from, &manifest, into).await {
            Ok(bytes) => {
                let took = started.elapsed();
                return Ok(Shipped { from, segments: manifest.len(), bytes, took });
            }
            Err(e) => {
                tracing::warn!("segment shipping from node {from} failed: {e}; trying another peer");
                for (no, _) in &manifest {
                    let _ = into.remove(*no).await;
                }
                failure = Some(e);
            }
        }
    }
    Err(failure.unwrap_or(ShipError::NoOffer))
}

/// The manifests of `peers`, asked until settled (`Asking`). A peer whose log
/// is still opening answers "not ready" and is asked again. A peer this
/// replica's dial to failed (down: a new cell's first node finds every one
/// so) is not waited for, unless `patient` (`--cell-join`): a replica whose
/// disk was lost must not start empty while a peer that may hold segments
/// is down, since it may have reclaimed entries this one acknowledged
/// (reclamation waits only for what every voter held), and then nothing
/// could give them to it; it waits until a peer offers segments or every
/// peer answered (a new cell: all hold nothing), however long, saying so
/// every `STILL_WAITING`. None asked when there are no peers.
pub async fn manifests(
    links: &Links,
    peers: &[u64],
    wait: Duration,
    patient: bool,
    sleep: &Sleep,
) -> Vec<(u64, Manifest)> {
    let started = Instant::now();
    let mut asking = Asking { started, offered_at: None, patient, wait };
    let (mut offers, mut pending): (Vec<(u64, Manifest)>, _) = (Vec::new(), peers.to_vec());
    let mut said = started;
    while !asking.settled(pending.is_empty(), Instant::now()) {
        let mut unanswered = Vec::new();
        for peer in pending {
            if !links.is_connected(peer) {
                if patient || links.dialled(peer) != Some(false) {
                    unanswered.push(peer);
                }
                continue;
            }
            match links.fetch(peer, vec![ASK_MANIFEST], MANIFEST_TIMEOUT).await.map(|a| decode_manifest(&a)) {
                Ok(Ok(Some(m))) => {
                    if !m.is_empty() {
                        asking.offered_at.get_or_insert_with(Instant::now);
                    }
                    offers.push((peer, m));
                }
                Ok(Err(why)) => {
                    tracing::warn!("segment shipping: node {peer}'s manifest refused: {why}");
                    unanswered.push(peer);
                }
                Ok(Ok(None)) | Err(_) => unanswered.push(peer),
            }
        }
        pending = unanswered;
        if asking.offered_at.is_none() && !pending.is_empty() && said.elapsed() >= STILL_WAITING {
            said = Instant::now();
            tracing::warn!(
                "segment shipping (--cell-join): no segments here, none offered in {:?}, and nodes {pending:?} \
                 have not answered (down, or opening their logs): waiting for them",
                started.elapsed()
            );
        }
        if !pending.is_empty() {
            sleep(ASK_AGAIN).await;
        }
    }
    offers
}

/// Where asking for manifests stands.
struct Asking {
    started: Instant,
    offered_at: Option<Instant>,
    patient: bool,
    wait: Duration,
}

impl Asking {
    /// Whether asking may stop: every peer answered (or, not `patient`, is
    /// down); or one offered segments [`OTHERS_GRACE`] ago (the others may
    /// offer more); or, not `patient`, `wait` passed since the start.
    fn settled(&self, all: bool, now: Instant) -> bool {
        all || self.offered_at.is_some_and(|t| now >= t + OTHERS_GRACE)
            || (!self.patient && now >= self.started + self.wait)
    }
}

/// Copies every segment of `manifest` from `from`; the bytes copied.
async fn copy_manifest<S: SegmentStore>(
    links: &Links,
    from: u64,
    manifest: &[(u64, u64)],
    into: &S,
) -> Result<u64, ShipError> {
    let mut bytes = 0;
    for &(no, len) in manifest {
        let got = fetch_segment(links, from, no, into).await?;
        if got != len {
            let why = format!("{got} bytes, where the manifest said {len}");
            return Err(ShipError::Refused { segment: no, offset: 0, why });
        }
        bytes += got;
    }
    Ok(bytes)
}

/// Copies sealed segment `no` of replica `from` into `into` (created there,
/// so not present before), chunk after chunk; returns its length once it
/// is durable. A sender that changes the segment's length mid-way, or
/// sends a chunk that is not the one asked, fails it.
pub async fn fetch_segment<S: SegmentStore>(links: &Links, from: u64, no: u64, into: &S) -> Result<u64, ShipError> {
    let io = |source| ShipError::Io { segment: no, source };
    let (length, mut chunk) = fetch_chunk(links, from, no, 0).await?;
    check_chunk(no, 0, length, &chunk)?;
    let align = DIRECT_IO_ALIGNMENT_BYTES;
    let whole = length / align * align;
    let file = into.create_unfilled(no, length.div_ceil(align) * align).await.map_err(io)?;
    let mut offset = 0;
    while offset < whole {
        let take = (chunk.len() as u64).min(whole - offset) as usize;
        file.write_at(file.filled_buf(take, &chunk[..take]), offset).await.map_err(io)?;
        offset += take as u64;
        // What is left of a chunk is the last bytes, past the last whole block.
        chunk.drain(..take);
        if chunk.is_empty() && offset < length {
            let (len, next) = fetch_chunk(links, from, no, offset).await?;
            if len != length {
                let why = format!("its length changed from {length} to {len} bytes");
                return Err(ShipError::Refused { segment: no, offset, why });
            }
            check_chunk(no, offset, length, &next)?;
            chunk = next;
        }
    }
    file.sync().await.map_err(io)?;
    drop(file);
    // The bytes past the last whole block, and the file cut to the
    // leader's length (`finish` writes through the page cache, durably).
    if offset < length {
        into.finish(no, offset, &chunk).await.map_err(io)?;
    }
    Ok(length)
}

/// A chunk at `offset` of a segment `length` long must hold a whole number
/// of aligned blocks, or every byte to the end.
fn check_chunk(no: u64, offset: u64, length: u64, bytes: &[u8]) -> Result<(), ShipError> {
    let end = offset + bytes.len() as u64;
    let aligned = (bytes.len() as u64).is_multiple_of(DIRECT_IO_ALIGNMENT_BYTES);
    if end > length || (end < length && (bytes.is_empty() || !aligned)) {
        let why =
            format!("a chunk of {} bytes in a segment of {length}: neither whole blocks nor its end", bytes.len());
        return Err(ShipError::Refused { segment: no, offset, why });
    }
    Ok(())
}

async fn fetch_chunk(links: &Links, from: u64, no: u64, offset: u64) -> Result<(u64, Vec<u8>), ShipError> {
    fetch_chunk_as(links, from, no, offset, ASK_CHUNK).await
}

/// One chunk of segment `no` (or, by `kind`, of its skeleton) at `offset`.
pub(super) async fn fetch_chunk_as(
    links: &Links,
    from: u64,
    no: u64,
    offset: u64,
    kind: u8,
) -> Result<(u64, Vec<u8>), ShipError> {
    let request = Fetch { segment: no, offset, max: CELL_SHIP_CHUNK_BYTES as u32 }.encode_as(kind);
    let timeout = Duration::from_millis(CELL_SHIP_CHUNK_TIMEOUT_MS);
    let answer = links.fetch(from, request, timeout).await.map_err(|source| ShipError::Link { segment: no, source })?;
    match Chunk::decode(&answer) {
        Ok(Chunk::Bytes { length, bytes }) => Ok((length, bytes)),
        Ok(Chunk::NotHeld) => Err(ShipError::NotHeld { segment: no, from }),
        Err(why) => Err(ShipError::Refused { segment: no, offset, why }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetches_round_trip_and_other_lengths_do_not_decode() {
        let f = Fetch { segment: u64::MAX, offset: 3 << 40, max: 1 << 20 };
        assert_eq!(Fetch::decode(&f.encode()), Some(f));
        let bytes = f.encode();
        assert_eq!(Fetch::decode(&bytes[..FETCH_BYTES - 1]), None);
        assert_eq!(Fetch::decode(&[bytes.clone(), vec![0]].concat()), None);
    }

    #[test]
    fn chunks_round_trip_and_every_flipped_bit_is_refused() {
        let chunk = Chunk::Bytes { length: 9_000, bytes: (0..300u32).map(|i| (i * 7) as u8).collect() };
        let bytes = chunk.encode();
        assert_eq!(Chunk::decode(&bytes), Ok(chunk));
        assert_eq!(Chunk::decode(&Chunk::NotHeld.encode()), Ok(Chunk::NotHeld));
        // A bit flipped in the CRC or the bytes is caught; one in the
        // length is the sender's word (checked against the first chunk's).
        for bit in (1 + 8) * 8..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Chunk::decode(&bad).is_err(), "bit {bit} flipped passed");
        }
    }

    #[test]
    fn manifests_round_trip_and_bad_ones_are_refused() {
        for m in [vec![], vec![(7, 4096)], vec![(3, 1 << 30), (4, 77), (5, 1)]] {
            assert_eq!(decode_manifest(&encode_manifest(&m)), Ok(Some(m)));
        }
        let good = encode_manifest(&[(3, 10), (4, 20)]);
        for bit in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_manifest(&bad).is_err(), "bit {bit} flipped passed");
        }
        // Well formed, but segments that do not follow each other.
        assert!(decode_manifest(&encode_manifest(&[(3, 10), (5, 20)])).is_err());
        for short in [&good[..0], &good[..4], &good[..good.len() - 1]] {
            assert!(decode_manifest(short).is_err());
        }
        // A chunk request is not a manifest request, nor the reverse.
        assert_eq!(Fetch::decode(&[ASK_MANIFEST]), None);
        assert_eq!(decode_manifest(&[NOT_READY]), Ok(None), "a log still opening");
        assert!(decode_manifest(&[NOT_READY, 0]).is_err());
    }

    #[test]
    fn a_source_answers_the_members_once_its_replica_runs_and_a_flipped_bit_is_refused() {
        use raft::prelude::ConfState;
        let members = Membership {
            conf: ConfState { voters: vec![1, 2, 3], learners: vec![4], ..ConfState::default() },
            addresses: [(4, "10.0.0.4:7400".to_string())].into(),
            index: 9,
        };
        let source = Source::<crate::storage::sim_file::SimStore>::default();
        assert_eq!(source.fetch(&[ASK_MEMBERS]), vec![NOT_READY], "no replica yet");
        let served = members.clone();
        source.serve_members(Box::new(move || served.clone()));
        let answer = source.fetch(&[ASK_MEMBERS]);
        assert_eq!(decode_members(&answer), Some(members));
        for bit in 0..answer.len() * 8 {
            let mut bad = answer.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(decode_members(&bad), None, "bit {bit} flipped passed");
        }
        assert_eq!(decode_members(&[NOT_READY]), None);
    }

    #[test]
    fn a_patient_replica_stops_asking_only_on_an_offer_or_every_answer() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let asking = |patient, offered: Option<u64>| Asking {
            started: t0,
            offered_at: offered.map(at),
            patient,
            wait: Duration::from_secs(5),
        };
        // No offer yet (none answered, or some answered empty: another may
        // hold segments): patient, never, however long; else after `wait`.
        assert!(!asking(true, None).settled(false, at(3_600_000)));
        assert!(!asking(false, None).settled(false, at(4_999)));
        assert!(asking(false, None).settled(false, at(5_000)));
        // Every peer answered: at once, empty or not.
        assert!(asking(true, None).settled(true, t0));
        // One offered segments: the others OTHERS_GRACE more.
        for patient in [true, false] {
            assert!(!asking(patient, Some(0)).settled(false, at(499)));
            assert!(asking(patient, Some(0)).settled(false, at(500)));
        }
    }

    #[test]
    fn a_source_without_a_log_is_not_ready_unless_it_holds_nothing() {
        let source = Source::<crate::storage::sim_file::SimStore>::default();
        assert_eq!(decode_manifest(&source.fetch(&[ASK_MANIFEST])), Ok(None));
        assert_eq!(Chunk::decode(&source.fetch(&Fetch { segment: 0, offset: 0, max: 8 }.encode())), Ok(Chunk::NotHeld));
        source.holds_nothing(true);
        assert_eq!(decode_manifest(&source.fetch(&[ASK_MANIFEST])), Ok(Some(vec![])));
        source.holds_nothing(false);
        assert_eq!(decode_manifest(&source.fetch(&[ASK_MANIFEST])), Ok(None));
    }

    #[test]
    fn empty_short_and_unknown_answers_are_refused() {
        for answer in [&[][..], &[HELD, 1, 2, 3], &[HELD; CHUNK_HEAD_BYTES - 1], &[NOT_HELD, 0], &[2]] {
            assert!(Chunk::decode(answer).is_err(), "{answer:?} passed");
        }
    }
}
