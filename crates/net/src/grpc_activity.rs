//! A gRPC connection's calls in progress (for the idle timeout: a stream waiting for its
//! next request is not one, `Quiet`) and the watchdog that closes a connection which makes
//! no progress (`grpc.rs` serves the connection).

use crate::grpc_flow::Ledger;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One connection's calls in progress and when the last one ended (for the idle timeout).
pub(crate) struct Activity {
    active: AtomicUsize,
    /// Whether a call has begun on the connection.
    started: AtomicBool,
    start: Instant,
    last_end_ms: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            active: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            start: Instant::now(),
            last_end_ms: AtomicU64::new(0),
        })
    }
    fn end(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_end_ms.store(now, Ordering::Relaxed);
        self.active.fetch_sub(1, Ordering::Relaxed);
    }
    /// How long the connection has had no call in progress (zero while one is).
    fn idle_for(&self) -> Duration {
        if self.active.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_end_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// A call in progress: from its request's head until its answer's body is sent or dropped
/// (a stream's answers flow long after its handler returned).
pub(crate) struct InProgress(Arc<Activity>);

impl InProgress {
    pub(crate) fn start(activity: &Arc<Activity>) -> InProgress {
        activity.active.fetch_add(1, Ordering::Relaxed);
        activity.started.store(true, Ordering::Relaxed);
        InProgress(activity.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A stream call that waits for its next request with nothing of its own in flight: not in
/// progress while this lives (an open stream that sends nothing must not hold a connection
/// for ever; it is idle, as a TCP connection with nothing in flight is).
pub(crate) struct Quiet(Arc<Activity>);

impl Quiet {
    pub(crate) fn start(activity: &Arc<Activity>) -> Quiet {
        activity.end();
        Quiet(activity.clone())
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        self.0.active.fetch_add(1, Ordering::Relaxed);
    }
}

/// Resolves once the connection has been idle for `idle`.
pub(crate) async fn idle_for(activity: &Activity, idle: Duration) {
    loop {
        let quiet = activity.idle_for();
        if quiet >= idle {
            return;
        }
        tokio::time::sleep((idle - quiet).max(Duration::from_millis(10))).await;
    }
}

/// Why a connection's watchdog closes it.
pub(crate) enum Unproductive {
    /// No call begun within the read timeout of the connection's start.
    NoRequest,
    /// A request message not whole within the read timeout (`grpc_body::Watched`).
    PartialRequest,
    /// Answers held with none moving for the read timeout: the client grants no window.
    WindowStalled,
}

/// Resolves when the connection makes no progress for `limit` (`Unproductive`).
pub(crate) async fn watchdog(
    ledger: &Ledger,
    activity: &Activity,
    limit: Duration,
) -> Unproductive {
    loop {
        if ledger.has_read_timed_out() {
            return Unproductive::PartialRequest;
        }
        let mut wait = None::<Duration>;
        let stalled = ledger.stalled_for();
        if stalled >= limit {
            return Unproductive::WindowStalled;
        } else if ledger.holds() {
            wait = Some(limit - stalled);
        }
        if !activity.started.load(Ordering::Relaxed) {
            let age = activity.start.elapsed();
            if age >= limit {
                return Unproductive::NoRequest;
            }
            wait = Some(wait.map_or(limit - age, |w| w.min(limit - age)));
        }
        // (Woken early when a read times out, or, parked, when answers begin to be held.)
        match wait {
            Some(w) => {
                let w = w.max(Duration::from_millis(5));
                tokio::select! {
                    _ = tokio::time::sleep(w) => {}
                    _ = ledger.notify.notified() => {}
                }
            }
            None if ledger.park() => ledger.notify.notified().await,
            None => {}
        }
    }
}
