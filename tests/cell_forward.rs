//! Forwarded requests over real links (`cell::link::Links::forward`): two
//! replicas of one group, each on its own glommio executor on loopback.
//! Replica 2 serves forwards (it answers a request with its bytes reversed,
//! and never answers `hang`); replica 1 forwards to it:
//! - an answer comes back to the request that asked;
//! - a request to a replica not connected to this one fails at once;
//! - an unanswered request fails at its deadline, not before;
//! - replica 2 stopped (as a killed process stops) while a request waits:
//!   the wait ends within a second (its connection broke), long before the
//!   request's 10 s deadline, and later requests fail at once;
//! - replica 2 never sends to replica 1 (as a follower never writes to
//!   another follower) yet, replica 1 restarted, finds its link to the old
//!   process closed and dials the new one: the new one's request is answered.

use futures_lite::future;
use glommio::{LocalExecutorBuilder, Placement};
use ringstream::cell::config::Secret;
use ringstream::cell::link::{ForwardError, ForwardHandler, LinkConfig, Links};
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Reverses;

impl ForwardHandler for Reverses {
    fn handle(&self, request: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>>>> {
        Box::pin(async move {
            if request == b"hang" {
                future::pending::<()>().await;
            }
            request.into_iter().rev().collect()
        })
    }
}

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let ls: Vec<_> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    ls.iter().map(|l| l.local_addr().unwrap()).collect()
}

fn links(me: u64, addrs: &[SocketAddr]) -> Links {
    let peer = 3 - me;
    let secret = Rc::new(Secret::new(vec![7; 32]).unwrap());
    let listen = addrs[me as usize - 1];
    let peers = vec![(peer, addrs[peer as usize - 1])];
    Links::start(LinkConfig { me, group: 0, listen, peers, secret }).unwrap().0
}

/// Replica 2 on an executor of its own, serving forwards until the flag
/// returned is set.
fn serve_reversed(addrs: &[SocketAddr]) -> (glommio::ExecutorJoinHandle<()>, Arc<AtomicBool>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (addrs, halt) = (addrs.to_vec(), stop.clone());
    let server = LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let l = links(2, &addrs);
            l.serve_forwards(Rc::new(Reverses));
            while !halt.load(Ordering::Relaxed) {
                glommio::timer::sleep(Duration::from_millis(5)).await;
            }
            // Dropping the links closes every connection, as a kill does.
        })
        .unwrap();
    (server, stop)
}

#[test]
fn forwards_are_answered_bounded_and_end_when_the_leader_goes() {
    let addrs = free_addrs(2);
    let (server, stop) = serve_reversed(&addrs);
    let client = LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let l = links(1, &addrs);
            let up = Instant::now() + Duration::from_secs(5);
            let answer = loop {
                match l.forward(2, b"abc".to_vec(), Duration::from_secs(2)).await {
                    Err(ForwardError::NotConnected(2)) if Instant::now() < up => {
                        glommio::timer::sleep(Duration::from_millis(10)).await
                    }
                    other => break other,
                }
            };
            assert_eq!(answer.unwrap(), b"cba");

            let asked = Instant::now();
            assert!(matches!(
                l.forward(9, b"x".to_vec(), Duration::from_secs(5)).await,
                Err(ForwardError::NotConnected(9))
            ));
            assert!(asked.elapsed() < Duration::from_millis(100), "not connected took {:?}", asked.elapsed());

            let asked = Instant::now();
            let r = l.forward(2, b"hang".to_vec(), Duration::from_millis(300)).await;
            assert!(matches!(r, Err(ForwardError::TimedOut(2, _))), "{r:?}");
            assert!(asked.elapsed() >= Duration::from_millis(300), "timed out early: {:?}", asked.elapsed());

            let asked = Instant::now();
            let waiting = l.forward(2, b"hang".to_vec(), Duration::from_secs(10));
            let stopper = async {
                glommio::timer::sleep(Duration::from_millis(100)).await;
                stop.store(true, Ordering::Relaxed);
                future::pending::<Result<Vec<u8>, ForwardError>>().await
            };
            let r = future::or(waiting, stopper).await;
            let took = asked.elapsed();
            eprintln!("a forward in flight ended {took:?} after it was sent (the leader stopped at 100 ms)");
            assert!(matches!(r, Err(ForwardError::Broke(2))), "{r:?}");
            assert!(took < Duration::from_millis(1500), "the wait ended after {took:?}");
            let r = l.forward(2, b"abc".to_vec(), Duration::from_secs(5)).await;
            assert!(matches!(r, Err(ForwardError::NotConnected(2))), "{r:?}");
            let served = l.stats().forward_answers.get();
            assert_eq!(served, 1, "answers counted: only the first request was answered");
        })
        .unwrap();
    client.join().unwrap();
    server.join().unwrap();
}

/// Replica 1 on an executor of its own (as a process): its links up, then
/// one forward answered; everything it opened closes when it ends.
fn run_replica_1(addrs: &[SocketAddr], up_within: Duration) -> Duration {
    let addrs = addrs.to_vec();
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let l = links(1, &addrs);
            let started = Instant::now();
            let answer = loop {
                match l.forward(2, b"abc".to_vec(), Duration::from_secs(2)).await {
                    Err(ForwardError::NotConnected(2)) if started.elapsed() < up_within => {
                        glommio::timer::sleep(Duration::from_millis(10)).await
                    }
                    other => break other,
                }
            };
            assert_eq!(answer.expect("replica 2 answers"), b"cba");
            started.elapsed()
        })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_peer_that_never_sends_dials_a_restarted_replica_again() {
    let addrs = free_addrs(2);
    let (server, stop) = serve_reversed(&addrs);
    run_replica_1(&addrs, Duration::from_secs(5));
    // Replica 2's link to the first run is idle now, and that run is gone.
    std::thread::sleep(Duration::from_secs(1));
    let took = run_replica_1(&addrs, Duration::from_secs(5));
    eprintln!("the restarted replica was answered {took:?} after it started");
    assert!(took < Duration::from_secs(3), "answered only after {took:?}");
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}
