//! What each shard's executor runs, start to end: open and recover its log,
//! join the mesh, tell the other shards its buckets and forks, wait for go,
//! listen and serve until the stop latch opens, then drain.

use super::access::Auth;
use super::boot::{Boot, Recovered};
use super::context::{Ctx, Remote};
use super::shutdown::{drain, ShardExit};
use super::Process;
use crate::config::Config;
use crate::http::conn;
use crate::http::stop::Stop;
use crate::limits::RECLAIM_INTERVAL_MS;
use crate::metrics::EdgeMetrics;
use crate::protocol::rules::ProducerPolicy;
use crate::shard::mesh::{Link, Mesh};
use crate::shard::message::Control;
use crate::shard::subs::SubsEnv;
use crate::shard::Shard;
use crate::storage::dma_file::DiskStore;
use crate::storage::io::SegmentStore;
use crate::storage::{Log, LogConfig, Tiering};
use glommio::net::TcpListener;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything one shard's executor is started with.
pub(super) struct ShardBoot {
    pub id: usize,
    pub cfg: Config,
    pub direct: bool,
    pub addr: SocketAddr,
    /// Taken once, by `shard_main`.
    pub link: Option<Link>,
    pub boot: crossbeam_channel::Sender<Boot>,
    pub done: crossbeam_channel::Sender<Result<(), String>>,
    pub process: Arc<Process>,
}

impl ShardBoot {
    fn step(&self, what: &'static str) {
        tracing::debug!("shard {}: boot: {what}", self.id);
        let _ = self.boot.send(Boot::Step { shard: self.id, what });
    }
}

/// A shard that finished booting.
struct Up {
    shard: Rc<Shard<DiskStore>>,
    mesh: Rc<Mesh>,
    remote: Rc<Remote>,
    edge: Rc<EdgeMetrics>,
    listener: TcpListener,
}

/// The executor's whole life. A failed boot is reported on the boot channel;
/// the end (clean or not) on the done channel, when `exit` drops.
pub(super) async fn shard_main(mut b: ShardBoot) {
    let mut exit = ShardExit { id: b.id, done: b.done.clone(), result: None };
    let link = b.link.take().expect("a shard's mesh link is taken once");
    match boot(&b, link).await {
        Ok(up) => exit.result = Some(serve(&b, up).await),
        Err(e) => {
            let _ = b.boot.send(Boot::Failed(e));
        }
    }
}

async fn boot(b: &ShardBoot, link: Link) -> Result<Up, String> {
    let id = b.id;
    b.step("opening the data directory");
    let dir = b.cfg.data_dir.join(format!("shard-{id}"));
    let store =
        DiskStore::open(&dir, b.direct).await.map_err(|e| format!("shard {id}: opening {}: {e}", dir.display()))?;
    let storage = store.describe();
    b.step("recovering the log");
    let started = Instant::now();
    let log_cfg = LogConfig { segment_bytes: b.cfg.segment_bytes, pending_bytes_max: b.cfg.max_pending_bytes };
    let tiering = b.process.tier.clone().map(|client| Tiering { client, shard: id });
    let (log, records, report, joined) = match &b.cfg.cell {
        Some(cell) => {
            let board = b.process.cell.as_ref().ok_or(format!("shard {id}: a cell without its board"))?;
            let o = super::cell::open(id, cell, store, log_cfg, tiering, &board.slot(id)).await?;
            (o.log, o.committed, o.report, Some(o.joined))
        }
        None => {
            let (log, records, report) = Log::open_tiered(store, log_cfg, tiering)
                .await
                .map_err(|e| format!("shard {id}: recovery failed: {e}"))?;
            (Rc::new(log), records, report, None)
        }
    };
    let policy = ProducerPolicy::new(b.cfg.max_producers_per_stream, b.cfg.producer_idle_expiry_secs);
    let shard = Rc::new(Shard::recover(id, b.cfg.shards, log.clone(), &records, policy)?);
    let bytes: u64 = records.iter().map(|r| u64::from(r.loc.body_len)).sum();
    drop(records);
    let elapsed = started.elapsed();
    shard.set_live(Rc::new(|d| Box::pin(glommio::timer::sleep(d))), Duration::from_millis(b.cfg.long_poll_timeout_ms));
    // In a cell only the leader delivers, and every node has the same key.
    shard.set_subs(Rc::new(SubsEnv {
        key: b.process.subs.0.clone(),
        loopback: b.addr.ip().is_loopback(),
        outbound: b.process.subs.1.clone(),
        spawn: Rc::new(|f| {
            glommio::spawn_local(f).detach();
        }),
    }));
    let l = log.clone();
    glommio::spawn_local(async move { l.run_writer().await }).detach();
    glommio::spawn_local(async move { log.run_preparer().await }).detach();
    if let (Some(cell), Some(joined), Some(board)) = (&b.cfg.cell, joined, &b.process.cell) {
        b.step("starting its replica");
        super::cell::start(cell, joined, &shard, board.slot(id), b.process.unity.clone());
    }
    b.step("joining the mesh");
    let (mesh, edge, remote) = join_mesh(link, &shard, b.process.auth.clone());
    if let Some(auth) = &b.process.auth {
        // Before any shard serves: quotas are enforced only on full counts.
        shard.count_usage(&auth.quotas);
    }
    replicate(b, &shard).await?;
    b.step("replicated buckets and fork references");
    let _ = b.boot.send(Boot::Replicated);
    // Every shard's buckets and fork references are known once go opens
    // (this shard keeps serving the mesh meanwhile).
    b.process.go.wait(id).await;
    // In a cell only the leader expires streams (through the log); reclaim
    // removes segments on one replica alone: not yet.
    match b.cfg.cell {
        None => start_background(&shard),
        Some(_) => start_expiry(&shard),
    }
    if let (0, Some(unity)) = (id, &b.process.unity) {
        super::cell::retell_when_whole(shard.clone(), b.cfg.shards, unity.clone());
    }
    glommio::spawn_local(shard.clone().run_subscriptions()).detach();
    if let Some(t) = &b.cfg.tier {
        let (s, budget) = (shard.clone(), t.hot_bytes / b.cfg.shards as u64);
        let in_cell = b.cfg.cell.is_some();
        glommio::spawn_local(async move {
            match in_cell {
                false => s.run_tiering(budget).await,
                true => s.run_tiering_in_cell(budget).await,
            }
        })
        .detach();
    }
    if let Some(auth) = &b.process.auth {
        count_on_reload(&shard, auth.clone());
    }
    b.step("listening");
    let listener = TcpListener::bind(b.addr).map_err(|e| format!("shard {id}: listening on {}: {e}", b.addr))?;
    let streams = shard.stream_count();
    let _ = b.boot.send(Boot::Ready(Recovered { shard: id, storage, streams, bytes, report, elapsed }));
    Ok(Up { shard, mesh, remote, edge, listener })
}

/// Joins the mesh and serves what other shards hand over, on its own task.
fn join_mesh(
    link: Link,
    shard: &Rc<Shard<DiskStore>>,
    auth: Option<Arc<Auth>>,
) -> (Rc<Mesh>, Rc<EdgeMetrics>, Rc<Remote>) {
    let (mesh, inbox) = link.join();
    shard.set_peers(mesh.clone());
    let edge = Rc::new(EdgeMetrics::default());
    let http = Default::default();
    let remote = Rc::new(Remote { shard: shard.clone(), edge: edge.clone(), mesh: mesh.clone(), http, auth });
    glommio::spawn_local(mesh.clone().serve(inbox, remote.clone())).detach();
    (mesh, edge, remote)
}

/// Tells every other shard the buckets this one owns, and each fork's
/// source owner that the fork exists (references are not logged: they are
/// rebuilt from the forks' own records).
async fn replicate(b: &ShardBoot, shard: &Shard<DiskStore>) -> Result<(), String> {
    let id = b.id;
    for bucket in shard.owned_buckets() {
        for peer in (0..b.cfg.shards).filter(|&p| p != id) {
            let bucket = bucket.clone();
            let replicate = |done| Control::ReplicateBucket { bucket, present: true, done };
            shard.ask(peer, replicate).await.map_err(|e| format!("shard {id}: replicating buckets: {e}"))?;
        }
    }
    shard.publish_owned_subs().await.map_err(|e| format!("shard {id}: publishing subscriptions: {e}"))?;
    for (source, source_uid) in shard.fork_sources() {
        let count = |done| Control::ForkRef { source, source_uid, add: true, done };
        shard.ask_owner(count).await.map_err(|e| format!("shard {id}: counting fork references: {e}"))?;
    }
    Ok(())
}

/// Collection of unreferenced sources and the reclaim pass: only after go,
/// when every fork has counted its reference, so the TTL sweep never
/// hard-deletes a referenced source.
fn start_background(shard: &Rc<Shard<DiskStore>>) {
    let s = shard.clone();
    glommio::spawn_local(async move { s.collect_unreferenced().await }).detach();
    let s = shard.clone();
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(Duration::from_millis(RECLAIM_INTERVAL_MS)).await;
            s.reclaim().await;
        }
    })
    .detach();
}

/// In a cell: the TTL sweep of the reclaim pass alone, which runs only
/// while this shard's replica leads.
fn start_expiry(shard: &Rc<Shard<DiskStore>>) {
    let s = shard.clone();
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(Duration::from_millis(RECLAIM_INTERVAL_MS)).await;
            s.reclaim_in_cell().await;
        }
    })
    .detach();
}

/// Each time a reload rings the bell: count this shard's streams into the
/// quota counters it does not count yet, and say so.
fn count_on_reload(shard: &Rc<Shard<DiskStore>>, auth: Arc<Auth>) {
    let s = shard.clone();
    glommio::spawn_local(async move {
        let mut seen = 0;
        loop {
            seen = auth.bell.wait(s.id, seen).await;
            s.count_usage(&auth.quotas);
            let _ = auth.counted.send((s.id, seen));
        }
    })
    .detach();
}

/// Accepts connections until the stop latch opens, then drains.
async fn serve(b: &ShardBoot, up: Up) -> Result<(), String> {
    let id = b.id;
    let stop = Rc::new(Stop::default());
    let ctx = Rc::new(Ctx {
        me: id,
        shards: b.cfg.shards,
        shard: up.shard.clone(),
        mesh: up.mesh,
        edge: up.edge.clone(),
        stop: stop.clone(),
        process: b.process.clone(),
        trust_proxy: b.cfg.trust_proxy,
        data_dir: b.cfg.data_dir.clone(),
    });
    // The stop latch becomes this shard's stop: live reads answer, idle
    // connections close, the accept loop below ends.
    let (shard, s, process) = (up.shard.clone(), stop.clone(), b.process.clone());
    glommio::spawn_local(async move {
        process.stop.wait(id).await;
        shard.begin_shutdown();
        s.trigger();
    })
    .detach();
    let timeouts = crate::http::gate::RequestTimeouts {
        header: Duration::from_millis(b.cfg.header_timeout_ms),
        body: Duration::from_millis(b.cfg.body_timeout_ms),
    };
    let gate = Rc::new(crate::http::gate::Gate::new(b.cfg.max_connections, timeouts));
    // Connections other shards move here are served like accepted ones.
    *up.remote.http.borrow_mut() = Some((ctx.clone(), gate.clone()));
    if let Some(w) = b.process.watchdog {
        let period = super::systemd::heartbeat_period(w);
        glommio::spawn_local(super::systemd::heartbeat(b.process.clone(), id, period)).detach();
    }
    let accepting = stop.slot();
    loop {
        let accepted = futures_lite::future::or(async { Some(up.listener.accept().await) }, async {
            accepting.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(s)) => conn::admit(s, ctx.clone(), &gate),
            Some(Err(e)) => {
                tracing::warn!("shard {id}: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    drop(up.listener);
    drain(id, &up.shard, &up.edge, &gate, &b.process.drained).await
}
