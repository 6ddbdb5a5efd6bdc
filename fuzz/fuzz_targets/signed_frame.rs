#![no_main]
use cohort_proto::{split_signed, verify_signed, Frame, AUTH_TRAILER_LEN, MAX_PAYLOAD};
use libfuzzer_sys::fuzz_target;

// An authenticated frame's trailer: any bytes split or refuse cleanly, never panic, and a
// split leaves exactly the trailer's length behind.
fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Frame::decode_datagram(data, MAX_PAYLOAD) {
        if let Some((app, _)) = split_signed(&f.header, f.payload) {
            assert_eq!(app.len() + AUTH_TRAILER_LEN, f.payload.len());
        }
        let _ = verify_signed(&f.header, f.payload, b"fuzzing-secret-0");
    }
});
