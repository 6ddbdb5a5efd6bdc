//! `gpu-persistent` (Centaur, Lynx): after set-up the host does nothing per request beyond
//! network I/O and copying messages into rings; the GPU receives, schedules, computes and
//! answers by itself.
//!
//! - Request rings (one per ingress, built by `cohort_engine::wire_in`) live in mapped host
//!   memory ([`MappedMemory`]); an ingress writes a request there exactly as for any engine.
//! - On the GPU (kernels/persistent.cuh, persistent_ingress.cuh): ingress warps (one per RX
//!   ring, up to `MAX_INGRESS_WARPS`) poll the RX rings, reserves a slot per request, copies it in and hands it to the service's
//!   first stage; worker blocks per stage pass tasks through gpipes; the last stage writes
//!   the answer into a TX ring in mapped memory.
//! - On the host ([`egress`]): one thread per GPU (or per `lanes_per_thread` GPUs) drains a TX
//!   ring into the ordinary answer rings (waking the ingress), watches progress, and restarts
//!   the kernels when they stop making progress; with `egress_threads` above 1 each further
//!   TX ring has a thread of its own ([`drain`]) (the requests they held are answered INTERNAL by the ingresses; none is
//!   lost, late answers are dropped as stale). A fault (a kernel error) poisons the CUDA
//!   context: the lane then stops and the ingresses answer everything it held INTERNAL.
//!
//! A service plugs in through [`PersistentBackend`]: its module (compiled with the runtime by
//! [`persistent_source`]), its argument block and its stages.

mod drain;
mod egress;
pub mod mapped;
pub mod profile;
pub mod rt;
pub mod svc_args;

use crate::prelude::{KernelSource, Prelude};
use crate::GpuError;
use cohort_engine::LaneEnds;
use cudarc::driver::{CudaContext, CudaModule};
pub use mapped::MappedMemory;
pub use rt::{SvcArgs, DEVICE_PIPE0, MAX_STAGE_DEVICES, PIPES};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
pub use svc_args::StageKernel;

/// Ingress warps at most (one per RX ring up to this many; ring r belongs to warp r % warps).
/// One warp copying k-NN requests over the bus topped out at ~480K requests/s on an H200.
pub const MAX_INGRESS_WARPS: usize = 8;

/// One kind of worker block.
#[derive(Debug, Clone)]
pub struct Stage {
    /// Kernel name (`extern "C"`, signature `(PRt, SvcArgs)`).
    pub kernel: &'static str,
    pub blocks: usize,
    pub threads: u32,
    pub dyn_smem: u32,
    /// None: on the lane's device, with the lane's argument block.
    pub elsewhere: Option<Elsewhere>,
}

/// A stage that runs on another device than its lane's: a service whose data is split over
/// devices (knn's sharded index) searches each device's part on that device's SMs. The stage
/// belongs to the lane all the same: it polls the lane's gpipes (in the lane's memory), is
/// launched, stopped and restarted with the lane's kernels, and counts in its start check.
#[derive(Clone)]
pub struct Elsewhere {
    pub ctx: Arc<CudaContext>,
    /// The service's module loaded on that device.
    pub module: Arc<CudaModule>,
    /// The stage's own argument block (that device's buffers).
    pub args: SvcArgs,
    /// On another physical GPU than the lane's (peer memory, system-scope orders), not a
    /// virtual GPU of the same one.
    pub other_physical: bool,
}

impl std::fmt::Debug for Elsewhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elsewhere")
            .field("gpu", &self.ctx.ordinal())
            .field("other_physical", &self.other_physical)
            .finish()
    }
}

/// What a service's backend hands the engine at start.
pub struct Prepared {
    pub args: SvcArgs,
    pub stages: Vec<Stage>,
    /// Bound on the tasks each gpipe the service uses can hold at once, given the slot
    /// count, in order (at most `PIPES`).
    pub pipe_caps: Vec<usize>,
    /// Bytes of an RX slot the ingress warp copies (header included, a multiple of 16).
    pub rx_copy: usize,
    /// Device buffers the argument block points to, kept alive with the engine.
    pub keep: Box<dyn std::any::Any + Send>,
}

/// A persistent backend's device and code: the context, and the module (compiled by
/// [`persistent_source`]) holding `cohort_ingress`, `p_reset` and the service's stages.
#[derive(Clone)]
pub struct Loaded {
    pub ctx: Arc<CudaContext>,
    pub module: Arc<CudaModule>,
}

impl Loaded {
    /// `source` on `dev`, in a context of its own (a backend per lane).
    pub fn open(dev: &crate::DeviceInfo, source: &KernelSource) -> Result<Loaded, GpuError> {
        let ctx = crate::launch::open(dev)?;
        Self::on(ctx, dev, source)
    }

    /// `source` on `dev` in `ctx` (where the backend's data already lives).
    pub fn on(
        ctx: Arc<CudaContext>,
        dev: &crate::DeviceInfo,
        source: &KernelSource,
    ) -> Result<Loaded, GpuError> {
        let module = crate::load_module(&ctx, dev, source)?;
        Ok(Loaded { ctx, module })
    }
}

/// What the engine asks a backend to prepare for.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// Requests in flight on the GPU at once.
    pub slots: usize,
    /// Bytes of an RX ring slot (the largest request the engine carries, with its header).
    pub rx_stride: usize,
    /// The stage block counts asked for; None for the backend's default.
    pub blocks: Option<&'a [usize]>,
}

pub trait PersistentBackend: Send + Sync {
    fn loaded(&self) -> &Loaded;
    /// Allocates per-slot buffers for the slots asked for and plans the stages.
    fn prepare(&self, ask: Ask) -> Result<Prepared, GpuError>;
}

#[derive(Debug, Clone)]
pub struct PersistentConfig {
    /// Requests in flight on the GPU at once (slots); more wait in the RX rings.
    pub slots: usize,
    /// Worker blocks per stage, in the service's stage order (None: the backend's default).
    pub blocks: Option<Vec<usize>>,
    /// Tasks a worker takes from its gpipe at once (batching inside the GPU).
    pub batch: usize,
    /// A GPU holding requests without answering any, or taking none waiting, for this long
    /// is restarted.
    pub watchdog: Duration,
    pub tx_slots: usize,
    /// Host threads that move a lane's answers from the GPU to the ingresses, a TX ring each
    /// (at most one per ingress and `rt::MAX_TX`): one thread moves about 2-3 M answers/s.
    /// The first TX ring is drained by the egress thread (shared by `lanes_per_thread`
    /// lanes), each further one by a thread of its own.
    pub egress_threads: usize,
    /// Lanes (GPUs) one egress thread serves in turn (Centaur: one host core for many GPUs).
    pub lanes_per_thread: usize,
    /// Answers whose steps are stamped on the GPU and reported at shutdown (0: off; stamping
    /// reads the GPU clock several times per request).
    pub profile: usize,
}

impl Default for PersistentConfig {
    fn default() -> Self {
        PersistentConfig {
            slots: 2048,
            blocks: None,
            batch: 1,
            watchdog: Duration::from_secs(1),
            tx_slots: 8192,
            egress_threads: 1,
            lanes_per_thread: 1,
            profile: 0,
        }
    }
}

/// Counters of one engine lane, readable while it runs.
#[derive(Debug, Default)]
pub struct LaneStats {
    /// Requests the GPU took from the RX rings (as the egress thread last saw them).
    pub taken: AtomicU64,
    /// Answers moved to the ingresses.
    pub answered: AtomicU64,
    /// Requests a restart lost (the ingresses answered them INTERNAL): never answered here.
    pub forgiven: AtomicU64,
    pub restarts: AtomicU64,
    pub faults: AtomicU64,
    /// Where the time went (with `PersistentConfig::profile`), set at shutdown.
    pub profile: std::sync::Mutex<Option<profile::Profile>>,
}

impl LaneStats {
    /// Requests the GPU has taken and not answered.
    pub fn holding(&self) -> u64 {
        let done = self.answered.load(Ordering::Acquire) + self.forgiven.load(Ordering::Acquire);
        self.taken.load(Ordering::Acquire).saturating_sub(done)
    }
}

/// The persistent kernels of one GPU, or of several, and the egress thread that serves them.
pub struct PersistentEngine {
    /// The egress thread; it returns each lane's GPU state, kernels stopped, not yet freed.
    thread: Option<JoinHandle<Vec<Option<egress::Egress>>>>,
    stop: Arc<AtomicBool>,
    /// One per lane the thread serves, in lane order.
    pub stats: Vec<Arc<LaneStats>>,
}

impl PersistentEngine {
    /// Launches the kernels for the lane's request rings (which must be in mapped memory of
    /// the backend's device) and starts the egress thread.
    pub fn start(
        backend: Arc<dyn PersistentBackend>,
        lane: LaneEnds,
        cfg: &PersistentConfig,
    ) -> Result<PersistentEngine, GpuError> {
        let mut cfg = cfg.clone();
        cfg.lanes_per_thread = 1;
        let mut v = Self::start_all(vec![(backend, lane)], &cfg)?;
        Ok(v.pop().expect("one lane, one engine"))
    }

    /// Engines for several lanes whose devices may be one (virtual GPUs: groups of SMs of one
    /// GPU): every one set up before any kernel is launched, since set-up on a device (module
    /// loads, allocations) can wait forever on persistent kernels resident there (measured on
    /// the H200: a second group's set-up after the first group's launch never finished).
    /// Consecutive lanes share an egress thread, `cfg.lanes_per_thread` each. If one fails,
    /// those already started are stopped before the error is returned.
    pub fn start_all(
        lanes: Vec<(Arc<dyn PersistentBackend>, LaneEnds)>,
        cfg: &PersistentConfig,
    ) -> Result<Vec<PersistentEngine>, GpuError> {
        let per_thread = cfg.lanes_per_thread.max(1);
        // Every lane set up before any launch, in groups of `per_thread` that share an egress
        // thread and its stop flag.
        let mut groups = Vec::with_capacity(lanes.len().div_ceil(per_thread));
        let mut lanes = lanes.into_iter().peekable();
        while lanes.peek().is_some() {
            let stop = Arc::new(AtomicBool::new(false));
            let mut group = Vec::with_capacity(per_thread);
            for (backend, lane) in lanes.by_ref().take(per_thread) {
                let stats = Arc::new(LaneStats::default());
                let e = egress::Egress::set_up(backend, lane, cfg, stop.clone(), stats.clone())?;
                group.push((e, stats));
            }
            groups.push((stop, group));
        }
        let mut started: Vec<PersistentEngine> = Vec::with_capacity(groups.len());
        for (stop, group) in groups {
            let stats: Vec<_> = group.iter().map(|(_, st)| st.clone()).collect();
            let mut launched = Vec::with_capacity(group.len());
            let mut failed = None;
            for (e, _) in group {
                if failed.is_some() {
                    // Not launched: dropped (freed) as set up.
                    continue;
                }
                match e.launched() {
                    Ok(e) => launched.push(e),
                    Err(err) => failed = Some(err),
                }
            }
            let name = match launched.len() {
                0 | 1 => "gpu-persistent".to_string(),
                n => format!("gpu-persist-x{n}"),
            };
            let thread = std::thread::Builder::new()
                .name(name)
                .spawn(move || egress::run_all(launched))
                .map_err(|e| GpuError::Invalid(format!("spawning the egress thread: {e}")));
            match (thread, failed) {
                (Ok(thread), None) => started.push(PersistentEngine {
                    thread: Some(thread),
                    stop,
                    stats,
                }),
                (thread, failed) => {
                    // Those of this group that launched stop with the others.
                    if let Ok(thread) = thread {
                        started.push(PersistentEngine {
                            thread: Some(thread),
                            stop,
                            stats,
                        });
                    }
                    PersistentEngine::shutdown_all(started);
                    return Err(failed.unwrap_or_else(|| {
                        GpuError::Invalid("spawning the egress thread failed".into())
                    }));
                }
            }
        }
        Ok(started)
    }

    /// Shuts every engine down together: each is told to stop, every one's kernels stop, and
    /// only then is any GPU state freed. Freeing waits for every kernel of the device, and
    /// the driver holds other threads' calls meanwhile, so engines sharing a device (virtual
    /// GPUs) that freed while another had not yet stopped its kernels waited on each other
    /// forever (measured on the H200: a run on two or more groups never ended).
    pub fn shutdown_all(mut engines: Vec<PersistentEngine>) {
        for e in &engines {
            e.stop.store(true, Ordering::Release);
        }
        let states: Vec<_> = engines.iter_mut().map(PersistentEngine::join).collect();
        drop(states);
    }

    /// Serves what is queued (bounded wait), then stops the kernels and frees the GPU state.
    pub fn shutdown(self) {
        PersistentEngine::shutdown_all(vec![self]);
    }

    /// Stops the egress thread and takes its lanes' GPU state (kernels stopped) from it.
    fn join(&mut self) -> Vec<egress::Egress> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .map(|v| v.into_iter().flatten().collect())
            .unwrap_or_default()
    }
}

impl Drop for PersistentEngine {
    fn drop(&mut self) {
        drop(self.join());
    }
}

/// The worker blocks of a service whose persistent kernel has one stage: the one count asked
/// for (`--stages N`, at least 1), or `default`.
pub fn one_stage_blocks(
    blocks: Option<&[usize]>,
    default: usize,
    service: &str,
) -> Result<usize, GpuError> {
    match blocks {
        None => Ok(default),
        Some(&[w]) if w > 0 => Ok(w),
        Some(other) => Err(GpuError::Invalid(format!(
            "{service} has one stage (workers, at least 1); got {other:?}"
        ))),
    }
}

/// The bytes of an RX slot the ingress copies for a request of at most `payload` bytes: the
/// slot header and the payload, rounded up to 16 (the copy's unit); an error naming
/// `service` where the engine's slots (`rx_stride` bytes) are smaller. A larger request
/// (answered BAD_REQUEST) only needs its header read.
pub fn rx_copy_bytes(service: &str, payload: usize, rx_stride: usize) -> Result<usize, GpuError> {
    let copy = (cohort_mq::SLOT_HEADER_BYTES + payload).next_multiple_of(16);
    if copy > rx_stride {
        return Err(GpuError::Invalid(format!(
            "{service}'s requests need RX slots of {copy} bytes; the engine's are {rx_stride}"
        )));
    }
    Ok(copy)
}

/// How many blocks of `stage` the backend's GPU holds at once (nothing else running): the
/// unit of `PersistentConfig::blocks` sizing.
pub fn stage_capacity(backend: &dyn PersistentBackend, stage: &Stage) -> Result<usize, GpuError> {
    let loaded = backend.loaded();
    let f = egress::load_stage(&loaded.module, stage)?;
    egress::capacity(&loaded.ctx, &f, stage)
}

/// A service's persistent module: the runtime's constants and the service's `prelude`, the
/// mqueue layout, the service's `library` (device functions its stages call), the runtime
/// (`kernels/persistent.cuh`), the service's `stages` (which define its `SvcArgs` and stage
/// kernels), the ingress warp. The runtime includes nothing of any service. `stage_kernels`
/// declares every stage kernel the files export (`StageKernel::checked`): the unit ends with
/// their block's layout as `static_assert`s, and the kernel check holds its exports to them
/// and the runtime's own kernels.
pub fn persistent_source(
    name: &'static str,
    prelude: &Prelude,
    library: &[(&'static str, &'static str)],
    stages: &[(&'static str, &'static str)],
    stage_kernels: Vec<(&'static str, crate::launch::ArgsLayout)>,
) -> &'static KernelSource {
    static MQ: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    let mq = MQ.get_or_init(|| {
        let text = include_str!("../../../mq/include/cohort_mqueue.h").replace(
            "#include <stdint.h>",
            "typedef unsigned char uint8_t;\ntypedef unsigned short uint16_t;\n\
             typedef unsigned int uint32_t;\ntypedef unsigned long long uint64_t;",
        );
        Box::leak(text.into_boxed_str())
    });
    let mut files = vec![("cohort_mqueue.h", *mq)];
    files.extend_from_slice(library);
    files.push((
        "persistent.cuh",
        include_str!("../../kernels/persistent.cuh"),
    ));
    files.extend_from_slice(stages);
    files.push((
        "persistent_ingress.cuh",
        include_str!("../../kernels/persistent_ingress.cuh"),
    ));
    static LAYOUT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    files.push((
        "rt layout (rt.rs)",
        LAYOUT.get_or_init(|| Box::leak(rt::layout_asserts().into_boxed_str())),
    ));
    let mut typed = rt::runtime_kernels();
    typed.extend(stage_kernels);
    KernelSource::assemble_typed(name, &rt::prelude().and(prelude), &files, typed)
}

#[cfg(test)]
mod rx_copy_tests {
    use super::rx_copy_bytes;
    use cohort_mq::SLOT_HEADER_BYTES;

    #[test]
    fn the_copy_is_header_and_payload_rounded_to_16_and_must_fit_the_slot() {
        let want = (SLOT_HEADER_BYTES + 784).next_multiple_of(16);
        assert_eq!(rx_copy_bytes("lenet", 784, 4096).unwrap(), want);
        assert_eq!(want % 16, 0);
        assert!(want >= SLOT_HEADER_BYTES + 784);
        assert_eq!(rx_copy_bytes("lenet", 784, want).unwrap(), want);
        let e = rx_copy_bytes("lenet", 784, want - 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("lenet") && e.contains(&want.to_string()), "{e}");
    }
}
