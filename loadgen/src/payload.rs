//! Append bodies: sizes (fixed or drawn from a seeded distribution), the
//! send timestamp every body carries, and decoding those timestamps from
//! what live readers receive.
//!
//! Binary bodies (any content type but JSON) are self-delimiting so that a
//! read which returns several appends concatenated can be split again:
//!
//! ```text
//! TTTTTTTTTTTTTTTT LLLLLLLL filler...
//! ```
//!
//! 16 lower-case hex digits of the send time (µs since the UNIX epoch, wall
//! clock), 8 hex digits of the whole body's length L (header included), then
//! L - 24 filler bytes `abc…zabc…`. Bodies shorter than the 24-byte header are
//! filler only (no timestamp); with live readers sizes are raised to 24.
//!
//! JSON bodies are one object of about the drawn size:
//! `{"t":<send µs>,"i":<request number>,"pad":"xxx…"}`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;

/// Bytes of the binary header (timestamp + length).
pub const BIN_HEADER: usize = 24;
/// Exponential sizes are capped at this multiple of the mean.
pub const EXP_CAP_FACTOR: f64 = 20.0;

/// Wall-clock microseconds since the UNIX epoch (0 if the clock is before it).
pub fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A small deterministic PRNG (SplitMix64): same seed, same sequence.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    #[cfg(test)]
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Independent stream `i` derived from `seed` (one per connection).
    pub fn derived(seed: u64, i: u64) -> Rng {
        let mut r = Rng(seed ^ i.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi] (inclusive).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi - lo + 1;
        if span == 0 {
            return self.next_u64();
        }
        // Multiply-shift: bias at most span/2^64, irrelevant here.
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as u64
    }
}

/// Distribution of append body sizes (`--payload-dist`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PayloadDist {
    /// Always this many bytes.
    Fixed(usize),
    /// Uniform in [min, max], inclusive.
    Uniform(usize, usize),
    /// Exponential with this mean, at least 1 and at most
    /// `EXP_CAP_FACTOR` × mean, rounded to whole bytes.
    Exp(f64),
}

impl PayloadDist {
    /// Parse `fixed`, `uniform:MIN:MAX` or `exp:MEAN`; `fixed` uses `payload`.
    pub fn parse(s: &str, payload: usize) -> anyhow::Result<PayloadDist> {
        let parts: Vec<&str> = s.split(':').collect();
        let num = |v: &str| -> anyhow::Result<usize> {
            v.trim().parse().map_err(|_| anyhow::anyhow!("bad size {v:?} in --payload-dist {s:?}"))
        };
        match parts.as_slice() {
            ["fixed"] => Ok(PayloadDist::Fixed(payload)),
            ["fixed", n] => Ok(PayloadDist::Fixed(num(n)?)),
            ["uniform", lo, hi] => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    anyhow::bail!("--payload-dist uniform:MIN:MAX needs MIN <= MAX (got {s:?})");
                }
                Ok(PayloadDist::Uniform(lo, hi))
            }
            ["exp", mean] => {
                let m: f64 =
                    mean.trim().parse().map_err(|_| anyhow::anyhow!("bad mean {mean:?} in --payload-dist {s:?}"))?;
                if !(m.is_finite() && m >= 1.0) {
                    anyhow::bail!("--payload-dist exp:MEAN needs MEAN >= 1 (got {s:?})");
                }
                Ok(PayloadDist::Exp(m))
            }
            _ => anyhow::bail!("--payload-dist must be fixed, uniform:MIN:MAX or exp:MEAN (got {s:?})"),
        }
    }

    /// Draw one size.
    pub fn sample(&self, rng: &mut Rng) -> usize {
        match *self {
            PayloadDist::Fixed(n) => n,
            PayloadDist::Uniform(lo, hi) => rng.range(lo as u64, hi as u64) as usize,
            PayloadDist::Exp(mean) => {
                // Inverse CDF; 1 - u is in (0, 1], so ln is finite.
                let x = -mean * (1.0 - rng.next_f64()).ln();
                x.round().clamp(1.0, self.max() as f64) as usize
            }
        }
    }

    /// Largest size this distribution can draw.
    pub fn max(&self) -> usize {
        match *self {
            PayloadDist::Fixed(n) => n,
            PayloadDist::Uniform(_, hi) => hi,
            PayloadDist::Exp(mean) => (mean * EXP_CAP_FACTOR).round().max(1.0) as usize,
        }
    }

    /// Canonical spelling, for reports.
    pub fn describe(&self) -> String {
        match *self {
            PayloadDist::Fixed(n) => format!("fixed:{n}"),
            PayloadDist::Uniform(lo, hi) => format!("uniform:{lo}:{hi}"),
            PayloadDist::Exp(m) => format!("exp:{m}"),
        }
    }
}

/// Body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Timestamp + length header, then filler (see the module docs).
    Binary,
    /// `{"t":…,"i":…,"pad":"…"}`.
    Json,
}

/// Builds append bodies for one connection.
#[derive(Debug, Clone)]
pub struct PayloadGen {
    format: Format,
    dist: PayloadDist,
    /// Sizes are raised to at least this.
    min_len: usize,
    rng: Rng,
    /// `abc…` filler, as long as the largest body.
    filler: Vec<u8>,
}

impl PayloadGen {
    pub fn new(format: Format, dist: PayloadDist, min_len: usize, rng: Rng) -> PayloadGen {
        let longest = dist.max().max(min_len);
        let filler = match format {
            Format::Binary => (0..longest).map(|i| b'a' + (i % 26) as u8).collect(),
            Format::Json => vec![b'x'; longest],
        };
        PayloadGen { format, dist, min_len, rng, filler }
    }

    /// Write the body of request `n`, sent at `ts_us`, into `out` (cleared
    /// first). Returns its length.
    pub fn build(&mut self, out: &mut Vec<u8>, n: u64, ts_us: u64) -> usize {
        let len = self.dist.sample(&mut self.rng).max(self.min_len);
        out.clear();
        match self.format {
            Format::Binary => encode_binary(out, ts_us, len, &self.filler),
            Format::Json => encode_json(out, ts_us, n, len, &self.filler),
        }
        out.len()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex(out: &mut Vec<u8>, v: u64, digits: usize) {
    for i in (0..digits).rev() {
        out.push(HEX[((v >> (4 * i)) & 0xf) as usize]);
    }
}

fn parse_hex(b: &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for &c in b {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

/// Append a binary body of exactly `len` bytes carrying `ts_us` (a header
/// only if `len >= BIN_HEADER`; `filler` must be at least `len` long).
pub fn encode_binary(out: &mut Vec<u8>, ts_us: u64, len: usize, filler: &[u8]) {
    if len < BIN_HEADER || len > u32::MAX as usize {
        out.extend_from_slice(&filler[..len]);
        return;
    }
    push_hex(out, ts_us, 16);
    push_hex(out, len as u64, 8);
    out.extend_from_slice(&filler[..len - BIN_HEADER]);
}

/// Decode the header at the start of `buf`: (timestamp µs, body length).
/// None if `buf` is too short or does not start with a valid header.
pub fn decode_binary(buf: &[u8]) -> Option<(u64, usize)> {
    let h = buf.get(..BIN_HEADER)?;
    let ts = parse_hex(&h[..16])?;
    let len = parse_hex(&h[16..])? as usize;
    (len >= BIN_HEADER).then_some((ts, len))
}

/// Append a JSON message of about `len` bytes (never less than the message
/// without padding). `pad` must be at least `len` bytes of 'x'.
pub fn encode_json(out: &mut Vec<u8>, ts_us: u64, n: u64, len: usize, pad: &[u8]) {
    use std::io::Write as _;
    let _ = write!(out, "{{\"t\":{ts_us},\"i\":{n},\"pad\":\"");
    let fixed = out.len() + 2;
    let padding = len.saturating_sub(fixed).min(pad.len());
    out.extend_from_slice(&pad[..padding]);
    out.extend_from_slice(b"\"}");
}

/// Send timestamps found in binary data as a reader receives it: bodies
/// back to back, possibly cut anywhere between reads. Carries the unfinished
/// tail of one call over to the next.
#[derive(Debug, Default)]
pub struct BinaryScanner {
    carry: Vec<u8>,
}

impl BinaryScanner {
    /// Scan `data`, calling `found(ts)` for every complete body. Returns
    /// false (and forgets the carried bytes) if something that is not a
    /// loadgen body was found; the rest of `data` is then skipped.
    pub fn scan(&mut self, data: &[u8], mut found: impl FnMut(u64)) -> bool {
        if self.carry.is_empty() {
            match walk(data, &mut found) {
                Some(used) => {
                    self.carry.extend_from_slice(&data[used..]);
                    true
                }
                None => false,
            }
        } else {
            self.carry.extend_from_slice(data);
            match walk(&self.carry, &mut found) {
                Some(used) => {
                    self.carry.drain(..used);
                    true
                }
                None => {
                    self.carry.clear();
                    false
                }
            }
        }
    }

    /// Bytes of an unfinished body waiting for the next read.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.carry.len()
    }
}

/// Walk complete bodies in `buf`; returns the bytes they used, or None on
/// garbage.
fn walk(buf: &[u8], found: &mut impl FnMut(u64)) -> Option<usize> {
    let mut at = 0;
    while buf.len() - at >= BIN_HEADER {
        let (ts, len) = decode_binary(&buf[at..])?;
        if buf.len() - at < len {
            // A body cut short: the rest comes with the next read.
            return Some(at);
        }
        found(ts);
        at += len;
    }
    // A partial header must at least look like one.
    buf[at..].iter().all(u8::is_ascii_hexdigit).then_some(at)
}

#[derive(Deserialize)]
struct JsonMsg {
    t: Option<u64>,
}

/// Send timestamps of the messages in a JSON array read body (`[{…},…]`).
/// Messages without a numeric `t` are skipped; Err if the body is not an
/// array of objects.
pub fn decode_json_array(body: &[u8]) -> Result<Vec<u64>, serde_json::Error> {
    let msgs: Vec<JsonMsg> = serde_json::from_slice(body)?;
    Ok(msgs.into_iter().filter_map(|m| m.t).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_timestamp_round_trip() {
        let filler: Vec<u8> = (0..5000).map(|i| b'a' + (i % 26) as u8).collect();
        for (ts, len) in [(0u64, 24usize), (1, 25), (1_764_000_000_123_456, 1024), (u64::MAX, 4096)] {
            let mut out = Vec::new();
            encode_binary(&mut out, ts, len, &filler);
            assert_eq!(out.len(), len);
            assert_eq!(decode_binary(&out), Some((ts, len)));
            assert!(out[..BIN_HEADER].iter().all(u8::is_ascii_hexdigit));
            assert!(out[BIN_HEADER..].iter().all(u8::is_ascii_lowercase));
        }
        assert_eq!(
            &{
                let mut o = Vec::new();
                encode_binary(&mut o, 0x1234, 30, &filler);
                o
            }[..],
            &b"00000000000012340000001eabcdef"[..]
        );
        // Too short for a header: filler only.
        let mut out = Vec::new();
        encode_binary(&mut out, 7, 10, &filler);
        assert_eq!(out, b"abcdefghij");
        assert_eq!(decode_binary(&out), None);
        // Garbage and short buffers.
        assert_eq!(decode_binary(b"zzzzzzzzzzzzzzzz00000020"), None);
        assert_eq!(decode_binary(b"000000000000000100000010"), None); // len < 24
        assert_eq!(decode_binary(b"0000"), None);
    }

    #[test]
    fn binary_scanner_handles_concatenation_and_any_cut() {
        let filler: Vec<u8> = (0..500).map(|i| b'a' + (i % 26) as u8).collect();
        let mut data = Vec::new();
        let mut want = Vec::new();
        for (i, len) in [24usize, 100, 37, 24, 300, 61].into_iter().enumerate() {
            let ts = 1_700_000_000_000_000 + i as u64 * 7919;
            encode_binary(&mut data, ts, len, &filler);
            want.push(ts);
        }
        for a in 0..data.len() {
            for b in [a, (a + 1).min(data.len()), (a + 29).min(data.len())] {
                let mut sc = BinaryScanner::default();
                let mut got = Vec::new();
                for piece in [&data[..a], &data[a..b], &data[b..]] {
                    assert!(sc.scan(piece, |t| got.push(t)));
                }
                assert_eq!(got, want, "cuts at {a}, {b}");
                assert_eq!(sc.pending(), 0);
            }
        }
        // Garbage is reported and forgotten.
        let mut sc = BinaryScanner::default();
        let mut n = 0;
        assert!(sc.scan(&data[..10], |_| n += 1));
        assert!(!sc.scan(b"not a header at all....", |_| n += 1));
        assert_eq!(sc.pending(), 0);
        assert!(sc.scan(&data, |_| n += 1));
        assert_eq!(n, want.len());
    }

    #[test]
    fn json_messages_round_trip() {
        let pad = vec![b'x'; 2000];
        let mut body = b"[".to_vec();
        for (i, len) in [1usize, 50, 1024].into_iter().enumerate() {
            let mut m = Vec::new();
            let ts = 1_764_000_000_000_000 + i as u64;
            encode_json(&mut m, ts, i as u64, len, &pad);
            let v: serde_json::Value = serde_json::from_slice(&m).unwrap();
            assert_eq!(v["t"], ts);
            assert_eq!(v["i"], i);
            if len >= 50 {
                assert_eq!(m.len(), len, "{}", String::from_utf8_lossy(&m));
            }
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&m);
        }
        body.extend_from_slice(b",{\"other\":1}]");
        assert_eq!(
            decode_json_array(&body).unwrap(),
            vec![1_764_000_000_000_000, 1_764_000_000_000_001, 1_764_000_000_000_002]
        );
        assert_eq!(decode_json_array(b"[]").unwrap(), Vec::<u64>::new());
        assert!(decode_json_array(b"[1,2]").is_err());
        assert!(decode_json_array(b"{\"t\":1}").is_err());
    }

    #[test]
    fn payload_dist_parse() {
        assert_eq!(PayloadDist::parse("fixed", 1024).unwrap(), PayloadDist::Fixed(1024));
        assert_eq!(PayloadDist::parse("uniform:10:20", 1).unwrap(), PayloadDist::Uniform(10, 20));
        assert_eq!(PayloadDist::parse("exp:512", 1).unwrap(), PayloadDist::Exp(512.0));
        for bad in ["", "uniform:5", "uniform:9:3", "exp:0", "exp:x", "normal:1:2"] {
            assert!(PayloadDist::parse(bad, 1).is_err(), "{bad}");
        }
        assert_eq!(PayloadDist::Uniform(1, 9).describe(), "uniform:1:9");
    }

    #[test]
    fn payload_dist_is_deterministic_and_bounded() {
        for d in
            [PayloadDist::Fixed(100), PayloadDist::Uniform(10, 20), PayloadDist::Uniform(0, 0), PayloadDist::Exp(256.0)]
        {
            let draw = |seed: u64| -> Vec<usize> {
                let mut r = Rng::derived(seed, 3);
                (0..20_000).map(|_| d.sample(&mut r)).collect()
            };
            let a = draw(42);
            assert_eq!(a, draw(42), "{d:?} not deterministic");
            if !matches!(d, PayloadDist::Fixed(_) | PayloadDist::Uniform(0, 0)) {
                assert_ne!(a, draw(43), "{d:?} ignores the seed");
            }
            let mean = a.iter().sum::<usize>() as f64 / a.len() as f64;
            match d {
                PayloadDist::Fixed(n) => assert!(a.iter().all(|&x| x == n)),
                PayloadDist::Uniform(lo, hi) => {
                    assert!(a.iter().all(|&x| (lo..=hi).contains(&x)));
                    // Both ends are reachable.
                    assert!(a.contains(&lo) && a.contains(&hi));
                    assert!((mean - (lo + hi) as f64 / 2.0).abs() < 0.2, "{mean}");
                }
                PayloadDist::Exp(m) => {
                    assert!(a.iter().all(|&x| x >= 1 && x <= d.max()));
                    assert_eq!(d.max(), 5120);
                    assert!((mean - m).abs() < m * 0.05, "{mean}");
                }
            }
        }
        // Different connections get different streams from one seed.
        let mut r0 = Rng::derived(1, 0);
        let mut r1 = Rng::derived(1, 1);
        assert_ne!(r0.next_u64(), r1.next_u64());
    }

    #[test]
    fn generator_respects_min_len_and_format() {
        let mut g = PayloadGen::new(Format::Binary, PayloadDist::Uniform(0, 40), BIN_HEADER, Rng::new(5));
        let mut out = Vec::new();
        for n in 0..1000 {
            let len = g.build(&mut out, n, 99);
            assert!((BIN_HEADER..=40).contains(&len));
            assert_eq!(decode_binary(&out), Some((99, len)));
        }
        let mut g = PayloadGen::new(Format::Json, PayloadDist::Fixed(200), 0, Rng::new(5));
        assert_eq!(g.build(&mut out, 7, 1_764_000_000_000_000), 200);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((v["t"].as_u64(), v["i"].as_u64()), (Some(1_764_000_000_000_000), Some(7)));
    }
}
