#![no_main]
use cohort_engine::tensor::TensorModel;
use libfuzzer_sys::fuzz_target;

// The Open Inference Protocol's gRPC request decoder (a ModelInferRequest message, raw or
// typed contents), then the echo mapping over what it accepts: never a panic; accepted
// tensors hold exactly their shapes' bytes; every refusal is BAD_REQUEST.
fuzz_target!(|data: &[u8]| {
    match cohort_oip::tensors::parse_infer(data) {
        Ok((tensors, params)) => {
            for t in &tensors {
                if let Some(size) = t.datatype.size() {
                    assert_eq!(t.data.len(), size * t.elements());
                }
            }
            if let Err(e) = cohort_services::echo::Echo.rows(&tensors, &params) {
                assert_eq!(e.code, cohort_proto::ErrorCode::BadRequest);
            }
        }
        Err(e) => assert_eq!(e.code, cohort_proto::ErrorCode::BadRequest),
    }
});
