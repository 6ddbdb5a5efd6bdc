#![no_main]
use cohort_proto::{encode_frame, Frame, MAX_PAYLOAD};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Frame::decode_datagram(data, MAX_PAYLOAD) {
        // Whatever decodes re-encodes to the same bytes.
        let mut out = Vec::new();
        encode_frame(f.header, f.payload, &mut out);
        assert_eq!(out, data);
    }
});
