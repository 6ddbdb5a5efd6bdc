//! The bodies between hyper and the gRPC service, with what the service cannot see:
//! - `Watched`, a call's request: a gRPC message begun must arrive whole within the read
//!   timeout (a unary call's from its HEADERS until the end of its stream), else the
//!   connection is closed, as TCP closes a started frame and HTTP a started head. A client
//!   that sent HEADERS and 20 bytes of a message held a connection slot for good (issue 84);
//! - `Tracked`, a call's answer: it holds the call in progress (for the idle timeout) and
//!   puts each chunk hyper takes into the connection's budget until it is written.

use crate::grpc_flow::{Held, Ledger};
use bytes::Buf;
use hyper::body::{Body, Frame, SizeHint};
use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body, watched for a message that does not arrive whole in time (module doc).
pub(crate) struct Watched<B> {
    inner: B,
    /// A unary call is under way from its HEADERS until its stream ends.
    unary: bool,
    ended: bool,
    /// The 5-byte gRPC message prefix so far, and the message bytes still to come.
    prefix: [u8; 5],
    have: usize,
    left: usize,
    limit: Duration,
    /// Since when the service has waited for the message under way (None: nothing is).
    since: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
    ledger: Arc<Ledger>,
}

impl<B> Watched<B> {
    pub fn new(inner: B, unary: bool, limit: Duration, ledger: Arc<Ledger>) -> Self {
        Watched {
            inner,
            unary,
            ended: false,
            prefix: [0; 5],
            have: 0,
            left: 0,
            limit,
            since: unary.then(Instant::now),
            timer: None,
            ledger,
        }
    }

    /// Follows the messages' framing through `b`.
    fn scan(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.left > 0 {
                let k = self.left.min(b.len());
                self.left -= k;
                b = &b[k..];
                continue;
            }
            let k = (5 - self.have).min(b.len());
            self.prefix[self.have..self.have + k].copy_from_slice(&b[..k]);
            self.have += k;
            b = &b[k..];
            if self.have == 5 {
                let p = self.prefix;
                self.left = u32::from_be_bytes([p[1], p[2], p[3], p[4]]) as usize;
                self.have = 0;
            }
        }
    }

    fn partial(&self) -> bool {
        if self.unary {
            !self.ended
        } else {
            self.have > 0 || self.left > 0
        }
    }

    /// Stops the clock once nothing is under way.
    fn update(&mut self) {
        if !self.partial() {
            (self.since, self.timer) = (None, None);
        }
    }
}

impl<B> Body for Watched<B>
where
    B: Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    this.scan(&d[..]);
                }
                this.update();
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => {
                this.ended = true;
                this.update();
                Poll::Ready(None)
            }
            Poll::Pending => {
                // The clock of a message under way starts when the service first waits for
                // the rest of it: a stream the server has stopped reading (its slots full,
                // the budget over) holds the part of its next message that came with the
                // last one, and that wait is the server's, not the client's.
                if !this.partial() {
                    return Poll::Pending;
                }
                let since = *this.since.get_or_insert_with(Instant::now);
                let end = since + this.limit;
                let t = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(end)));
                if t.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.ledger.read_timed_out();
                let msg = format!(
                    "no whole request message within {} ms",
                    this.limit.as_millis()
                );
                Poll::Ready(Some(Err(msg.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer's charge, carried from the handler to `Tracked` in the response's extensions
/// (which must be `Clone`).
#[derive(Clone)]
pub(crate) struct HeldAnswer(pub Arc<Mutex<Option<Held>>>);

impl HeldAnswer {
    pub fn new(h: Held) -> HeldAnswer {
        HeldAnswer(Arc::new(Mutex::new(Some(h))))
    }
    pub fn take(&self) -> Option<Held> {
        self.0.lock().ok()?.take()
    }
}

/// An answer body (module doc). `_call` is what it holds until hyper is done with it (the
/// call in progress); `made`, a unary answer's charge until hyper takes its bytes.
pub(crate) struct Tracked<B, G> {
    pub inner: B,
    pub _call: G,
    pub made: Option<Held>,
    pub ledger: Arc<Ledger>,
}

impl<B: Body + Unpin, G: Unpin> Body for Tracked<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &r {
            if let Some(d) = f.data_ref() {
                // hyper holds it now (and sends it as the client's window allows).
                this.ledger.hand(d.remaining());
                this.made = None;
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
