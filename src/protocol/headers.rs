//! Parsing and comparison of the protocol's request header values.
//!
//! Every parser here trims optional whitespace (space and tab) first: RFC 9110
//! says it is not part of a field value, and HTTP parsers differ in whether
//! they strip it, so doing it here keeps the decision in one place.

use chrono::DateTime;

use super::Error;
use crate::limits::{PRODUCER_ID_BYTES_MAX, STREAM_SEQ_BYTES_MAX};

/// Largest integer a JavaScript client can represent exactly; the producer
/// headers are capped there (F30) so every value round-trips through the
/// reference TypeScript client.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

fn ows_trim(v: &str) -> &str {
    v.trim_matches([' ', '\t'])
}

/// `^(0|[1-9][0-9]*)$` into a u64: the canonical form rules out leading zeros
/// and signs, which `u64::from_str` would otherwise let through.
fn parse_canonical_uint(v: &str, what: &str) -> Result<u64, Error> {
    let bytes = v.as_bytes();
    let canonical = match bytes {
        [] => false,
        [b'0'] => true,
        [first, rest @ ..] => (b'1'..=b'9').contains(first) && rest.iter().all(u8::is_ascii_digit),
    };
    if !canonical {
        return Err(Error::BadRequest(format!(
            "{what} {v:?}: expected a non-negative integer without sign or leading zeros"
        )));
    }
    v.parse::<u64>().map_err(|_| Error::BadRequest(format!("{what} {v:?}: value too large")))
}

/// `Stream-Closed` request header: only the exact value "true" in any case counts (F15); anything else is ignored (false).
pub fn stream_closed_requested(v: Option<&str>) -> bool {
    v.is_some_and(|v| ows_trim(v).eq_ignore_ascii_case("true"))
}

/// F90: `^(0|[1-9][0-9]*)$`, must fit u64 seconds.
pub fn parse_ttl(v: &str) -> Result<u64, Error> {
    parse_canonical_uint(ows_trim(v), "Stream-TTL")
}

/// F91: RFC 3339 with Z or ±hh:mm; returns Unix milliseconds.
pub fn parse_expires_at(v: &str) -> Result<i64, Error> {
    let v = ows_trim(v);
    // chrono also takes a space between date and time and a Unicode minus in
    // the offset; RFC 3339's grammar allows neither, so pin the shape first.
    if !v.is_ascii() || !matches!(v.as_bytes().get(10), Some(b'T' | b't')) {
        return Err(Error::BadRequest(format!(
            "Stream-Expires-At {v:?}: expected RFC 3339 date-time like 2030-01-01T00:00:00Z"
        )));
    }
    DateTime::parse_from_rfc3339(v)
        .map(|dt| dt.timestamp_millis())
        .map_err(|e| Error::BadRequest(format!("Stream-Expires-At {v:?}: {e}")))
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Lifetime {
    Forever,
    Ttl {
        secs: u64,
    },
    /// `raw` is kept because HEAD must echo the value as configured (F91),
    /// not a re-rendering that might change its offset or precision.
    ExpiresAt {
        at_ms: i64,
        raw: String,
    },
}

/// From the two optional headers; both present -> BadRequest (F92).
pub fn parse_lifetime(ttl: Option<&str>, expires_at: Option<&str>) -> Result<Lifetime, Error> {
    match (ttl, expires_at) {
        (Some(_), Some(_)) => {
            Err(Error::BadRequest("Stream-TTL and Stream-Expires-At are mutually exclusive".to_string()))
        }
        (Some(t), None) => parse_ttl(t).map(|secs| Lifetime::Ttl { secs }),
        (None, Some(e)) => parse_expires_at(e).map(|at_ms| Lifetime::ExpiresAt { at_ms, raw: ows_trim(e).to_string() }),
        (None, None) => Ok(Lifetime::Forever),
    }
}

/// Media type for comparisons: "Application/JSON; charset=utf-8" -> "application/json" (lower-cased, params and whitespace stripped).
pub fn media_type(ct: &str) -> String {
    // Dropping and lower-casing ASCII bytes keeps UTF-8 valid.
    String::from_utf8(media_type_bytes(ct).collect()).expect("ASCII edits of UTF-8")
}

/// The bytes of [`media_type`], without building a string (checked on
/// every append).
fn media_type_bytes(ct: &str) -> impl Iterator<Item = u8> + '_ {
    let essence = ct.split(';').next().unwrap_or("");
    essence.bytes().filter(|b| !b.is_ascii_whitespace()).map(|b| b.to_ascii_lowercase())
}

pub fn content_types_match(a: &str, b: &str) -> bool {
    media_type_bytes(a).eq(media_type_bytes(b))
}

/// RFC 9110 `tchar`: what a media type's type and subtype may consist of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// The content type a created stream stores (F13): the value as sent (trimmed) if it looks like `type/subtype` (both non-empty tokens), else "application/octet-stream".
pub fn stream_content_type(v: Option<&str>) -> String {
    let Some(v) = v.map(ows_trim) else {
        return DEFAULT_CONTENT_TYPE.to_string();
    };
    let essence = ows_trim(v.split(';').next().unwrap_or(""));
    let well_formed = essence.split_once('/').is_some_and(|(t, s)| is_token(t) && is_token(s));
    // The stored value is echoed verbatim in response headers, so anything
    // that could not legally appear in a header value falls back too.
    let printable = v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
    if well_formed && printable {
        v.to_string()
    } else {
        DEFAULT_CONTENT_TYPE.to_string()
    }
}

/// Media type application/json (any case, any parameters).
pub fn is_json(ct: &str) -> bool {
    media_type_bytes(ct).eq(*b"application/json")
}

/// SSE encoding rule (F65): text/* and application/json are text; everything else base64.
pub fn sse_is_text(ct: &str) -> bool {
    let mt = media_type(ct);
    mt == "application/json" || mt.strip_prefix("text/").is_some_and(|sub| !sub.is_empty())
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProducerHeaders {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// `^\d+$` (leading zeros allowed, unlike TTL) capped at 2^53-1.
fn parse_producer_number(v: &str, what: &str) -> Result<u64, Error> {
    let v = ows_trim(v);
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::BadRequest(format!("{what} {v:?}: expected decimal digits only")));
    }
    match v.parse::<u64>() {
        Ok(n) if n <= MAX_SAFE_INTEGER => Ok(n),
        _ => Err(Error::BadRequest(format!("{what} {v:?}: exceeds 2^53-1"))),
    }
}

/// F30: all three or none (none -> Ok(None)); empty id -> 400; epoch/seq `^\d+$` and <= 2^53-1 else 400.
pub fn parse_producer(
    id: Option<&str>,
    epoch: Option<&str>,
    seq: Option<&str>,
) -> Result<Option<ProducerHeaders>, Error> {
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            let id = ows_trim(id);
            if id.is_empty() {
                return Err(Error::BadRequest("Producer-Id must not be empty".to_string()));
            }
            check_len(id, "Producer-Id", PRODUCER_ID_BYTES_MAX)?;
            Ok(Some(ProducerHeaders {
                id: id.to_string(),
                epoch: parse_producer_number(epoch, "Producer-Epoch")?,
                seq: parse_producer_number(seq, "Producer-Seq")?,
            }))
        }
        _ => Err(Error::BadRequest("Producer-Id, Producer-Epoch and Producer-Seq must be sent together".to_string())),
    }
}

/// A header value a stream keeps (in memory and in its state record) may
/// be at most `max` bytes.
fn check_len(v: &str, what: &str, max: usize) -> Result<(), Error> {
    if v.len() > max {
        return Err(Error::BadRequest(format!("{what} is {} bytes long; at most {max} are accepted", v.len())));
    }
    Ok(())
}

/// `Stream-Seq`: any value (compared bytewise, F24) of at most
/// STREAM_SEQ_BYTES_MAX bytes.
pub fn parse_stream_seq(v: Option<&str>) -> Result<Option<String>, Error> {
    let Some(v) = v else { return Ok(None) };
    check_len(v, "Stream-Seq", STREAM_SEQ_BYTES_MAX)?;
    Ok(Some(v.to_string()))
}

/// F101: `Stream-Fork-Sub-Offset`: `^(0|[1-9][0-9]*)$` (so -1, abc, 1.5, 05, +1 are rejected).
pub fn parse_sub_offset(v: &str) -> Result<u64, Error> {
    parse_canonical_uint(ows_trim(v), "Stream-Fork-Sub-Offset")
}

fn strip_weak(tag: &str) -> &str {
    tag.strip_prefix("W/").unwrap_or(tag)
}

/// Splits an entity-tag list. Quoted tags are read up to their closing quote
/// because `,` is a legal etag character; a bare (unquoted) item, which some
/// clients send, runs to the next comma.
fn entity_tags(header: &str) -> Vec<&str> {
    let mut tags = Vec::new();
    let mut rest = header;
    loop {
        rest = rest.trim_start_matches([',', ' ', '\t']);
        if rest.is_empty() {
            return tags;
        }
        let body = strip_weak(rest);
        let weak_len = rest.len() - body.len();
        let end = if let Some(after_quote) = body.strip_prefix('"') {
            match after_quote.find('"') {
                Some(i) => weak_len + i + 2,
                None => rest.len(),
            }
        } else {
            rest.find(',').unwrap_or(rest.len())
        };
        tags.push(ows_trim(&rest[..end]));
        rest = &rest[end..];
    }
}

/// `If-Match` / `If-None-Match` value comparison: compares an entity-tag list ("a", "b" or *) against the current etag string (which includes its quotes); weak prefix W/ ignored.
pub fn etag_matches(header: &str, current: &str) -> bool {
    let current = strip_weak(ows_trim(current));
    let current_unquoted = current.strip_prefix('"').and_then(|c| c.strip_suffix('"')).unwrap_or(current);
    entity_tags(header).into_iter().any(|tag| {
        if tag == "*" {
            return true;
        }
        let tag = strip_weak(tag);
        tag == current || (!tag.starts_with('"') && tag == current_unquoted)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_bad<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
        matches!(r, Err(Error::BadRequest(_)))
    }

    #[test]
    fn stream_closed_only_true_counts() {
        assert!(stream_closed_requested(Some("true")));
        assert!(stream_closed_requested(Some("TRUE")));
        assert!(stream_closed_requested(Some("True")));
        assert!(stream_closed_requested(Some(" true ")));
        for v in ["false", "1", "yes", "", "truee", "t", "true,true"] {
            assert!(!stream_closed_requested(Some(v)), "{v:?}");
        }
        assert!(!stream_closed_requested(None));
    }

    #[test]
    fn ttl_accepts_canonical_integers() {
        assert_eq!(parse_ttl("0"), Ok(0));
        assert_eq!(parse_ttl("60"), Ok(60));
        assert_eq!(parse_ttl("3600"), Ok(3600));
        assert_eq!(parse_ttl("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn ttl_rejects_f90_examples() {
        for bad in ["abc", "-1", "00060", "+60", "60.5", "1e3", "", "00", "6 0", "18446744073709551616"] {
            assert!(is_bad(parse_ttl(bad)), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn expires_at_accepts_z_and_numeric_offsets() {
        assert_eq!(parse_expires_at("2024-10-09T00:00:00Z"), Ok(1_728_432_000_000));
        assert_eq!(parse_expires_at("2024-10-09T02:00:00+02:00"), Ok(1_728_432_000_000));
        assert_eq!(parse_expires_at("2024-10-08T19:00:00-05:00"), Ok(1_728_432_000_000));
        assert_eq!(parse_expires_at("2024-10-09T00:00:00.250Z"), Ok(1_728_432_000_250));
        assert_eq!(parse_expires_at("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_expires_at("1969-12-31T23:59:59Z"), Ok(-1000));
    }

    #[test]
    fn expires_at_rejects_non_rfc3339() {
        for bad in [
            "",
            "invalid-date",
            "tomorrow",
            "2024-10-09",
            "2024-10-09T00:00:00",
            "2024-10-09 00:00:00Z",
            "2024-10-09T00:00:00+0200",
            "2024-13-01T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2024-10-09T25:00:00Z",
            "2024-10-09T00:00:00Z junk",
            "1728432000",
            "Wed, 09 Oct 2024 00:00:00 GMT",
        ] {
            assert!(is_bad(parse_expires_at(bad)), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn lifetime_combinations() {
        assert_eq!(parse_lifetime(None, None), Ok(Lifetime::Forever));
        assert_eq!(parse_lifetime(Some("3600"), None), Ok(Lifetime::Ttl { secs: 3600 }));
        assert_eq!(
            parse_lifetime(None, Some("2030-01-01T00:00:00+01:00")),
            Ok(Lifetime::ExpiresAt { at_ms: 1_893_452_400_000, raw: "2030-01-01T00:00:00+01:00".to_string() })
        );
        assert!(is_bad(parse_lifetime(Some("60"), Some("2030-01-01T00:00:00Z"))));
        assert!(is_bad(parse_lifetime(Some("abc"), None)));
        assert!(is_bad(parse_lifetime(None, Some("invalid"))));
    }

    #[test]
    fn media_type_normalisation() {
        assert_eq!(media_type("Application/JSON; charset=utf-8"), "application/json");
        assert_eq!(media_type(" text/plain ;charset=x"), "text/plain");
        assert_eq!(media_type("TEXT/PLAIN"), "text/plain");
        assert!(content_types_match("application/json", "APPLICATION/JSON; charset=utf-8"));
        assert!(content_types_match("text/plain", "text/plain; charset=utf-8"));
        assert!(!content_types_match("text/plain", "application/json"));
        assert!(!content_types_match("text/plain", "text/html"));
        assert!(!content_types_match("text/plain", "text/plainx"));
        assert!(!content_types_match("text/plai", "text/plain"));
        assert!(content_types_match(" Text / Plain ;a=b", "text/plain"));
        assert!(is_json("Application/Json; charset=utf-8"));
        assert!(!is_json("application/json-seq"));
    }

    #[test]
    fn stored_content_type_defaults() {
        assert_eq!(stream_content_type(None), "application/octet-stream");
        assert_eq!(stream_content_type(Some("")), "application/octet-stream");
        assert_eq!(stream_content_type(Some("text")), "application/octet-stream");
        assert_eq!(stream_content_type(Some("text/")), "application/octet-stream");
        assert_eq!(stream_content_type(Some("/plain")), "application/octet-stream");
        assert_eq!(stream_content_type(Some("a/b/c")), "application/octet-stream");
        assert_eq!(stream_content_type(Some("text/pl ain")), "application/octet-stream");
        assert_eq!(stream_content_type(Some("text/plain\r\nX: y")), "application/octet-stream");
        assert_eq!(stream_content_type(Some("text/plain")), "text/plain");
        assert_eq!(stream_content_type(Some("  Application/JSON; charset=utf-8 ")), "Application/JSON; charset=utf-8");
        assert_eq!(stream_content_type(Some("application/vnd.api+json")), "application/vnd.api+json");
    }

    #[test]
    fn json_and_sse_text_classification() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/Json; charset=utf-8"));
        assert!(!is_json("application/jsonl"));
        assert!(!is_json("text/json"));

        assert!(sse_is_text("text/plain"));
        assert!(sse_is_text("text/html; charset=utf-8"));
        assert!(sse_is_text("TEXT/CSV"));
        assert!(sse_is_text("application/json"));
        assert!(!sse_is_text("application/octet-stream"));
        assert!(!sse_is_text("application/x-protobuf"));
        assert!(!sse_is_text("image/png"));
        assert!(!sse_is_text("application/ndjson"));
        assert!(!sse_is_text("texty/plain"));
    }

    #[test]
    fn producer_all_or_none() {
        assert_eq!(parse_producer(None, None, None), Ok(None));
        assert_eq!(
            parse_producer(Some("p1"), Some("0"), Some("0")),
            Ok(Some(ProducerHeaders { id: "p1".to_string(), epoch: 0, seq: 0 }))
        );
        assert_eq!(
            parse_producer(Some("p"), Some("007"), Some("9007199254740991")),
            Ok(Some(ProducerHeaders { id: "p".to_string(), epoch: 7, seq: MAX_SAFE_INTEGER }))
        );
        assert!(is_bad(parse_producer(Some("p"), None, None)));
        assert!(is_bad(parse_producer(Some("p"), Some("0"), None)));
        assert!(is_bad(parse_producer(None, Some("0"), Some("0"))));
        assert!(is_bad(parse_producer(None, None, Some("0"))));
        assert!(is_bad(parse_producer(Some(""), Some("0"), Some("0"))));
    }

    #[test]
    fn producer_rejects_f30_numbers() {
        for bad in ["1abc", "0xyz", "1e3", "-1", "", "+1", "1.0", "9007199254740992", "99999999999999999999999"] {
            assert!(is_bad(parse_producer(Some("p"), Some(bad), Some("0"))), "epoch {bad:?}");
            assert!(is_bad(parse_producer(Some("p"), Some("0"), Some(bad))), "seq {bad:?}");
        }
    }

    #[test]
    fn producer_ids_and_stream_seqs_are_at_most_256_bytes() {
        let at = "p".repeat(PRODUCER_ID_BYTES_MAX);
        let over = "p".repeat(PRODUCER_ID_BYTES_MAX + 1);
        assert_eq!(parse_producer(Some(&at), Some("0"), Some("0")).unwrap().unwrap().id, at);
        let e = parse_producer(Some(&over), Some("0"), Some("0")).unwrap_err();
        assert!(matches!(&e, Error::BadRequest(m) if m.starts_with("Producer-Id is 257 bytes long")), "{e:?}");
        // Whitespace around the id is not part of it.
        assert!(parse_producer(Some(&format!(" {at}\t")), Some("0"), Some("0")).is_ok());
        let seq = "9".repeat(STREAM_SEQ_BYTES_MAX);
        assert_eq!(parse_stream_seq(Some(&seq)), Ok(Some(seq.clone())));
        assert_eq!(parse_stream_seq(None), Ok(None));
        let e = parse_stream_seq(Some(&format!("{seq}9"))).unwrap_err();
        assert!(matches!(&e, Error::BadRequest(m) if m.starts_with("Stream-Seq is 257 bytes long")), "{e:?}");
    }

    #[test]
    fn sub_offset_rules() {
        assert_eq!(parse_sub_offset("0"), Ok(0));
        assert_eq!(parse_sub_offset("5"), Ok(5));
        assert_eq!(parse_sub_offset("1024"), Ok(1024));
        for bad in ["-1", "abc", "1.5", "05", "+1", "", "00", "1e2"] {
            assert!(is_bad(parse_sub_offset(bad)), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn etag_list_matching() {
        let cur = "\"abc:0:10\"";
        assert!(etag_matches("\"abc:0:10\"", cur));
        assert!(etag_matches("W/\"abc:0:10\"", cur));
        assert!(etag_matches("\"abc:0:10\"", "W/\"abc:0:10\""));
        assert!(etag_matches("*", cur));
        assert!(etag_matches("\"x\", \"abc:0:10\"", cur));
        assert!(etag_matches("\"x\",W/\"abc:0:10\" , \"y\"", cur));
        // Unquoted values are tolerated for sloppy clients.
        assert!(etag_matches("abc:0:10", cur));
        assert!(!etag_matches("\"abc:0:11\"", cur));
        assert!(!etag_matches("\"abc:0:10:c\"", cur));
        assert!(!etag_matches("", cur));
        assert!(!etag_matches("\"x\", \"y\"", cur));
        // A comma inside a quoted tag must not split it.
        assert!(etag_matches("\"a,b\"", "\"a,b\""));
        assert!(!etag_matches("\"a,b\"", "\"a\""));
    }
}
