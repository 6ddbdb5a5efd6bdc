//! What one gRPC connection holds of the byte budget (`crate::limits::Budget`), and the
//! clocks that close a connection which makes no progress:
//! - an answer counts from the moment it is made until its bytes are written to the socket
//!   in DATA frames (`Ledger::charge`, then `Ledger::hand` when hyper takes it, released by
//!   `Metered` as it writes). HTTP/2 moves answers only as fast as the client grants window:
//!   a client that reads frames but never grants window held every answer in memory,
//!   outside the budget (issue 84: 156 -> 814 MB in 30 s);
//! - answers held with none of them moving for the read timeout is a stalled window
//!   (`Ledger::stalled_for`): the connection is closed;
//! - a write the socket does not take for the read timeout closes the connection, as on
//!   TCP and HTTP (`Metered`).

use crate::limits::Budget;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Sleep;

/// One connection's share of the budget and its progress (module doc).
pub(crate) struct Ledger {
    budget: Arc<Budget>,
    /// Answer bytes made and not yet written (all charged to the budget).
    held: AtomicUsize,
    /// Of them, bytes handed to hyper and not yet written in DATA frames.
    owed: AtomicUsize,
    start: Instant,
    /// When `held` last went down, or up from nothing (ms since `start`).
    moved_ms: AtomicU64,
    /// A request message did not arrive whole within the read timeout.
    read_timed_out: AtomicBool,
    /// Wakes the connection's watchdog: answers began to be held while it was parked
    /// (`park`), or a read timed out.
    pub notify: Notify,
    parked: AtomicBool,
}

impl Ledger {
    pub fn new(budget: Arc<Budget>) -> Arc<Ledger> {
        Arc::new(Ledger {
            budget,
            held: AtomicUsize::new(0),
            owed: AtomicUsize::new(0),
            start: Instant::now(),
            moved_ms: AtomicU64::new(0),
            read_timed_out: AtomicBool::new(false),
            notify: Notify::new(),
            parked: AtomicBool::new(false),
        })
    }

    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    fn stamp(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.moved_ms.store(now, Ordering::Relaxed);
    }

    fn add(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.budget.charge(n);
        if self.held.fetch_add(n, Ordering::SeqCst) == 0 {
            self.stamp(); // the stall clock starts with the first byte held
                          // (Only a parked watchdog is woken: a busy connection's holds begin and end
                          // with every answer, and its watchdog wakes on its own clock.)
            if self.parked.swap(false, Ordering::SeqCst) {
                self.notify.notify_one();
            }
        }
    }

    fn sub(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.held.fetch_sub(n, Ordering::AcqRel);
        self.stamp(); // progress
        self.budget.release(n);
    }

    /// An answer of `n` bytes is made: held until the returned charge is dropped (when its
    /// bytes are handed to hyper, or the answer is dropped).
    pub fn charge(self: &Arc<Ledger>, n: usize) -> Held {
        self.add(n);
        Held {
            ledger: self.clone(),
            n,
        }
    }

    /// `n` answer bytes were handed to hyper: held until written in DATA frames.
    pub fn hand(&self, n: usize) {
        self.add(n);
        self.owed.fetch_add(n, Ordering::AcqRel);
    }

    /// `n` bytes of DATA frame payload were written to the socket.
    fn written(&self, n: usize) {
        let (take, _) = crate::limits::take_owed(&self.owed, n);
        if take > 0 {
            self.sub(take);
        }
    }

    /// Whether the connection holds answer bytes.
    pub fn holds(&self) -> bool {
        self.held.load(Ordering::SeqCst) > 0
    }

    /// The watchdog is about to wait for `notify` with no clock of its own: the next answer
    /// held wakes it. False if one is held already (look again instead).
    pub fn park(&self) -> bool {
        self.parked.store(true, Ordering::SeqCst);
        !self.holds()
    }

    /// How long the connection has held answers with none of them moving (zero when it
    /// holds none).
    pub fn stalled_for(&self) -> Duration {
        if !self.holds() {
            return Duration::ZERO;
        }
        let moved = Duration::from_millis(self.moved_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(moved)
    }

    /// A request message did not arrive whole in time (`crate::grpc_body::Watched`).
    pub fn read_timed_out(&self) {
        self.read_timed_out.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    pub fn has_read_timed_out(&self) -> bool {
        self.read_timed_out.load(Ordering::Acquire)
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        // What hyper had and never wrote (the connection closed); `Held`s hold the ledger,
        // so theirs are released already.
        self.budget.release(*self.owed.get_mut());
    }
}

/// Answer bytes held until dropped (`Ledger::charge`).
pub(crate) struct Held {
    ledger: Arc<Ledger>,
    n: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.ledger.sub(self.n);
    }
}

/// Counts the payload bytes of the DATA frames in what the server writes: the stream of
/// HTTP/2 frames from the connection's first byte (a server sends no preface). Answers
/// leave only in DATA frames; counting every byte written would let a client that sends
/// PINGs pass their acknowledgements off as its answers moving.
#[derive(Default)]
struct DataCounter {
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to come, and whether it is DATA.
    left: usize,
    data: bool,
}

impl DataCounter {
    fn scan(&mut self, mut b: &[u8]) -> usize {
        let mut data = 0;
        while !b.is_empty() {
            if self.left > 0 {
                let k = self.left.min(b.len());
                if self.data {
                    data += k;
                }
                self.left -= k;
                b = &b[k..];
                continue;
            }
            let k = (9 - self.have).min(b.len());
            self.head[self.have..self.have + k].copy_from_slice(&b[..k]);
            self.have += k;
            b = &b[k..];
            if self.have == 9 {
                let h = self.head;
                self.left = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                self.data = h[3] == 0;
                self.have = 0;
            }
        }
        data
    }
}

/// The connection's socket (plain or TLS): answer bytes written leave the budget, and a
/// write that waits on the client for `stall_limit` fails (the connection closes).
pub(crate) struct Metered<I> {
    io: I,
    ledger: Arc<Ledger>,
    frames: DataCounter,
    stall: Option<Pin<Box<Sleep>>>,
    stall_limit: Duration,
    stalled: Arc<AtomicBool>,
}

impl<I> Metered<I> {
    /// `stalled` is set when a write timed out (for the caller to count and reset).
    pub fn new(
        io: I,
        ledger: Arc<Ledger>,
        stall_limit: Duration,
        stalled: Arc<AtomicBool>,
    ) -> Self {
        Metered {
            io,
            ledger,
            frames: DataCounter::default(),
            stall: None,
            stall_limit,
            stalled,
        }
    }

    fn waited(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let limit = self.stall_limit;
        let t = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(t.as_mut().poll(cx));
        self.stalled.store(true, Ordering::Release);
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client took no bytes for {} ms", limit.as_millis()),
        ))
    }

    fn wrote(&mut self, n: usize, bufs: &[&[u8]]) {
        self.stall = None;
        let mut left = n;
        let mut data = 0;
        for b in bufs {
            let k = left.min(b.len());
            data += self.frames.scan(&b[..k]);
            left -= k;
            if left == 0 {
                break;
            }
        }
        self.ledger.written(data);
    }
}

use std::future::Future as _;

impl<I: AsyncRead + Unpin> AsyncRead for Metered<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Metered<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write(cx, data) {
            Poll::Ready(Ok(n)) => {
                this.wrote(n, &[data]);
                Poll::Ready(Ok(n))
            }
            Poll::Pending => this.waited(cx).map(Err),
            r => r,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(n)) => {
                let slices: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
                this.wrote(n, &slices);
                Poll::Ready(Ok(n))
            }
            Poll::Pending => this.waited(cx).map(Err),
            r => r,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Pending => this.waited(cx).map(Err),
            r => {
                this.stall = None;
                r
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_engine::Metrics;
    use std::collections::HashMap;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let n = payload.len();
        let mut f = vec![
            (n >> 16) as u8,
            (n >> 8) as u8,
            n as u8,
            kind,
            0,
            0,
            0,
            0,
            1,
        ];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn only_data_payload_counts_however_the_writes_split_it() {
        let mut all = frame(4, &[0; 6]); // SETTINGS
        all.extend(frame(0, &[7; 1000])); // DATA
        all.extend(frame(6, &[0; 8])); // PING
        all.extend(frame(0, &[])); // empty DATA
        all.extend(frame(0, &[1; 70_000])); // DATA over 64 KiB
        for split in [1, 5, 9, 10, 4096, all.len()] {
            let mut c = DataCounter::default();
            let n: usize = all.chunks(split).map(|b| c.scan(b)).sum();
            assert_eq!(n, 71_000, "split {split}");
        }
    }

    #[test]
    fn held_answers_count_in_the_budget_until_written() {
        let m = Metrics::new(HashMap::new());
        let budget = Budget::new(1 << 20, &m);
        let l = Ledger::new(budget);
        let h = l.charge(100);
        assert_eq!(m.buffered_bytes.get(), 100);
        assert!(l.holds());
        drop(h);
        l.hand(100);
        assert_eq!(m.buffered_bytes.get(), 100, "handed to hyper: still held");
        l.written(60);
        l.written(60);
        assert_eq!(m.buffered_bytes.get(), 0);
        assert!(!l.holds());
        assert_eq!(l.stalled_for(), Duration::ZERO);
        l.hand(10);
        drop(l);
        assert_eq!(
            m.buffered_bytes.get(),
            0,
            "a closed connection's bytes are released"
        );
    }
}
