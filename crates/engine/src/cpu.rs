//! The `cpu` engine: worker threads, one bounded queue (lane) each, running the services' CPU
//! implementations. It is the CI path, the reference for the GPU engines and the hybrid helper.

use crate::dispatch::{ChannelLane, Lane};
use crate::metrics::Metrics;
use crate::request::{Request, ResponseBody};
use crate::service::Registry;
use cohort_proto::{ErrorCode, ErrorPayload};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, TryRecvError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct CpuEngineConfig {
    pub workers: usize,
    /// Total queued requests across all workers before OVERLOADED.
    pub max_queue: usize,
    /// Cores to pin workers to, in order; empty = no pinning.
    pub cpus: Vec<usize>,
    /// How long an idle worker keeps polling its queue before it parks. Parking costs the
    /// io thread a futex wake-up (a syscall) for the next request, which under load costs
    /// more than the spinning.
    pub spin: Duration,
}

pub struct CpuEngine {
    lanes: Vec<Arc<dyn Lane>>,
    workers: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl CpuEngine {
    pub fn start(cfg: &CpuEngineConfig, registry: Registry, metrics: Arc<Metrics>) -> CpuEngine {
        assert!(cfg.workers >= 1, "the cpu engine needs at least one worker");
        let per_lane = (cfg.max_queue / cfg.workers).max(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut lanes: Vec<Arc<dyn Lane>> = Vec::new();
        let mut workers = Vec::new();
        for w in 0..cfg.workers {
            let (tx, rx) = bounded(per_lane);
            lanes.push(Arc::new(ChannelLane { tx }));
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
                        worker_loop(rx, &registry, &metrics, &stop, spin)
                    })
                    .expect("spawn cpu worker"),
            );
        }
        CpuEngine {
            lanes,
            workers,
            stop,
        }
    }

    pub fn lanes(&self) -> Vec<Arc<dyn Lane>> {
        self.lanes.clone()
    }

    /// Lets workers finish every queued request, then joins them.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::Release);
        for w in self.workers {
            let _ = w.join();
        }
    }
}

fn worker_loop(
    rx: Receiver<Request>,
    registry: &Registry,
    m: &Metrics,
    stop: &AtomicBool,
    spin: Duration,
) {
    let mut last_work = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(req) => {
                execute(req, registry, m);
                last_work = Instant::now();
                continue;
            }
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) if last_work.elapsed() < spin => {
                std::hint::spin_loop();
                continue;
            }
            Err(TryRecvError::Empty) => {}
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(req) => {
                execute(req, registry, m);
                last_work = Instant::now();
            }
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Acquire) {
                    // Producers have stopped before `stop` is set; drain and leave.
                    while let Ok(req) = rx.try_recv() {
                        execute(req, registry, m);
                    }
                    return;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Runs one request on this thread and answers it.
pub(crate) fn execute(req: Request, registry: &Registry, m: &Metrics) {
    let start = Instant::now();
    let wait = start.saturating_duration_since(req.arrived);
    if start > req.deadline {
        return req.respond_error(ErrorCode::Timeout, "deadline passed while queued");
    }
    let Some(service) = registry.get(req.service) else {
        return req.respond_error(ErrorCode::UnknownService, "no such service");
    };
    let result = catch_unwind(AssertUnwindSafe(|| service.execute_cpu(&req.payload)));
    m.stage("execute", wait, start.elapsed());
    let body = match result {
        Ok(Ok(out)) => ResponseBody::Ok(out),
        Ok(Err(e)) => ResponseBody::Err(e),
        Err(_) => ResponseBody::Err(ErrorPayload::new(ErrorCode::Internal, "service panicked")),
    };
    req.respond(body);
}
