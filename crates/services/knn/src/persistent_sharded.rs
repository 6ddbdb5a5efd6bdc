//! k-NN on gpu-persistent over an index sharded across the serving devices: Centaur's
//! affinity routing, with gpipes that cross devices.
//!
//! Every device's lane is a home: its ingress, filter and reducer run on its own device, as for
//! a whole index (the per-pair plan). Besides, the lane runs a search stage on every device
//! of the set, each over that device's lists and fed by a gpipe of its own in the home's
//! memory (`cohort_gpu::persistent::DEVICE_PIPE0 + device`). The filter sends each probe to
//! the gpipe of the device owning its cell; that device's search writes the cell's k nearest
//! into the request's partial rows (reserved in the home's slot before its filter ran) and
//! counts the request's probes down; the last one queues the home's reducer, which merges as
//! for a whole index. So answers are the whole index's.
//!
//! Everything a lane's stages touch lives in the lane's memory, so a lane restarts alone: its
//! stages on other devices stop, restart and are counted with it (`Stage::elsewhere`).
//! Virtual GPUs of one device share its memory; physical GPUs need peer access with native
//! atomics (NVLink): the pending counts and the gpipes take atomics from both devices, at
//! system scope there.

use super::kernels::persistent::FILTER;
use super::persistent::{per_pair_stage, reduce_stage, KnnArgs, KnnPersistent, PersistentPlan};
use cohort_gpu::persistent::rt::addr;
use cohort_gpu::persistent::{
    Elsewhere, PersistentBackend, Prepared, Stage, DEVICE_PIPE0, MAX_STAGE_DEVICES,
};
use cohort_gpu::{DeviceInfo, GpuError};
use cohort_knn::ivf::placement::Placement;
use cudarc::driver::{sys, CudaContext, CudaModule};
use std::sync::Arc;

/// The devices of one sharded index on gpu-persistent, in serving order.
pub struct PersistentShards {
    devices: Vec<KnnPersistent>,
    physical: Vec<usize>,
    placement: Placement,
}

impl PersistentShards {
    /// `shards[i]`: device i's lists (placement's of i) with its module, per-pair plan.
    /// Between physical GPUs, peer access with native atomics is enabled or its absence
    /// refused.
    pub fn new(
        devs: &[DeviceInfo],
        shards: Vec<KnnPersistent>,
        placement: Placement,
    ) -> Result<PersistentShards, GpuError> {
        assert_eq!(devs.len(), shards.len(), "one shard per device");
        assert_eq!(
            placement.devices,
            devs.len(),
            "a placement for these devices"
        );
        if devs.len() > MAX_STAGE_DEVICES {
            return Err(GpuError::Invalid(format!(
                "gpu-persistent shards an index over at most {MAX_STAGE_DEVICES} devices; got {}",
                devs.len()
            )));
        }
        for (a, da) in devs.iter().enumerate() {
            for (b, db) in devs.iter().enumerate() {
                if da.physical != db.physical {
                    peer_atomics(&shards[a].ivf.ctx, &shards[b].ivf.ctx, da, db)?;
                }
            }
        }
        Ok(PersistentShards {
            devices: shards,
            physical: devs.iter().map(|d| d.physical).collect(),
            placement,
        })
    }

    /// The persistent backend of the lane of device `home`.
    pub fn backend(self: &Arc<Self>, home: usize) -> ShardedPersistent {
        assert!(home < self.devices.len());
        ShardedPersistent {
            home,
            set: self.clone(),
        }
    }

    /// Search blocks per (lane, device) by default: a device's share of the per-pair
    /// default's search blocks (twice its SMs), split over the lanes that search there.
    fn default_search_blocks(&self, d: usize) -> usize {
        (2 * self.devices[d].sms / self.devices.len()).max(1)
    }
}

/// Peer access from `from` to `to` (two physical GPUs) for kernels that take atomics there.
fn peer_atomics(
    from: &Arc<CudaContext>,
    to: &Arc<CudaContext>,
    fd: &DeviceInfo,
    td: &DeviceInfo,
) -> Result<(), GpuError> {
    let mut atomics = 0i32;
    // SAFETY: out-parameter; ordinals of devices the driver listed.
    let r = unsafe {
        sys::cuDeviceGetP2PAttribute(
            &mut atomics,
            sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
            fd.physical as i32,
            td.physical as i32,
        )
    };
    if r != sys::cudaError_enum::CUDA_SUCCESS || atomics == 0 {
        return Err(GpuError::Invalid(format!(
            "gpu-persistent's sharded index needs native atomics from GPU {} on GPU {}'s memory \
             (peer access over NVLink), which this machine lacks: serve knn.placement=shard \
             with gpu-cohort, or replicate the index",
            fd.physical, td.physical
        )));
    }
    super::gpu_sharded::enable_peer_access(from, to, fd, td)
}

/// The lane of one home device over a [`PersistentShards`].
pub struct ShardedPersistent {
    home: usize,
    set: Arc<PersistentShards>,
}

impl ShardedPersistent {
    fn me(&self) -> &KnnPersistent {
        &self.set.devices[self.home]
    }
}

/// What a sharded lane's argument blocks point to beyond the per-pair buffers.
#[allow(dead_code)]
struct ShardedKeep {
    per_pair: super::persistent::PerPairBuffers,
    owners: cudarc::driver::CudaSlice<u32>,
}

impl PersistentBackend for ShardedPersistent {
    fn context(&self) -> &Arc<CudaContext> {
        &self.me().ivf.ctx
    }

    fn module(&self) -> &Arc<CudaModule> {
        &self.me().module
    }

    /// The per-pair plan's stages with the search stage once per device (`blocks`: filter,
    /// search per device, reduce).
    fn prepare(
        &self,
        slots: usize,
        rx_stride: usize,
        blocks: Option<&[usize]>,
    ) -> Result<Prepared, GpuError> {
        let me = self.me();
        let set = &self.set;
        let rx_copy = me.rx_copy(rx_stride)?;
        let b = me.per_pair_blocks(blocks)?;
        let (base, per_pair) = me.per_pair_state(slots, b[0])?;
        let s = me.ivf.ctx.new_stream()?;
        let owners: Vec<u32> = set.placement.owner.iter().map(|&o| o as u32).collect();
        let owners = s.clone_htod(&owners)?;
        s.synchronize()?;
        let home_args = KnnArgs {
            owners: addr(&owners, &s),
            search_pipe: (DEVICE_PIPE0 + self.home) as u64,
            ..base
        };
        let mut stages = vec![per_pair_stage(FILTER.name, b[0]), reduce_stage(b[2])];
        // Tasks a device's gpipe can hold: nprobe per request at most, and no more than the
        // lists it owns.
        let mut pipe_caps = vec![slots, 1, slots];
        for (d, dev) in set.devices.iter().enumerate() {
            let lists = set.placement.lists_of(d).len().clamp(1, me.max_probe());
            pipe_caps.push(slots * lists);
            let search_blocks = match blocks {
                Some(_) => b[1],
                None => set.default_search_blocks(d),
            };
            let mut stage: Stage = per_pair_stage(dev.search_kernel(), search_blocks);
            if d != self.home {
                // That device's lists, searched on its SMs, into this lane's slots.
                let ds = dev.ivf.ctx.new_stream()?;
                let v = dev.ivf.device_view(&ds);
                let args = KnnArgs {
                    vectors: v.vectors,
                    ids: v.ids,
                    offsets: v.offsets,
                    search_pipe: (DEVICE_PIPE0 + d) as u64,
                    ..home_args
                };
                stage.elsewhere = Some(Elsewhere {
                    ctx: dev.ivf.ctx.clone(),
                    module: dev.module.clone(),
                    args: args.to_svc_args(),
                    other_physical: set.physical[d] != set.physical[self.home],
                });
            }
            stages.push(stage);
        }
        tracing::info!(
            home = self.home,
            devices = set.devices.len(),
            stages = ?stages.iter().map(|s| format!("{}x{}", s.kernel, s.blocks)).collect::<Vec<_>>(),
            "k-NN gpu-persistent: sharded lane"
        );
        Ok(Prepared {
            args: home_args.to_svc_args(),
            stages,
            pipe_caps,
            rx_copy,
            keep: Box::new(ShardedKeep { per_pair, owners }),
        })
    }
}

/// Builds the set from each device's shard, per-pair plan (the plan a sharded index runs on
/// this engine: its search tasks are what is routed between devices).
pub fn shards(
    devs: &[DeviceInfo],
    ivfs: Vec<super::gpu_ivf::GpuIvf>,
    placement: Placement,
    plan: PersistentPlan,
) -> Result<Arc<PersistentShards>, GpuError> {
    if plan != PersistentPlan::PerPair {
        tracing::info!("knn.placement=shard on gpu-persistent runs the per-pair plan");
    }
    let shards = devs
        .iter()
        .zip(ivfs)
        .map(|(d, ivf)| KnnPersistent::new(ivf, d, PersistentPlan::PerPair))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(PersistentShards::new(devs, shards, placement)?))
}
