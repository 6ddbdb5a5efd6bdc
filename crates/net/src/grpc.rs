//! The gRPC listener (`--grpc`): HTTP/2 connections (TLS with ALPN `h2` when TLS is on)
//! accepted under the same connection cap as TCP and HTTP, each served by hyper's HTTP/2
//! server with the Open Inference Protocol service (`crate::v2_grpc`). Bounded per
//! connection: concurrent streams, HTTP/2 flow-control windows (what a client may have sent
//! that the server has not read), and the decoded message size; a peer that stops answering
//! keep-alive pings within the read timeout is closed, and a connection with no call in
//! progress for the idle timeout gets GOAWAY and is closed (as an idle HTTP/1.1 or TCP
//! connection is: an idle client must not hold a connection slot for ever). On drain each
//! connection gets GOAWAY, its calls in progress finish, and it closes.

use crate::accept::accept_loop;
use crate::context::Context;
use crate::limits::{Connections, Limits, Slot};
use crate::shard::Shard;
use crate::tasks::Tracker;
use crate::v2_grpc::{GrpcShared, Inference};
use cohort_oip::grpc_inference_service_server::GrpcInferenceServiceServer;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Streams one connection may have open at once (a client past it waits for one to end).
const MAX_STREAMS: u32 = 1024;
/// Per-stream and per-connection receive windows: the bytes a client may send ahead.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 4 << 20;

pub(crate) struct GrpcEnv {
    pub shared: Arc<GrpcShared>,
    pub limits: Limits,
    pub conns: Arc<Connections>,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl GrpcEnv {
    pub(crate) fn new(
        ctx: Arc<Context>,
        shard: Arc<Shard>,
        limits: Limits,
        conns: Arc<Connections>,
        tls: Option<tokio_rustls::TlsAcceptor>,
        stream_window: usize,
    ) -> GrpcEnv {
        let shared = GrpcShared {
            ctx,
            shard,
            stream_window,
            ids: AtomicU64::new(1),
        };
        GrpcEnv {
            shared: Arc::new(shared),
            limits,
            conns,
            tls,
        }
    }
}

pub(crate) async fn serve_grpc(
    listener: TcpListener,
    env: Arc<GrpcEnv>,
    shutdown: watch::Receiver<bool>,
    closed: watch::Receiver<bool>,
    tasks: Tracker,
) {
    let mut closed = closed;
    let stop = async move {
        let _ = closed.wait_for(|c| *c).await;
    };
    let (conns, metrics) = (env.conns.clone(), env.shared.ctx.metrics.clone());
    // A refused connection is closed at once: an HTTP/2 client sees the connection end.
    accept_loop(
        listener,
        "grpc",
        conns,
        metrics,
        b"",
        stop,
        |stream, slot| {
            let _ = stream.set_nodelay(true);
            tasks.spawn(serve_connection(
                stream,
                slot,
                env.clone(),
                shutdown.clone(),
            ));
        },
    )
    .await
}

async fn serve_connection(
    stream: TcpStream,
    slot: Slot,
    env: Arc<GrpcEnv>,
    sd: watch::Receiver<bool>,
) {
    let _slot = slot;
    let peer = stream.peer_addr().ok().map(|a| a.ip());
    let Some(tls) = env.tls.clone() else {
        return serve_h2(stream, peer, env, sd).await;
    };
    let (timeout, metrics) = (env.limits.read_timeout, &env.shared.ctx.metrics);
    if let Some(s) = crate::tls::handshake(&tls, stream, timeout, metrics).await {
        serve_h2(s, peer, env, sd).await
    }
}

/// One connection's calls in progress and when the last one ended (for the idle timeout).
struct Activity {
    active: AtomicUsize,
    start: Instant,
    last_end_ms: AtomicU64,
}

impl Activity {
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            active: AtomicUsize::new(0),
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
struct InProgress(Arc<Activity>);

impl InProgress {
    fn start(activity: &Arc<Activity>) -> InProgress {
        activity.active.fetch_add(1, Ordering::Relaxed);
        InProgress(activity.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// An answer body that holds its call in progress until hyper is done with it.
struct Tracked<B> {
    inner: B,
    _call: InProgress,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Resolves once the connection has been idle for `idle`.
async fn idle_for(activity: &Activity, idle: Duration) {
    loop {
        let quiet = activity.idle_for();
        if quiet >= idle {
            return;
        }
        tokio::time::sleep((idle - quiet).max(Duration::from_millis(10))).await;
    }
}

async fn serve_h2<I>(
    io: I,
    peer: Option<std::net::IpAddr>,
    env: Arc<GrpcEnv>,
    mut sd: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let inference = Inference {
        shared: env.shared.clone(),
        peer,
    };
    let svc =
        GrpcInferenceServiceServer::new(inference).max_decoding_message_size(crate::http::MAX_BODY);
    let activity = Activity::new();
    let counted = {
        let activity = activity.clone();
        hyper::service::service_fn(move |req| {
            let (mut svc, call) = (svc.clone(), InProgress::start(&activity));
            async move {
                // (The generated service is always ready: no back-pressure to wait out.)
                use tonic::codegen::Service as _;
                let answer = svc.call(req).await?;
                Ok::<_, std::convert::Infallible>(
                    answer.map(|inner| Tracked { inner, _call: call }),
                )
            }
        })
    };
    let read_timeout = env.limits.read_timeout;
    let mut conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .keep_alive_interval(Some(env.limits.idle_timeout))
        .keep_alive_timeout(read_timeout)
        .serve_connection(TokioIo::new(io), counted);
    let draining = async {
        if *sd.borrow() {
            return; // opened while draining: GOAWAY at once
        }
        let _ = sd.wait_for(|d| *d).await;
    };
    let idle = idle_for(&activity, env.limits.idle_timeout);
    tokio::select! {
        _ = &mut conn => return,
        _ = draining => {}
        _ = idle => env.shared.ctx.metrics.timed_out_connection("grpc_idle"),
    }
    std::pin::Pin::new(&mut conn).graceful_shutdown();
    let _ = tokio::time::timeout(read_timeout, &mut conn).await;
}
