//! The HTTP side of the server's limits (`crate::limits`): request bodies read within the read
//! timeout and charged as they arrive (`read_body`; the socket itself is read only as the
//! byte budget allows, `crate::http_io`); the fixed responses for clients refused or timed
//! out before hyper could answer them.

use crate::limits::{Budget, Charge};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use std::sync::Arc;
use std::time::Duration;

/// Why a request body was not read.
pub(crate) enum BodyError {
    TooLarge(usize),
    Timeout(Duration),
    Broken(String),
}

/// Reads a whole request body of at most `max` bytes within `timeout`, each piece charged to
/// the budget as it arrives; the charge is the caller's to hold until the answer.
pub(crate) async fn read_body(
    mut body: Incoming,
    max: usize,
    timeout: Duration,
    budget: &Arc<Budget>,
) -> Result<(Bytes, Charge), BodyError> {
    if body.size_hint().lower() > max as u64 {
        return Err(BodyError::TooLarge(max));
    }
    let mut held = budget.hold(0);
    let read = async {
        let mut out = BytesMut::new();
        loop {
            let Some(frame) = body.frame().await else {
                break;
            };
            let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > max {
                    return Err(BodyError::TooLarge(max));
                }
                held.grow(data.len());
                out.extend_from_slice(&data);
            }
        }
        Ok(out.freeze())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(b)) => Ok((b, held)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(BodyError::Timeout(timeout)),
    }
}

pub(crate) use cohort_http_frame::canned;

/// The 503 a client refused at accept gets.
pub(crate) fn refusal() -> &'static [u8] {
    static R: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        canned(
            "503 Service Unavailable",
            "OVERLOADED",
            "too many connections; try again later",
            true,
        )
    })
}
