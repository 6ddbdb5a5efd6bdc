//! `--data-dir`: the live vector collections (`cohort-collections`) served on the HTTP
//! listener under `/v1/collections`, through the gateway's route hook (`cohort_net::HttpRoutes`),
//! as native frames of service 7 over TCP (search, upsert, delete, get; `frames`), and as
//! Cohort's gRPC service `cohort.collections.v1.Collections` on the `--grpc` listener
//! (`cohort_collections::grpc`).
//! Requests run on the gateway's blocking pool; searches on a GPU (`cohort-collections-gpu`)
//! where `--collections-on` allows one and the machine has it, else on the CPU
//! (docs/collections.md).

use crate::server_config::CollectionsConfig;
use anyhow::{Context as _, Result};
use cohort_collections::{api, frames, schema::limits, AcceleratorFactory, Store};
use cohort_net::{HttpRoutes, RouteAnswer};
use cohort_proto::{ErrorCode, ErrorPayload};
use serde_json::{json, Map, Value};
use std::sync::Arc;

pub struct CollectionRoutes {
    /// Shared with the gRPC service's calls (`grpc_calls`).
    pub store: Arc<Store>,
}

/// Opens the store of `--data-dir` (replaying every collection's log) as gateway routes
/// (`ServerConfig::resolve` checked what it needs of the other settings).
pub fn open(c: Option<&CollectionsConfig>) -> Result<Option<Arc<dyn HttpRoutes>>> {
    let Some(c) = c else {
        return Ok(None);
    };
    let dir = &c.dir;
    let factory = device(c)?;
    let on = if factory.is_some() { "gpu" } else { "cpu" };
    let store = Store::open_with(dir, factory)
        .map_err(|e| anyhow::anyhow!("{}", e.message))
        .with_context(|| format!("--data-dir {}", dir.display()))?;
    tracing::info!(dir = %dir.display(), collections = store.list().len(), searches_on = on, "collections opened");
    Ok(Some(Arc::new(CollectionRoutes {
        store: Arc::new(store),
    })))
}

/// The GPUs the collections' searches run on, per `--collections-on` (auto: the GPUs of
/// `--gpus` when the machine has a CUDA device, else none).
fn device(c: &CollectionsConfig) -> Result<Option<Arc<dyn AcceleratorFactory>>> {
    let want = c.on.as_str();
    if want == "cpu" {
        return Ok(None);
    }
    let devices = match cohort_gpu::probe() {
        Ok(d) if !d.is_empty() => d,
        Ok(_) | Err(_) if want == "auto" => {
            tracing::info!("collections: no CUDA device, searches on the CPU");
            return Ok(None);
        }
        Ok(_) => anyhow::bail!("--collections-on gpu: no CUDA device"),
        Err(e) => anyhow::bail!("--collections-on gpu: {e}"),
    };
    let picked = cohort_gpu::pick_devices(&devices, &c.gpus)
        .map_err(|e| anyhow::anyhow!("--collections-on {want}: {e}"))?;
    let f = cohort_collections_gpu::GpuFactory::open(&picked)
        .map_err(|e| anyhow::anyhow!("collections on the GPU: {e}"))?;
    Ok(Some(Arc::new(f)))
}

impl HttpRoutes for CollectionRoutes {
    fn owns(&self, path: &str) -> bool {
        api::owns(path)
    }

    fn max_body(&self) -> usize {
        limits::MAX_BODY
    }

    fn handle(&self, method: &str, path: &str, body: &[u8]) -> RouteAnswer {
        let a = api::handle(&self.store, method, path, body);
        RouteAnswer {
            status: a.status,
            body: a.body,
            allow: a.allow,
        }
    }

    fn openapi_paths(&self) -> Map<String, Value> {
        openapi()
    }

    fn frame_service(&self) -> Option<u16> {
        Some(frames::SERVICE_ID)
    }

    fn grpc_calls(&self) -> Option<Arc<dyn cohort_collections_grpc::Calls>> {
        Some(self.store.clone())
    }

    fn handle_frame(&self, payload: &[u8], max_answer: usize) -> Result<Vec<u8>, ErrorPayload> {
        api::frame(&self.store, payload, max_answer).map_err(|e| error_frame(&e))
    }
}

/// A collections error as an error frame of the existing codes (docs/protocol.md): those
/// without a code of their own keep their REST name at the start of the message.
fn error_frame(e: &cohort_collections::Error) -> ErrorPayload {
    use cohort_collections::Kind;
    let (code, prefix) = match e.kind {
        Kind::BadRequest => (ErrorCode::BadRequest, ""),
        Kind::NotFound => (ErrorCode::NotFound, ""),
        Kind::TooLarge => (ErrorCode::TooLarge, ""),
        Kind::Overloaded => (ErrorCode::Overloaded, "queue: "),
        Kind::Unavailable => (ErrorCode::Unavailable, ""),
        Kind::Storage => (ErrorCode::Unavailable, "INSUFFICIENT_STORAGE: "),
        Kind::Conflict => (ErrorCode::BadRequest, "CONFLICT: "),
        Kind::Internal => (ErrorCode::Internal, ""),
    };
    ErrorPayload::new(code, format!("{prefix}{}", e.message))
}

fn op(summary: &str, request: Option<Value>, answer: Value, errors: &[(u16, &str)]) -> Value {
    let mut responses = Map::new();
    responses.insert(
        "200".into(),
        json!({"description": "done", "content": {"application/json": {"schema": answer}}}),
    );
    for (code, what) in errors {
        responses.insert(
            code.to_string(),
            json!({"description": what, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}),
        );
    }
    let mut o = json!({"summary": summary, "tags": ["collections"], "responses": responses});
    if let Some(r) = request {
        o["requestBody"] =
            json!({"required": true, "content": {"application/json": {"schema": r}}});
    }
    o
}

/// The collection routes as OpenAPI 3.1 path items (docs/collections.md has the prose).
fn openapi() -> Map<String, Value> {
    let filter = json!({"description": "{\"eq\":[field,value]}, {\"in\":[field,[values]]}, {\"range\":[field,{\"gte\":a,\"lt\":b}]}, {\"all\":[F,...]}, {\"any\":[F,...]}, {\"not\":F}; at most 16 deep", "type": "object"});
    let settings = json!({"type": "object", "required": ["dim"], "properties": {
        "dim": {"type": "integer", "minimum": 1, "maximum": limits::MAX_DIM},
        "metric": {"enum": ["l2", "ip", "cosine"]},
        "element": {"enum": ["f32", "f16", "u8"]},
        "attributes": {"type": "object", "additionalProperties": {"enum": ["integer", "float", "keyword"]}}}});
    let mut described = settings.clone();
    described["properties"]["name"] = json!({"type": "string"});
    described["properties"]["count"] = json!({"type": "integer"});
    let name = json!([{"name": "name", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$"}}]);
    let vector = json!({"type": "array", "items": {"type": "number"}});
    let bad = (
        400,
        "bad input: wrong dimension, NaN, unknown attribute, filter type mismatch, ...",
    );
    let missing = (404, "no such collection");
    let large = (
        413,
        "over a documented limit (points a batch, ids, queries, filter size)",
    );
    let storage = (
        507,
        "the log could not be written (full disk): writes refused, searches go on",
    );
    let mut m = Map::new();
    m.insert("/v1/collections".into(), json!({"get": op("List the collections", None,
        json!({"type": "object", "properties": {"collections": {"type": "array", "items": described}}}), &[])}));
    m.insert("/v1/collections/{name}".into(), json!({
        "parameters": name,
        "put": op("Create a collection", Some(settings), described.clone(), &[bad, (409, "the collection exists"), storage]),
        "get": op("A collection's settings and count", None, described, &[missing]),
        "delete": op("Drop a collection", None, json!({"type": "object", "properties": {"dropped": {"type": "string"}}}), &[missing]),
    }));
    let point = json!({"type": "object", "required": ["id", "vector"], "properties": {
        "id": {"type": "integer", "minimum": 0}, "vector": vector, "attributes": {"type": "object"}}});
    let count = |k: &str| json!({"type": "object", "properties": {k: {"type": "integer"}}});
    for (verb, summary, req, answer, errs) in [
        (
            "upsert",
            "Insert or replace points, a batch applied whole or not at all; answered once durable",
            json!({"type": "object", "required": ["points"], "properties": {"points": {"type": "array", "maxItems": limits::MAX_BATCH, "items": point}}}),
            count("upserted"),
            vec![bad, missing, large, storage],
        ),
        (
            "delete",
            "Delete points by ids or by filter; answered once durable",
            json!({"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"}}, "filter": filter}}),
            count("deleted"),
            vec![bad, missing, large, storage],
        ),
        (
            "get",
            "Points by id (missing ids are left out)",
            json!({"type": "object", "required": ["ids"], "properties": {"ids": {"type": "array", "items": {"type": "integer"}}}}),
            json!({"type": "object", "properties": {"points": {"type": "array", "items": point}}}),
            vec![bad, missing, large],
        ),
        (
            "search",
            "k nearest live points of each query vector, optionally filtered",
            json!({"type": "object", "required": ["vectors"], "properties": {
                "vectors": {"type": "array", "items": vector, "maxItems": limits::MAX_QUERIES},
                "k": {"type": "integer", "minimum": 1, "maximum": limits::MAX_K, "default": 10},
                "nprobe": {"type": "integer", "minimum": 1},
                "filter": filter, "with_attributes": {"type": "boolean", "default": false}}}),
            json!({"type": "object", "properties": {"results": {"type": "array", "items": {"type": "array", "items": {
                "type": "object", "properties": {"id": {"type": "integer"}, "distance": {"type": "number"}, "attributes": {"type": "object"}}}}}}}),
            vec![bad, missing, large],
        ),
    ] {
        m.insert(
            format!("/v1/collections/{{name}}/{verb}"),
            json!({"parameters": name, "post": op(summary, Some(req), answer, &errs)}),
        );
    }
    m
}
