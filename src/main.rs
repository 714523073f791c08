//! Settings -> config -> logging -> server::run; nothing else.

use ringstream::config::{Config, LogFormat};

fn main() {
    // The message alone (no backtrace): startup errors are for operators.
    if let Err(e) = start() {
        eprintln!("ringstream: error: {e:#}");
        std::process::exit(1);
    }
}

fn start() -> anyhow::Result<()> {
    let cfg = ringstream::cli::load().map_err(anyhow::Error::msg)?;
    init_logging(&cfg)?;
    ringstream::server::run(cfg)
}

/// Structured logs on stderr (stdout carries only the "listening" line).
/// Libraries that log through the `log` crate (glommio) are captured too.
fn init_logging(cfg: &Config) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::builder().parse(&cfg.log_level)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match cfg.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| anyhow::anyhow!("starting the logger: {e}"))
}
