//! docs/api.md is executable: every ```http-request block, with the
//! ```http-response block after it, is replayed in order against one fresh
//! server, and the status, the listed response headers and (when the doc
//! shows one) the body must match. The rules of the format are at the top of
//! docs/api.md. The examples after the access-control marker run against a
//! second fresh server, started with the auth file in the first ```toml
//! block after the marker. The test also checks that every /ds endpoint has
//! at least one example.

mod common;

use common::{squash_json, Server};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// The server the examples assume (docs/api.md says so too).
const SERVER_FLAGS: &[&str] = &["--long-poll-timeout-ms", "1000"];
/// From this line on, the examples run against a server with an auth file.
const AUTH_MARKER: &str = "<!-- api_doc: the examples below run against a server started with the auth file below -->";

/// The line of the marker and the text of the first ```toml block after it.
fn auth_section(text: &str) -> (usize, String) {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| l.trim() == AUTH_MARKER).expect("docs/api.md has the access-control marker");
    let open = at + lines[at..].iter().position(|l| l.trim_end() == "```toml").expect("a toml block after the marker");
    let close = open + lines[open..].iter().position(|l| l.trim_end() == "```").expect("the toml block ends");
    (at + 1, lines[open + 1..close].join("\n"))
}

#[derive(Debug)]
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

#[derive(Debug)]
struct Expected {
    status: u16,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

#[derive(Debug)]
struct Example {
    /// 1-based line of the request block in docs/api.md.
    line: usize,
    request: Request,
    response: Expected,
}

/// Head lines (`Name: value`), then after the first blank line the body
/// (None when there is no blank line).
fn split_block(lines: &[String]) -> (&str, Vec<(String, String)>, Option<String>) {
    let first = lines.first().map(String::as_str).unwrap_or("");
    let mut headers = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(1) {
        if l.trim().is_empty() {
            return (first, headers, Some(lines[i + 1..].join("\n")));
        }
        let (k, v) = l.split_once(':').unwrap_or_else(|| panic!("not a header line: {l:?}"));
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    (first, headers, None)
}

fn parse_doc(text: &str) -> Vec<Example> {
    let mut blocks: Vec<(usize, String, Vec<String>)> = Vec::new();
    let mut open: Option<(usize, String, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut open {
            Some(_) if line.trim_end() == "```" => blocks.push(open.take().unwrap()),
            Some((_, _, lines)) => lines.push(line.to_string()),
            None => {
                if let Some(kind) = line.trim_end().strip_prefix("```http") {
                    assert!(
                        kind == "-request" || kind == "-response",
                        "docs/api.md:{}: unknown block kind ```http{kind}",
                        i + 1
                    );
                    open = Some((i + 1, kind[1..].to_string(), Vec::new()));
                }
            }
        }
    }
    assert!(open.is_none(), "docs/api.md: unterminated block");
    let mut out = Vec::new();
    let mut it = blocks.into_iter();
    while let Some((line, kind, req)) = it.next() {
        assert_eq!(kind, "request", "docs/api.md:{line}: a response block without a request before it");
        let (rline, rkind, resp) =
            it.next().unwrap_or_else(|| panic!("docs/api.md:{line}: request without a response block"));
        assert_eq!(rkind, "response", "docs/api.md:{rline}: expected a response block after line {line}");

        let (first, headers, body) = split_block(&req);
        let mut parts = first.split(' ');
        let (method, target, version) = (parts.next(), parts.next(), parts.next());
        assert!(
            version == Some("HTTP/1.1") && parts.next().is_none(),
            "docs/api.md:{line}: bad request line {first:?}"
        );
        let request = Request {
            method: method.unwrap().to_string(),
            target: target.unwrap().to_string(),
            headers,
            body: body.unwrap_or_default(),
        };

        let (first, headers, body) = split_block(&resp);
        let status = first
            .strip_prefix("HTTP/1.1 ")
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("docs/api.md:{rline}: bad status line {first:?}"));
        out.push(Example { line, request, response: Expected { status, headers, body } });
    }
    out
}

/// Pieces of a pattern: literal text, or a wildcard (`<any>`, or `<$name>`
/// which also remembers what it matched when it is the whole pattern).
enum Piece<'a> {
    Lit(&'a str),
    Any,
    Capture(&'a str),
}

fn pieces(p: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = p;
    while let Some(i) = rest.find('<') {
        let tail = &rest[i..];
        let token = if tail.starts_with("<any>") {
            Some((Piece::Any, 5))
        } else if let (true, Some(end)) = (tail.starts_with("<$"), tail.find('>')) {
            Some((Piece::Capture(&tail[2..end]), end + 1))
        } else {
            None
        };
        match token {
            Some((piece, len)) => {
                if i > 0 {
                    out.push(Piece::Lit(&rest[..i]));
                }
                out.push(piece);
                rest = &tail[len..];
            }
            None => {
                out.push(Piece::Lit(&rest[..i + 1]));
                rest = &rest[i + 1..];
            }
        }
    }
    if !rest.is_empty() {
        out.push(Piece::Lit(rest));
    }
    out
}

/// Whether `text` matches `pattern`, wildcards matching any text.
fn glob(pattern: &str, text: &str) -> bool {
    // Merge adjacent literals (pieces() splits at every '<').
    let mut parts: Vec<String> = vec![String::new()];
    for p in pieces(pattern) {
        match p {
            Piece::Lit(s) => parts.last_mut().unwrap().push_str(s),
            Piece::Any | Piece::Capture(_) => parts.push(String::new()),
        }
    }
    if parts.len() == 1 {
        return parts[0] == text;
    }
    let (first, last) = (&parts[0], parts.last().unwrap());
    if !text.starts_with(first.as_str()) || text.len() < first.len() + last.len() || !text.ends_with(last.as_str()) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid.as_str()) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Replaces every `<$name>` with its remembered value.
fn substitute(s: &str, vars: &HashMap<String, String>, line: usize) -> String {
    pieces(s)
        .into_iter()
        .map(|p| match p {
            Piece::Lit(l) => l.to_string(),
            Piece::Capture(name) => vars
                .get(name)
                .unwrap_or_else(|| panic!("docs/api.md:{line}: <${name}> used before a response defined it"))
                .clone(),
            Piece::Any => panic!("docs/api.md:{line}: <any> in a request"),
        })
        .collect()
}

/// Which endpoint of api.md's list a request exercises.
fn endpoint(method: &str, target: &str) -> Option<String> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segs: Vec<&str> = path.strip_prefix("/ds/")?.split('/').collect();
    let live = query.split('&').find_map(|kv| kv.strip_prefix("live="));
    Some(match (segs.len(), segs.get(1)) {
        (1, _) => format!("{method} /ds/{{bucket}}"),
        (2, Some(&"streams")) => format!("{method} /ds/{{bucket}}/streams"),
        (2, _) => match live {
            Some(l) => format!("{method} /ds/{{bucket}}/{{stream}} live={l}"),
            None => format!("{method} /ds/{{bucket}}/{{stream}}"),
        },
        (3, _) => format!("{method} /ds/{{bucket}}/{{stream}}/{}", segs[2]),
        (4, _) => format!("{method} /ds/{{bucket}}/{{stream}}/{}/{{offset}}", segs[2]),
        _ => return None,
    })
}

#[test]
fn glob_matching() {
    assert!(glob("abc", "abc"));
    assert!(!glob("abc", "abcd"));
    assert!(glob("<any>", ""));
    assert!(glob("http://<any>/ds/a", "http://127.0.0.1:1/ds/a"));
    assert!(!glob("http://<any>/ds/a", "http://127.0.0.1:1/ds/b"));
    assert!(glob("a<any>b<any>c", "a1b2c"));
    assert!(!glob("a<any>a", "a"));
    assert!(glob("<$x>", "anything"));
    assert!(glob("x < y", "x < y"));
}

/// Replays examples in order on one connection to `srv`, noting the
/// endpoints they exercise in `covered`.
fn replay(srv: &Server, examples: &[&Example], covered: &mut BTreeSet<String>) {
    let mut c = srv.conn();
    let mut vars: HashMap<String, String> = HashMap::new();
    for ex in examples {
        let line = ex.line;
        let req = &ex.request;
        let target = substitute(&req.target, &vars, line);
        let headers: Vec<(String, String)> =
            req.headers.iter().map(|(k, v)| (k.clone(), substitute(v, &vars, line))).collect();
        let header_refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let r = c.request(&req.method, &target, &header_refs, req.body.as_bytes());
        let what = format!("docs/api.md:{line}: {} {target}", req.method);
        assert_eq!(r.status, ex.response.status, "{what}: status; got {}", r.summary());
        for (name, want) in &ex.response.headers {
            let got = r.header(name).unwrap_or_else(|| panic!("{what}: no {name} header in {}", r.summary()));
            assert!(glob(want, got), "{what}: {name} is {got:?}, the doc says {want:?}");
            if let [Piece::Capture(var)] = pieces(want).as_slice() {
                vars.insert(var.to_string(), got.to_string());
            }
        }
        if let Some(want) = &ex.response.body {
            let json = r.header("content-type").is_some_and(|t| t.contains("json"));
            let (want, got) = if json {
                (squash_json(want), squash_json(&r.text()))
            } else {
                // The doc's lines end in LF; multipart bodies use CRLF.
                (want.trim_end().to_string(), r.text().replace("\r\n", "\n").trim_end().to_string())
            };
            assert!(glob(&want, &got), "{what}: body\n  got:      {got:?}\n  doc says: {want:?}");
        }
        if let Some(e) = endpoint(&req.method, &req.target) {
            covered.insert(e);
        }
    }
}

#[test]
fn every_example_in_api_md_holds() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md");
    let text = std::fs::read_to_string(&doc_path).expect("reading docs/api.md");
    let examples = parse_doc(&text);
    assert!(examples.len() >= 20, "docs/api.md has only {} examples", examples.len());

    let (marker, auth_toml) = auth_section(&text);
    let (open, guarded): (Vec<&Example>, Vec<&Example>) = examples.iter().partition(|ex| ex.line < marker);
    assert!(guarded.len() >= 10, "docs/api.md has only {} access-control examples", guarded.len());
    let mut covered = BTreeSet::new();
    replay(&Server::start_with(SERVER_FLAGS), &open, &mut covered);
    let dir = common::TempDir::new("api-doc-auth");
    let auth = dir.path().join("auth.toml");
    std::fs::write(&auth, auth_toml).unwrap();
    let flags = [SERVER_FLAGS, &["--auth-file", auth.to_str().unwrap()]].concat();
    replay(&Server::start_with(&flags), &guarded, &mut covered);

    let required = [
        "PUT /ds/{bucket}",
        "GET /ds/{bucket}",
        "DELETE /ds/{bucket}",
        "GET /ds/{bucket}/streams",
        "PUT /ds/{bucket}/{stream}",
        "POST /ds/{bucket}/{stream}",
        "GET /ds/{bucket}/{stream}",
        "GET /ds/{bucket}/{stream} live=long-poll",
        "GET /ds/{bucket}/{stream} live=sse",
        "HEAD /ds/{bucket}/{stream}",
        "DELETE /ds/{bucket}/{stream}",
        "PUT /ds/{bucket}/{stream}/snapshot/{offset}",
        "GET /ds/{bucket}/{stream}/snapshot",
        "GET /ds/{bucket}/{stream}/snapshot/{offset}",
        "DELETE /ds/{bucket}/{stream}/snapshot/{offset}",
        "GET /ds/{bucket}/{stream}/bootstrap",
        "PUT /ds/{bucket}/{stream}/retention/{offset}",
    ];
    let missing: Vec<&str> = required.iter().copied().filter(|e| !covered.contains(*e)).collect();
    assert!(missing.is_empty(), "docs/api.md has no example for {missing:?}");
}
