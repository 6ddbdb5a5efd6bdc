//! The TCP/HTTP side's ingresses: one shard per io thread.
//!
//! A shard is one thread running its own single-threaded tokio runtime, with its own TCP and
//! HTTP listeners (SO_REUSEPORT: the kernel spreads connections over the shards), its own
//! ingress (in-flight table and ring ends into every engine lane) and its own answer pump.
//! A request is admitted, and its answer delivered, on the thread that read it: no lock is
//! shared between io threads, and no thread hand-off sits between an engine's answer and the
//! connection that waits for it (the pump wakes the connection's task on the same thread).
//!
//! The ingress sits behind a mutex only so that shutdown (another thread) can abandon what is
//! left; on the hot path the shard's own thread is its only user, so the lock never waits.

use crate::doorbell::Doorbell;
use bytes::Bytes;
use cohort_engine::{Answer, Ingress, IngressEnds, InlineEngine, Meta, Metrics, ReplyPort};
use cohort_proto::{ErrorCode, ErrorPayload, Header};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

pub(crate) type Port = Arc<dyn ReplyPort>;

/// Answers handed to connections per pump turn before the pump lets them write.
const PUMP_BATCH: usize = 256;
/// How often an idle pump looks for lanes that died (their requests are answered INTERNAL).
const REAP_EVERY: Duration = Duration::from_millis(10);

pub(crate) struct Shard {
    pub index: usize,
    ingress: Mutex<Ingress<Port>>,
    bell: Arc<Doorbell>,
    /// How far the shard's thread is behind its arrivals (`crate::behind`).
    pub behind: Arc<crate::behind::Behind>,
}

fn deliver(port: Port, meta: &Meta, answer: Answer<'_>) {
    port.deliver_answer(meta.request_id, meta.service, answer);
}

/// `deliver`, keeping a large answer's own buffer (no copy) where the ring handed it over.
fn deliver_shared(port: Port, meta: &Meta, answer: Answer<'_>, shared: Option<&Bytes>) {
    match shared {
        Some(body) => port.deliver_shared(meta.request_id, meta.service, body),
        None => deliver(port, meta, answer),
    }
}

impl Shard {
    pub fn new(
        index: usize,
        ends: IngressEnds,
        capacity: usize,
        metrics: Arc<Metrics>,
        (default_timeout, max_timeout, per_service): (Duration, Duration, &[(u16, Duration)]),
        inline: Option<Arc<InlineEngine>>,
        registry: &cohort_engine::Registry,
    ) -> std::io::Result<Arc<Shard>> {
        let bell = Arc::new(Doorbell::new()?);
        ends.set_wake(bell.clone());
        Ok(Arc::new(Shard {
            index,
            ingress: Mutex::new(
                Ingress::new(ends, capacity, metrics, default_timeout)
                    .with_max_timeout(max_timeout, per_service)
                    .with_inline(inline)
                    // Requests of several rows (knn's queries) split here, joined on return.
                    .with_rows(registry.all().cloned()),
            ),
            bell,
            behind: Arc::default(),
        }))
    }

    /// Admits one request: answered now when its service runs inline, else queued to its
    /// engine (answered by the pump).
    pub fn submit(
        &self,
        port: Port,
        h: &Header,
        payload: &[u8],
    ) -> Result<(), (Port, ErrorPayload)> {
        self.ingress.lock().expect("ingress lock").admit(
            port,
            h.service,
            h.request_id,
            h.timeout_us,
            payload,
            deliver,
        )
    }

    pub fn in_flight(&self) -> usize {
        self.ingress.lock().expect("ingress lock").in_flight()
    }

    /// Answers everything still in flight with UNAVAILABLE (shutdown gave up waiting).
    pub fn abandon_all(&self) -> usize {
        self.ingress.lock().expect("ingress lock").abandon_all(
            ErrorCode::Unavailable,
            "server shut down before the engine answered",
            deliver,
        )
    }

    /// Delivers up to `max` answers (and fails the requests of lanes that died).
    fn drain(&self, max: usize) -> usize {
        let mut ing = self.ingress.lock().expect("ingress lock");
        ing.drain_shared(max, deliver_shared) + ing.reap_dead_lanes(deliver)
    }

    fn answers_waiting(&self) -> bool {
        self.ingress
            .lock()
            .expect("ingress lock")
            .ends
            .answers_waiting()
    }

    /// The answer pump: runs on the shard's runtime until `halt`, then delivers what is left.
    /// Under load it never sleeps (engines ring the doorbell only for a sleeping pump, so
    /// answers then cost no syscall); idle, it waits on the doorbell's eventfd.
    pub async fn pump(self: Arc<Self>, mut halt: watch::Receiver<bool>) {
        // SAFETY: `BellFd` holds the doorbell, which owns the eventfd: it stays open and the
        // same for as long as the `AsyncFd` lives.
        let fd = match unsafe {
            AsyncFd::register_with_interest(
                BellFd(self.bell.clone()),
                tokio::io::Interest::READABLE,
            )
        } {
            Ok(fd) => Some(fd),
            Err(e) => {
                // Still correct without the eventfd, only slower to wake: poll every tick.
                tracing::error!(shard = self.index, error = %e, "doorbell not pollable; polling answers");
                None
            }
        };
        while !*halt.borrow() {
            if self.drain(PUMP_BATCH) > 0 {
                // Let the connections this turn answered write before taking more.
                tokio::task::yield_now().await;
                continue;
            }
            self.bell.prepare_sleep();
            if self.answers_waiting() {
                self.bell.woke();
                continue;
            }
            let tick = tokio::time::sleep(if fd.is_some() {
                REAP_EVERY
            } else {
                Duration::from_micros(100)
            });
            tokio::select! {
                r = async { fd.as_ref().expect("checked").readable().await }, if fd.is_some() => {
                    if let Ok(mut g) = r {
                        g.clear_ready();
                    }
                }
                _ = tick => {}
                _ = halt.changed() => {}
            }
            self.bell.woke();
        }
        while self.drain(usize::MAX) > 0 {}
    }
}

/// The doorbell's eventfd as tokio polls it.
struct BellFd(Arc<Doorbell>);

impl AsRawFd for BellFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.raw_fd()
    }
}
