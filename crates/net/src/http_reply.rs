//! What every HTTP handler answers with and checks before it submits (the `/v1` gateway in
//! `http`, the Open Inference Protocol in `v2`, page services in `http_pages`, mounted routes
//! in `routes`): the connection's environment, JSON and error responses, the one-shot reply
//! port an answer comes back through, and the refusals for keys, quotas and bodies. The
//! handlers depend on this module and `http` on the handlers, never the other way.

use crate::context::Context;
use crate::http_limits::BodyError;
use crate::limits::{Budget, Connections, Limits};
use crate::shard::Shard;
use bytes::Bytes;
use cohort_engine::{Answer, ReplyPort, Response, ResponseBody, Service};
use cohort_proto::{ErrorCode, ErrorPayload};
use http_body_util::Full;
use hyper::{Request, StatusCode};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

pub(crate) type HttpResponse = hyper::Response<Full<Bytes>>;

/// Renders `/metrics` (the server assembles it from every layer's counters).
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// Largest JSON body accepted.
pub(crate) const MAX_BODY: usize = 4 << 20;

/// What every HTTP connection of a shard shares.
pub(crate) struct HttpEnv {
    pub ctx: Arc<Context>,
    pub shard: Arc<Shard>,
    pub metrics: MetricsRender,
    pub limits: Limits,
    pub budget: Arc<Budget>,
    pub conns: Arc<Connections>,
    /// `/metrics` lives on the admin listener instead (`--admin`).
    pub admin_only_metrics: bool,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// `GET /openapi.json`'s body, built once at start (`crate::openapi`).
    pub openapi: Bytes,
}

/// A response after which the connection is closed (its framing can no longer be trusted).
fn closing(mut r: HttpResponse) -> HttpResponse {
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

/// What a waiting handler gets: the body to send, already encoded, or the error.
pub(crate) type Reply = Result<Bytes, ErrorPayload>;

/// The reply port of one HTTP request: the handler waits on the receiver. The answer is
/// encoded where the ingress reads it, straight from its ring slot: as the service's JSON
/// (`json`), or copied as it is (a page service's raw HTTP).
pub(crate) struct OneShot {
    tx: Mutex<Option<oneshot::Sender<Reply>>>,
    json: Option<Arc<dyn Service>>,
    /// The asking client's fairness class (`Quotas::class_of`).
    class: u16,
}

impl OneShot {
    pub(crate) fn new(
        json: Option<Arc<dyn Service>>,
        class: u16,
    ) -> (Arc<OneShot>, oneshot::Receiver<Reply>) {
        let (tx, rx) = oneshot::channel();
        let port = OneShot {
            tx: Mutex::new(Some(tx)),
            json,
            class,
        };
        (Arc::new(port), rx)
    }
}

impl ReplyPort for OneShot {
    fn fairness_class(&self) -> u16 {
        self.class
    }

    fn deliver(&self, r: Response) {
        match r.body {
            ResponseBody::Ok(p) => self.deliver_answer(r.request_id, r.service, Ok(&p)),
            ResponseBody::Err(e) => self.deliver_answer(r.request_id, r.service, Err(e)),
        }
    }

    fn deliver_answer(&self, _request_id: u64, _service: u16, answer: Answer<'_>) {
        let reply = answer.map(|p| match &self.json {
            Some(service) => {
                let mut out = Vec::with_capacity(p.len() + 64);
                service.write_json(p, &mut out);
                Bytes::from(out)
            }
            None => Bytes::copy_from_slice(p),
        });
        self.reply(reply);
    }

    /// A page that crossed the ring in its own buffer is sent from that buffer.
    fn deliver_shared(&self, request_id: u64, service: u16, body: &Bytes) {
        match self.json {
            Some(_) => self.deliver_answer(request_id, service, Ok(body)),
            None => self.reply(Ok(body.clone())),
        }
    }
}

impl OneShot {
    fn reply(&self, reply: Reply) {
        let Some(tx) = self.tx.lock().expect("oneshot lock").take() else {
            return;
        };
        let _ = tx.send(reply); // the handler gone = the connection closed; nobody to tell
    }
}

/// A JSON body already encoded.
pub(crate) fn json_body(status: StatusCode, body: Bytes) -> HttpResponse {
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("static response parts")
}

pub(crate) fn json(status: StatusCode, v: serde_json::Value) -> HttpResponse {
    json_body(status, Bytes::from(v.to_string()))
}

pub(crate) fn error(code: ErrorCode, msg: impl Into<String>) -> HttpResponse {
    let status = StatusCode::from_u16(code.http_status()).expect("valid status");
    let mut r = json(
        status,
        serde_json::json!({ "error": code.name(), "message": msg.into() }),
    );
    retry_after(&mut r);
    r
}

/// A 503 (overloaded, shutting down) tells the client when to come back: RFC 9110 15.6.4.
pub(crate) fn retry_after<B>(r: &mut hyper::Response<B>) {
    if r.status() == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("1"),
        );
    }
}

/// An error of the gateway itself (no wire code): the same body shape.
pub(crate) fn http_error(status: StatusCode, name: &str, msg: String) -> HttpResponse {
    json(status, serde_json::json!({ "error": name, "message": msg }))
}

/// A rejected /v1 call, counted in the per-outcome request metrics like any other answer.
pub(crate) fn rejected(
    ctx: &Context,
    service: u16,
    code: ErrorCode,
    msg: impl Into<String>,
) -> HttpResponse {
    ctx.metrics.answered(service, code.label(), Duration::ZERO);
    error(code, msg)
}

/// The answer to a body that could not be read (counted like any other answer).
pub(crate) fn body_refused(ctx: &Context, sid: u16, e: BodyError) -> HttpResponse {
    match e {
        BodyError::TooLarge(max) => rejected(
            ctx,
            sid,
            ErrorCode::TooLarge,
            format!("body over the limit of {max} bytes"),
        ),
        BodyError::Timeout(t) => {
            ctx.metrics.timed_out_connection("http_body");
            ctx.metrics
                .answered(sid, ErrorCode::Timeout.label(), Duration::ZERO);
            closing(http_error(
                StatusCode::REQUEST_TIMEOUT,
                "REQUEST_TIMEOUT",
                format!("the body did not arrive within {} ms", t.as_millis()),
            ))
        }
        BodyError::Broken(msg) => rejected(
            ctx,
            sid,
            ErrorCode::BadRequest,
            format!("reading body: {msg}"),
        ),
    }
}

/// With API keys on: the refusal for a request whose bearer key does not allow `service`
/// (None: any valid key, for `/metrics`), 401 with `WWW-Authenticate` or 403.
pub(crate) fn unauthorized<B>(
    ctx: &Context,
    req: &Request<B>,
    service: Option<u16>,
) -> Option<HttpResponse> {
    authorized(ctx, req, service).err().map(|r| *r)
}

/// With API keys on: the request's key id if its bearer key allows `service`, else the
/// refusal (`unauthorized`). Without keys: Ok(None).
pub(crate) fn authorized<B>(
    ctx: &Context,
    req: &Request<B>,
    service: Option<u16>,
) -> Result<Option<[u8; cohort_proto::KEY_ID_LEN]>, Box<HttpResponse>> {
    let Some(auth) = ctx.auth.as_ref() else {
        return Ok(None);
    };
    let e = match auth.bearer(
        req.headers()
            .get(hyper::header::AUTHORIZATION)
            .map(|v| v.as_bytes()),
        service,
    ) {
        Ok(key) => return Ok(Some(key)),
        Err(e) => e,
    };
    if let Some(sid) = service {
        ctx.metrics.answered(sid, e.code.label(), Duration::ZERO);
    }
    let mut r = error(e.code, e.message);
    if e.code == ErrorCode::Unauthorized {
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
    }
    Err(Box::new(r))
}

/// A client over its quota: 429 (RFC 6585) with the OVERLOADED body, and when to come back.
pub(crate) fn over_quota(ctx: &Context, sid: u16, over: &crate::quota::Over) -> HttpResponse {
    too_many(ctx.over_quota(sid, over))
}

/// 429 with `e` (an over-quota refusal already counted) and when to come back.
pub(crate) fn too_many(e: ErrorPayload) -> HttpResponse {
    let mut r = error(e.code, e.message);
    *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    r.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    r
}

/// `GET /healthz`'s answer, on the HTTP port and the admin listener alike: 200
/// `{"status":"ok"}`, or 503 while the server drains.
pub(crate) fn health(shutting_down: bool) -> (StatusCode, serde_json::Value) {
    if shutting_down {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"status": "shutting down", "error": "UNAVAILABLE", "message": "server is draining"}),
        )
    } else {
        (StatusCode::OK, serde_json::json!({"status": "ok"}))
    }
}
