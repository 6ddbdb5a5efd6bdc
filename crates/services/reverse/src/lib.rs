//! `reverse`: answers the payload's bytes in reverse order. A service the tests serve (never in
//! a release build: the `test-services` feature); it exists to prove that a service is its
//! folder plus one catalog line (docs/adding-a-service.md), so it touches nothing else.
//!
//! Request: 1..=`max_len` bytes. Response: the same bytes, last first. HTTP: `POST
//! /v1/reverse` with `{"data": "text"}`, answered `{"data": "txet"}`.

#[cfg(feature = "backends")]
pub mod config;
pub mod load;
#[cfg(feature = "backends")]
pub mod slice;

use cohort_engine::Service;
use cohort_proto::{ErrorCode, ErrorPayload};

/// Its wire id, from the range the protocol leaves to services the tests serve.
pub const ID: u16 = 0xfe01;

pub struct Reverse {
    /// Longest payload accepted (its `max_len` setting).
    pub max_len: usize,
}

/// The payload checked: TOO_LARGE over `max_len`, BAD_REQUEST when empty.
pub fn decode(payload: &[u8], max_len: usize) -> Result<&[u8], ErrorPayload> {
    if payload.is_empty() {
        return Err(ErrorPayload::new(
            ErrorCode::BadRequest,
            "reverse needs at least one byte",
        ));
    }
    if payload.len() > max_len {
        return Err(ErrorPayload::new(
            ErrorCode::TooLarge,
            format!("reverse takes at most {max_len} bytes"),
        ));
    }
    Ok(payload)
}

impl Service for Reverse {
    fn id(&self) -> u16 {
        ID
    }

    fn name(&self) -> &'static str {
        "reverse"
    }
    fn http_doc(&self) -> Option<cohort_engine::HttpDoc> {
        let data = serde_json::json!({ "type": "string", "description": format!("1 to {} bytes", self.max_len) });
        let body = serde_json::json!({ "type": "object", "properties": { "data": data }, "required": ["data"] });
        Some(cohort_engine::HttpDoc {
            summary: "Answers the request's bytes in reverse order",
            request: body.clone(),
            response: body,
            example: serde_json::json!({ "data": "stressed" }),
        })
    }

    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        out.extend(decode(payload, self.max_len)?.iter().rev());
        Ok(())
    }

    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        cohort_service_api::json_bytes(body, "data")
    }

    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        serde_json::json!({ "data": String::from_utf8_lossy(payload) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes: an answer that is the reverse, or a clear error; never a panic.
        #[test]
        fn any_payload_is_reversed_or_refused(p in proptest::collection::vec(any::<u8>(), 0..64)) {
            let r = Reverse { max_len: 32 };
            match r.call_cpu(&p) {
                Ok(out) => {
                    prop_assert!(!p.is_empty() && p.len() <= 32);
                    prop_assert_eq!(out, p.iter().rev().copied().collect::<Vec<u8>>());
                }
                Err(e) => prop_assert!(
                    (p.is_empty() && e.code == ErrorCode::BadRequest)
                        || (p.len() > 32 && e.code == ErrorCode::TooLarge)
                ),
            }
        }
    }
}
