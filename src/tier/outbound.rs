//! Outbound HTTP for webhook deliveries, off the executors: an
//! [`Outbound`] sends POSTs to one thread of its own, which runs them on a
//! tokio runtime with `reqwest` (the client the object store already
//! brings in, rustls for TLS) and answers each on a oneshot channel the
//! executor's task awaits. As with the object store, no tokio and no
//! network client ever runs on an executor.
//!
//! Bounded: at most `WEBHOOK_QUEUE_MAX` POSTs queued or running at once,
//! all shards together (past it a POST fails at once and its subscription
//! retries later); each takes at most `WEBHOOK_TIMEOUT_MS`; an answer is
//! read up to `WEBHOOK_ANSWER_BYTES_MAX`. Redirects are not followed (a
//! receiver could otherwise send the server anywhere), and a host name is
//! connected to only at the addresses it resolves to that the caller's
//! [`Allow`] accepts (the server's SSRF rule: public addresses, loopback
//! only for a server on loopback), so a name that resolves to a private
//! address is refused at delivery, whatever it resolved to when the
//! subscription was created.

use crate::limits::{WEBHOOK_ANSWER_BYTES_MAX, WEBHOOK_QUEUE_MAX, WEBHOOK_TIMEOUT_MS};
use futures_channel::oneshot;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Which addresses a delivery may connect to.
pub type Allow = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

/// Resolves a host name and keeps only the addresses `allow` accepts.
struct Guarded {
    allow: Allow,
}

impl reqwest::dns::Resolve for Guarded {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (allow, host) = (self.allow.clone(), name.as_str().to_string());
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found.iter().copied().filter(|a| allow(a.ip())).collect();
            if kept.is_empty() {
                let msg = format!("webhook host {host} resolves to no address a webhook may reach ({found:?})");
                return Err(msg.into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A status and the first bytes of the body, or why there is none.
pub type Answer = Result<(u16, Vec<u8>), String>;

struct Post {
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    done: oneshot::Sender<Answer>,
}

/// A handle on the delivery thread; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Outbound {
    posts: mpsc::UnboundedSender<Post>,
    /// POSTs queued or running.
    busy: Arc<AtomicUsize>,
}

impl Outbound {
    /// Starts the delivery thread; it connects only to addresses `allow` accepts.
    pub fn start(allow: Allow) -> Result<Outbound, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting the webhook runtime: {e}"))?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(WEBHOOK_TIMEOUT_MS))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(Guarded { allow }))
            .build()
            .map_err(|e| format!("building the webhook client: {e}"))?;
        let (posts, rx) = mpsc::unbounded_channel();
        let busy = Arc::new(AtomicUsize::new(0));
        let b = busy.clone();
        std::thread::Builder::new()
            .name("ringstream-webhooks".into())
            .spawn(move || runtime.block_on(run(client, rx, b)))
            .map_err(|e| format!("starting the webhook thread: {e}"))?;
        Ok(Outbound { posts, busy })
    }

    /// POSTs `body` to `url` with `headers`.
    pub async fn post(&self, url: String, headers: Vec<(String, String)>, body: Vec<u8>) -> Answer {
        if self.busy.fetch_add(1, Ordering::AcqRel) >= WEBHOOK_QUEUE_MAX {
            self.busy.fetch_sub(1, Ordering::AcqRel);
            return Err(format!("{WEBHOOK_QUEUE_MAX} deliveries are under way already"));
        }
        let (done, rx) = oneshot::channel();
        if self.posts.send(Post { url, headers, body, done }).is_err() {
            self.busy.fetch_sub(1, Ordering::AcqRel);
            return Err("the webhook thread has stopped".into());
        }
        rx.await.unwrap_or_else(|_| Err("the webhook thread dropped the delivery".into()))
    }
}

/// The delivery thread: every POST as its own task.
async fn run(client: reqwest::Client, mut rx: mpsc::UnboundedReceiver<Post>, busy: Arc<AtomicUsize>) {
    while let Some(p) = rx.recv().await {
        let (client, busy) = (client.clone(), busy.clone());
        tokio::spawn(async move {
            let answer = send(&client, p.url, p.headers, p.body).await;
            busy.fetch_sub(1, Ordering::AcqRel);
            let _ = p.done.send(answer);
        });
    }
}

async fn send(client: &reqwest::Client, url: String, headers: Vec<(String, String)>, body: Vec<u8>) -> Answer {
    let mut req = client.post(url).body(body);
    for (name, value) in headers {
        req = req.header(name, value);
    }
    let mut resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let mut answer = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        let room = WEBHOOK_ANSWER_BYTES_MAX - answer.len();
        answer.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if answer.len() == WEBHOOK_ANSWER_BYTES_MAX {
            break;
        }
    }
    Ok((status, answer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::Resolve;

    fn resolve(allow: Allow, host: &str) -> Result<Vec<SocketAddr>, String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let name: reqwest::dns::Name = host.parse().unwrap();
        rt.block_on(Guarded { allow }.resolve(name)).map(|a| a.collect()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_name_is_reached_only_at_the_addresses_allowed() {
        let any: Allow = Arc::new(|_| true);
        let not_loopback: Allow = Arc::new(|ip: IpAddr| !ip.is_loopback());
        assert!(resolve(any, "localhost").unwrap().iter().all(|a| a.ip().is_loopback()));
        let refused = resolve(not_loopback, "localhost").unwrap_err();
        assert!(refused.contains("no address a webhook may reach"), "{refused}");
    }

    #[test]
    fn a_post_to_a_refused_name_fails_without_connecting() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let out = Outbound::start(Arc::new(|ip: IpAddr| !ip.is_loopback())).unwrap();
        let url = format!("http://localhost:{port}/hook");
        let answer = futures_lite::future::block_on(out.post(url, Vec::new(), b"{}".to_vec()));
        assert!(answer.is_err(), "{answer:?}");
        l.set_nonblocking(true).unwrap();
        assert!(l.accept().is_err(), "nothing connected");
    }
}
