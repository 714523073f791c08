//! A webhook receiver on loopback for the subscription tests
//! (`tests/subscriptions.rs`, `tests/cell_process.rs`): a thread that
//! answers every POST as told and keeps what it got (in plain HTTP, or over
//! TLS with rustls and a certificate authority the test makes with the
//! `openssl` command), and the check of a delivery's Ed25519 signature
//! against a published JWK set.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request a receiver got: its headers (lower-case names) and body.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Delivered {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A webhook receiver on loopback: a thread that answers every POST with
/// `answer` and keeps what it got.
pub struct Receiver {
    pub url: String,
    pub got: Arc<Mutex<Vec<Delivered>>>,
}

impl Receiver {
    pub fn start(answer: &'static str) -> Receiver {
        Receiver::start_with(vec![(200, answer)])
    }

    /// Answers the n-th request with `answers[n]`, and the last one from then on.
    pub fn start_with(answers: Vec<(u16, &'static str)>) -> Receiver {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}/webhook", l.local_addr().unwrap().port());
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        std::thread::spawn(move || {
            for (n, conn) in l.incoming().enumerate() {
                let Ok(mut c) = conn else { return };
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                if let Some(d) = read_request(&mut c) {
                    g.lock().unwrap().push(d);
                }
                let (status, answer) = answers[n.min(answers.len() - 1)];
                let reply = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = c.write_all(reply.as_bytes());
            }
        });
        Receiver { url, got }
    }

    pub fn wait(&self) -> Delivered {
        self.wait_for(1)
    }

    /// The `n`-th delivery (from 1), once it came (within 5 s).
    pub fn wait_for(&self, n: usize) -> Delivered {
        self.wait_within(n, Duration::from_secs(5))
    }

    /// The `n`-th delivery (from 1), once it came within `limit`.
    pub fn wait_within(&self, n: usize, limit: Duration) -> Delivered {
        let start = Instant::now();
        while self.got.lock().unwrap().len() < n {
            assert!(start.elapsed() < limit, "no webhook delivery {n} within {limit:?}");
            std::thread::sleep(Duration::from_millis(25));
        }
        self.got.lock().unwrap()[n - 1].clone()
    }

    /// Deliveries so far.
    pub fn count(&self) -> usize {
        self.got.lock().unwrap().len()
    }
}

fn read_request(c: &mut impl Read) -> Option<Delivered> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = c.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let headers: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok())?;
    while buf.len() < head_end + len {
        let n = c.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(Delivered { headers, body: buf[head_end..head_end + len].to_vec() })
}

/// Checks a delivery's `Webhook-Signature` (`t=…,kid=…,ed25519=…` over
/// `<t>.<body>`) with the key `jwks` (a `__ds/jwks.json` answer) publishes
/// under its kid; the timestamp must be current.
pub fn verify(jwks: &Value, d: &Delivered) -> bool {
    let header = d.header("webhook-signature").expect("a signature header");
    let parts: Vec<&str> = header.split(',').collect();
    let (t, kid, sig) = (
        parts[0].strip_prefix("t=").unwrap(),
        parts[1].strip_prefix("kid=").unwrap(),
        parts[2].strip_prefix("ed25519=").unwrap(),
    );
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(now.abs_diff(t.parse().unwrap()) < 300, "a current timestamp");
    let key = jwks["keys"].as_array().unwrap().iter().find(|k| k["kid"] == kid).expect("the kid is published");
    let x: [u8; 32] = URL_SAFE_NO_PAD.decode(key["x"].as_str().unwrap()).unwrap().try_into().unwrap();
    let sig: [u8; 64] = URL_SAFE_NO_PAD.decode(sig).unwrap().try_into().unwrap();
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(&d.body);
    VerifyingKey::from_bytes(&x).unwrap().verify(&signed, &Signature::from_bytes(&sig)).is_ok()
}

/// A certificate authority and a certificate it signed for `localhost`
/// (and 127.0.0.1), made with the `openssl` command under `dir`: the CA's
/// certificate (what the server is told to trust), the leaf's certificate
/// and its key (PEM files).
pub struct TestCa {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    pub fn make(dir: &Path) -> TestCa {
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=ringstream test CA"],
        ]
        .concat());
        run(&[&["req"][..], &ec, &["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost"]].concat());
        let ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n";
        std::fs::write(dir.join("leaf.ext"), ext).unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.pem",
        ]);
        TestCa { ca: dir.join("ca.pem"), cert: dir.join("leaf.pem"), key: dir.join("leaf.key") }
    }
}

impl Receiver {
    /// A receiver over TLS at `https://localhost:PORT/webhook`, serving the
    /// certificate of `ca`, answering every POST with `answer`.
    pub fn start_tls(answer: &'static str, ca: &TestCa) -> Receiver {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(&ca.cert).unwrap().collect::<Result<_, _>>().unwrap();
        let key = PrivateKeyDer::from_pem_file(&ca.key).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let config = Arc::new(config);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://localhost:{}/webhook", l.local_addr().unwrap().port());
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(tcp) = conn else { return };
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
                let Ok(tls) = rustls::ServerConnection::new(config.clone()) else { continue };
                let mut c = rustls::StreamOwned::new(tls, tcp);
                if let Some(d) = read_request(&mut c) {
                    g.lock().unwrap().push(d);
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = c.write_all(reply.as_bytes());
                c.conn.send_close_notify();
                let _ = c.flush();
            }
        });
        Receiver { url, got }
    }
}
