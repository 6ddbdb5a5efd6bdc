//! A request in flight and the promise that it is answered exactly once.

use crate::metrics::Metrics;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::sync::Arc;
use std::time::Instant;

/// What comes back for a request: a service result or an error frame.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseBody {
    Ok(Vec<u8>),
    Err(ErrorPayload),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub request_id: u64,
    pub service: u16,
    pub body: ResponseBody,
}

/// Where answers go: an io thread's egress queue (UDP), a connection's writer (TCP), a waiting
/// HTTP handler. Implementations must not block: engines call this from their hot loops.
pub trait ReplyPort: Send + Sync {
    fn deliver(&self, token: u32, response: Response);
}

/// The port plus the client-table token that tells the port which client this is.
pub struct Reply {
    pub port: Arc<dyn ReplyPort>,
    pub token: u32,
}

/// A decoded request on its way through an engine. Dropping it unanswered answers
/// UNAVAILABLE, so no path (a panic in a worker, an engine shut down with work queued) can
/// leave a client without an answer.
pub struct Request {
    pub service: u16,
    pub request_id: u64,
    pub payload: Vec<u8>,
    pub arrived: Instant,
    pub deadline: Instant,
    reply: Option<Reply>,
    metrics: Option<Arc<Metrics>>,
}

impl Request {
    pub fn new(
        service: u16,
        request_id: u64,
        payload: Vec<u8>,
        arrived: Instant,
        deadline: Instant,
        reply: Reply,
    ) -> Request {
        Request {
            service,
            request_id,
            payload,
            arrived,
            deadline,
            reply: Some(reply),
            metrics: None,
        }
    }

    /// Counts this request's answer (outcome and duration) in `m`.
    pub fn with_metrics(mut self, m: Arc<Metrics>) -> Request {
        self.metrics = Some(m);
        self
    }

    pub fn respond(mut self, body: ResponseBody) {
        self.send(body);
    }

    pub fn respond_error(self, code: ErrorCode, message: impl Into<String>) {
        self.respond(ResponseBody::Err(ErrorPayload::new(code, message)));
    }

    fn send(&mut self, body: ResponseBody) {
        let reply = self
            .reply
            .take()
            .expect("a request is answered at most once");
        if let Some(m) = &self.metrics {
            let outcome = match &body {
                ResponseBody::Ok(_) => "ok",
                ResponseBody::Err(e) => e.code.label(),
            };
            m.answered(self.service, outcome, self.arrived.elapsed());
        }
        reply.port.deliver(
            reply.token,
            Response {
                request_id: self.request_id,
                service: self.service,
                body,
            },
        );
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.reply.is_some() {
            self.send(ResponseBody::Err(ErrorPayload::new(
                ErrorCode::Unavailable,
                "request dropped before it was executed",
            )));
        }
    }
}
