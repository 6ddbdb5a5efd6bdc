//! Counters an engine keeps; the admin endpoint renders them.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    BadRequest,
    Timeout,
    Internal,
}

#[derive(Default, Debug)]
pub struct EngineMetrics {
    pub ok: AtomicU64,
    pub bad_request: AtomicU64,
    pub timeout: AtomicU64,
    pub internal: AtomicU64,
    /// Sum of time spent queued before execution, in nanoseconds.
    pub queue_wait_ns: AtomicU64,
    /// Sum of execution time, in nanoseconds.
    pub compute_ns: AtomicU64,
}

impl EngineMetrics {
    pub fn count(&self, o: Outcome) {
        let c = match o {
            Outcome::Ok => &self.ok,
            Outcome::BadRequest => &self.bad_request,
            Outcome::Timeout => &self.timeout,
            Outcome::Internal => &self.internal,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}
