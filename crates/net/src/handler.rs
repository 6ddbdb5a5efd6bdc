//! What a handler of another crate implements to take routes of the gateway whole (the
//! collections of `--data-dir`, `cohort-collections`): `routes.rs` serves them, and
//! their frames and gRPC calls where the handler answers those too.

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
    /// The calls of Cohort's gRPC service for collections (`cohort.collections.v1`) this
    /// handler answers on the `--grpc` listener (`crate::collections_grpc`), None for a
    /// handler without them (calls for it are then UNIMPLEMENTED).
    fn grpc_calls(&self) -> Option<std::sync::Arc<dyn cohort_collections_grpc::Calls>> {
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
