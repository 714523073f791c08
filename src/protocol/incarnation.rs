//! `Stream-Incarnation`: which creation of its path a stream is, as an
//! opaque token that every successful answer about a stream carries and a
//! request may send back as a precondition.
//!
//! The token is made only of what every record of the stream carries in
//! its header, so recovery, a restart and every replica of a cell rebuild
//! the same value: the stream's uid (given out once per creation, never
//! again on the shard that owns its path, see `shard::state`) and its
//! incarnation number (the count of creations at the path). It is written
//! as 24 lowercase hex digits, the uid's 16 then the number's 8, and read
//! back only in exactly that form, so every token has one spelling and
//! names one creation: no other spelling of a value (upper case, fewer
//! digits, a sign, spaces) can be sent to match it.

use super::digits;
use super::error::Error;
use std::fmt;

/// Digits of the uid, then of the incarnation number.
const UID_DIGITS: usize = 16;
const NUMBER_DIGITS: usize = 8;
/// The length of a token.
pub const TOKEN_LEN: usize = UID_DIGITS + NUMBER_DIGITS;

/// One creation of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Incarnation {
    uid: u64,
    number: u32,
}

impl Incarnation {
    pub fn new(uid: u64, number: u32) -> Self {
        Incarnation { uid, number }
    }

    /// A `Stream-Incarnation` header's value: exactly [`TOKEN_LEN`]
    /// lowercase hex digits, else 400.
    pub fn parse(token: &str) -> Result<Self, Error> {
        let canonical = token.len() == TOKEN_LEN && token.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !canonical {
            return Err(Error::BadRequest(format!(
                "Stream-Incarnation must be the {TOKEN_LEN} lowercase hex digits a response gave, got {token:?}"
            )));
        }
        let (uid, number) = token.split_at(UID_DIGITS);
        let hex = |s: &str| u64::from_str_radix(s, 16).expect("checked: hex digits only");
        Ok(Incarnation { uid: hex(uid), number: hex(number) as u32 })
    }

    /// The token, built without formatting machinery: every answer about a
    /// stream carries one.
    pub fn token(self) -> String {
        let mut out = [0u8; TOKEN_LEN];
        let (uid, number) = out.split_at_mut(UID_DIGITS);
        digits::write_hex_padded(uid, self.uid);
        digits::write_hex_padded(number, u64::from(self.number));
        String::from_utf8(out.to_vec()).expect("hex digits are ASCII")
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.token())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_fixed_width_lowercase_hex_and_reads_back() {
        for (uid, number) in [(0, 0), (1, 1), (0xabc, 3), (u64::MAX, u32::MAX), (0x0193_5e2f_1c00_0401, 2)] {
            let i = Incarnation::new(uid, number);
            let token = i.to_string();
            assert_eq!(token.len(), TOKEN_LEN, "{token}");
            assert!(token.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{token}");
            assert_eq!(Incarnation::parse(&token), Ok(i));
        }
        assert_eq!(Incarnation::new(0xabc, 3).to_string(), "0000000000000abc00000003");
    }

    #[test]
    fn each_creation_has_its_own_token() {
        let tokens: std::collections::HashSet<String> = [(7, 1), (7, 2), (8, 1), (1 << 32, 7), (7, 1 << 31)]
            .map(|(u, n)| Incarnation::new(u, n).to_string())
            .into();
        assert_eq!(tokens.len(), 5);
    }

    #[test]
    fn only_the_one_spelling_is_read() {
        let good = Incarnation::new(0xabc, 3).to_string();
        for bad in [
            String::new(),
            good.to_uppercase(),
            good[1..].to_string(),
            format!("0{good}"),
            format!(" {good}"),
            format!("+{}", &good[1..]),
            format!("{}g", &good[..TOKEN_LEN - 1]),
            format!("\"{}\"", &good[..TOKEN_LEN - 2]),
            "abc.3".into(),
        ] {
            assert!(matches!(Incarnation::parse(&bad), Err(Error::BadRequest(_))), "{bad:?}");
        }
    }
}
