//! JSON string literals written fast: the HTTP gateway's large answers (echo's 16 KB strings)
//! are mostly bytes that need no escape, so the scan tests 8 bytes at a time and copies runs.
//! The output is byte for byte what serde_json writes for the same string.

/// Appends `bytes` as a JSON string literal (quotes included); invalid UTF-8 is replaced by
/// U+FFFD as `String::from_utf8_lossy` does.
pub(crate) fn write_lossy(bytes: &[u8], out: &mut Vec<u8>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => write(s, out),
        Err(_) => write(&String::from_utf8_lossy(bytes), out),
    }
}

/// Appends `s` as a JSON string literal, quotes included.
pub(crate) fn write(s: &str, out: &mut Vec<u8>) {
    let b = s.as_bytes();
    out.reserve(b.len() + 2);
    out.push(b'"');
    let mut run = 0; // start of the bytes not yet copied
    let mut i = 0;
    while i < b.len() {
        if i + 8 <= b.len() {
            let w = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
            if !needs_escape(w) {
                i += 8;
                continue;
            }
        }
        let c = b[i];
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

/// Whether any of the 8 bytes is `"`, `\` or a control byte (< 0x20). Exact: the classic
/// has-zero / has-less tests report a byte only where one is there.
fn needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    control | zero_in(w ^ (ONES * b'"' as u64)) | zero_in(w ^ (ONES * b'\\' as u64)) != 0
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

    proptest! {
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
