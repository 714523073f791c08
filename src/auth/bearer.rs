//! The token a request presents: `Authorization: Bearer <token>` (RFC 6750)
//! parsed without allocating, and its SHA-256 digest, which is all the
//! server keeps of a token. Digests compare in constant time.

use crate::limits::AUTH_TOKEN_BYTES_MAX;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

/// Why a request is not authenticated (401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unauthenticated {
    /// No `Authorization` header.
    Missing,
    /// Not one `Bearer <token>` header with a well-formed token.
    Malformed,
    /// A well-formed token that no entry of the auth file has.
    Unknown,
}

impl Unauthenticated {
    pub const ALL: [Unauthenticated; 3] =
        [Unauthenticated::Missing, Unauthenticated::Malformed, Unauthenticated::Unknown];

    /// The `reason` label of `ringstream_unauthorized_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unauthenticated::Missing => "missing",
            Unauthenticated::Malformed => "malformed",
            Unauthenticated::Unknown => "unknown",
        }
    }

    /// What the 401 says, for the client's operator.
    pub fn message(self) -> &'static str {
        match self {
            Unauthenticated::Missing => "this server needs a token: send Authorization: Bearer <token>",
            Unauthenticated::Malformed => {
                "malformed Authorization header: send exactly one, of the form Bearer <token> (token characters: A-Z a-z 0-9 - . _ ~ + / then optional =)"
            }
            Unauthenticated::Unknown => "unknown token",
        }
    }
}

/// The token of an `Authorization` header value: the scheme `Bearer`
/// (any case), one or more spaces, then a b64token (RFC 6750 section 2.1) of
/// at most AUTH_TOKEN_BYTES_MAX bytes.
pub fn bearer_token(value: &str) -> Result<&str, Unauthenticated> {
    let (scheme, rest) = value.split_once(' ').ok_or(Unauthenticated::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Unauthenticated::Malformed);
    }
    let token = rest.trim_start_matches(' ');
    let body = token.trim_end_matches('=');
    let well_formed = !body.is_empty()
        && token.len() <= AUTH_TOKEN_BYTES_MAX
        && body.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
    if !well_formed {
        return Err(Unauthenticated::Malformed);
    }
    Ok(token)
}

/// A SHA-256 digest of a token. Equality is constant-time, so looking a
/// presented token up never tells by its timing how much of a stored digest
/// it matched.
#[derive(Clone, Copy)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of a presented token (its bytes as sent).
    pub fn of(token: &str) -> Digest {
        Digest(Sha256::digest(token.as_bytes()).into())
    }

    /// 64 hex digits, either case, as the auth file gives them.
    pub fn from_hex(hex: &str) -> Option<Digest> {
        if hex.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let text = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(text, 16).ok()?;
        }
        // from_str_radix takes a leading '+'; a digest has none.
        hex.bytes().all(|b| b.is_ascii_hexdigit()).then_some(Digest(out))
    }
}

impl PartialEq for Digest {
    fn eq(&self, other: &Digest) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for Digest {}

impl std::hash::Hash for Digest {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // A digest is uniformly distributed: its first 8 bytes are as good
        // a hash as any, and hashing them leaks nothing about a token.
        state.write_u64(u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes")));
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a digest in full: logs must not help a guess.
        write!(f, "Digest({:02x}{:02x}..)", self.0[0], self.0[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_headers() {
        assert_eq!(bearer_token("Bearer abc"), Ok("abc"));
        assert_eq!(bearer_token("bearer   a.b-c_d~e+f/g=="), Ok("a.b-c_d~e+f/g=="));
        assert_eq!(bearer_token("BEARER x"), Ok("x"));
        for bad in [
            "",
            "Bearer",
            "Bearer ",
            "Bearer  ",
            "Basic dXNlcjpwdw==",
            "Bearerabc",
            "Bearer a b",
            "Bearer ===",
            "Bearer a=b",
            "Bearer é",
            "Bearer a\tb",
            "Token abc",
        ] {
            assert_eq!(bearer_token(bad), Err(Unauthenticated::Malformed), "{bad:?}");
        }
        let long = format!("Bearer {}", "a".repeat(AUTH_TOKEN_BYTES_MAX + 1));
        assert_eq!(bearer_token(&long), Err(Unauthenticated::Malformed));
        let longest = format!("Bearer {}", "a".repeat(AUTH_TOKEN_BYTES_MAX));
        assert!(bearer_token(&longest).is_ok());
    }

    #[test]
    fn digests_match_sha256sum_and_parse_either_case() {
        // printf '%s' secret | sha256sum
        let hex = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
        assert_eq!(Digest::of("secret"), Digest::from_hex(hex).unwrap());
        assert_eq!(Digest::from_hex(&hex.to_uppercase()), Digest::from_hex(hex));
        assert_ne!(Digest::of("secret2"), Digest::from_hex(hex).unwrap());
        for bad in ["", "2bb8", &hex[1..], &format!("{hex}0"), &format!("+{}", &hex[1..]), &hex.replace('b', "g")] {
            assert!(Digest::from_hex(bad).is_none(), "{bad:?}");
        }
        assert!(!format!("{:?}", Digest::of("secret")).contains(&hex[..8]));
    }
}
