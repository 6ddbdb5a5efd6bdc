//! Server-wide bounds on what TCP and HTTP clients can make the server hold: open connections
//! (`Connections`) and bytes of requests and answers (`Budget`). Both are shared by every
//! shard; each is one atomic on the hot path.
//!
//! The byte budget counts a request's bytes from the moment they are read until its answer
//! has been handed to the connection, and an answer's bytes from then until they are written
//! to the socket. While the count is at or over the limit no connection reads: new work waits
//! in the kernel's socket buffers (TCP back-pressure), while the work already admitted
//! finishes and its answers drain. A client that never reads its answers therefore holds at
//! most what it had sent, and the write stall timeout closes it (`Limits::read_timeout`).

use cohort_engine::Metrics;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The bounds, as configured (`cohort serve --max-connections ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// TCP and HTTP connections open at once; the next is refused at accept.
    pub max_connections: usize,
    /// Bytes of requests and answers held for TCP/HTTP connections (see the module doc).
    pub max_buffered_bytes: usize,
    /// A TCP connection with nothing buffered and nothing in flight is closed after this
    /// (GOAWAY first).
    pub idle_timeout: Duration,
    /// A started frame, an HTTP request head (and an idle HTTP keep-alive connection), an
    /// HTTP body, and a write the client does not read must each complete within this.
    pub read_timeout: Duration,
    /// Each TCP/HTTP connection's kernel send and receive buffer (SO_SNDBUF/SO_RCVBUF; the
    /// kernel doubles it for its bookkeeping); 0 leaves the kernel's autotuning.
    pub socket_buffer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 10_000,
            max_buffered_bytes: default_buffered_bytes(),
            idle_timeout: Duration::from_secs(60),
            read_timeout: Duration::from_secs(10),
            socket_buffer_bytes: DEFAULT_SOCKET_BUFFER,
        }
    }
}

/// The default kernel buffer of a connection, each way: a window of 128 KiB (1 Gbit/s at a
/// 1 ms round trip), and 2 000 stalled connections hold about 0.5 GB of kernel memory.
pub const DEFAULT_SOCKET_BUFFER: usize = 64 << 10;

/// An eighth of the machine's memory, between 64 MiB and 4 GiB.
pub fn default_buffered_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let total = if pages > 0 && page > 0 {
        (pages as u64).saturating_mul(page as u64)
    } else {
        1 << 30
    };
    (total / 8).clamp(64 << 20, 4 << 30) as usize
}

/// File descriptors this process may open (the soft limit), after raising the soft limit to
/// the hard one: a server that holds one descriptor per connection should not stop at a
/// shell's default of 1024 when the system allows more.
pub fn raise_fd_limit() -> usize {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 1024;
    }
    if r.rlim_cur < r.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        // SAFETY: raised is a valid rlimit; failure leaves the old limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            r = raised;
        }
    }
    usize::try_from(r.rlim_cur).unwrap_or(usize::MAX)
}

/// One connection's (or request's) own read and stall timeout: between 3/4 and 15/16 of
/// `limit`, spread by `key`, so that connections which started together do not all time out
/// in the same instant. 1 000 flooders closed in one burst held a one-core server's other
/// clients for tens of milliseconds (`scripts/hostile-clients.py`). What is left of `limit`
/// (at least `goodbye_grace`) is the connection's goodbye: the error it is closed with must
/// be taken within it, so a client that stalled is gone within `limit` of its stall.
pub(crate) fn spread(limit: Duration, key: u64) -> Duration {
    let h = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as u32; // 10 well-mixed bits
    limit - goodbye_grace(limit) - limit / 16 * 3 * h / 1024
}

/// How long the error frame or answer a connection is closed with (after one of its
/// timeouts fired) may wait for its client to take it; then the connection is reset. Were it
/// given a whole stall limit, a client that takes nothing would be held for two timeouts.
pub(crate) fn goodbye_grace(limit: Duration) -> Duration {
    limit / 16
}

/// Makes closing connection `fd` reset it (SO_LINGER 0): for a client closed because it took
/// no answer bytes. A plain close would queue the FIN behind answers its zero window never
/// takes, and the kernel would keep the socket and those bytes while it probes that window;
/// the answers are dropped anyway (the client was not reading them).
pub(crate) fn reset_on_close(fd: std::os::fd::RawFd) {
    // SAFETY: the caller holds the socket open; the fd is only borrowed for one setsockopt.
    let sock = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let _ = socket2::SockRef::from(&sock).set_linger(Some(Duration::ZERO));
}

/// The least a settled connection may hold of a request while the budget is over
/// (`Budget::settled_share`): an ordinary request head, or a small request whole.
pub(crate) const SETTLED_MIN: usize = 2 << 10;
/// The most: a request of ordinary size whole.
pub(crate) const SETTLED_MAX: usize = 16 << 10;

/// Takes up to `n` from `owed` (bytes charged to the budget and not yet written): returns
/// what was taken and what was owed before, so a writer releases exactly its share whatever
/// other writes do meanwhile.
pub(crate) fn take_owed(owed: &std::sync::atomic::AtomicUsize, n: usize) -> (usize, usize) {
    use std::sync::atomic::Ordering;
    match owed.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| {
        (o.min(n) > 0).then(|| o - o.min(n))
    }) {
        Ok(before) => (before.min(n), before),
        Err(before) => (0, before),
    }
}

/// The byte budget (module doc). `used` is the `cohort_buffered_bytes` gauge itself.
pub(crate) struct Budget {
    used: Gauge,
    limit: i64,
    /// Open TCP and HTTP connections (the `Connections` gauge): what the budget is shared by.
    open: Gauge,
    waiters: Mutex<Vec<Waker>>,
    waiting: AtomicBool,
}

impl Budget {
    pub fn new(limit: usize, metrics: &Metrics) -> Arc<Budget> {
        assert!(limit > 0, "a zero byte budget would never read");
        Arc::new(Budget {
            used: metrics.buffered_bytes.clone(),
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
            open: metrics.connections_open.clone(),
            waiters: Mutex::new(Vec::new()),
            waiting: AtomicBool::new(false),
        })
    }

    pub fn charge(&self, n: usize) {
        self.used.inc_by(n as i64);
    }

    pub fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.used.dec_by(n as i64);
        debug_assert!(before >= n as i64, "budget released more than charged");
        if before >= self.limit && before - (n as i64) < self.limit {
            self.wake_readers();
        }
    }

    /// A charge released when dropped (an HTTP body or answer).
    pub fn hold(self: &Arc<Budget>, n: usize) -> Charge {
        self.charge(n);
        Charge {
            budget: self.clone(),
            n,
        }
    }

    pub fn over(&self) -> bool {
        self.used.get() >= self.limit
    }

    /// What a connection that holds nothing may hold of one request while the budget is
    /// over: its fair share, the limit over the connections open, kept between
    /// `SETTLED_MIN` and `SETTLED_MAX`. This is what lets a client that waits for its
    /// answers be served while others fill the budget, and it bounds the overshoot to one
    /// share per connection. A share, not a fixed 16 KB, because a crowd of connections that
    /// become readable together each take it in the same turn of an io thread: 2 000 x 16 KB
    /// made that turn 30-40 ms on one core, 2 000 x 2 KB under 10 ms
    /// (lab/results/hostile-clients-share/).
    pub fn settled_share(&self) -> usize {
        let open = self.open.get().max(1) as u64;
        let share = (self.limit.max(0) as u64 / open) as usize;
        share.clamp(SETTLED_MIN, SETTLED_MAX)
    }

    /// Ready once the budget is under its limit; else the task is woken when it gets there.
    pub fn poll_under(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.over() {
            return Poll::Ready(());
        }
        let mut w = self.waiters.lock().expect("budget waiters");
        if !w.iter().any(|x| x.will_wake(cx.waker())) {
            w.push(cx.waker().clone());
        }
        self.waiting.store(true, Ordering::SeqCst);
        drop(w);
        // A release between the check above and the flag would not have woken us.
        if !self.over() {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    pub async fn under(&self) {
        std::future::poll_fn(|cx| self.poll_under(cx)).await
    }

    fn wake_readers(&self) {
        if !self.waiting.swap(false, Ordering::SeqCst) {
            return;
        }
        let waiters = std::mem::take(&mut *self.waiters.lock().expect("budget waiters"));
        for w in waiters {
            w.wake();
        }
    }
}

/// Bytes held in the budget until dropped.
pub(crate) struct Charge {
    budget: Arc<Budget>,
    n: usize,
}

impl Charge {
    /// More bytes under the same charge (a body as it arrives).
    pub fn grow(&mut self, n: usize) {
        self.budget.charge(n);
        self.n += n;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.n);
    }
}

/// Open TCP and HTTP connections, against `max_connections`.
pub(crate) struct Connections {
    live: AtomicUsize,
    max: usize,
    gauge: Gauge,
}

impl Connections {
    pub fn new(max: usize, metrics: &Metrics) -> Arc<Connections> {
        Arc::new(Connections {
            live: AtomicUsize::new(0),
            max,
            gauge: metrics.connections_open.clone(),
        })
    }

    /// A slot for one more connection, or None at the cap.
    pub fn open(self: &Arc<Connections>) -> Option<Slot> {
        let prev = self.live.fetch_add(1, Ordering::AcqRel);
        if prev >= self.max {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.gauge.inc();
        Some(Slot {
            conns: self.clone(),
            shard: None,
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }
}

/// One open connection; dropping it frees its place (and its place on the shard that serves
/// it, `crate::accept::Dealer`).
pub(crate) struct Slot {
    conns: Arc<Connections>,
    shard: Option<Arc<AtomicUsize>>,
}

impl Slot {
    /// Counts the connection among `shard`'s open ones for as long as it lives.
    pub(crate) fn count_on(&mut self, shard: &Arc<AtomicUsize>) {
        shard.fetch_add(1, Ordering::AcqRel);
        if let Some(old) = self.shard.replace(shard.clone()) {
            old.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.conns.live.fetch_sub(1, Ordering::AcqRel);
        self.conns.gauge.dec();
        if let Some(s) = &self.shard {
            s.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn metrics() -> Metrics {
        Metrics::new(HashMap::new())
    }

    #[test]
    fn connections_stop_at_the_cap_and_free_their_place() {
        let m = metrics();
        let c = Connections::new(2, &m);
        let a = c.open().expect("first");
        let _b = c.open().expect("second");
        assert!(c.open().is_none(), "a third over the cap of 2");
        assert_eq!(m.connections_open.get(), 2);
        drop(a);
        assert!(c.open().is_some(), "a place freed is taken again");
    }

    #[test]
    fn spread_timeouts_stay_within_the_limit_and_differ() {
        let limit = Duration::from_secs(2);
        let all: Vec<Duration> = (0..1000).map(|k| spread(limit, k)).collect();
        assert!(all
            .iter()
            .all(|&t| t + goodbye_grace(limit) <= limit && t >= limit - limit / 4));
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert!(distinct.len() > 500, "{} distinct", distinct.len());
    }

    #[tokio::test]
    async fn a_reader_waits_while_over_and_wakes_when_released() {
        let m = metrics();
        let b = Budget::new(100, &m);
        b.charge(60);
        assert!(!b.over());
        let held = b.hold(40);
        assert!(b.over(), "at the limit counts as over");
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.under().await });
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "a reader waits while the budget is over"
        );
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("woken when under")
            .expect("task");
        b.release(60);
        assert_eq!(m.buffered_bytes.get(), 0);
    }

    #[test]
    fn the_settled_share_is_the_budget_over_the_connections_within_its_bounds() {
        let m = metrics();
        let b = Budget::new(4 << 20, &m);
        assert_eq!(b.settled_share(), SETTLED_MAX, "no connection open yet");
        m.connections_open.set(10);
        assert_eq!(
            b.settled_share(),
            SETTLED_MAX,
            "a few connections: the whole 16 KB"
        );
        m.connections_open.set(1000);
        assert_eq!(b.settled_share(), (4 << 20) / 1000);
        m.connections_open.set(2000);
        assert_eq!(b.settled_share(), (4 << 20) / 2000);
        m.connections_open.set(100_000);
        assert_eq!(
            b.settled_share(),
            SETTLED_MIN,
            "never below one request head"
        );
    }
}
