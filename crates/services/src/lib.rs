//! Services. Each module holds one service: its payload schema (encode/decode, never
//! panicking on any input), its CPU implementation, its JSON mapping for HTTP and, where it has
//! one, its GPU backend (kernels + batching) for the generic GPU engines. [`catalog`] lists
//! them for the server.

pub mod bank;
#[cfg(feature = "backends")]
pub mod catalog;
#[cfg(feature = "backends")]
pub mod config;
#[cfg(feature = "backends")]
pub mod entry;
pub mod facever;
mod json_str;
pub mod knn;
pub mod lenet;
#[cfg(feature = "backends")]
pub mod memcached;
pub mod micro;
#[cfg(feature = "test-services")]
pub mod reverse;
#[cfg(feature = "backends")]
pub mod selftest;

pub mod workload;

pub use micro::{echo, spin};

use cohort_proto::{ErrorCode, ErrorPayload};

pub(crate) fn bad_request(msg: impl Into<String>) -> ErrorPayload {
    ErrorPayload::new(ErrorCode::BadRequest, msg)
}

/// JSON helper: a byte payload is carried as a string ("data") in HTTP bodies.
pub(crate) fn json_bytes(body: &serde_json::Value, field: &str) -> Result<Vec<u8>, ErrorPayload> {
    match body.get(field) {
        None => Ok(Vec::new()),
        Some(serde_json::Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(_) => Err(bad_request(format!("field {field:?} must be a string"))),
    }
}
