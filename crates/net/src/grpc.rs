//! The gRPC listener (`--grpc`): HTTP/2 connections (TLS with ALPN `h2` when TLS is on)
//! accepted under the same connection cap as TCP and HTTP, each served by hyper's HTTP/2
//! server with the Open Inference Protocol service (`crate::v2_grpc`) and, with
//! `--data-dir`, Cohort's collections service (`crate::collections_grpc`). Bounded per
//! connection: concurrent streams, HTTP/2 flow-control windows (what a client may have sent
//! that the server has not read), and the decoded message size. Under the same byte budget
//! and timeouts as TCP and HTTP: answers count in `--max-buffered-bytes` until written, and
//! a connection is closed when its answers stall for the read timeout, when a request
//! message begun is not whole within it, or when no call begins within it of its opening
//! (`crate::grpc_flow`, `crate::grpc_body`, `watchdog`). A peer that stops answering
//! keep-alive pings within the read timeout is closed, and a connection with no call in
//! progress for the idle timeout gets GOAWAY and is closed (as an idle HTTP/1.1 or TCP
//! connection is: an idle client must not hold a connection slot for ever). On drain each
//! connection gets GOAWAY, its calls in progress finish, and it closes.

use crate::accept::{accept_loop, Dealer};
use crate::collections_grpc::{not_served, CollectionsService};
use crate::context::Context;
use crate::grpc_activity::{idle_for, watchdog, Activity, InProgress, Unproductive};
use crate::grpc_body::{HeldAnswer, Tracked, Watched};
use crate::grpc_flow::{Ledger, Metered};
use crate::limits::{Budget, Connections, Limits, Slot};
use crate::shard::Shard;
use crate::tasks::Tracker;
use crate::v2_grpc::{too_large, Arrived, GrpcShared, HeadAdmitted, Inference};
use cohort_collections_grpc::collections_server::CollectionsServer;
use cohort_oip::grpc_inference_service_server::GrpcInferenceServiceServer;
use cohort_oip::tensors::status;
use hyper::http;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
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
    /// The byte budget TCP and HTTP share: gRPC answers count in it (`crate::grpc_flow`).
    pub budget: Arc<Budget>,
    pub conns: Arc<Connections>,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl GrpcEnv {
    pub(crate) fn new(
        ctx: Arc<Context>,
        shard: Arc<Shard>,
        limits: Limits,
        budget: Arc<Budget>,
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
            budget,
            conns,
            tls,
        }
    }
}

pub(crate) async fn serve_grpc(
    listener: TcpListener,
    dealer: Dealer,
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
        dealer,
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
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let Some(tls) = env.tls.clone() else {
        return serve_h2(stream, fd, peer, env, sd).await;
    };
    let (timeout, metrics) = (env.limits.read_timeout, &env.shared.ctx.metrics);
    if let Some(s) = crate::tls::handshake(&tls, stream, timeout, metrics).await {
        serve_h2(s, fd, peer, env, sd).await
    }
}

/// The unary inference call, refused at its head while the io thread is behind.
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// A call's `grpc-timeout` in microseconds.
fn grpc_deadline_us(h: &http::HeaderMap) -> Option<u64> {
    h.get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(cohort_oip::tensors::grpc_timeout_us)
}

/// A unary inference whose wait on this io thread from its head to its task's first run
/// already spent its `grpc-timeout`: refused there, `deadline:`, before its message is read
/// (the handler checks again after decoding, `v2_grpc::admit`). Counted under service
/// "unknown", as a head-time `ingress:` refusal is: the model is named in the message.
fn late_at_head(
    metrics: &cohort_engine::Metrics,
    arrived: Instant,
    deadline_us: u64,
) -> Option<cohort_proto::ErrorPayload> {
    let waited = arrived.elapsed().as_micros() as u64;
    if waited < deadline_us {
        return None;
    }
    let detail = format!(
        "the call waited {waited} us on the io thread, past its grpc-timeout of \
         {deadline_us} us; refused rather than run late"
    );
    Some(metrics.shed(u16::MAX, cohort_engine::Shed::Deadline, &detail))
}

/// A refusal, at once, of a call that would add to a budget already over while its
/// connection holds answers: RESOURCE_EXHAUSTED, the client may try again.
/// Counted as `cohort_requests_refused_total{reason="budget"}` under service "unknown": the
/// call's model is in its message, which is not read.
fn over_budget(metrics: &cohort_engine::Metrics) -> http::Response<tonic::body::Body> {
    let e = metrics.shed(
        u16::MAX,
        cohort_engine::Shed::Budget,
        "the server's buffered bytes are at --max-buffered-bytes and this connection's \
         answers are not being taken; try again later",
    );
    status(e).into_http()
}

async fn serve_h2<I>(
    io: I,
    fd: std::os::fd::RawFd,
    peer: Option<std::net::IpAddr>,
    env: Arc<GrpcEnv>,
    mut sd: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // This connection's own read and stall timeout (spread so that a crowd that stalled
    // together is not closed in one instant), and its goodbye.
    let limit = crate::limits::spread(env.limits.read_timeout, fd as u64);
    let grace = crate::limits::goodbye_grace(env.limits.read_timeout);
    let ledger = Ledger::new(env.budget.clone());
    let write_stalled = Arc::new(AtomicBool::new(false));
    let io = Metered::new(io, ledger.clone(), limit, write_stalled.clone());
    let activity = Activity::new();
    let inference = Inference {
        shared: env.shared.clone(),
        peer,
        ledger: ledger.clone(),
        activity: activity.clone(),
    };
    let svc = GrpcInferenceServiceServer::new(inference)
        .max_decoding_message_size(crate::http_reply::MAX_BODY);
    // The collections' service, where `--data-dir` gave a handler that answers it; its
    // messages may be as large as the REST routes' bodies.
    let collections = env.shared.ctx.routes.as_ref().and_then(|r| {
        let calls = r.grpc_calls()?;
        let service = CollectionsService {
            shared: env.shared.clone(),
            peer,
            ledger: ledger.clone(),
            calls,
            sid: r.frame_service().unwrap_or(u16::MAX),
        };
        Some(CollectionsServer::new(service).max_decoding_message_size(r.max_body()))
    });
    let counted = {
        let (activity, ledger) = (activity.clone(), ledger.clone());
        let metrics = env.shared.ctx.metrics.clone();
        let (ctx, shard) = (env.shared.ctx.clone(), env.shared.shard.clone());
        hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
            let (mut svc, call) = (svc.clone(), InProgress::start(&activity));
            let mut collections = collections.clone();
            let (ledger, metrics) = (ledger.clone(), metrics.clone());
            // The head was read just now: the handler knows how long the call then waited
            // on this io thread before it ran (`v2_grpc::Inference::admit`).
            let arrived = Instant::now();
            req.extensions_mut().insert(Arrived(arrived));
            // A unary inference is admitted or refused here, at its HEADERS, while this io
            // thread is behind (`crate::behind`): a refusal then costs the thread no DATA
            // frames read and no message decoded, so it is much cheaper than an answer and
            // the thread keeps serving near its capacity far past it (issue 84). Streams are
            // many requests each: not refused here.
            let unary_infer = req.uri().path() == MODEL_INFER;
            let shed = if unary_infer {
                let shed = ctx.behind(&shard, u16::MAX);
                req.extensions_mut().insert(HeadAdmitted);
                // A call without a valid key is told so (UNAUTHENTICATED, as its handler
                // would), not OVERLOADED: a client must not retry a call that can never
                // pass. (Counted once, as the shed it also is; the key's scope needs the
                // model's name, in the unread message.)
                shed.map(|e| {
                    let value = req.headers().get("authorization").map(|v| v.as_bytes());
                    match ctx.auth.as_ref().map(|a| a.bearer(value, None)) {
                        Some(Err(key)) => key,
                        _ => e,
                    }
                })
            } else {
                None
            };
            let deadline = unary_infer
                .then(|| grpc_deadline_us(req.headers()))
                .flatten();
            async move {
                let over = ledger.budget().over() && ledger.holds();
                let late = || deadline.and_then(|d| late_at_head(&metrics, arrived, d));
                let mut answer = if let Some(e) = shed.or_else(late) {
                    // Trailers-only, its body never polled: hyper ends the stream with
                    // RST_STREAM(NO_ERROR) and the client stops sending it.
                    drop(req);
                    status(e).into_http()
                } else if over {
                    over_budget(&metrics)
                } else {
                    let unary = !req.uri().path().ends_with("/ModelStreamInfer");
                    let req = req.map(|b| Watched::new(b, unary, limit, ledger.clone()));
                    // (The generated services are always ready: no back-pressure to wait out.)
                    use tonic::codegen::Service as _;
                    if !req
                        .uri()
                        .path()
                        .starts_with(cohort_collections_grpc::PATH_PREFIX)
                    {
                        svc.call(req).await?
                    } else if let Some(c) = collections.as_mut() {
                        c.call(req).await?
                    } else {
                        not_served().into_http()
                    }
                };
                if let Some(s) = tonic::Status::from_header_map(answer.headers()) {
                    if s.code() == tonic::Code::OutOfRange {
                        let _ = too_large(s).add_header(answer.headers_mut());
                    }
                }
                let made = answer.extensions_mut().remove::<HeldAnswer>();
                let made = made.and_then(|h| h.take());
                Ok::<_, std::convert::Infallible>(answer.map(|inner| Tracked {
                    inner,
                    _call: call,
                    made,
                    ledger,
                }))
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
    let metrics = &env.shared.ctx.metrics;
    let goodbye = tokio::select! {
        _ = &mut conn => {
            if write_stalled.load(Ordering::Acquire) {
                metrics.timed_out_connection("write_stalled");
                crate::limits::reset_on_close(fd); // (its answers are dropped, as on TCP)
            }
            return;
        }
        _ = draining => read_timeout,
        _ = idle => {
            metrics.timed_out_connection("grpc_idle");
            read_timeout
        }
        why = watchdog(&ledger, &activity, limit) => match why {
            Unproductive::NoRequest => {
                metrics.timed_out_connection("grpc_no_request");
                grace
            }
            Unproductive::PartialRequest => {
                metrics.timed_out_connection("grpc_partial_request");
                return;
            }
            Unproductive::WindowStalled => {
                metrics.timed_out_connection("grpc_window_stalled");
                // Its answers are dropped: no FIN queued behind them, no kernel probing.
                crate::limits::reset_on_close(fd);
                return;
            }
        },
    };
    std::pin::Pin::new(&mut conn).graceful_shutdown();
    let _ = tokio::time::timeout(goodbye, &mut conn).await;
}
