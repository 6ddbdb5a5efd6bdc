//! The gRPC listener (`--grpc`): HTTP/2 connections (TLS with ALPN `h2` when TLS is on)
//! accepted under the same connection cap as TCP and HTTP, each served by hyper's HTTP/2
//! server with the Open Inference Protocol service (`crate::v2_grpc`). Bounded per
//! connection: concurrent streams, HTTP/2 flow-control windows (what a client may have sent
//! that the server has not read), and the decoded message size; a peer that stops answering
//! keep-alive pings within the read timeout is closed. On drain each connection gets GOAWAY,
//! its streams in progress finish, and it closes.

use crate::accept::accept_loop;
use crate::context::Context;
use crate::limits::{Connections, Limits, Slot};
use crate::shard::Shard;
use crate::tasks::Tracker;
use crate::v2_grpc::{GrpcShared, Inference};
use cohort_oip::grpc_inference_service_server::GrpcInferenceServiceServer;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
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
    let read_timeout = env.limits.read_timeout;
    let mut conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .keep_alive_interval(Some(env.limits.idle_timeout))
        .keep_alive_timeout(read_timeout)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(svc));
    let draining = async {
        if *sd.borrow() {
            return; // opened while draining: GOAWAY at once
        }
        let _ = sd.wait_for(|d| *d).await;
    };
    tokio::select! {
        _ = &mut conn => {}
        _ = draining => {
            std::pin::Pin::new(&mut conn).graceful_shutdown();
            let _ = tokio::time::timeout(read_timeout, &mut conn).await;
        }
    }
}
