// Build facts for `--version` and the `ringstream_build_info` metric: the
// git commit (`unknown` outside a git checkout, e.g. a crates.io tarball),
// the compiler, the profile. Shared by loadgen (its build.rs includes this).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=BUILD_GIT_COMMIT={commit}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let version = Command::new(rustc).arg("--version").output().ok().and_then(|o| String::from_utf8(o.stdout).ok());
    // "rustc 1.95.0 (59807616e 2026-04-14)" -> "1.95.0"
    let version = version.as_deref().and_then(|v| v.split_whitespace().nth(1)).unwrap_or("unknown").to_string();
    println!("cargo:rustc-env=BUILD_RUSTC={version}");
    println!("cargo:rustc-env=BUILD_PROFILE={}", std::env::var("PROFILE").unwrap_or_default());
    println!("cargo:rerun-if-changed=build.rs");
    // Rebuild when HEAD moves: HEAD itself, the branch it names, packed refs.
    // Only files that exist are named (a missing one would rerun every build).
    let (Some(dir), Some(common)) = (git(&["rev-parse", "--git-dir"]), git(&["rev-parse", "--git-common-dir"])) else {
        return;
    };
    let mut watch = vec![Path::new(&dir).join("HEAD"), Path::new(&common).join("packed-refs")];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(Path::new(&common).join(r));
    }
    for p in watch.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
