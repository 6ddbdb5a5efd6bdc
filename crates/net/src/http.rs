//! HTTP/1.1 JSON gateway and admin endpoints.
//!
//! `POST /v1/{service}` with a JSON body -> the service's wire payload -> the same forwarder and
//! engines as UDP/TCP -> JSON answer. Page services (`Service::serves_http_pages`) take their paths whole
//! (`http_pages`). `GET /healthz` (503 while shutting down), `GET /metrics`.
//! Every error body is `{"error": CODE, "message": ...}`. While the server drains, the
//! listener keeps accepting so health checks see the 503; it closes when the drain ends.
//! What every handler answers with (responses, the reply port, refusals) is `http_reply`'s.

use crate::accept::{accept_loop, Dealer};
use crate::http_io::{Flow, Guarded};
use crate::http_limits;
use crate::http_reply::{
    authorized, body_refused, error, health, http_error, json, json_body, over_quota, rejected,
    retry_after, unauthorized, HttpEnv, HttpResponse, OneShot, MAX_BODY,
};
use crate::limits::Slot;
use crate::quota::Who;
use crate::tasks::Tracker;
use bytes::Bytes;
use cohort_proto::{ErrorCode, Header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Longest a refused connection reads and drops what its client still sends before closing.
const LINGER: Duration = Duration::from_secs(2);

/// hyper's read (and write queue) buffer per connection: room for a whole checked head
/// (`cohort_http_frame::MAX_HEAD`, which hyper must hold at once) and 8 KiB behind it; what an idle
/// connection may keep.
const MAX_BUF: usize = cohort_http_frame::MAX_HEAD + (8 << 10);

pub(crate) async fn serve_http(
    listener: TcpListener,
    dealer: Dealer,
    env: Arc<HttpEnv>,
    shutdown: watch::Receiver<bool>,
    closed: watch::Receiver<bool>,
    tasks: Tracker,
) {
    let ids = Arc::new(AtomicU64::new(1));
    let mut closed = closed;
    let stop = async move {
        let _ = closed.wait_for(|c| *c).await;
    };
    let (conns, metrics) = (env.conns.clone(), env.ctx.metrics.clone());
    accept_loop(
        listener,
        dealer,
        "http",
        conns,
        metrics,
        http_limits::refusal(),
        stop,
        |stream, slot| {
            let _ = stream.set_nodelay(true);
            let (env, ids, sd) = (env.clone(), ids.clone(), shutdown.clone());
            tasks.spawn(serve_connection(stream, slot, env, ids, sd));
        },
    )
    .await
}

async fn serve_connection(
    stream: TcpStream,
    slot: Slot,
    env: Arc<HttpEnv>,
    ids: Arc<AtomicU64>,
    sd: watch::Receiver<bool>,
) {
    let peer = stream.peer_addr().ok().map(|a| a.ip());
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let Some(tls) = env.tls.clone() else {
        return serve_http1(stream, fd, peer, slot, env, ids, sd).await;
    };
    let timeout = env.limits.read_timeout;
    if let Some(s) = crate::tls::handshake(&tls, stream, timeout, &env.ctx.metrics).await {
        serve_http1(s, fd, peer, slot, env, ids, sd).await
    }
}

/// Serves HTTP/1.1 on `io` until the client or the drain ends it.
async fn serve_http1<I>(
    io: I,
    fd: std::os::fd::RawFd,
    peer: Option<IpAddr>,
    slot: Slot,
    env: Arc<HttpEnv>,
    ids: Arc<AtomicU64>,
    mut sd: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let _slot = slot;
    // This connection's own read and stall timeout (spread so that a crowd does not expire
    // in one instant).
    let read_timeout = crate::limits::spread(env.limits.read_timeout, fd as u64);
    let metrics = env.ctx.metrics.clone();
    let flow = Flow::new(env.budget.clone());
    let grace = crate::limits::goodbye_grace(env.limits.read_timeout);
    let io = TokioIo::new(Guarded::new(
        io,
        flow.clone(),
        (read_timeout, grace),
        metrics.clone(),
    ));
    let svc = hyper::service::service_fn(move |req| {
        let (env, flow) = (env.clone(), flow.clone());
        let id = ids.fetch_add(1, Ordering::Relaxed);
        async move {
            let r = handle(req, &env, id, peer).await;
            if r.status() == StatusCode::REQUEST_TIMEOUT {
                flow.say_goodbye(); // (a 408 closes the connection; its client stalled)
            }
            // The answer counts against the budget until its bytes reach the socket.
            flow.hand(hyper::body::Body::size_hint(r.body()).exact().unwrap_or(0) as usize);
            Ok::<_, Infallible>(r)
        }
    });
    // A connection opened while the server drains (a health check, say) is served one
    // request, then closed; one opened before is closed gracefully when the drain begins
    // (the request in progress finishes, keep-alive ends).
    let opened_draining = *sd.borrow();
    let mut conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // Runs from the first byte of a request head - and through an idle keep-alive
        // connection, so it is the HTTP idle timeout too.
        .header_read_timeout(read_timeout)
        // (No `pipeline_flush`: with it hyper never flushes the 400 for a garbage
        // request, which stays in its read buffer, and closes the connection silently.)
        // Head and body leave in one writev: the body is not copied behind the head.
        .writev(true)
        // The end of stream `Guarded` gives after a refused head must not cut the answers
        // to the requests before it; hyper then also reads nothing while it answers.
        .half_close(true)
        // Heads arrive checked and whole (at most MAX_HEAD); bodies stream through.
        .max_buf_size(MAX_BUF)
        .keep_alive(!opened_draining)
        .serve_connection(io, svc);
    let draining = async {
        if opened_draining {
            return std::future::pending().await;
        }
        let _ = sd.wait_for(|d| *d).await;
    };
    // The connection is polled in place (not pinned away), so that after hyper gives up on a
    // request head - it closes such connections without a word - its socket (plain or TLS)
    // can be taken back to say 408, or to write a refused head's answer.
    let ended = tokio::select! {
        r = &mut conn => r,
        _ = draining => {
            std::pin::Pin::new(&mut conn).graceful_shutdown();
            tokio::time::timeout(read_timeout, &mut conn).await.unwrap_or(Ok(()))
        }
    };
    let head_timed_out = matches!(&ended, Err(e) if e.is_timeout());
    let mut io = conn.into_parts().io.into_inner();
    if io.write_stalled() {
        crate::limits::reset_on_close(fd); // (as on TCP: its answers are dropped)
    } else if head_timed_out {
        metrics.timed_out_connection("http_head");
        let msg = format!(
            "no complete request head within {} ms; closing connection",
            read_timeout.as_millis()
        );
        let r = http_limits::canned("408 Request Timeout", "REQUEST_TIMEOUT", &msg, false);
        let mut io = io.into_inner();
        // Bounded: a client that does not take 200 bytes within the goodbye grace loses them.
        let say = async {
            tokio::io::AsyncWriteExt::write_all(&mut io, &r).await?;
            tokio::io::AsyncWriteExt::shutdown(&mut io).await
        };
        if tokio::time::timeout(grace, say).await.is_err() {
            crate::limits::reset_on_close(fd);
        }
    } else if io.refused() {
        if io.refusal_pending() {
            // hyper ended without shutting the socket (an error): the refusal is still owed.
            let _ = tokio::time::timeout(read_timeout, io.finish()).await;
        }
        if !io.linger(read_timeout.min(LINGER), fd, grace).await {
            crate::limits::reset_on_close(fd); // (it took none of its refusal)
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    env: &HttpEnv,
    id: u64,
    peer: Option<IpAddr>,
) -> HttpResponse {
    let ctx = &env.ctx;
    ctx.metrics.http_requests.inc();
    let uri = req.uri().clone();
    let resp = match (req.method(), uri.path()) {
        (&Method::GET, "/healthz") => {
            let (status, body) = health(ctx.is_shutting_down());
            let mut r = json(status, body);
            if status != StatusCode::OK {
                retry_after(&mut r);
            }
            r
        }
        (&Method::GET, "/metrics") if env.admin_only_metrics => http_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "/metrics is served on the admin listener (--admin)".into(),
        ),
        (&Method::GET, "/metrics") => match unauthorized(ctx, &req, None) {
            Some(refused) => refused,
            None => hyper::Response::builder()
                .header("content-type", "text/plain; version=0.0.4")
                .body(Full::new(Bytes::from((env.metrics)())))
                .expect("static response parts"),
        },
        // With keys on, any valid key, as /metrics here: the document names what is served.
        (&Method::GET, "/openapi.json") => match unauthorized(ctx, &req, None) {
            Some(refused) => refused,
            None => json_body(StatusCode::OK, env.openapi.clone()),
        },
        (_, p) if ctx.routes.as_ref().is_some_and(|r| r.owns(p)) => {
            let routes = ctx.routes.clone().expect("checked");
            crate::routes::serve(req, routes, env, id).await
        }
        (_, p) if crate::v2::is_v2(p) => crate::v2::handle(req, env, id, peer).await,
        (&Method::POST, p) if p.starts_with("/v1/") => call(req, &p[4..], env, id, peer).await,
        (_, p) if crate::http_pages::page_service(ctx, p).is_some() => {
            let sid = crate::http_pages::page_service(ctx, p).expect("checked");
            crate::http_pages::page(req, sid, env, id, peer).await
        }
        (m, p)
            if p.starts_with("/v1/")
                || p == "/healthz"
                || p == "/metrics"
                || p == "/openapi.json" =>
        {
            let allow = if p.starts_with("/v1/") { "POST" } else { "GET" };
            let mut r = http_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "METHOD_NOT_ALLOWED",
                format!("{m} is not allowed on {p} (allowed: {allow})"),
            );
            r.headers_mut().insert(
                hyper::header::ALLOW,
                hyper::header::HeaderValue::from_static(allow),
            );
            r
        }
        (m, p) => http_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!(
                "no route for {m} {p} (POST /v1/SERVICE, GET /healthz, GET /metrics, \
                 GET /openapi.json)"
            ),
        ),
    };
    resp
}

async fn call(
    req: Request<Incoming>,
    name: &str,
    env: &HttpEnv,
    id: u64,
    peer: Option<IpAddr>,
) -> HttpResponse {
    let ctx = &env.ctx;
    let Some(service) = ctx.registry.by_name(name).cloned() else {
        return rejected(
            ctx,
            u16::MAX,
            ErrorCode::UnknownService,
            format!(
                "unknown service {name:?} (served: {})",
                ctx.registry.names().join(", ")
            ),
        );
    };
    let sid = service.id();
    let key = match authorized(ctx, &req, Some(sid)) {
        Ok(key) => key,
        Err(r) => return *r,
    };
    let read = http_limits::read_body(
        req.into_body(),
        MAX_BODY,
        crate::limits::spread(env.limits.read_timeout, id),
        &env.budget,
    );
    let (body, _held) = match read.await {
        Ok(b) => b,
        Err(e) => return body_refused(ctx, sid, e),
    };
    let (payload, timeout_us) = match service.json_request(&body) {
        Ok(r) => (r.payload, r.timeout_us),
        Err(e) => return rejected(ctx, sid, e.code, e.message),
    };
    if payload.len() > ctx.max_payload {
        return rejected(
            ctx,
            sid,
            ErrorCode::TooLarge,
            format!(
                "request payload of {} bytes over the server's limit of {} bytes",
                payload.len(),
                ctx.max_payload
            ),
        );
    }
    let mut header = Header::request(service.id(), id, payload.len());
    if let Some(t) = timeout_us {
        header.timeout_us = t.min(u32::MAX as u64) as u32;
    }
    let _ticket = match ctx.quotas.ticket(Who::of(key, peer)) {
        Ok(t) => t,
        Err(over) => return over_quota(ctx, sid, &over),
    };
    let (port, rx) = OneShot::new(Some(service), ctx.quotas.class_of(Who::of(key, peer)));
    ctx.submit(&env.shard, &header, &payload, port);
    drop(payload);
    match rx.await {
        Ok(Ok(body)) => json_body(StatusCode::OK, body),
        Ok(Err(e)) => error(e.code, e.message),
        Err(_) => error(ErrorCode::Internal, "request lost"),
    }
}
