//! The host-driven GPU engines: the generic batching loop of `cohort_engine::batch` over GPU
//! slots, one control thread per GPU by default. A service plugs in through [`GpuBackend`]: how its
//! requests batch (the batch key), how a batch is staged, which kernels run on a stream, how
//! results become answer payloads. Nothing here knows what a service computes. One control
//! thread may serve several GPUs in turn (`GpuEngine::start_shared`, Centaur's one core).
//!
//! - `gpu-direct` (Centaur's CPU-driven design): every request is launched on its own as soon
//!   as a slot is free (batches of one), its copy-in, kernels and copy-out replayed as one CUDA
//!   graph; up to `streams` requests in flight.
//! - `gpu-cohort` (Rhythm / micro-batching / Triton's dynamic batcher): a batch closes at
//!   `max_cohort` requests, when its first request has waited `cohort_timeout`, or at once
//!   while fewer than `keep_busy` batches are in flight (work-conserving); each slot has
//!   its own stream and pinned staging, so copy-in, kernels and copy-out of consecutive
//!   cohorts overlap.

mod packed;
mod slot;

use crate::GpuError;
use bytes::Bytes;
use cohort_engine::batch::{self, BatchBackend, BatchConfig, BatchLane, BatchSlot};
use cohort_engine::{LaneEnds, Metrics};
use cohort_proto::ErrorPayload;
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use packed::PackedRows;
pub use slot::bucket;

/// A service's GPU side on one device.
pub trait GpuBackend: BatchBackend {
    /// The context (device) the backend's data lives on.
    fn context(&self) -> &Arc<CudaContext>;
    /// Staging (pinned) and device buffers for batches of up to `cap` requests, used on
    /// `stream` only. Allocated once per slot at start-up.
    fn stream_buffers(
        &self,
        stream: &Arc<CudaStream>,
        cap: usize,
    ) -> Result<Box<dyn StreamBuffers>, GpuError>;
    /// Device memory the backend holds (the index, weights), for the metrics.
    fn device_bytes(&self) -> usize {
        0
    }
    /// How many batch keys this service's requests can carry at once (a page service: one per
    /// page type). gpu-cohort's default keeps a filling slot for each beside those in flight.
    fn batch_keys(&self) -> usize {
        1
    }
    /// Whether a batch's copies and kernels depend only on (key, rows), so that a captured
    /// CUDA graph can be replayed for every batch of that shape.
    fn graphable(&self) -> bool {
        true
    }
}

/// One slot's buffers.
pub trait StreamBuffers: Send {
    /// Copies request `row` (validated by `batch_key`) into pinned staging.
    fn stage(&mut self, key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload>;
    /// Enqueues copy-in, the kernels and copy-out of rows `0..rows` on `stream`. Rows past the
    /// staged ones (graph buckets pad a batch) hold earlier or zeroed data and must be safe to
    /// compute; their results are never read.
    fn enqueue(&mut self, stream: &Arc<CudaStream>, key: u64, rows: usize) -> Result<(), GpuError>;
    /// Called once the work `enqueue` (or the last `resume`) queued has completed, before
    /// any `answer`: a batch whose second half needs the host in between (a backend call
    /// through the host, Rhythm's memcached) starts that host work here, reports `Waiting`
    /// until it is done - never blocking the control thread, which serves the other slots
    /// meanwhile - then queues the rest on `stream` (`Enqueued`). Most batches are `Done`.
    fn resume(&mut self, _stream: &Arc<CudaStream>) -> Result<Resume, GpuError> {
        Ok(Resume::Done)
    }
    /// Writes row `row`'s answer payload from the copied-out results into `out`.
    fn answer(&mut self, key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload>;
    /// Row `row`'s answer lent from the copied-out results themselves (no copy), where the
    /// buffers can spare it (`BatchSlot::answer_shared`); None: `answer` copies it.
    fn answer_shared(&mut self, _key: u64, _row: usize) -> Option<Result<Bytes, ErrorPayload>> {
        None
    }
}

/// What a slot's batch needs after its queued work completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// The results are in: answer the batch.
    Done,
    /// Host work of the batch is under way: ask again.
    Waiting,
    /// More work was queued on the stream: ask again once it completed.
    Enqueued,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Direct,
    Cohort,
}

impl Mode {
    pub fn engine_name(self) -> &'static str {
        match self {
            Mode::Direct => "gpu-direct",
            Mode::Cohort => "gpu-cohort",
        }
    }
}

#[derive(Debug, Clone)]
pub struct GpuEngineConfig {
    pub mode: Mode,
    /// Largest cohort (gpu-cohort); gpu-direct uses 1.
    pub max_cohort: usize,
    pub cohort_timeout: Duration,
    /// gpu-cohort: a filling cohort also launches while fewer than this many are in flight
    /// (`BatchConfig::keep_busy`; 0 = fixed cohorts: size or timeout only).
    pub keep_busy: usize,
    /// Slots, each with its own stream (= batches staged or in flight at once).
    pub streams: usize,
    /// gpu-cohort: replay one CUDA graph per (cohort-size bucket, batch key) instead of
    /// launching each copy and kernel (gpu-direct always replays its single-request graphs).
    pub graphs: bool,
    /// The serving device's index, the `gpu` label of its metrics (virtual GPUs of one device
    /// share its CUDA ordinal); None: the context's ordinal.
    pub device: Option<usize>,
}

impl GpuEngineConfig {
    /// The defaults of each mode: gpu-direct 8 streams; gpu-cohort three in flight while one
    /// fills per batch key (4 for a service of one key). With fewer slots than keys, a request
    /// of a key that has no filling slot blocks its ring and forces every filling cohort out
    /// at once: a page service's 16 keys on 4 slots made cohorts of a few pages, each taking a
    /// GPU thread's whole page-building time, and capped the served rate near 100 K pages/s.
    pub fn default_streams(mode: Mode, batch_keys: usize) -> usize {
        match mode {
            Mode::Direct => 8,
            Mode::Cohort => batch_keys.max(1) + 3,
        }
    }
}

/// A GPU control thread serving one lane, or several GPUs' lanes in turn
/// ([`GpuEngine::start_shared`]).
pub struct GpuEngine {
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

/// One GPU's part of a control thread: its backend, the lane it serves and its settings.
pub struct GpuUnit {
    pub backend: Arc<dyn GpuBackend>,
    pub lane: LaneEnds,
    pub cfg: GpuEngineConfig,
}

/// A unit's slots, made on the starting thread (allocations fail at start, not later).
struct Prepared {
    backend: Arc<dyn GpuBackend>,
    lane: LaneEnds,
    slots: Vec<Box<dyn BatchSlot>>,
    batch: BatchConfig,
    gpu: usize,
}

impl GpuEngine {
    pub fn start(
        backend: Arc<dyn GpuBackend>,
        lane: LaneEnds,
        cfg: &GpuEngineConfig,
        metrics: Arc<Metrics>,
    ) -> Result<GpuEngine, GpuError> {
        let cfg = cfg.clone();
        Self::start_shared(vec![GpuUnit { backend, lane, cfg }], metrics)
    }

    /// One control thread for every unit (every GPU of the list): Centaur's design, one host
    /// core feeding several GPUs. Each GPU keeps its own lane, slots and streams; the thread
    /// takes a pass over each in turn, so the host CPU spent polling does not grow with the
    /// GPUs. The units' batching settings (cohort size, timeout) must agree.
    pub fn start_shared(units: Vec<GpuUnit>, metrics: Arc<Metrics>) -> Result<GpuEngine, GpuError> {
        assert!(
            !units.is_empty(),
            "a control thread serves at least one GPU"
        );
        let mut prepared = Vec::with_capacity(units.len());
        for u in units {
            prepared.push(Self::prepare(u, &metrics)?);
        }
        let batch = prepared[0].batch.clone();
        if let Some(p) = prepared.iter().find(|p| {
            (p.batch.max_batch, p.batch.timeout, p.batch.keep_busy)
                != (batch.max_batch, batch.timeout, batch.keep_busy)
        }) {
            return Err(GpuError::Invalid(format!(
                "GPU {} batches otherwise than GPU {}: one control thread runs one batching setting",
                p.gpu, prepared[0].gpu
            )));
        }
        let name = match prepared.len() {
            1 => format!("gpu-control-{}", prepared[0].gpu),
            n => format!("gpu-control-{}+{}", prepared[0].gpu, n - 1),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                // The backends live in this thread's frame; the lanes borrow them.
                let backends: Vec<Arc<dyn GpuBackend>> =
                    prepared.iter().map(|p| p.backend.clone()).collect();
                let lanes = prepared
                    .into_iter()
                    .zip(&backends)
                    .map(|(p, b)| BatchLane {
                        lane: p.lane,
                        backend: &**b as &dyn BatchBackend,
                        slots: p.slots,
                    })
                    .collect();
                batch::run_lanes(lanes, &batch, &metrics, &st);
            })
            .map_err(|e| GpuError::Invalid(format!("spawning the control thread: {e}")))?;
        Ok(GpuEngine {
            thread: Some(thread),
            stop,
        })
    }

    fn prepare(u: GpuUnit, metrics: &Metrics) -> Result<Prepared, GpuError> {
        let GpuUnit { backend, lane, cfg } = u;
        let max_batch = match cfg.mode {
            Mode::Direct => 1,
            Mode::Cohort => cfg.max_cohort.max(1),
        };
        let ctx = backend.context().clone();
        let gpu = cfg.device.unwrap_or_else(|| ctx.ordinal());
        metrics
            .gpu_memory_used
            .get_or_create(&cohort_engine::metrics::GpuLabels {
                gpu: gpu.to_string(),
            })
            .inc_by(backend.device_bytes() as i64);
        let graphs = (cfg.graphs || cfg.mode == Mode::Direct) && backend.graphable();
        let mut slots: Vec<Box<dyn BatchSlot>> = Vec::new();
        for _ in 0..cfg.streams.max(1) {
            let stream = ctx.new_stream()?;
            let bufs = backend.stream_buffers(&stream, max_batch)?;
            slots.push(Box::new(slot::GpuSlot::new(
                stream, bufs, max_batch, graphs,
            )));
        }
        // Each slot's buffers are used on its own stream only, and a slot is reused only
        // after its completion event: cudarc's per-buffer event tracking adds driver calls
        // and would put foreign events into captured graphs. The batcher orders the work.
        // SAFETY: see above; nothing else uses this context's buffers concurrently.
        unsafe { ctx.disable_event_tracking() };
        let batch = BatchConfig {
            max_batch,
            timeout: cfg.cohort_timeout,
            // gpu-direct launches every request alone at once anyway.
            keep_busy: cfg.keep_busy,
            stage: "gpu",
        };
        Ok(Prepared {
            backend,
            lane,
            slots,
            batch,
            gpu,
        })
    }

    /// Finishes queued and in-flight work (call after ingress has stopped), then joins.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Page-locked host memory a slot stages into or reads results from, with its address taken
/// once. cudarc's accessors synchronise the buffer's event on every call (two driver calls);
/// at one call per request that capped a control thread near 150K requests/s (measured on
/// the H100). The batcher already orders every access: staging is written only while its
/// slot fills (no copy in flight), results are read only after the slot's event completed.
pub struct Pinned<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> {
    _mem: cudarc::driver::PinnedHostSlice<T>,
    ptr: *mut T,
    len: usize,
}

// SAFETY: the memory is owned by `_mem` and only reached through `&self`/`&mut self`, and a
// slot (with its Pinned buffers) is used by one control thread at a time.
unsafe impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> Send for Pinned<T> {}

impl<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits> Pinned<T> {
    /// Cached pinned memory: for what the host reads after a copy-out, and for what it
    /// writes and reads back (not write-combined: a host read of write-combined memory is an
    /// uncached bus read).
    pub fn for_reads(ctx: &Arc<CudaContext>, len: usize) -> Result<Pinned<T>, GpuError> {
        Self::alloc(ctx, len, 0)
    }

    /// Write-combined pinned memory: for staging the host only writes before a copy-in.
    pub fn for_uploads(ctx: &Arc<CudaContext>, len: usize) -> Result<Pinned<T>, GpuError> {
        Self::alloc(ctx, len, cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED)
    }

    fn alloc(ctx: &Arc<CudaContext>, len: usize, flags: u32) -> Result<Pinned<T>, GpuError> {
        // SAFETY: zeroed below before any use.
        let mut mem = unsafe { ctx.alloc_pinned_with_flags::<T>(len.max(1), flags) }?;
        let ptr = mem.as_mut_ptr()?;
        // SAFETY: ptr holds len.max(1) elements of plain device-representable data; zero
        // bytes are a valid value of every DeviceRepr type used here (numbers).
        unsafe { std::ptr::write_bytes(ptr, 0, len.max(1)) };
        Ok(Pinned {
            _mem: mem,
            ptr,
            len,
        })
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: see the type's comment; the allocation lives as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and &mut self is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}
