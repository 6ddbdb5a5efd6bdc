//! k-NN on gpu-persistent over an index sharded across the serving devices. Every device's
//! lane is a home: it takes its own requests and answers them whole. Two plans
//! (`knn.persistent_plan`):
//!
//! - **cohort** (default): each home runs the cohort plan (`knn_persistent_cohort.cu`) over
//!   the whole index, reading the lists it holds from its own memory and the others in place
//!   on their devices, over peer access ([`SpreadLists`]): the vectors are stored once across
//!   the set, and every device computes at the cohort plan's rate. Needs peer access between
//!   physical GPUs (reads only).
//! - **per-pair**: Centaur's affinity routing, with gpipes that cross devices. The home's
//!   ingress, filter and reducer run on its own device, as for a whole index; besides, the lane
//!   runs a search stage on every device of the set, each over that device's lists and fed by
//!   a gpipe of its own in the home's memory (`cohort_gpu::persistent::DEVICE_PIPE0 + device`).
//!   The filter sends each probe to the gpipe of the device owning its cell; that device's
//!   search writes the cell's k nearest into the request's partial rows (reserved in the
//!   home's slot before its filter ran) and counts the request's probes down; the last one
//!   queues the home's reducer, which merges as for a whole index. Physical GPUs need peer
//!   access with native atomics (NVLink): the pending counts and the gpipes take atomics from
//!   both devices, at system scope there.
//!
//! Either way answers are the whole index's, and everything a lane's stages write lives in
//! the lane's memory, so a lane restarts alone (per-pair: its stages on other devices stop,
//! restart and are counted with it, `Stage::elsewhere`). Virtual GPUs of one device share its
//! memory.

use super::gpu_ivf::spread::SpreadLists;
use super::gpu_ivf::GpuIvf;
use super::kernels::persistent::FILTER;
use super::persistent::{per_pair_stage, reduce_stage, KnnArgs, KnnPersistent, PersistentPlan};
use cohort_gpu::persistent::rt::addr;
use cohort_gpu::persistent::{
    Ask, Elsewhere, Loaded, PersistentBackend, Prepared, Stage, DEVICE_PIPE0, MAX_STAGE_DEVICES,
};
use cohort_gpu::{DeviceInfo, GpuError};
use cohort_ivf::ivf::placement::Placement;
use cohort_ivf::IvfIndex;
use cudarc::driver::{sys, CudaContext};
use std::sync::Arc;

/// The devices of one sharded index on gpu-persistent, in serving order.
pub struct PersistentShards {
    devices: Vec<KnnPersistent>,
    physical: Vec<usize>,
    placement: Placement,
    plan: PersistentPlan,
    /// Cohort plan: the whole index's layout on each home (empty for the per-pair plan).
    spread: Vec<Arc<SpreadLists>>,
}

impl PersistentShards {
    /// `shards[i]`: device i's lists (placement's of i) with its module. Between physical
    /// GPUs, the peer access the plan needs is enabled, or its absence refused.
    fn new(
        devs: &[DeviceInfo],
        ix: &IvfIndex,
        shards: Vec<KnnPersistent>,
        placement: Placement,
        plan: PersistentPlan,
    ) -> Result<PersistentShards, GpuError> {
        assert_eq!(devs.len(), shards.len(), "one shard per device");
        assert_eq!(
            placement.devices,
            devs.len(),
            "a placement for these devices"
        );
        if plan == PersistentPlan::PerPair && devs.len() > MAX_STAGE_DEVICES {
            return Err(GpuError::Invalid(format!(
                "gpu-persistent's per-pair plan shards an index over at most \
                 {MAX_STAGE_DEVICES} devices; got {}",
                devs.len()
            )));
        }
        for (a, da) in devs.iter().enumerate() {
            for (b, db) in devs.iter().enumerate() {
                if da.physical == db.physical {
                    continue;
                }
                let (from, to) = (&shards[a].ivf.ctx, &shards[b].ivf.ctx);
                match plan {
                    PersistentPlan::PerPair => peer_atomics(from, to, da, db)?,
                    PersistentPlan::Cohort => peer_reads(from, to, da, db)?,
                }
            }
        }
        let spread = match plan {
            PersistentPlan::PerPair => Vec::new(),
            PersistentPlan::Cohort => {
                let ivfs: Vec<&GpuIvf> = shards.iter().map(|k| &*k.ivf).collect();
                SpreadLists::for_set(ix, &ivfs, &placement)?
                    .into_iter()
                    .map(Arc::new)
                    .collect()
            }
        };
        Ok(PersistentShards {
            devices: shards,
            physical: devs.iter().map(|d| d.physical).collect(),
            placement,
            plan,
            spread,
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

/// Peer access from `from` to `to` (two physical GPUs) for kernels that read there (the
/// cohort plan's scans of the peer's lists).
fn peer_reads(
    from: &Arc<CudaContext>,
    to: &Arc<CudaContext>,
    fd: &DeviceInfo,
    td: &DeviceInfo,
) -> Result<(), GpuError> {
    super::gpu_sharded::enable_peer_access(from, to, fd, td).map_err(|e| {
        GpuError::Invalid(format!(
            "gpu-persistent's sharded index reads GPU {}'s lists from GPU {} in place: {e} \
             (or serve knn.placement=shard with gpu-cohort, or replicate the index)",
            td.physical, fd.physical
        ))
    })
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
    fn loaded(&self) -> &Loaded {
        &self.me().loaded
    }

    fn prepare(&self, ask: Ask) -> Result<Prepared, GpuError> {
        let rx_copy = self.me().rx_copy(ask.rx_stride)?;
        match self.set.plan {
            PersistentPlan::Cohort => {
                let spread = &self.set.spread[self.home];
                self.me()
                    .prepare_cohort(ask.slots, rx_copy, ask.blocks, Some(spread))
            }
            PersistentPlan::PerPair => self.prepare_per_pair(ask.slots, rx_copy, ask.blocks),
        }
    }
}

impl ShardedPersistent {
    /// The per-pair plan's stages with the search stage once per device (`blocks`: filter,
    /// search per device, reduce).
    fn prepare_per_pair(
        &self,
        slots: usize,
        rx_copy: usize,
        blocks: Option<&[usize]>,
    ) -> Result<Prepared, GpuError> {
        let me = self.me();
        let set = &self.set;
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
                    ctx: dev.loaded.ctx.clone(),
                    module: dev.loaded.module.clone(),
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

/// Builds the set from each device's shard (`ivfs[i]`: `placement`'s lists of device i, cut
/// from `ix`), on `plan` with `groups` block groups (cohort plan).
pub fn shards(
    devs: &[DeviceInfo],
    ix: &IvfIndex,
    ivfs: Vec<GpuIvf>,
    placement: Placement,
    plan: PersistentPlan,
    groups: usize,
) -> Result<Arc<PersistentShards>, GpuError> {
    let shards = devs
        .iter()
        .zip(ivfs)
        .map(|(d, ivf)| KnnPersistent::new(ivf, d, plan).and_then(|k| k.with_groups(groups)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(PersistentShards::new(
        devs, ix, shards, placement, plan,
    )?))
}
