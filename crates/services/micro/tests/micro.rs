use cohort_engine::Service;
use cohort_proto::ErrorCode;
use cohort_service_micro::{echo::Echo, spin};
use proptest::prelude::*;
use std::time::Instant;

#[test]
fn spin_waits_at_least_the_requested_time_and_echoes() {
    let p = spin::encode(2000, b"abc");
    let t = Instant::now();
    assert_eq!(spin::Spin.call_cpu(&p).unwrap(), p);
    assert!(t.elapsed().as_micros() >= 2000);
}

#[test]
fn spin_rejects_short_and_excessive_payloads() {
    assert_eq!(
        spin::Spin.call_cpu(&[1, 2]).unwrap_err().code,
        ErrorCode::BadRequest
    );
    let p = spin::encode(spin::MAX_SPIN_US + 1, b"");
    assert_eq!(
        spin::Spin.call_cpu(&p).unwrap_err().code,
        ErrorCode::BadRequest
    );
}

#[test]
fn json_mappings() {
    let v = serde_json::json!({"spin_us": 5, "data": "hi"});
    let p = spin::Spin.json_to_payload(&v).unwrap();
    assert_eq!(spin::Spin.payload_to_json(&p), v);
    assert!(spin::Spin
        .json_to_payload(&serde_json::json!({"data": 3}))
        .is_err());
    let e = Echo
        .json_to_payload(&serde_json::json!({"data": "x"}))
        .unwrap();
    assert_eq!(Echo.payload_to_json(&e), serde_json::json!({"data": "x"}));
}

proptest! {
    #[test]
    fn spin_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..16)) {
        let _ = spin::decode(&b);
    }
}
