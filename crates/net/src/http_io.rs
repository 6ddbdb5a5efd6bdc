//! The socket an HTTP connection's hyper reads and writes, with the limits hyper lacks:
//! - request framing checked before hyper parses it (`cohort_http_frame`); a refused head is
//!   answered here with the JSON error body, after hyper has answered the requests before it;
//! - a client that takes no bytes of its answers for the read timeout is closed
//!   (`write_stalled`), as on TCP: hyper would wait on its socket for ever;
//! - answers count against the byte budget until written to the socket (`Flow::hand`);
//! - while the budget is over, a connection reads only if it holds nothing (no request with
//!   hyper unanswered, no answer unwritten), and then at most its settled share
//!   (`Budget::settled_share`) of its request: a connection over its share waits first, a
//!   client that waits for its answers is served.

use crate::limits::Budget;
use bytes::{Buf, BytesMut};
use cohort_engine::Metrics;
use cohort_http_frame::{Scanner, Stop};
use std::future::Future as _;
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Bytes written to socket `fd` that its peer has not acknowledged (SIOCOUTQ; 0 if unknown).
fn unsent_bytes(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: fd is a socket the caller holds open; TIOCOUTQ (= SIOCOUTQ) writes one int.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    if r == 0 {
        n.max(0) as usize
    } else {
        0
    }
}

/// What the connection's socket and its request handlers share.
pub(crate) struct Flow {
    budget: Arc<Budget>,
    /// Answers handed to hyper.
    handed: AtomicU64,
    /// Answer bytes handed and not yet written to the socket (charged to the budget).
    owed: AtomicUsize,
    /// The read side, parked until the connection holds nothing.
    reader: Mutex<Option<Waker>>,
    /// An answer that closes the connection for a timeout (408) was handed: its write gets
    /// the goodbye grace, not a stall limit of its own.
    goodbye: AtomicBool,
}

impl Flow {
    pub fn new(budget: Arc<Budget>) -> Arc<Flow> {
        Arc::new(Flow {
            budget,
            handed: AtomicU64::new(0),
            owed: AtomicUsize::new(0),
            reader: Mutex::new(None),
            goodbye: AtomicBool::new(false),
        })
    }

    /// An answer of `n` bytes is handed to hyper: charged until written.
    pub fn hand(&self, n: usize) {
        self.budget.charge(n);
        self.owed.fetch_add(n, Ordering::AcqRel);
        self.handed.fetch_add(1, Ordering::AcqRel);
        self.wake_reader();
    }

    /// The answer handed last closes the connection for one of its timeouts.
    pub fn say_goodbye(&self) {
        self.goodbye.store(true, Ordering::Release);
    }

    /// `n` bytes reached the socket: that much of what is owed leaves the budget.
    fn written(&self, n: usize) {
        let (take, owed) = crate::limits::take_owed(&self.owed, n);
        if take == 0 {
            return;
        }
        self.budget.release(take);
        if owed == take {
            self.wake_reader();
        }
    }

    fn wake_reader(&self) {
        if let Some(w) = self.reader.lock().expect("flow reader").take() {
            w.wake();
        }
    }

    fn park_reader(&self, cx: &Context<'_>) {
        *self.reader.lock().expect("flow reader") = Some(cx.waker().clone());
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.budget.release(*self.owed.get_mut());
    }
}

/// The guarded socket (module doc).
pub(crate) struct Guarded<I> {
    io: I,
    flow: Arc<Flow>,
    scanner: Scanner,
    /// Checked request bytes hyper's buffer had no room for yet.
    pending: BytesMut,
    /// The refusal of a head, to write before the connection closes (then emptied).
    refusal: Option<BytesMut>,
    /// The stream stopped (refused head or broken body): hyper reads end of stream next.
    stopped: bool,
    /// A write waited the whole stall limit (the connection is being closed for it).
    write_stalled: bool,
    /// Since when a write has waited on the client (None: the last write went through).
    stall: Option<Pin<Box<Sleep>>>,
    stall_limit: Duration,
    /// What a goodbye write may wait (`crate::limits::goodbye_grace`), and by when, once one
    /// is under way.
    grace: Duration,
    goodbye_by: Option<tokio::time::Instant>,
    metrics: Arc<Metrics>,
}

impl<I> Guarded<I> {
    /// `stall_limit`: how long a write may wait on the client; `grace`: how long the goodbye
    /// of a connection closed for a timeout may.
    pub fn new(
        io: I,
        flow: Arc<Flow>,
        (stall_limit, grace): (Duration, Duration),
        metrics: Arc<Metrics>,
    ) -> Self {
        Guarded {
            io,
            flow,
            scanner: Scanner::new(),
            pending: BytesMut::new(),
            refusal: None,
            stopped: false,
            write_stalled: false,
            stall: None,
            stall_limit,
            grace,
            goodbye_by: None,
            metrics,
        }
    }

    /// The refusal still to be written, if a head was refused.
    pub fn refusal_pending(&self) -> bool {
        self.refusal.as_ref().is_some_and(|r| !r.is_empty())
    }

    /// Whether the connection ends because its client took no answer bytes.
    pub fn write_stalled(&self) -> bool {
        self.write_stalled
    }

    /// Whether a request head was refused (its answer written or owed).
    pub fn refused(&self) -> bool {
        self.refusal.is_some()
    }

    /// Whether this connection may read now (module doc); parks the task if not.
    fn may_read(&mut self, cx: &mut Context<'_>) -> Poll<u64> {
        if self.scanner.mid_request() {
            // The request under way (its head held, or its body) is this connection's share.
            if !self.flow.budget.over() {
                return Poll::Ready(u64::MAX);
            }
            let used = self.scanner.request_bytes();
            let share = self.flow.budget.settled_share() as u64;
            if used < share && self.holds_nothing() {
                return Poll::Ready(share - used);
            }
            ready!(self.flow.budget.poll_under(cx));
            return Poll::Ready(u64::MAX);
        }
        if !self.flow.budget.over() {
            return Poll::Ready(u64::MAX);
        }
        if self.holds_nothing() {
            return Poll::Ready(self.flow.budget.settled_share() as u64);
        }
        // Over the budget with answers owed: wait for the budget or for the answers to go.
        self.flow.park_reader(cx);
        if self.holds_nothing() {
            return Poll::Ready(self.flow.budget.settled_share() as u64);
        }
        ready!(self.flow.budget.poll_under(cx));
        Poll::Ready(u64::MAX)
    }

    /// No request with hyper unanswered and no answer byte unwritten.
    fn holds_nothing(&self) -> bool {
        self.flow.owed.load(Ordering::Acquire) == 0
            && self.flow.handed.load(Ordering::Acquire) >= self.scanner.ends()
    }

    /// A write that did not go through: closed with an error once it has waited the limit.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let limit = self.stall_limit;
        let t = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        let goodbye = self.flow.goodbye.load(Ordering::Acquire);
        if goodbye {
            let by = *self
                .goodbye_by
                .get_or_insert_with(|| tokio::time::Instant::now() + self.grace);
            if t.deadline() > by {
                t.as_mut().reset(by);
            }
        }
        ready!(t.as_mut().poll(cx));
        if !self.write_stalled && !goodbye {
            // (A goodbye not taken was counted for the timeout that closed the connection.)
            self.metrics.timed_out_connection("write_stalled");
        }
        self.write_stalled = true;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client took no answer bytes for {} ms",
                limit.as_millis()
            ),
        )))
    }

    /// What a write to the socket did: bytes that went through leave the budget; a write
    /// that waits runs the stall clock.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                self.stall = None;
                self.flow.written(n);
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.stalled(cx),
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> Guarded<I> {
    /// Writes the refusal, if one is pending (before the connection is shut).
    fn poll_refusal(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(r) = self.refusal.as_mut().filter(|r| !r.is_empty()) {
            let n = match Pin::new(&mut self.io).poll_write(cx, r) {
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.stalled(cx).map_ok(|_| ()),
            };
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.stall = None;
            r.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Writes the refusal (if any) and shuts the socket; for the end of the connection.
    pub async fn finish(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_refusal(cx)).await?;
        tokio::io::AsyncWriteExt::shutdown(&mut self.io).await
    }

    /// After a refusal: reads and drops what the client still sends, until it closes or for
    /// at most `max` (a lingering close). Closing a socket with unread bytes makes the kernel
    /// reset it, and a reset discards the refusal from the client's buffers before it has
    /// read it (a 1 MB head refused at 16 KiB would otherwise never be answered). A client
    /// that takes no byte of what is still unsent on socket `fd` for `grace` is not waited
    /// for: returns false (reset it), as the lingering is for clients that read.
    pub async fn linger(&mut self, max: Duration, fd: RawFd, grace: Duration) -> bool {
        let mut sink = [0u8; 4096];
        let end = tokio::time::Instant::now() + max;
        let (mut unsent, mut since) = (unsent_bytes(fd), tokio::time::Instant::now());
        let look = grace / 4;
        loop {
            tokio::select! {
                r = tokio::io::AsyncReadExt::read(&mut self.io, &mut sink) => match r {
                    Ok(0) | Err(_) => return true,
                    Ok(_) => {}
                },
                _ = tokio::time::sleep(look) => {}
                _ = tokio::time::sleep_until(end) => return true,
            }
            let now = tokio::time::Instant::now();
            let left = unsent_bytes(fd);
            if left == 0 || left < unsent {
                (unsent, since) = (left, now);
            } else if now - since >= grace {
                return false;
            }
        }
    }

    pub fn into_inner(self) -> I {
        self.io
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Guarded<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.stopped {
                return Poll::Ready(Ok(())); // end of stream: hyper finishes and closes
            }
            let allowed = ready!(this.may_read(cx));
            let start = buf.filled().len();
            let room = buf
                .remaining()
                .min(usize::try_from(allowed).unwrap_or(usize::MAX));
            let got = {
                let mut part = buf.take(room);
                ready!(Pin::new(&mut this.io).poll_read(cx, &mut part))?;
                part.filled().len()
            };
            if got == 0 {
                return Poll::Ready(Ok(())); // the client's end of stream
            }
            // SAFETY: the read through `take` initialised the first `got` unfilled bytes.
            unsafe { buf.assume_init(got) };
            buf.advance(got);
            let scan = this.scanner.scan(&buf.filled()[start..]);
            let passed = start + scan.pass;
            if !scan.released.is_empty() {
                // A held head, now whole: it goes first, then what followed it.
                this.pending.extend_from_slice(&scan.released);
                this.pending.extend_from_slice(&buf.filled()[start..passed]);
                buf.set_filled(start);
            } else {
                buf.set_filled(passed);
            }
            match scan.stop {
                Some(Stop::Head(r)) => {
                    this.refusal = Some(BytesMut::from(&r.response()[..]));
                    this.stopped = true;
                }
                Some(Stop::Body(_)) => this.stopped = true,
                None => {}
            }
            if buf.filled().len() > start {
                return Poll::Ready(Ok(()));
            }
            // Nothing for hyper yet: deliver what is pending, say end of stream after a
            // stop, or read on while a head is still arriving (held).
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Guarded<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, data);
        this.wrote(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Pending => this.stalled(cx).map_ok(|_| ()),
            r => {
                if r.is_ready() {
                    this.stall = None;
                }
                r
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_refusal(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}
