//! What every listener shares: the services (for the HTTP JSON mapping), the limits, the
//! metrics and the shutdown flag. (Each TCP/HTTP io thread has its own ingress: `shard`.)

use crate::quota::{Over, Quotas};
use crate::shard::Shard;
use cohort_auth::Auth;
use cohort_engine::{Metrics, Registry, ReplyPort, Response, ResponseBody};
use cohort_proto::{ErrorCode, ErrorPayload, Header, Kind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

pub struct Context {
    pub registry: Registry,
    pub max_payload: usize,
    /// Services the io threads run themselves (no engine lane).
    pub inline: Option<Arc<cohort_engine::InlineEngine>>,
    pub metrics: Arc<Metrics>,
    pub shutting_down: AtomicBool,
    /// Per-client quotas (off unless configured).
    pub(crate) quotas: Arc<Quotas>,
    /// API keys (None: every client may call every service).
    pub(crate) auth: Option<Arc<Auth>>,
    /// Paths handed whole to another crate's handler (`--data-dir`'s collections).
    pub(crate) routes: Option<Arc<dyn crate::handler::HttpRoutes>>,
    /// Frames and gRPC calls of `routes` (the collections') admitted and not yet answered,
    /// server-wide: at most [`MAX_FRAMES_IN_FLIGHT`].
    pub(crate) frames_in_flight: Arc<AtomicUsize>,
}

/// The most frames of another crate's handler (the collections', service 7) and calls of
/// its gRPC service, together, a server runs or holds for its blocking pool at once; one
/// more is refused OVERLOADED (`queue: collections frames in flight ...`, or `queue:
/// collections calls in flight ...` for gRPC) at once rather than queued (docs/protocol.md).
pub const MAX_FRAMES_IN_FLIGHT: usize = 64;

/// Gives back a frame's place in [`Context::frames_in_flight`] when dropped.
pub(crate) struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Context {
    /// A frame's service payload once its key checks out (`cohort_auth`), with the key's id;
    /// without keys, a signed frame's trailer is dropped and any frame passes.
    pub(crate) fn unsigned<'a>(
        &self,
        header: &Header,
        payload: &'a [u8],
    ) -> Result<(&'a [u8], Option<[u8; cohort_proto::KEY_ID_LEN]>), ErrorPayload> {
        match &self.auth {
            Some(a) => a.frame(header, payload).map(|(p, k)| (p, Some(k))),
            None => Ok((
                cohort_proto::split_signed(header, payload).map_or(payload, |(p, _)| p),
                None,
            )),
        }
    }

    /// A refusal for a client over its quota, counted like any other answer.
    pub(crate) fn over_quota(&self, service: u16, over: &Over) -> ErrorPayload {
        self.metrics
            .shed(service, cohort_engine::Shed::Quota, &over.message())
    }

    /// The refusal, counted, of a request to `service` that arrives while `shard`'s thread is
    /// behind its arrivals (`crate::behind`); None to admit it.
    pub(crate) fn behind(&self, shard: &Shard, service: u16) -> Option<ErrorPayload> {
        let wait = shard.behind.check()?;
        let detail = crate::behind::detail(wait);
        Some(
            self.metrics
                .shed(service, cohort_engine::Shed::Ingress, &detail),
        )
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// TCP/HTTP: admits one frame whose header parsed into the shard that read it. Every path
    /// answers through `port` exactly once (at once for a refusal, else when the engine's
    /// answer comes back).
    pub(crate) fn submit(
        &self,
        shard: &Shard,
        header: &Header,
        payload: &[u8],
        port: Arc<dyn ReplyPort>,
    ) {
        self.submit_as(shard, header, payload, port, false)
    }

    /// `submit` for a request its front door already admitted past the io thread's backlog
    /// (`behind`: an `/v2` infer over HTTP, a unary gRPC ModelInfer). Asking again here took
    /// a second share of the admissions (s x s admitted where the thread keeps up with s),
    /// and refused after the message had been read and decoded: the costliest refusal.
    pub(crate) fn submit_admitted(
        &self,
        shard: &Shard,
        header: &Header,
        payload: &[u8],
        port: Arc<dyn ReplyPort>,
    ) {
        self.submit_as(shard, header, payload, port, true)
    }

    fn submit_as(
        &self,
        shard: &Shard,
        header: &Header,
        payload: &[u8],
        port: Arc<dyn ReplyPort>,
        admitted: bool,
    ) {
        let refuse = |code: ErrorCode, msg: String| {
            self.metrics
                .answered(header.service, code.label(), std::time::Duration::ZERO);
            port.deliver(Response {
                request_id: header.request_id,
                service: header.service,
                body: ResponseBody::Err(ErrorPayload::new(code, msg)),
            })
        };
        if header.kind != Kind::Request {
            return refuse(
                ErrorCode::BadRequest,
                "clients may only send requests".into(),
            );
        }
        if self.is_shutting_down() {
            return refuse(ErrorCode::Unavailable, "server is shutting down".into());
        }
        if let Some(e) = (!admitted)
            .then(|| self.behind(shard, header.service))
            .flatten()
        {
            return port.deliver(Response {
                request_id: header.request_id,
                service: header.service,
                body: ResponseBody::Err(e),
            });
        }
        if let Some(routes) = self.frame_routes(header.service) {
            return self.submit_to_routes(routes, header, payload, port);
        }
        if let Err((port, e)) = shard.submit(port.clone(), header, payload) {
            port.deliver(Response {
                request_id: header.request_id,
                service: header.service,
                body: ResponseBody::Err(e),
            });
        }
    }

    /// A place among the collection calls in flight (frames and gRPC calls share the bound:
    /// both wait on the same blocking pool), or None at the bound (refuse, never queue).
    pub(crate) fn take_frame_place(&self) -> Option<InFlight> {
        if self.frames_in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_FRAMES_IN_FLIGHT {
            self.frames_in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(InFlight(self.frames_in_flight.clone()))
    }

    /// The handler of another crate that answers frames of `service` (`--data-dir`'s
    /// collections), if any.
    pub(crate) fn frame_routes(&self, service: u16) -> Option<Arc<dyn crate::handler::HttpRoutes>> {
        self.routes
            .as_ref()
            .filter(|r| r.frame_service() == Some(service))
            .cloned()
    }

    /// Runs one frame on the handler of another crate, on the runtime's blocking pool (a
    /// write waits for its fsync), and answers through `port` exactly once.
    fn submit_to_routes(
        &self,
        routes: Arc<dyn crate::handler::HttpRoutes>,
        header: &Header,
        payload: &[u8],
        port: Arc<dyn ReplyPort>,
    ) {
        let (request_id, service) = (header.request_id, header.service);
        // The request's deadline: `timeout_us` after it was read (0: none for these frames).
        let arrived = std::time::Instant::now();
        let deadline = (header.timeout_us > 0)
            .then(|| arrived + std::time::Duration::from_micros(header.timeout_us as u64));
        // Bounded server-wide: past the bound refuse at once, never queue on the pool.
        let Some(place) = self.take_frame_place() else {
            let e = self.metrics.shed(
                service,
                cohort_engine::Shed::Queue,
                &format!(
                    "collections frames in flight at the server's bound of {MAX_FRAMES_IN_FLIGHT}"
                ),
            );
            return port.deliver(Response {
                request_id,
                service,
                body: ResponseBody::Err(e),
            });
        };
        let metrics = self.metrics.clone();
        let max_answer = self.max_payload;
        let payload = payload.to_vec();
        let run = move || {
            let start = std::time::Instant::now();
            let late = deadline.filter(|d| start > *d);
            let body = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if let Some(d) = late {
                    return Err(ErrorPayload::new(
                        ErrorCode::Timeout,
                        format!(
                            "deadline passed {} us before the frame ran (timeout_us {}); not run",
                            start.duration_since(d).as_micros(),
                            deadline.map_or(0, |d| d.duration_since(arrived).as_micros())
                        ),
                    ));
                }
                routes.handle_frame(&payload, max_answer)
            })) {
                Ok(Ok(p)) => ResponseBody::Ok(p),
                Ok(Err(e)) => ResponseBody::Err(e),
                Err(_) => ResponseBody::Err(ErrorPayload::new(
                    ErrorCode::Internal,
                    "the handler panicked",
                )),
            };
            let outcome = match &body {
                ResponseBody::Ok(_) => "ok",
                ResponseBody::Err(e) => e.code.label(),
            };
            metrics.answered(service, outcome, start.elapsed());
            drop(place);
            port.deliver(Response {
                request_id,
                service,
                body,
            });
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(run)),
            // Every caller runs on a shard's runtime; without one, run here rather than drop it.
            Err(_) => run(),
        }
    }
}
