//! The TCP/HTTP side's ingress: connection tasks run on any tokio worker, so they share one
//! in-flight table and one set of ring ends behind a lock; one egress thread drains the answer
//! rings and hands each answer to its connection's writer (or its waiting HTTP handler).

use cohort_engine::{
    Answer, Bell, Ingress, IngressEnds, Meta, Metrics, ReplyPort, Response, ResponseBody,
};
use cohort_proto::{ErrorCode, ErrorPayload, Header};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

type Port = Arc<dyn ReplyPort>;

pub(crate) struct AsyncIngress {
    inner: Arc<Mutex<Ingress<Port>>>,
    bell: Arc<Bell>,
}

fn deliver(port: Port, meta: &Meta, answer: Answer<'_>) {
    let body = match answer {
        Ok(p) => ResponseBody::Ok(p.to_vec()),
        Err(e) => ResponseBody::Err(e),
    };
    port.deliver(Response {
        request_id: meta.request_id,
        service: meta.service,
        body,
    });
}

impl AsyncIngress {
    pub fn new(
        ends: IngressEnds,
        capacity: usize,
        metrics: Arc<Metrics>,
        default_timeout: Duration,
    ) -> AsyncIngress {
        let bell = Bell::new();
        ends.set_wake(bell.clone());
        AsyncIngress {
            inner: Arc::new(Mutex::new(Ingress::new(
                ends,
                capacity,
                metrics,
                default_timeout,
            ))),
            bell,
        }
    }

    pub fn submit(
        &self,
        port: Port,
        h: &Header,
        payload: &[u8],
    ) -> Result<(), (Port, ErrorPayload)> {
        self.inner.lock().expect("ingress lock").submit(
            port,
            h.service,
            h.request_id,
            h.timeout_us,
            payload,
        )
    }

    pub fn in_flight(&self) -> usize {
        self.inner.lock().expect("ingress lock").in_flight()
    }

    /// Answers everything still in flight with UNAVAILABLE (shutdown gave up waiting).
    pub fn abandon_all(&self) -> usize {
        self.inner.lock().expect("ingress lock").abandon_all(
            ErrorCode::Unavailable,
            "server shut down before the engine answered",
            deliver,
        )
    }

    /// The egress thread: delivers answers until `stop`.
    pub fn spawn_egress(
        &self,
        stop: Arc<AtomicBool>,
        core: Option<usize>,
    ) -> std::io::Result<JoinHandle<()>> {
        let (inner, bell) = (self.inner.clone(), self.bell.clone());
        std::thread::Builder::new()
            .name("net-egress".into())
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(core_affinity::CoreId { id: c });
                }
                bell.bind_current();
                while !stop.load(Ordering::Acquire) {
                    let n = {
                        let mut ing = inner.lock().expect("ingress lock");
                        ing.drain(1024, deliver) + ing.reap_dead_lanes(deliver)
                    };
                    if n == 0 {
                        let waiting = || {
                            inner
                                .lock()
                                .map(|i| i.ends.answers_waiting())
                                .unwrap_or(false)
                        };
                        bell.sleep(Duration::from_millis(10), waiting);
                    }
                }
                let mut ing = inner.lock().expect("ingress lock");
                while ing.drain(usize::MAX, deliver) > 0 {}
            })
    }
}
