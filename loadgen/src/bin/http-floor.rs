//! `http-floor`: the cheapest HTTP/1.1 server this machine can run, as a
//! floor for server benchmarks (scripts/bench-compare.sh `--servers
//! ...,floor`). It keeps nothing: every request is read whole (head and
//! `Content-Length` body) and answered at once with a canned answer shaped
//! like a durable-streams one (PUT: 201, POST: 204 with `Stream-Next-Offset`,
//! anything else: 200, empty). One thread per CPU, each with its own epoll
//! (edge-triggered), one `read` and one `write` per request when requests
//! come one at a time. What it costs per request is what the kernel's TCP,
//! the system calls and the wake-ups cost: no server that answers the same
//! requests over the same sockets can use less CPU per request.
//!
//! Usage: http-floor --listen 127.0.0.1:PORT [--threads N]

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;

const LISTENER: Token = Token(usize::MAX);
const READ_CHUNK: usize = 64 * 1024;
/// A request not yet complete may hold at most this much (head and body).
const PENDING_MAX: usize = 16 << 20;

const CREATED: &[u8] = b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\ncontent-type: application/octet-stream\r\n\
stream-next-offset: 0000000000000000_0000000000000000\r\nlocation: http://127.0.0.1/v1/stream/x\r\n\r\n";
const APPENDED: &[u8] = b"HTTP/1.1 204 No Content\r\nstream-next-offset: 0000000000000000_0000000000001024\r\n\r\n";
const OTHER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";

struct Conn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
}

fn main() {
    let (listen, threads) = args();
    let listener = std::net::TcpListener::bind(listen).unwrap_or_else(|e| die(&format!("bind {listen}: {e}")));
    listener.set_nonblocking(true).expect("nonblocking listener");
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let l = listener.try_clone().expect("clone listener");
            std::thread::spawn(move || serve(TcpListener::from_std(l)))
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}

fn args() -> (SocketAddr, usize) {
    let mut listen: Option<SocketAddr> = None;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--listen" => listen = it.next().and_then(|v| v.parse().ok()),
            "--threads" => threads = it.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "-h" | "--help" => {
                println!("usage: http-floor --listen ADDR:PORT [--threads N]");
                std::process::exit(0);
            }
            other => die(&format!("unknown argument {other}")),
        }
    }
    let listen = listen.unwrap_or_else(|| die("--listen ADDR:PORT is required"));
    if threads == 0 {
        die("--threads must be a positive integer");
    }
    (listen, threads)
}

fn die(why: &str) -> ! {
    eprintln!("http-floor: {why}");
    std::process::exit(2)
}

fn serve(mut listener: TcpListener) {
    let mut poll = Poll::new().expect("epoll");
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE).expect("register listener");
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut next = 0usize;
    let mut events = Events::with_capacity(1024);
    let mut scratch = vec![0u8; READ_CHUNK];
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            die(&format!("epoll: {e}"));
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                accept_all(&listener, &poll, &mut conns, &mut next);
                continue;
            }
            let id = ev.token().0;
            let done = conns.get_mut(&id).is_none_or(|c| {
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    !turn(c, &mut scratch)
                } else {
                    !c.out.is_empty() && !flush(c) // writable again: the rest of an answer
                }
            });
            if done {
                if let Some(mut c) = conns.remove(&id) {
                    let _ = poll.registry().deregister(&mut c.stream);
                }
            }
        }
    }
}

fn accept_all(listener: &TcpListener, poll: &Poll, conns: &mut HashMap<usize, Conn>, next: &mut usize) {
    loop {
        match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nodelay(true);
                let id = *next;
                *next += 1;
                let interest = Interest::READABLE | Interest::WRITABLE;
                if poll.registry().register(&mut stream, Token(id), interest).is_ok() {
                    conns.insert(id, Conn { stream, inbuf: Vec::new(), out: Vec::new() });
                }
            }
            Err(_) => return, // WouldBlock: none left; anything else: try again at the next event
        }
    }
}

/// Reads what came, answers every complete request, writes what it can.
/// False when the connection is done (closed, broken, or bad input).
fn turn(c: &mut Conn, scratch: &mut [u8]) -> bool {
    loop {
        match c.stream.read(scratch) {
            Ok(0) => return false,
            Ok(n) => {
                c.inbuf.extend_from_slice(&scratch[..n]);
                if n < scratch.len() {
                    break; // drained for now; edge-triggered epoll reports new data
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    if !answer_complete(&mut c.inbuf, &mut c.out) {
        return false;
    }
    flush(c)
}

/// Moves every complete request out of `inbuf`, queueing its answer in
/// `out`. False on bad input or when an incomplete request grows too large.
fn answer_complete(inbuf: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
    let mut used = 0;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        let head_len = match req.parse(&inbuf[used..]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => break,
            Err(_) => return false,
        };
        let body = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if inbuf.len() - used < head_len + body {
            break;
        }
        out.extend_from_slice(match req.method {
            Some("PUT") => CREATED,
            Some("POST") => APPENDED,
            _ => OTHER,
        });
        used += head_len + body;
    }
    inbuf.drain(..used);
    inbuf.len() <= PENDING_MAX
}

fn flush(c: &mut Conn) -> bool {
    let mut sent = 0;
    while sent < c.out.len() {
        match c.stream.write(&c.out[sent..]) {
            Ok(0) => return false,
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break, // WRITABLE resumes it
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    c.out.drain(..sent);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_pipelined_requests_and_waits_for_a_whole_body() {
        let mut inbuf = b"PUT /v1/stream/a HTTP/1.1\r\nHost: x\r\n\r\n\
POST /v1/stream/a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel"
            .to_vec();
        let mut out = Vec::new();
        assert!(answer_complete(&mut inbuf, &mut out));
        assert_eq!(out, CREATED, "the PUT is answered, the POST waits for its body");
        inbuf.extend_from_slice(b"loGET / HTTP/1.1\r\n\r\n");
        assert!(answer_complete(&mut inbuf, &mut out));
        assert_eq!(out, [CREATED, APPENDED, OTHER].concat());
        assert!(inbuf.is_empty());
        assert!(
            !answer_complete(&mut b"\x00\x01 nonsense\r\n\r\n".to_vec(), &mut out),
            "bad input ends the connection"
        );
    }
}
