//! The object store that sealed segments are tiered to, seen from the
//! executors: a [`TierClient`] sends jobs (upload a segment file and verify
//! it, read a byte range, delete, list) to one thread of its own, which runs
//! them on a tokio runtime with the `object_store` crate's S3 client, and
//! answers each on a oneshot channel the executor's task awaits. No object
//! store I/O, and no tokio, ever runs on an executor.
//!
//! The client also keeps the store's health as the last outcome of any job
//! (`is_up`): `/readyz` says degraded while it is down.
//!
//! Fault-injection tests use [`TierClient::in_memory`]: the same thread and
//! jobs over `object_store`'s in-memory store, with a switch that makes
//! every job fail as an unreachable store would.

pub mod outbound;

use crate::limits::{TIER_CONNECT_TIMEOUT_MS, TIER_REQUEST_TIMEOUT_MS, TIER_UPLOAD_TIMEOUT_MS};
use futures_channel::oneshot;
use futures_util::StreamExt;
use md5::{Digest, Md5};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Where the object store is and how to reach it (`--tier-*`). No `Debug`:
/// it holds the secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Settings {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// What an upload reads: a sealed segment's file, or its bytes (tests).
pub enum Source {
    File(PathBuf),
    Bytes(Vec<u8>),
}

impl Source {
    /// Its bytes (a file is read whole: call off the runtime's thread).
    fn read(self) -> io::Result<Vec<u8>> {
        match self {
            Source::Bytes(b) => Ok(b),
            Source::File(path) => std::fs::read(path),
        }
    }
}

/// Work on an upload's bytes done on the tier thread's blocking pool before
/// they go out (the log builds a segment's skeleton with it), so that no
/// executor ever scans a whole segment. An error cancels the upload.
pub type Derive = Box<dyn FnOnce(&[u8]) -> Result<Vec<u8>, String> + Send>;

enum Job {
    Put { key: String, source: Source, derive: Derive, done: oneshot::Sender<io::Result<(u64, Vec<u8>)>> },
    Get { key: String, range: Range<u64>, done: oneshot::Sender<io::Result<Vec<u8>>> },
    Delete { key: String, done: oneshot::Sender<io::Result<()>> },
    List { prefix: String, done: oneshot::Sender<io::Result<Vec<(String, u64)>>> },
    Derive { source: Source, derive: Derive, done: oneshot::Sender<io::Result<Vec<u8>>> },
}

/// A handle on the tier thread; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct TierClient {
    jobs: mpsc::UnboundedSender<Job>,
    up: Arc<AtomicBool>,
    /// Every key of this node starts with it: `{prefix}/{node id}`.
    root: String,
    describe: String,
}

/// Makes every job of an in-memory client fail while set (tests).
#[derive(Clone, Default)]
pub struct FaultSwitch(Arc<AtomicBool>);

impl FaultSwitch {
    pub fn set_down(&self, down: bool) {
        self.0.store(down, Ordering::SeqCst);
    }
}

impl TierClient {
    /// A client for an S3-compatible store. Builds the client only: an
    /// unreachable store is not an error here (uploads retry, reads 503).
    pub fn s3(s: &S3Settings, prefix: &str, node_id: &str) -> Result<TierClient, String> {
        let retry = object_store::RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_millis(TIER_REQUEST_TIMEOUT_MS),
            ..Default::default()
        };
        let options = object_store::ClientOptions::new()
            .with_connect_timeout(Duration::from_millis(TIER_CONNECT_TIMEOUT_MS))
            .with_timeout(Duration::from_millis(TIER_UPLOAD_TIMEOUT_MS))
            .with_allow_http(s.endpoint.starts_with("http://"));
        let store = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&s.endpoint)
            .with_bucket_name(&s.bucket)
            .with_region(&s.region)
            .with_access_key_id(&s.access_key_id)
            .with_secret_access_key(&s.secret_access_key)
            .with_virtual_hosted_style_request(false)
            .with_retry(retry)
            .with_client_options(options)
            .build()
            .map_err(|e| format!("object store {}: {e}", s.endpoint))?;
        let describe = format!("s3 {} bucket {} under {}/{}", s.endpoint, s.bucket, prefix, node_id);
        Self::start(Arc::new(store), None, prefix, node_id, describe)
    }

    /// A client over an in-memory store, and the switch that takes it down.
    pub fn in_memory(node_id: &str) -> (TierClient, FaultSwitch) {
        let switch = FaultSwitch::default();
        let store = Arc::new(object_store::memory::InMemory::new());
        let describe = "in-memory object store".to_string();
        let client = Self::start(store, Some(switch.clone()), "test", node_id, describe).expect("tier thread starts");
        (client, switch)
    }

    fn start(
        store: Arc<dyn ObjectStore>,
        fault: Option<FaultSwitch>,
        prefix: &str,
        node_id: &str,
        describe: String,
    ) -> Result<TierClient, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting the tier runtime: {e}"))?;
        let (jobs, rx) = mpsc::unbounded_channel();
        let up = Arc::new(AtomicBool::new(true));
        let worker = Worker { store, fault, up: up.clone() };
        std::thread::Builder::new()
            .name("ringstream-tier".into())
            .spawn(move || runtime.block_on(worker.run(rx)))
            .map_err(|e| format!("starting the tier thread: {e}"))?;
        let root = format!("{}/{}", prefix.trim_matches('/'), node_id);
        Ok(TierClient { jobs, up, root, describe })
    }

    /// The key of one shard's segment: `{prefix}/{node}/shard-{i}/{no:020}.seg`
    /// on a single node (`term` 0). In a cell (the node part is `cell`, and
    /// shard *i* is group *i*) the leader that uploads it names its term,
    /// `{no:020}.t{term}.seg`: each leader's upload has a key of its own, so
    /// one never overwrites another's, and an object of an older term than
    /// the leader's that no committed tier record names is known to be an
    /// orphan (`storage/tiered/cell.rs`).
    pub fn segment_key(&self, shard: usize, segment: u64, term: u64) -> String {
        match term {
            0 => format!("{}/{segment:020}.seg", self.shard_prefix(shard)),
            t => format!("{}/{segment:020}.t{t}.seg", self.shard_prefix(shard)),
        }
    }

    /// The prefix under which every key of `shard` lives.
    pub fn shard_prefix(&self, shard: usize) -> String {
        format!("{}/shard-{shard}", self.root)
    }

    /// The segment and term a key of [`segment_key`](Self::segment_key) names.
    pub fn segment_of(key: &str) -> Option<(u64, u64)> {
        let name = key.rsplit('/').next()?.strip_suffix(".seg")?;
        match name.split_once(".t") {
            None => Some((name.parse().ok()?, 0)),
            Some((no, term)) => Some((no.parse().ok()?, term.parse().ok().filter(|&t| t > 0)?)),
        }
    }

    /// Whether the last job reached the store.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Reads `source`, runs `derive` over its bytes, uploads them to `key`
    /// and verifies the stored object (its size, and its MD5 where the
    /// store's ETag is one). Returns the size and what `derive` made.
    pub async fn put_verified(&self, key: String, source: Source, derive: Derive) -> io::Result<(u64, Vec<u8>)> {
        self.call(|done| Job::Put { key, source, derive, done }).await
    }

    /// Bytes `range` of the object at `key`.
    pub async fn get_range(&self, key: String, range: Range<u64>) -> io::Result<Vec<u8>> {
        self.call(|done| Job::Get { key, range, done }).await
    }

    /// Deletes `key`; deleting a key that is not there succeeds.
    pub async fn delete(&self, key: String) -> io::Result<()> {
        self.call(|done| Job::Delete { key, done }).await
    }

    /// Every key under `prefix`, with its size.
    pub async fn list(&self, prefix: String) -> io::Result<Vec<(String, u64)>> {
        self.call(|done| Job::List { prefix, done }).await
    }

    /// What `derive` makes of `source`'s bytes, worked out on the tier
    /// thread's blocking pool (never on an executor): a replica in a cell
    /// builds a skeleton so. The store is not asked.
    pub async fn derive(&self, source: Source, derive: Derive) -> io::Result<Vec<u8>> {
        self.call(|done| Job::Derive { source, derive, done }).await
    }

    async fn call<T>(&self, job: impl FnOnce(oneshot::Sender<io::Result<T>>) -> Job) -> io::Result<T> {
        let (tx, rx) = oneshot::channel();
        let gone = || io::Error::other("the tier thread has stopped");
        self.jobs.send(job(tx)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// The tier thread's side: runs every job as its own tokio task.
struct Worker {
    store: Arc<dyn ObjectStore>,
    fault: Option<FaultSwitch>,
    up: Arc<AtomicBool>,
}

impl Worker {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Job>) {
        let me = Arc::new(self);
        while let Some(job) = rx.recv().await {
            let me = me.clone();
            tokio::spawn(async move { me.serve(job).await });
        }
    }

    async fn serve(&self, job: Job) {
        match job {
            Job::Put { key, source, derive, done } => {
                let r = self.checked(TIER_UPLOAD_TIMEOUT_MS, put_verified(&*self.store, &key, source, derive)).await;
                let _ = done.send(r);
            }
            Job::Get { key, range, done } => {
                let get = async { Ok(self.store.get_range(&ObjectPath::from(key), range).await?.to_vec()) };
                let _ = done.send(self.checked(TIER_REQUEST_TIMEOUT_MS, get).await);
            }
            Job::Delete { key, done } => {
                let delete = async {
                    match self.store.delete(&ObjectPath::from(key)).await {
                        Err(object_store::Error::NotFound { .. }) | Ok(()) => Ok(()),
                        Err(e) => Err(e.into()),
                    }
                };
                let _ = done.send(self.checked(TIER_REQUEST_TIMEOUT_MS, delete).await);
            }
            Job::List { prefix, done } => {
                let list = async {
                    let mut out = Vec::new();
                    let mut items = self.store.list(Some(&ObjectPath::from(prefix)));
                    while let Some(meta) = items.next().await {
                        let meta = meta?;
                        out.push((meta.location.to_string(), meta.size));
                    }
                    Ok(out)
                };
                let _ = done.send(self.checked(TIER_REQUEST_TIMEOUT_MS, list).await);
            }
            Job::Derive { source, derive, done } => {
                let work = move || derive(&source.read()?).map_err(io::Error::other);
                let r = tokio::task::spawn_blocking(work).await.map_err(io::Error::other);
                let _ = done.send(r.and_then(|r| r));
            }
        }
    }

    /// Runs one job within `limit_ms` and records whether the store answered.
    async fn checked<T>(&self, limit_ms: u64, job: impl std::future::Future<Output = io::Result<T>>) -> io::Result<T> {
        if self.fault.as_ref().is_some_and(|f| f.0.load(Ordering::SeqCst)) {
            self.up.store(false, Ordering::Relaxed);
            return Err(io::Error::new(io::ErrorKind::ConnectionRefused, "object store down (fault injection)"));
        }
        let r = match tokio::time::timeout(Duration::from_millis(limit_ms), job).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "object store request timed out")),
        };
        // A missing object is an answer: the store itself is up.
        let reached = r.as_ref().map_or_else(|e| e.kind() == io::ErrorKind::NotFound, |_| true);
        self.up.store(reached, Ordering::Relaxed);
        r
    }
}

async fn put_verified(
    store: &dyn ObjectStore,
    key: &str,
    source: Source,
    derive: Derive,
) -> io::Result<(u64, Vec<u8>)> {
    // Reading, hashing and deriving take milliseconds per megabyte: off the
    // runtime's thread, so cold reads are not held up behind an upload.
    let prepare = move || -> io::Result<_> {
        let bytes = source.read()?;
        let derived = derive(&bytes).map_err(io::Error::other)?;
        let md5 = hex(&Md5::digest(&bytes));
        Ok((bytes, derived, md5))
    };
    let (bytes, derived, md5) = tokio::task::spawn_blocking(prepare).await.map_err(io::Error::other)??;
    let len = bytes.len() as u64;
    let path = ObjectPath::from(key);
    let put = store.put(&path, PutPayload::from(bytes)).await?;
    let head = store.head(&path).await?;
    if head.size != len {
        return Err(io::Error::other(format!("{key}: stored {} bytes, uploaded {len}", head.size)));
    }
    // A single-part upload's ETag is the MD5 of the object on S3 and its
    // look-alikes; other stores' ETags are opaque, and the size must do.
    for etag in [put.e_tag, head.e_tag].into_iter().flatten() {
        let etag = etag.trim_matches('"').to_ascii_lowercase();
        if etag.len() == 32 && etag.bytes().all(|b| b.is_ascii_hexdigit()) && etag != md5 {
            return Err(io::Error::other(format!("{key}: stored MD5 {etag}, uploaded {md5}")));
        }
    }
    Ok((len, derived))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<T>(f: impl std::future::Future<Output = T>) -> T {
        futures::executor::block_on(f)
    }

    #[test]
    fn put_get_list_delete_round_trip() {
        let (c, _down) = TierClient::in_memory("node");
        let key = c.segment_key(1, 7, 0);
        assert_eq!(key, "test/node/shard-1/00000000000000000007.seg");
        assert_eq!(TierClient::segment_of(&key), Some((7, 0)));
        let in_term = c.segment_key(1, 7, 12);
        assert_eq!(in_term, "test/node/shard-1/00000000000000000007.t12.seg");
        assert_eq!(TierClient::segment_of(&in_term), Some((7, 12)));
        for bad in ["a/7.t0.seg", "a/7.t.seg", "a/x.seg", "a/7.t3", "a/7.tx.seg"] {
            assert_eq!(TierClient::segment_of(bad), None, "{bad}");
        }
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let first = Box::new(|b: &[u8]| Ok(b[..3].to_vec()));
        let put = block(c.put_verified(key.clone(), Source::Bytes(data.clone()), first)).unwrap();
        assert_eq!(put, (10_000, data[..3].to_vec()));
        let refuse = Box::new(|_: &[u8]| Err("no".to_string()));
        assert!(block(c.put_verified(c.segment_key(1, 8, 0), Source::Bytes(data.clone()), refuse)).is_err());
        assert_eq!(block(c.get_range(key.clone(), 100..300)).unwrap(), data[100..300]);
        let listed = block(c.list(c.shard_prefix(1))).unwrap();
        assert_eq!(listed, vec![(key.clone(), 10_000)]);
        block(c.delete(key.clone())).unwrap();
        block(c.delete(key.clone())).unwrap();
        assert!(block(c.list(c.shard_prefix(1))).unwrap().is_empty());
        assert!(c.is_up());
    }

    #[test]
    fn a_down_store_fails_every_job_and_reports_it() {
        let (c, down) = TierClient::in_memory("node");
        let key = c.segment_key(0, 1, 0);
        block(c.put_verified(key.clone(), Source::Bytes(vec![1; 64]), Box::new(|_| Ok(vec![])))).unwrap();
        down.set_down(true);
        assert!(block(c.get_range(key.clone(), 0..8)).is_err());
        assert!(block(c.put_verified(key.clone(), Source::Bytes(vec![2; 64]), Box::new(|_| Ok(vec![])))).is_err());
        assert!(!c.is_up());
        down.set_down(false);
        assert_eq!(block(c.get_range(key, 0..8)).unwrap(), vec![1; 8]);
        assert!(c.is_up());
    }
}
