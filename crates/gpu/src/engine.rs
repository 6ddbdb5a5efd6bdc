//! The host-driven GPU engines for k-NN, one control thread per GPU.
//!
//! - `gpu-direct` (Centaur's CPU-driven design): every request is launched on its own as soon
//!   as a stream is free: H2D, the three kernels, D2H; up to `streams` requests in flight;
//!   the control thread polls their events (SEDA style), never a blocking sync per request.
//! - `gpu-cohort` (Rhythm / micro-batching): requests gather into a cohort that closes at
//!   `max_cohort` requests or when its oldest has waited `cohort_timeout`, whichever comes
//!   first; cohorts run on alternating streams with pinned staging buffers, so the copy-in,
//!   kernels and copy-out of consecutive cohorts overlap.

use crate::knn::{to_neighbors, Buffers, GpuIvf};
use crate::GpuError;
use cohort_engine::{ChannelLane, Lane, Metrics, Request, ResponseBody};
use cohort_proto::{service_id, ErrorCode};
use cohort_services::knn::{decode_request, encode_response};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream, PinnedHostSlice};
use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
}

pub struct GpuEngine {
    lane: Arc<ChannelLane>,
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl GpuEngine {
    pub fn start(
        ivf: GpuIvf,
        cfg: GpuEngineConfig,
        metrics: Arc<Metrics>,
    ) -> Result<GpuEngine, GpuError> {
        let max_cohort = if cfg.mode == Mode::Direct {
            1
        } else {
            cfg.max_cohort.max(1)
        };
        let streams = cfg.streams.max(1);
        let mut slots = Vec::with_capacity(streams);
        for _ in 0..streams {
            // SAFETY: pinned buffers are only read after their stream's event completed.
            let q = unsafe { ivf.ctx.alloc_pinned::<f32>(max_cohort * ivf.dim) }?;
            let ids = unsafe {
                ivf.ctx
                    .alloc_pinned::<u32>(max_cohort * crate::knn::GPU_MAX_K)
            }?;
            let dist = unsafe {
                ivf.ctx
                    .alloc_pinned::<f32>(max_cohort * crate::knn::GPU_MAX_K)
            }?;
            let stream = ivf.ctx.new_stream()?;
            let bufs = ivf.buffers(&stream, max_cohort)?;
            slots.push(Slot {
                stream,
                q,
                ids,
                dist,
                bufs,
                graphs: Graphs::default(),
                busy: None,
            });
        }
        // Each slot's buffers are used on its own stream only, and a slot is reused only
        // after its completion event: cudarc's per-buffer event tracking adds driver calls
        // and would put foreign events into captured graphs. The control thread orders work.
        // SAFETY: see above; nothing else uses this context's buffers concurrently.
        unsafe { ivf.ctx.disable_event_tracking() };
        let (tx, rx) = bounded(cfg.max_queue.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        metrics
            .gpu_memory_used
            .get_or_create(&cohort_engine::metrics::GpuLabels {
                gpu: ivf.ctx.ordinal().to_string(),
            })
            .set(ivf.device_bytes as i64);
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("gpu-control-{}", ivf.ctx.ordinal()))
            .spawn(move || {
                let mut c = Control {
                    ivf,
                    cfg: GpuEngineConfig {
                        max_cohort,
                        streams,
                        ..cfg
                    },
                    slots,
                    rx,
                    metrics,
                    pending: VecDeque::new(),
                };
                c.run(&st);
            })
            .map_err(|e| GpuError::Invalid(format!("spawning the control thread: {e}")))?;
        Ok(GpuEngine {
            lane: Arc::new(ChannelLane { tx }),
            thread: Some(thread),
            stop,
        })
    }

    pub fn lanes(&self) -> Vec<Arc<dyn Lane>> {
        vec![self.lane.clone()]
    }

    /// Finishes queued and in-flight work, then stops the control thread.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A decoded request waiting for a launch.
struct Ready {
    req: Request,
    k: usize,
    nprobe: usize,
    vector: Vec<f32>,
}

struct InFlight {
    done: CudaEvent,
    nq: usize,
    k: usize,
    reqs: Vec<Request>,
    started: Instant,
}

struct Slot {
    stream: Arc<CudaStream>,
    q: PinnedHostSlice<f32>,
    ids: PinnedHostSlice<u32>,
    dist: PinnedHostSlice<f32>,
    bufs: Buffers,
    /// gpu-direct: one captured graph (copy in, three kernels, copy out) per (k, nprobe), so a
    /// request costs one graph launch instead of about ten driver calls.
    graphs: Graphs,
    busy: Option<InFlight>,
}

/// Captured graphs of one slot. CudaGraph is not Send (graphs must not be used from two
/// threads at once); these are created and replayed only by the slot's control thread (the
/// map is empty when the slot moves to that thread).
#[derive(Default)]
struct Graphs(HashMap<(usize, usize), CudaGraph>);
// SAFETY: see above: only ever touched by one thread after the move.
unsafe impl Send for Graphs {}

/// Copy in, the three stages, copy out, for the first `nq` queries staged in the slot.
fn enqueue(
    ivf: &GpuIvf,
    slot: &mut Slot,
    nq: usize,
    k: usize,
    nprobe: usize,
) -> Result<(), GpuError> {
    let (s, dim) = (slot.stream.clone(), ivf.dim);
    s.memcpy_htod(
        &slot.q.as_slice()?[..nq * dim],
        &mut slot.bufs.q.slice_mut(0..nq * dim),
    )?;
    ivf.launch_into(&s, &mut slot.bufs, nq, k, nprobe)?;
    s.memcpy_dtoh(
        &slot.bufs.out_ids.slice(0..nq * k),
        &mut slot.ids.as_mut_slice()?[..nq * k],
    )?;
    s.memcpy_dtoh(
        &slot.bufs.out_dist.slice(0..nq * k),
        &mut slot.dist.as_mut_slice()?[..nq * k],
    )?;
    Ok(())
}

/// Replays (capturing on first use) the single-query graph of (k, nprobe) on the slot's stream.
fn launch_graph(ivf: &GpuIvf, slot: &mut Slot, k: usize, nprobe: usize) -> Result<(), GpuError> {
    if !slot.graphs.0.contains_key(&(k, nprobe)) {
        let s = slot.stream.clone();
        // Relaxed: the staging buffers' host accessors may query their (completed) events.
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        let queued = enqueue(ivf, slot, 1, k, nprobe);
        // End the capture whatever happened, so the stream is usable again.
        let graph = s.end_capture(CUgraphInstantiate_flags(0))?;
        queued?;
        let graph =
            graph.ok_or_else(|| GpuError::Invalid("graph capture produced no graph".into()))?;
        slot.graphs.0.insert((k, nprobe), graph);
    }
    slot.graphs.0[&(k, nprobe)].launch()?;
    Ok(())
}

struct Control {
    ivf: GpuIvf,
    cfg: GpuEngineConfig,
    slots: Vec<Slot>,
    rx: Receiver<Request>,
    metrics: Arc<Metrics>,
    pending: VecDeque<Ready>,
}

impl Control {
    fn run(&mut self, stop: &AtomicBool) {
        loop {
            let completed = self.complete();
            let admitted = self.admit();
            let launched = self.launch_ready();
            let idle = self.slots.iter().all(|s| s.busy.is_none());
            if stop.load(Ordering::Acquire) && idle && self.pending.is_empty() && self.rx.is_empty()
            {
                return;
            }
            if completed + admitted + launched > 0 {
                continue;
            }
            if idle && self.pending.is_empty() {
                // Nothing anywhere: block for the next request.
                match self.rx.recv_timeout(Duration::from_millis(20)) {
                    Ok(r) => self.accept(r),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Moves queued requests into `pending`, answering invalid ones at once.
    fn admit(&mut self) -> usize {
        let mut n = 0;
        while self.pending.len() < 4 * self.cfg.max_cohort {
            match self.rx.try_recv() {
                Ok(r) => {
                    self.accept(r);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        n
    }

    fn accept(&mut self, req: Request) {
        if req.service != service_id::KNN {
            return req.respond_error(ErrorCode::UnknownService, "the gpu engines serve knn only");
        }
        let ix = &self.ivf;
        let r = match decode_request(&req.payload, ix.dim, ix.nlist, ix.n) {
            Ok(r) => r,
            Err(e) => return req.respond(ResponseBody::Err(e)),
        };
        let nprobe = if r.nprobe == 0 {
            ix.default_nprobe
        } else {
            r.nprobe
        };
        if let Err(msg) = ix.check(r.k, nprobe) {
            return req.respond_error(ErrorCode::BadRequest, msg);
        }
        self.pending.push_back(Ready {
            req,
            k: r.k,
            nprobe,
            vector: r.vector,
        });
    }

    /// Launches cohorts while a stream is free and a cohort is due.
    fn launch_ready(&mut self) -> usize {
        let mut launched = 0;
        while let Some(oldest) = self.pending.front() {
            let due = self.pending.len() >= self.cfg.max_cohort
                || oldest.req.arrived.elapsed() >= self.cfg.cohort_timeout
                || self.cfg.mode == Mode::Direct;
            let Some(slot) = self.slots.iter().position(|s| s.busy.is_none()) else {
                break;
            };
            if !due {
                break;
            }
            // A cohort shares (k, nprobe): take the oldest request's shape, up to max_cohort.
            let (k, nprobe) = (oldest.k, oldest.nprobe);
            let mut batch = Vec::with_capacity(self.cfg.max_cohort);
            let mut rest = VecDeque::with_capacity(self.pending.len());
            while let Some(r) = self.pending.pop_front() {
                if batch.len() < self.cfg.max_cohort && r.k == k && r.nprobe == nprobe {
                    batch.push(r);
                } else {
                    rest.push_back(r);
                }
            }
            self.pending = rest;
            let now = Instant::now();
            let (live, expired): (Vec<Ready>, Vec<Ready>) =
                batch.into_iter().partition(|r| now <= r.req.deadline);
            for r in expired {
                r.req
                    .respond_error(ErrorCode::Timeout, "deadline passed while queued");
            }
            if live.is_empty() {
                continue;
            }
            if let Err(e) = self.launch(slot, live, k, nprobe) {
                tracing::error!(error = %e, "gpu launch failed");
            }
            launched += 1;
        }
        launched
    }

    fn launch(
        &mut self,
        si: usize,
        batch: Vec<Ready>,
        k: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        let dim = self.ivf.dim;
        let nq = batch.len();
        let slot = &mut self.slots[si];
        {
            let q = slot.q.as_mut_slice()?;
            for (i, r) in batch.iter().enumerate() {
                q[i * dim..(i + 1) * dim].copy_from_slice(&r.vector);
            }
        }
        let s = slot.stream.clone();
        let result = if self.cfg.mode == Mode::Direct && nq == 1 {
            launch_graph(&self.ivf, slot, k, nprobe)
        } else {
            enqueue(&self.ivf, slot, nq, k, nprobe)
        }
        .and_then(|()| Ok(s.record_event(None)?));
        let reqs: Vec<Request> = batch.into_iter().map(|r| r.req).collect();
        match result {
            Ok(done) => {
                self.metrics
                    .cohort_size
                    .get_or_create(&cohort_engine::metrics::EngineLabels {
                        engine: self.metrics.engine().into(),
                    })
                    .observe(nq as f64);
                slot.busy = Some(InFlight {
                    done,
                    nq,
                    k,
                    reqs,
                    started: Instant::now(),
                });
                Ok(())
            }
            Err(e) => {
                for r in reqs {
                    r.respond_error(ErrorCode::Internal, format!("gpu failure: {e}"));
                }
                Err(e)
            }
        }
    }

    /// Answers every cohort whose event has completed.
    fn complete(&mut self) -> usize {
        let mut n = 0;
        for si in 0..self.slots.len() {
            let ready = match &self.slots[si].busy {
                Some(f) => f.done.is_complete(),
                None => false,
            };
            if !ready {
                continue;
            }
            let f = self.slots[si].busy.take().expect("checked busy");
            let slot = &self.slots[si];
            let (nq, k) = (f.nq, f.k);
            let rows = match (slot.ids.as_slice(), slot.dist.as_slice()) {
                (Ok(ids), Ok(dist)) => Ok(to_neighbors(&ids[..nq * k], &dist[..nq * k], nq, k)),
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
            let compute = f.started.elapsed();
            match rows {
                Ok(rows) => {
                    for (req, row) in f.reqs.into_iter().zip(rows) {
                        let wait = f.started.saturating_duration_since(req.arrived);
                        self.metrics.stage("gpu", wait, compute);
                        req.respond(ResponseBody::Ok(encode_response(&row)));
                    }
                }
                Err(e) => {
                    for req in f.reqs {
                        req.respond_error(ErrorCode::Internal, format!("gpu failure: {e}"));
                    }
                }
            }
            n += 1;
        }
        n
    }
}
