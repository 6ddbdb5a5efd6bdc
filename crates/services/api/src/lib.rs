//! What every Cohort service builds on, naming none of them: its catalog [`listing`], which
//! holds apart its serving [`entry`] (what the server knows of it), its self-[`checks`] and its
//! [`tools`] (commands, benchmarks, model tools), its typed settings ([`config`]), what the load generator sends it
//! ([`workload`]), the memcached client the services that keep data there share
//! ([`memcached`]) and the engine harness its GPU checks run through ([`harness`]). A service
//! is a crate beside this one (`crates/services/<name>`); the catalog crate lists them.

#[cfg(feature = "backends")]
pub mod checks;
#[cfg(feature = "backends")]
pub mod config;
#[cfg(feature = "backends")]
pub mod entry;
#[cfg(feature = "backends")]
pub mod harness;
pub mod json_str;
#[cfg(feature = "backends")]
pub mod listing;
#[cfg(feature = "backends")]
pub mod memcached;
#[cfg(feature = "backends")]
pub mod tools;
pub mod workload;

use cohort_proto::{ErrorCode, ErrorPayload};

/// A BAD_REQUEST error with `msg`: what a service's decoder answers bad input with.
pub fn bad_request(msg: impl Into<String>) -> ErrorPayload {
    ErrorPayload::new(ErrorCode::BadRequest, msg)
}

/// JSON helper: a byte payload is carried as a string ("data") in HTTP bodies; a missing
/// field is empty, a body that is not an object is BAD_REQUEST.
pub fn json_bytes(body: &serde_json::Value, field: &str) -> Result<Vec<u8>, ErrorPayload> {
    // `get` on an array or a number finds nothing, which would read as an empty field.
    if !body.is_object() {
        return Err(bad_request("the body must be a JSON object"));
    }
    match body.get(field) {
        None => Ok(Vec::new()),
        Some(serde_json::Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(_) => Err(bad_request(format!("field {field:?} must be a string"))),
    }
}
