//! The `cpu` engine: one worker thread per lane, running the services' CPU functions. It is
//! the CI path, the reference for the GPU engines and the hybrid helper.

use crate::clock;
use crate::fair::FairQueue;
use crate::metrics::Metrics;
use crate::service::Registry;
use crate::wiring::{ok, AnswerRings, LaneEnds};
use cohort_mq::Envelope;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct CpuEngineConfig {
    /// Cores to pin workers to, in order; empty = no pinning.
    pub cpus: Vec<usize>,
    /// How long an idle worker keeps polling its rings before it parks. Parking costs the
    /// ingress a futex wake-up (a syscall) for the next request, which under load costs
    /// more than the spinning.
    pub spin: Duration,
    /// Fair queueing between clients inside each worker (`fair.rs`); off: arrival order.
    pub fair: bool,
}

pub struct CpuEngine {
    workers: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl CpuEngine {
    /// One worker per lane.
    pub fn start(
        cfg: &CpuEngineConfig,
        lanes: Vec<LaneEnds>,
        registry: Registry,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<CpuEngine> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for (w, lane) in lanes.into_iter().enumerate() {
            let (stop, metrics, registry) = (stop.clone(), metrics.clone(), registry.clone());
            let core = cfg.cpus.get(w % cfg.cpus.len().max(1)).copied();
            let (spin, fair) = (cfg.spin, cfg.fair);
            workers.push(
                std::thread::Builder::new()
                    .name(format!("cpu-worker-{w}"))
                    .spawn(move || {
                        if let Some(c) = core {
                            core_affinity::set_for_current(core_affinity::CoreId { id: c });
                        }
                        worker_loop(lane, &registry, &metrics, &stop, spin, fair)
                    })?,
            );
        }
        Ok(CpuEngine { workers, stop })
    }

    /// Lets workers finish every queued request (call after ingress has stopped), then joins.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::Release);
        for w in self.workers {
            let _ = w.join();
        }
    }
}

/// A worker's answer buffer: room for a large answer (a 47 KB web page) without growing.
pub(crate) const ANSWER_BUFFER: usize = 64 * 1024;

/// Requests and payload bytes a worker takes out of its rings to queue fairly (`fair.rs`);
/// beyond them, requests wait in the rings in arrival order.
const FAIR_WINDOW: usize = 1024;
const FAIR_BYTES: usize = 4 << 20;

fn worker_loop(
    mut lane: LaneEnds,
    registry: &Registry,
    m: &Metrics,
    stop: &AtomicBool,
    spin: Duration,
    fair: bool,
) {
    let _health = lane.health_guard();
    lane.bell.bind_current();
    let mut run = Runner {
        registry,
        m,
        engine: lane.engine.clone(),
        out: Vec::with_capacity(ANSWER_BUFFER),
    };
    let mut queue = fair.then(|| FairQueue::new(FAIR_WINDOW, FAIR_BYTES));
    let mut last_work = Instant::now();
    loop {
        let (requests, answers) = (&mut lane.requests, &mut lane.answers);
        let worked = match &mut queue {
            None => requests
                .poll(|ingress, msg| run.one(answers, ingress, msg.env, msg.payload))
                .is_some(),
            Some(q) => {
                // Everything the rings hold (up to the window) joins the fair queue first, so
                // a client's request is weighed against every other client's, not only
                // against those ahead of it in its ring.
                while requests
                    .poll_if(|ingress, msg| {
                        q.has_room(msg.payload.len())
                            .then(|| q.push(ingress, msg.env, msg.payload, msg.spilled))
                    })
                    .is_some()
                {}
                match q.pop() {
                    Some(s) => {
                        let took = run.one(answers, s.ingress, s.env, s.payload.bytes());
                        q.charge(s.env.status, took.as_nanos() as u64);
                        q.recycle(s.payload);
                        true
                    }
                    None => false,
                }
            }
        };
        if worked {
            last_work = Instant::now();
            continue;
        }
        if stop.load(Ordering::Acquire) {
            // Ingress stopped before `stop` was set: what is in the rings now is all there is
            // (the fair queue is empty here: a request staged in it counts as work above).
            debug_assert!(queue.as_ref().is_none_or(FairQueue::is_empty));
            if !lane.requests.any_ready() {
                return;
            }
            continue;
        }
        if last_work.elapsed() < spin {
            std::hint::spin_loop();
        } else {
            lane.sleep(Duration::from_millis(20));
        }
    }
}

/// Runs one request's CPU function and sends its answer.
struct Runner<'a> {
    registry: &'a Registry,
    m: &'a Metrics,
    engine: Arc<str>,
    out: Vec<u8>,
}

impl Runner<'_> {
    /// Returns how long the service's function ran (zero for a request answered without it).
    fn one(
        &mut self,
        answers: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        payload: &[u8],
    ) -> Duration {
        let now = clock::now_ns();
        if clock::expired(env.deadline, now) {
            let e = ErrorPayload::new(ErrorCode::Timeout, "deadline passed while queued");
            answers.send_error(ingress, env, &e);
            return Duration::ZERO;
        }
        let Some(service) = self.registry.get(env.service) else {
            let e = ErrorPayload::new(ErrorCode::UnknownService, "no such service");
            answers.send_error(ingress, env, &e);
            return Duration::ZERO;
        };
        let start = Instant::now();
        let out = &mut self.out;
        out.clear();
        let result = catch_unwind(AssertUnwindSafe(|| service.execute_cpu(payload, out)));
        let took = start.elapsed();
        self.m.stage(
            &self.engine,
            "execute",
            Duration::from_nanos(now.saturating_sub(env.arrived)),
            took,
        );
        match result {
            Ok(Ok(())) => {
                answers.send_vec(ingress, ok(env), &mut self.out);
                if self.out.capacity() == 0 {
                    // A large answer left with its buffer (no copy): a fresh one.
                    self.out.reserve(ANSWER_BUFFER);
                }
            }
            Ok(Err(e)) => answers.send_error(ingress, env, &e),
            Err(_) => {
                let e = ErrorPayload::new(ErrorCode::Internal, "service panicked");
                answers.send_error(ingress, env, &e)
            }
        }
        took
    }
}
