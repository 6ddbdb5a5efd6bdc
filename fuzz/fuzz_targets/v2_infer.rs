#![no_main]
use cohort_engine::tensor::TensorModel;
use cohort_services::lenet::{model::Weights, Lenet};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

// The Open Inference Protocol's request decoder (JSON part, then binary part at a split the
// input's first byte picks), then the echo and LeNet tensor mappings over what it accepts:
// never a panic; accepted tensors hold exactly their shapes' bytes; every refusal is
// BAD_REQUEST.
fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let at = (cut as usize * rest.len()) / 255;
    let (json, binary) = rest.split_at(at.min(rest.len()));
    match cohort_engine::tensor_json::parse_infer(json, binary) {
        Ok((tensors, params)) => {
            for t in &tensors {
                if let Some(size) = t.datatype.size() {
                    assert_eq!(t.data.len(), size * t.elements());
                }
            }
            static LENET: OnceLock<Lenet> = OnceLock::new();
            let lenet = LENET.get_or_init(|| Lenet {
                weights: Arc::new(Weights::load(None).expect("the shipped model")),
            });
            for m in [&cohort_services::echo::Echo as &dyn TensorModel, lenet] {
                if let Err(e) = m.rows(&tensors, &params) {
                    assert_eq!(e.code, cohort_proto::ErrorCode::BadRequest);
                }
            }
        }
        Err(e) => assert_eq!(e.code, cohort_proto::ErrorCode::BadRequest),
    }
});
