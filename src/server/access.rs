//! The auth file's life in the process: loaded once before any shard
//! starts, re-read on SIGHUP (by the signal thread). A reload takes effect
//! whole or not at all: a file that does not load changes nothing. When it
//! brings quotas for buckets that had none, every shard first counts its
//! streams into the new counters (the bell rings them; each answers on a
//! channel), and only then are limits set and the new tokens put in force.

use crate::auth::access::Access;
use crate::auth::file::{self, AuthFile};
use crate::bell::Bell;
use crate::config::Config;
use crate::limits::RELOAD_COUNT_TIMEOUT_MS;
use crate::quota::Quotas;
use anyhow::anyhow;
use crossbeam_channel::{Receiver, Sender};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Access control as every thread sees it.
pub(super) struct Auth {
    pub path: PathBuf,
    pub access: Access,
    pub quotas: Quotas,
    /// Rung when the shards must count their streams into new counters.
    pub bell: Bell,
    /// A shard's (id, ring) once it counted for that ring.
    pub counted: Sender<(usize, u64)>,
    answers: Receiver<(usize, u64)>,
    shards: usize,
}

/// At most this many token names in a log line.
const NAMES_LOGGED_MAX: usize = 20;

fn names(file: &AuthFile) -> String {
    let mut s: Vec<&str> = file.tokens.iter().take(NAMES_LOGGED_MAX).map(|t| t.name.as_str()).collect();
    if file.tokens.len() > NAMES_LOGGED_MAX {
        s.push("...");
    }
    s.join(", ")
}

impl Auth {
    /// Loads `--auth-file` (None without one), and says what is in force.
    pub fn load(cfg: &Config) -> anyhow::Result<Option<Arc<Auth>>> {
        let Some(path) = &cfg.auth_file else {
            if cfg.no_auth && !cfg.listen.ip().to_canonical().is_loopback() {
                tracing::warn!(
                    "access control: off (--no-auth): anyone who can reach {} may read, append to and delete every stream",
                    cfg.listen
                );
            } else {
                tracing::info!("access control: off (no --auth-file)");
            }
            return Ok(None);
        };
        let f = file::load(path).map_err(|e| anyhow!("--auth-file {}: {e}", path.display()))?;
        let quotas = Quotas::default();
        quotas.add_buckets(f.quotas.iter().map(|(b, _)| b.as_str()));
        quotas.set_limits(&f.quotas);
        tracing::info!(
            tokens = f.tokens.len(),
            names = %names(&f),
            bucket_quotas = f.quotas.len(),
            file = %path.display(),
            "access control: on"
        );
        if f.tokens.is_empty() {
            tracing::warn!("the auth file has no tokens: every request but /healthz and /readyz gets 401");
        }
        let (counted, answers) = crossbeam_channel::unbounded();
        Ok(Some(Arc::new(Auth {
            path: path.clone(),
            access: Access::new(&f.tokens, cfg.shards),
            quotas,
            bell: Bell::new(cfg.shards),
            counted,
            answers,
            shards: cfg.shards,
        })))
    }

    /// SIGHUP: re-reads the file; logs what came of it.
    pub fn reload(&self) {
        match self.try_reload() {
            Ok(f) => tracing::info!(
                tokens = f.tokens.len(),
                names = %names(&f),
                bucket_quotas = f.quotas.len(),
                "SIGHUP: reloaded {}",
                self.path.display()
            ),
            Err(e) => tracing::error!("SIGHUP: {}: {e}; the grants in force stay", self.path.display()),
        }
    }

    fn try_reload(&self) -> Result<AuthFile, String> {
        let f = file::load(&self.path)?;
        self.quotas.add_buckets(f.quotas.iter().map(|(b, _)| b.as_str()));
        if !self.quotas.counters().is_empty() {
            // Also after a reload whose counting timed out: a shard counts
            // each counter once, so asking again costs only the question.
            self.wait_for_counts(self.bell.ring())?;
        }
        self.quotas.set_limits(&f.quotas);
        self.access.replace(&f.tokens);
        Ok(f)
    }

    /// Waits until every shard answered `ring` (stale answers are skipped).
    fn wait_for_counts(&self, ring: u64) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_millis(RELOAD_COUNT_TIMEOUT_MS);
        let mut answered = vec![false; self.shards];
        while answered.contains(&false) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.answers.recv_timeout(left) {
                Ok((shard, n)) if n >= ring => answered[shard] = true,
                Ok(_) => {}
                Err(_) => {
                    let late: Vec<usize> = (0..self.shards).filter(|&s| !answered[s]).collect();
                    return Err(format!(
                        "shards {late:?} did not count their streams for the new quotas within {RELOAD_COUNT_TIMEOUT_MS} ms"
                    ));
                }
            }
        }
        Ok(())
    }
}
