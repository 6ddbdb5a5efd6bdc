//! The server's monotonic clock as nanoseconds, the unit of a message's deadline (a u64 crosses
//! to a device; an `Instant` cannot).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since the process's clock epoch, never 0 (0 means "no deadline").
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64 + 1
}

/// The clock value `d` from now.
pub fn after(d: Duration) -> u64 {
    now_ns().saturating_add(d.as_nanos().min(u64::MAX as u128) as u64)
}

/// True when `deadline` (0 = none) has passed at `now`.
pub fn expired(deadline: u64, now: u64) -> bool {
    deadline != 0 && now > deadline
}

/// The `Instant` of a clock value.
pub fn instant_of(ns: u64) -> Instant {
    epoch() + Duration::from_nanos(ns.saturating_sub(1))
}
