//! The `inline` engine: the io thread that read a request runs the service's CPU function
//! itself and writes the answer back on the same turn, as nginx's workers do.
//!
//! No ring, no in-flight entry, no worker to wake and no answer to pump: a request costs its
//! function and nothing else, which for microsecond services (echo, small web pages) is
//! most of the host's per-request work on the other engines (the hand-off to a worker thread
//! and back measured about 16% of a 16 KB echo, plus the copies into and out of the rings).
//! The price is that the io thread serves nothing else meanwhile: a slow request holds every
//! connection and datagram of its io thread, so slow services belong on `cpu` workers.
//! There is no queue to overflow: an io thread that is busy simply reads its socket later
//! (TCP back-pressure; UDP's socket buffer).

use crate::metrics::Metrics;
use crate::service::Service;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The engine's name: metrics label, `--service NAME:inline`.
pub const INLINE: &str = "inline";

/// The services an ingress runs on its own thread.
#[derive(Default, Clone)]
pub struct InlineEngine {
    services: HashMap<u16, Arc<dyn Service>>,
}

impl InlineEngine {
    pub fn new(services: impl IntoIterator<Item = Arc<dyn Service>>) -> InlineEngine {
        InlineEngine {
            services: services.into_iter().map(|s| (s.id(), s)).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The service with this wire id, when it runs inline.
    pub fn service(&self, id: u16) -> Option<&Arc<dyn Service>> {
        self.services.get(&id)
    }

    /// Runs one request on the calling thread into `out` (cleared first). A panic in the
    /// service is an INTERNAL answer, as on the cpu workers; the io thread goes on.
    pub(crate) fn execute(
        &self,
        service: &dyn Service,
        payload: &[u8],
        out: &mut Vec<u8>,
        metrics: &Metrics,
    ) -> Result<(), ErrorPayload> {
        let start = Instant::now();
        out.clear();
        let result = catch_unwind(AssertUnwindSafe(|| service.execute_cpu(payload, out)));
        metrics.stage(INLINE, "execute", Duration::ZERO, start.elapsed());
        match result {
            Ok(r) => r,
            Err(_) => {
                out.clear();
                Err(ErrorPayload::new(ErrorCode::Internal, "service panicked"))
            }
        }
    }
}
