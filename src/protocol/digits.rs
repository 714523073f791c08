//! Numbers as ASCII digits without the formatting machinery: every answer
//! carries a few (an offset, an ETag, a status, a length), and `format!`
//! with padding cost more than the rest of building the header.

/// Appends `v` in decimal.
pub fn push_decimal(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 20];
    let at = buf.len() - write_right_aligned(&mut buf, v);
    out.extend_from_slice(&buf[at..]);
}

/// Appends `v` in lower-case hex, no leading zeros.
pub fn push_hex(out: &mut Vec<u8>, v: u64) {
    let digits = (64 - v.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        out.push(b"0123456789abcdef"[(v >> (4 * i)) as usize & 15]);
    }
}

/// Fills `out` with `v` in lower-case hex, zero-padded to its width (a
/// fixed-width token). `out` must be wide enough: higher digits are cut.
pub fn write_hex_padded(out: &mut [u8], v: u64) {
    for (i, d) in out.iter_mut().rev().enumerate() {
        *d = b"0123456789abcdef"[(v >> (4 * i)) as usize & 15];
    }
}

/// Writes `v` in decimal at the end of `out`, leaving the bytes before it
/// as they are (zeros make it zero-padded); returns how many digits it
/// wrote. `out` must be wide enough.
pub fn write_right_aligned(out: &mut [u8], mut v: u64) -> usize {
    let mut n = 0;
    for d in out.iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_match_std_formatting() {
        for v in [0, 1, 9, 10, 15, 16, 255, 1024, 99_999, u64::from(u32::MAX), u64::MAX] {
            let (mut d, mut h) = (Vec::new(), Vec::new());
            push_decimal(&mut d, v);
            push_hex(&mut h, v);
            assert_eq!(d, v.to_string().into_bytes());
            assert_eq!(h, format!("{v:x}").into_bytes());
            let mut hex16 = [b'x'; 16];
            write_hex_padded(&mut hex16, v);
            assert_eq!(hex16.to_vec(), format!("{v:016x}").into_bytes());
            let mut padded = [b'0'; 20];
            write_right_aligned(&mut padded, v);
            assert_eq!(padded.to_vec(), format!("{v:020}").into_bytes());
        }
    }
}
