//! k-NN on the persistent engine: the index already uploaded for the GPU engines
//! (`GpuIvf`) and one of two plans, both answering as the CPU twins:
//!
//! - [`PersistentPlan::Cohort`] (default; kernels/knn_persistent_cohort.cu): one kernel whose
//!   blocks take every request waiting as a cohort and run gpu-cohort's tiled plan on it in
//!   phases (batching inside the GPU: each probed cell is read once per group of queries).
//! - [`PersistentPlan::PerPair`] (kernels/knn_persistent.cu): filter, search and reduce
//!   blocks passing (request, probe) tasks through gpipes; a block per task.

use super::gpu_ivf::spread::SpreadLists;
use super::gpu_ivf::{GpuIvf, Precision, DEFAULT_CANDIDATE_FLOATS};
pub use super::kernels::persistent::KnnArgs;
use super::kernels::persistent::{COHORT, FILTER, REDUCE, SEARCH};
use super::kernels::{BLOCK, GPU_MAX_CANDIDATES, SEL_MAX};
use cohort_gpu::persistent::rt::{addr, BAR_GROUPS};
use cohort_gpu::persistent::{stage_capacity, Ask, Loaded, PersistentBackend, Prepared, Stage};
use cohort_gpu::{DeviceInfo, GpuError};
use cohort_service_api::config::named_enum;
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;

named_enum! {
    /// How the persistent kernels compute k-NN (`knn.persistent_plan`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum PersistentPlan ("persistent plan") {
        #[default]
        Cohort = "cohort",
        PerPair = "per-pair",
    }
}

/// Largest cohort the cohort plan takes at once (its buffers are sized for it): past this,
/// the tiled plan's reuse of a cell across queries no longer grows (gpu-cohort measures its
/// best at 8192).
const COHORT_MAX: usize = 8192;
/// Bound on the cohort's query x centroid distances (f32): 256 MiB.
const COHORT_SCRATCH_FLOATS: usize = 1 << 26;

pub struct KnnPersistent {
    pub(super) ivf: Arc<GpuIvf>,
    /// The module, in the index's context.
    pub(super) loaded: Loaded,
    pub(super) sms: usize,
    plan: PersistentPlan,
    /// Cohort plan: block groups running cohorts side by side.
    groups: usize,
}

/// Cohort plan: block groups by default (one group computes while another takes what queued).
pub const DEFAULT_COHORT_GROUPS: usize = 1;

impl KnnPersistent {
    pub fn new(
        ivf: GpuIvf,
        dev: &DeviceInfo,
        plan: PersistentPlan,
    ) -> Result<KnnPersistent, GpuError> {
        let source = super::kernels::source("knn_persistent.cu");
        let loaded = Loaded::on(ivf.ctx.clone(), dev, source)?;
        Ok(KnnPersistent {
            ivf: Arc::new(ivf),
            loaded,
            sms: dev.sms.max(1) as usize,
            plan,
            groups: DEFAULT_COHORT_GROUPS,
        })
    }

    /// Cohort plan: `groups` block groups (1..=BAR_GROUPS), each with its own buffers.
    pub fn with_groups(mut self, groups: usize) -> Result<KnnPersistent, GpuError> {
        if !(1..=BAR_GROUPS).contains(&groups) {
            return Err(GpuError::Invalid(format!(
                "the cohort plan runs 1..={BAR_GROUPS} block groups; got {groups}"
            )));
        }
        self.groups = groups;
        Ok(self)
    }

    /// Per-pair default stage blocks: filter and search cost about the same per query at
    /// SIFT-like shapes (nlist x dim vs nprobe x cell x dim); search gets twice the blocks for
    /// its k selection rounds per cell; reducing is light.
    fn default_blocks(&self) -> [usize; 3] {
        [self.sms, 2 * self.sms, (self.sms / 4).max(2)]
    }

    fn cohort_kernel(&self) -> &'static str {
        COHORT[element_type(self.ivf.precision)].name
    }

    /// Cohort plan default: as many blocks as the GPU holds at once (at most four per SM: more
    /// only lengthen every grid barrier), less room for the ingress warps.
    fn default_cohort_blocks(&self) -> Result<usize, GpuError> {
        let probe = Stage {
            kernel: self.cohort_kernel(),
            blocks: 1,
            threads: BLOCK as u32,
            dyn_smem: 0,
            elsewhere: None,
        };
        let fit = stage_capacity(self, &probe)?;
        // An SM holding an ingress warp has room for one cohort block less: twice the warps
        // left over keeps the start from depending on where the scheduler puts them.
        Ok(fit
            .min(4 * self.sms)
            .saturating_sub(2 * cohort_gpu::persistent::MAX_INGRESS_WARPS)
            .max(1))
    }

    pub(super) fn rx_copy(&self, rx_stride: usize) -> Result<usize, GpuError> {
        let dim = self.ivf.dim;
        let head = cohort_ivf::QUERY_HEAD;
        cohort_gpu::persistent::rx_copy_bytes("knn", head + 4 * dim, rx_stride).map_err(|_| {
            GpuError::Invalid(format!(
                "gpu-persistent carries k-NN vectors of at most {} f32 elements in a ring slot; the index has {dim}",
                rx_stride.saturating_sub(cohort_mq::SLOT_HEADER_BYTES + head) / 4,
            ))
        })
    }

    /// The first 16 argument fields, common to both plans.
    /// The fields both plans share (the cohort plan's are zero here).
    fn base_args(
        &self,
        s: &Arc<CudaStream>,
        queries: &CudaSlice<f32>,
        probes: &CudaSlice<u32>,
        part: (&CudaSlice<u32>, &CudaSlice<f32>),
        scratch: &CudaSlice<f32>,
    ) -> KnnArgs {
        let ivf = &self.ivf;
        let v = ivf.device_view(s);
        KnnArgs {
            centroids: v.centroids,
            vectors: v.vectors,
            ids: v.ids,
            offsets: v.offsets,
            dim: ivf.dim as u64,
            nlist: ivf.nlist as u64,
            n: ivf.n as u64,
            metric: v.metric,
            default_nprobe: ivf.default_nprobe as u64,
            queries: addr(queries, s),
            probes: addr(probes, s),
            part_ids: addr(part.0, s),
            part_dist: addr(part.1, s),
            scratch: addr(scratch, s),
            max_probe: self.max_probe() as u64,
            max_k: super::MAX_K as u64,
            ..KnnArgs::default()
        }
    }

    pub(super) fn max_probe(&self) -> usize {
        self.ivf.nlist.min(SEL_MAX)
    }

    /// The per-pair plan's stage blocks (filter, search, reduce): those asked for, or the
    /// default.
    pub(super) fn per_pair_blocks(&self, blocks: Option<&[usize]>) -> Result<[usize; 3], GpuError> {
        match blocks {
            None => Ok(self.default_blocks()),
            Some(&[f, s, r]) if f > 0 && s > 0 && r > 0 => Ok([f, s, r]),
            Some(other) => Err(GpuError::Invalid(format!(
                "k-NN per-pair has three stages (filter:search:reduce), each with at least one block; got {other:?}"
            ))),
        }
    }

    /// The per-pair plan's buffers for `slots` requests and its argument block (pipes as
    /// for a whole index: search tasks on pipes[1]).
    pub(super) fn per_pair_state(
        &self,
        slots: usize,
        filter_blocks: usize,
    ) -> Result<(KnnArgs, PerPairBuffers), GpuError> {
        let ivf = &self.ivf;
        let s = ivf.ctx.new_stream()?;
        let bufs = PerPairBuffers {
            queries: s.alloc_zeros(slots * ivf.dim)?,
            probes: s.alloc_zeros(slots * self.max_probe())?,
            part_ids: s.alloc_zeros(slots * GPU_MAX_CANDIDATES)?,
            part_dist: s.alloc_zeros(slots * GPU_MAX_CANDIDATES)?,
            scratch: s.alloc_zeros(filter_blocks * ivf.nlist)?,
        };
        s.synchronize()?;
        let args = KnnArgs {
            search_pipe: 1,
            ..self.base_args(
                &s,
                &bufs.queries,
                &bufs.probes,
                (&bufs.part_ids, &bufs.part_dist),
                &bufs.scratch,
            )
        };
        Ok((args, bufs))
    }

    /// The search stage's kernel for the index's precision.
    pub(super) fn search_kernel(&self) -> &'static str {
        SEARCH[element_type(self.ivf.precision)].name
    }

    fn prepare_per_pair(
        &self,
        slots: usize,
        rx_copy: usize,
        blocks: Option<&[usize]>,
    ) -> Result<Prepared, GpuError> {
        let b = self.per_pair_blocks(blocks)?;
        let (args, bufs) = self.per_pair_state(slots, b[0])?;
        Ok(Prepared {
            args: args.to_svc_args(),
            stages: vec![
                per_pair_stage(FILTER.name, b[0]),
                per_pair_stage(self.search_kernel(), b[1]),
                reduce_stage(b[2]),
            ],
            // Filter and reduce tasks: one per request at most; search: nprobe per request.
            pipe_caps: vec![slots, slots * self.max_probe(), slots],
            rx_copy,
            keep: Box::new(bufs),
        })
    }

    /// The cohort plan over this device's index, or, given `spread`, over a sharded index
    /// read in place (this device's shard and its peers', `persistent_sharded`).
    pub(super) fn prepare_cohort(
        &self,
        slots: usize,
        rx_copy: usize,
        blocks: Option<&[usize]>,
        spread: Option<&Arc<SpreadLists>>,
    ) -> Result<Prepared, GpuError> {
        let ivf = &self.ivf;
        let max_row = |p: usize| match spread {
            Some(v) => v.max_candidate_row(p),
            None => ivf.max_candidate_row(p),
        };
        let g = match blocks {
            None => self.default_cohort_blocks()?,
            Some(&[g]) if g >= self.groups => g,
            Some(other) => {
                return Err(GpuError::Invalid(format!(
                    "k-NN's cohort plan has one stage (its blocks, at least one per group); got {other:?}"
                )))
            }
        };
        let (mp, nlist) = (self.max_probe(), ivf.nlist);
        let cmax = slots
            .min(COHORT_MAX)
            .min(COHORT_SCRATCH_FLOATS / nlist)
            .max(1);
        // Candidate rows: a whole cohort of default-nprobe queries in one pass, and always at
        // least the longest row one query can make (wider queries run in more passes).
        let widest = max_row(mp).max(1);
        let cand_floats = (cmax * max_row(ivf.default_nprobe).max(1))
            .min(DEFAULT_CANDIDATE_FLOATS)
            .max(widest);
        let top_rows: Vec<u64> = (0..=mp).map(|p| max_row(p) as u64).collect();
        let s = ivf.ctx.new_stream()?;
        // Each group's share, back to back (coh_group_args in the kernel finds them).
        let n = self.groups;
        let bufs = CohortBuffers {
            queries: s.alloc_zeros(slots * ivf.dim)?,
            probes: s.alloc_zeros(n * cmax * mp)?,
            part_ids: s.alloc_zeros(1)?,
            part_dist: s.alloc_zeros(1)?,
            scratch: s.alloc_zeros(n * cmax * nlist)?,
            cand: s.alloc_zeros(n * cand_floats)?,
            poff: s.alloc_zeros(n * cmax * mp)?,
            totals: s.alloc_zeros(n * cmax)?,
            counts: s.alloc_zeros(n * nlist)?,
            cursor: s.alloc_zeros(n * nlist)?,
            items: s.alloc_zeros(n * (nlist + 1))?,
            order: s.alloc_zeros(n * cmax * mp)?,
            taken: s.alloc_zeros(n * cmax)?,
            ok: s.alloc_zeros(n * cmax)?,
            cq_slot: s.alloc_zeros(n * cmax)?,
            ctl: s.alloc_zeros(n * 64)?,
            top_rows: s.clone_htod(&top_rows)?,
        };
        s.synchronize()?;
        let base = self.base_args(
            &s,
            &bufs.queries,
            &bufs.probes,
            (&bufs.part_ids, &bufs.part_dist),
            &bufs.scratch,
        );
        let base = match spread {
            Some(v) => {
                let (offsets, ids, list_rows) = v.addrs(&s);
                KnnArgs {
                    offsets,
                    ids,
                    list_rows,
                    ..base
                }
            }
            None => base,
        };
        let args = KnnArgs {
            cmax: cmax as u64,
            cand: addr(&bufs.cand, &s),
            cand_floats: cand_floats as u64,
            poff: addr(&bufs.poff, &s),
            totals: addr(&bufs.totals, &s),
            counts: addr(&bufs.counts, &s),
            cursor: addr(&bufs.cursor, &s),
            items: addr(&bufs.items, &s),
            order: addr(&bufs.order, &s),
            taken: addr(&bufs.taken, &s),
            ok: addr(&bufs.ok, &s),
            cq_slot: addr(&bufs.cq_slot, &s),
            ctl: addr(&bufs.ctl, &s),
            top_rows: addr(&bufs.top_rows, &s),
            groups: n as u64,
            ..base
        };
        tracing::info!(
            blocks = g,
            groups = n,
            cohort_max = cmax,
            candidate_mib = (cand_floats * 4) >> 20,
            sharded = spread.is_some(),
            "k-NN gpu-persistent: cohort plan"
        );
        Ok(Prepared {
            args: args.to_svc_args(),
            stages: vec![Stage {
                kernel: self.cohort_kernel(),
                blocks: g,
                threads: BLOCK as u32,
                dyn_smem: 0,
                elsewhere: None,
            }],
            // One gpipe: the ingress warp to the cohort's leader.
            pipe_caps: vec![slots],
            rx_copy,
            keep: Box::new((bufs, spread.cloned())),
        })
    }
}

/// The kernel of a stage declared per element type (`kernels::persistent`: f32, f16, u8).
fn element_type(p: Precision) -> usize {
    match p {
        Precision::F32 => 0,
        Precision::F16 => 1,
        Precision::U8 => 2,
    }
}

/// A per-pair filter or search stage on the lane's device.
pub(super) fn per_pair_stage(kernel: &'static str, blocks: usize) -> Stage {
    Stage {
        kernel,
        blocks,
        threads: BLOCK as u32,
        dyn_smem: 0,
        elsewhere: None,
    }
}

/// The per-pair reducer stage: a request's candidates in dynamic shared memory.
pub(super) fn reduce_stage(blocks: usize) -> Stage {
    Stage {
        dyn_smem: (GPU_MAX_CANDIDATES * 8) as u32,
        ..per_pair_stage(REDUCE.name, blocks)
    }
}

/// The buffers the per-pair argument block points to (held for their memory: the kernels
/// use raw addresses).
#[allow(dead_code)]
pub(super) struct PerPairBuffers {
    queries: CudaSlice<f32>,
    probes: CudaSlice<u32>,
    part_ids: CudaSlice<u32>,
    part_dist: CudaSlice<f32>,
    scratch: CudaSlice<f32>,
}

/// The buffers the cohort plan's argument block points to (sizes: `prepare_cohort`; held for
/// their memory).
#[allow(dead_code)]
struct CohortBuffers {
    queries: CudaSlice<f32>,
    probes: CudaSlice<u32>,
    part_ids: CudaSlice<u32>,
    part_dist: CudaSlice<f32>,
    scratch: CudaSlice<f32>,
    cand: CudaSlice<f32>,
    poff: CudaSlice<u32>,
    totals: CudaSlice<u32>,
    counts: CudaSlice<u32>,
    cursor: CudaSlice<u32>,
    items: CudaSlice<u32>,
    order: CudaSlice<u32>,
    taken: CudaSlice<u32>,
    ok: CudaSlice<u32>,
    cq_slot: CudaSlice<u32>,
    ctl: CudaSlice<u32>,
    top_rows: CudaSlice<u64>,
}

impl PersistentBackend for KnnPersistent {
    fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    fn prepare(&self, ask: Ask) -> Result<Prepared, GpuError> {
        let rx_copy = self.rx_copy(ask.rx_stride)?;
        match self.plan {
            PersistentPlan::Cohort => self.prepare_cohort(ask.slots, rx_copy, ask.blocks, None),
            PersistentPlan::PerPair => self.prepare_per_pair(ask.slots, rx_copy, ask.blocks),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PersistentPlan;

    #[test]
    fn plans_parse_by_name_and_unknown_ones_are_refused() {
        assert_eq!("cohort".parse(), Ok(PersistentPlan::Cohort));
        assert_eq!("per-pair".parse(), Ok(PersistentPlan::PerPair));
        let e = "tiled".parse::<PersistentPlan>().unwrap_err();
        assert!(e.contains("cohort, per-pair"), "{e}");
    }
}
