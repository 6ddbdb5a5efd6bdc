//! Echo and spin on the persistent engine (Lynx's micro-benchmarks with the GPU serving its
//! own queues): `kernels/micro_persistent.cu`. Each worker block is one of Lynx's queues.

use super::gpu::Micro;
use super::spin::MAX_SPIN_US;
use cohort_gpu::persistent::{
    one_stage_blocks, persistent_source, Ask, Loaded, PersistentBackend, Prepared, Stage,
    StageKernel,
};
use cohort_gpu::{DeviceInfo, GpuError, KernelSource, Prelude};

/// The module's source: the persistent runtime around `micro_persistent.cu`.
pub fn source() -> &'static KernelSource {
    static S: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        persistent_source(
            "micro_persistent.cu",
            &Prelude::new("crates/services/micro/src/persistent.rs"),
            &[],
            &[(
                "micro_persistent.cu",
                include_str!("kernels/micro_persistent.cu"),
            )],
            vec![WORKER.checked()],
        )
    })
}

cohort_gpu::svc_args! {
    /// The worker's argument block: `struct SvcArgs` of `kernels/micro_persistent.cu`.
    pub struct MicroArgs { spin, max_spin_us }
}

/// The one stage: a worker block per queue, echoing (or spinning, then echoing).
const WORKER: StageKernel<MicroArgs> = StageKernel::new("micro_p_worker");

pub struct MicroPersistent {
    kind: Micro,
    loaded: Loaded,
    sms: usize,
}

impl MicroPersistent {
    pub fn new(kind: Micro, dev: &DeviceInfo) -> Result<MicroPersistent, GpuError> {
        Ok(MicroPersistent {
            kind,
            loaded: Loaded::open(dev, source())?,
            sms: dev.sms.max(1) as usize,
        })
    }
}

impl PersistentBackend for MicroPersistent {
    fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    fn prepare(&self, ask: Ask) -> Result<Prepared, GpuError> {
        // One worker block per SM by default: Lynx's one queue per SM.
        let workers = one_stage_blocks(ask.blocks, self.sms, "echo or spin")?;
        Ok(Prepared {
            args: MicroArgs {
                spin: (self.kind == Micro::Spin) as u64,
                max_spin_us: MAX_SPIN_US as u64,
            }
            .to_svc_args(),
            stages: vec![Stage {
                kernel: WORKER.name,
                blocks: workers,
                threads: 128,
                dyn_smem: 0,
                elsewhere: None,
            }],
            pipe_caps: vec![ask.slots],
            // Whole slots: payloads are any size up to the slot's capacity.
            rx_copy: ask.rx_stride,
            keep: Box::new(()),
        })
    }
}
