//! Subscriptions (`{stream-root}/__ds/`, durable-streams.md §A16) over the
//! real binary: the 201/200/409 rules, refusals, the JWK set and its key
//! across kill -9, explicit streams, pull-wake claims, acks and fences, and
//! webhook deliveries to a real local receiver whose signatures are checked
//! with ed25519-dalek against the published key.

mod common;

use common::webhook::{self, Delivered, Receiver};
use common::{Response, Server};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn body(r: &Response) -> Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.summary()))
}

fn put(s: &Server, path: &str, v: &Value) -> Response {
    s.conn().request("PUT", path, &[JSON], v.to_string().as_bytes())
}

fn get(s: &Server, path: &str) -> Response {
    s.conn().request("GET", path, &[], b"")
}

fn post(s: &Server, path: &str, v: &Value, token: Option<&str>) -> Response {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![JSON];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    s.conn().request("POST", path, &headers, v.to_string().as_bytes())
}

fn sub_path(id: &str) -> String {
    format!("/v1/stream/__ds/subscriptions/{id}")
}

fn code(r: &Response) -> String {
    body(r)["error"]["code"].as_str().unwrap_or_default().to_string()
}

/// Polls `f` until it holds (5 s at most).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(5), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn webhook(url: &str, pattern: &str) -> Value {
    json!({ "type": "webhook", "pattern": pattern, "webhook": { "url": url }, "lease_ttl_ms": 1000 })
}

/// Checks a delivery's `Webhook-Signature` with the key the JWK set
/// publishes under its kid.
fn verify(s: &Server, d: &Delivered) -> bool {
    webhook::verify(&body(&get(s, "/v1/stream/__ds/jwks.json")), d)
}

#[test]
fn put_is_201_then_200_for_the_same_config_and_409_for_another() {
    let s = Server::start();
    let url = "http://127.0.0.1:9/hook";
    let first = put(&s, &sub_path("s1"), &webhook(url, "events/*"));
    assert_eq!(first.status, 201, "{}", first.summary());
    let b = body(&first);
    assert_eq!(b["id"], "s1");
    assert!(b.get("webhook_secret").is_none());
    assert_eq!(b["webhook"]["signing"]["alg"], "ed25519");
    assert!(b["webhook"]["signing"]["kid"].as_str().unwrap().starts_with("ds_"));
    let jwks_url = b["webhook"]["signing"]["jwks_url"].as_str().unwrap();
    assert!(jwks_url.ends_with("/v1/stream/__ds/jwks.json") && jwks_url.starts_with("http://"), "{jwks_url}");
    // The same config, its fields in another order and the default lease
    // spelled out: a re-confirm.
    let same = json!({ "lease_ttl_ms": 1000, "webhook": { "url": url }, "pattern": "events/*", "type": "webhook" });
    assert_eq!(put(&s, &sub_path("s1"), &same).status, 200);
    let other = put(&s, &sub_path("s1"), &webhook(url, "other/*"));
    assert_eq!(other.status, 409, "{}", other.summary());
    assert_eq!(code(&other), "SUBSCRIPTION_EXISTS");
    let got = get(&s, &sub_path("s1"));
    assert_eq!(got.status, 200);
    let g = body(&got);
    assert_eq!((g["type"].as_str(), g["pattern"].as_str()), (Some("webhook"), Some("events/*")), "the first config");
    assert_eq!(g["webhook"]["url"], url);
    assert_eq!(s.conn().request("DELETE", &sub_path("s1"), &[], b"").status, 204);
    assert_eq!(get(&s, &sub_path("s1")).status, 404);
    assert_eq!(put(&s, &sub_path("s1"), &webhook(url, "other/*")).status, 201, "a new one after the delete");
}

#[test]
fn the_control_api_is_routed_before_streams_on_both_roots() {
    let s = Server::start();
    // Never a stream: a PUT under __ds creates nothing.
    for path in ["/v1/stream/__ds/x", "/v1/stream/__ds", "/ds/bkt1/__ds"] {
        let r = s.conn().request("PUT", path, &[("Content-Type", "text/plain")], b"");
        assert_eq!(r.status, 404, "{path}: {}", r.summary());
    }
    assert_eq!(s.conn().request("PUT", "/ds/bkt1", &[], b"").status, 201);
    let root = "/ds/bkt1/__ds/subscriptions/d1";
    let r = put(&s, root, &webhook("http://127.0.0.1:9/h", "x*"));
    assert_eq!(r.status, 201, "{}", r.summary());
    assert!(body(&r)["webhook"]["signing"]["jwks_url"].as_str().unwrap().ends_with("/ds/bkt1/__ds/jwks.json"));
    assert_eq!(get(&s, "/v1/stream/__ds/subscriptions/d1").status, 404, "each root its own subscriptions");
    assert_eq!(put(&s, "/ds/nobkt/__ds/subscriptions/d1", &webhook("http://127.0.0.1:9/h", "x")).status, 404);
    let jwks = get(&s, "/ds/bkt1/__ds/jwks.json");
    assert_eq!(jwks.header("content-type"), Some("application/jwk-set+json"));
}

#[test]
fn unsafe_urls_and_bad_bodies_are_refused_with_a_reason() {
    let s = Server::start();
    let r = put(&s, &sub_path("u1"), &webhook("http://10.0.0.1/hook", "events/*"));
    assert_eq!(r.status, 400);
    assert_eq!(code(&r), "WEBHOOK_URL_REJECTED");
    for url in ["https://169.254.169.254/latest", "https://192.168.0.1/", "ftp://example.com/", "https://[fd00::1]/"] {
        let r = put(&s, &sub_path("u1"), &webhook(url, "events/*"));
        assert_eq!((r.status, code(&r).as_str()), (400, "WEBHOOK_URL_REJECTED"), "{url}");
    }
    for bad in [
        "not json",
        "[1]",
        r#"{"type":"carrier-pigeon","pattern":"a"}"#,
        r#"{"type":"webhook","pattern":"a"}"#,
        r#"{"type":"webhook","webhook":{"url":"http://127.0.0.1:9/"}}"#,
        r#"{"type":"pull-wake","pattern":"a"}"#,
        r#"{"type":"webhook","pattern":"a","webhook":{"url":"http://127.0.0.1:9/"},"lease_ttl_ms":1}"#,
    ] {
        let r = s.conn().request("PUT", &sub_path("u1"), &[JSON], bad.as_bytes());
        assert_eq!(r.status, 400, "{bad}: {}", r.summary());
        assert!(!r.text().is_empty(), "{bad}: a reason");
    }
    assert_eq!(get(&s, &sub_path("u1")).status, 404, "nothing was created");
    assert_eq!(s.conn().request("PUT", "/v1/stream/__ds/subscriptions/a%20b", &[JSON], b"{}").status, 400, "a bad id");
    assert_eq!(s.conn().request("PATCH", &sub_path("u1"), &[], b"").status, 405);
}

#[test]
fn subscriptions_and_the_signing_key_survive_kill9() {
    let mut s = Server::start();
    let jwks = get(&s, "/v1/stream/__ds/jwks.json");
    assert_eq!(jwks.status, 200);
    assert_eq!(jwks.header("content-type"), Some("application/jwk-set+json"));
    let key = body(&jwks)["keys"][0].clone();
    assert_eq!(
        (key["kty"].as_str(), key["crv"].as_str(), key["alg"].as_str()),
        (Some("OKP"), Some("Ed25519"), Some("EdDSA"))
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(s.data_dir().join("webhook-signing.key")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let wake = "wake/pool";
    assert_eq!(s.conn().request("PUT", &format!("/v1/stream/{wake}"), &[JSON], b"[]").status, 201);
    let ids: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for id in &ids {
        let v = json!({ "type": "pull-wake", "pattern": "events/*", "wake_stream": wake, "streams": ["manual/a"] });
        assert_eq!(put(&s, &sub_path(id), &v).status, 201);
    }
    assert_eq!(s.conn().request("DELETE", &sub_path("k7"), &[], b"").status, 204);
    assert_eq!(post(&s, &format!("{}/streams", sub_path("k0")), &json!({ "streams": ["manual/b"] }), None).status, 204);
    s.kill9();
    s.start_again();
    for id in &ids[..7] {
        let r = get(&s, &sub_path(id));
        assert_eq!(r.status, 200, "{id} after kill -9: {}", r.summary());
        assert_eq!(body(&r)["wake_stream"], wake);
    }
    assert_eq!(get(&s, &sub_path("k7")).status, 404, "its delete survived too");
    let paths: Vec<String> = body(&get(&s, &sub_path("k0")))["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, vec!["manual/a", "manual/b"]);
    assert_eq!(body(&get(&s, "/v1/stream/__ds/jwks.json"))["keys"][0], key, "the same key after the restart");
    let v = json!({ "type": "pull-wake", "pattern": "events/*", "wake_stream": wake, "streams": ["manual/a"] });
    assert_eq!(put(&s, &sub_path("k1"), &v).status, 200, "an identical re-confirm after the restart");
}

#[test]
fn explicit_streams_are_added_and_removed() {
    let s = Server::start();
    let v = json!({ "type": "webhook", "streams": ["manual/a"], "webhook": { "url": "http://127.0.0.1:9/h" } });
    assert_eq!(put(&s, &sub_path("e1"), &v).status, 201);
    assert_eq!(post(&s, &format!("{}/streams", sub_path("e1")), &json!({ "streams": ["manual/b"] }), None).status, 204);
    let remove = format!("{}/streams/manual%2Fb", sub_path("e1"));
    assert_eq!(s.conn().request("DELETE", &remove, &[], b"").status, 204);
    assert_eq!(s.conn().request("DELETE", &remove, &[], b"").status, 204, "idempotent");
    let streams = body(&get(&s, &sub_path("e1")))["streams"].clone();
    assert_eq!(streams.as_array().unwrap().len(), 1, "{streams}");
    assert_eq!((streams[0]["path"].as_str(), streams[0]["link_type"].as_str()), (Some("manual/a"), Some("explicit")));
    let bad = post(&s, &format!("{}/streams", sub_path("e1")), &json!({ "streams": ["a/../b"] }), None);
    assert_eq!(bad.status, 400);
}

#[test]
fn pull_wake_claims_acks_fences_and_releases() {
    let mut s = Server::start();
    assert_eq!(s.conn().request("PUT", "/v1/stream/wake/p", &[JSON], b"[]").status, 201);
    let v = json!({ "type": "pull-wake", "pattern": "events/*", "wake_stream": "wake/p", "lease_ttl_ms": 1000 });
    assert_eq!(put(&s, &sub_path("p1"), &v).status, 201);
    assert_eq!(
        post(&s, &format!("{}/claim", sub_path("p1")), &json!({ "worker": "w1" }), None).status,
        204,
        "no work yet"
    );
    let created = s.conn().request("PUT", "/v1/stream/events/a", &[JSON], br#"{"n":1}"#);
    assert_eq!(created.status, 201);
    let tail = created.must("stream-next-offset").to_string();
    eventually("a wake event", || {
        let events = body(&get(&s, "/v1/stream/wake/p"));
        events.as_array().unwrap().iter().any(|e| e["subscription_id"] == "p1")
    });
    let claim = post(&s, &format!("{}/claim", sub_path("p1")), &json!({ "worker": "w1" }), None);
    assert_eq!(claim.status, 200, "{}", claim.summary());
    let c = body(&claim);
    assert_eq!(c["streams"][0]["path"], "events/a");
    assert_eq!(c["streams"][0]["tail_offset"], tail.as_str());
    let busy = post(&s, &format!("{}/claim", sub_path("p1")), &json!({ "worker": "w2" }), None);
    assert_eq!((busy.status, code(&busy).as_str()), (409, "ALREADY_CLAIMED"));
    assert_eq!(body(&busy)["error"]["current_holder"], "w1");
    let token = c["token"].as_str().unwrap();
    let ack = json!({ "wake_id": c["wake_id"], "generation": c["generation"],
                      "acks": [{ "stream": "events/a", "offset": tail }], "done": true });
    let wrong = post(&s, &format!("{}/ack", sub_path("p1")), &ack, Some("not-the-token"));
    assert_eq!((wrong.status, code(&wrong).as_str()), (409, "FENCED"));
    let ok = post(&s, &format!("{}/ack", sub_path("p1")), &ack, Some(token));
    assert_eq!(ok.status, 200, "{}", ok.summary());
    assert_eq!(body(&ok), json!({ "ok": true, "next_wake": false }));
    let replay = post(&s, &format!("{}/ack", sub_path("p1")), &ack, Some(token));
    assert_eq!((replay.status, code(&replay).as_str()), (409, "FENCED"));
    let cursor = body(&get(&s, &sub_path("p1")))["streams"][0].clone();
    assert_eq!(cursor["acked_offset"], tail.as_str());
    // The cursor is durable: after kill -9 only newer data is work.
    s.kill9();
    s.start_again();
    assert_eq!(body(&get(&s, &sub_path("p1")))["streams"][0]["acked_offset"], tail.as_str());
    assert_eq!(post(&s, &format!("{}/claim", sub_path("p1")), &json!({ "worker": "w1" }), None).status, 204);
    assert_eq!(s.conn().request("POST", "/v1/stream/events/a", &[JSON], br#"{"n":2}"#).status, 204);
    let claim2 = post(&s, &format!("{}/claim", sub_path("p1")), &json!({ "worker": "w1" }), None);
    assert_eq!(claim2.status, 200, "{}", claim2.summary());
    let c2 = body(&claim2);
    assert!(c2["generation"].as_u64() > c["generation"].as_u64(), "a new generation");
    let release = json!({ "wake_id": c2["wake_id"], "generation": c2["generation"] });
    let r = post(&s, &format!("{}/release", sub_path("p1")), &release, c2["token"].as_str());
    assert_eq!(r.status, 204, "{}", r.summary());
    let again = post(&s, &format!("{}/claim", sub_path("p1")), &json!({ "worker": "w2" }), None);
    assert_eq!(again.status, 200, "released: another worker claims it at once");
}

#[test]
fn webhook_deliveries_are_signed_and_a_done_answer_acks_them() {
    let s = Server::start();
    let rx = Receiver::start(r#"{"done":true}"#);
    assert_eq!(put(&s, &sub_path("w1"), &webhook(&rx.url, "events/*")).status, 201);
    let created = s.conn().request("PUT", "/v1/stream/events/sync", &[JSON], br#"{"event":"created"}"#);
    assert_eq!(created.status, 201);
    let tail = created.must("stream-next-offset").to_string();
    let d = rx.wait();
    assert!(verify(&s, &d), "the signature verifies against the published key");
    let mut forged = d.clone();
    forged.body.push(b' ');
    assert!(!verify(&s, &forged), "and only for the body it was made over");
    let b = d.json();
    assert_eq!(b["subscription_id"], "w1");
    assert!(b["callback_url"].as_str().unwrap().ends_with("/v1/stream/__ds/subscriptions/w1/callback"));
    assert_eq!(b["streams"][0]["path"], "events/sync");
    assert_eq!(b["streams"][0]["tail_offset"], tail.as_str());
    assert_eq!(b["streams"][0]["has_pending"], true);
    eventually("the synchronous done to ack the wake", || {
        body(&get(&s, &sub_path("w1")))["streams"][0]["acked_offset"] == tail.as_str()
    });
}

/// A stream deleted and created again at a path a subscription follows:
/// its offsets start over, and so does the subscription's cursor (the
/// new creation's data is delivered though it lies below what was acked).
#[test]
fn a_stream_created_again_is_delivered_from_its_start() {
    let s = Server::start();
    let rx = Receiver::start(r#"{"done":true}"#);
    assert_eq!(put(&s, &sub_path("w2"), &webhook(&rx.url, "events/*")).status, 201);
    let long = s.conn().request("PUT", "/v1/stream/events/again", &[JSON], br#"{"event":"a long first creation"}"#);
    assert_eq!(long.status, 201);
    let first = rx.wait();
    assert_eq!(first.json()["streams"][0]["tail_offset"], long.must("stream-next-offset"));
    eventually("the first creation acked", || {
        body(&get(&s, &sub_path("w2")))["streams"][0]["acked_offset"] == long.must("stream-next-offset")
    });
    assert_eq!(s.conn().request("DELETE", "/v1/stream/events/again", &[], b"").status, 204);
    let short = s.conn().request("PUT", "/v1/stream/events/again", &[JSON], br#"{"e":2}"#);
    assert_eq!(short.status, 201);
    assert!(short.must("stream-next-offset") < long.must("stream-next-offset"), "offsets start over");
    let second = rx.wait_for(2);
    assert!(verify(&s, &second));
    assert_eq!(second.json()["streams"][0]["path"], "events/again");
    assert_eq!(second.json()["streams"][0]["tail_offset"], short.must("stream-next-offset"), "the new creation");
}

/// A root holds at most 1024 subscriptions, whichever shard owns each
/// (their ids hash over both shards unevenly): the 1025th answers 429
/// `SUBSCRIPTION_LIMIT`, and a delete makes room for one.
#[test]
fn a_root_holds_at_most_its_bound_of_subscriptions_over_every_shard() {
    let s = Server::start();
    assert_eq!(s.conn().request("PUT", "/ds/many", &[], b"").status, 201);
    let path = |i: usize| format!("/ds/many/__ds/subscriptions/s{i}");
    let mut c = s.conn();
    let v = webhook("http://127.0.0.1:9/h", "x*").to_string();
    for i in 0..1024 {
        let r = c.request("PUT", &path(i), &[JSON], v.as_bytes());
        assert_eq!(r.status, 201, "subscription {i} of 1024: {}", r.summary());
    }
    let over = c.request("PUT", &path(1024), &[JSON], v.as_bytes());
    assert_eq!((over.status, code(&over).as_str()), (429, "SUBSCRIPTION_LIMIT"), "{}", over.summary());
    let again = c.request("PUT", &path(7), &[JSON], v.as_bytes());
    assert_eq!(again.status, 200, "a re-confirm is not a new subscription");
    assert_eq!(put(&s, "/v1/stream/__ds/subscriptions/other-root", &webhook("http://127.0.0.1:9/h", "x*")).status, 201);
    assert_eq!(c.request("DELETE", &path(3), &[], b"").status, 204);
    assert_eq!(c.request("PUT", &path(1024), &[JSON], v.as_bytes()).status, 201, "room after a delete");
}

/// The key id a delivery was signed under.
fn signed_kid(d: &Delivered) -> String {
    let header = d.header("webhook-signature").expect("a signature header");
    header.split(',').nth(1).unwrap().strip_prefix("kid=").unwrap().to_string()
}

fn published_kids(s: &Server) -> Vec<String> {
    let jwks = body(&get(s, "/v1/stream/__ds/jwks.json"));
    jwks["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_string()).collect()
}

/// A key rotation without a gap, each step a file operation and a SIGHUP:
/// a next key is published beside the signing key; promoted, it signs and
/// the old one is still published; retired, only the new one is.
#[test]
fn the_webhook_key_rotates_in_three_steps_on_sighup() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::start();
    let rx = Receiver::start(r#"{"done":true}"#);
    let dir = s.data_dir();
    let old = published_kids(&s);
    assert_eq!(old.len(), 1);
    let next = dir.join("webhook-signing.next.key");
    std::fs::write(&next, [42u8; 32]).unwrap();
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600)).unwrap();
    common::auth::hang_up(s.pid());
    eventually("the next key published", || published_kids(&s).len() == 2);
    let staged = published_kids(&s);
    assert_eq!(staged[0], old[0], "the signing key comes first");
    assert_eq!(put(&s, &sub_path("rot"), &webhook(&rx.url, "events/*")).status, 201);
    assert_eq!(s.conn().request("PUT", "/v1/stream/events/rot", &[JSON], br#"{"n":1}"#).status, 201);
    let first = rx.wait();
    assert_eq!(signed_kid(&first), old[0], "the next key does not sign yet");
    assert!(verify(&s, &first));
    std::fs::rename(dir.join("webhook-signing.key"), dir.join("webhook-signing.previous.key")).unwrap();
    std::fs::rename(&next, dir.join("webhook-signing.key")).unwrap();
    common::auth::hang_up(s.pid());
    eventually("the next key promoted", || published_kids(&s) == vec![staged[1].clone(), old[0].clone()]);
    assert_eq!(s.conn().request("POST", "/v1/stream/events/rot", &[JSON], br#"{"n":2}"#).status, 204);
    let second = rx.wait_for(2);
    assert_eq!(signed_kid(&second), staged[1], "the promoted key signs");
    assert!(verify(&s, &second) && verify(&s, &first), "both verify while both are published");
    std::fs::remove_file(dir.join("webhook-signing.previous.key")).unwrap();
    common::auth::hang_up(s.pid());
    eventually("the previous key retired", || published_kids(&s) == vec![staged[1].clone()]);
    assert_eq!(body(&get(&s, &sub_path("rot")))["webhook"]["signing"]["kid"], staged[1].as_str());
}

/// Webhooks over real TLS: a receiver with a certificate of a CA the
/// server trusts (`SSL_CERT_FILE`, as the delivery thread's rustls reads
/// the platform's roots) gets a signed delivery; a server that does not
/// trust that CA delivers nothing and fails the delivery.
#[test]
fn webhooks_are_delivered_over_tls_to_a_receiver_the_server_trusts() {
    let dir = common::TempDir::new("tls");
    let ca = common::webhook::TestCa::make(dir.path());
    let rx = Receiver::start_tls(r#"{"done":true}"#, &ca);
    let trusting = Server::start_env(&[], &[("SSL_CERT_FILE", ca.ca.to_str().unwrap())]);
    let untrusting = Server::start();
    for s in [&trusting, &untrusting] {
        assert_eq!(put(s, &sub_path("tls"), &webhook(&rx.url, "events/*")).status, 201, "{}", rx.url);
    }
    assert_eq!(untrusting.conn().request("PUT", "/v1/stream/events/tls", &[JSON], br#"{"n":0}"#).status, 201);
    eventually("the untrusting server's failed delivery", || {
        let m = untrusting.metrics();
        m.iter().any(|(k, v)| k.starts_with("ringstream_webhook_deliveries_total") && k.contains("failed") && *v >= 1.0)
    });
    assert_eq!(rx.count(), 0, "a receiver whose certificate the server does not trust got a delivery");
    let created = trusting.conn().request("PUT", "/v1/stream/events/tls", &[JSON], br#"{"n":1}"#);
    assert_eq!(created.status, 201);
    let d = rx.wait();
    assert!(verify(&trusting, &d), "signed");
    assert_eq!(d.json()["streams"][0]["tail_offset"], created.must("stream-next-offset"));
}

#[test]
fn a_webhook_callback_acks_and_a_replay_is_fenced() {
    let s = Server::start();
    let rx = Receiver::start("{}");
    assert_eq!(put(&s, &sub_path("c1"), &webhook(&rx.url, "events/*")).status, 201);
    let created = s.conn().request("PUT", "/v1/stream/events/cb", &[JSON], br#"{"event":"created"}"#);
    let tail = created.must("stream-next-offset").to_string();
    let b = rx.wait().json();
    let callback = b["callback_url"].as_str().unwrap();
    let path = &callback[callback.find("/v1/").unwrap()..];
    let ack = json!({ "wake_id": b["wake_id"], "generation": b["generation"],
                      "acks": [{ "stream": "events/cb", "offset": tail }], "done": true });
    let token = b["callback_token"].as_str().unwrap();
    let lag = |s: &Server| -> f64 {
        let m = s.metrics();
        m.iter().filter(|(n, _)| n.starts_with("ringstream_subscription_pending_streams")).map(|(_, v)| v).sum()
    };
    assert_eq!(lag(&s), 1.0, "delivered, not yet acknowledged");
    let r = post(&s, path, &ack, Some(token));
    assert_eq!(r.status, 200, "{}", r.summary());
    assert_eq!(body(&r), json!({ "ok": true, "next_wake": false }));
    let replay = post(&s, path, &ack, Some(token));
    assert_eq!((replay.status, code(&replay).as_str()), (409, "FENCED"));
    assert_eq!(body(&get(&s, &sub_path("c1")))["streams"][0]["acked_offset"], tail.as_str());
    assert_eq!(lag(&s), 0.0);
}

fn segment_files(s: &Server) -> usize {
    let files = std::fs::read_dir(s.data_dir().join("shard-0")).expect("shard dir");
    files.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".seg")).count()
}

#[test]
fn a_subscription_outlives_the_reclaim_of_the_segment_it_was_written_in() {
    // One shard, small segments: the subscription's record is in the first
    // segment, which holds nothing else once the stream after it is deleted.
    let mut s = Server::start_with(&["--shards", "1", "--segment-bytes", "65536"]);
    let v = json!({ "type": "webhook", "pattern": "events/*", "webhook": { "url": "http://127.0.0.1:9/h" } });
    assert_eq!(put(&s, &sub_path("r1"), &v).status, 201);
    assert_eq!(s.conn().request("PUT", "/v1/stream/bulk/x", &[("Content-Type", "text/plain")], b"").status, 201);
    let mut c = s.conn();
    for _ in 0..300 {
        assert_eq!(
            c.request("POST", "/v1/stream/bulk/x", &[("Content-Type", "text/plain")], &[b'x'; 1024]).status,
            204
        );
    }
    let before = segment_files(&s);
    assert!(before >= 5, "300 KiB in 64 KiB segments: {before} files");
    assert_eq!(c.request("DELETE", "/v1/stream/bulk/x", &[], b"").status, 204);
    let deadline = Instant::now() + Duration::from_secs(20);
    while segment_files(&s) > 3 {
        assert!(Instant::now() < deadline, "still {} segment files (had {before})", segment_files(&s));
        std::thread::sleep(Duration::from_millis(100));
    }
    s.kill9();
    s.start_again();
    let r = get(&s, &sub_path("r1"));
    assert_eq!(r.status, 200, "its record was written again before its segment went: {}", r.summary());
    assert_eq!(body(&r)["pattern"], "events/*");
}

/// The path of a delivery's callback URL (its host is the one the
/// subscription was created through, which a restart may have changed).
fn callback_path(b: &Value) -> String {
    let url = b["callback_url"].as_str().unwrap();
    url[url.find("/v1/").unwrap()..].to_string()
}

#[test]
fn a_failed_delivery_is_retried_under_a_new_generation() {
    let s = Server::start();
    let rx = Receiver::start_with(vec![(503, "{}"), (200, r#"{"done":true}"#)]);
    assert_eq!(put(&s, &sub_path("f1"), &webhook(&rx.url, "events/*")).status, 201);
    let created = s.conn().request("PUT", "/v1/stream/events/retry", &[JSON], br#"{"n":1}"#);
    let tail = created.must("stream-next-offset").to_string();
    let first = rx.wait_for(1);
    let started = Instant::now();
    let second = rx.wait_for(2);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(700), "backed off about a second, not {waited:?}");
    assert!(verify(&s, &second));
    let (g1, g2) = (first.json()["generation"].as_u64().unwrap(), second.json()["generation"].as_u64().unwrap());
    assert!(g2 > g1, "a retry is a new generation: {g1} then {g2}");
    assert_eq!(second.json()["streams"][0]["tail_offset"], tail.as_str());
    eventually("the retried delivery's done to ack it", || {
        body(&get(&s, &sub_path("f1")))["streams"][0]["acked_offset"] == tail.as_str()
    });
    let metrics = s.metrics();
    let count = |outcome: &str| -> f64 {
        metrics
            .iter()
            .filter(|(n, _)| n.starts_with("ringstream_webhook_deliveries_total{") && n.contains(outcome))
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!((count("\"failed\""), count("\"ok\"")), (1.0, 1.0));
    let gauge =
        |name: &str| -> f64 { metrics.iter().filter(|(n, _)| n.split('{').next() == Some(name)).map(|(_, v)| v).sum() };
    assert_eq!(gauge("ringstream_subscriptions"), 1.0);
    assert_eq!(gauge("ringstream_subscription_pending_streams"), 0.0, "acknowledged: no lag");
}

#[test]
fn a_delivery_outstanding_at_kill9_is_delivered_again_and_the_old_one_fenced() {
    let mut s = Server::start();
    let rx = Receiver::start("{}");
    let v = json!({ "type": "webhook", "pattern": "events/*", "webhook": { "url": rx.url }, "lease_ttl_ms": 600000 });
    assert_eq!(put(&s, &sub_path("k1"), &v).status, 201);
    let created = s.conn().request("PUT", "/v1/stream/events/crash", &[JSON], br#"{"n":1}"#);
    let tail = created.must("stream-next-offset").to_string();
    let before = rx.wait_for(1).json();
    s.kill9();
    s.start_again();
    // Its lease has ten minutes to run, but this process never delivered it.
    let after = rx.wait_for(2).json();
    assert!(after["generation"].as_u64() > before["generation"].as_u64(), "{before} then {after}");
    assert_eq!(after["streams"][0]["tail_offset"], tail.as_str(), "the same data again: at least once");
    let ack = |b: &Value| {
        json!({ "wake_id": b["wake_id"], "generation": b["generation"],
                "acks": [{ "stream": "events/crash", "offset": tail }], "done": true })
    };
    let stale = post(&s, &callback_path(&before), &ack(&before), before["callback_token"].as_str());
    assert_eq!((stale.status, code(&stale).as_str()), (409, "FENCED"));
    let ok = post(&s, &callback_path(&after), &ack(&after), after["callback_token"].as_str());
    assert_eq!(ok.status, 200, "{}", ok.summary());
    assert_eq!(body(&get(&s, &sub_path("k1")))["streams"][0]["acked_offset"], tail.as_str());
}

#[test]
fn with_an_auth_file_the_api_needs_admin_and_a_callback_only_its_wake_token() {
    use common::auth::{AuthedServer, Grant};
    const ADMIN: Grant = Grant { name: "admin", token: "admin-token-1", buckets: &["*"], rights: &["admin"] };
    const READER: Grant = Grant { name: "reader", token: "reader-token-2", buckets: &["*"], rights: &["read"] };
    let a = AuthedServer::start(&[ADMIN, READER], &[]);
    let s = &a.srv;
    let rx = Receiver::start("{}");
    let with = |t: &'static str| ("Authorization", format!("Bearer {t}"));
    let req = |method: &str, path: &str, token: Option<&'static str>, b: &Value| {
        let auth = token.map(with);
        let mut headers = vec![JSON];
        if let Some((n, v)) = &auth {
            headers.push((n, v.as_str()));
        }
        s.conn().request(method, path, &headers, b.to_string().as_bytes())
    };
    let config = webhook(&rx.url, "events/*");
    assert_eq!(req("PUT", &sub_path("a1"), None, &config).status, 401);
    assert_eq!(req("PUT", &sub_path("a1"), Some("reader-token-2"), &config).status, 403);
    assert_eq!(req("PUT", &sub_path("a1"), Some("admin-token-1"), &config).status, 201);
    assert_eq!(get(s, "/v1/stream/__ds/jwks.json").status, 200, "the JWK set is public");
    let created = req("PUT", "/v1/stream/events/authed", Some("admin-token-1"), &json!({ "n": 1 }));
    assert_eq!(created.status, 201);
    let tail = created.must("stream-next-offset").to_string();
    let b = rx.wait().json();
    let ack = json!({ "wake_id": b["wake_id"], "generation": b["generation"],
                      "acks": [{ "stream": "events/authed", "offset": tail }], "done": true });
    let forged = post(s, &callback_path(&b), &ack, Some("admin-token-1"));
    assert_eq!((forged.status, code(&forged).as_str()), (409, "FENCED"), "an auth token is no wake token");
    let r = post(s, &callback_path(&b), &ack, b["callback_token"].as_str());
    assert_eq!(r.status, 200, "the receiver's callback needs only its wake token: {}", r.summary());
}

#[test]
fn a_claim_whose_lease_runs_out_is_signalled_again_and_its_holder_fenced() {
    let s = Server::start();
    assert_eq!(s.conn().request("PUT", "/v1/stream/wake/l", &[JSON], b"[]").status, 201);
    let v = json!({ "type": "pull-wake", "pattern": "events/*", "wake_stream": "wake/l", "lease_ttl_ms": 1000 });
    assert_eq!(put(&s, &sub_path("l1"), &v).status, 201);
    let created = s.conn().request("PUT", "/v1/stream/events/lease", &[JSON], br#"{"n":1}"#);
    let tail = created.must("stream-next-offset").to_string();
    let events = || body(&get(&s, "/v1/stream/wake/l")).as_array().unwrap().len();
    eventually("the first wake event", || events() == 1);
    let first = body(&post(&s, &format!("{}/claim", sub_path("l1")), &json!({ "worker": "w1" }), None));
    // w1 never acknowledges: once its lease ends, the work is announced again.
    eventually("a second wake event after the lease", || events() == 2);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(events(), 2, "once, not at every tick");
    let second = post(&s, &format!("{}/claim", sub_path("l1")), &json!({ "worker": "w2" }), None);
    assert_eq!(second.status, 200, "{}", second.summary());
    let ack = json!({ "wake_id": first["wake_id"], "generation": first["generation"],
                      "acks": [{ "stream": "events/lease", "offset": tail }], "done": true });
    let late = post(&s, &format!("{}/ack", sub_path("l1")), &ack, first["token"].as_str());
    assert_eq!((late.status, code(&late).as_str()), (409, "FENCED"), "w1's lease was given to w2");
}
