//! The peer handshake (src/cell/auth.rs) and the link's frames
//! (src/cell/wire.rs) over real sockets: glommio TCP on 127.0.0.1.

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use glommio::{LocalExecutorBuilder, Placement};
use ringstream::cell::auth::{accept_handshake, dial_handshake, AuthError};
use ringstream::cell::config::Secret;
use ringstream::cell::wire::{self, Frame};
use std::future::Future;
use std::io::ErrorKind;
use std::time::Duration;

const VOTERS: [u64; 3] = [1, 2, 3];
/// Far beyond what a handshake on loopback takes: reaching it is a hang.
const DEADLINE: Duration = Duration::from_secs(5);

fn on_executor<G, F>(test: G)
where
    G: FnOnce() -> F + Send + 'static,
    F: Future<Output = ()> + 'static,
{
    LocalExecutorBuilder::new(Placement::Unbound).spawn(test).unwrap().join().unwrap();
}

fn secret(fill: u8) -> Secret {
    Secret::new(vec![fill; 32]).unwrap()
}

/// A connected pair: the dialer's end, the acceptor's end.
async fn link() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = glommio::spawn_local(async move { listener.accept().await.unwrap() });
    let dialer = TcpStream::connect(addr).await.unwrap();
    (dialer, accepting.await)
}

/// Node `me` dials node 2 on its own task, which closes its end when done
/// (as a real dialer drops a link that failed).
fn dial(mut io: TcpStream, me: u64, secret: Secret) -> glommio::task::JoinHandle<Result<(), AuthError>> {
    glommio::spawn_local(async move {
        let result = dial_handshake(&mut io, me, 2, &secret).await;
        drop(io);
        result
    })
    .detach()
}

/// Node 2 accepts, within DEADLINE (missing it fails the test).
async fn accept(io: &mut TcpStream, secret: &Secret) -> Result<u64, AuthError> {
    let bounded = glommio::timer::timeout(DEADLINE, async { Ok(accept_handshake(io, 2, &VOTERS, secret).await) });
    bounded.await.expect("accept_handshake hung past its deadline")
}

async fn read_frame(io: &mut TcpStream) -> Frame {
    let mut buf = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        if let Some((frame, used)) = wire::decode(&buf).unwrap() {
            assert_eq!(used, buf.len());
            return frame;
        }
        let n = io.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the link closed mid-frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn raft_frame() -> Frame {
    let mut message = raft::eraftpb::Message { to: 2, from: 1, term: 3, index: 9, commit: 8, ..Default::default() };
    message.set_msg_type(raft::eraftpb::MessageType::MsgAppend);
    let entry = raft::eraftpb::Entry { term: 3, index: 10, data: vec![0xab; 10_000], ..Default::default() };
    message.entries = vec![entry];
    Frame::Raft { group: 4, message }
}

#[test]
fn peers_with_the_same_secret_authenticate_then_exchange_a_frame() {
    on_executor(|| async {
        let (mut dialer, mut acceptor) = link().await;
        let s = secret(1);
        let (dialled, accepted) =
            futures_lite::future::zip(dial_handshake(&mut dialer, 1, 2, &s), accept(&mut acceptor, &s)).await;
        dialled.unwrap();
        assert_eq!(accepted.unwrap(), 1);
        let mut bytes = Vec::new();
        wire::encode(&raft_frame(), &mut bytes);
        dialer.write_all(&bytes).await.unwrap();
        assert_eq!(read_frame(&mut acceptor).await, raft_frame());
    });
}

#[test]
fn peers_with_different_secrets_both_fail() {
    on_executor(|| async {
        let (dialer, mut acceptor) = link().await;
        let dialing = dial(dialer, 1, secret(1));
        let accepted = accept(&mut acceptor, &secret(2)).await;
        let dialled = dialing.await.unwrap();
        assert!(matches!(dialled, Err(AuthError::BadProof { peer: 2 })), "{dialled:?}");
        // The dialer refused the acceptor's proof and closed: no Proof came.
        assert!(matches!(accepted, Err(AuthError::Io(_))), "{accepted:?}");
    });
}

#[test]
fn garbage_then_close_fails_the_acceptor_at_once() {
    on_executor(|| async {
        // Not the magic; then the right head but a message cut short.
        for garbage in [&b"0123456789"[..], b"RSC1\x01\x01\x00\x00\x00\x00"] {
            let (mut client, mut acceptor) = link().await;
            client.write_all(garbage).await.unwrap();
            drop(client);
            let accepted = accept(&mut acceptor, &secret(1)).await;
            let as_expected = match &accepted {
                Err(AuthError::BadMagic { got }) => got == b"0123",
                Err(AuthError::Io(e)) => garbage.starts_with(b"RSC1") && e.kind() == ErrorKind::UnexpectedEof,
                _ => false,
            };
            assert!(as_expected, "{garbage:?}: {accepted:?}");
        }
    });
}

#[test]
fn a_dialer_that_is_not_a_voter_is_refused() {
    on_executor(|| async {
        let (dialer, mut acceptor) = link().await;
        let s = secret(1);
        let dialing = dial(dialer, 9, s.clone());
        let accepted = accept(&mut acceptor, &s).await;
        assert!(matches!(accepted, Err(AuthError::NotAVoter { peer: 9, .. })), "{accepted:?}");
        drop(acceptor);
        let dialled = dialing.await.unwrap();
        assert!(matches!(dialled, Err(AuthError::Io(_))), "{dialled:?}");
    });
}
