//! The client-facing origin of a request, for absolute URLs (`Location`).
//!
//! Behind a TLS-terminating proxy the request arrives over plain HTTP, so
//! the scheme the client used is only known from what the proxy says:
//! `Forwarded: proto=https;host=...` (RFC 7239) or `X-Forwarded-Proto` /
//! `X-Forwarded-Host`. Any client can send those headers, so they are read
//! only when the operator says a proxy that sets them sits in front
//! (`--trust-proxy`); otherwise the origin is `http://` + `Host`.

use super::parse::RequestHead;

/// Scheme and authority the client addressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin<'a> {
    pub scheme: &'a str,
    pub host: &'a str,
}

/// The origin of `head`: `http` and its `Host` (else `localhost`), with the
/// proxy's `proto` and `host` taking over when `trust_proxy`. `Forwarded`
/// wins over the `X-Forwarded-*` pair; of a list, the first element counts
/// (the one the proxy nearest the client added).
pub fn origin(head: &RequestHead, trust_proxy: bool) -> Origin<'_> {
    let mut o = Origin { scheme: "http", host: head.header("host").unwrap_or("localhost") };
    if !trust_proxy {
        return o;
    }
    let first = |name: &str| head.header(name).and_then(|v| v.split(',').next()).map(str::trim);
    let (proto, host) = match head.header("forwarded") {
        Some(f) => (forwarded_param(f, "proto"), forwarded_param(f, "host")),
        None => (first("x-forwarded-proto"), first("x-forwarded-host")),
    };
    if let Some(p) = proto.and_then(scheme) {
        o.scheme = p;
    }
    if let Some(h) = host.filter(|h| valid_host(h)) {
        o.host = h;
    }
    o
}

/// `param` of the first element of a `Forwarded` value, unquoted.
fn forwarded_param<'a>(value: &'a str, param: &str) -> Option<&'a str> {
    let element = value.split(',').next()?;
    element.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        k.trim().eq_ignore_ascii_case(param).then(|| {
            let v = v.trim();
            v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v)
        })
    })
}

/// Only the two schemes a Location may name.
fn scheme(p: &str) -> Option<&'static str> {
    if p.eq_ignore_ascii_case("https") {
        Some("https")
    } else if p.eq_ignore_ascii_case("http") {
        Some("http")
    } else {
        None
    }
}

/// A host[:port] without anything that would change the URL's meaning.
fn valid_host(h: &str) -> bool {
    !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse::{parse_head, ParseLimits};

    fn head(headers: &str) -> RequestHead {
        let raw = format!("PUT /v1/stream/x HTTP/1.1\r\nHost: inner:4437\r\n{headers}\r\n");
        let limits = ParseLimits { header_bytes_max: 8192, header_count_max: 64, body_bytes_max: 1 << 20 };
        parse_head(raw.as_bytes(), &limits).unwrap().0
    }

    fn url(headers: &str, trust: bool) -> String {
        let h = head(headers);
        let o = origin(&h, trust);
        format!("{}://{}", o.scheme, o.host)
    }

    #[test]
    fn proxy_headers_count_only_when_trusted() {
        let xf = "X-Forwarded-Proto: https\r\nX-Forwarded-Host: streams.example.com\r\n";
        assert_eq!(url(xf, false), "http://inner:4437");
        assert_eq!(url(xf, true), "https://streams.example.com");
        assert_eq!(url("", true), "http://inner:4437");
    }

    #[test]
    fn forwarded_wins_and_its_first_element_counts() {
        let f = "Forwarded: for=192.0.2.60;proto=https;host=\"a.example:8443\", proto=http;host=b\r\n\
                 X-Forwarded-Proto: http\r\n";
        assert_eq!(url(f, true), "https://a.example:8443");
        assert_eq!(url("Forwarded: For=x; Proto=HTTPS\r\n", true), "https://inner:4437");
        assert_eq!(url("X-Forwarded-Proto: https, http\r\n", true), "https://inner:4437");
    }

    #[test]
    fn nonsense_is_ignored() {
        assert_eq!(url("X-Forwarded-Proto: javascript\r\n", true), "http://inner:4437");
        assert_eq!(url("X-Forwarded-Host: evil.example/path?\r\n", true), "http://inner:4437");
        assert_eq!(url("Forwarded: host=\r\n", true), "http://inner:4437");
    }
}
