//! Echo and spin on the persistent engine (Lynx's micro-benchmarks with the GPU serving its
//! own queues): `kernels/micro_persistent.cu`. Each worker block is one of Lynx's queues.

use super::gpu::Micro;
use super::spin::MAX_SPIN_US;
use cohort_gpu::persistent::{
    one_stage_blocks, persistent_source, PersistentBackend, Prepared, Stage, StageKernel,
};
use cohort_gpu::{load_module, DeviceInfo, GpuError, KernelSource, Prelude};
use cudarc::driver::{CudaContext, CudaModule};
use std::sync::Arc;

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
    ctx: Arc<CudaContext>,
    module: Arc<CudaModule>,
    sms: usize,
}

impl MicroPersistent {
    pub fn new(kind: Micro, dev: &DeviceInfo) -> Result<MicroPersistent, GpuError> {
        let ctx = cohort_gpu::launch::open(dev)?;
        let module = load_module(&ctx, dev, source())?;
        Ok(MicroPersistent {
            kind,
            ctx,
            module,
            sms: dev.sms.max(1) as usize,
        })
    }
}

impl PersistentBackend for MicroPersistent {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn module(&self) -> &Arc<CudaModule> {
        &self.module
    }

    fn prepare(
        &self,
        slots: usize,
        rx_stride: usize,
        blocks: Option<&[usize]>,
    ) -> Result<Prepared, GpuError> {
        // One worker block per SM by default: Lynx's one queue per SM.
        let workers = one_stage_blocks(blocks, self.sms, "echo or spin")?;
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
            pipe_caps: vec![slots],
            // Whole slots: payloads are any size up to the slot's capacity.
            rx_copy: rx_stride,
            keep: Box::new(()),
        })
    }
}
