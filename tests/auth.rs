//! Access control through the real binary over real sockets (`--auth-file`):
//! every right against every endpoint family on both surfaces, allowed and
//! refused (and a refused write writes nothing); 401 for no, unknown and
//! malformed tokens; 403 for a covered bucket without the right; 404 for a
//! bucket the token does not cover, byte for byte the answer a missing
//! bucket gets; prefix grants; the open endpoints; SIGHUP reloads of a good
//! and of a bad file; per-token metrics.
//!
//! Bucket quotas are in tests/quotas.rs; the non-loopback refusal in
//! tests/ops.rs; malformed `Authorization` headers in tests/hostile_http.rs.

mod common;

use common::auth::{bearer, eventually, hang_up, write, write_text, AuthedServer, Grant};
use common::{Conn, Response};

const OCTET: (&str, &str) = ("Content-Type", "application/octet-stream");
const JSON: (&str, &str) = ("Content-Type", "application/json");
const COVERED: &[&str] = &["orders", "tenant-a-*"];

const READER: Grant = Grant { name: "reader", token: "reader-token-1", buckets: COVERED, rights: &["read"] };
const WRITER: Grant = Grant { name: "writer", token: "writer-token-2", buckets: COVERED, rights: &["append"] };
const MANAGER: Grant = Grant { name: "manager", token: "manager-token-3", buckets: COVERED, rights: &["manage"] };
const CURATOR: Grant =
    Grant { name: "curator", token: "curator-token-4", buckets: COVERED, rights: &["read", "manage"] };
const ADMIN: Grant = Grant { name: "admin", token: "admin-token-5", buckets: &["*"], rights: &["admin"] };
const TENANT: Grant = Grant { name: "tenant", token: "tenant-token-6", buckets: &["tenant-a-*"], rights: &["admin"] };
const EVERYONE: [Grant; 6] = [READER, WRITER, MANAGER, CURATOR, ADMIN, TENANT];

/// A server with an auth file of these tokens and no quotas.
fn start(grants: &[Grant]) -> AuthedServer {
    AuthedServer::start(grants, &[])
}

/// A request presenting `token` (None: no Authorization header).
fn req(c: &mut Conn, token: Option<&str>, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let auth = token.map(bearer);
    let mut h = headers.to_vec();
    if let Some(a) = &auth {
        h.push(("Authorization", a));
    }
    c.request(method, path, &h, body)
}

fn admin(c: &mut Conn, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    req(c, Some(ADMIN.token), method, path, headers, body)
}

fn st(r: &Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.summary());
}

fn off(pos: u64) -> String {
    format!("{:016}_{pos:016}", 0)
}

/// What one request family needs and does: `run` sets up with the admin
/// token, sends the request with `token`, and says whether it wrote (None
/// for reads).
struct Family {
    name: &'static str,
    needs: &'static [&'static str],
    ok: u16,
    run: fn(&mut Conn, &str, &str) -> (Response, Option<bool>),
}

fn exists(c: &mut Conn, path: &str) -> bool {
    let r = admin(c, "HEAD", path, &[], b"");
    assert!(r.status == 200 || r.status == 404, "HEAD {path}: {}", r.summary());
    r.status == 200
}

fn tail(c: &mut Conn, path: &str) -> String {
    admin(c, "HEAD", path, &[], b"").sno()
}

fn families() -> Vec<Family> {
    vec![
        Family {
            name: "catch-up read",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "GET", "/ds/orders/s?offset=-1", &[], b""), None),
        },
        Family {
            name: "HEAD",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "HEAD", "/ds/orders/s", &[], b""), None),
        },
        Family {
            name: "long-poll",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "GET", "/ds/orders/s?offset=-1&live=long-poll", &[], b""), None),
        },
        Family {
            name: "SSE",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| {
                // A closed stream: the SSE response ends after its events.
                let r = req(c, Some(t), "GET", "/ds/orders/closed?offset=-1&live=sse", &[], b"");
                if r.status == 200 {
                    assert!(r.text().contains("event: control"), "SSE: {}", r.summary());
                }
                (r, None)
            },
        },
        Family {
            name: "bucket info",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "GET", "/ds/orders", &[], b""), None),
        },
        Family {
            name: "bucket listing",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "GET", "/ds/orders/streams", &[], b""), None),
        },
        Family {
            name: "snapshot redirect",
            needs: &["read"],
            ok: 307,
            run: |c, t, _| (req(c, Some(t), "GET", "/ds/orders/doc/snapshot", &[], b""), None),
        },
        Family {
            name: "snapshot read",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "GET", &format!("/ds/orders/doc/snapshot/{}", off(16)), &[], b""), None),
        },
        Family {
            name: "bootstrap",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "GET", "/ds/orders/doc/bootstrap", &[], b""), None),
        },
        Family {
            name: "append",
            needs: &["append"],
            ok: 200,
            run: |c, t, _| {
                let before = tail(c, "/ds/orders/s");
                let r = req(c, Some(t), "POST", "/ds/orders/s", &[OCTET], b"more");
                let after = tail(c, "/ds/orders/s");
                (r, Some(after != before))
            },
        },
        Family {
            name: "close",
            needs: &["append"],
            ok: 200,
            run: |c, t, tag| {
                let path = format!("/ds/orders/close-{tag}");
                st(&admin(c, "PUT", &path, &[OCTET], b""), 201, "setup");
                let r = req(c, Some(t), "POST", &path, &[("Stream-Closed", "true")], b"");
                let closed = admin(c, "HEAD", &path, &[], b"").header("stream-closed") == Some("true");
                (r, Some(closed))
            },
        },
        Family {
            name: "stream create",
            needs: &["manage"],
            ok: 201,
            run: |c, t, tag| {
                let path = format!("/ds/orders/new-{tag}");
                let r = req(c, Some(t), "PUT", &path, &[OCTET], b"first");
                (r, Some(exists(c, &path)))
            },
        },
        Family {
            name: "stream delete",
            needs: &["manage"],
            ok: 204,
            run: |c, t, tag| {
                let path = format!("/ds/orders/del-{tag}");
                st(&admin(c, "PUT", &path, &[OCTET], b""), 201, "setup");
                let r = req(c, Some(t), "DELETE", &path, &[], b"");
                (r, Some(!exists(c, &path)))
            },
        },
        Family {
            name: "snapshot publish",
            needs: &["manage"],
            ok: 204,
            run: |c, t, tag| {
                let path = format!("/ds/orders/pub-{tag}");
                st(&admin(c, "PUT", &path, &[OCTET], b"12345678"), 201, "setup");
                let r = req(c, Some(t), "PUT", &format!("{path}/snapshot/{}", off(8)), &[OCTET], b"state");
                let head = admin(c, "HEAD", &path, &[], b"");
                (r, Some(head.header("stream-snapshot-offset").is_some()))
            },
        },
        Family {
            name: "snapshot delete",
            needs: &["manage"],
            ok: 204,
            run: |c, t, tag| {
                let path = format!("/ds/orders/sd-{tag}");
                st(&admin(c, "PUT", &path, &[OCTET], b"1234"), 201, "setup");
                st(&admin(c, "PUT", &format!("{path}/snapshot/{}", off(0)), &[OCTET], b"a"), 204, "setup");
                st(&admin(c, "PUT", &format!("{path}/snapshot/{}", off(4)), &[OCTET], b"b"), 204, "setup");
                let old = format!("{path}/snapshot/{}", off(0));
                let r = req(c, Some(t), "DELETE", &old, &[], b"");
                (r, Some(admin(c, "GET", &old, &[], b"").status == 404))
            },
        },
        Family {
            name: "fork",
            needs: &["manage", "read"],
            ok: 201,
            run: |c, t, tag| {
                let path = format!("/ds/orders/fork-{tag}");
                let r = req(c, Some(t), "PUT", &path, &[("Stream-Forked-From", "/ds/orders/s")], b"");
                (r, Some(exists(c, &path)))
            },
        },
        Family {
            name: "bucket create",
            needs: &["admin"],
            ok: 201,
            run: |c, t, tag| {
                let path = format!("/ds/tenant-a-new-{tag}");
                let r = req(c, Some(t), "PUT", &path, &[], b"");
                (r, Some(admin(c, "GET", &path, &[], b"").status == 200))
            },
        },
        Family {
            name: "bucket delete",
            needs: &["admin"],
            ok: 204,
            run: |c, t, tag| {
                let path = format!("/ds/tenant-a-del-{tag}");
                st(&admin(c, "PUT", &path, &[], b""), 201, "setup");
                let r = req(c, Some(t), "DELETE", &path, &[], b"");
                (r, Some(admin(c, "GET", &path, &[], b"").status == 404))
            },
        },
        Family {
            name: "v1 read",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "GET", "/v1/stream/orders/v1s?offset=-1", &[], b""), None),
        },
        Family {
            name: "v1 HEAD",
            needs: &["read"],
            ok: 200,
            run: |c, t, _| (req(c, Some(t), "HEAD", "/v1/stream/orders/v1s", &[], b""), None),
        },
        Family {
            name: "v1 append",
            needs: &["append"],
            ok: 204,
            run: |c, t, _| {
                let before = tail(c, "/v1/stream/orders/v1s");
                let r = req(c, Some(t), "POST", "/v1/stream/orders/v1s", &[OCTET], b"v1");
                (r, Some(tail(c, "/v1/stream/orders/v1s") != before))
            },
        },
        Family {
            name: "v1 create",
            needs: &["manage"],
            ok: 201,
            run: |c, t, tag| {
                let path = format!("/v1/stream/orders/v1new/{tag}");
                let r = req(c, Some(t), "PUT", &path, &[OCTET], b"");
                (r, Some(exists(c, &path)))
            },
        },
        Family {
            name: "v1 delete",
            needs: &["manage"],
            ok: 204,
            run: |c, t, tag| {
                let path = format!("/v1/stream/orders/v1del/{tag}");
                st(&admin(c, "PUT", &path, &[OCTET], b""), 201, "setup");
                let r = req(c, Some(t), "DELETE", &path, &[], b"");
                (r, Some(!exists(c, &path)))
            },
        },
    ]
}

/// The streams the families read, made with the admin token.
fn set_up(c: &mut Conn) {
    st(&admin(c, "PUT", "/ds/orders", &[], b""), 201, "bucket");
    st(&admin(c, "PUT", "/ds/orders/s", &[OCTET], b"hello"), 201, "stream");
    st(&admin(c, "PUT", "/ds/orders/closed", &[OCTET], b"bye"), 201, "closed stream");
    st(&admin(c, "POST", "/ds/orders/closed", &[("Stream-Closed", "true")], b""), 200, "close");
    st(&admin(c, "PUT", "/ds/orders/doc", &[JSON], b"[{\"a\":1},{\"a\":2}]"), 201, "doc");
    st(&admin(c, "PUT", &format!("/ds/orders/doc/snapshot/{}", off(16)), &[JSON], b"{\"n\":1}"), 204, "snapshot");
    st(&admin(c, "PUT", "/v1/stream/orders/v1s", &[OCTET], b"v1 data"), 201, "v1 stream");
}

#[test]
fn every_right_against_every_endpoint_family() {
    let a = start(&EVERYONE);
    let mut c = a.srv.conn();
    set_up(&mut c);
    for f in families() {
        for g in [READER, WRITER, MANAGER, CURATOR, ADMIN] {
            let allowed = f.needs.iter().all(|n| g.rights.contains(n) || g.rights.contains(&"admin"));
            let tag = g.name;
            let (r, wrote) = (f.run)(&mut c, g.token, tag);
            let what = format!("{} with the {} token", f.name, g.name);
            if allowed {
                st(&r, f.ok, &what);
                assert_ne!(wrote, Some(false), "{what}: allowed, but nothing was written");
            } else {
                st(&r, 403, &what);
                assert_ne!(wrote, Some(true), "{what}: refused, yet it wrote");
                if f.name != "HEAD" && f.name != "v1 HEAD" {
                    assert!(r.text().contains(&format!("token \"{}\"", g.name)), "{what}: {}", r.summary());
                }
            }
        }
    }
    // /metrics shows every bucket's traffic and every token's name: only
    // admin over every bucket may read it.
    for g in [READER, WRITER, MANAGER, CURATOR, TENANT] {
        st(&req(&mut c, Some(g.token), "GET", "/metrics", &[], b""), 403, &format!("/metrics for {}", g.name));
    }
    st(&admin(&mut c, "GET", "/metrics", &[], b""), 200, "/metrics for admin");
}

#[test]
fn no_unknown_or_malformed_tokens_get_401_on_both_surfaces() {
    let a = start(&EVERYONE);
    let mut c = a.srv.conn();
    set_up(&mut c);
    let tail_before = tail(&mut c, "/ds/orders/s");
    let v1_before = tail(&mut c, "/v1/stream/orders/v1s");
    let cases: [(&str, &str, &[u8]); 9] = [
        ("GET", "/ds/orders/s?offset=-1", b""),
        ("HEAD", "/ds/orders/s", b""),
        ("POST", "/ds/orders/s", b"nope"),
        ("PUT", "/ds/orders/made", b""),
        ("PUT", "/ds/tenant-a-made", b""),
        ("GET", "/v1/stream/orders/v1s?offset=-1", b""),
        ("POST", "/v1/stream/orders/v1s", b"nope"),
        ("GET", "/metrics", b""),
        ("GET", "/nowhere", b""),
    ];
    for (method, path, body) in cases {
        for (auth, error) in [
            (None, None),
            (Some("Bearer not-a-token"), Some("invalid_token")),
            (Some("Basic YWRtaW46YWRtaW4="), Some("invalid_request")),
            (Some("Bearer admin-token-5 extra"), Some("invalid_request")),
        ] {
            let mut h = vec![OCTET];
            if let Some(v) = auth {
                h.push(("Authorization", v));
            }
            let r = c.request(method, path, &h, body);
            let what = format!("{method} {path} with {auth:?}");
            st(&r, 401, &what);
            let challenge = r.must("www-authenticate");
            assert!(challenge.starts_with("Bearer realm=\"ringstream\""), "{what}: {challenge}");
            match error {
                Some(e) => assert!(challenge.contains(&format!("error=\"{e}\"")), "{what}: {challenge}"),
                None => assert!(!challenge.contains("error="), "{what}: {challenge}"),
            }
            // An unauthenticated body is not read: the connection closes.
            let closes = r.header("connection") == Some("close");
            assert_eq!(closes, !body.is_empty(), "{what}: {}", r.summary());
        }
    }
    // Nothing above reached a shard.
    assert_eq!(tail(&mut c, "/ds/orders/s"), tail_before);
    assert_eq!(tail(&mut c, "/v1/stream/orders/v1s"), v1_before);
    assert!(!exists(&mut c, "/ds/orders/made"));
    st(&admin(&mut c, "GET", "/ds/tenant-a-made", &[], b""), 404, "bucket made without a token");
    // Two Authorization headers are ambiguous, even if one is good.
    let two = [("Authorization", "Bearer admin-token-5"), ("Authorization", "Bearer admin-token-5")];
    st(&c.request("GET", "/ds/orders", &two, b""), 401, "two Authorization headers");
    // Open without a token: the probes and CORS preflights.
    st(&c.request("GET", "/healthz", &[], b""), 200, "/healthz");
    st(&c.request("GET", "/readyz", &[], b""), 200, "/readyz");
    st(&c.request("HEAD", "/healthz", &[], b""), 200, "HEAD /healthz");
    let pre = c.request("OPTIONS", "/ds/orders/s", &[("Access-Control-Request-Headers", "authorization")], b"");
    st(&pre, 204, "preflight");
    assert!(pre.must("access-control-allow-headers").contains("Authorization"), "{}", pre.summary());
    // The scheme is case-insensitive, and a keep-alive connection goes on
    // after a 401 without a body.
    let mut k = a.srv.conn();
    st(&k.request("GET", "/ds/orders", &[], b""), 401, "no token");
    st(&k.request("GET", "/ds/orders", &[("Authorization", "bEaReR reader-token-1")], b""), 200, "any case");
}

/// Status, type and body: what a client can tell two answers apart by.
fn answer(r: &Response) -> (u16, Option<String>, Vec<u8>) {
    (r.status, r.header("content-type").map(str::to_string), r.body.clone())
}

#[test]
fn buckets_a_token_does_not_cover_answer_404_like_missing_ones() {
    let a = start(&EVERYONE);
    let mut c = a.srv.conn();
    set_up(&mut c);
    st(&admin(&mut c, "PUT", "/ds/secret", &[], b""), 201, "hidden bucket");
    st(&admin(&mut c, "PUT", "/ds/secret/s", &[OCTET], b"classified"), 201, "hidden stream");
    st(&admin(&mut c, "PUT", "/v1/stream/secret/v", &[OCTET], b"classified"), 201, "hidden v1 stream");
    let cases: [(&str, &str, &str, &str); 10] = [
        ("GET", "/ds/secret", "/ds/nosuch", "bucket info"),
        ("GET", "/ds/secret/streams", "/ds/nosuch/streams", "listing"),
        ("DELETE", "/ds/secret", "/ds/nosuch", "bucket delete"),
        ("GET", "/ds/secret/s?offset=-1", "/ds/nosuch/s?offset=-1", "read"),
        ("HEAD", "/ds/secret/s", "/ds/nosuch/s", "HEAD"),
        ("POST", "/ds/secret/s", "/ds/nosuch/s", "append"),
        ("PUT", "/ds/secret/new", "/ds/nosuch/new", "create"),
        ("DELETE", "/ds/secret/s", "/ds/nosuch/s", "delete"),
        ("GET", "/v1/stream/secret/v?offset=-1", "/v1/stream/nosuch/v?offset=-1", "v1 read"),
        ("POST", "/v1/stream/secret/v", "/v1/stream/nosuch/v", "v1 append"),
    ];
    for g in [READER, WRITER, MANAGER, CURATOR, TENANT] {
        for (method, hidden, missing, what) in cases {
            let body: &[u8] = if method == "POST" { b"leak?" } else { b"" };
            let h = req(&mut c, Some(g.token), method, hidden, &[OCTET], body);
            let m = admin(&mut c, method, missing, &[OCTET], body);
            let what = format!("{what} in a bucket {} does not cover", g.name);
            st(&h, 404, &what);
            assert_eq!(answer(&h), answer(&m), "{what}: the hidden bucket answers unlike a missing one");
            assert!(h.header("connection").is_none(), "{what}: {}", h.summary());
        }
    }
    // Nothing was written or deleted in it.
    let r = admin(&mut c, "GET", "/ds/secret/s?offset=-1", &[], b"");
    assert_eq!(r.text(), "classified", "{}", r.summary());
    assert_eq!(admin(&mut c, "GET", "/v1/stream/secret/v?offset=-1", &[], b"").text(), "classified");
    assert!(!exists(&mut c, "/ds/secret/new"));
    st(&admin(&mut c, "GET", "/ds/secret", &[], b""), 200, "the hidden bucket is still there");
    // A fork whose source the token does not cover: 404, as for a missing source.
    let fork = |from: &'static str| [OCTET, ("Stream-Forked-From", from)];
    let h = req(&mut c, Some(CURATOR.token), "PUT", "/ds/orders/f1", &fork("/ds/secret/s"), b"");
    let m = req(&mut c, Some(CURATOR.token), "PUT", "/ds/orders/f2", &fork("/ds/orders/nosuch"), b"");
    st(&h, 404, "fork of a hidden source");
    assert_eq!(answer(&h), answer(&m));
    assert!(!exists(&mut c, "/ds/orders/f1"));
    // Hidden wins over forbidden: the reader may not append anywhere, but
    // in a bucket it does not cover it learns only "not found".
    st(&req(&mut c, Some(READER.token), "POST", "/ds/orders/s", &[OCTET], b"x"), 403, "covered");
    st(&req(&mut c, Some(READER.token), "POST", "/ds/secret/s", &[OCTET], b"x"), 404, "not covered");
}

#[test]
fn prefix_grants_cover_exactly_the_names_they_start() {
    let a = start(&EVERYONE);
    let mut c = a.srv.conn();
    let t = Some(TENANT.token);
    st(&req(&mut c, t, "PUT", "/ds/tenant-a-one", &[], b""), 201, "a covered bucket");
    st(&req(&mut c, t, "PUT", "/ds/tenant-a-one/s", &[OCTET], b"x"), 201, "a stream in it");
    st(&req(&mut c, t, "POST", "/ds/tenant-a-one/s", &[OCTET], b"y"), 200, "admin appends too");
    st(&req(&mut c, t, "PUT", "/v1/stream/tenant-a-two/deep/path", &[OCTET], b""), 201, "v1 under the prefix");
    for other in ["/ds/tenant-b-one", "/ds/tenant-a", "/ds/xtenant-a-one", "/ds/orders"] {
        st(&req(&mut c, t, "PUT", other, &[], b""), 404, other);
        st(&admin(&mut c, "GET", other, &[], b""), 404, &format!("{other} was not made"));
    }
    st(&req(&mut c, t, "PUT", "/v1/stream/tenant-b/x", &[OCTET], b""), 404, "v1 outside the prefix");
    // Admin of some buckets is not admin of the server.
    st(&req(&mut c, t, "GET", "/metrics", &[], b""), 403, "/metrics");
    // A prefix grant of read sees listings of every covered bucket.
    let r = req(&mut c, Some(READER.token), "GET", "/ds/tenant-a-one/streams", &[], b"");
    st(&r, 200, "listing");
    assert!(r.text().contains("\"stream_count\":1"), "{}", r.summary());
}

#[test]
fn sighup_reloads_a_good_file_and_keeps_the_grants_when_the_file_is_bad() {
    let mut a = start(&[READER, ADMIN]);
    let mut c = a.srv.conn();
    st(&admin(&mut c, "PUT", "/ds/orders", &[], b""), 201, "bucket");
    st(&req(&mut c, Some(READER.token), "GET", "/ds/orders", &[], b""), 200, "reader before");
    const LATE: Grant = Grant { name: "late", token: "late-token-7", buckets: &["orders"], rights: &["read"] };
    let admin_requests = |c: &mut Conn| -> f64 {
        let r = admin(c, "GET", "/metrics", &[], b"");
        st(&r, 200, "metrics");
        r.text()
            .lines()
            .filter(|l| l.starts_with("ringstream_token_requests_total{") && l.contains("token=\"admin\""))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
            .sum()
    };
    let before = admin_requests(&mut c);
    assert!(before >= 2.0, "{before}");

    // A good file: the reader goes, a new token comes, without a restart.
    write(&a.file, &[LATE, ADMIN], &[]);
    hang_up(a.srv.pid());
    eventually("the new token works", || req(&mut c, Some(LATE.token), "GET", "/ds/orders", &[], b"").status == 200);
    st(&req(&mut c, Some(READER.token), "GET", "/ds/orders", &[], b""), 401, "the removed token");
    assert!(admin_requests(&mut c) > before, "a token kept by name keeps its counts");
    eventually("the reload is logged", || a.srv.log_tail().contains("SIGHUP: reloaded"));

    // Bad files: each is refused with its reason, and the grants stay.
    let bad = [
        ("[[token]]\nname = 3\n", "invalid type"),
        (
            "[[token]]\nname = \"x\"\nsha256 = \"reader-token-1\"\nbuckets = [\"*\"]\nrights = [\"admin\"]\n",
            "sha256 must be",
        ),
        ("[[token]]\nname = \"x\"\n", "missing field"),
    ];
    for (n, (text, why)) in bad.iter().enumerate() {
        write_text(&a.file, text);
        hang_up(a.srv.pid());
        let want = n + 1;
        eventually("the bad file is reported", || a.srv.log_tail().matches("the grants in force stay").count() >= want);
        let log = a.srv.log_tail();
        assert!(log.contains(why), "{why}: {log}");
        st(&req(&mut c, Some(LATE.token), "GET", "/ds/orders", &[], b""), 200, "the grants in force stayed");
        st(&req(&mut c, Some(READER.token), "GET", "/ds/orders", &[], b""), 401, "nothing of the bad file");
    }
    // A file that vanished is refused the same way.
    std::fs::remove_file(&a.file).unwrap();
    hang_up(a.srv.pid());
    eventually("the missing file is reported", || a.srv.log_tail().matches("the grants in force stay").count() >= 4);
    st(&req(&mut c, Some(LATE.token), "GET", "/ds/orders", &[], b""), 200, "still in force");
    // And a good file after bad ones is taken.
    write(&a.file, &[READER, ADMIN], &[]);
    hang_up(a.srv.pid());
    eventually("the reader is back", || req(&mut c, Some(READER.token), "GET", "/ds/orders", &[], b"").status == 200);
    st(&req(&mut c, Some(LATE.token), "GET", "/ds/orders", &[], b""), 401, "late is gone");
    // The server never stopped serving: the same process all along.
    assert_eq!(a.srv.log_tail().matches("ringstream starting").count(), 1);
    a.srv.kill9();
}

/// Sums the samples of one family with one label, over every shard.
fn total(metrics: &str, family: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(label))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

#[test]
fn metrics_count_requests_403s_and_404s_by_token_name_and_401s_by_reason() {
    let a = start(&EVERYONE);
    let mut c = a.srv.conn();
    st(&admin(&mut c, "PUT", "/ds/orders", &[], b""), 201, "bucket");
    let r = Some(READER.token);
    for _ in 0..3 {
        st(&req(&mut c, r, "GET", "/ds/orders", &[], b""), 200, "read");
    }
    st(&req(&mut c, r, "DELETE", "/ds/orders", &[], b""), 403, "forbidden");
    st(&req(&mut c, r, "GET", "/ds/secret", &[], b""), 404, "hidden");
    st(&req(&mut c, r, "GET", "/ds/tenant-a-nosuch", &[], b""), 404, "covered, missing");
    for _ in 0..2 {
        st(&req(&mut c, Some("wrong"), "GET", "/ds/orders", &[], b""), 401, "unknown");
    }
    st(&c.request("GET", "/ds/orders", &[], b""), 401, "missing");
    st(&c.request("GET", "/ds/orders", &[("Authorization", "Bearer")], b""), 401, "malformed");
    let m = admin(&mut c, "GET", "/metrics", &[], b"").text();
    let reader = "token=\"reader\"";
    assert_eq!(total(&m, "ringstream_token_requests_total", reader), 6.0, "{m}");
    assert_eq!(total(&m, "ringstream_token_forbidden_total", reader), 1.0);
    assert_eq!(total(&m, "ringstream_token_hidden_total", reader), 1.0, "a missing covered bucket is not hidden");
    assert_eq!(total(&m, "ringstream_unauthorized_total", "reason=\"unknown\""), 2.0);
    assert_eq!(total(&m, "ringstream_unauthorized_total", "reason=\"missing\""), 1.0);
    assert_eq!(total(&m, "ringstream_unauthorized_total", "reason=\"malformed\""), 1.0);
    assert_eq!(total(&m, "ringstream_token_requests_total", "token=\"writer\""), 0.0);
    assert!(total(&m, "ringstream_token_requests_total", "token=\"admin\"") >= 2.0);
    assert_eq!(total(&m, "ringstream_http_requests_total", "status=\"401\""), 4.0);
    // Token names, never their secrets.
    assert!(!m.contains(READER.token) && !m.contains(&common::auth::sha256_hex(READER.token)));
    let log = std::fs::read_to_string(a.srv.log_path()).unwrap();
    for g in EVERYONE {
        assert!(!log.contains(g.token), "the log shows a token: {log}");
    }
    assert!(log.contains("access control: on") && log.contains("reader"), "{log}");
}
