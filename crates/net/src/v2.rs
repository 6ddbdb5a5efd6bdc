//! The Open Inference Protocol (KServe v2) over HTTP, for every service whose requests are
//! tensors (`Service::tensor_model`): health, server and model metadata, a model config for
//! tools that read one, and `infer` with JSON tensors or the binary tensor extension
//! (`Inference-Header-Content-Length`). A request's N rows go to the engine as N requests,
//! so they batch with everything else, and come back as one answer. Errors are the
//! protocol's `{"error": message}`, with Cohort's code name beside it as `code`.

use crate::context::Context;
use crate::http_limits;
use crate::http_reply::{
    authorized, body_refused, json as respond, json_body, too_many, HttpEnv, HttpResponse, OneShot,
};
use crate::quota::Who;
use crate::shard::Shard;
use bytes::Bytes;
use cohort_engine::tensor::{Parameters, Tensor, TensorModel};
use cohort_engine::tensor_json::{parse_request, tensors, to_json, InferRequest};
use cohort_engine::Service;
use cohort_proto::{ErrorCode, ErrorPayload, Header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::sync::Arc;

/// The header of the binary tensor extension: the JSON part's length in bytes.
const JSON_LENGTH: &str = "inference-header-content-length";

fn v2_error(code: ErrorCode, message: impl Into<String>) -> HttpResponse {
    let status = StatusCode::from_u16(code.http_status()).expect("valid status");
    let mut r = respond(
        status,
        json!({ "error": message.into(), "code": code.name() }),
    );
    crate::http_reply::retry_after(&mut r); // a 503 says when to come back
    r
}

/// A readiness answer: 200 while serving, 503 while draining.
fn readiness(ready: bool) -> HttpResponse {
    match ready {
        true => respond(StatusCode::OK, json!({})),
        false => v2_error(ErrorCode::Unavailable, "the server is draining"),
    }
}

/// The model a `/v2/models/{name}[/versions/1]/...` path names, and what follows it.
fn model_path(p: &str) -> Option<(&str, &str)> {
    let rest = p.strip_prefix("/v2/models/")?;
    let (name, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let tail = match tail.strip_prefix("versions/") {
        Some(v) => v.split_once('/').map_or("", |(_, t)| t),
        None => tail,
    };
    Some((name, tail))
}

/// Whether this module answers `path` (any method: a wrong one gets 405 here).
pub(crate) fn is_v2(path: &str) -> bool {
    path == "/v2" || path.starts_with("/v2/")
}

pub(crate) async fn handle(
    req: Request<Incoming>,
    env: &HttpEnv,
    id: u64,
    peer: Option<IpAddr>,
) -> HttpResponse {
    let ctx = &env.ctx;
    let path = req.uri().path().to_string();
    let get = req.method() == Method::GET;
    let ready = !ctx.is_shutting_down();
    match path.as_str() {
        "/v2" if get => {
            return respond(
                StatusCode::OK,
                json!({ "name": "cohort", "version": env!("CARGO_PKG_VERSION"),
                         "extensions": ["binary_tensor_data"] }),
            )
        }
        "/v2/health/live" if get => return respond(StatusCode::OK, json!({})),
        "/v2/health/ready" if get => return readiness(ready),
        _ => {}
    }
    let Some((name, tail)) = model_path(&path) else {
        return v2_error(ErrorCode::NotFound, format!("no route for {path}"));
    };
    let Some(service) = ctx
        .registry
        .by_name(name)
        .filter(|s| s.tensor_model().is_some())
        .cloned()
    else {
        return v2_error(
            ErrorCode::NotFound,
            format!(
                "no model {name:?} (tensor models served: {})",
                tensor_names(env)
            ),
        );
    };
    let model = service.tensor_model().expect("filtered");
    // With keys on, a model's metadata and config need a key that allows it, as a request to
    // it does (docs/protocol.md: every request needs one); readiness is a probe, like /healthz.
    let described = || authorized(ctx, &req, Some(service.id())).err().map(|r| *r);
    match (req.method(), tail) {
        (&Method::GET, "") => {
            described().unwrap_or_else(|| respond(StatusCode::OK, metadata(name, model)))
        }
        (&Method::GET, "ready") => readiness(ready),
        (&Method::GET, "config") => {
            described().unwrap_or_else(|| respond(StatusCode::OK, config(name, model)))
        }
        (&Method::POST, "infer") => infer(req, service.clone(), env, id, peer).await,
        (m, t) => v2_error(
            ErrorCode::NotFound,
            format!("no route for {m} /v2/models/{name}/{t}"),
        ),
    }
}

fn tensor_names(env: &HttpEnv) -> String {
    let r = &env.ctx.registry;
    let names: Vec<_> = r
        .names()
        .into_iter()
        .filter(|n| r.by_name(n).is_some_and(|s| s.tensor_model().is_some()))
        .collect();
    names.join(", ")
}

fn specs(v: Vec<cohort_engine::tensor::TensorSpec>) -> Value {
    v.iter()
        .map(|s| json!({ "name": s.name, "datatype": s.datatypes[0].name(), "shape": s.shape }))
        .collect()
}

/// `GET /v2/models/{name}`: the protocol's model metadata.
pub(crate) fn metadata(name: &str, m: &dyn TensorModel) -> Value {
    json!({ "name": name, "versions": ["1"], "platform": "cohort",
            "inputs": specs(m.inputs()), "outputs": specs(m.outputs()) })
}

/// `GET /v2/models/{name}/config`: what Triton's tools read (no batching dimension of the
/// model's own: every shape is whole, its first dimension the rows).
pub(crate) fn config(name: &str, m: &dyn TensorModel) -> Value {
    let io = |v: Vec<cohort_engine::tensor::TensorSpec>| -> Value {
        v.iter()
            .map(|s| json!({ "name": s.name, "data_type": format!("TYPE_{}", s.datatypes[0].name()), "dims": s.shape }))
            .collect()
    };
    json!({ "name": name, "platform": "cohort", "max_batch_size": 0,
            "input": io(m.inputs()), "output": io(m.outputs()) })
}

fn bad(msg: impl Into<String>) -> ErrorPayload {
    ErrorPayload::new(ErrorCode::BadRequest, msg)
}

fn flag(p: &Parameters, key: &str) -> bool {
    p.get(key).and_then(Value::as_bool).unwrap_or(false)
}

async fn infer(
    req: Request<Incoming>,
    service: Arc<dyn Service>,
    env: &HttpEnv,
    id: u64,
    peer: Option<IpAddr>,
) -> HttpResponse {
    let ctx = &env.ctx;
    let sid = service.id();
    let key = match authorized(ctx, &req, Some(sid)) {
        Ok(key) => key,
        Err(r) => return *r,
    };
    // Refused before its body is read while this io thread is behind (`crate::behind`).
    if let Some(e) = ctx.behind(&env.shard, sid) {
        return v2_error(e.code, e.message);
    }
    let json_len = req
        .headers()
        .get(JSON_LENGTH)
        .map(|v| v.to_str().ok().and_then(|s| s.parse::<usize>().ok()));
    let read = http_limits::read_body(
        req.into_body(),
        crate::http_reply::MAX_BODY,
        crate::limits::spread(env.limits.read_timeout, id),
        &env.budget,
    );
    let (body, _held) = match read.await {
        Ok(b) => b,
        Err(e) => return body_refused(ctx, sid, e),
    };
    let refuse = |e: ErrorPayload| v2_error(e.code, refused(ctx, sid, e).message);
    let split = match json_len {
        None => body.len(),
        Some(Some(n)) if n <= body.len() => n,
        Some(_) => {
            return refuse(bad(format!(
                "{JSON_LENGTH} is not a length within the body"
            )))
        }
    };
    let (head, binary) = body.split_at(split);
    let r = match parse_request(head) {
        Ok(r) => r,
        Err(e) => return refuse(e),
    };
    let inputs = match tensors(&r, binary) {
        Ok(t) => t,
        Err(e) => return refuse(e),
    };
    let timeout = r.parameters.get("timeout_us").and_then(Value::as_u64);
    let who = Who::of(key, peer);
    let ask = Ask {
        who,
        id,
        timeout_us: timeout,
        admitted: true,
    };
    match run(ctx, &env.shard, &*service, &inputs, &r.parameters, ask).await {
        Ok(outputs) => respond_outputs(&r, service.name(), outputs),
        Err(Failed::OverQuota(e)) => too_many(e),
        Err(Failed::Error(e)) => v2_error(e.code, e.message),
    }
}

/// A refusal before the engine saw the request, counted as an answer with its code
/// (`cohort_requests_total`), as every front door counts its own.
pub(crate) fn refused(ctx: &Context, sid: u16, e: ErrorPayload) -> ErrorPayload {
    ctx.metrics
        .answered(sid, e.code.label(), std::time::Duration::ZERO);
    e
}

/// Who asks, under which id, with which deadline (microseconds; None: the server's default).
pub(crate) struct Ask {
    pub who: Option<Who>,
    pub id: u64,
    pub timeout_us: Option<u64>,
    /// Already admitted past the io thread's backlog by its front door
    /// (`Context::submit_admitted`); else each row is asked (`Context::submit`).
    pub admitted: bool,
}

/// Why a tensor request has no outputs; already counted in the metrics either way.
pub(crate) enum Failed {
    /// The client is over its quota (HTTP answers 429 with Retry-After).
    OverQuota(ErrorPayload),
    /// Refused (a bad shape, a row too large) or answered with an error by the engine.
    Error(ErrorPayload),
}

/// Runs a tensor request, whichever front door read it (HTTP or gRPC): its N rows go to the
/// engine as N requests, so they batch with everything else; the first error among their
/// answers is the request's, else the rows' answers join into the output tensors.
pub(crate) async fn run(
    ctx: &Context,
    shard: &Shard,
    service: &dyn Service,
    inputs: &[Tensor],
    params: &Parameters,
    ask: Ask,
) -> Result<Vec<Tensor>, Failed> {
    let sid = service.id();
    let model = service
        .tensor_model()
        .ok_or_else(|| Failed::Error(bad("not a tensor model")))?;
    let refuse = |e| Failed::Error(refused(ctx, sid, e));
    let rows = model.rows(inputs, params).map_err(refuse)?;
    if let Some(big) = rows.iter().find(|p| p.len() > ctx.max_payload) {
        let limit = ctx.max_payload;
        let msg = format!("a row of {} bytes over the limit of {limit}", big.len());
        return Err(refuse(ErrorPayload::new(ErrorCode::TooLarge, msg)));
    }
    let _ticket = ctx
        .quotas
        .ticket(ask.who)
        .map_err(|over| Failed::OverQuota(ctx.over_quota(sid, &over)))?;
    let class = ctx.quotas.class_of(ask.who);
    let mut waiting = Vec::with_capacity(rows.len());
    for payload in &rows {
        let mut header = Header::request(sid, ask.id, payload.len());
        if let Some(t) = ask.timeout_us {
            header.timeout_us = t.min(u32::MAX as u64) as u32;
        }
        let (port, rx) = OneShot::new(None, class);
        match ask.admitted {
            true => ctx.submit_admitted(shard, &header, payload, port),
            false => ctx.submit(shard, &header, payload, port),
        }
        waiting.push(rx);
    }
    drop(rows);
    let mut answers = Vec::with_capacity(waiting.len());
    let mut failed = None;
    for rx in waiting {
        match rx.await {
            Ok(Ok(b)) => answers.push(b.to_vec()),
            Ok(Err(e)) => failed = failed.or(Some(e)),
            Err(_) => {
                failed = failed.or(Some(ErrorPayload::new(ErrorCode::Internal, "request lost")))
            }
        }
    }
    if let Some(e) = failed {
        return Err(Failed::Error(e));
    }
    model.join(&answers, params).map_err(Failed::Error)
}

/// The answer: the requested outputs (all when none are named), each as JSON data or binary.
fn respond_outputs(r: &InferRequest, model: &str, outputs: Vec<Tensor>) -> HttpResponse {
    let all_binary = flag(&r.parameters, "binary_data_output");
    let chosen: Vec<(&Tensor, bool)> = match &r.outputs {
        None => outputs.iter().map(|t| (t, all_binary)).collect(),
        Some(wanted) => {
            let mut v = Vec::with_capacity(wanted.len());
            for w in wanted {
                let Some(t) = outputs.iter().find(|t| t.name == w.name) else {
                    let names: Vec<_> = outputs.iter().map(|t| t.name.as_str()).collect();
                    return v2_error(
                        ErrorCode::BadRequest,
                        format!("no output {:?} (outputs: {})", w.name, names.join(", ")),
                    );
                };
                let binary = w
                    .parameters
                    .get("binary_data")
                    .and_then(Value::as_bool)
                    .unwrap_or(all_binary);
                v.push((t, binary));
            }
            v
        }
    };
    let mut blobs = Vec::new();
    let listed: Vec<Value> = chosen
        .iter()
        .map(|(t, binary)| {
            let mut o = json!({ "name": t.name, "datatype": t.datatype.name(), "shape": t.shape });
            if *binary {
                o["parameters"] = json!({ "binary_data_size": t.data.len() });
                blobs.extend_from_slice(&t.data);
            } else {
                o["data"] = to_json(t);
            }
            o
        })
        .collect();
    let mut head = json!({ "model_name": model, "model_version": "1", "outputs": listed });
    if let Some(id) = &r.id {
        head["id"] = json!(id);
    }
    let head = head.to_string();
    if blobs.is_empty() {
        return json_body(StatusCode::OK, Bytes::from(head));
    }
    let json_len = head.len();
    let mut body = head.into_bytes();
    body.extend_from_slice(&blobs);
    hyper::Response::builder()
        .header("content-type", "application/octet-stream")
        .header(JSON_LENGTH, json_len)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts")
}
