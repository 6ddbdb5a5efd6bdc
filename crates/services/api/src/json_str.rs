//! JSON string literals written and read fast: the HTTP gateway's large bodies (echo's 16 KB
//! strings) are mostly bytes that need no escape, so the scan tests 16 bytes at a time and
//! copies runs (it was about 30% of a 16 KB echo's user time, measured with perf). The output
//! is byte for byte what serde_json writes for the same string.

/// Appends `bytes` as a JSON string literal (quotes included); invalid UTF-8 is replaced by
/// U+FFFD as `String::from_utf8_lossy` does.
pub fn write_lossy(bytes: &[u8], out: &mut Vec<u8>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => write(s, out),
        Err(_) => write(&String::from_utf8_lossy(bytes), out),
    }
}

/// Appends `s` as a JSON string literal, quotes included.
pub fn write(s: &str, out: &mut Vec<u8>) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    let mut run = 0; // start of the bytes not yet copied
    let mut i = 0;
    while i < b.len() {
        i += plain_prefix(&b[i..]);
        let Some(&c) = b.get(i) else { break };
        // Non-ASCII bytes of a `str` are whole UTF-8 characters: copied as they are.
        if let Some(esc) = escape(c) {
            out.extend_from_slice(&b[run..i]);
            out.extend_from_slice(esc.as_bytes());
            if esc == "\\u00" {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[HEX[(c >> 4) as usize], HEX[(c & 15) as usize]]);
            }
            run = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(&b[run..]);
    out.push(b'"');
}

/// The body `{"data":"STRING"}` (whitespace allowed after the string) when STRING is ASCII
/// with nothing to unescape: STRING, borrowed. Anything else (escapes, non-ASCII, other
/// keys) is None, for the general parser.
pub fn plain_data_field(body: &[u8]) -> Option<&[u8]> {
    const OPEN: &[u8] = br#"{"data":""#;
    let rest = body.strip_prefix(OPEN)?;
    let n = plain_prefix(rest);
    let tail = &rest[n..];
    let tail = tail.strip_prefix(b"\"")?;
    let mut tail = tail.iter().filter(|&&c| !is_json_whitespace(c));
    (tail.next() == Some(&b'}') && tail.next().is_none()).then_some(&rest[..n])
}

/// JSON's whitespace (RFC 8259: space, tab, line feed, carriage return). Rust's
/// `is_ascii_whitespace` also takes form feed, which a JSON parser refuses: the fast path
/// accepted `{"data":"x"}` followed by a form feed (found by the gateway_json fuzz target).
pub fn is_json_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// Length of the longest prefix of `b` whose bytes need no escape in a JSON string and are
/// ASCII: the first `"`, `\`, control byte (< 0x20) or non-ASCII byte (>= 0x80) ends it.
/// 16 bytes per step with SSE2 (every x86_64 has it), 8 elsewhere.
pub fn plain_prefix(b: &[u8]) -> usize {
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of the x86_64 baseline; every load reads 16 bytes inside `b`
        // (i + 16 <= len) and unaligned loads are allowed by `_mm_loadu_si128`.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let slash = _mm_set1_epi8(b'\\' as i8);
            let space = _mm_set1_epi8(0x20);
            while i + 16 <= b.len() {
                let v = _mm_loadu_si128(b.as_ptr().add(i) as *const __m128i);
                // Signed compare: bytes >= 0x80 are negative, so `< 0x20` catches them too.
                let bad = _mm_or_si128(
                    _mm_cmplt_epi8(v, space),
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                );
                let mask = _mm_movemask_epi8(bad) as u32;
                if mask != 0 {
                    return i + mask.trailing_zeros() as usize;
                }
                i += 16;
            }
        }
    }
    while i + 8 <= b.len() {
        let w = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if needs_escape(w) {
            break;
        }
        i += 8;
    }
    while i < b.len() && !special(b[i]) {
        i += 1;
    }
    i
}

fn special(c: u8) -> bool {
    !(0x20..0x80).contains(&c) || c == b'"' || c == b'\\'
}

/// Whether any of the 8 bytes is `"`, `\`, a control byte (< 0x20) or non-ASCII. Exact: the
/// classic has-zero / has-less tests report a byte only where one is there.
fn needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    control | (w & HIGH) | zero_in(w ^ (ONES * b'"' as u64)) | zero_in(w ^ (ONES * b'\\' as u64))
        != 0
}

/// The escape serde_json writes for `c` (`\u00` is followed by two hex digits).
fn escape(c: u8) -> Option<&'static str> {
    Some(match c {
        b'"' => "\\\"",
        b'\\' => "\\\\",
        0x08 => "\\b",
        0x0C => "\\f",
        b'\n' => "\\n",
        b'\r' => "\\r",
        b'\t' => "\\t",
        0..=0x1F => "\\u00",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_json_whitespace_may_follow_the_plain_body() {
        assert_eq!(
            plain_data_field(b"{\"data\":\"$d\"\r}\t\n\n \r"),
            Some(&b"$d"[..])
        );
        // A form feed is ASCII whitespace to Rust, not to JSON (the fuzz target's crash).
        assert_eq!(plain_data_field(b"{\"data\":\"$d\"\r}\t\n\n\x0c"), None);
        assert_eq!(plain_data_field(b"{\"data\":\"$d\"\x0c}"), None);
    }

    fn serde(s: &str) -> Vec<u8> {
        serde_json::to_vec(s).unwrap()
    }

    #[test]
    fn every_byte_value_as_serde_writes_it() {
        for c in 0u8..=0x7F {
            for at in 0..17 {
                let mut s = "a".repeat(at);
                s.push(c as char);
                s.push_str("bcdefghij");
                let mut out = Vec::new();
                write(&s, &mut out);
                assert_eq!(out, serde(&s), "byte {c:#x} at {at}");
            }
        }
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut out = Vec::new();
        write_lossy(b"ok\xff\"", &mut out);
        assert_eq!(out, serde("ok\u{fffd}\""));
    }

    /// The first byte `plain_prefix` must stop at, one byte at a time.
    fn plain_prefix_naive(b: &[u8]) -> usize {
        b.iter().position(|&c| special(c)).unwrap_or(b.len())
    }

    #[test]
    fn plain_prefix_stops_at_each_special_byte_in_every_lane() {
        for c in 0u8..=0xFF {
            for at in 0..40 {
                let mut b = vec![b'a'; 48];
                b[at] = c;
                assert_eq!(
                    plain_prefix(&b),
                    plain_prefix_naive(&b),
                    "byte {c:#x} at {at}"
                );
                assert_eq!(plain_prefix(&b[..at + 1]), plain_prefix_naive(&b[..at + 1]));
            }
        }
    }

    #[test]
    fn plain_data_field_takes_only_the_plain_body() {
        assert_eq!(plain_data_field(br#"{"data":"abc"}"#), Some(&b"abc"[..]));
        assert_eq!(
            plain_data_field(b"{\"data\":\"abc\"}\r\n "),
            Some(&b"abc"[..])
        );
        assert_eq!(plain_data_field(br#"{"data":""}"#), Some(&b""[..]));
        for refused in [
            &br#"{"data":"a\"b"}"#[..],
            br#"{"data":"abc"}x"#,
            br#"{"data":"abc"}}"#,
            br#"{"data":"abc","timeout_us":1}"#,
            br#"{"data":"abc""#,
            br#" {"data":"abc"}"#,
            "{\"data\":\"\u{e9}\"}".as_bytes(),
            b"{\"data\":\"a\tb\"}",
        ] {
            assert_eq!(
                plain_data_field(refused),
                None,
                "{:?}",
                String::from_utf8_lossy(refused)
            );
        }
    }

    proptest! {
        #[test]
        fn plain_prefix_matches_the_byte_loop(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(plain_prefix(&b), plain_prefix_naive(&b));
        }

        #[test]
        fn plain_data_field_agrees_with_serde(s in "[ -~]{0,100}", ws in "[ \t\r\n]{0,3}") {
            let body = format!("{}{ws}", serde_json::json!({ "data": s }));
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(d) = plain_data_field(body.as_bytes()) {
                prop_assert_eq!(d, v["data"].as_str().unwrap().as_bytes());
            } else {
                prop_assert!(s.contains('"') || s.contains('\\'));
            }
        }

        #[test]
        fn matches_serde(s in "(?s).{0,300}") {
            let mut out = Vec::new();
            write(&s, &mut out);
            prop_assert_eq!(out, serde(&s));
        }

        #[test]
        fn bytes_match_lossy_serde(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut out = Vec::new();
            write_lossy(&b, &mut out);
            prop_assert_eq!(out, serde(&String::from_utf8_lossy(&b)));
        }
    }
}
