#![no_main]
use cohort_services::facever::{self, Verdict};
use libfuzzer_sys::fuzz_target;

// facever's decoders: a request payload is (person, image) or BAD_REQUEST, an HTTP JSON body
// maps to a payload that decodes or BAD_REQUEST, an answer decodes only if it re-encodes to
// the same bytes; never a panic.
fuzz_target!(|data: &[u8]| {
    if let Ok((person, image)) = facever::decode(data) {
        assert!(person >= 1 && image.len() == facever::lbp::IMAGE_BYTES);
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Ok(p) = facever::json_to_payload(&v) {
            facever::decode(&p).expect("a mapped body decodes");
        }
    }
    if let Some(v) = Verdict::decode(data) {
        let mut again = Vec::new();
        v.encode(&mut again);
        assert_eq!(again, data);
    }
});
