//! The admin listener (`cohort serve --admin ADDR`): `GET /metrics` and `GET /healthz` on an
//! address of their own, loopback unless told otherwise, so that the service ports can face
//! clients without showing them the server's counters. One thread, its own runtime; no keys
//! (whoever reaches the address is the operator).

use crate::context::Context;
use crate::http_reply::MetricsRender;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::watch;

fn respond(status: StatusCode, ctype: &str, body: String) -> hyper::Response<Full<Bytes>> {
    hyper::Response::builder()
        .status(status)
        .header("content-type", ctype)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts")
}

fn handle<B>(
    req: &Request<B>,
    ctx: &Context,
    metrics: &MetricsRender,
) -> hyper::Response<Full<Bytes>> {
    let json = "application/json";
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => respond(StatusCode::OK, "text/plain; version=0.0.4", metrics()),
        (&Method::GET, "/healthz") => {
            let (status, body) = crate::http_reply::health(ctx.is_shutting_down());
            respond(status, json, body.to_string())
        }
        (m, p) => respond(
            StatusCode::NOT_FOUND,
            json,
            serde_json::json!({
                "error": "NOT_FOUND",
                "message": format!("no route for {m} {p} on the admin listener (GET /metrics, GET /healthz)")
            })
            .to_string(),
        ),
    }
}

pub(crate) fn spawn_admin(
    listener: std::net::TcpListener,
    ctx: Arc<Context>,
    metrics: MetricsRender,
    mut halt: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("net-admin".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => return tracing::error!(error = %e, "admin listener"),
                };
                loop {
                    let stream = tokio::select! {
                        a = listener.accept() => match a {
                            Ok((s, _)) => s,
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            }
                        },
                        _ = halt.wait_for(|h| *h) => return,
                    };
                    let (ctx, metrics) = (ctx.clone(), metrics.clone());
                    tokio::spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            let r = handle(&req, &ctx, &metrics);
                            async move { Ok::<_, std::convert::Infallible>(r) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(Duration::from_secs(10))
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            });
        })
}
