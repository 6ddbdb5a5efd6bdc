//! The contract every service implements, and the registry the server looks them up in.

use cohort_proto::ErrorPayload;
use std::collections::HashMap;
use std::sync::Arc;

/// A service: a wire schema, a CPU implementation and a JSON mapping for the HTTP gateway.
/// A service may also bring a batch backend for the GPU engines (`cohort-services`'s catalog);
/// its CPU function is that backend's reference twin.
pub trait Service: Send + Sync {
    fn id(&self) -> u16;
    fn name(&self) -> &'static str;
    /// Runs the request on the calling CPU thread, writing the answer into `out` (cleared by
    /// the caller and reused between requests: no allocation per request for small answers).
    /// Bad payloads give BAD_REQUEST.
    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload>;
    /// `execute_cpu` into a fresh buffer (tests, tools).
    fn call_cpu(&self, payload: &[u8]) -> Result<Vec<u8>, ErrorPayload> {
        let mut out = Vec::new();
        self.execute_cpu(payload, &mut out).map(|()| out)
    }
    /// HTTP gateway: JSON request body -> wire payload.
    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload>;
    /// HTTP gateway: wire response payload -> JSON.
    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value;
    /// HTTP gateway, from the body's bytes: the wire payload and the deadline the body names
    /// (`timeout_us`). The default parses a `serde_json::Value` and maps it with
    /// [`Service::json_to_payload`]; a service with large bodies overrides it to parse a typed
    /// struct that borrows its strings from the body (the same answers, without the tree).
    fn json_request<'a>(&self, body: &'a [u8]) -> Result<JsonRequest<'a>, ErrorPayload> {
        json_request_by_value(self, body)
    }
    /// HTTP gateway: appends the JSON answer for a response payload to `out`. The default
    /// writes [`Service::payload_to_json`]; a service with large answers overrides it to write
    /// straight from the payload.
    fn write_json(&self, payload: &[u8], out: &mut Vec<u8>) {
        serde_json::to_writer(out, &self.payload_to_json(payload))
            .expect("a JSON value serializes into memory");
    }
    /// HTTP gateway: true for a service that serves raw HTTP pages: a request under
    /// `/{name}/...` is handed to it whole (request line, the headers a page needs, body) and
    /// its payload is the raw HTTP response to send back. False (the default): JSON at
    /// `POST /v1/{name}`.
    fn serves_http_pages(&self) -> bool {
        false
    }
    /// The gateway call as the OpenAPI document shows it (`GET /openapi.json`): the JSON
    /// Schemas of the body and of a result, and a body that succeeds. None for a service
    /// that serves pages (documented as pages) or has none written yet.
    fn http_doc(&self) -> Option<HttpDoc> {
        None
    }
    /// The service's tensors for the Open Inference Protocol (`/v2/models/{name}/...`);
    /// None for a service whose requests are not tensors.
    fn tensor_model(&self) -> Option<&dyn crate::tensor::TensorModel> {
        None
    }
    /// How a request that carries several rows (knn: several query vectors) splits into
    /// one-row requests and how their answers join (`rows.rs`); None: every request is one.
    fn row_split(&self) -> Option<&dyn crate::rows::RowSplit> {
        None
    }
}

/// A service's `POST /v1/{name}` call for the OpenAPI document. The schemas use only the
/// keywords `type`, `properties`, `required`, `items`, `minItems`, `maxItems`, `minimum`,
/// `maximum` and `description` (the document's test validates answers with exactly those).
#[derive(Debug, Clone)]
pub struct HttpDoc {
    pub summary: &'static str,
    /// JSON Schema of the request body (`timeout_us` is added for every service).
    pub request: serde_json::Value,
    /// JSON Schema of a 200 answer.
    pub response: serde_json::Value,
    /// A request body this server answers with 200.
    pub example: serde_json::Value,
}

/// The gateway's JSON mapping through a `serde_json::Value`: [`Service::json_request`]'s
/// default, and the way back for a service whose own fast parse declines a body.
pub fn json_request_by_value<'a, S: Service + ?Sized>(
    service: &S,
    body: &'a [u8],
) -> Result<JsonRequest<'a>, ErrorPayload> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        ErrorPayload::new(
            cohort_proto::ErrorCode::BadRequest,
            format!("invalid JSON: {e}"),
        )
    })?;
    Ok(JsonRequest {
        payload: service.json_to_payload(&value)?.into(),
        timeout_us: value.get("timeout_us").and_then(|t| t.as_u64()),
    })
}

/// A JSON request body as the gateway admits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonRequest<'a> {
    /// The wire payload, borrowed from the body where the service could.
    pub payload: std::borrow::Cow<'a, [u8]>,
    /// The request's deadline in microseconds, where the body names one.
    pub timeout_us: Option<u64>,
}

#[derive(Clone, Default)]
pub struct Registry {
    by_id: HashMap<u16, Arc<dyn Service>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a service; a second service with the same id is refused.
    pub fn add(&mut self, s: Arc<dyn Service>) -> Result<(), String> {
        if let Some(prev) = self.by_id.get(&s.id()) {
            return Err(format!(
                "service {:?} given twice (or shares wire id {} with {:?})",
                s.name(),
                s.id(),
                prev.name()
            ));
        }
        self.by_id.insert(s.id(), s);
        Ok(())
    }

    pub fn get(&self, id: u16) -> Option<&Arc<dyn Service>> {
        self.by_id.get(&id)
    }

    pub fn by_name(&self, name: &str) -> Option<&Arc<dyn Service>> {
        self.by_id.values().find(|s| s.name() == name)
    }

    /// Every service, in no particular order.
    pub fn all(&self) -> impl Iterator<Item = &Arc<dyn Service>> {
        self.by_id.values()
    }

    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.by_id.values().map(|s| s.name()).collect();
        v.sort();
        v
    }
}
