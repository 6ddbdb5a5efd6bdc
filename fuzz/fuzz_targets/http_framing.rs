#![no_main]
use cohort_http_frame::{Scanner, Stop};
use libfuzzer_sys::fuzz_target;

// The HTTP gateway's framing check (it runs before hyper parses a byte), fed any bytes cut at
// the points the first byte picks: it never panics, what it passes is a prefix of the stream
// in order (a held head released whole), and after a stop nothing more passes. Seeds worth
// keeping: heads with Content-Length and Transfer-Encoding together, negative or huge
// lengths, HTTP/2.0, NUL in the method, 10 000 fields, chunked bodies cut anywhere.
fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let step = (cut as usize % 61) + 1;
    let mut s = Scanner::new();
    let mut passed = Vec::new();
    let mut stopped = false;
    for part in stream.chunks(step) {
        let r = s.scan(part);
        if stopped {
            assert!(r.pass == 0 && r.released.is_empty() && r.stop.is_none());
        }
        passed.extend_from_slice(&r.released);
        passed.extend_from_slice(&part[..r.pass]);
        if let Some(Stop::Head(refusal)) = &r.stop {
            let answer = refusal.response();
            assert!(answer.starts_with(b"HTTP/1.1 4") || answer.starts_with(b"HTTP/1.1 501"));
        }
        stopped |= r.stop.is_some();
    }
    assert_eq!(&stream[..passed.len()], &passed[..]);
});
