//! LeNet on the persistent engine (Lynx's persistent LeNet), inside the resident kernel
//! (`kernels/lenet_persistent.cu`; conv2 on the tensor cores or the CUDA cores as `lenet.math`
//! says): no launch per request. `lenet.persistent` picks who works on an image: one worker
//! block (`image`: the most images at once) or a team of [`TEAM`] blocks meeting between
//! layers (`team`: one image answered sooner).

use super::config::{Math, Plan};
use super::gpu::DeviceWeights;
pub use super::kernels::LenetArgs;
use super::kernels::{
    P_THREADS, TEAM, TEAM_STRIDE, TEAM_WORKER, TEAM_WORKER_TC, WORKER, WORKER_TC,
};
use super::model::Weights;
use cohort_gpu::persistent::rt::{addr, BAR_GROUPS};
use cohort_gpu::persistent::{
    one_stage_blocks, rx_copy_bytes, stage_capacity, Ask, Loaded, PersistentBackend, Prepared,
    Stage,
};
use cohort_gpu::{DeviceInfo, GpuError};
use std::sync::Arc;

pub struct LenetPersistent {
    loaded: Loaded,
    weights: Arc<DeviceWeights>,
    sms: usize,
    math: Math,
    plan: Plan,
}

impl LenetPersistent {
    pub fn new(
        dev: &DeviceInfo,
        w: &Weights,
        math: Math,
        plan: Plan,
    ) -> Result<LenetPersistent, GpuError> {
        math.check_device(dev).map_err(GpuError::Invalid)?;
        let loaded = Loaded::open(dev, super::kernels::persistent())?;
        let weights = Arc::new(DeviceWeights::upload(&loaded.ctx, w)?);
        Ok(LenetPersistent {
            loaded,
            weights,
            sms: dev.sms.max(1) as usize,
            math,
            plan,
        })
    }
}

/// The team plan's block count: `asked` (a multiple of [`TEAM`]), or by default as many whole
/// teams as `fit` blocks hold; at most one team per barrier group.
fn team_blocks(asked: Option<usize>, fit: usize) -> Result<usize, GpuError> {
    let most = BAR_GROUPS * TEAM;
    match asked {
        Some(b) if b == 0 || !b.is_multiple_of(TEAM) || b > most => Err(GpuError::Invalid(
            format!("lenet's team plan runs whole teams of {TEAM} blocks, at most {most}; got {b}"),
        )),
        Some(b) => Ok(b),
        None if fit < TEAM => Err(GpuError::Invalid(format!(
            "lenet's team plan needs {TEAM} resident blocks; this GPU holds {fit} beside the ingress"
        ))),
        None => Ok((fit / TEAM).min(BAR_GROUPS) * TEAM),
    }
}

impl PersistentBackend for LenetPersistent {
    fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    fn prepare(&self, ask: Ask) -> Result<Prepared, GpuError> {
        // Two blocks per SM by default (the SM's cores shared between them), fewer where the
        // SMs hold fewer beside the ingress warps.
        let mut stage = Stage {
            kernel: match (self.plan, self.math) {
                (Plan::Image, Math::Tf32x3) => WORKER_TC.name,
                (Plan::Image, Math::Fp32) => WORKER.name,
                (Plan::Team, Math::Tf32x3) => TEAM_WORKER_TC.name,
                (Plan::Team, Math::Fp32) => TEAM_WORKER.name,
            },
            blocks: 1,
            threads: P_THREADS as u32,
            dyn_smem: 0,
            elsewhere: None,
        };
        let fit = stage_capacity(self, &stage)?
            .saturating_sub(2 * cohort_gpu::persistent::MAX_INGRESS_WARPS);
        let s = self.loaded.ctx.default_stream();
        let mut team_mem = None;
        stage.blocks = match self.plan {
            Plan::Image => one_stage_blocks(ask.blocks, (2 * self.sms).min(fit.max(1)), "lenet")?,
            Plan::Team => {
                let asked = match ask.blocks {
                    None => None,
                    Some(&[b]) => Some(b),
                    Some(other) => {
                        return Err(GpuError::Invalid(format!(
                            "lenet has one stage (workers); got {other:?}"
                        )))
                    }
                };
                let n = team_blocks(asked, (2 * self.sms).min(fit))?;
                team_mem = Some(s.alloc_zeros::<u32>(n / TEAM * TEAM_STRIDE)?);
                n
            }
        };
        let rx_copy = rx_copy_bytes("lenet", super::model::IMAGE_BYTES, ask.rx_stride)?;
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
            team: team_mem.as_ref().map_or(0, |m| addr(m, &s)),
        };
        Ok(Prepared {
            args: args.to_svc_args(),
            stages: vec![stage],
            pipe_caps: vec![ask.slots],
            rx_copy,
            keep: Box::new((self.weights.clone(), team_mem)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_team_plan_runs_whole_teams() {
        assert_eq!(TEAM, 7);
        assert_eq!(team_blocks(None, 2 * 132 - 16).unwrap(), 35 * TEAM);
        assert_eq!(team_blocks(None, 10_000).unwrap(), BAR_GROUPS * TEAM);
        assert_eq!(team_blocks(Some(14), 0).unwrap(), 14);
        for bad in [0, 13, (BAR_GROUPS + 1) * TEAM] {
            let e = team_blocks(Some(bad), 264).unwrap_err().to_string();
            assert!(e.contains("whole teams of 7"), "{e}");
        }
        assert!(team_blocks(None, 6)
            .unwrap_err()
            .to_string()
            .contains("needs 7"));
    }
}
