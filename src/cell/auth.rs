//! Peers prove they hold the cell's secret before any Raft message crosses
//! their link: a mutual HMAC-SHA256 challenge-response, a sans-I/O core
//! (the three messages and each side's steps) and one async run of it over
//! a stream per side.
//!
//! The dialer sends `Hello` with its id and a fresh nonce; the acceptor
//! answers `Challenge` with its id, its own nonce and its proof; the dialer
//! checks that proof and answers `Proof` with its own. A proof is
//! HMAC-SHA256(secret, label || dialer id || acceptor id || nonce_d ||
//! nonce_a), ids as 8 bytes little-endian, with a label per side, so that
//! the acceptor's proof sent back is not the dialer's. Both nonces are
//! fresh for every handshake, so a recorded proof does not replay. This
//! authenticates the peers; it neither encrypts the link nor signs what
//! follows (the cell's network is trusted not to rewrite its traffic).
//!
//! Every message is fixed-size and starts with `RSC1` (the magic and the
//! version) and a kind byte:
//!
//! | message | bytes | layout |
//! |---|---|---|
//! | `Hello` | 45 | `RSC1`, 1, dialer id (u64 LE), nonce_d (32) |
//! | `Challenge` | 77 | `RSC1`, 2, acceptor id (u64 LE), nonce_a (32), proof_a (32) |
//! | `Proof` | 37 | `RSC1`, 3, proof_d (32) |

use super::config::Secret;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The first bytes of every handshake message: the magic and its version.
pub const MAGIC: [u8; 4] = *b"RSC1";
const HEAD: usize = MAGIC.len() + 1;
const ACCEPTOR_LABEL: &[u8] = b"ringstream cell acceptor";
const DIALER_LABEL: &[u8] = b"ringstream cell dialer";

/// A nonce or a proof: 32 bytes.
pub type Bytes32 = [u8; 32];

/// Why a handshake failed; each message fits a log line.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Not `RSC1`: another protocol or another version.
    #[error("peer link: not a ringstream cell handshake (starts {got:02x?}, expected \"RSC1\")")]
    BadMagic {
        /// The first four bytes received.
        got: [u8; 4],
    },
    /// A message of another kind than the step expects.
    #[error("peer link: expected a {expected} message, got kind {got}")]
    WrongKind {
        /// The message the step expects.
        expected: &'static str,
        /// The kind byte received.
        got: u8,
    },
    /// A message of the wrong size.
    #[error("peer link: a {what} message has {expected} bytes, got {got}")]
    BadLength {
        /// The message.
        what: &'static str,
        /// Its size.
        expected: usize,
        /// The size received.
        got: usize,
    },
    /// The peer's proof does not verify: it does not hold the secret.
    #[error("peer {peer} failed authentication: bad proof")]
    BadProof {
        /// The id the peer claims.
        peer: u64,
    },
    /// A dialer whose id is not one of the cell's voters.
    #[error("peer {peer} failed authentication: not a voter of this cell (voters {voters:?})")]
    NotAVoter {
        /// The id the dialer claims.
        peer: u64,
        /// The cell's voters.
        voters: Vec<u64>,
    },
    /// A dialer claiming this node's own id.
    #[error("peer {peer} failed authentication: it claims this node's own id")]
    OwnId {
        /// The id (this node's).
        peer: u64,
    },
    /// The dialled address answered as another node.
    #[error("peer {got} failed authentication: dialled node {expected}")]
    WrongPeer {
        /// The node dialled.
        expected: u64,
        /// The id that answered.
        got: u64,
    },
    /// The stream failed or closed mid-handshake.
    #[error("peer link: {0}")]
    Io(#[from] std::io::Error),
    /// No nonce could be drawn.
    #[error("peer link: no random nonce: {0}")]
    Random(getrandom::Error),
}

/// The dialer's first message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The dialer's id.
    pub node_id: u64,
    /// The dialer's fresh nonce.
    pub nonce_d: Bytes32,
}

/// The acceptor's answer to `Hello`, its proof included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge {
    /// The acceptor's id.
    pub node_id: u64,
    /// The acceptor's fresh nonce.
    pub nonce_a: Bytes32,
    /// HMAC under the acceptor's label.
    pub proof_a: Bytes32,
}

/// The dialer's last message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof {
    /// HMAC under the dialer's label.
    pub proof_d: Bytes32,
}

impl Hello {
    /// Its size on the wire.
    pub const LEN: usize = HEAD + 8 + 32;
    const KIND: u8 = 1;

    /// Its bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        put_head(&mut out, Self::KIND);
        out[HEAD..HEAD + 8].copy_from_slice(&self.node_id.to_le_bytes());
        out[HEAD + 8..].copy_from_slice(&self.nonce_d);
        out
    }

    /// The message in `buf`, which must be exactly it.
    pub fn decode(buf: &[u8]) -> Result<Hello, AuthError> {
        let body = check("Hello", buf, Self::KIND, Self::LEN)?;
        Ok(Hello { node_id: u64_at(body, 0), nonce_d: bytes32_at(body, 8) })
    }
}

impl Challenge {
    /// Its size on the wire.
    pub const LEN: usize = HEAD + 8 + 32 + 32;
    const KIND: u8 = 2;

    /// Its bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        put_head(&mut out, Self::KIND);
        out[HEAD..HEAD + 8].copy_from_slice(&self.node_id.to_le_bytes());
        out[HEAD + 8..HEAD + 40].copy_from_slice(&self.nonce_a);
        out[HEAD + 40..].copy_from_slice(&self.proof_a);
        out
    }

    /// The message in `buf`, which must be exactly it.
    pub fn decode(buf: &[u8]) -> Result<Challenge, AuthError> {
        let body = check("Challenge", buf, Self::KIND, Self::LEN)?;
        Ok(Challenge { node_id: u64_at(body, 0), nonce_a: bytes32_at(body, 8), proof_a: bytes32_at(body, 40) })
    }
}

impl Proof {
    /// Its size on the wire.
    pub const LEN: usize = HEAD + 32;
    const KIND: u8 = 3;

    /// Its bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        put_head(&mut out, Self::KIND);
        out[HEAD..].copy_from_slice(&self.proof_d);
        out
    }

    /// The message in `buf`, which must be exactly it.
    pub fn decode(buf: &[u8]) -> Result<Proof, AuthError> {
        let body = check("Proof", buf, Self::KIND, Self::LEN)?;
        Ok(Proof { proof_d: bytes32_at(body, 0) })
    }
}

fn put_head(out: &mut [u8], kind: u8) {
    out[..MAGIC.len()].copy_from_slice(&MAGIC);
    out[MAGIC.len()] = kind;
}

/// The head checked (magic, then kind), then the length; the body after it.
fn check<'a>(what: &'static str, buf: &'a [u8], kind: u8, len: usize) -> Result<&'a [u8], AuthError> {
    check_head(what, buf, kind)?;
    if buf.len() != len {
        return Err(AuthError::BadLength { what, expected: len, got: buf.len() });
    }
    Ok(&buf[HEAD..])
}

/// The magic and the kind of `buf`'s first HEAD bytes (all of them needed).
fn check_head(what: &'static str, buf: &[u8], kind: u8) -> Result<(), AuthError> {
    let Some(head) = buf.get(..HEAD) else {
        return Err(AuthError::BadLength { what, expected: HEAD, got: buf.len() });
    };
    if head[..MAGIC.len()] != MAGIC {
        return Err(AuthError::BadMagic { got: head[..MAGIC.len()].try_into().expect("4 bytes") });
    }
    if head[MAGIC.len()] != kind {
        return Err(AuthError::WrongKind { expected: what, got: head[MAGIC.len()] });
    }
    Ok(())
}

fn u64_at(body: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"))
}

fn bytes32_at(body: &[u8], at: usize) -> Bytes32 {
    body[at..at + 32].try_into().expect("32 bytes")
}

/// What both proofs of one handshake cover: who dials whom, and both nonces.
#[derive(Debug, Clone, Copy)]
struct Transcript {
    dialer: u64,
    acceptor: u64,
    nonce_d: Bytes32,
    nonce_a: Bytes32,
}

impl Transcript {
    fn mac(&self, key: &[u8], label: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(label);
        mac.update(&self.dialer.to_le_bytes());
        mac.update(&self.acceptor.to_le_bytes());
        mac.update(&self.nonce_d);
        mac.update(&self.nonce_a);
        mac
    }

    /// With this node's own key.
    fn prove(&self, secret: &Secret, label: &[u8]) -> Bytes32 {
        self.mac(secret.as_bytes(), label).finalize().into_bytes().into()
    }

    /// With any key `secret` accepts (its own, and during a rotation one
    /// more); each in constant time: the comparison tells nothing of how
    /// close a forged proof came.
    fn verify(&self, secret: &Secret, label: &[u8], proof: &Bytes32) -> bool {
        secret.accepted().any(|key| self.mac(key, label).verify_slice(proof).is_ok())
    }
}

/// The dialer between its `Hello` and the acceptor's `Challenge`.
#[derive(Debug)]
pub struct Dialer {
    me: u64,
    expect: u64,
    nonce_d: Bytes32,
}

impl Dialer {
    /// Node `me` dials node `expect`: the `Hello` to send, with `nonce_d`
    /// (fresh and random for every handshake).
    pub fn start(me: u64, expect: u64, nonce_d: Bytes32) -> (Dialer, Hello) {
        (Dialer { me, expect, nonce_d }, Hello { node_id: me, nonce_d })
    }

    /// The acceptor's `Challenge` checked (it is the node dialled and it
    /// holds the secret): the `Proof` to send.
    pub fn on_challenge(self, challenge: &Challenge, secret: &Secret) -> Result<Proof, AuthError> {
        if challenge.node_id != self.expect {
            return Err(AuthError::WrongPeer { expected: self.expect, got: challenge.node_id });
        }
        let t =
            Transcript { dialer: self.me, acceptor: self.expect, nonce_d: self.nonce_d, nonce_a: challenge.nonce_a };
        if !t.verify(secret, ACCEPTOR_LABEL, &challenge.proof_a) {
            return Err(AuthError::BadProof { peer: self.expect });
        }
        Ok(Proof { proof_d: t.prove(secret, DIALER_LABEL) })
    }
}

/// The acceptor between its `Challenge` and the dialer's `Proof`.
#[derive(Debug)]
pub struct Acceptor {
    transcript: Transcript,
}

impl Acceptor {
    /// Node `me`, one of `voters`, got `hello`: the `Challenge` to send,
    /// with `nonce_a` (fresh and random for every handshake), when the
    /// dialer claims to be another voter.
    pub fn on_hello(
        me: u64,
        voters: &[u64],
        hello: &Hello,
        nonce_a: Bytes32,
        secret: &Secret,
    ) -> Result<(Acceptor, Challenge), AuthError> {
        let peer = hello.node_id;
        if peer == me {
            return Err(AuthError::OwnId { peer });
        }
        if !voters.contains(&peer) {
            return Err(AuthError::NotAVoter { peer, voters: voters.to_vec() });
        }
        let transcript = Transcript { dialer: peer, acceptor: me, nonce_d: hello.nonce_d, nonce_a };
        let proof_a = transcript.prove(secret, ACCEPTOR_LABEL);
        Ok((Acceptor { transcript }, Challenge { node_id: me, nonce_a, proof_a }))
    }

    /// The dialer's `Proof` checked: the dialer's id, now authenticated.
    pub fn on_proof(self, proof: &Proof, secret: &Secret) -> Result<u64, AuthError> {
        let peer = self.transcript.dialer;
        if !self.transcript.verify(secret, DIALER_LABEL, &proof.proof_d) {
            return Err(AuthError::BadProof { peer });
        }
        Ok(peer)
    }
}

fn nonce() -> Result<Bytes32, AuthError> {
    let mut nonce = [0; 32];
    getrandom::fill(&mut nonce).map_err(AuthError::Random)?;
    Ok(nonce)
}

/// Reads one message of `N` bytes: its head first, so that a peer speaking
/// something else fails at once rather than when N bytes have come.
async fn read_message<S: AsyncRead + Unpin, const N: usize>(
    io: &mut S,
    what: &'static str,
    kind: u8,
) -> Result<[u8; N], AuthError> {
    let mut buf = [0; N];
    io.read_exact(&mut buf[..HEAD]).await?;
    check_head(what, &buf, kind)?;
    io.read_exact(&mut buf[HEAD..]).await?;
    Ok(buf)
}

async fn send<S: AsyncWrite + Unpin>(io: &mut S, bytes: &[u8]) -> Result<(), AuthError> {
    io.write_all(bytes).await?;
    io.flush().await?;
    Ok(())
}

/// Node `me` authenticates the link it dialled to node `expect`, and
/// proves itself to it. Reads are exact-size: a peer that sends something
/// else fails it, one that closes fails it, and one that stalls holds it
/// until the caller's deadline, which the caller must set (a timeout
/// around this future).
pub async fn dial_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    me: u64,
    expect: u64,
    secret: &Secret,
) -> Result<(), AuthError> {
    let (dialer, hello) = Dialer::start(me, expect, nonce()?);
    send(io, &hello.encode()).await?;
    let challenge = read_message::<_, { Challenge::LEN }>(io, "Challenge", Challenge::KIND).await?;
    let proof = dialer.on_challenge(&Challenge::decode(&challenge)?, secret)?;
    send(io, &proof.encode()).await
}

/// Node `me` authenticates a link a peer dialled: the peer's id, one of
/// `voters` and not `me`, once it proved it holds the secret. The same
/// exact-size reads as `dial_handshake`, so the caller sets the deadline.
pub async fn accept_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    me: u64,
    voters: &[u64],
    secret: &Secret,
) -> Result<u64, AuthError> {
    let hello = read_message::<_, { Hello::LEN }>(io, "Hello", Hello::KIND).await?;
    let (acceptor, challenge) = Acceptor::on_hello(me, voters, &Hello::decode(&hello)?, nonce()?, secret)?;
    send(io, &challenge.encode()).await?;
    let proof = read_message::<_, { Proof::LEN }>(io, "Proof", Proof::KIND).await?;
    acceptor.on_proof(&Proof::decode(&proof)?, secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(fill: u8) -> Secret {
        Secret::new(vec![fill; 32]).unwrap()
    }

    const VOTERS: [u64; 3] = [1, 2, 3];

    /// Node 1 dials node 2: the dialer's state, the acceptor's, the challenge.
    fn up_to_challenge(acceptor_secret: &Secret) -> (Dialer, Acceptor, Challenge) {
        let (dialer, hello) = Dialer::start(1, 2, [7; 32]);
        let hello = Hello::decode(&hello.encode()).unwrap();
        let (acceptor, challenge) = Acceptor::on_hello(2, &VOTERS, &hello, [9; 32], acceptor_secret).unwrap();
        (dialer, acceptor, Challenge::decode(&challenge.encode()).unwrap())
    }

    #[test]
    fn both_sides_agree_with_the_same_secret() {
        let s = secret(1);
        let (dialer, acceptor, challenge) = up_to_challenge(&s);
        let proof = dialer.on_challenge(&challenge, &s).unwrap();
        assert_eq!(acceptor.on_proof(&Proof::decode(&proof.encode()).unwrap(), &s).unwrap(), 1);
        assert_ne!(proof.proof_d, challenge.proof_a);
    }

    #[test]
    fn a_wrong_secret_fails_on_each_side() {
        let (good, bad) = (secret(1), secret(2));
        // The dialer holds another secret: it refuses the acceptor's proof.
        let (dialer, _, challenge) = up_to_challenge(&good);
        let err = dialer.on_challenge(&challenge, &bad).unwrap_err();
        assert!(matches!(err, AuthError::BadProof { peer: 2 }), "{err}");
        assert_eq!(err.to_string(), "peer 2 failed authentication: bad proof");
        // A dialer that skips the check still cannot prove itself.
        let (_, acceptor, challenge) = up_to_challenge(&good);
        let t = Transcript { dialer: 1, acceptor: 2, nonce_d: [7; 32], nonce_a: challenge.nonce_a };
        let forged = Proof { proof_d: t.prove(&bad, DIALER_LABEL) };
        let err = acceptor.on_proof(&forged, &good).unwrap_err();
        assert!(matches!(err, AuthError::BadProof { peer: 1 }), "{err}");
    }

    /// Whether node 1, holding `dialer`, and node 2, holding `acceptor`,
    /// authenticate each other.
    fn agree(dialer: &Secret, acceptor: &Secret) -> bool {
        let (d, a, challenge) = up_to_challenge(acceptor);
        d.on_challenge(&challenge, dialer).and_then(|proof| a.on_proof(&proof, acceptor)).is_ok()
    }

    /// A rotation from `old` to `new` in three steps, each node restarted
    /// in turn (`cell::config::read_secret`): accept `new` too; prove with
    /// `new`, accept `old` too; `new` alone. Any two nodes one step apart
    /// authenticate each other, in both directions; two steps apart do not.
    #[test]
    fn a_rotation_keeps_every_pair_one_step_apart_together() {
        let (old, new) = (secret(1), secret(2));
        let steps = [
            old.clone(),
            old.clone().also_accepting(new.clone()),
            new.clone().also_accepting(old.clone()),
            new.clone(),
        ];
        for (i, a) in steps.iter().enumerate() {
            for (j, b) in steps.iter().enumerate() {
                let expected = i.abs_diff(j) <= 1;
                assert_eq!(agree(a, b), expected, "step {i} dialling step {j}");
            }
        }
        assert!(!agree(&old, &new) && !agree(&new, &old), "old and new alone do not agree");
    }

    #[test]
    fn a_reflected_proof_fails() {
        let s = secret(1);
        let (_, acceptor, challenge) = up_to_challenge(&s);
        let err = acceptor.on_proof(&Proof { proof_d: challenge.proof_a }, &s).unwrap_err();
        assert!(matches!(err, AuthError::BadProof { peer: 1 }), "{err}");
    }

    #[test]
    fn a_tampered_nonce_or_proof_fails() {
        let s = secret(1);
        let (dialer, _, mut challenge) = up_to_challenge(&s);
        challenge.nonce_a[31] ^= 1;
        assert!(matches!(dialer.on_challenge(&challenge, &s), Err(AuthError::BadProof { .. })));
        // The acceptor answering a Hello whose nonce changed on the way.
        let (dialer, mut hello) = Dialer::start(1, 2, [7; 32]);
        hello.nonce_d[0] ^= 0x80;
        let (_, challenge) = Acceptor::on_hello(2, &VOTERS, &hello, [9; 32], &s).unwrap();
        assert!(matches!(dialer.on_challenge(&challenge, &s), Err(AuthError::BadProof { .. })));
        let (dialer, acceptor, challenge) = up_to_challenge(&s);
        let mut proof = dialer.on_challenge(&challenge, &s).unwrap();
        proof.proof_d[5] ^= 4;
        assert!(matches!(acceptor.on_proof(&proof, &s), Err(AuthError::BadProof { .. })));
    }

    #[test]
    fn ids_are_checked_on_both_sides() {
        let s = secret(1);
        for (claimed, ok) in [(4, false), (0, false), (2, false), (3, true)] {
            let hello = Hello { node_id: claimed, nonce_d: [1; 32] };
            let result = Acceptor::on_hello(2, &VOTERS, &hello, [2; 32], &s);
            assert_eq!(result.is_ok(), ok, "{claimed}");
        }
        let hello = Hello { node_id: 4, nonce_d: [1; 32] };
        let err = Acceptor::on_hello(2, &VOTERS, &hello, [2; 32], &s).unwrap_err();
        assert!(matches!(err, AuthError::NotAVoter { peer: 4, .. }), "{err}");
        assert!(err.to_string().contains("peer 4") && err.to_string().contains("[1, 2, 3]"), "{err}");
        let own = Hello { node_id: 2, ..hello };
        assert!(matches!(Acceptor::on_hello(2, &VOTERS, &own, [2; 32], &s), Err(AuthError::OwnId { peer: 2 })));
        // Node 1 dialled 2 and node 3 answered, with a good proof for itself.
        let (dialer, hello) = Dialer::start(1, 2, [7; 32]);
        let (_, challenge) = Acceptor::on_hello(3, &VOTERS, &hello, [9; 32], &s).unwrap();
        let err = dialer.on_challenge(&challenge, &s).unwrap_err();
        assert!(matches!(err, AuthError::WrongPeer { expected: 2, got: 3 }), "{err}");
    }

    #[test]
    fn messages_round_trip_and_bad_bytes_are_refused() {
        let hello = Hello { node_id: 0x0102_0304_0506_0708, nonce_d: [3; 32] };
        let bytes = hello.encode();
        assert_eq!(&bytes[..5], b"RSC1\x01");
        assert_eq!(bytes[5], 0x08, "little-endian id");
        assert_eq!(Hello::decode(&bytes).unwrap(), hello);
        let challenge = Challenge { node_id: 9, nonce_a: [4; 32], proof_a: [5; 32] };
        assert_eq!(Challenge::decode(&challenge.encode()).unwrap(), challenge);
        assert_eq!(Proof::decode(&Proof { proof_d: [6; 32] }.encode()).unwrap().proof_d, [6; 32]);
        let mut wrong_magic = bytes;
        wrong_magic[3] = b'2';
        assert!(matches!(Hello::decode(&wrong_magic), Err(AuthError::BadMagic { got }) if &got == b"RSC2"));
        assert!(matches!(Hello::decode(b"GET / HTTP/1.1\r\n"), Err(AuthError::BadMagic { .. })));
        assert!(matches!(Hello::decode(&bytes[..44]), Err(AuthError::BadLength { expected: 45, got: 44, .. })));
        assert!(matches!(Hello::decode(&[&bytes[..], &[0u8][..]].concat()), Err(AuthError::BadLength { .. })));
        assert!(matches!(Hello::decode(b"RSC"), Err(AuthError::BadLength { .. })));
        assert!(matches!(Challenge::decode(&bytes), Err(AuthError::WrongKind { got: 1, .. })));
        assert!(matches!(Proof::decode(&challenge.encode()), Err(AuthError::WrongKind { got: 2, .. })));
    }

    #[test]
    fn the_handshake_runs_over_a_stream() {
        // A scripted peer: the acceptor's side driven over in-memory bytes.
        let s = secret(1);
        let (dialer, hello) = Dialer::start(1, 2, [7; 32]);
        let (acceptor, challenge) = Acceptor::on_hello(2, &VOTERS, &hello, [9; 32], &s).unwrap();
        let proof = dialer.on_challenge(&challenge, &s).unwrap();
        let mut script = futures_lite::io::Cursor::new([hello.encode().as_slice(), &proof.encode()].concat());
        let head = futures::executor::block_on(read_message::<_, { Hello::LEN }>(&mut script, "Hello", 1)).unwrap();
        assert_eq!(Hello::decode(&head).unwrap(), hello);
        let rest = futures::executor::block_on(read_message::<_, { Proof::LEN }>(&mut script, "Proof", 3)).unwrap();
        assert_eq!(acceptor.on_proof(&Proof::decode(&rest).unwrap(), &s).unwrap(), 1);
        let mut garbage = futures_lite::io::Cursor::new(b"0123456789".to_vec());
        let err = futures::executor::block_on(accept_handshake(&mut garbage, 2, &VOTERS, &s)).unwrap_err();
        assert!(matches!(err, AuthError::BadMagic { .. }), "{err}");
        let mut short = futures_lite::io::Cursor::new(b"RSC1\x01abc".to_vec());
        let err = futures::executor::block_on(accept_handshake(&mut short, 2, &VOTERS, &s)).unwrap_err();
        assert!(matches!(err, AuthError::Io(ref e) if e.kind() == std::io::ErrorKind::UnexpectedEof), "{err}");
    }
}
