//! What this binary is: version, git commit, compiler and profile, fixed at
//! build time by build.rs (`--version`, the startup log, `ringstream_build_info`).

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Short git commit of the build, or `unknown` (built outside a git checkout).
pub const COMMIT: &str = env!("BUILD_GIT_COMMIT");
/// The rustc version that built it.
pub const RUSTC: &str = env!("BUILD_RUSTC");
/// `release` or `debug`.
pub const PROFILE: &str = env!("BUILD_PROFILE");
/// `--version`'s text: `0.1.0 (commit 1a2b3c4d5e6f, rustc 1.95.0, release)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BUILD_GIT_COMMIT"),
    ", rustc ",
    env!("BUILD_RUSTC"),
    ", ",
    env!("BUILD_PROFILE"),
    ")"
);
