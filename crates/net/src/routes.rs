//! Routes the gateway hands whole to a handler of another crate (the collections of
//! `--data-dir`, `cohort-collections`): the gateway reads the body (bounded, with its read
//! timeout and buffer budget) and checks the key, the handler answers a status and a JSON
//! body. The handler may block (a write waits for an fsync): it runs on the shard runtime's
//! blocking pool, never on the io thread.

use crate::http_reply::{body_refused, http_error, json_body, HttpEnv, HttpResponse};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use std::sync::Arc;

/// A handler's answer: an HTTP status and a JSON body (errors as the gateway's
/// `{"error": CODE, "message": ...}`), and for a 405 the methods allowed.
pub struct RouteAnswer {
    pub status: u16,
    pub body: Vec<u8>,
    pub allow: Option<&'static str>,
}

pub trait HttpRoutes: Send + Sync + 'static {
    /// Whether `path` is this handler's.
    fn owns(&self, path: &str) -> bool;
    /// Largest body read for it.
    fn max_body(&self) -> usize;
    /// Answers one request (may block).
    fn handle(&self, method: &str, path: &str, body: &[u8]) -> RouteAnswer;
    /// Its entries of `/openapi.json`'s `paths`.
    fn openapi_paths(&self) -> serde_json::Map<String, serde_json::Value>;
    /// The native frame service id whose requests this handler answers too (over TCP; the
    /// collections' `7`), None for an HTTP-only handler. Its frames skip the engines: each
    /// runs [`HttpRoutes::handle_frame`] on the shard runtime's blocking pool and is answered
    /// through its connection as an engine's answer is (one answer each, in any order).
    fn frame_service(&self) -> Option<u16> {
        None
    }
    /// Answers one frame's payload (may block): the answer's payload or the error frame's.
    /// `max_answer` is the largest payload the answer frame may carry.
    fn handle_frame(
        &self,
        payload: &[u8],
        max_answer: usize,
    ) -> Result<Vec<u8>, cohort_proto::ErrorPayload> {
        let _ = (payload, max_answer);
        Err(cohort_proto::ErrorPayload::new(
            cohort_proto::ErrorCode::UnknownService,
            "this handler answers no frames",
        ))
    }
}

pub(crate) async fn serve(
    req: Request<Incoming>,
    routes: Arc<dyn HttpRoutes>,
    env: &HttpEnv,
    id: u64,
) -> HttpResponse {
    let ctx = &env.ctx;
    // Any valid key may call these routes (they are no engine service with an id to allow).
    if let Some(refused) = crate::http_reply::unauthorized(ctx, &req, None) {
        return refused;
    }
    let (method, path) = (req.method().to_string(), req.uri().path().to_string());
    let read = crate::http_limits::read_body(
        req.into_body(),
        routes.max_body(),
        crate::limits::spread(env.limits.read_timeout, id),
        &env.budget,
    );
    let (body, held) = match read.await {
        Ok(b) => b,
        Err(e) => return body_refused(ctx, u16::MAX, e),
    };
    let answer = tokio::task::spawn_blocking(move || routes.handle(&method, &path, &body)).await;
    drop(held);
    let a = match answer {
        Ok(a) => a,
        Err(e) => {
            return http_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL",
                format!("the handler failed: {e}"),
            )
        }
    };
    let status = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = json_body(status, Bytes::from(a.body));
    if let Some(allow) = a.allow {
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static(allow),
        );
    }
    crate::http_reply::retry_after(&mut r);
    r
}
