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
    // Replicated cells' core: consensus sans-I/O, the peer link on glommio
    // (link.rs only); it knows nothing of HTTP or shards, and of storage
    // only where raft-rs's log is kept in the segment log (store.rs), where
    // a replica drives that log (replica.rs) and where segment files and
    // skeletons are copied from a peer (ship.rs, skeletons.rs).
    errors.extend(check(
        "cell",
        &["crate::http", "crate::shard", "crate::server", "crate::protocol", "crate::auth"],
        &["link.rs"],
    ));
    for f in rust_files(&src().join("cell"))
        .into_iter()
        .filter(|f| !["store.rs", "replica.rs", "ship.rs", "skeletons.rs"].iter().any(|n| f.ends_with(n)))
    {
        if code_of(&f).contains("crate::storage") {
            errors.push(format!(
                "{}: uses crate::storage outside cell/store.rs, cell/replica.rs, cell/ship.rs and cell/skeletons.rs",
                f.display()
            ));
        }
    }
    assert!(errors.is_empty(), "layering violations:\n{}", errors.join("\n"));
}

#[test]
fn consensus_only_in_the_cell() {
    // Without --cell no consensus code may be on a request path: raft-rs is
    // used only under src/cell/.
    let mut errors = Vec::new();
    for f in rust_files(&src()).into_iter().filter(|f| !f.starts_with(src().join("cell"))) {
        let code = code_of(&f);
        if code.contains("raft::") || code.contains("use raft") {
            errors.push(format!("{}: uses raft-rs outside src/cell/", f.display()));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
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

/// The files the table under "## Files" in docs/ARCHITECTURE.md names: every
/// backquoted `.rs` name in a row's first cell, relative to src/ (the build
/// script, `build.rs`, to the crate's root); `a/{b,c}.rs` names two files.
fn architecture_files_table() -> Vec<String> {
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md")).unwrap();
    let section = doc.split("\n## Files\n").nth(1).expect("docs/ARCHITECTURE.md has a \"## Files\" section");
    let section = section.split("\n## ").next().unwrap();
    let mut names = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let first_cell = row.split('|').nth(1).unwrap();
        for quoted in first_cell.split('`').skip(1).step_by(2) {
            names.extend(expand_braces(quoted).into_iter().filter(|n| n.ends_with(".rs")));
        }
    }
    names
}

/// `protocol/{offset,json}.rs` → `protocol/offset.rs`, `protocol/json.rs`.
fn expand_braces(name: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (name.find('{'), name.find('}')) else { return vec![name.to_string()] };
    let (head, tail) = (&name[..open], &name[close + 1..]);
    name[open + 1..close].split(',').map(|part| format!("{head}{}{tail}", part.trim())).collect()
}

#[test]
fn architecture_files_table_lists_every_source_file_once() {
    let listed = architecture_files_table();
    let mut errors = Vec::new();
    for f in rust_files(&src()) {
        let name = f.strip_prefix(src()).unwrap().to_str().unwrap().replace('\\', "/");
        match listed.iter().filter(|n| **n == name).count() {
            1 => {}
            0 => errors.push(format!("src/{name} has no row in the files table")),
            n => errors.push(format!("src/{name} is listed {n} times")),
        }
    }
    assert!(errors.is_empty(), "docs/ARCHITECTURE.md, \"## Files\":\n{}", errors.join("\n"));
}

#[test]
fn architecture_files_table_names_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exists = |n: &String| src().join(n).is_file() || (n == "build.rs" && root.join(n).is_file());
    let missing: Vec<String> = architecture_files_table().into_iter().filter(|n| !exists(n)).collect();
    assert!(missing.is_empty(), "docs/ARCHITECTURE.md's files table names files that do not exist: {missing:?}");
}

/// A heading's anchor as GitHub makes it: lower case, letters, digits, `_`,
/// `-` and spaces kept, each space a `-`.
fn anchor_of(heading: &str) -> String {
    let text = heading.trim_start_matches('#').trim().to_lowercase();
    text.chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Lines of Markdown outside fenced code blocks.
fn prose_lines(md: &str) -> Vec<&str> {
    let mut code = false;
    md.lines()
        .filter(|l| {
            if l.starts_with("```") {
                code = !code;
                return false;
            }
            !code
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated one gets `-1`, `-2`, …).
fn anchors_of(md: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for heading in prose_lines(md).into_iter().filter(|l| l.starts_with('#')) {
        let a = anchor_of(heading);
        let n = seen.iter().filter(|s| **s == a).count();
        out.push(if n == 0 { a.clone() } else { format!("{a}-{n}") });
        seen.push(a);
    }
    out
}

/// Local link targets (`[text](path#anchor)`) in a Markdown file's prose.
fn local_links(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(md) {
        for rest in line.split("](").skip(1) {
            let target = rest.split(')').next().unwrap();
            if !target.contains(char::is_whitespace) && !target.contains("://") && !target.starts_with("mailto:") {
                out.push(target.to_string());
            }
        }
    }
    out
}

#[test]
fn doc_links_reach_their_files_and_headings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "loadgen/README.md", "vendor/glommio/PATCHES.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    docs.extend(
        fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md")),
    );
    let mut errors = Vec::new();
    for doc in &docs {
        for link in local_links(&fs::read_to_string(doc).unwrap()) {
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() { doc.clone() } else { doc.parent().unwrap().join(path) };
            let shown = doc.strip_prefix(root).unwrap().display();
            let markdown = target.extension().is_some_and(|x| x == "md");
            if !target.exists() {
                errors.push(format!("{shown}: {link}: no such file"));
            } else if markdown
                && !anchor.is_empty()
                && !anchors_of(&fs::read_to_string(&target).unwrap()).contains(&anchor.to_string())
            {
                errors.push(format!("{shown}: {link}: no such heading"));
            }
        }
    }
    assert!(errors.is_empty(), "broken links:\n{}", errors.join("\n"));
}
