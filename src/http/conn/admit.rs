//! Taking connections: a new one from the listener (or a 503 when the
//! shard is full), one another shard moved here, and moving one away at a
//! request boundary (a duplicate of its descriptor and its unread bytes
//! over the mesh).

use super::super::affinity::Affinity;
use super::super::encode::plain;
use super::super::gate::Gate;
use super::io::{fail, Reader};
use super::requests::serve;
use super::ConnContext;
use crate::limits::{RETRY_AFTER_SECS, SHARD_REFUSALS_IN_FLIGHT_MAX};
use crate::shard::message::MovedConnection;
use glommio::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;

/// Takes a freshly accepted connection: serves it on its own task, or, when
/// the shard is full of busy connections, answers 503 and closes it (just
/// closes it when SHARD_REFUSALS_IN_FLIGHT_MAX refusals are already going out).
pub fn admit<C: ConnContext + ?Sized + 'static>(stream: TcpStream, cx: Rc<C>, gate: &Rc<Gate>) {
    let edge = cx.edge();
    edge.accepted.set(edge.accepted.get() + 1);
    admit_carried(stream, cx, gate, Reader::new(Vec::new()), Affinity::default());
}

/// Takes a connection another shard moved here (see [`Affinity`]): served
/// like a new one, starting with the bytes it had already received.
pub fn adopt<C: ConnContext + ?Sized + 'static>(c: MovedConnection, cx: Rc<C>, gate: &Rc<Gate>) {
    // Safety: the descriptor is the connection's socket, owned by `c` alone.
    let stream = unsafe { TcpStream::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(c.socket)) };
    cx.edge().moved_in.set(cx.edge().moved_in.get() + 1);
    admit_carried(stream, cx, gate, Reader::new(c.pending), Affinity::moved(c.moves));
}

fn admit_carried<C: ConnContext + ?Sized + 'static>(
    stream: TcpStream,
    cx: Rc<C>,
    gate: &Rc<Gate>,
    rd: Reader,
    affinity: Affinity,
) {
    let edge = cx.edge();
    let Some(slot) = gate.admit(edge.connections.get()) else {
        edge.refused.set(edge.refused.get() + 1);
        if gate.refusing.get() < SHARD_REFUSALS_IN_FLIGHT_MAX {
            refuse(stream, gate.clone());
        }
        return;
    };
    // Counted open until served: the gate bounds this gauge, shutdown waits for it.
    edge.connections.set(edge.connections.get() + 1);
    glommio::spawn_local(async move {
        let gate = slot.gate.clone();
        serve(stream, cx.clone(), slot, rd, affinity).await;
        let open = cx.edge().connections.get() - 1;
        cx.edge().connections.set(open);
        if open == 0 {
            gate.none_open.notify();
        }
    })
    .detach();
}

/// Answers 503 on a task of its own, counted among the refusals in flight.
fn refuse(mut stream: TcpStream, gate: Rc<Gate>) {
    gate.refusing.set(gate.refusing.get() + 1);
    glommio::spawn_local(async move {
        let resp = plain(503, "too many open connections").header("Retry-After", RETRY_AFTER_SECS.to_string());
        fail(&mut stream, &resp, &mut Vec::new()).await;
        gate.refusing.set(gate.refusing.get() - 1);
    })
    .detach();
}

/// Moves the connection to shard `to` at a request boundary: the socket (a
/// duplicate of its descriptor; this end's copy closes when `stream` drops)
/// and the unread bytes go over the mesh. Gives the stream back when the
/// move cannot be made, to keep serving here. Called between requests,
/// after the last read returned: glommio (patch 6) keeps an io_uring
/// receive armed only while a read waits, or after a read that was given
/// up (which this loop does only to close), so none can take the moved
/// socket's next bytes here.
pub(super) fn move_connection<C: ConnContext + ?Sized>(
    cx: &C,
    stream: TcpStream,
    rd: &mut Reader,
    to: usize,
    moves: u8,
) -> Option<TcpStream> {
    // Safety: fcntl on a descriptor we own; a new descriptor or -1 comes back.
    let fd = unsafe { libc::fcntl(stream.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Some(stream);
    }
    // Safety: `fd` was just created and nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let c = MovedConnection { socket, pending: std::mem::take(&mut rd.buf), moves, from: cx.shard_id() };
    match cx.move_to(to, c) {
        Ok(()) => {
            cx.edge().moved_out.set(cx.edge().moved_out.get() + 1);
            None
        }
        Err(c) => {
            rd.buf = c.pending;
            Some(stream)
        }
    }
}
