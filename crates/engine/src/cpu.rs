//! The `cpu` engine: one worker thread per lane, running the services' CPU functions. It is
//! the CI path, the reference for the GPU engines and the hybrid helper.

use crate::clock;
use crate::metrics::Metrics;
use crate::service::Registry;
use crate::wiring::{ok, LaneEnds};
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
            let spin = cfg.spin;
            workers.push(
                std::thread::Builder::new()
                    .name(format!("cpu-worker-{w}"))
                    .spawn(move || {
                        if let Some(c) = core {
                            core_affinity::set_for_current(core_affinity::CoreId { id: c });
                        }
                        worker_loop(lane, &registry, &metrics, &stop, spin)
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

/// A worker's answer buffer: room for the largest page (the bank's 47 KB) without growing.
pub(crate) const ANSWER_BUFFER: usize = 64 * 1024;

fn worker_loop(
    mut lane: LaneEnds,
    registry: &Registry,
    m: &Metrics,
    stop: &AtomicBool,
    spin: Duration,
) {
    let _health = lane.health_guard();
    lane.bell.bind_current();
    let mut out = Vec::with_capacity(ANSWER_BUFFER);
    let mut last_work = Instant::now();
    loop {
        let (requests, answers) = (&mut lane.requests, &mut lane.answers);
        let done = requests.poll(|ingress, msg| {
            let env = msg.env;
            let now = clock::now_ns();
            if clock::expired(env.deadline, now) {
                let e = ErrorPayload::new(ErrorCode::Timeout, "deadline passed while queued");
                return answers.send_error(ingress, env, &e);
            }
            let Some(service) = registry.get(env.service) else {
                let e = ErrorPayload::new(ErrorCode::UnknownService, "no such service");
                return answers.send_error(ingress, env, &e);
            };
            let start = Instant::now();
            out.clear();
            let result = catch_unwind(AssertUnwindSafe(|| {
                service.execute_cpu(msg.payload, &mut out)
            }));
            m.stage(
                &lane.engine,
                "execute",
                Duration::from_nanos(now.saturating_sub(env.arrived)),
                start.elapsed(),
            );
            match result {
                Ok(Ok(())) => {
                    answers.send_vec(ingress, ok(env), &mut out);
                    if out.capacity() == 0 {
                        // A large answer left with its buffer (no copy): a fresh one.
                        out.reserve(ANSWER_BUFFER);
                    }
                }
                Ok(Err(e)) => answers.send_error(ingress, env, &e),
                Err(_) => {
                    let e = ErrorPayload::new(ErrorCode::Internal, "service panicked");
                    answers.send_error(ingress, env, &e)
                }
            }
        });
        if done.is_some() {
            last_work = Instant::now();
            continue;
        }
        if stop.load(Ordering::Acquire) {
            // Ingress stopped before `stop` was set: what is in the rings now is all there is.
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
