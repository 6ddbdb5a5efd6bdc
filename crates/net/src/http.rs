//! HTTP/1.1 JSON gateway and admin endpoints.
//!
//! `POST /v1/{service}` with a JSON body -> the service's wire payload -> the same forwarder and
//! engines as UDP/TCP -> JSON answer. `GET /healthz` (503 while shutting down), `GET /metrics`.

use crate::forward::Context;
use crate::tasks::Tracker;
use bytes::Bytes;
use cohort_engine::{Reply, ReplyPort, Response, ResponseBody};
use cohort_proto::{ErrorCode, Header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

type HttpResponse = hyper::Response<Full<Bytes>>;

/// Renders `/metrics` (the server assembles it from every layer's counters).
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// Largest JSON body accepted.
const MAX_BODY: usize = 4 << 20;
/// Slow clients: a request's headers must arrive within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) async fn serve_http(
    listener: TcpListener,
    ctx: Arc<Context>,
    metrics: MetricsRender,
    mut shutdown: watch::Receiver<bool>,
    tasks: Tracker,
) {
    let ids = Arc::new(AtomicU64::new(1));
    loop {
        let (stream, _) = tokio::select! {
            a = listener.accept() => match a {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let (ctx, metrics, ids, mut sd) =
            (ctx.clone(), metrics.clone(), ids.clone(), shutdown.clone());
        tasks.spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                handle(
                    req,
                    ctx.clone(),
                    metrics.clone(),
                    ids.fetch_add(1, Ordering::Relaxed),
                )
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = sd.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(10), conn).await;
                }
            }
        });
    }
}

struct OneShot(Mutex<Option<oneshot::Sender<Response>>>);

impl ReplyPort for OneShot {
    fn deliver(&self, _token: u32, r: Response) {
        if let Some(tx) = self.0.lock().expect("oneshot lock").take() {
            let _ = tx.send(r);
        }
    }
}

fn json(status: StatusCode, v: serde_json::Value) -> HttpResponse {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())))
        .expect("static response parts")
}

fn error(code: ErrorCode, msg: impl Into<String>) -> HttpResponse {
    let status = StatusCode::from_u16(code.http_status()).expect("valid status");
    json(
        status,
        serde_json::json!({ "error": code.name(), "message": msg.into() }),
    )
}

async fn handle(
    req: Request<Incoming>,
    ctx: Arc<Context>,
    metrics: MetricsRender,
    id: u64,
) -> Result<HttpResponse, std::convert::Infallible> {
    ctx.metrics.http_requests.inc();
    let path = req.uri().path().to_owned();
    let resp = match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") if ctx.is_shutting_down() => json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "shutting down"}),
        ),
        (&Method::GET, "/healthz") => json(StatusCode::OK, serde_json::json!({"status": "ok"})),
        (&Method::GET, "/metrics") => hyper::Response::builder()
            .header("content-type", "text/plain; version=0.0.4")
            .body(Full::new(Bytes::from(metrics())))
            .expect("static response parts"),
        (&Method::POST, p) if p.starts_with("/v1/") => call(req, &p[4..], ctx, id).await,
        (_, p) if p.starts_with("/v1/") || p == "/healthz" || p == "/metrics" => json(
            StatusCode::METHOD_NOT_ALLOWED,
            serde_json::json!({"error": "method not allowed"}),
        ),
        _ => json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "not found"}),
        ),
    };
    Ok(resp)
}

async fn call(req: Request<Incoming>, name: &str, ctx: Arc<Context>, id: u64) -> HttpResponse {
    let Some(service) = ctx.registry.by_name(name).cloned() else {
        return error(
            ErrorCode::UnknownService,
            format!("unknown service {name:?}"),
        );
    };
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return error(ErrorCode::TooLarge, format!("body over {MAX_BODY} bytes"))
        }
        Err(e) => return error(ErrorCode::BadRequest, format!("reading body: {e}")),
    };
    let value: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(ErrorCode::BadRequest, format!("invalid JSON: {e}")),
    };
    let payload = match service.json_to_payload(&value) {
        Ok(p) => p,
        Err(e) => return error(e.code, e.message),
    };
    if payload.len() > ctx.max_payload {
        return error(
            ErrorCode::TooLarge,
            "request payload over the server's limit",
        );
    }
    let mut header = Header::request(service.id(), id, payload.len());
    if let Some(t) = value.get("timeout_us").and_then(|t| t.as_u64()) {
        header.timeout_us = t.min(u32::MAX as u64) as u32;
    }
    let (tx, rx) = oneshot::channel();
    let port = Arc::new(OneShot(Mutex::new(Some(tx))));
    ctx.forward(&header, &payload, Reply { port, token: 0 });
    match rx.await {
        Ok(Response {
            body: ResponseBody::Ok(p),
            ..
        }) => json(StatusCode::OK, service.payload_to_json(&p)),
        Ok(Response {
            body: ResponseBody::Err(e),
            ..
        }) => error(e.code, e.message),
        Err(_) => error(ErrorCode::Internal, "request lost"),
    }
}
