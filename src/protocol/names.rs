//! Bucket and stream naming rules for the `/ds` and `/v1/stream` surfaces.
//!
//! Both surfaces address the same streams, so `/v1` paths are mapped onto a
//! (bucket, stream) pair here rather than in the HTTP layer.

use super::Error;

pub const DEFAULT_BUCKET: &str = "_default";

use crate::limits::{
    BUCKET_ID_BYTES_MAX, BUCKET_ID_BYTES_MIN, DS_STREAM_ID_BYTES_MAX as MAX_DS_STREAM_ID_BYTES,
    V1_PATH_BYTES_MAX as MAX_V1_PATH_BYTES,
};

/// snakream.md: bucket ID `[a-z0-9_-]{4,64}`.
pub fn validate_bucket_id(s: &str) -> Result<(), Error> {
    if !(BUCKET_ID_BYTES_MIN..=BUCKET_ID_BYTES_MAX).contains(&s.len()) {
        return Err(Error::BadRequest(format!("bucket id {s:?}: must be 4-64 characters")));
    }
    if let Some(c) = s.chars().find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')) {
        return Err(Error::BadRequest(format!(
            "bucket id {s:?}: character {c:?} not allowed (use a-z, 0-9, '_' or '-')"
        )));
    }
    Ok(())
}

/// snakream.md: stream ID on /ds: UTF-8, 1–122 bytes, no '/', NUL or "..", and not the reserved "streams".
///
/// Also rejected, so that every /ds stream is reachable through /v1 and can
/// be echoed in a `Location` header: other control characters, and a lone
/// "." (URL resolution would swallow it as a dot-segment).
pub fn validate_ds_stream_id(s: &str) -> Result<(), Error> {
    if s.is_empty() || s.len() > MAX_DS_STREAM_ID_BYTES {
        return Err(Error::BadRequest(format!("stream id must be 1-{MAX_DS_STREAM_ID_BYTES} bytes, got {}", s.len())));
    }
    if s.contains('/') {
        return Err(Error::BadRequest(format!("stream id {s:?}: '/' not allowed")));
    }
    if s.contains("..") {
        return Err(Error::BadRequest(format!("stream id {s:?}: \"..\" not allowed")));
    }
    if s.chars().any(|c| c.is_control()) {
        return Err(Error::BadRequest(format!("stream id {s:?}: NUL and control characters not allowed")));
    }
    if s == "." {
        return Err(Error::BadRequest("stream id \".\" is not allowed".to_string()));
    }
    if s == "streams" {
        return Err(Error::BadRequest("stream id \"streams\" is reserved for bucket listings".to_string()));
    }
    Ok(())
}

/// /v1/stream/{path}: split at the first '/': bucket before, stream after (which may contain more slashes); no '/' -> bucket "_default".
/// Reject empty path, empty segments ("a//b", trailing '/'), a ".." or "." segment, NUL or control characters, or a path longer than 1024 bytes -> BadRequest.
pub fn split_v1_path(path: &str) -> Result<(String, String), Error> {
    if path.is_empty() {
        return Err(Error::BadRequest("stream path is empty".to_string()));
    }
    if path.len() > MAX_V1_PATH_BYTES {
        return Err(Error::BadRequest(format!("stream path is {} bytes, limit is {MAX_V1_PATH_BYTES}", path.len())));
    }
    // `char::is_control` covers C0, DEL and C1, which includes NUL, CR and LF.
    if path.chars().any(|c| c.is_control()) {
        return Err(Error::BadRequest(format!("stream path {path:?}: NUL and control characters not allowed")));
    }
    for segment in path.split('/') {
        match segment {
            "" => return Err(Error::BadRequest(format!("stream path {path:?}: empty path segment"))),
            "." | ".." => return Err(Error::BadRequest(format!("stream path {path:?}: dot segments not allowed"))),
            _ => {}
        }
    }
    Ok(match path.split_once('/') {
        Some((bucket, stream)) => (bucket.to_string(), stream.to_string()),
        None => (DEFAULT_BUCKET.to_string(), path.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_bad(r: Result<impl std::fmt::Debug, Error>) -> bool {
        matches!(r, Err(Error::BadRequest(_)))
    }

    fn pair(b: &str, s: &str) -> Result<(String, String), Error> {
        Ok((b.to_string(), s.to_string()))
    }

    #[test]
    fn bucket_ids() {
        for ok in ["abcd", "my-bucket", "tenant_42", "0000", &"a".repeat(64)] {
            assert_eq!(validate_bucket_id(ok), Ok(()), "{ok:?}");
        }
        for bad in ["", "abc", &"a".repeat(65), "MyBucket", "my.bucket", "my bucket", "my/bucket", "buck\0et", "bücket"]
        {
            assert!(is_bad(validate_bucket_id(bad)), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn ds_stream_ids() {
        for ok in ["s", "chat-room.1", "a.b", "Ünïcödé", "streams2", "Streams", "my stream", &"x".repeat(122)] {
            assert_eq!(validate_ds_stream_id(ok), Ok(()), "{ok:?}");
        }
        // 61 two-byte characters = 122 bytes is fine, one more is not.
        assert_eq!(validate_ds_stream_id(&"é".repeat(61)), Ok(()));
        for bad in ["", &"x".repeat(123), &"é".repeat(62), "a/b", "/", "..", "a..b", "a\0b", "a\nb", ".", "streams"] {
            assert!(is_bad(validate_ds_stream_id(bad)), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn v1_paths_split_at_first_slash() {
        assert_eq!(split_v1_path("orders"), pair("_default", "orders"));
        assert_eq!(split_v1_path("bkt/stream"), pair("bkt", "stream"));
        assert_eq!(split_v1_path("bkt/a/b/c"), pair("bkt", "a/b/c"));
        assert_eq!(split_v1_path("test-stream-1712345678-abc"), pair("_default", "test-stream-1712345678-abc"));
        assert_eq!(split_v1_path("a.b/c.d"), pair("a.b", "c.d"));
        assert_eq!(split_v1_path("b/...x"), pair("b", "...x"));
        let long = format!("b/{}", "s".repeat(1022));
        assert_eq!(split_v1_path(&long), pair("b", &"s".repeat(1022)));
    }

    #[test]
    fn v1_paths_rejected() {
        let too_long = "s".repeat(1025);
        for bad in [
            "",
            "/",
            "/a",
            "a/",
            "a//b",
            "a/b/",
            "..",
            ".",
            "a/..",
            "../a",
            "a/./b",
            "a\0b",
            "a\rb",
            "a\nb",
            "a\tb",
            "a\u{7f}b",
            too_long.as_str(),
        ] {
            assert!(is_bad(split_v1_path(bad)), "{bad:?} should be rejected");
        }
    }
}
