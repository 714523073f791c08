//! JSON-mode storage form (F79–F83).
//!
//! A stored chunk is a run of compact JSON messages, each followed by one
//! `,`: `{"a":1},[1,2],`. Reads then only need `[` + chunks − last `,` + `]`,
//! with no per-message framing, and a byte range that ends on a `,` is always
//! a whole number of messages.
//!
//! simd-json is used to validate. The compact form is then produced by
//! stripping insignificant whitespace from the original text instead of
//! re-serialising the parsed value, so numbers and strings keep their exact
//! spelling: `-0`, `1.50`, integers beyond 64 bits and `\u` escapes would
//! otherwise be lost or altered, and object key order and duplicate keys are
//! preserved as sent.
//!
//! simd-json also refuses numbers it cannot represent (integers beyond 64
//! bits, `1e400`) although RFC 8259 allows them. Since the parsed numbers are
//! never used, numbers are checked against the RFC grammar here and hidden
//! from simd-json, which still validates everything else.

use super::Error;
use crate::limits::JSON_DEPTH_MAX;

fn is_json_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Tracks whether a byte is inside a string literal: the only lexical state
/// the scanners below need, because nothing outside strings can hide a
/// structural byte. It follows JSON's own rules (a backslash always consumes
/// the next byte), so on invalid input it agrees with a real lexer up to the
/// first error.
#[derive(Default)]
struct StringState {
    in_string: bool,
    escaped: bool,
}

impl StringState {
    /// Returns true if `b` belongs to a string literal (including its quotes).
    fn step(&mut self, b: u8) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            true
        } else if b == b'"' {
            self.in_string = true;
            true
        } else {
            false
        }
    }
}

/// Bytes that can continue a bare token (number or literal). Runs of them are
/// taken whole so that e.g. `1e5x` is never mistaken for the number `1e5`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

/// RFC 8259 `number`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(tok: &[u8]) -> bool {
    fn digits(t: &[u8]) -> usize {
        t.iter().take_while(|b| b.is_ascii_digit()).count()
    }
    let mut t = tok.strip_prefix(b"-").unwrap_or(tok);
    match t.first() {
        Some(b'0') => t = &t[1..],
        Some(b'1'..=b'9') => t = &t[digits(t)..],
        _ => return false,
    }
    if let Some(frac) = t.strip_prefix(b".") {
        let n = digits(frac);
        if n == 0 {
            return false;
        }
        t = &frac[n..];
    }
    if let Some(exp) = t.strip_prefix(b"e").or_else(|| t.strip_prefix(b"E")) {
        let exp = exp.strip_prefix(b"+").or_else(|| exp.strip_prefix(b"-")).unwrap_or(exp);
        let n = digits(exp);
        if n == 0 {
            return false;
        }
        t = &exp[n..];
    }
    t.is_empty()
}

/// A copy of `body` for simd-json in which every grammatical number outside
/// strings is replaced by `0`. Swapping one valid number for another cannot
/// change whether the document is valid, and anything that is not a valid
/// number is passed through for simd-json to reject.
///
/// Also refuses nesting deeper than JSON_DEPTH_MAX (counted by opening
/// brackets outside strings, so before any other validation), which bounds
/// what a stored message can ask of a recursive parser downstream.
fn shield_numbers(body: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(body.len());
    let mut s = StringState::default();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        let in_string = s.step(b);
        if !in_string && (b == b'[' || b == b'{') {
            depth += 1;
            if depth > JSON_DEPTH_MAX {
                return Err(Error::BadRequest(format!("JSON nested deeper than {JSON_DEPTH_MAX} levels")));
            }
        } else if !in_string && (b == b']' || b == b'}') {
            depth = depth.saturating_sub(1);
        }
        if !in_string && is_token_byte(b) {
            let len = body[i..].iter().take_while(|&&c| is_token_byte(c)).count();
            let tok = &body[i..i + len];
            if is_json_number(tok) {
                out.push(b'0');
            } else {
                out.extend_from_slice(tok);
            }
            i += len;
        } else {
            out.push(b);
            i += 1;
        }
    }
    Ok(out)
}

/// Copies one JSON value without insignificant whitespace.
fn minify_into(value: &[u8], out: &mut Vec<u8>) {
    let mut s = StringState::default();
    for &b in value {
        if s.step(b) || !is_json_ws(b) {
            out.push(b);
        }
    }
}

/// Copies the elements of a top-level array (`inner` starts just after its
/// `[`) as stored messages and returns how many there were.
fn flatten_into(inner: &[u8], out: &mut Vec<u8>) -> usize {
    let mut s = StringState::default();
    let mut depth = 0usize;
    let mut commas = 0usize;
    let mut any = false;
    for &b in inner {
        if s.step(b) {
            any = true;
            out.push(b);
            continue;
        }
        match b {
            _ if is_json_ws(b) => {}
            b'[' | b'{' => {
                depth += 1;
                any = true;
                out.push(b);
            }
            b']' | b'}' if depth == 0 => {
                // The outer array's own `]`: it closes the last element.
                if any {
                    out.push(b',');
                    return commas + 1;
                }
                return 0;
            }
            b']' | b'}' => {
                depth -= 1;
                out.push(b);
            }
            b',' => {
                if depth == 0 {
                    commas += 1;
                }
                out.push(b);
            }
            _ => {
                any = true;
                out.push(b);
            }
        }
    }
    // Unreachable for validated input, which always closes the array.
    if any {
        out.push(b',');
        commas + 1
    } else {
        0
    }
}

/// Validate an append body as JSON and flatten a top-level array one level (F80): `[a,b]` -> 2 messages; `[[1,2],[3,4]]` -> 2; `[[[1,2,3]]]` -> one message `[[1,2,3]]`; a non-array -> 1 message.
/// `[]` -> BadRequest unless allow_empty (PUT initial body), in which case Ok with 0 messages. Invalid JSON -> BadRequest. Empty body -> BadRequest.
/// Returns the stored form (each message compact + ',') and the message count.
pub fn normalize(body: &[u8], allow_empty: bool) -> Result<(Vec<u8>, usize), Error> {
    let Some(start) = body.iter().position(|&b| !is_json_ws(b)) else {
        return Err(Error::BadRequest("JSON body is empty".to_string()));
    };
    // simd-json unescapes strings in place, so it works on a scratch copy and
    // the original stays intact for the compact copy below.
    let mut scratch = shield_numbers(body)?;
    if let Err(e) = simd_json::to_tape(&mut scratch) {
        // The error's index refers to the shielded copy, so only its kind is
        // meaningful to the client.
        return Err(Error::BadRequest(format!("invalid JSON: {:?}", e.error())));
    }
    drop(scratch);

    let value = &body[start..];
    let mut out = Vec::with_capacity(value.len() + 1);
    let count = if value[0] == b'[' {
        flatten_into(&value[1..], &mut out)
    } else {
        minify_into(value, &mut out);
        out.push(b',');
        1
    };
    if count == 0 && !allow_empty {
        return Err(Error::BadRequest("empty JSON array: nothing to append".to_string()));
    }
    Ok((out, count))
}

/// Wrap stored message bytes (concatenated chunks, each ending in ',') into a JSON array response body. Empty input -> `[]`.
pub fn wrap_array(stored: &[u8]) -> Vec<u8> {
    let body = stored.strip_suffix(b",").unwrap_or(stored);
    let mut out = Vec::with_capacity(body.len() + 2);
    out.push(b'[');
    out.extend_from_slice(body);
    out.push(b']');
    out
}

/// Yields the end (exclusive, just past the terminating `,`) of every message
/// in stored bytes.
struct MessageEnds<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    strings: StringState,
}

impl<'a> MessageEnds<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        MessageEnds { bytes, pos: 0, depth: 0, strings: StringState::default() }
    }
}

impl Iterator for MessageEnds<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            if self.strings.step(b) {
                continue;
            }
            match b {
                b'[' | b'{' => self.depth += 1,
                // Saturating keeps a malformed chunk from panicking; the
                // result is then meaningless but harmless.
                b']' | b'}' => self.depth = self.depth.saturating_sub(1),
                b',' if self.depth == 0 => return Some(self.pos),
                _ => {}
            }
        }
        None
    }
}

/// Byte length of the first `n` messages inside one stored chunk, including
/// their `,` terminators (so the prefix is itself a valid stored chunk).
/// None if the chunk holds fewer than n messages.
pub fn prefix_len_of_messages(stored: &[u8], n: usize) -> Option<usize> {
    match n {
        0 => Some(0),
        _ => MessageEnds::new(stored).nth(n - 1),
    }
}

pub fn count_messages(stored: &[u8]) -> usize {
    MessageEnds::new(stored).count()
}

/// Each message of stored bytes, without its `,`: for consumers that emit
/// messages individually (per-message multipart parts, for example).
pub fn split_messages(stored: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    let mut start = 0;
    MessageEnds::new(stored).map(move |end| {
        let msg = &stored[start..end - 1];
        start = end;
        msg
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use simd_json::OwnedValue;

    fn parse(bytes: &[u8]) -> OwnedValue {
        let mut copy = bytes.to_vec();
        simd_json::to_owned_value(&mut copy).expect("valid JSON")
    }

    fn norm(body: &str) -> (String, usize) {
        let (bytes, n) = normalize(body.as_bytes(), false).expect("accepted");
        (String::from_utf8(bytes).unwrap(), n)
    }

    fn is_bad<T: std::fmt::Debug>(r: Result<T, Error>) -> bool {
        matches!(r, Err(Error::BadRequest(_)))
    }

    #[test]
    fn flattens_exactly_one_level() {
        assert_eq!(norm("[1, 2]"), ("1,2,".to_string(), 2));
        assert_eq!(norm("[{\"a\": 1}, {\"b\": 2}]"), ("{\"a\":1},{\"b\":2},".to_string(), 2));
        assert_eq!(norm("[[1,2],[3,4]]"), ("[1,2],[3,4],".to_string(), 2));
        assert_eq!(norm("[[[1,2,3]]]"), ("[[1,2,3]],".to_string(), 1));
        assert_eq!(norm("[[]]"), ("[],".to_string(), 1));
        assert_eq!(norm("[{}]"), ("{},".to_string(), 1));
    }

    #[test]
    fn non_arrays_are_one_message() {
        assert_eq!(norm("{\"a\": 1}"), ("{\"a\":1},".to_string(), 1));
        assert_eq!(norm("{}"), ("{},".to_string(), 1));
        assert_eq!(norm("42"), ("42,".to_string(), 1));
        assert_eq!(norm("\"hi\""), ("\"hi\",".to_string(), 1));
        assert_eq!(norm("null"), ("null,".to_string(), 1));
        assert_eq!(norm("true"), ("true,".to_string(), 1));
        assert_eq!(norm(" \n\t{ \"test\" : true }\r\n "), ("{\"test\":true},".to_string(), 1));
    }

    #[test]
    fn whitespace_inside_strings_is_kept() {
        assert_eq!(
            norm("[ \"a b\" , { \"k e y\" : \" v\\t\\\" , ] \" } ]"),
            ("\"a b\",{\"k e y\":\" v\\t\\\" , ] \"},".to_string(), 2)
        );
    }

    #[test]
    fn empty_array_only_allowed_on_create() {
        assert!(is_bad(normalize(b"[]", false)));
        assert!(is_bad(normalize(b"[ \n ]", false)));
        assert_eq!(normalize(b"[]", true), Ok((Vec::new(), 0)));
        assert_eq!(normalize(b" [ ] ", true), Ok((Vec::new(), 0)));
        // allow_empty must not relax anything else.
        assert_eq!(normalize(b"[1]", true), Ok((b"1,".to_vec(), 1)));
    }

    #[test]
    fn rejects_invalid_json() {
        for bad in [
            "",
            "   ",
            "\n",
            "invalid",
            "{",
            "[1,2",
            "[1,2,]",
            "{\"a\":1,}",
            "{'a':1}",
            "{a:1}",
            "[1 2]",
            "{} {}",
            "1 2",
            "[1]]",
            "NaN",
            "01",
            "1.",
            ".5",
            "+1",
            "\"unterminated",
            "\"bad \\x escape\"",
            "\"raw \n newline\"",
            "undefined",
        ] {
            assert!(is_bad(normalize(bad.as_bytes(), false)), "{bad:?} should be rejected");
            assert!(is_bad(normalize(bad.as_bytes(), true)), "{bad:?} should be rejected");
        }
        assert!(is_bad(normalize(b"\"\xff\xfe\"", false)), "invalid UTF-8");
        assert!(is_bad(normalize(b"[\"\xc3\"]", false)), "truncated UTF-8");
    }

    #[test]
    fn values_round_trip_exactly() {
        let body = r#"[
            {"a": 1.5, "b": [1, 2, {"c": "x,y]}"}], "nested": {"d": {"e": [null, false]}}},
            "caf\u00e9 \ud83d\ude00 \"quoted\" back\\slash \/ \n",
            "naïve 😀 ✓",
            123456789, 18446744073709551615, -9223372036854775808,
            1e300, -2.5E-7, 0.1, -0, 1.50, 3,
            [], {}, true, null
        ]"#;
        let (stored, n) = normalize(body.as_bytes(), false).unwrap();
        assert_eq!(n, 16);
        assert_eq!(count_messages(&stored), 16);
        assert!(!stored.iter().any(|&b| b == b'\n' || b == b'\r'));
        assert_eq!(parse(&wrap_array(&stored)), parse(body.as_bytes()));

        let text = String::from_utf8(stored).unwrap();
        // Spelling is preserved, not re-rendered.
        for kept in ["1.50,", "-0,", "1e300,", "-2.5E-7,", "\\u00e9", "\\ud83d\\ude00", "\\/"] {
            assert!(text.contains(kept), "{kept:?} missing from {text}");
        }
    }

    #[test]
    fn single_value_round_trips() {
        let body = br#"{ "z": 1, "a": { "k": [1.25, "s,t", {"deep": [[[]]]}] }, "m": -7 }"#;
        let (stored, n) = normalize(body, false).unwrap();
        assert_eq!(n, 1);
        assert_eq!(std::str::from_utf8(&stored).unwrap(), r#"{"z":1,"a":{"k":[1.25,"s,t",{"deep":[[[]]]}]},"m":-7},"#);
        let wrapped = wrap_array(&stored);
        let expected = parse(format!("[{}]", std::str::from_utf8(body).unwrap()).as_bytes());
        assert_eq!(parse(&wrapped), expected);
    }

    #[test]
    fn numbers_outside_f64_and_u64_are_accepted_verbatim() {
        let body = b"[123456789012345678901234567890, -98765432109876543210987, 1e400, -1E-400]";
        let (stored, n) = normalize(body, false).unwrap();
        assert_eq!(n, 4);
        assert_eq!(stored, b"123456789012345678901234567890,-98765432109876543210987,1e400,-1E-400,".to_vec());
        assert_eq!(
            normalize(b"{\"big\": 99999999999999999999}", false),
            Ok((b"{\"big\":99999999999999999999},".to_vec(), 1))
        );
    }

    #[test]
    fn number_grammar() {
        for ok in [
            "0",
            "-0",
            "7",
            "-12",
            "1.5",
            "0.001",
            "1e5",
            "1E+5",
            "1e-05",
            "-0.0e0",
            "10",
            "123456789012345678901234567890",
        ] {
            assert!(is_json_number(ok.as_bytes()), "{ok:?}");
            assert!(normalize(ok.as_bytes(), false).is_ok(), "{ok:?}");
        }
        for bad in [
            "",
            "-",
            "+1",
            "01",
            "-01",
            "00",
            "1.",
            ".5",
            "1.e5",
            "1e",
            "1e+",
            "0x10",
            "1_000",
            "Infinity",
            "-Infinity",
            "NaN",
            "1e5x",
            "1..2",
            "--1",
            "1-1",
        ] {
            assert!(!is_json_number(bad.as_bytes()), "{bad:?}");
            assert!(is_bad(normalize(bad.as_bytes(), false)), "{bad:?}");
            assert!(is_bad(normalize(format!("[{bad}]").as_bytes(), false)), "[{bad}]");
        }
    }

    #[test]
    fn numbers_inside_strings_are_not_touched() {
        let (stored, _) = normalize(br#"{"01": "1e400 x", "k": [ 1 , "2" ]}"#, false).unwrap();
        assert_eq!(stored, br#"{"01":"1e400 x","k":[1,"2"]},"#.to_vec());
        // A quote-free junk token next to a number stays invalid.
        assert!(is_bad(normalize(b"[1 truex]", false)));
        assert!(is_bad(normalize(b"[tru1]", false)));
    }

    #[test]
    fn nesting_is_bounded() {
        let nested = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
        // The outer array is flattened away, leaving JSON_DEPTH_MAX - 1 levels.
        let (stored, n) = normalize(nested(JSON_DEPTH_MAX).as_bytes(), false).unwrap();
        assert_eq!(n, 1);
        assert_eq!(count_messages(&stored), 1);
        let objects = format!("{}1{}", "{\"a\":".repeat(JSON_DEPTH_MAX), "}".repeat(JSON_DEPTH_MAX));
        assert_eq!(normalize(objects.as_bytes(), false).unwrap().1, 1);
        for body in [
            nested(JSON_DEPTH_MAX + 1),
            format!("{}1{}", "{\"a\":".repeat(JSON_DEPTH_MAX + 1), "}".repeat(JSON_DEPTH_MAX + 1)),
            // Unclosed and huge: refused at the bound, before simd-json.
            "[".repeat(1_000_000),
        ] {
            match normalize(body.as_bytes(), false) {
                Err(Error::BadRequest(why)) => assert!(why.contains("nested deeper"), "{why}"),
                other => panic!("depth {}: {other:?}", body.len()),
            }
        }
        // Brackets inside strings are not nesting.
        let in_string = format!("[\"{}\"]", "[".repeat(10_000));
        assert_eq!(normalize(in_string.as_bytes(), false).unwrap().1, 1);
    }

    #[test]
    fn wrap_array_forms() {
        assert_eq!(wrap_array(b""), b"[]".to_vec());
        assert_eq!(wrap_array(b"1,"), b"[1]".to_vec());
        assert_eq!(wrap_array(b"{\"a\":1},[1,2],"), b"[{\"a\":1},[1,2]]".to_vec());
        // Chunks from separate appends concatenate into one array.
        let (a, _) = normalize(b"[1,2]", false).unwrap();
        let (b, _) = normalize(b"{\"x\":\"y\"}", false).unwrap();
        let joined = [a, b].concat();
        assert_eq!(wrap_array(&joined), b"[1,2,{\"x\":\"y\"}]".to_vec());
        assert_eq!(parse(&wrap_array(&joined)), parse(b"[1,2,{\"x\":\"y\"}]"));
    }

    #[test]
    fn message_counting_and_prefixes() {
        let stored = br#"{"a":"x,y","b":[1,2]},[3,{"c":"]},\"["}],"q\\",7,"#;
        assert_eq!(count_messages(stored), 4);
        assert_eq!(count_messages(b""), 0);

        let first = br#"{"a":"x,y","b":[1,2]},"#.len();
        let second = first + br#"[3,{"c":"]},\"["}],"#.len();
        let third = second + br#""q\\","#.len();
        assert_eq!(prefix_len_of_messages(stored, 0), Some(0));
        assert_eq!(prefix_len_of_messages(stored, 1), Some(first));
        assert_eq!(prefix_len_of_messages(stored, 2), Some(second));
        assert_eq!(prefix_len_of_messages(stored, 3), Some(third));
        assert_eq!(prefix_len_of_messages(stored, 4), Some(stored.len()));
        assert_eq!(prefix_len_of_messages(stored, 5), None);
        assert_eq!(prefix_len_of_messages(b"", 0), Some(0));
        assert_eq!(prefix_len_of_messages(b"", 1), None);

        // A prefix is a valid stored chunk in its own right.
        assert_eq!(parse(&wrap_array(&stored[..second])), parse(br#"[{"a":"x,y","b":[1,2]},[3,{"c":"]},\"["}]]"#));

        let parts: Vec<&[u8]> = split_messages(stored).collect();
        assert_eq!(
            parts,
            vec![&br#"{"a":"x,y","b":[1,2]}"#[..], &br#"[3,{"c":"]},\"["}]"#[..], &br#""q\\""#[..], &b"7"[..],]
        );
    }

    #[test]
    fn normalize_output_is_scannable() {
        let (stored, n) = normalize(br#"["a,b", {"k": "[{"}, [",", "]"], "\\", 0]"#, false).unwrap();
        assert_eq!(n, 5);
        assert_eq!(count_messages(&stored), n);
        assert_eq!(prefix_len_of_messages(&stored, n), Some(stored.len()));
        assert_eq!(split_messages(&stored).count(), n);
    }
}
