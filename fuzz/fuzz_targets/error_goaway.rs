#![no_main]
use cohort_proto::{ErrorPayload, GoAway};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = ErrorPayload::decode(data) {
        let mut out = Vec::new();
        e.encode(&mut out);
        assert!(ErrorPayload::decode(&out).is_ok());
    }
    if let Ok(g) = GoAway::decode(data) {
        let mut out = Vec::new();
        g.encode(&mut out);
        assert_eq!(out, data);
    }
});
