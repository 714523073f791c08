//! The /ds product surface (snakream.md) end to end: bucket listings
//! (pages, cursors, prefixes, parameters, what is left out), every row of
//! the /ds vs /v1 dialect table on both surfaces, bucket edge cases, and
//! the same checks after a restart on the same data directory.
//!
//! Write backpressure (the 503 row of the table) is in tests/backpressure.rs.

mod common;

use common::{read_all, Conn, Response, Server, ZERO_OFFSET};
use ringstream::protocol::StreamKey;
use ringstream::shard::router::shard_for;
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const OCTET: (&str, &str) = ("Content-Type", "application/octet-stream");
const TEXT: (&str, &str) = ("Content-Type", "text/plain");
const JSON: (&str, &str) = ("Content-Type", "application/json");
/// Shards of the test server (`Server::start` runs 2).
const SHARDS: usize = 2;

fn st(r: &Response, want: u16, what: &str) {
    assert_eq!(r.status, want, "{what}: {}", r.summary());
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn ds(bucket: &str, stream: &str) -> String {
    format!("/ds/{bucket}/{}", enc(stream))
}

fn v1(bucket: &str, stream: &str) -> String {
    format!("/v1/stream/{bucket}/{}", enc(stream))
}

fn producer(id: &'static str, epoch: &'static str, seq: &'static str) -> [(&'static str, &'static str); 4] {
    [TEXT, ("Producer-Id", id), ("Producer-Epoch", epoch), ("Producer-Seq", seq)]
}

/// One listing page, checked for the shape snakream.md gives it.
fn list(c: &mut Conn, bucket: &str, query: &str) -> Value {
    let path = format!("/ds/{bucket}/streams{query}");
    let r = c.request("GET", &path, &[], b"");
    st(&r, 200, &format!("GET {path}"));
    assert_eq!(r.header("content-type"), Some("application/json"), "GET {path}");
    let v: Value =
        serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("GET {path}: bad JSON ({e}): {}", r.text()));
    let o = v.as_object().unwrap_or_else(|| panic!("GET {path}: not an object: {v}"));
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["bucket_id", "has_more", "next_cursor", "prefix", "stream_count", "streams"], "GET {path}");
    assert_eq!(v["bucket_id"], bucket);
    assert!(v["stream_count"].is_u64() && v["has_more"].is_boolean(), "GET {path}: {v}");
    for s in v["streams"].as_array().unwrap() {
        let mut keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["content_type", "created_at_ms", "last_write_at_ms", "status", "stream_id", "tail_offset"],
            "GET {path}: {s}"
        );
        assert!(s["status"] == "open" || s["status"] == "closed", "{s}");
        assert!(s["created_at_ms"].is_i64() && s["last_write_at_ms"].is_i64(), "{s}");
    }
    v
}

fn ids(page: &Value) -> Vec<String> {
    page["streams"].as_array().unwrap().iter().map(|s| s["stream_id"].as_str().unwrap().to_string()).collect()
}

/// Every entry of a prefix, page by page (`limit` each) through `next_cursor`.
/// Checks the paging fields on the way and that `stream_count` is the same
/// on every page.
fn list_all(c: &mut Conn, bucket: &str, prefix: &str, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    let mut count = None;
    for _ in 0..10_000 {
        let mut q = format!("?prefix={}&limit={limit}", enc(prefix));
        if let Some(a) = &after {
            q.push_str(&format!("&after={}", enc(a)));
        }
        let page = list(c, bucket, &q);
        assert_eq!(page["prefix"], prefix);
        let n = page["stream_count"].as_u64().unwrap();
        assert_eq!(*count.get_or_insert(n), n, "stream_count changes between pages");
        let streams = page["streams"].as_array().unwrap().clone();
        assert!(streams.len() <= limit, "page longer than limit {limit}: {page}");
        if page["has_more"] == true {
            assert_eq!(streams.len(), limit, "a page with more after it is full: {page}");
            assert_eq!(page["next_cursor"], streams.last().unwrap()["stream_id"], "next_cursor is the last ID");
            after = Some(page["next_cursor"].as_str().unwrap().to_string());
            out.extend(streams);
        } else {
            assert!(page["next_cursor"].is_null(), "the last page has no cursor: {page}");
            out.extend(streams);
            assert_eq!(out.len() as u64, n, "stream_count counts every matching stream");
            return out;
        }
    }
    panic!("listing did not end");
}

fn make_bucket(c: &mut Conn, b: &str) {
    st(&c.request("PUT", &format!("/ds/{b}"), &[], b""), 201, &format!("PUT /ds/{b}"));
}

// ---------------------------------------------------------------------------
// Listings

/// A bucket whose streams land on both shards, with a mix of states:
/// returns every stream ID.
fn populate_listing_bucket(c: &mut Conn, b: &str) -> Vec<String> {
    make_bucket(c, b);
    let mut all: Vec<String> = (0..30).map(|i| format!("s-{i:02}")).collect();
    all.extend(["t-a", "t-b", "Z-upper", "a b", "é-accent", "ü", "s", "q\"uote\\back"].map(String::from));
    for id in &all {
        let ct = if id.starts_with("t-") { JSON } else { TEXT };
        let body: &[u8] = if id.starts_with("t-") { b"[1,2]" } else { id.as_bytes() };
        st(&c.request("PUT", &ds(b, id), &[ct], body), 201, &format!("PUT {id}"));
    }
    std::thread::sleep(Duration::from_millis(5));
    st(&c.request("POST", &ds(b, "s-07"), &[TEXT], b"more"), 200, "append");
    st(&c.request("POST", &ds(b, "s-07"), &[TEXT], b"and more"), 200, "append");
    st(&c.request("POST", &ds(b, "s-05"), &[("Stream-Closed", "true")], b""), 200, "close");
    st(&c.request("POST", &v1(b, "s-06"), &[TEXT, ("Stream-Closed", "true")], b"!"), 204, "append+close on /v1");
    let owners: Vec<usize> =
        all.iter().map(|s| shard_for(&StreamKey { bucket: b.into(), stream: s.clone() }, SHARDS)).collect();
    assert!((0..SHARDS).all(|i| owners.contains(&i)), "test streams must span every shard: {owners:?}");
    all.sort();
    all
}

/// Every entry agrees with HEAD on the stream: tail_offset is the
/// Stream-Next-Offset token, status is Stream-Closed, content type.
fn check_entries_against_head(c: &mut Conn, b: &str, entries: &[Value], t0: i64, t1: i64) {
    for e in entries {
        let id = e["stream_id"].as_str().unwrap();
        let h = c.request("HEAD", &ds(b, id), &[], b"");
        st(&h, 200, &format!("HEAD {id}"));
        assert_eq!(e["tail_offset"], h.sno(), "tail_offset of {id} is HEAD's Stream-Next-Offset");
        let closed = h.header("stream-closed") == Some("true");
        assert_eq!(e["status"], if closed { "closed" } else { "open" }, "status of {id}");
        assert_eq!(e["content_type"], h.must("content-type"), "content_type of {id}");
        let (created, written) = (e["created_at_ms"].as_i64().unwrap(), e["last_write_at_ms"].as_i64().unwrap());
        assert!(
            t0 <= created && created <= written && written <= t1,
            "{id}: times {created}, {written} not in [{t0}, {t1}]"
        );
    }
}

#[test]
fn listing_pages_prefixes_and_fields() {
    let srv = Server::start();
    let mut c = srv.conn();
    let b = "listing";
    let t0 = now_ms();
    let all = populate_listing_bucket(&mut c, b);
    let t1 = now_ms();

    // Default limit (1000): everything on one page, sorted by byte order.
    let page = list(&mut c, b, "");
    assert_eq!(ids(&page), all, "one page, sorted by stream ID bytes");
    assert_eq!(page["stream_count"], all.len());
    assert_eq!(page["prefix"], "");
    assert_eq!(page["has_more"], false);
    assert!(page["next_cursor"].is_null());

    // Pages of 7, following next_cursor; also pages of 1 and exact multiples.
    for limit in [1, 7, all.len(), all.len() - 1, 1000] {
        let got: Vec<String> =
            list_all(&mut c, b, "", limit).iter().map(|s| s["stream_id"].as_str().unwrap().into()).collect();
        assert_eq!(got, all, "pages of {limit}");
    }

    // Fields agree with HEAD.
    let entries = list_all(&mut c, b, "", 1000);
    check_entries_against_head(&mut c, b, &entries, t0, t1);
    let by_id = |id: &str| entries.iter().find(|e| e["stream_id"] == id).unwrap().clone();
    assert_eq!(by_id("s-05")["status"], "closed");
    assert_eq!(by_id("s-06")["status"], "closed");
    assert_eq!(by_id("s-04")["status"], "open");
    assert_eq!(by_id("t-a")["content_type"], "application/json");
    assert_eq!(by_id("s-04")["content_type"], "text/plain");
    let s07 = by_id("s-07");
    assert!(s07["last_write_at_ms"].as_i64() > s07["created_at_ms"].as_i64(), "appends move last_write_at_ms: {s07}");
    assert_eq!(by_id("s-04")["last_write_at_ms"], by_id("s-04")["created_at_ms"], "never appended");
    assert_eq!(s07["tail_offset"], "0000000000000000_0000000000000016", "4 + 4 + 8 bytes");

    // Prefixes: stream_count counts the prefix's matches over all pages.
    let s_ids: Vec<String> = all.iter().filter(|s| s.starts_with("s-")).cloned().collect();
    assert_eq!(s_ids.len(), 30);
    let got: Vec<String> =
        list_all(&mut c, b, "s-", 4).iter().map(|s| s["stream_id"].as_str().unwrap().into()).collect();
    assert_eq!(got, s_ids);
    let page = list(&mut c, b, "?prefix=s-&limit=4");
    assert_eq!(page["stream_count"], 30);
    assert_eq!(ids(&page), ["s-00", "s-01", "s-02", "s-03"]);
    assert_eq!(page["next_cursor"], "s-03");
    assert_eq!(page["has_more"], true);
    let page = list(&mut c, b, "?prefix=s");
    assert_eq!(page["stream_count"], 31, "prefix s matches s-* and s itself");
    assert_eq!(ids(&page)[0], "s");
    let page = list(&mut c, b, &format!("?prefix={}", enc("é")));
    assert_eq!(ids(&page), ["é-accent"]);
    assert_eq!(page["prefix"], "é");
    let page = list(&mut c, b, "?prefix=nothing-here");
    assert_eq!(page["stream_count"], 0);
    assert_eq!(page["streams"], Value::Array(vec![]));
    assert_eq!(page["has_more"], false);
    assert!(page["next_cursor"].is_null());

    // `after` is exclusive, need not name a stream, and combines with prefix.
    assert_eq!(ids(&list(&mut c, b, "?prefix=s-&after=s-28")), ["s-29"]);
    assert_eq!(ids(&list(&mut c, b, "?prefix=s-&after=s-285")), ["s-29"]);
    assert_eq!(ids(&list(&mut c, b, "?after=t-a&limit=2")), ["t-b", "é-accent"]);
    let page = list(&mut c, b, &format!("?after={}", enc("ü")));
    assert_eq!(page["streams"], Value::Array(vec![]), "nothing sorts after ü here");
    assert_eq!(page["stream_count"], all.len(), "stream_count ignores the cursor");
    assert_eq!(page["has_more"], false);
    let page = list(&mut c, b, "?after=&limit=3");
    assert_eq!(ids(&page), all[..3]);
}

#[test]
fn listing_leaves_out_deleted_soft_deleted_and_expired_streams() {
    let srv = Server::start();
    let mut c = srv.conn();
    let b = "leftout";
    make_bucket(&mut c, b);
    for s in ["keep", "gone", "src", "ttl"] {
        let h: &[(&str, &str)] = if s == "ttl" { &[TEXT, ("Stream-TTL", "1")] } else { &[TEXT] };
        st(&c.request("PUT", &ds(b, s), h, b"data"), 201, s);
    }
    st(&c.request("PUT", &ds(b, "fork"), &[TEXT, ("Stream-Forked-From", "/ds/leftout/src")], b""), 201, "fork");
    assert_eq!(ids(&list(&mut c, b, "")), ["fork", "gone", "keep", "src", "ttl"]);

    st(&c.request("DELETE", &ds(b, "gone"), &[], b""), 204, "delete");
    // A source with a live fork is only soft-deleted: 410 to clients, not listed.
    st(&c.request("DELETE", &ds(b, "src"), &[], b""), 204, "delete fork source");
    st(&c.request("GET", &ds(b, "src"), &[], b""), 410, "soft-deleted source");
    std::thread::sleep(Duration::from_millis(2200));
    let page = list(&mut c, b, "");
    assert_eq!(ids(&page), ["fork", "keep"], "deleted, soft-deleted and expired streams are not listed");
    assert_eq!(page["stream_count"], 2);
    let r = c.request("GET", &format!("/ds/{b}"), &[], b"");
    assert_eq!(serde_json::from_slice::<Value>(&r.body).unwrap()["streams"], 2, "GET bucket agrees");
}

#[test]
fn listing_parameters_and_missing_buckets() {
    let srv = Server::start();
    let mut c = srv.conn();
    let b = "params";
    make_bucket(&mut c, b);
    let page = list(&mut c, b, "");
    assert_eq!(page["stream_count"], 0, "an empty bucket");
    assert_eq!(page["streams"], Value::Array(vec![]));
    for s in ["a", "b", "c"] {
        st(&c.request("PUT", &ds(b, s), &[OCTET], b""), 201, s);
    }
    for bad in ["0", "1001", "abc", "-1", "", "1.5", "+5", " 5", "99999999999999999999999"] {
        let r = c.request("GET", &format!("/ds/{b}/streams?limit={}", enc(bad)), &[], b"");
        st(&r, 400, &format!("limit={bad:?}"));
    }
    st(&c.request("GET", &format!("/ds/{b}/streams?limit=1&limit=2"), &[], b""), 400, "limit twice");
    st(&c.request("GET", &format!("/ds/{b}/streams?after=a&after=b"), &[], b""), 400, "after twice");
    st(&c.request("GET", &format!("/ds/{b}/streams?prefix=a&prefix=b"), &[], b""), 400, "prefix twice");
    let page = list(&mut c, b, "?limit=1");
    assert_eq!(
        (ids(&page), &page["has_more"], &page["next_cursor"]),
        (vec!["a".to_string()], &Value::Bool(true), &Value::from("a"))
    );
    let page = list(&mut c, b, "?limit=1000&unknown=1");
    assert_eq!(ids(&page), ["a", "b", "c"], "unknown parameters are ignored");
    let page = list(&mut c, b, "?limit=3");
    assert_eq!(page["has_more"], false, "exactly limit streams: no more");
    assert!(page["next_cursor"].is_null());

    st(&c.request("GET", "/ds/nosuchbucket/streams", &[], b""), 404, "listing a missing bucket");
    st(&c.request("GET", "/ds/AB/streams", &[], b""), 400, "listing a bad bucket ID");
    st(&c.request("PUT", &format!("/ds/{b}/streams"), &[OCTET], b""), 400, "PUT the reserved ID");
    st(&c.request("POST", &format!("/ds/{b}/streams"), &[OCTET], b"x"), 400, "POST the reserved ID");
    // A bucket whose streams were made through /v1 only does not exist on /ds.
    st(&c.request("PUT", "/v1/stream/v1only/s", &[OCTET], b""), 201, "/v1 create in an implicit bucket");
    st(&c.request("GET", "/ds/v1only/streams", &[], b""), 404, "implicit /v1 bucket on /ds");
    // Deleted buckets cannot be listed.
    for s in ["a", "b", "c"] {
        st(&c.request("DELETE", &ds(b, s), &[], b""), 204, s);
    }
    st(&c.request("DELETE", &format!("/ds/{b}"), &[], b""), 204, "delete the bucket");
    st(&c.request("GET", &format!("/ds/{b}/streams"), &[], b""), 404, "listing a deleted bucket");
}

// ---------------------------------------------------------------------------
// The dialect table, row by row, on both surfaces of the same streams

/// Checks every row of snakream.md's dialect table (except 503, see
/// tests/backpressure.rs) on streams `{prefix}-*` of bucket `b`. `fresh`:
/// the streams do not exist yet (else they were made by an earlier call and
/// the server restarted since, so producer state must have survived).
fn dialect_rows(c: &mut Conn, b: &str, fresh: bool) {
    // Row: append accepted, no producer headers: /ds 200 + SNO + ETag, /v1 204 + SNO.
    let (pd, pv) = (ds(b, "plain"), v1(b, "plain"));
    if fresh {
        st(&c.request("PUT", &pd, &[TEXT], b""), 201, "PUT plain");
    }
    let before = read_all(c, &pd).0;
    let r = c.request("POST", &pd, &[TEXT], b"d");
    st(&r, 200, "/ds append");
    let sno = r.sno();
    assert!(r.header("etag").is_some_and(|e| !e.is_empty()), "/ds append has an ETag");
    assert_eq!(r.body, b"");
    let r = c.request("POST", &pv, &[TEXT], b"v");
    st(&r, 204, "/v1 append");
    assert!(r.sno() > sno);
    assert_eq!(read_all(c, &pd).0, [&before[..], b"dv"].concat());

    // Rows: producer accepted (200 both), duplicate (/ds 200 original SNO, /v1 204),
    // stale epoch (/ds 409, /v1 403, + Producer-Epoch), gap (409 both, + expected/received).
    for (surface, p) in [("ds", ds(b, "prod-ds")), ("v1", v1(b, "prod-v1"))] {
        let is_ds = surface == "ds";
        if fresh {
            let create = if is_ds { ds(b, "prod-ds") } else { v1(b, "prod-v1") };
            st(&c.request("PUT", &create, &[TEXT], b""), 201, "PUT producer stream");
            let r = c.request("POST", &p, &producer("w", "0", "0"), b"a");
            st(&r, 200, &format!("{surface}: producer seq 0"));
            assert_eq!((r.header("producer-epoch"), r.header("producer-seq")), (Some("0"), Some("0")));
        }
        // The last accepted tuple: (0, 0) now, (1, 0) after the epoch bump below.
        let epoch = if fresh { "0" } else { "1" };
        let (data, tail, _) = read_all(c, &p);
        let r = c.request("POST", &p, &producer("w", epoch, "0"), b"a");
        st(&r, if is_ds { 200 } else { 204 }, &format!("{surface}: producer duplicate"));
        assert_eq!(r.sno(), tail, "{surface}: a duplicate of the last append answers its SNO");
        assert_eq!((r.header("producer-epoch"), r.header("producer-seq")), (Some(epoch), Some("0")));
        if fresh {
            let r = c.request("POST", &p, &producer("w", "0", "3"), b"gap");
            st(&r, 409, &format!("{surface}: sequence gap"));
            assert_eq!(r.header("producer-expected-seq"), Some("1"));
            assert_eq!(r.header("producer-received-seq"), Some("3"));
            let r = c.request("POST", &p, &producer("w", "1", "0"), b"b");
            st(&r, 200, &format!("{surface}: new epoch"));
            assert_eq!((r.header("producer-epoch"), r.header("producer-seq")), (Some("1"), Some("0")));
        }
        let r = c.request("POST", &p, &producer("w", "0", "1"), b"zombie");
        st(&r, if is_ds { 409 } else { 403 }, &format!("{surface}: stale epoch"));
        assert_eq!(r.header("producer-epoch"), Some("1"));
        let r = c.request("POST", &p, &producer("w", "1", "7"), b"gap");
        st(&r, 409, &format!("{surface}: sequence gap at epoch 1"));
        assert_eq!(r.header("producer-expected-seq"), Some("1"));
        assert_eq!(r.header("producer-received-seq"), Some("7"));
        let expect: &[u8] = if fresh { b"ab" } else { &data };
        assert_eq!(read_all(c, &p).0, expect, "{surface}: duplicates and rejections wrote nothing");
        // The same stream through the other surface answers in that surface's dialect.
        let other = if is_ds { v1(b, "prod-ds") } else { ds(b, "prod-v1") };
        let r = c.request("POST", &other, &producer("w", "0", "9"), b"zombie");
        st(&r, if is_ds { 403 } else { 409 }, &format!("{surface} stream, stale epoch on the other surface"));
    }

    // Row: catch-up read exactly at the tail of an open stream:
    // /ds 204 + SNO + Stream-Up-To-Date, /v1 200 with an empty body ([] for JSON).
    for (name, ct, empty) in [("tail-bytes", TEXT, &b""[..]), ("tail-json", JSON, &b"[]"[..])] {
        if fresh {
            st(&c.request("PUT", &ds(b, name), &[ct], b""), 201, name);
            let r = c.request("GET", &format!("{}?offset=-1", ds(b, name)), &[], b"");
            st(&r, 204, &format!("/ds read of an empty stream ({name})"));
            assert_eq!(r.sno(), ZERO_OFFSET);
            let body: &[u8] = if ct == JSON { b"[\"x\"]" } else { b"x" };
            st(&c.request("POST", &ds(b, name), &[ct], body), 200, name);
        }
        let tail = c.request("HEAD", &ds(b, name), &[], b"").sno();
        let r = c.request("GET", &format!("{}?offset={tail}", ds(b, name)), &[], b"");
        st(&r, 204, &format!("/ds read at the tail ({name})"));
        assert_eq!(r.sno(), tail);
        assert_eq!(r.header("stream-up-to-date"), Some("true"));
        let r = c.request("GET", &format!("{}?offset={tail}", v1(b, name)), &[], b"");
        st(&r, 200, &format!("/v1 read at the tail ({name})"));
        assert_eq!(r.body, empty, "{name}");
        assert_eq!(r.sno(), tail);
        assert_eq!(r.header("stream-up-to-date"), Some("true"));
    }
    // A closed stream at its tail: 200 with Stream-Closed on both surfaces.
    if fresh {
        st(&c.request("PUT", &ds(b, "closed"), &[TEXT, ("Stream-Closed", "true")], b"fin"), 201, "PUT closed");
    }
    for p in [ds(b, "closed"), v1(b, "closed")] {
        let tail = c.request("HEAD", &p, &[], b"").sno();
        let r = c.request("GET", &format!("{p}?offset={tail}"), &[], b"");
        st(&r, 200, &format!("{p}: read at the tail of a closed stream"));
        assert_eq!(r.header("stream-closed"), Some("true"));
        assert_eq!(r.body, b"");
    }

    // Row: If-Match on PUT and POST: mismatch 412 with nothing written, match succeeds.
    for (surface, p) in [("ds", ds(b, "ifm")), ("v1", v1(b, "ifm"))] {
        if fresh && surface == "ds" {
            st(&c.request("PUT", &p, &[TEXT], b"0"), 201, "PUT ifm");
        }
        let head = c.request("HEAD", &p, &[], b"");
        let (etag, tail) = (head.must("etag").to_string(), head.sno());
        let data = read_all(c, &p).0;
        let bogus = ("If-Match", "\"not-the-etag\"");
        st(&c.request("POST", &p, &[TEXT, bogus], b"no"), 412, &format!("{surface}: POST If-Match mismatch"));
        st(&c.request("PUT", &p, &[TEXT, bogus], b""), 412, &format!("{surface}: PUT If-Match mismatch"));
        let missing = if surface == "ds" { ds(b, "ifm-missing") } else { v1(b, "ifm-missing") };
        st(
            &c.request("PUT", &missing, &[TEXT, ("If-Match", "*")], b"x"),
            412,
            &format!("{surface}: If-Match on a missing stream"),
        );
        st(&c.request("HEAD", &missing, &[], b""), 404, &format!("{surface}: 412 created nothing"));
        assert_eq!(read_all(c, &p).0, data, "{surface}: 412 wrote nothing");
        assert_eq!(c.request("HEAD", &p, &[], b"").sno(), tail, "{surface}: 412 moved nothing");
        let r = c.request("PUT", &p, &[TEXT, ("If-Match", &etag)], b"");
        st(&r, 200, &format!("{surface}: PUT If-Match match (same config)"));
        let r = c.request("POST", &p, &[TEXT, ("If-Match", &etag)], b"+");
        st(&r, if surface == "ds" { 200 } else { 204 }, &format!("{surface}: POST If-Match match"));
        assert_eq!(read_all(c, &p).0, [&data[..], b"+"].concat());
        st(&c.request("POST", &p, &[TEXT, ("If-Match", &etag)], b"?"), 412, &format!("{surface}: stale ETag"));
        let r = c.request("POST", &p, &[TEXT, ("If-Match", "*")], b"*");
        st(&r, if surface == "ds" { 200 } else { 204 }, &format!("{surface}: If-Match: * on an existing stream"));
    }

    // Row: the bucket must exist on /ds only.
    st(&c.request("PUT", &ds("nobucket", "s"), &[TEXT], b""), 404, "/ds create in a missing bucket");
    st(&c.request("PUT", &v1("nobucket", "s"), &[TEXT], b""), if fresh { 201 } else { 200 }, "/v1 implicit bucket");
    st(&c.request("GET", &ds("nobucket", "s"), &[], b""), 404, "/ds read in a bucket that only /v1 knows");
    st(&c.request("POST", &ds("nobucket", "s"), &[TEXT], b"x"), 404, "/ds append in a missing bucket");
    st(&c.request("POST", &v1("nobucket", "s"), &[TEXT], b"x"), 204, "/v1 append in an implicit bucket");

    // Not dialect: the same answer on both surfaces.
    for p in [ds(b, "plain"), v1(b, "plain")] {
        st(&c.request("POST", &p, &[TEXT], b""), 400, &format!("{p}: empty body without close"));
        st(&c.request("POST", &p, &[], b"x"), 400, &format!("{p}: no Content-Type"));
        st(&c.request("POST", &p, &[OCTET], b"x"), 409, &format!("{p}: another Content-Type"));
        st(&c.request("POST", &format!("{p}-missing"), &[TEXT], b"x"), 404, &format!("{p}: missing stream"));
        let r = c.request("POST", &ds(b, "closed"), &[TEXT], b"x");
        st(&r, 409, "append to a closed stream");
        assert_eq!(r.header("stream-closed"), Some("true"));
    }
    st(&c.request("PUT", &ds(b, "tail-json-bad"), &[JSON], b"{not json"), 400, "/ds bad JSON");
    st(&c.request("PUT", &v1(b, "tail-json-bad"), &[JSON], b"{not json"), 400, "/v1 bad JSON");
}

#[test]
fn dialect_table_on_both_surfaces() {
    let srv = Server::start();
    let mut c = srv.conn();
    make_bucket(&mut c, "dialect");
    dialect_rows(&mut c, "dialect", true);
}

#[test]
fn head_with_if_none_match() {
    let srv = Server::start();
    let mut c = srv.conn();
    make_bucket(&mut c, "heads");
    st(&c.request("PUT", &ds("heads", "s"), &[TEXT], b"abc"), 201, "PUT");
    for p in [ds("heads", "s"), v1("heads", "s")] {
        let etag = c.request("HEAD", &p, &[], b"").must("etag").to_string();
        let r = c.request("HEAD", &p, &[("If-None-Match", &etag)], b"");
        st(&r, 304, &format!("{p}: HEAD with the current ETag"));
        assert_eq!(r.header("etag"), Some(etag.as_str()));
        st(&c.request("HEAD", &p, &[("If-None-Match", "\"other\"")], b""), 200, &format!("{p}: another ETag"));
        st(&c.request("HEAD", &p, &[("If-None-Match", "*")], b""), 304, &format!("{p}: If-None-Match: *"));
    }
    let etag = c.request("HEAD", &ds("heads", "s"), &[], b"").must("etag").to_string();
    st(&c.request("POST", &ds("heads", "s"), &[TEXT], b"d"), 200, "append");
    let r = c.request("HEAD", &ds("heads", "s"), &[("If-None-Match", &etag)], b"");
    st(&r, 200, "HEAD with the ETag from before an append");
    assert_ne!(r.must("etag"), etag);
}

// ---------------------------------------------------------------------------
// Buckets

fn bucket_json(c: &mut Conn, b: &str) -> Value {
    let r = c.request("GET", &format!("/ds/{b}"), &[], b"");
    st(&r, 200, &format!("GET /ds/{b}"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn bucket_edge_cases() {
    let srv = Server::start();
    let mut c = srv.conn();
    for bad in ["abc", "ABCD", "a.bcd", "ab cd", "abcé", &"a".repeat(65), "ab%2Fcd"] {
        st(
            &c.request("PUT", &format!("/ds/{}", bad.replace(' ', "%20").replace('é', "%C3%A9")), &[], b""),
            400,
            &format!("PUT bucket {bad:?}"),
        );
    }
    for ok in ["abcd", "a-b_c", "0000", &"z".repeat(64)] {
        st(&c.request("PUT", &format!("/ds/{ok}"), &[], b""), 201, &format!("PUT bucket {ok:?}"));
        st(&c.request("PUT", &format!("/ds/{ok}"), &[], b""), 409, &format!("PUT bucket {ok:?} again"));
        assert_eq!(bucket_json(&mut c, ok), serde_json::json!({"bucket_id": ok, "streams": 0}));
    }
    st(&c.request("GET", "/ds/missing", &[], b""), 404, "GET missing bucket");
    st(&c.request("DELETE", "/ds/missing", &[], b""), 404, "DELETE missing bucket");
    st(&c.request("GET", "/ds/AB", &[], b""), 400, "GET bad bucket ID");
    st(&c.request("DELETE", "/ds/AB", &[], b""), 400, "DELETE bad bucket ID");
    st(&c.request("POST", "/ds/abcd", &[], b""), 405, "POST on a bucket");

    // Streams on both shards; the count is the sum of every shard's.
    let names: Vec<String> = (0..12).map(|i| format!("n{i}")).collect();
    for n in &names {
        st(&c.request("PUT", &ds("abcd", n), &[OCTET], b""), 201, n);
    }
    assert_eq!(bucket_json(&mut c, "abcd")["streams"], 12);
    // A %2F is part of the ID it is in, never a separator: not the snapshot of abcd/n0.
    st(&c.request("GET", "/ds/abcd%2Fn0/n0/snapshot", &[], b""), 400, "%2F in a bucket ID before a sub-resource");
    st(&c.request("GET", "/ds/abcd/streams/snapshot", &[], b""), 400, "the reserved `streams` with a sub-resource");
    st(&c.request("DELETE", "/ds/abcd", &[], b""), 409, "DELETE non-empty bucket");
    for n in &names[1..] {
        st(&c.request("DELETE", &ds("abcd", n), &[], b""), 204, n);
    }
    st(&c.request("DELETE", "/ds/abcd", &[], b""), 409, "DELETE bucket with one stream left");
    st(&c.request("DELETE", &ds("abcd", "n0"), &[], b""), 204, "n0");
    st(&c.request("DELETE", "/ds/abcd", &[], b""), 204, "DELETE empty bucket");
    st(&c.request("GET", "/ds/abcd", &[], b""), 404, "GET deleted bucket");
    st(&c.request("DELETE", "/ds/abcd", &[], b""), 404, "DELETE deleted bucket");
    st(&c.request("PUT", &ds("abcd", "n0"), &[OCTET], b""), 404, "stream in a deleted bucket");
    // Re-created, it starts empty.
    st(&c.request("PUT", "/ds/abcd", &[], b""), 201, "re-create bucket");
    assert_eq!(bucket_json(&mut c, "abcd")["streams"], 0);
    st(&c.request("GET", &ds("abcd", "n0"), &[], b""), 404, "old stream stays gone");
}

/// HEAD answers wherever GET does (RFC 9110 9.3.2): the same status and
/// headers (Content-Length that of GET's body), and no body; the next
/// request on the same connection parses, so no body bytes were sent.
#[test]
fn head_answers_wherever_get_does() {
    let srv = Server::start();
    let mut c = srv.conn();
    make_bucket(&mut c, "headb");
    st(&c.request("PUT", &ds("headb", "s"), &[TEXT], b"hello"), 201, "PUT stream");
    let tail = c.request("HEAD", &ds("headb", "s"), &[], b"").sno();
    let snap = format!("{}/snapshot/{tail}", ds("headb", "s"));
    st(&c.request("PUT", &snap, &[TEXT], b"snapshot body"), 204, "PUT snapshot");
    st(&c.request("PUT", &v1("headb", "v"), &[TEXT], b"v1 body"), 201, "PUT /v1 stream");
    let bootstrap = format!("{}/bootstrap", ds("headb", "s"));
    let latest = format!("{}/snapshot", ds("headb", "s"));
    for path in ["/ds/headb", "/ds/headb/streams", "/ds/headb/streams?limit=1", &snap, &latest, &bootstrap] {
        same_as_get(&mut c, path, true);
    }
    for path in ["/healthz", "/readyz", "/ds/missing", "/ds/missing/streams", "/ds/headb/nothing/snapshot"] {
        same_as_get(&mut c, path, true);
    }
    // /metrics: its counters move between the two requests, so only the status and the type.
    same_as_get(&mut c, "/metrics", false);
    // A stream's HEAD is its metadata (the protocol's own answer), 200 and no body on both surfaces.
    for path in [ds("headb", "s"), v1("headb", "v")] {
        let h = c.request("HEAD", &path, &[], b"");
        st(&h, 200, &format!("HEAD {path}"));
        assert_eq!(h.header("content-length"), Some("0"), "HEAD {path}");
        let get = c.request("GET", &format!("{path}?offset=now"), &[], b"");
        assert_eq!(Some(h.sno().as_str()), get.header("stream-next-offset"), "HEAD {path}: {}", get.summary());
    }
    // What GET may not do, HEAD may not either.
    st(&c.request("HEAD", "/ds/headb/streams/snapshot", &[], b""), 400, "HEAD reserved `streams` sub-resource");
}

/// GET then HEAD of `path`: the same status, and with `headers` the same
/// headers but Date; the HEAD carries no body.
fn same_as_get(c: &mut Conn, path: &str, headers: bool) {
    let get = c.request("GET", path, &[], b"");
    let head = c.request("HEAD", path, &[], b"");
    st(&head, get.status, &format!("HEAD {path} (GET: {})", get.summary()));
    assert!(head.body.is_empty(), "HEAD {path}: {}", head.summary());
    assert_eq!(head.header("content-type"), get.header("content-type"), "HEAD {path}");
    if !headers {
        assert!(head.header("content-length").is_some(), "HEAD {path}: {}", head.summary());
        return;
    }
    let mut want: Vec<_> = get.headers.iter().filter(|(k, _)| k != "date").collect();
    let mut got: Vec<_> = head.headers.iter().filter(|(k, _)| k != "date").collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "HEAD {path} has GET's headers");
    let length = head.must("content-length");
    assert_eq!(length, get.body.len().to_string(), "HEAD {path}: Content-Length of GET's body");
}

// ---------------------------------------------------------------------------
// After a restart

#[test]
fn everything_survives_a_restart() {
    let mut srv = Server::start();
    let mut c = srv.conn();
    let t0 = now_ms();
    let all = populate_listing_bucket(&mut c, "listing");
    make_bucket(&mut c, "dialect");
    dialect_rows(&mut c, "dialect", true);
    make_bucket(&mut c, "emptyb");
    make_bucket(&mut c, "deleted");
    st(&c.request("DELETE", "/ds/deleted", &[], b""), 204, "delete bucket");
    let t1 = now_ms();
    let listing = list(&mut c, "listing", "");
    let dialect = list(&mut c, "dialect", "");
    let pages: Vec<Value> =
        (0..4).map(|i| list(&mut c, "listing", &format!("?limit=10&after={}", enc(&all[i * 9])))).collect();

    srv.restart();
    let mut c = srv.conn();
    assert_eq!(list(&mut c, "listing", ""), listing, "the listing is the same after a restart");
    assert_eq!(list(&mut c, "dialect", ""), dialect, "the listing is the same after a restart");
    for (i, p) in pages.iter().enumerate() {
        assert_eq!(&list(&mut c, "listing", &format!("?limit=10&after={}", enc(&all[i * 9]))), p);
    }
    check_entries_against_head(&mut c, "listing", listing["streams"].as_array().unwrap(), t0, t1);
    check_entries_against_head(&mut c, "dialect", dialect["streams"].as_array().unwrap(), t0, t1);
    dialect_rows(&mut c, "dialect", false);

    // Buckets.
    assert_eq!(bucket_json(&mut c, "listing")["streams"], all.len());
    assert_eq!(bucket_json(&mut c, "emptyb")["streams"], 0);
    st(&c.request("GET", "/ds/deleted", &[], b""), 404, "a deleted bucket stays deleted");
    st(&c.request("GET", "/ds/deleted/streams", &[], b""), 404, "and cannot be listed");
    st(&c.request("PUT", "/ds/listing", &[], b""), 409, "PUT existing bucket after restart");
    st(&c.request("DELETE", "/ds/listing", &[], b""), 409, "DELETE non-empty bucket after restart");
    st(&c.request("DELETE", "/ds/emptyb", &[], b""), 204, "DELETE empty bucket after restart");
    st(&c.request("PUT", "/ds/deleted", &[], b""), 201, "re-create a deleted bucket after restart");

    // And once more, so the records written after the first restart replay too.
    let listing = list(&mut c, "listing", "");
    let dialect = list(&mut c, "dialect", "");
    srv.restart();
    let mut c = srv.conn();
    assert_eq!(list(&mut c, "listing", ""), listing);
    assert_eq!(list(&mut c, "dialect", ""), dialect);
    st(&c.request("GET", "/ds/emptyb", &[], b""), 404, "deleted after the first restart");
    assert_eq!(bucket_json(&mut c, "deleted")["streams"], 0);
}

/// A byte stream whose data is literally `[]` is data: only an empty read
/// of a JSON stream is `[]` (the /ds 204-at-the-tail rule once treated any
/// `[]` body as empty and answered a byte stream's last bytes with 204).
#[test]
fn brackets_in_a_byte_stream_are_data_at_the_tail() {
    let srv = Server::start();
    let mut c = srv.conn();
    let b = "brackets";
    make_bucket(&mut c, b);
    st(&c.request("PUT", &ds(b, "bytes"), &[TEXT], b"[]"), 201, "create text stream with []");
    let r = c.request("GET", &format!("{}?offset=-1", ds(b, "bytes")), &[], b"");
    st(&r, 200, "read of [] from the start");
    assert_eq!(r.body, b"[]");
    st(&c.request("PUT", &ds(b, "json"), &[JSON], b""), 201, "create json stream");
    st(&c.request("GET", &format!("{}?offset=-1", ds(b, "json")), &[], b""), 204, "empty JSON stream at the tail");
}
