#![no_main]
use cohort_engine::Service;
use libfuzzer_sys::fuzz_target;

// The HTTP gateway's JSON decoder for echo (a typed parse that borrows the string) against
// what a `serde_json::Value` says of the same bytes, and its JSON writer read back.
fuzz_target!(|data: &[u8]| {
    let echo = cohort_services::echo::Echo;
    let value = serde_json::from_slice::<serde_json::Value>(data);
    match echo.json_request(data) {
        Ok(r) => {
            let v = value.expect("accepted bytes are JSON");
            let want = match v.get("data") {
                None => Vec::new(),
                Some(serde_json::Value::String(s)) => s.as_bytes().to_vec(),
                Some(other) => panic!("accepted a non-string data {other}"),
            };
            assert_eq!(&r.payload[..], &want[..]);
            assert_eq!(r.timeout_us, v.get("timeout_us").and_then(|t| t.as_u64()));
        }
        Err(e) => assert_eq!(e.code, cohort_proto::ErrorCode::BadRequest),
    }
    let mut out = Vec::new();
    echo.write_json(data, &mut out);
    let back: serde_json::Value = serde_json::from_slice(&out).expect("the writer writes JSON");
    assert_eq!(back["data"], String::from_utf8_lossy(data).as_ref());
});
