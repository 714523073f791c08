//! The frames of a peer link, once both ends are authenticated
//! (`cell::auth`): encoded into a buffer, decoded from whatever bytes have
//! arrived, with the length bounded before anything is allocated and every
//! malformed frame a typed error, never a panic.
//!
//! A frame is `length (u32 LE) | kind (u8) | body`, the length counting the
//! kind and the body (at most CELL_FRAME_BYTES_MAX). Kinds:
//!
//! | kind | frame | body |
//! |---|---|---|
//! | 1 | `Raft` | group (u32 LE), then a `raft::eraftpb::Message`, prost-encoded |
//! | 2 | `Forward` | group (u32 LE), id (u64 LE), a forwarded request (opaque) |
//! | 3 | `Answer` | group (u32 LE), id (u64 LE), the answer to a `Forward` or a `Fetch` of that id |
//! | 4 | `Fetch` | group (u32 LE), id (u64 LE), a request for part of a sealed segment (`cell::ship`) |

use crate::limits::CELL_FRAME_BYTES_MAX;
use prost::Message as _;
use raft::eraftpb::{EntryType, Message, MessageType};

const LEN_BYTES: usize = 4;
const KIND_RAFT: u8 = 1;
const KIND_FORWARD: u8 = 2;
const KIND_ANSWER: u8 = 3;
const KIND_FETCH: u8 = 4;
const GROUP_BYTES: usize = 4;
const ID_BYTES: usize = 8;

/// One frame of a peer link. More kinds will come (snapshots, a link's
/// keep-alive); a match on it keeps a wildcard arm.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
// A frame lives only from the wire to its handler, moved once: boxing the
// Raft message would cost an allocation for every message instead.
#[allow(clippy::large_enum_variant)]
pub enum Frame {
    /// A Raft message for group `group` (the shard of that index).
    Raft {
        /// The Raft group: the shard's index.
        group: u32,
        /// The message, from the sender's replica of the group to ours.
        message: Message,
    },
    /// A request a replica that does not lead hands to its group's leader
    /// (`shard::forward` encodes it; the link only carries it).
    Forward {
        group: u32,
        /// Unique among the sender's forwards in flight; the answer names it.
        id: u64,
        body: Vec<u8>,
    },
    /// The answer to the `Forward` or the `Fetch` of that `id`.
    Answer { group: u32, id: u64, body: Vec<u8> },
    /// A request for bytes of a sealed segment file (segment shipping,
    /// `cell::ship` encodes it); answered by an `Answer` of the same id.
    Fetch { group: u32, id: u64, body: Vec<u8> },
}

impl Frame {
    /// The group the frame is for.
    pub fn group(&self) -> u32 {
        match self {
            Frame::Raft { group, .. }
            | Frame::Forward { group, .. }
            | Frame::Answer { group, .. }
            | Frame::Fetch { group, .. } => *group,
        }
    }
}

/// Why bytes received on a peer link are not a frame. The link cannot
/// resynchronise after any of them: the caller closes it.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A length over the bound.
    #[error("peer frame of {len} bytes, over the bound of {CELL_FRAME_BYTES_MAX}")]
    TooLong {
        /// The length the prefix gives.
        len: u32,
    },
    /// A length of 0: not even a kind.
    #[error("peer frame of length 0 (no kind)")]
    Empty,
    /// A kind this build does not know.
    #[error("peer frame of unknown kind {kind}")]
    UnknownKind {
        /// The kind byte.
        kind: u8,
    },
    /// A body shorter than its kind's fixed fields.
    #[error("peer frame of kind {kind}: a body of {len} bytes is too short")]
    Truncated {
        /// The kind byte.
        kind: u8,
        /// The body's length.
        len: usize,
    },
    /// A Raft message prost cannot decode.
    #[error("peer frame: the Raft message for group {group} does not decode: {source}")]
    BadMessage {
        /// The group the frame names.
        group: u32,
        /// What prost says.
        source: prost::DecodeError,
    },
}

/// Appends `frame`'s bytes to `out`. A frame over CELL_FRAME_BYTES_MAX is
/// refused by the receiver: the sender keeps entries within
/// CELL_ENTRY_BYTES_MAX (`Group::propose`) and raft-rs's `max_size_per_msg`
/// keeps a message's further entries small, and the link drops a frame
/// that is over anyway.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) {
    match frame {
        Frame::Raft { group, message } => {
            let len = 1 + GROUP_BYTES + message.encoded_len();
            out.reserve(LEN_BYTES + len);
            out.extend_from_slice(&(len as u32).to_le_bytes());
            out.push(KIND_RAFT);
            out.extend_from_slice(&group.to_le_bytes());
            message.encode(out).expect("a Vec has room for any message");
        }
        Frame::Forward { group, id, body } => encode_opaque(KIND_FORWARD, *group, *id, body, out),
        Frame::Answer { group, id, body } => encode_opaque(KIND_ANSWER, *group, *id, body, out),
        Frame::Fetch { group, id, body } => encode_opaque(KIND_FETCH, *group, *id, body, out),
    }
}

fn encode_opaque(kind: u8, group: u32, id: u64, body: &[u8], out: &mut Vec<u8>) {
    let len = 1 + GROUP_BYTES + ID_BYTES + body.len();
    out.reserve(LEN_BYTES + len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&group.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(body);
}

/// The first frame in `buf` and the bytes it took, or `None` when more
/// bytes are needed to tell. A length over the bound or an unknown kind
/// fails as soon as its bytes are in, before the rest of the frame comes.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
    let Some(prefix) = buf.get(..LEN_BYTES) else { return Ok(None) };
    let len = u32::from_le_bytes(prefix.try_into().expect("4 bytes"));
    if len as usize > CELL_FRAME_BYTES_MAX {
        return Err(WireError::TooLong { len });
    }
    if len == 0 {
        return Err(WireError::Empty);
    }
    let Some(&kind) = buf.get(LEN_BYTES) else { return Ok(None) };
    if !matches!(kind, KIND_RAFT | KIND_FORWARD | KIND_ANSWER | KIND_FETCH) {
        return Err(WireError::UnknownKind { kind });
    }
    let end = LEN_BYTES + len as usize;
    let Some(body) = buf.get(LEN_BYTES + 1..end) else { return Ok(None) };
    let frame = match kind {
        KIND_RAFT => decode_raft(body)?,
        _ => decode_opaque(kind, body)?,
    };
    Ok(Some((frame, end)))
}

fn decode_opaque(kind: u8, body: &[u8]) -> Result<Frame, WireError> {
    let truncated = || WireError::Truncated { kind, len: body.len() };
    let (group, rest) = body.split_first_chunk::<GROUP_BYTES>().ok_or_else(truncated)?;
    let (id, rest) = rest.split_first_chunk::<ID_BYTES>().ok_or_else(truncated)?;
    let (group, id, body) = (u32::from_le_bytes(*group), u64::from_le_bytes(*id), rest.to_vec());
    Ok(match kind {
        KIND_FORWARD => Frame::Forward { group, id, body },
        KIND_FETCH => Frame::Fetch { group, id, body },
        _ => Frame::Answer { group, id, body },
    })
}

fn decode_raft(body: &[u8]) -> Result<Frame, WireError> {
    let Some((group, message)) = body.split_first_chunk::<GROUP_BYTES>() else {
        return Err(WireError::Truncated { kind: KIND_RAFT, len: body.len() });
    };
    let group = u32::from_le_bytes(*group);
    let message = Message::decode(message).map_err(|source| WireError::BadMessage { group, source })?;
    Ok(Frame::Raft { group, message })
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::{Entry, MessageType};

    fn append_message() -> Message {
        let mut m = Message { to: 2, from: 1, term: 7, log_term: 6, index: 41, commit: 40, ..Default::default() };
        m.set_msg_type(MessageType::MsgAppend);
        m.entries = (42..45)
            .map(|i| Entry { term: 7, index: i, data: vec![i as u8; 100 * i as usize], ..Default::default() })
            .collect();
        m
    }

    fn encoded(frame: &Frame) -> Vec<u8> {
        let mut out = Vec::new();
        encode(frame, &mut out);
        out
    }

    #[test]
    fn a_raft_append_round_trips() {
        let frame = Frame::Raft { group: 3, message: append_message() };
        let mut bytes = encoded(&frame);
        assert_eq!(u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize, bytes.len() - 4);
        assert_eq!(&bytes[4..9], &[1, 3, 0, 0, 0]);
        let (decoded, used) = decode(&bytes).unwrap().unwrap();
        assert_eq!((decoded, used), (frame.clone(), bytes.len()));
        // Two frames back to back: the first, then the second from its end.
        let second = Frame::Raft { group: 0x0102_0304, message: Message::default() };
        encode(&second, &mut bytes);
        let (first, used) = decode(&bytes).unwrap().unwrap();
        assert_eq!(first, frame);
        let (next, rest) = decode(&bytes[used..]).unwrap().unwrap();
        assert_eq!((next, used + rest), (second, bytes.len()));
    }

    #[test]
    fn every_prefix_of_a_frame_needs_more_bytes() {
        let bytes = encoded(&Frame::Raft { group: 1, message: append_message() });
        for split in 0..bytes.len() {
            assert!(decode(&bytes[..split]).unwrap().is_none(), "split at {split}");
        }
        assert!(decode(&bytes).unwrap().is_some());
    }

    #[test]
    fn an_oversize_length_fails_before_its_bytes_come() {
        let over = (CELL_FRAME_BYTES_MAX as u32 + 1).to_le_bytes();
        assert!(matches!(decode(&over), Err(WireError::TooLong { .. })));
        assert!(matches!(decode(&u32::MAX.to_le_bytes()), Err(WireError::TooLong { len: u32::MAX })));
        // At the bound: waits for the rest.
        let at = [&(CELL_FRAME_BYTES_MAX as u32).to_le_bytes()[..], &[KIND_RAFT, 0, 0, 0, 0]].concat();
        assert!(decode(&at).unwrap().is_none());
        assert!(matches!(decode(&0u32.to_le_bytes()), Err(WireError::Empty)));
    }

    #[test]
    fn unknown_kinds_short_bodies_and_corrupt_messages_fail() {
        for kind in [0, 5, 255] {
            assert!(matches!(decode(&[9, 0, 0, 0, kind]), Err(WireError::UnknownKind { kind: k }) if k == kind));
        }
        for body_len in 0..GROUP_BYTES {
            let mut bytes = (1 + body_len as u32).to_le_bytes().to_vec();
            bytes.push(KIND_RAFT);
            bytes.extend(std::iter::repeat_n(7, body_len));
            let err = decode(&bytes).unwrap_err();
            assert!(matches!(err, WireError::Truncated { kind: 1, len } if len == body_len), "{err}");
        }
        let corrupt = [&15u32.to_le_bytes()[..], &[KIND_RAFT, 5, 0, 0, 0], &[0xff; 10]].concat();
        let err = decode(&corrupt).unwrap_err();
        assert!(matches!(err, WireError::BadMessage { group: 5, .. }), "{err}");
        // A good message cut short inside the frame: prost sees the gap.
        let good = encoded(&Frame::Raft { group: 5, message: append_message() });
        let mut cut = good[..good.len() - 50].to_vec();
        let len = cut.len() as u32 - 4;
        cut[..4].copy_from_slice(&len.to_le_bytes());
        assert!(matches!(decode(&cut), Err(WireError::BadMessage { .. })));
    }

    #[test]
    fn forwards_fetches_and_answers_round_trip_and_short_heads_fail() {
        let forward = Frame::Forward { group: 2, id: u64::MAX - 1, body: b"a request".to_vec() };
        let answer = Frame::Answer { group: 2, id: 7, body: Vec::new() };
        let fetch = Frame::Fetch { group: 9, id: 8, body: b"segment 3 from 0".to_vec() };
        let mut bytes = encoded(&forward);
        assert_eq!(bytes[4], KIND_FORWARD);
        encode(&answer, &mut bytes);
        let (first, used) = decode(&bytes).unwrap().unwrap();
        assert_eq!(first, forward);
        assert_eq!(decode(&bytes[used..]).unwrap().unwrap(), (answer.clone(), bytes.len() - used));
        for split in 0..used {
            assert!(decode(&bytes[..split]).unwrap().is_none(), "split at {split}");
        }
        let fetched = encoded(&fetch);
        assert_eq!(fetched[4], KIND_FETCH);
        assert_eq!(decode(&fetched).unwrap().unwrap(), (fetch.clone(), fetched.len()));
        assert_eq!(fetch.group(), 9);
        // A head shorter than group + id, for each kind.
        for kind in [KIND_FORWARD, KIND_ANSWER, KIND_FETCH] {
            for body_len in 0..GROUP_BYTES + ID_BYTES {
                let mut short = (1 + body_len as u32).to_le_bytes().to_vec();
                short.push(kind);
                short.extend(std::iter::repeat_n(1, body_len));
                let err = decode(&short).unwrap_err();
                assert!(matches!(err, WireError::Truncated { kind: k, len } if k == kind && len == body_len), "{err}");
            }
        }
        assert_eq!(answer.group(), 2);
    }

    /// xorshift64*: a seeded stream, so a failure replays.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[test]
    fn random_bytes_never_panic() {
        let good = encoded(&Frame::Raft { group: 2, message: append_message() });
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for round in 0..600 {
            let len = (next(&mut state) % 96) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next(&mut state) as u8).collect();
            match round % 3 {
                // A plausible head over random bytes: prost gets garbage.
                0 if len >= 5 => {
                    bytes[..4].copy_from_slice(&(len as u32 - 4).to_le_bytes());
                    bytes[4] = KIND_RAFT;
                }
                // A good frame with a few bytes changed.
                1 => {
                    bytes = good.clone();
                    for _ in 0..1 + next(&mut state) % 4 {
                        let at = (next(&mut state) as usize) % bytes.len();
                        bytes[at] = next(&mut state) as u8;
                    }
                }
                _ => {}
            }
            if let Ok(Some((_, used))) = decode(&bytes) {
                assert!((5..=bytes.len()).contains(&used), "round {round}: used {used} of {}", bytes.len());
            }
        }
    }
}

/// Whether a Raft message that arrived from authenticated `peer` may be
/// stepped by replica `me`: sent by that peer to this replica, of a type
/// raft-rs sends between replicas (never one it only makes locally, nor a
/// proposal or a snapshot, which no replica here sends), well formed where
/// raft-rs would index into it, and with entries of the types this cell
/// makes: normal, and membership changes (`ConfChangeV2`, which the
/// replica decodes itself when it applies one).
/// raft-rs panics on an unknown enum value, so this runs before `step`.
pub fn admit(peer: u64, me: u64, m: &Message) -> Result<(), String> {
    if m.from != peer || m.to != me {
        return Err(format!("a message from {} to {} on the link from {peer} to {me}", m.from, m.to));
    }
    use MessageType::*;
    let kind = MessageType::from_i32(m.msg_type).ok_or_else(|| format!("unknown message type {}", m.msg_type))?;
    let between_replicas = matches!(
        kind,
        MsgAppend
            | MsgAppendResponse
            | MsgRequestVote
            | MsgRequestVoteResponse
            | MsgRequestPreVote
            | MsgRequestPreVoteResponse
            | MsgHeartbeat
            | MsgHeartbeatResponse
            | MsgTimeoutNow
            | MsgReadIndex
            | MsgReadIndexResp
    );
    if !between_replicas {
        return Err(format!("a {} message", kind.as_str_name()));
    }
    if kind == MsgReadIndex && m.entries.len() != 1 {
        return Err(format!("a read index request with {} entries", m.entries.len()));
    }
    if m.snapshot.as_ref().is_some_and(|s| s.metadata.as_ref().is_some_and(|md| md.index != 0)) {
        return Err("a snapshot".to_string());
    }
    let made_here = [EntryType::EntryNormal as i32, EntryType::EntryConfChangeV2 as i32];
    match m.entries.iter().find(|e| !made_here.contains(&e.entry_type)) {
        Some(e) => Err(format!("an entry of type {}", e.entry_type)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod admit_tests {
    use super::*;
    use raft::eraftpb::Entry;

    fn msg(kind: MessageType, from: u64, to: u64) -> Message {
        let mut m = Message { from, to, ..Default::default() };
        m.set_msg_type(kind);
        m
    }

    #[test]
    fn messages_between_replicas_pass() {
        for kind in [MessageType::MsgAppend, MessageType::MsgHeartbeat, MessageType::MsgRequestPreVote] {
            assert_eq!(admit(2, 1, &msg(kind, 2, 1)), Ok(()));
        }
        let mut read = msg(MessageType::MsgReadIndex, 2, 1);
        read.entries = vec![Entry { data: b"ctx".to_vec(), ..Default::default() }];
        assert_eq!(admit(2, 1, &read), Ok(()));
    }

    #[test]
    fn what_could_crash_or_mislead_a_replica_is_refused() {
        assert!(admit(2, 1, &msg(MessageType::MsgAppend, 3, 1)).is_err(), "another sender");
        assert!(admit(2, 1, &msg(MessageType::MsgAppend, 2, 3)).is_err(), "another recipient");
        for kind in
            [MessageType::MsgPropose, MessageType::MsgSnapshot, MessageType::MsgHup, MessageType::MsgTransferLeader]
        {
            assert!(admit(2, 1, &msg(kind, 2, 1)).is_err(), "{kind:?}");
        }
        let mut unknown = msg(MessageType::MsgAppend, 2, 1);
        unknown.msg_type = 99;
        assert!(admit(2, 1, &unknown).is_err());
        assert!(admit(2, 1, &msg(MessageType::MsgReadIndex, 2, 1)).is_err(), "a read index without its entry");
        let mut conf = msg(MessageType::MsgAppend, 2, 1);
        conf.entries = vec![Entry { entry_type: EntryType::EntryConfChange as i32, ..Default::default() }];
        assert!(admit(2, 1, &conf).is_err(), "the first form of change, which no replica here makes");
        conf.entries[0].entry_type = EntryType::EntryConfChangeV2 as i32;
        assert!(admit(2, 1, &conf).is_ok(), "a membership change");
        conf.entries[0].entry_type = 42;
        assert!(admit(2, 1, &conf).is_err());
    }
}
