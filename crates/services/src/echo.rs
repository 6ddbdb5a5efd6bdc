//! `echo`: returns the payload unchanged (Lynx's network-bound micro-benchmark).

use cohort_engine::Service;
use cohort_proto::{service_id, ErrorPayload};

pub struct Echo;

impl Service for Echo {
    fn id(&self) -> u16 {
        service_id::ECHO
    }
    fn name(&self) -> &'static str {
        "echo"
    }
    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        out.extend_from_slice(payload);
        Ok(())
    }
    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        crate::json_bytes(body, "data")
    }
    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        serde_json::json!({ "data": String::from_utf8_lossy(payload) })
    }
}
