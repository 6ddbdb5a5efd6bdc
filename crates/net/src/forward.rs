//! The forwarder: one decoded request frame -> one engine request (or an immediate error).

use cohort_engine::{Dispatcher, Metrics, Registry, Reply, Request, Submit};
use cohort_proto::{ErrorCode, Header, Kind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything a listener needs to turn frames into work.
pub struct Context {
    pub registry: Registry,
    pub dispatcher: Arc<Dispatcher>,
    pub max_payload: usize,
    /// Deadline of requests whose header says 0.
    pub default_timeout: Duration,
    pub metrics: Arc<Metrics>,
    pub shutting_down: AtomicBool,
}

impl Context {
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Forwards one frame whose header parsed. Every path answers through `reply` exactly once.
    pub fn forward(&self, header: &Header, payload: &[u8], reply: Reply) {
        let now = Instant::now();
        let timeout = match header.timeout_us {
            0 => self.default_timeout,
            us => Duration::from_micros(us as u64),
        };
        let req = Request::new(
            header.service,
            header.request_id,
            payload.to_vec(),
            now,
            now + timeout,
            reply,
        )
        .with_metrics(self.metrics.clone());
        if header.kind != Kind::Request {
            return req.respond_error(ErrorCode::BadRequest, "clients may only send requests");
        }
        if self.registry.get(header.service).is_none() {
            let msg = format!("unknown service {}", header.service);
            return req.respond_error(ErrorCode::UnknownService, msg);
        }
        if self.is_shutting_down() {
            return req.respond_error(ErrorCode::Unavailable, "server is shutting down");
        }
        // OVERLOADED has been answered inside submit when every lane was full.
        let _: Submit = self.dispatcher.submit(req);
    }
}
