//! Whether an io thread is behind its arrivals: overload refused at once, not queued.
//!
//! Every TCP, HTTP and gRPC request of a shard is read, decoded, admitted and answered by
//! tasks of the shard's one-thread runtime. When requests arrive faster than that thread can
//! serve them, the engine queue (`--max-queue`) does not fill - the engine is waiting for
//! the io thread - and the backlog grows in front of admission instead: HTTP/2 streams
//! accepted and spawned, connection tasks woken and waiting their turn, bytes in socket
//! buffers. Nothing bounded that wait, so an open-loop overload of the gRPC front end
//! queued for most of a second (issue 84).
//!
//! The shard measures its own backlog: now and then (at most every `PROBE_EVERY`, and only
//! while requests come) a request's admission spawns a probe task stamped with the time and
//! the thread's CPU time; a spawned task joins the back of the run queue, so the thread's
//! CPU time spent until it first runs is the work queued ahead of it just then. (CPU time,
//! not the clock: a thread that other processes keep off its core waits too, but refusing
//! would not bring its turn sooner, and it is not behind its arrivals.) A backlog that stays over
//! `TARGET` for `GRACE` (not a passing burst: a scheduler hiccup, a batch of answers) puts
//! the shard into shedding. While shedding, the shard admits a share of the requests that
//! arrive and refuses the others at once - OVERLOADED, `ingress: ...`, counted as
//! `cohort_requests_refused_total{reason="ingress"}` - a refusal costing the thread less than
//! an answer. The share follows the probes (each one over `TARGET` cuts it by a fifth, each
//! one under gives back a twentieth), so the thread serves about what it can with about
//! `TARGET` of backlog, rather than refusing everything whenever one probe was late (a
//! thread preempted by another process looks behind too). Each request is asked once, as
//! early as its front door can (a unary gRPC ModelInfer at its HEADERS, `crate::grpc`; an
//! HTTP `/v2` infer before its body; frames as they are submitted): a refusal made after
//! the request was read and decoded costs nearly an answer, and a second ask would take a
//! second share. Shedding ends once no probe has
//! found the thread behind for `CALM`. Idle, nothing runs (no probe without a request).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The backlog the io thread may hold (a probe's wait) before requests are refused.
pub(crate) const TARGET: Duration = Duration::from_micros(1_000);
/// How long the backlog must stay over `TARGET` before refusing starts.
const GRACE: Duration = Duration::from_millis(10);
/// How long without a probe over `TARGET` before shedding ends.
const CALM: Duration = Duration::from_millis(200);
/// The least time between probes.
const PROBE_EVERY: Duration = Duration::from_micros(250);
/// The least share of arrivals admitted while shedding (so that probes still measure
/// served work, and no client is refused everything).
const MIN_SHARE: f64 = 0.02;
/// A probe older than this says nothing about now.
const STALE: Duration = Duration::from_millis(50);

#[derive(Default)]
struct State {
    /// A probe is in the run queue.
    probing: bool,
    /// When the last probe was spawned.
    probe_sent: Option<Instant>,
    /// The last probe's wait, and when it ran.
    lag: Duration,
    sampled: Option<Instant>,
    /// Since when every probe found the thread over `TARGET` (None: the last one did not).
    above_since: Option<Instant>,
    /// When a probe last found the thread over `TARGET`.
    last_above: Option<Instant>,
    shedding: bool,
    /// While shedding: the share of arrivals admitted, and the admissions owed (a request
    /// is admitted when a whole one is).
    share: f64,
    credit: f64,
}

/// One shard's backlog (used from the shard's own thread only; the lock never waits).
#[derive(Default)]
pub(crate) struct Behind {
    state: Mutex<State>,
}

impl Behind {
    /// Called as a request is admitted on the shard's thread: `Some(wait)` when it must be
    /// refused (the io thread is `wait` behind), None to admit it.
    pub(crate) fn check(self: &std::sync::Arc<Self>) -> Option<Duration> {
        let now = Instant::now();
        let mut s = self.state.lock().expect("behind lock");
        let due = s.probe_sent.is_none_or(|t| now - t >= PROBE_EVERY);
        if !s.probing && due {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                s.probing = true;
                s.probe_sent = Some(now);
                let (me, cpu) = (self.clone(), thread_cpu());
                rt.spawn(async move { me.sampled(now, cpu) });
            }
        }
        let fresh = s.sampled.is_some_and(|t| now - t < STALE);
        if !fresh {
            s.above_since = None;
            s.shedding = false;
            return None;
        }
        if s.shedding && s.last_above.is_some_and(|t| now - t >= CALM) {
            s.shedding = false;
        }
        if !s.shedding && s.above_since.is_some_and(|t| now - t >= GRACE) {
            s.shedding = true;
            s.share = 1.0;
            s.credit = 0.0;
        }
        if !s.shedding {
            return None;
        }
        s.credit += s.share;
        if s.credit >= 1.0 {
            s.credit -= 1.0;
            return None;
        }
        Some(s.lag)
    }

    /// A probe spawned at `sent`, the thread's CPU time then `cpu`, runs now.
    fn sampled(&self, sent: Instant, cpu: Duration) {
        let now = Instant::now();
        // The work that was ahead of the probe (never more than the time it waited).
        let lag = thread_cpu().saturating_sub(cpu).min(now - sent);
        let mut s = self.state.lock().expect("behind lock");
        s.probing = false;
        s.lag = lag;
        s.sampled = Some(now);
        if lag > TARGET {
            s.above_since.get_or_insert(sent);
            s.last_above = Some(now);
            s.share = (s.share * 0.8).max(MIN_SHARE);
        } else {
            s.above_since = None;
            s.share = (s.share + 0.05).min(1.0);
        }
    }
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The refusal's detail (after `ingress: `).
pub(crate) fn detail(wait: Duration) -> String {
    format!(
        "this io thread has {} us of work queued ahead (over {} us for a while): refused at \
         once rather than queued; try again later",
        wait.as_micros(),
        TARGET.as_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    /// A thread that falls behind is refused only once the backlog has lasted; a passing
    /// burst is not, and an idle one never is.
    #[test]
    fn refuses_a_standing_backlog_not_a_burst() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let b = Arc::new(Behind::default());
            assert_eq!(b.check(), None, "no probe yet");
            tokio::task::yield_now().await;
            assert_eq!(
                b.check(),
                None,
                "a thread with nothing queued is not behind"
            );
            // Busy: every probe waits behind 3 ms of work (spun: CPU time, not a sleep).
            let start = Instant::now();
            let mut refused = false;
            while start.elapsed() < Duration::from_millis(500) && !refused {
                b.check();
                spin(Duration::from_millis(3)); // the thread's work
                tokio::task::yield_now().await; // the probe runs, 3 ms late
                refused = b.check().is_some();
                if refused {
                    assert!(start.elapsed() >= GRACE, "not before the grace");
                }
            }
            assert!(refused, "a standing backlog is refused");
            // Caught up: probes run at once; the share admitted grows back to all.
            for _ in 0..100 {
                b.check();
                tokio::task::yield_now().await;
                std::thread::sleep(PROBE_EVERY);
            }
            assert_eq!(b.check(), None, "admitted once the backlog is gone");
        });
    }

    /// Waiting without working (another process on the core, here a sleep) is not a backlog.
    #[test]
    fn a_thread_kept_off_its_core_is_not_behind() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let b = Arc::new(Behind::default());
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(100) {
                assert_eq!(b.check(), None);
                std::thread::sleep(Duration::from_millis(3));
                tokio::task::yield_now().await;
            }
        });
    }
}
