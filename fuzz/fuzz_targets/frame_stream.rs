#![no_main]
use cohort_proto::Frame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Walk the stream as the TCP reader does: frames until error or "need more".
    let mut rest = data;
    while let Ok(Some((_, used))) = Frame::decode_stream(rest, 4096) {
        assert!(used > 0 && used <= rest.len());
        rest = &rest[used..];
    }
});
