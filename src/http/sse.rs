//! Server-sent events framing (F63–F73). Pure: builds event bytes.

use crate::protocol::Offset;

/// Appends one `event: data` with `payload`. Text payloads are split on
/// CRLF, CR and LF into one `data:` line each, so no payload byte can end an
/// event early or inject one. Binary payloads are base64 on one line.
pub fn data_event(out: &mut Vec<u8>, payload: &[u8], base64: bool) {
    out.extend_from_slice(b"event: data\n");
    if base64 {
        use base64::Engine;
        out.extend_from_slice(b"data:");
        out.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(payload).as_bytes());
        out.push(b'\n');
    } else {
        let mut line_start = 0;
        let mut i = 0;
        while i < payload.len() {
            match payload[i] {
                b'\r' | b'\n' => {
                    out.extend_from_slice(b"data:");
                    out.extend_from_slice(&payload[line_start..i]);
                    out.push(b'\n');
                    if payload[i] == b'\r' && payload.get(i + 1) == Some(&b'\n') {
                        i += 1;
                    }
                    line_start = i + 1;
                }
                _ => {}
            }
            i += 1;
        }
        out.extend_from_slice(b"data:");
        out.extend_from_slice(&payload[line_start..]);
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// Appends one `event: control` (never base64). `cursor` is omitted once the
/// stream is closed (F68).
pub fn control_event(out: &mut Vec<u8>, next: Offset, cursor: Option<u64>, up_to_date: bool, closed: bool) {
    out.extend_from_slice(b"event: control\ndata:{\"streamNextOffset\":\"");
    out.extend_from_slice(next.to_string().as_bytes());
    out.push(b'"');
    if let (Some(c), false) = (cursor, closed) {
        out.extend_from_slice(format!(",\"streamCursor\":\"{c}\"").as_bytes());
    }
    if up_to_date {
        out.extend_from_slice(b",\"upToDate\":true");
    }
    if closed {
        out.extend_from_slice(b",\"streamClosed\":true");
    }
    out.extend_from_slice(b"}\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: &[u8]) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn newlines_become_data_lines() {
        let mut out = Vec::new();
        data_event(&mut out, b"a\r\nb\rc\nd", false);
        assert_eq!(text(&out), "event: data\ndata:a\ndata:b\ndata:c\ndata:d\n\n");
        out.clear();
        data_event(&mut out, b"line\n", false);
        assert_eq!(text(&out), "event: data\ndata:line\ndata:\n\n");
        out.clear();
        // An injected event boundary stays data.
        data_event(&mut out, b"x\n\nevent: control\ndata:{}", false);
        assert_eq!(text(&out), "event: data\ndata:x\ndata:\ndata:event: control\ndata:data:{}\n\n");
    }

    #[test]
    fn base64_is_one_padded_line() {
        let mut out = Vec::new();
        data_event(&mut out, &[0, 255, 10], true);
        assert_eq!(text(&out), "event: data\ndata:AP8K\n\n");
        out.clear();
        data_event(&mut out, b"", true);
        assert_eq!(text(&out), "event: data\ndata:\n\n");
    }

    #[test]
    fn control_omits_cursor_when_closed() {
        let mut out = Vec::new();
        control_event(&mut out, Offset::new(0, 5), Some(7), true, false);
        assert_eq!(
            text(&out),
            "event: control\ndata:{\"streamNextOffset\":\"0000000000000000_0000000000000005\",\"streamCursor\":\"7\",\"upToDate\":true}\n\n"
        );
        out.clear();
        control_event(&mut out, Offset::new(0, 5), Some(7), true, true);
        assert!(!text(&out).contains("streamCursor"));
        assert!(text(&out).contains("\"streamClosed\":true"));
    }
}
