//! LeNet on the persistent engine (Lynx's persistent LeNet): each worker block runs the whole
//! network on one image at a time, inside the resident kernel (`kernels/lenet_persistent.cu`;
//! conv2 on the tensor cores or the CUDA cores as `lenet.math` says): no launch per request.

use super::config::Math;
use super::gpu::DeviceWeights;
use super::kernels::P_THREADS;
use super::model::Weights;
use cohort_gpu::persistent::rt::addr;
use cohort_gpu::persistent::{
    one_stage_blocks, rx_copy_bytes, stage_capacity, PersistentBackend, Prepared, Stage,
};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cudarc::driver::{CudaContext, CudaModule};
use std::sync::Arc;

cohort_gpu::svc_args! {
    /// The worker's argument block: `struct SvcArgs` of `kernels/lenet_persistent.cu` (the
    /// weights' device addresses).
    pub struct LenetArgs { w1, b1, w2, b2, f1w, f1b, f2w, f2b }
}

pub struct LenetPersistent {
    ctx: Arc<CudaContext>,
    module: Arc<CudaModule>,
    weights: Arc<DeviceWeights>,
    sms: usize,
    math: Math,
}

impl LenetPersistent {
    pub fn new(dev: &DeviceInfo, w: &Weights, math: Math) -> Result<LenetPersistent, GpuError> {
        math.check_device(dev).map_err(GpuError::Invalid)?;
        let ctx = cohort_gpu::launch::open(dev)?;
        let module = load_module(&ctx, dev, super::kernels::persistent())?;
        let weights = Arc::new(DeviceWeights::upload(&ctx, w)?);
        Ok(LenetPersistent {
            ctx,
            module,
            weights,
            sms: dev.sms.max(1) as usize,
            math,
        })
    }
}

impl PersistentBackend for LenetPersistent {
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
        // Two workers per SM by default (one image each, the SM's cores shared between them),
        // fewer where the SMs hold fewer beside the ingress warps.
        let mut stage = Stage {
            kernel: match self.math {
                Math::Tf32x3 => "lenet_p_worker_tc",
                Math::Fp32 => "lenet_p_worker",
            },
            blocks: 1,
            threads: P_THREADS as u32,
            dyn_smem: 0,
        };
        let fit = stage_capacity(self, &stage)?
            .saturating_sub(2 * cohort_gpu::persistent::MAX_INGRESS_WARPS)
            .max(1);
        stage.blocks = one_stage_blocks(blocks, (2 * self.sms).min(fit), "lenet")?;
        let rx_copy = rx_copy_bytes("lenet", super::model::IMAGE_BYTES, rx_stride)?;
        let s = self.ctx.default_stream();
        let w = &self.weights;
        let args = LenetArgs {
            w1: addr(&w.w1, &s),
            b1: addr(&w.b1, &s),
            w2: addr(&w.w2, &s),
            b2: addr(&w.b2, &s),
            f1w: addr(&w.f1w, &s),
            f1b: addr(&w.f1b, &s),
            f2w: addr(&w.f2w, &s),
            f2b: addr(&w.f2b, &s),
        };
        Ok(Prepared {
            args: args.to_svc_args(),
            stages: vec![stage],
            pipe_caps: [slots, 0, 0],
            rx_copy,
            keep: Box::new(self.weights.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_argument_block_matches_the_cuda_struct() {
        cohort_gpu::persistent::svc_args::check_against_cuda(
            super::LenetArgs::FIELDS,
            include_str!("kernels/lenet_persistent.cu"),
        )
        .unwrap();
    }
}
