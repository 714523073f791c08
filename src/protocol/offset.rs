//! Stream offsets in the reference `%016d_%016d` form (F77).
//!
//! The fixed width is what makes string order equal numeric order (F74), and
//! the conformance suite hard-codes both the all-zero literal and the
//! all-nines "past the tail" literal, so the format is not negotiable.

use std::fmt;

use super::Error;

/// Widest value a 16-digit field can carry; parsing stops there so that every
/// accepted token re-renders to the same string.
const FIELD_DIGITS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Offset {
    pub seq: u64,
    pub pos: u64,
}

impl Offset {
    pub const ZERO: Offset = Offset { seq: 0, pos: 0 };

    pub fn new(seq: u64, pos: u64) -> Self {
        Offset { seq, pos }
    }
}

impl fmt::Display for Offset {
    // Values past 16 digits would widen the token and break string ordering;
    // storage never gets near 10^16 bytes, so this is not guarded here.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // By hand: every append answer carries one, and `{:016}` through
        // the formatting machinery cost more than the rest of the header.
        const WIDEST: u64 = 10u64.pow(FIELD_DIGITS as u32) - 1;
        if self.seq > WIDEST || self.pos > WIDEST {
            return write!(f, "{:016}_{:016}", self.seq, self.pos);
        }
        let mut buf = [b'0'; 2 * FIELD_DIGITS + 1];
        super::digits::write_right_aligned(&mut buf[..FIELD_DIGITS], self.seq);
        buf[FIELD_DIGITS] = b'_';
        super::digits::write_right_aligned(&mut buf[FIELD_DIGITS + 1..], self.pos);
        f.write_str(std::str::from_utf8(&buf).expect("ASCII digits"))
    }
}

fn parse_field(field: &str, whole: &str) -> Result<u64, Error> {
    if field.is_empty() || field.len() > FIELD_DIGITS {
        return Err(Error::BadRequest(format!("offset {whole:?}: each side of '_' must be 1-{FIELD_DIGITS} digits")));
    }
    // `u64::from_str` would also take a leading '+', which the grammar forbids.
    if !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::BadRequest(format!("offset {whole:?}: only decimal digits are allowed around '_'")));
    }
    field.parse::<u64>().map_err(|e| Error::BadRequest(format!("offset {whole:?}: {e}")))
}

/// Accepts exactly `^\d{1,16}_\d{1,16}$`.
pub fn parse_offset(s: &str) -> Result<Offset, Error> {
    let Some((seq, pos)) = s.split_once('_') else {
        return Err(Error::BadRequest(format!("offset {s:?}: expected <seq>_<pos>")));
    };
    Ok(Offset::new(parse_field(seq, s)?, parse_field(pos, s)?))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReadFrom {
    Start,
    Now,
    At(Offset),
}

/// The `offset` query parameter: "-1" -> Start, "now" -> Now, an offset token -> At.
/// Empty string, commas, spaces, '/', "..", NUL, CR/LF, anything else -> BadRequest.
pub fn parse_read_from(s: &str) -> Result<ReadFrom, Error> {
    match s {
        "" => Err(Error::BadRequest("offset parameter is empty".to_string())),
        "-1" => Ok(ReadFrom::Start),
        "now" => Ok(ReadFrom::Now),
        _ => parse_offset(s).map(ReadFrom::At),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_bad(r: Result<impl std::fmt::Debug, Error>) -> bool {
        matches!(r, Err(Error::BadRequest(_)))
    }

    #[test]
    fn renders_zero_padded() {
        assert_eq!(Offset::ZERO.to_string(), "0000000000000000_0000000000000000");
        assert_eq!(Offset::new(0, 1024).to_string(), "0000000000000000_0000000000001024");
        assert_eq!(Offset::new(12, 34).to_string(), "0000000000000012_0000000000000034");
        assert_eq!(Offset::new(9_999_999_999_999_999, 10).to_string(), "9999999999999999_0000000000000010");
        assert_eq!(Offset::new(0, 10u64.pow(16)).to_string(), "0000000000000000_10000000000000000");
    }

    #[test]
    fn parses_suite_literals() {
        assert_eq!(parse_offset("0000000000000000_0000000000000000"), Ok(Offset::ZERO));
        assert_eq!(
            parse_offset("9999999999999999_9999999999999999"),
            Ok(Offset::new(9_999_999_999_999_999, 9_999_999_999_999_999))
        );
    }

    #[test]
    fn accepts_short_fields_and_round_trips() {
        assert_eq!(parse_offset("1_2"), Ok(Offset::new(1, 2)));
        let o = Offset::new(7, 123_456);
        assert_eq!(parse_offset(&o.to_string()), Ok(o));
    }

    #[test]
    fn ordering_matches_string_ordering() {
        let a = Offset::new(0, 999);
        let b = Offset::new(0, 1000);
        let c = Offset::new(1, 0);
        assert!(a < b && b < c);
        assert!(a.to_string() < b.to_string());
        assert!(b.to_string() < c.to_string());
    }

    #[test]
    fn rejects_malformed_offsets() {
        for bad in [
            "",
            "_",
            "1_",
            "_1",
            "12",
            "1_2_3",
            "a_1",
            "1_b",
            "+1_1",
            "1_-1",
            " 1_1",
            "1_1 ",
            "1,1_1",
            "00000000000000000_0", // 17 digits
            "0_00000000000000000", // 17 digits
            "1_1\0",
            "1_1\r\n",
            "１_1", // full-width digit
        ] {
            assert!(is_bad(parse_offset(bad)), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn read_from_sentinels() {
        assert_eq!(parse_read_from("-1"), Ok(ReadFrom::Start));
        assert_eq!(parse_read_from("now"), Ok(ReadFrom::Now));
        assert_eq!(parse_read_from("0000000000000000_0000000000000000"), Ok(ReadFrom::At(Offset::ZERO)));
        assert_eq!(parse_read_from("0000000000000003_0000000000000010"), Ok(ReadFrom::At(Offset::new(3, 10))));
    }

    #[test]
    fn read_from_rejects_f49_examples() {
        for bad in [
            "", ",", "0_0,1_1", " ", "0_0 ", "/", "0_0/1", "..", "../0_0", "\0", "0_0\0", "\r\n", "0_0\n", "NOW",
            "Now", "-2", "-1 ", "abc", "latest",
        ] {
            assert!(is_bad(parse_read_from(bad)), "{bad:?} should be rejected");
        }
    }
}
