//! `spin`: busy-waits the requested microseconds, then echoes the payload (Lynx's
//! compute-bound micro-benchmark with a fixed service time).
//!
//! Payload: spin_us u32 LE, then any bytes. The whole payload is echoed.

use cohort_engine::Service;
use cohort_proto::ErrorPayload;
use std::time::{Duration, Instant};

/// Its wire id (in every frame header).
pub const ID: u16 = 2;

/// Longest busy wait one request may ask for: 100 ms.
pub const MAX_SPIN_US: u32 = 100_000;

pub struct Spin;

pub fn encode(spin_us: u32, data: &[u8]) -> Vec<u8> {
    let mut v = spin_us.to_le_bytes().to_vec();
    v.extend_from_slice(data);
    v
}

/// Returns the requested busy time, validated.
pub fn decode(payload: &[u8]) -> Result<u32, ErrorPayload> {
    let head: [u8; 4] = payload
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            cohort_service_api::bad_request("spin payload needs a u32 microsecond count")
        })?;
    let us = u32::from_le_bytes(head);
    if us > MAX_SPIN_US {
        return Err(cohort_service_api::bad_request(format!(
            "spin_us {us} exceeds {MAX_SPIN_US}"
        )));
    }
    Ok(us)
}

impl Service for Spin {
    fn id(&self) -> u16 {
        ID
    }
    fn name(&self) -> &'static str {
        "spin"
    }
    fn http_doc(&self) -> Option<cohort_engine::HttpDoc> {
        let body = serde_json::json!({
            "type": "object",
            "properties": {
                "spin_us": { "type": "integer", "minimum": 0, "maximum": MAX_SPIN_US, "description": "microseconds to busy-wait" },
                "data": { "type": "string", "description": "bytes echoed after the wait" }
            },
            "required": ["spin_us"]
        });
        Some(cohort_engine::HttpDoc {
            summary: "Busy-waits spin_us microseconds, then echoes data",
            request: body.clone(),
            response: body,
            example: serde_json::json!({ "spin_us": 10, "data": "x" }),
        })
    }
    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let us = decode(payload)?;
        let until = Instant::now() + Duration::from_micros(us as u64);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        out.extend_from_slice(payload);
        Ok(())
    }
    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        let us = body
            .get("spin_us")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| {
                cohort_service_api::bad_request("field \"spin_us\" (integer) is required")
            })?;
        let us = u32::try_from(us)
            .map_err(|_| cohort_service_api::bad_request("spin_us out of range"))?;
        Ok(encode(us, &cohort_service_api::json_bytes(body, "data")?))
    }
    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        let us = decode(payload).unwrap_or(0);
        serde_json::json!({ "spin_us": us, "data": String::from_utf8_lossy(payload.get(4..).unwrap_or(&[])) })
    }
}
