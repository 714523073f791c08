//! Settings -> config -> logging -> server::run; nothing else.
//!
//! Exit status: 0 after a clean shutdown (and for --help, --version, a
//! passing --check-config); 78 (EX_CONFIG) for a configuration error, which
//! restarting cannot fix; 1 for any other failure.

use ringstream::config::{Config, LogFormat};
use ringstream::server::{ConfigError, EXIT_CONFIG};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    ringstream::alloc::configure();
    let inv = match ringstream::cli::load() {
        Ok(inv) => inv,
        Err(e) => exit(EXIT_CONFIG, &format!("configuration error: {e}")),
    };
    if inv.check_only {
        match ringstream::server::check(&inv.config) {
            Ok(report) => {
                print!("{report}");
                std::process::exit(0);
            }
            Err(e) => exit(EXIT_CONFIG, &format!("configuration check failed: {e:#}")),
        }
    }
    if let Err(e) = init_logging(&inv.config) {
        exit(EXIT_CONFIG, &format!("configuration error: {e:#}"));
    }
    if inv.restore_only {
        match ringstream::server::restore(&inv.config) {
            Ok(report) => {
                print!("{report}");
                std::process::exit(0);
            }
            Err(e) => {
                let config = e.chain().any(|c| c.is::<ConfigError>());
                exit(if config { EXIT_CONFIG } else { 1 }, &format!("restore failed: {e:#}"));
            }
        }
    }
    // The message alone (no backtrace): startup errors are for operators.
    if let Err(e) = ringstream::server::run(inv.config) {
        let config = e.chain().any(|c| c.is::<ConfigError>());
        let code = if config { EXIT_CONFIG } else { 1 };
        exit(code, &format!("{}{e:#}", if config { "configuration error: " } else { "error: " }));
    }
}

fn exit(code: i32, msg: &str) -> ! {
    eprintln!("ringstream: {msg}");
    std::process::exit(code)
}

/// Structured logs on stderr (stdout carries only the "listening" line).
/// Libraries that log through the `log` crate (glommio) are captured too.
fn init_logging(cfg: &Config) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    // The object store client logs each retry at info; ringstream logs what
    // matters of a failing store itself (once per outage), so its lines go
    // to warn unless the filter names it.
    let level = if cfg.log_level.contains("object_store") {
        cfg.log_level.clone()
    } else {
        format!("{},object_store=warn", cfg.log_level)
    };
    let filter = tracing_subscriber::EnvFilter::builder().parse(&level)?;
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
