//! The layering rules of docs/ARCHITECTURE.md, checked by reading src/.
//! A rule broken here is a design change: update the doc with it.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// Source without `//` comments, so prose may name any module.
fn code_of(p: &Path) -> String {
    fs::read_to_string(p).unwrap().lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `layer`: a directory under src/, or one file (`quota.rs`).
fn check(layer: &str, forbidden: &[&str], glommio_allowed: &[&str]) -> Vec<String> {
    let mut errors = Vec::new();
    let path = src().join(layer);
    let files = if path.is_file() { vec![path] } else { rust_files(&path) };
    for f in files {
        let code = code_of(&f);
        let name = f.file_name().unwrap().to_str().unwrap();
        for bad in forbidden {
            if code.contains(bad) {
                errors.push(format!("{}: uses {bad}", f.display()));
            }
        }
        if code.contains("glommio") && !glommio_allowed.contains(&name) {
            errors.push(format!("{}: uses glommio outside {glommio_allowed:?}", f.display()));
        }
    }
    errors
}

#[test]
fn layers_import_only_what_the_architecture_allows() {
    let mut errors = Vec::new();
    errors.extend(check("protocol", &["crate::http", "crate::shard", "crate::storage", "crate::server"], &[]));
    errors.extend(check(
        "storage",
        &["crate::http", "crate::protocol", "crate::shard", "crate::server"],
        &["dma_file.rs"],
    ));
    errors.extend(check(
        "http",
        &["crate::storage", "crate::server", "crate::shard::Shard", "crate::shard::mesh"],
        &["admit.rs", "io.rs", "requests.rs", "sse_session.rs"],
    ));
    errors.extend(check("shard", &["crate::http", "crate::server", "crate::auth"], &["mesh.rs"]));
    // Access control is an edge concern: pure, knows neither HTTP nor shards.
    errors.extend(check(
        "auth",
        &["crate::http", "crate::shard", "crate::storage", "crate::server", "crate::protocol"],
        &[],
    ));
    errors.extend(check(
        "quota.rs",
        &["crate::http", "crate::shard", "crate::storage", "crate::server", "crate::auth"],
        &[],
    ));
    // The object store client: a thread of its own, knows nothing of the server.
    errors.extend(check(
        "tier",
        &["crate::http", "crate::shard", "crate::storage", "crate::server", "crate::protocol", "crate::auth"],
        &[],
    ));
    assert!(errors.is_empty(), "layering violations:\n{}", errors.join("\n"));
}

#[test]
fn tokio_and_the_object_store_client_only_on_the_tier_thread() {
    // tokio must never run on an executor: only src/tier/ may use it.
    let mut errors = Vec::new();
    for f in rust_files(&src()).into_iter().filter(|f| !f.starts_with(src().join("tier"))) {
        let code = code_of(&f);
        for bad in ["tokio", "object_store::"] {
            if code.contains(bad) {
                errors.push(format!("{}: uses {bad} outside src/tier/", f.display()));
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn no_locks_shared_between_cores() {
    // Cores share nothing on the request path; a Mutex or RwLock in src/
    // would be a lock between them.
    let mut errors = Vec::new();
    for f in rust_files(&src()) {
        let code = code_of(&f);
        for bad in ["Mutex", "RwLock"] {
            if code.contains(bad) {
                errors.push(format!("{}: uses {bad}", f.display()));
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn anyhow_only_at_the_edges() {
    for f in rust_files(&src()) {
        let edge = f == src().join("main.rs") || f.starts_with(src().join("server"));
        if code_of(&f).contains("anyhow") {
            assert!(edge, "{} uses anyhow; use a typed error", f.display());
        }
    }
}

#[test]
fn every_limit_is_used() {
    let limits = fs::read_to_string(src().join("limits.rs")).unwrap();
    let all: String = rust_files(&src()).iter().filter(|f| !f.ends_with("limits.rs")).map(|f| code_of(f)).collect();
    for line in limits.lines() {
        if let Some(rest) = line.strip_prefix("pub const ") {
            let name = rest.split(':').next().unwrap();
            assert!(all.contains(name), "limit {name} is defined but never used");
        }
    }
}

#[test]
fn every_limit_is_documented_for_operators() {
    let limits = fs::read_to_string(src().join("limits.rs")).unwrap();
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let doc = fs::read_to_string(&doc_path).unwrap();
    let mut missing = Vec::new();
    for line in limits.lines() {
        if let Some(rest) = line.strip_prefix("pub const ") {
            let name = rest.split(':').next().unwrap();
            if !doc.contains(&format!("`{name}`")) {
                missing.push(name);
            }
        }
    }
    assert!(missing.is_empty(), "limits missing from {} (the Limits table): {missing:?}", doc_path.display());
}
