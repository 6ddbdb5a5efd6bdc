//! The host-driven GPU engines for k-NN, one control thread per GPU.
//!
//! - `gpu-direct` (Centaur's CPU-driven design): every request is launched on its own as soon
//!   as a stream is free: H2D, the kernels, D2H (one replayed CUDA graph); up to `streams`
//!   requests in flight; the control thread polls their events (SEDA style), never a blocking
//!   sync per request.
//! - `gpu-cohort` (Rhythm / micro-batching): requests gather into a cohort that closes at
//!   `max_cohort` requests or when its oldest has waited `cohort_timeout`, whichever comes
//!   first; cohorts run on rotating streams with pinned staging buffers, so the copy-in,
//!   kernels and copy-out of consecutive cohorts overlap.
//!
//! A request's path: the submitting thread (an io thread) decodes and validates it in
//! [`lane::GpuLane`], the control thread (`control.rs`) batches, stages and launches, and a
//! responder thread (`respond.rs`) encodes the answers, so the one control thread per GPU
//! only moves vectors and drives the device.

mod control;
mod lane;
mod respond;

use crate::knn::GpuIvf;
use crate::GpuError;
use cohort_engine::{Lane, Metrics};
use crossbeam_channel::bounded;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Direct,
    Cohort,
}

#[derive(Debug, Clone)]
pub struct GpuEngineConfig {
    pub mode: Mode,
    /// Largest cohort (gpu-cohort); gpu-direct uses 1.
    pub max_cohort: usize,
    pub cohort_timeout: Duration,
    /// Streams (= launches in flight).
    pub streams: usize,
    pub max_queue: usize,
    /// Threads encoding and sending answers (0: the control thread does it).
    pub responders: usize,
    /// gpu-cohort: replay one CUDA graph per (power-of-two cohort bucket, k, nprobe) instead of
    /// launching each copy and kernel (gpu-direct always replays its single-query graphs).
    pub graphs: bool,
}

pub struct GpuEngine {
    lane: Arc<lane::GpuLane>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl GpuEngine {
    pub fn start(
        ivf: GpuIvf,
        cfg: GpuEngineConfig,
        metrics: Arc<Metrics>,
    ) -> Result<GpuEngine, GpuError> {
        let cfg = GpuEngineConfig {
            max_cohort: if cfg.mode == Mode::Direct {
                1
            } else {
                cfg.max_cohort.max(1)
            },
            streams: cfg.streams.max(1),
            ..cfg
        };
        let gpu = ivf.ctx.ordinal();
        metrics
            .gpu_memory_used
            .get_or_create(&cohort_engine::metrics::GpuLabels {
                gpu: gpu.to_string(),
            })
            .set(ivf.device_bytes as i64);
        let (tx, rx) = bounded(cfg.max_queue.max(1));
        let lane = Arc::new(lane::GpuLane::new(tx, &ivf));
        let (answers, threads) = respond::spawn(cfg.responders, gpu, &metrics)?;
        let mut control = control::Control::new(ivf, cfg, rx, metrics, answers)?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("gpu-control-{gpu}"))
            .spawn(move || control.run(&st))
            .map_err(|e| GpuError::Invalid(format!("spawning the control thread: {e}")))?;
        // The control thread first: it finishes (and hands over) every answer, then the
        // responders drain their queue and stop once its sender is gone.
        let threads = std::iter::once(thread).chain(threads).collect();
        Ok(GpuEngine {
            lane,
            threads,
            stop,
        })
    }

    pub fn lanes(&self) -> Vec<Arc<dyn Lane>> {
        vec![self.lane.clone()]
    }

    /// Finishes queued and in-flight work, then stops the control and responder threads.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
