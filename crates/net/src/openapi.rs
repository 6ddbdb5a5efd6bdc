//! `GET /openapi.json`: the OpenAPI 3.1 document of this server's HTTP surface, built once at
//! start from what it serves - the fixed routes (`/healthz`, `/metrics`, this document), each
//! JSON service's `POST /v1/{name}` from the service's own [`cohort_engine::HttpDoc`], and each
//! page service's `/{name}/...`. A service added to the catalog documents itself; the
//! end-to-end test sends every documented example and checks the answers against the
//! documented schemas.

use cohort_engine::Registry;
use cohort_proto::ErrorCode;
use serde_json::{json, Map, Value};

/// The error body of every error answer, the gateway's own included.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "error": { "type": "string", "description": "the code: BAD_REQUEST, OVERLOADED, ..." },
            "message": { "type": "string" }
        },
        "required": ["error", "message"]
    })
}

/// An error answer whose body is the component schema `body` (`Error` or `V2Error`).
fn error_body(body: &str, what: &str) -> Value {
    let schema = format!("#/components/schemas/{body}");
    json!({ "description": what, "content": { "application/json": { "schema": { "$ref": schema } } } })
}

fn error_response(what: &str) -> Value {
    error_body("Error", what)
}

/// The error answers a gateway call may get, by status.
fn call_errors(auth: bool) -> Map<String, Value> {
    let mut m = Map::new();
    for (code, what) in [
        (ErrorCode::BadRequest, "the body is not this service's request (the message says why), or its framing is refused"),
        (ErrorCode::TooLarge, "the body is over the server's limit"),
        (ErrorCode::Overloaded, "the queue is full, or the server is draining (Retry-After: 1)"),
        (ErrorCode::Timeout, "the request's deadline (timeout_us, or the server's) passed before it ran"),
        (ErrorCode::Internal, "the engine failed the request"),
    ] {
        m.insert(code.http_status().to_string(), error_response(what));
    }
    if auth {
        m.insert(
            ErrorCode::Unauthorized.http_status().to_string(),
            error_response("no valid bearer key"),
        );
        m.insert(
            ErrorCode::Forbidden.http_status().to_string(),
            error_response("the key may not call this service"),
        );
    }
    m
}

/// The request schema of a service with the deadline every gateway body may carry.
fn with_deadline(mut request: Value) -> Value {
    if let Some(p) = request.get_mut("properties").and_then(Value::as_object_mut) {
        p.insert(
            "timeout_us".into(),
            json!({ "type": "integer", "minimum": 0, "description": "this request's deadline in microseconds (default: the server's)" }),
        );
    }
    request
}

/// The document for `registry` as served; `auth` when the server asks for keys, `metrics_here`
/// when `/metrics` is on this listener (not only on `--admin`).
pub(crate) fn document(
    registry: &Registry,
    auth: bool,
    metrics_here: bool,
    routes: Option<&dyn crate::handler::HttpRoutes>,
) -> Value {
    let mut paths = Map::new();
    paths.insert(
        "/healthz".into(),
        json!({ "get": {
            "summary": "Liveness and readiness: 200 while serving, 503 while draining",
            "responses": {
                "200": { "description": "serving", "content": { "application/json": {
                    "schema": { "type": "object", "properties": { "status": { "type": "string" } }, "required": ["status"] },
                    "example": { "status": "ok" } } } },
                "503": error_response("draining after SIGTERM (Retry-After: 1)")
            }
        }}),
    );
    if metrics_here {
        paths.insert(
            "/metrics".into(),
            json!({ "get": {
                "summary": "Prometheus metrics (docs/metrics.md)",
                "responses": { "200": { "description": "the text exposition format",
                    "content": { "text/plain": { "schema": { "type": "string" } } } } }
            }}),
        );
    }
    let mut this = json!({ "get": {
        "summary": "This document",
        "responses": { "200": { "description": "OpenAPI 3.1", "content": { "application/json": { "schema": { "type": "object" } } } } }
    }});
    if auth {
        // Any valid key (it names what is served), as /metrics on this port.
        this["get"]["security"] = json!([{ "bearer": [] }]);
        this["get"]["responses"]["401"] = error_response("no valid key");
    }
    paths.insert("/openapi.json".into(), this);
    for name in registry.names() {
        let s = registry.by_name(name).expect("a listed name");
        if s.serves_http_pages() {
            let html = |what: &str| json!({ "description": what, "content": { "text/html": { "schema": { "type": "string" } } } });
            let responses = json!({
                "200": html("the page"),
                "400": html("a required form field is missing or malformed"),
                "401": html("no session: the log-in page (sessions are cookies set by the login page)"),
                "404": html("no such page")
            });
            paths.insert(
                format!("/{name}/{{page}}"),
                json!({ "parameters": [{ "name": "page", "in": "path", "required": true, "schema": { "type": "string" } }],
                    "get": { "summary": format!("A page of {name} (HTML; the page's fields in the query string)"),
                        "responses": responses },
                    "post": { "summary": format!("A form posted to {name} (HTML)"),
                        "requestBody": { "content": { "application/x-www-form-urlencoded": { "schema": { "type": "string" } } } },
                        "responses": responses } }),
            );
            continue;
        }
        let mut op = Map::new();
        let mut responses = call_errors(auth);
        match s.http_doc() {
            Some(d) => {
                op.insert("summary".into(), json!(d.summary));
                op.insert(
                    "requestBody".into(),
                    json!({ "required": true, "content": { "application/json": {
                        "schema": with_deadline(d.request), "example": d.example } } }),
                );
                responses.insert(
                    "200".into(),
                    json!({ "description": "the result", "content": { "application/json": { "schema": d.response } } }),
                );
            }
            None => {
                op.insert(
                    "summary".into(),
                    json!(format!("{name} (its body and answer are not described)")),
                );
                responses.insert("200".into(), json!({ "description": "the result", "content": { "application/json": { "schema": { "type": "object" } } } }));
            }
        }
        op.insert("responses".into(), Value::Object(responses));
        if auth {
            op.insert("security".into(), json!([{ "bearer": [] }]));
        }
        paths.insert(format!("/v1/{name}"), json!({ "post": op }));
    }
    v2_paths(registry, auth, &mut paths);
    if let Some(r) = routes {
        paths.extend(r.openapi_paths());
    }
    let mut components =
        json!({ "schemas": { "Error": error_schema(), "V2Error": v2_error_schema() } });
    if auth {
        components["securitySchemes"] = json!({ "bearer": { "type": "http", "scheme": "bearer",
            "description": "an API key's secret (--auth-keys); send it over TLS" } });
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Cohort",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP side of a Cohort server: a JSON gateway to each service (the same requests as the UDP and TCP frames, docs/protocol.md), page services, health and metrics. Every error answer has the Error body."
        },
        "paths": paths,
        "components": components
    })
}

/// The Open Inference Protocol's error body (`crate::v2`).
fn v2_error_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "error": { "type": "string", "description": "the message" },
            "code": { "type": "string", "description": "Cohort's code: BAD_REQUEST, ..." }
        },
        "required": ["error"]
    })
}

fn v2_error_response(what: &str) -> Value {
    error_body("V2Error", what)
}

fn json_ok(what: &str, schema: Value) -> Value {
    json!({ "200": { "description": what, "content": { "application/json": { "schema": schema } } } })
}

/// A request body a tensor model answers: every input one row (see below for the values).
fn v2_example(m: &dyn cohort_engine::tensor::TensorModel) -> Value {
    use cohort_engine::tensor::DataType;
    let inputs: Vec<Value> = m
        .inputs()
        .iter()
        .map(|s| {
            let shape: Vec<usize> = s.shape.iter().map(|&d| if d < 0 { 1 } else { d as usize }).collect();
            let n: usize = shape.iter().product();
            // Ids (facever's person) start at 1; pixels and vectors may be 0.
            let data = match s.datatypes[0] {
                DataType::Bytes => json!(vec!["x"; n]),
                DataType::Bool => json!(vec![false; n]),
                DataType::Int32 | DataType::Int64 => json!(vec![1; n]),
                _ => json!(vec![0; n]),
            };
            json!({ "name": s.name, "datatype": s.datatypes[0].name(), "shape": shape, "data": data })
        })
        .collect();
    json!({ "inputs": inputs })
}

/// `/v2/...`: health, server metadata, and per tensor model its metadata, readiness, config
/// and `infer`.
fn v2_paths(registry: &Registry, auth: bool, paths: &mut Map<String, Value>) {
    let object = json!({ "type": "object" });
    paths.insert(
        "/v2".into(),
        json!({ "get": { "summary": "Open Inference Protocol: server metadata",
        "responses": json_ok("name, version, extensions", json!({ "type": "object",
            "properties": { "name": { "type": "string" }, "version": { "type": "string" },
                            "extensions": { "type": "array", "items": { "type": "string" } } },
            "required": ["name", "version", "extensions"] })) } }),
    );
    paths.insert(
        "/v2/health/live".into(),
        json!({ "get": { "summary": "Open Inference Protocol: live",
        "responses": json_ok("live", object.clone()) } }),
    );
    let mut ready = json_ok("ready", object.clone());
    ready["503"] = v2_error_response("draining after SIGTERM");
    paths.insert(
        "/v2/health/ready".into(),
        json!({ "get": { "summary": "Open Inference Protocol: ready (503 while draining)",
        "responses": ready } }),
    );
    let tensor = json!({ "type": "object", "properties": {
        "name": { "type": "string" }, "datatype": { "type": "string" },
        "shape": { "type": "array", "items": { "type": "integer" } } }, "required": ["name", "datatype", "shape"] });
    // With keys on, a model's metadata and config need a key that allows the model (refused
    // with the gateway's Error body, as an inference call is).
    let keyed = |mut op: Value| {
        if auth {
            op["get"]["security"] = json!([{ "bearer": [] }]);
            op["get"]["responses"]["401"] = error_response("no valid bearer key");
            op["get"]["responses"]["403"] = error_response("the key may not use this model");
        }
        op
    };
    for name in registry.names() {
        let s = registry.by_name(name).expect("a listed name");
        let Some(m) = s.tensor_model() else { continue };
        let base = format!("/v2/models/{name}");
        paths.insert(base.clone(), keyed(json!({ "get": { "summary": format!("{name}: model metadata (its tensors)"),
            "responses": json_ok("metadata", json!({ "type": "object", "properties": {
                "name": { "type": "string" }, "versions": { "type": "array", "items": { "type": "string" } },
                "platform": { "type": "string" },
                "inputs": { "type": "array", "items": tensor }, "outputs": { "type": "array", "items": tensor } },
                "required": ["name", "versions", "platform", "inputs", "outputs"] })) } })));
        let mut ready = json_ok("ready", object.clone());
        ready["503"] = v2_error_response("draining after SIGTERM");
        paths.insert(
            format!("{base}/ready"),
            json!({ "get": { "summary": format!("{name}: ready"), "responses": ready } }),
        );
        paths.insert(
            format!("{base}/config"),
            keyed(
                json!({ "get": { "summary": format!("{name}: a model config for Triton's tools"),
            "responses": json_ok("config", json!({ "type": "object", "properties": {
                "name": { "type": "string" }, "max_batch_size": { "type": "integer" },
                "input": { "type": "array" }, "output": { "type": "array" } },
                "required": ["name", "max_batch_size", "input", "output"] })) } }),
            ),
        );
        let mut responses = json_ok(
            "the outputs (with `Inference-Header-Content-Length` and binary data when asked for)",
            json!({ "type": "object", "properties": {
                "model_name": { "type": "string" }, "model_version": { "type": "string" }, "id": { "type": "string" },
                "outputs": { "type": "array", "items": tensor } },
                "required": ["model_name", "outputs"] }),
        );
        for (code, what) in [
            (
                ErrorCode::BadRequest,
                "not an inference request of this model (the message says why)",
            ),
            (ErrorCode::TooLarge, "a row over the server's limit"),
            (
                ErrorCode::Overloaded,
                "the queue is full, or the server is draining",
            ),
            (
                ErrorCode::Timeout,
                "a row's deadline (parameters.timeout_us, or the server's) passed",
            ),
            (ErrorCode::Internal, "the engine failed a row"),
        ] {
            responses[code.http_status().to_string()] = v2_error_response(what);
        }
        let mut op = json!({
            "summary": format!("{name}: inference; each row of the inputs' first dimension is one request to the engine"),
            "description": "JSON tensors, or the binary tensor extension: the JSON part's length in Inference-Header-Content-Length, each binary input's bytes after it in input order (parameters.binary_data_size).",
            "requestBody": { "required": true, "content": { "application/json": {
                "schema": { "type": "object", "properties": {
                    "id": { "type": "string" },
                    "parameters": { "type": "object" },
                    "inputs": { "type": "array", "items": tensor },
                    "outputs": { "type": "array", "items": { "type": "object" } } },
                    "required": ["inputs"] },
                "example": v2_example(m) } } },
            "responses": responses
        });
        if auth {
            op["security"] = json!([{ "bearer": [] }]);
        }
        paths.insert(format!("{base}/infer"), json!({ "post": op }));
    }
}
