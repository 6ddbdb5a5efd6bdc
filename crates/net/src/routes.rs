//! Routes the gateway hands whole to a handler of another crate (the collections of
//! `--data-dir`, `cohort-collections`): the gateway reads the body (bounded, with its read
//! timeout and buffer budget) and checks the key, the handler answers a status and a JSON
//! body. The handler may block (a write waits for an fsync): it runs on the shard runtime's
//! blocking pool, never on the io thread. The handler's trait is `handler.rs`'s.

use crate::handler::HttpRoutes;
use crate::http_reply::{body_refused, http_error, json_body, HttpEnv, HttpResponse};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use std::sync::Arc;

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
