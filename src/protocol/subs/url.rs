//! Which webhook URLs a subscription may name: the server POSTs to them, so
//! an unchecked URL would let any client make it call its own network
//! (SSRF). https only, and never a loopback, private, link-local or
//! otherwise internal address; except that a server listening on a loopback
//! address (development, the conformance suite) accepts `http://` and
//! `https://` receivers on loopback.
//!
//! A host name is checked as a name here (`localhost` is loopback,
//! `.internal` and `.local` are internal); what it resolves to is checked
//! again at every delivery (`tier/outbound.rs`, with [`is_public`]), so a
//! public name pointing at a private address is refused then.

use crate::protocol::Error;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Accepts `url` or says why not (400 `WEBHOOK_URL_REJECTED`).
pub fn check(url: &str, loopback_server: bool) -> Result<(), Error> {
    let reject = |why: &str| super::refused(400, "WEBHOOK_URL_REJECTED", format!("webhook url {url:?}: {why}"));
    let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(r), _) => (true, r),
        (None, Some(r)) => (false, r),
        _ => return Err(reject("must be an https:// URL")),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(reject("must not carry credentials"));
    }
    let host = host_of(authority).ok_or_else(|| reject("has no valid host"))?;
    let loopback = is_loopback_name(&host) || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return if loopback_server { Ok(()) } else { Err(reject("loopback receivers are for a server on loopback")) };
    }
    if !https {
        return Err(reject("must be https"));
    }
    match host.parse::<IpAddr>() {
        Ok(ip) if !is_public(ip) => Err(reject("names a private, link-local or internal address")),
        _ if host.ends_with(".internal") || host.ends_with(".local") => Err(reject("names an internal host")),
        _ => Ok(()),
    }
}

/// The host of `host[:port]` or `[v6][:port]`, without brackets.
fn host_of(authority: &str) -> Option<String> {
    let host = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok())) {
            return None;
        }
        h.parse::<Ipv6Addr>().ok()?;
        h
    } else {
        let (h, port) = authority.split_once(':').unwrap_or((authority, ""));
        if !port.is_empty() && port.parse::<u16>().is_err() {
            return None;
        }
        h
    };
    let ok = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || ".-_:".contains(c));
    ok.then(|| host.to_ascii_lowercase())
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost" || host.ends_with(".localhost")
}

/// Whether an address is on the public internet (what a webhook may reach).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => public_v4(v4),
            None => public_v6(v6),
        },
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    let shared = a == 100 && (64..128).contains(&b); // 100.64.0.0/10, carrier-grade NAT
    let benchmarking = a == 198 && (b == 18 || b == 19);
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || shared
        || benchmarking)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    let unique_local = first & 0xfe00 == 0xfc00;
    let link_local = first & 0xffc0 == 0xfe80;
    let documentation = first == 0x2001 && ip.segments()[1] == 0x0db8;
    !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || unique_local || link_local || documentation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(url: &str, loopback: bool) -> Option<String> {
        match check(url, loopback) {
            Ok(()) => None,
            Err(Error::Refused { code, .. }) => Some(code),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn https_to_public_hosts_only() {
        assert_eq!(code("https://hooks.example.com/x", false), None);
        assert_eq!(code("https://93.184.216.34:8443/x", false), None);
        for bad in [
            "http://hooks.example.com/x",
            "ftp://a.example/x",
            "https://10.0.0.1/hook",
            "https://172.16.3.4/",
            "https://192.168.1.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://[fe80::1]/",
            "https://[fd00::1]/",
            "https://[::ffff:10.0.0.1]/",
            "https://0.0.0.0/",
            "https://100.64.0.1/",
            "https://user:pw@example.com/",
            "https://metadata.google.internal/",
            "https://",
            "https://a.example:99999/",
        ] {
            assert_eq!(code(bad, false).as_deref(), Some("WEBHOOK_URL_REJECTED"), "{bad}");
            assert_eq!(code(bad, true).as_deref(), Some("WEBHOOK_URL_REJECTED"), "{bad} (loopback server)");
        }
    }

    #[test]
    fn loopback_receivers_only_for_a_server_on_loopback() {
        for url in ["http://127.0.0.1:4000/webhook", "http://localhost/x", "https://[::1]:9/x"] {
            assert_eq!(code(url, true), None, "{url}");
            assert!(code(url, false).is_some(), "{url}");
        }
        assert!(code("http://10.0.0.1/hook", true).is_some(), "private stays refused on loopback");
    }
}
