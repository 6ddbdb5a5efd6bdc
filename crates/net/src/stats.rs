//! Network-side counters (rendered by `/metrics`).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default, Debug)]
pub struct NetStats {
    pub udp_rx: AtomicU64,
    pub udp_tx: AtomicU64,
    /// Datagrams that were not Cohort v1 frames: dropped, never answered (no reflection).
    pub udp_dropped_foreign: AtomicU64,
    /// Answers the kernel would not take even after waiting (counted, then dropped).
    pub udp_send_failed: AtomicU64,
    pub tcp_connections: AtomicU64,
    pub tcp_frames: AtomicU64,
    /// TCP connections closed because their byte stream was not a valid frame sequence.
    pub tcp_protocol_errors: AtomicU64,
    pub http_requests: AtomicU64,
    /// Requests refused at the door: the client table was full.
    pub table_full: AtomicU64,
}

impl NetStats {
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}
