//! CLI -> config -> server::run; nothing else.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cfg = ringstream::cli::Cli::parse().into_config().map_err(anyhow::Error::msg)?;
    ringstream::server::run(cfg)
}
