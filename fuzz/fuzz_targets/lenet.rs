#![no_main]
use cohort_engine::Service;
use cohort_services::lenet::{self, model::Weights, Lenet};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

// lenet's decoders: a request payload is one image or BAD_REQUEST, an HTTP body (raw image
// or JSON) maps to a payload or BAD_REQUEST, an answer decodes or is refused; never a panic.
fuzz_target!(|data: &[u8]| {
    static SERVICE: OnceLock<Lenet> = OnceLock::new();
    let s = SERVICE.get_or_init(|| Lenet {
        weights: Arc::new(Weights::load(None).expect("the shipped model")),
    });
    if lenet::decode(data).is_ok() {
        let out = s.call_cpu(data).expect("an image is answered");
        let (digit, logits) = lenet::decode_answer(&out).expect("its answer decodes");
        assert_eq!(digit, lenet::model::argmax(&logits));
    }
    if let Ok(r) = s.json_request(data) {
        assert_eq!(r.payload.len(), lenet::model::IMAGE_BYTES);
    }
    if let Some((digit, _)) = lenet::decode_answer(data) {
        assert!(digit <= 9 && data.len() == lenet::ANSWER_BYTES);
    }
});
