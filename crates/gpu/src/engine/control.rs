//! The control thread of one GPU: batches decoded requests into cohorts, stages them in
//! pinned memory, launches them on a free stream and polls the streams' completion events.

use super::lane::Ready;
use super::respond::{AnswerSink, Answers, CHUNK};
use super::{GpuEngineConfig, Mode};
use crate::knn::{Buffers, GpuIvf};
use crate::GpuError;
use cohort_engine::{Metrics, Request};
use cohort_proto::ErrorCode;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream, PinnedHostSlice};
use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Captured graphs (copy in, the kernels, copy out) per (batch size, k, nprobe), so a
    /// launch costs one driver call instead of about a dozen: gpu-direct's single queries, and
    /// gpu-cohort's cohorts padded up to a power-of-two bucket.
    graphs: Graphs,
    busy: Option<InFlight>,
}

/// Captured graphs of one slot. CudaGraph is not Send (graphs must not be used from two
/// threads at once); these are created and replayed only by the slot's control thread (the
/// map is empty when the slot moves to that thread).
#[derive(Default)]
struct Graphs(HashMap<(usize, usize, usize), CudaGraph>);
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

/// Replays (capturing on first use) the graph for `batch` staged queries of (k, nprobe) on
/// the slot's stream. Rows past the real cohort hold earlier cohorts' (or zeroed) vectors:
/// computed, never answered.
fn launch_graph(
    ivf: &GpuIvf,
    slot: &mut Slot,
    batch: usize,
    k: usize,
    nprobe: usize,
) -> Result<(), GpuError> {
    let key = (batch, k, nprobe);
    if !slot.graphs.0.contains_key(&key) {
        let s = slot.stream.clone();
        // Relaxed: the staging buffers' host accessors may query their (completed) events.
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        let queued = enqueue(ivf, slot, batch, k, nprobe);
        // End the capture whatever happened, so the stream is usable again.
        let graph = s.end_capture(CUgraphInstantiate_flags(0))?;
        queued?;
        let graph =
            graph.ok_or_else(|| GpuError::Invalid("graph capture produced no graph".into()))?;
        slot.graphs.0.insert(key, graph);
    }
    slot.graphs.0[&key].launch()?;
    Ok(())
}

/// The graph bucket of a cohort of `nq`: rounded up to a multiple of an eighth of the power
/// of two below it (so padding adds under 12.5% kernel work; measured: power-of-two buckets, up to 2x, cost
/// more than the launches they saved), at most `max` (the staging capacity; full cohorts
/// are exact). Graphs per shape: about 8 log2(max).
fn bucket(nq: usize, max: usize) -> usize {
    let floor_pow2 = 1usize << (usize::BITS - 1 - nq.max(1).leading_zeros());
    let step = (floor_pow2 / 8).max(1);
    nq.div_ceil(step).saturating_mul(step).min(max)
}

pub(super) struct Control {
    ivf: GpuIvf,
    cfg: GpuEngineConfig,
    slots: Vec<Slot>,
    rx: Receiver<Ready>,
    metrics: Arc<Metrics>,
    answers: AnswerSink,
    pending: VecDeque<Ready>,
}

impl Control {
    /// Allocates every stream's staging and device buffers up front.
    pub fn new(
        ivf: GpuIvf,
        cfg: GpuEngineConfig,
        rx: Receiver<Ready>,
        metrics: Arc<Metrics>,
        answers: AnswerSink,
    ) -> Result<Control, GpuError> {
        let (streams, max_cohort) = (cfg.streams, cfg.max_cohort);
        let mut slots = Vec::with_capacity(streams);
        for _ in 0..streams {
            // SAFETY: pinned buffers are only read after their stream's event completed.
            let mut q = unsafe { ivf.ctx.alloc_pinned::<f32>(max_cohort * ivf.dim) }?;
            // Graph buckets copy whole buckets: rows never staged must still be numbers.
            q.as_mut_slice()?.fill(0.0);
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
        Ok(Control {
            ivf,
            cfg,
            slots,
            rx,
            metrics,
            answers,
            pending: VecDeque::new(),
        })
    }

    pub fn run(&mut self, stop: &AtomicBool) {
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
                    Ok(r) => self.pending.push_back(r),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Moves queued requests into `pending` (they were decoded by the submitting thread).
    fn admit(&mut self) -> usize {
        let mut n = 0;
        while self.pending.len() < 4 * self.cfg.max_cohort {
            match self.rx.try_recv() {
                Ok(r) => {
                    self.pending.push_back(r);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        n
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
        let result = if self.cfg.mode == Mode::Direct || self.cfg.graphs {
            launch_graph(&self.ivf, slot, bucket(nq, self.cfg.max_cohort), k, nprobe)
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
            let compute = f.started.elapsed();
            match (slot.ids.as_slice(), slot.dist.as_slice()) {
                (Ok(ids), Ok(dist)) => {
                    // Copy out in chunks (the slot is free again at once) for the responders.
                    let mut reqs = f.reqs.into_iter();
                    for c0 in (0..nq).step_by(CHUNK) {
                        let c1 = (c0 + CHUNK).min(nq);
                        self.answers.hand_over(Answers {
                            reqs: reqs.by_ref().take(c1 - c0).collect(),
                            ids: ids[c0 * k..c1 * k].to_vec(),
                            dist: dist[c0 * k..c1 * k].to_vec(),
                            k,
                            started: f.started,
                            compute,
                        });
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
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

#[cfg(test)]
mod tests {
    use super::bucket;

    #[test]
    fn buckets_pad_at_most_an_eighth_and_never_past_the_staging() {
        for max in [1usize, 7, 256, 1000, 1024] {
            let mut seen = std::collections::BTreeSet::new();
            for nq in 1..=max {
                let b = bucket(nq, max);
                assert!(b >= nq && b <= max, "nq {nq} max {max} -> {b}");
                assert!((b - nq) * 8 <= nq.max(8), "nq {nq} -> {b}");
                seen.insert(b);
            }
            assert_eq!(bucket(max, max), max);
            assert!(seen.len() <= 8 * (usize::BITS - max.leading_zeros()) as usize + 1);
        }
    }
}
