//! The auth file (`--auth-file`): tokens with their bucket grants and
//! rights, and bucket quotas. TOML; every mistake is refused with a message
//! naming the entry, so a typo never silently grants or denies.
//!
//! ```toml
//! [[token]]
//! name    = "ingest"                 # in logs and metrics; never the secret
//! sha256  = "<hex SHA-256 of the token>"
//! buckets = ["orders", "tenant-a-*"] # exact names, a prefix ending in *, or "*"
//! rights  = ["read", "append"]       # read | append | manage | admin
//!
//! [[bucket]]
//! name        = "orders"
//! max_streams = 1000
//! max_bytes   = 10737418240
//! ```

use super::bearer::Digest;
use super::grants::{Pattern, Right, Rights};
use crate::limits::{AUTH_FILE_BYTES_MAX, AUTH_QUOTAS_MAX, AUTH_TOKENS_MAX};
use crate::quota::Limits;
use serde::Deserialize;
use std::collections::HashSet;
use std::io::Read;
use std::path::Path;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default)]
    token: Vec<TokenEntry>,
    #[serde(default)]
    bucket: Vec<BucketEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    sha256: String,
    buckets: Vec<String>,
    rights: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketEntry {
    name: String,
    max_streams: Option<u64>,
    max_bytes: Option<u64>,
}

/// One validated token entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub name: String,
    pub digest: Digest,
    pub patterns: Vec<Pattern>,
    pub rights: Rights,
}

/// A validated auth file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthFile {
    pub tokens: Vec<TokenSpec>,
    /// (bucket, its limits), one entry per bucket.
    pub quotas: Vec<(String, Limits)>,
}

/// Reads and validates the file at `path`; the error says what is wrong
/// and where (it does not repeat the path).
pub fn load(path: &Path) -> Result<AuthFile, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("reading it: {e}"))?;
    let mut text = String::new();
    file.take(AUTH_FILE_BYTES_MAX + 1).read_to_string(&mut text).map_err(|e| format!("reading it: {e}"))?;
    if text.len() as u64 > AUTH_FILE_BYTES_MAX {
        return Err(format!("larger than {AUTH_FILE_BYTES_MAX} bytes"));
    }
    parse(&text)
}

/// Validates the text of an auth file.
pub fn parse(text: &str) -> Result<AuthFile, String> {
    let doc: Doc = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
    if doc.token.len() > AUTH_TOKENS_MAX {
        return Err(format!("{} tokens; at most {AUTH_TOKENS_MAX}", doc.token.len()));
    }
    if doc.bucket.len() > AUTH_QUOTAS_MAX {
        return Err(format!("{} [[bucket]] entries; at most {AUTH_QUOTAS_MAX}", doc.bucket.len()));
    }
    let mut names = HashSet::new();
    let mut digests = HashSet::new();
    let mut tokens = Vec::with_capacity(doc.token.len());
    for (i, t) in doc.token.into_iter().enumerate() {
        let at = format!("[[token]] #{} ({:?})", i + 1, t.name);
        let spec = token(t).map_err(|e| format!("{at}: {e}"))?;
        if !names.insert(spec.name.clone()) {
            return Err(format!("{at}: another token has the same name"));
        }
        if !digests.insert(spec.digest) {
            return Err(format!("{at}: another token has the same sha256 (the same token twice)"));
        }
        tokens.push(spec);
    }
    let mut buckets = HashSet::new();
    let mut quotas = Vec::with_capacity(doc.bucket.len());
    for (i, b) in doc.bucket.into_iter().enumerate() {
        let at = format!("[[bucket]] #{} ({:?})", i + 1, b.name);
        if b.name.is_empty() || b.name.contains('*') || b.name.contains('/') || b.name.chars().any(char::is_control) {
            return Err(format!("{at}: name must be one bucket's name (no patterns)"));
        }
        if b.max_streams.is_none() && b.max_bytes.is_none() {
            return Err(format!("{at}: give max_streams, max_bytes or both"));
        }
        if !buckets.insert(b.name.clone()) {
            return Err(format!("{at}: the bucket has another [[bucket]] entry"));
        }
        quotas.push((b.name, Limits { max_streams: b.max_streams, max_bytes: b.max_bytes }));
    }
    Ok(AuthFile { tokens, quotas })
}

fn token(t: TokenEntry) -> Result<TokenSpec, String> {
    let name_ok = (1..=64).contains(&t.name.len())
        && t.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !name_ok {
        return Err("name must be 1-64 characters of A-Z a-z 0-9 - _ .".into());
    }
    let digest = Digest::from_hex(&t.sha256).ok_or(
        "sha256 must be the 64 hex digits of the token's SHA-256 (printf '%s' \"$TOKEN\" | sha256sum), not the token",
    )?;
    if t.buckets.is_empty() {
        return Err("buckets is empty: give names, prefixes ending in *, or \"*\"".into());
    }
    let patterns = t.buckets.iter().map(|b| Pattern::parse(b)).collect::<Result<Vec<_>, _>>()?;
    let mut rights = Rights::default();
    for r in &t.rights {
        let right = Right::parse(r).ok_or_else(|| format!("unknown right {r:?}: use read, append, manage or admin"))?;
        rights = rights.with(right);
    }
    if rights.is_empty() {
        return Err("rights is empty: give read, append, manage and/or admin".into());
    }
    Ok(TokenSpec { name: t.name, digest, patterns, rights })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET_SHA: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

    fn entry(name: &str, sha: &str, buckets: &str, rights: &str) -> String {
        format!("[[token]]\nname = \"{name}\"\nsha256 = \"{sha}\"\nbuckets = {buckets}\nrights = {rights}\n")
    }

    #[test]
    fn a_good_file() {
        let text = format!(
            "{}\n[[bucket]]\nname = \"orders\"\nmax_streams = 10\n[[bucket]]\nname = \"logs\"\nmax_bytes = 0\n",
            entry("ingest", SECRET_SHA, r#"["orders", "tenant-a-*"]"#, r#"["read", "append"]"#)
        );
        let f = parse(&text).unwrap();
        assert_eq!(f.tokens.len(), 1);
        let t = &f.tokens[0];
        assert_eq!(t.name, "ingest");
        assert_eq!(t.digest, Digest::of("secret"));
        assert_eq!(t.patterns, vec![Pattern::Exact("orders".into()), Pattern::Prefix("tenant-a-".into())]);
        assert!(t.rights.allows(Right::Append) && !t.rights.allows(Right::Manage));
        assert_eq!(
            f.quotas,
            vec![
                ("orders".into(), Limits { max_streams: Some(10), max_bytes: None }),
                ("logs".into(), Limits { max_streams: None, max_bytes: Some(0) }),
            ]
        );
        assert_eq!(parse("").unwrap(), AuthFile::default(), "an empty file grants nothing");
    }

    #[test]
    fn mistakes_are_refused_naming_the_entry() {
        let good = entry("a", SECRET_SHA, r#"["*"]"#, r#"["read"]"#);
        let other_sha = "00".repeat(32);
        for (text, want) in [
            (good.replace("rights", "right"), "unknown field"),
            (format!("{good}colour = 1\n"), "unknown field"),
            ("[[tokens]]\n".to_string(), "unknown field"),
            (entry("a b", SECRET_SHA, r#"["*"]"#, r#"["read"]"#), "name must be"),
            (entry("a", "secret", r#"["*"]"#, r#"["read"]"#), "sha256 must be"),
            (entry("a", SECRET_SHA, "[]", r#"["read"]"#), "buckets is empty"),
            (entry("a", SECRET_SHA, r#"["a*b"]"#, r#"["read"]"#), "may only end"),
            (entry("a", SECRET_SHA, r#"["*"]"#, r#"["write"]"#), "unknown right \"write\""),
            (entry("a", SECRET_SHA, r#"["*"]"#, "[]"), "rights is empty"),
            (format!("{good}{}", entry("a", &other_sha, r#"["*"]"#, r#"["read"]"#)), "same name"),
            (format!("{good}{}", entry("b", SECRET_SHA, r#"["*"]"#, r#"["read"]"#)), "same sha256"),
            ("[[bucket]]\nname = \"x-*\"\nmax_streams = 1\n".to_string(), "no patterns"),
            ("[[bucket]]\nname = \"orders\"\n".to_string(), "give max_streams"),
            ("[[bucket]]\nname = \"orders\"\nmax_bytes = -1\n".to_string(), "max_bytes"),
            (
                "[[bucket]]\nname = \"orders\"\nmax_bytes = 1\n[[bucket]]\nname = \"orders\"\nmax_streams = 1\n"
                    .to_string(),
                "another [[bucket]] entry",
            ),
            ("token = 3\n".to_string(), "invalid type"),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let e = parse(&entry("ingest", "x", r#"["*"]"#, r#"["read"]"#)).unwrap_err();
        assert!(e.starts_with("[[token]] #1 (\"ingest\")"), "{e}");
    }

    #[test]
    fn files_are_bounded() {
        let dir = std::env::temp_dir().join(format!("ringstream-authfile-{}", std::process::id()));
        std::fs::write(&dir, " ".repeat(AUTH_FILE_BYTES_MAX as usize + 1)).unwrap();
        assert!(load(&dir).unwrap_err().contains("larger than"));
        std::fs::write(&dir, entry("a", SECRET_SHA, r#"["*"]"#, r#"["read"]"#)).unwrap();
        assert_eq!(load(&dir).unwrap().tokens.len(), 1);
        std::fs::remove_file(&dir).unwrap();
        assert!(load(&dir).unwrap_err().starts_with("reading it"));
    }
}
