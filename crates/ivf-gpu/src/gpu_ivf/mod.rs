//! The IVF-Flat index on one GPU and the host side of the k-NN kernels. Two plans compute the
//! same answers (those of the CPU twins in `cohort_ivf::ivf::stages`):
//!
//! - [`Plan::PerPair`] (`per_pair.rs`, `kernels/knn.cu`): filter -> search -> reduce with a block
//!   per query or per (query, probe); each stage launchable alone so tests compare it with its
//!   twin. Lowest latency for one or a few queries.
//! - [`Plan::Tiled`] (`tiled.rs`, `kernels/knn_tiled.cu`): for cohorts. Query x centroid and
//!   query x cell distances as shared-memory tiled products, the (query, probe) pairs grouped by
//!   cell so a cell is read once per 32 queries probing it, and a radix select per query.

mod kinds;
mod per_pair;
mod tiled;
pub use kinds::{FilterKind, SearchKind};
pub use tiled::ScanIo;
pub mod reducer;
pub mod spread;

use super::kernels;
use super::kernels::{per_pair as pp, tiled as tk};
use cohort_gpu::launch::{Dev, Kernel};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cohort_ivf::ivf::shard::IvfShard;
use cohort_ivf::{IvfIndex, Metric, Neighbor};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

/// Limits of the kernels (defined once in `crate::kernels`, compiled into the kernels).
pub const GPU_MAX_K: usize = kernels::MAX_K;
pub const GPU_MAX_DIM: usize = kernels::MAX_DIM;
/// The per-pair reduce holds nprobe * k candidates (8 bytes each) in shared memory.
pub const GPU_MAX_CANDIDATES: usize = kernels::GPU_MAX_CANDIDATES;
/// The tiled plan's select keeps nprobe probe offsets and k winners in shared memory.
pub const TILED_MAX_PROBE: usize = kernels::SEL_MAX;
/// Batches from this size take the tiled plan: on the H200 it beats the per-pair plan from a
/// single query up (bench/README.md), so the per-pair plan serves only nprobe above
/// TILED_MAX_PROBE (and stays as the stage-by-stage twin the tests compare).
pub const TILED_MIN_COHORT: usize = 1;
/// Candidate distances one `Buffers` holds for the tiled plan (1 GiB); a cohort whose
/// candidate rows need more runs in several passes.
pub const DEFAULT_CANDIDATE_FLOATS: usize = 1 << 28;
pub use kernels::NO_ID;

/// Element type of the vectors on the device; distances are computed in f32 in every case.
/// Named in configuration by its word (`f32`, `f16`, `u8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F32,
    /// Half the bytes per scan; vectors rounded to f16.
    F16,
    /// A quarter of the bytes, exact for integral data in 0..=255 (SIFT's descriptors).
    U8,
}

impl Precision {
    pub const ALL: [Precision; 3] = [Precision::F32, Precision::F16, Precision::U8];

    pub fn word(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::U8 => "u8",
        }
    }
}

// Written out rather than through the services' `named_enum!`: this library sits below the
// services' API crate and takes nothing from it.
impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Precision::ALL
            .into_iter()
            .find(|p| p.word() == s)
            .ok_or_else(|| format!("unknown precision {s:?} (f32, f16, u8)"))
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// The value an f32 takes once stored as f16 (the CPU twin of f16 storage rounds with this).
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// How a batch is computed (same answers either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    PerPair,
    Tiled,
}

/// The cell-major vectors on the device, in one precision.
enum DeviceVectors {
    F32(CudaSlice<f32>),
    F16(CudaSlice<u16>),
    U8(CudaSlice<u8>),
}

impl DeviceVectors {
    fn upload(s: &Arc<CudaStream>, v: &[f32], p: Precision) -> Result<DeviceVectors, GpuError> {
        Ok(match p {
            Precision::F32 => DeviceVectors::F32(s.clone_htod(v)?),
            Precision::F16 => {
                let h: Vec<u16> = v
                    .iter()
                    .map(|x| half::f16::from_f32(*x).to_bits())
                    .collect();
                DeviceVectors::F16(s.clone_htod(&h)?)
            }
            Precision::U8 => DeviceVectors::U8(s.clone_htod(&to_u8(v)?)?),
        })
    }

    /// Where the rows start, whatever their element type (the kernel of the index's
    /// precision reads them).
    fn dev(&self, s: &CudaStream) -> Dev<()> {
        match self {
            DeviceVectors::F32(v) => Dev::of(v, s).cast(),
            DeviceVectors::F16(v) => Dev::of(v, s).cast(),
            DeviceVectors::U8(v) => Dev::of(v, s).cast(),
        }
    }

    fn bytes_per_elem(&self) -> usize {
        match self {
            DeviceVectors::F32(_) => 4,
            DeviceVectors::F16(_) => 2,
            DeviceVectors::U8(_) => 1,
        }
    }
}

/// top_rows[p] = rows in the p largest of the lists `offsets` delimits (p = 0..=nlist): the
/// longest candidate row a query probing p lists can make.
fn top_rows(offsets: &[u64]) -> Vec<usize> {
    let mut sizes: Vec<usize> = offsets.windows(2).map(|w| (w[1] - w[0]) as usize).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    std::iter::once(0)
        .chain(sizes.iter().scan(0usize, |run, &x| {
            *run += x;
            Some(*run)
        }))
        .collect()
}

/// The vectors as u8, refused unless every value is integral in 0..=255 (u8 storage is exact
/// or not offered).
fn to_u8(v: &[f32]) -> Result<Vec<u8>, GpuError> {
    cohort_ivf::bytes::to_u8(v).map_err(|x| {
        GpuError::Invalid(format!(
            "u8 storage needs integral vectors in 0..=255 (found {x}); use f32 or f16"
        ))
    })
}

/// What one device holds of an index: every centroid, and the lists of `offsets` (all of
/// them, or a shard's with the others empty).
struct HostLists<'a> {
    dim: usize,
    nlist: usize,
    /// Vectors of the whole index (requests are checked against it).
    n: usize,
    default_nprobe: usize,
    metric: Metric,
    centroids: &'a [f32],
    vectors: &'a [f32],
    ids: &'a [u32],
    offsets: std::borrow::Cow<'a, [u64]>,
}

impl<'a> HostLists<'a> {
    fn whole(ix: &'a IvfIndex) -> HostLists<'a> {
        HostLists {
            dim: ix.dim,
            nlist: ix.nlist,
            n: ix.n,
            default_nprobe: ix.default_nprobe,
            metric: ix.metric,
            centroids: ix.centroids(),
            vectors: ix.vectors(),
            ids: ix.ids(),
            offsets: ix.offsets().into(),
        }
    }

    fn shard(ix: &'a IvfIndex, shard: &'a IvfShard) -> HostLists<'a> {
        HostLists {
            vectors: shard.vectors(),
            ids: shard.ids(),
            offsets: shard.offsets().into(),
            ..HostLists::whole(ix)
        }
    }
}

/// Every kernel, loaded once per device.
struct Kernels {
    filter: Kernel<pp::KnnFilterArgs>,
    search: [Kernel<pp::KnnSearchArgs>; 3], // by precision: f32, f16, u8
    reduce: Kernel<pp::KnnReduceArgs>,
    filter_tiled: Kernel<tk::KnnFilterTiledArgs>,
    filter_tc: Kernel<tk::KnnFilterTcArgs>,
    rerank_filter: Kernel<tk::KnnRerankFilterArgs>,
    select_rerank_filter_wide: Kernel<tk::KnnSelectRerankFilterArgs>,
    select_filter: Kernel<tk::KnnSelectFilterArgs>,
    select_filter_wide: Kernel<tk::KnnSelectFilterArgs>,
    plan: Kernel<tk::KnnPlanArgs>,
    plan_one_block: Kernel<tk::KnnPlanOneBlockArgs>,
    scan_items: Kernel<tk::KnnScanItemsArgs>,
    scatter: Kernel<tk::KnnScatterArgs>,
    search_tiled: [Kernel<tk::KnnSearchTiledArgs>; 3],
    search_warp_u8: [Kernel<tk::KnnSearchTiledArgs>; 2],
    select_filter_plan_wide: Kernel<tk::KnnSelectFilterPlanArgs>,
    search_pairs_u8: [Kernel<tk::KnnSearchPairsArgs>; 2],
    select_search: Kernel<tk::KnnSelectSearchArgs>,
    select_search_wide: Kernel<tk::KnnSelectSearchArgs>,
}

impl Kernels {
    fn load(ctx: &Arc<CudaContext>, dev: &DeviceInfo) -> Result<Kernels, GpuError> {
        let module = |name: &str| load_module(ctx, dev, kernels::source(name));
        let (m, t) = (module("knn.cu")?, module("knn_tiled.cu")?);
        Ok(Kernels {
            filter: Kernel::load(&m, &pp::FILTER)?,
            search: Kernel::load_each(&m, &pp::SEARCH)?,
            reduce: Kernel::load(&m, &pp::REDUCE)?,
            filter_tiled: Kernel::load(&t, &tk::FILTER)?,
            filter_tc: Kernel::load(&t, &tk::FILTER_TC)?,
            rerank_filter: Kernel::load(&t, &tk::RERANK_FILTER)?,
            select_rerank_filter_wide: Kernel::load(&t, &tk::SELECT_RERANK_FILTER_WIDE)?,
            select_filter: Kernel::load(&t, &tk::SELECT_FILTER)?,
            select_filter_wide: Kernel::load(&t, &tk::SELECT_FILTER_WIDE)?,
            plan: Kernel::load(&t, &tk::PLAN)?,
            plan_one_block: Kernel::load(&t, &tk::PLAN_ONE_BLOCK)?,
            scan_items: Kernel::load(&t, &tk::SCAN_ITEMS)?,
            scatter: Kernel::load(&t, &tk::SCATTER)?,
            search_tiled: Kernel::load_each(&t, &tk::SEARCH)?,
            search_warp_u8: Kernel::load_each(&t, &tk::SEARCH_WARP_U8)?,
            select_filter_plan_wide: Kernel::load(&t, &tk::SELECT_FILTER_PLAN_WIDE)?,
            search_pairs_u8: Kernel::load_each(&t, &tk::SEARCH_PAIRS_U8)?,
            select_search: Kernel::load(&t, &tk::SELECT_SEARCH)?,
            select_search_wide: Kernel::load(&t, &tk::SELECT_SEARCH_WIDE)?,
        })
    }
}

pub struct GpuIvf {
    pub ctx: Arc<CudaContext>,
    pub dim: usize,
    pub nlist: usize,
    pub n: usize,
    pub default_nprobe: usize,
    metric: i32,
    pub precision: Precision,
    /// Streaming multiprocessors: sizes the tiled plan's grids.
    sms: usize,
    /// How the tiled plan's filter scores the centroids (`FilterKind::for_device`).
    pub filter: FilterKind,
    /// How the tiled plan's search walks its work items (`SearchKind::from_env`).
    pub search: SearchKind,
    centroids: CudaSlice<f32>,
    vectors: DeviceVectors,
    ids: CudaSlice<u32>,
    offsets: CudaSlice<u64>,
    /// top_rows[p] = rows in the p largest cells: the longest candidate row nprobe = p makes.
    top_rows: Vec<usize>,
    kernels: Kernels,
    /// Bytes held on the device.
    pub device_bytes: usize,
}

/// Where an uploaded index lives on its device.
#[derive(Debug, Clone, Copy)]
pub struct IvfView {
    pub centroids: u64,
    pub vectors: u64,
    pub ids: u64,
    pub offsets: u64,
    /// 0 L2, 1 inner product.
    pub metric: u64,
}

/// What a set of buffers holds: everything (a whole index, or a sharded index's home), a
/// shard's scan space only, or that and the cohort's queries and probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    Whole,
    Scan,
    Inputs,
}

/// Device buffers for batches of up to `cap` queries, allocated once (the engines keep one set
/// per stream: no allocation or memset per launch beyond the tiled plan's cell counters).
pub struct Buffers {
    pub cap: usize,
    pub q: CudaSlice<f32>,
    pub out_ids: CudaSlice<u32>,
    pub out_dist: CudaSlice<f32>,
    /// cap x nlist query-centroid distances (both plans).
    scratch: CudaSlice<f32>,
    /// cap x nprobe probed cells (both plans); a sharded index's host exchange copies them.
    pub probes: CudaSlice<u32>,
    // Per-pair plan: per (query, probe) top-k; a sharded index's reducer rows.
    pub part_ids: CudaSlice<u32>,
    pub part_dist: CudaSlice<f32>,
    // Tiled plan: cells' pair counts and starts, work items, pairs by cell, candidate rows.
    counts: CudaSlice<u32>,
    cursor: CudaSlice<u32>,
    items: CudaSlice<u32>,
    /// The search's work counter (one; knn_scan_items zeroes it).
    next_item: CudaSlice<u32>,
    order: CudaSlice<u32>,
    poff: CudaSlice<u32>,
    totals: CudaSlice<u32>,
    cand: CudaSlice<f32>,
    /// cap x dim query bytes and cap norms: the u8 warp search's queries, made by the plan.
    q8: CudaSlice<u8>,
    q8norm: CudaSlice<i32>,
    /// The pair scan's passes (at most PAIR_MAX_QUERIES queries): each probe's cell's first row.
    pfirst: CudaSlice<u32>,
}

impl GpuIvf {
    /// Compiles the kernels for this device and uploads the index in `precision`.
    pub fn upload(
        dev: &DeviceInfo,
        ix: &IvfIndex,
        precision: Precision,
    ) -> Result<GpuIvf, GpuError> {
        Self::upload_lists(dev, &HostLists::whole(ix), precision)
    }

    /// As `upload`, holding only `shard`'s lists beside every centroid (a sharded index's
    /// device: the other lists are empty here, so a search finds this device's part).
    pub fn upload_shard(
        dev: &DeviceInfo,
        ix: &IvfIndex,
        shard: &IvfShard,
        precision: Precision,
    ) -> Result<GpuIvf, GpuError> {
        Self::upload_lists(dev, &HostLists::shard(ix, shard), precision)
    }

    fn upload_lists(
        dev: &DeviceInfo,
        ix: &HostLists,
        precision: Precision,
    ) -> Result<GpuIvf, GpuError> {
        if ix.dim > GPU_MAX_DIM {
            return Err(GpuError::Invalid(format!(
                "dimension {} over the GPU limit {GPU_MAX_DIM}",
                ix.dim
            )));
        }
        let ctx = cohort_gpu::launch::context(dev)?;
        let kernels = Kernels::load(&ctx, dev)?;
        let s = ctx.default_stream();
        let vectors = DeviceVectors::upload(&s, ix.vectors, precision)?;
        let top_rows = top_rows(&ix.offsets);
        let ivf = GpuIvf {
            dim: ix.dim,
            nlist: ix.nlist,
            n: ix.n,
            default_nprobe: ix.default_nprobe,
            metric: match ix.metric {
                Metric::L2 => 0,
                Metric::InnerProduct => 1,
            },
            precision,
            sms: dev.sms.max(1) as usize,
            filter: FilterKind::for_device(dev)?,
            search: SearchKind::from_env()?,
            centroids: s.clone_htod(ix.centroids)?,
            device_bytes: 4 * (ix.centroids.len() + ix.ids.len())
                + ix.vectors.len() * vectors.bytes_per_elem()
                + 8 * ix.offsets.len(),
            vectors,
            ids: s.clone_htod(ix.ids)?,
            offsets: s.clone_htod(ix.offsets.as_ref())?,
            top_rows,
            kernels,
            ctx,
        };
        s.synchronize()?;
        Ok(ivf)
    }

    /// The device address of each list's first row (a list this device does not hold gives
    /// where it would start): what a kernel on another device of a sharded set reads this
    /// device's lists through ([`spread::SpreadLists`]).
    pub fn list_rows(&self, s: &Arc<CudaStream>) -> Result<Vec<u64>, GpuError> {
        let offsets = s.clone_dtoh(&self.offsets)?;
        let base = self.vectors.dev(s).addr();
        let row_bytes = (self.dim * self.vectors.bytes_per_elem()) as u64;
        Ok(offsets[..self.nlist]
            .iter()
            .map(|&o| base + o * row_bytes)
            .collect())
    }

    /// Raw device addresses of the index, for kernels that outlive any stream ordering (the
    /// persistent engine's).
    pub fn device_view(&self, s: &Arc<CudaStream>) -> IvfView {
        use cohort_gpu::persistent::rt::addr;
        IvfView {
            centroids: addr(&self.centroids, s),
            vectors: self.vectors.dev(s).addr(),
            ids: addr(&self.ids, s),
            offsets: addr(&self.offsets, s),
            metric: self.metric as u64,
        }
    }

    pub fn buffers(&self, s: &Arc<CudaStream>, cap: usize) -> Result<Buffers, GpuError> {
        self.buffers_with(s, cap, DEFAULT_CANDIDATE_FLOATS)
    }

    /// As `buffers`, with `cand_floats` candidate distances for the tiled plan (at least the
    /// longest candidate row of one query, so every cohort can run).
    pub fn buffers_with(
        &self,
        s: &Arc<CudaStream>,
        cap: usize,
        cand_floats: usize,
    ) -> Result<Buffers, GpuError> {
        self.alloc_buffers(s, cap, cand_floats, Keep::Whole)
    }

    /// Buffers for the scan of a sharded index's device (`scan_into`): no filter scratch and
    /// no per-pair partials, which the query's home device keeps (a shard device has a set
    /// per home and slot, so the saving is multiplied by both); with `inputs`, room for the
    /// cohort's queries and probes (copied in where the home's memory cannot be addressed).
    pub fn scan_buffers(
        &self,
        s: &Arc<CudaStream>,
        cap: usize,
        cand_floats: usize,
        inputs: bool,
    ) -> Result<Buffers, GpuError> {
        self.alloc_buffers(
            s,
            cap,
            cand_floats,
            if inputs { Keep::Inputs } else { Keep::Scan },
        )
    }

    fn alloc_buffers(
        &self,
        s: &Arc<CudaStream>,
        cap: usize,
        cand_floats: usize,
        keep: Keep,
    ) -> Result<Buffers, GpuError> {
        let max_probe = self.nlist.min(GPU_MAX_CANDIDATES);
        let tiled_probe = self.nlist.min(TILED_MAX_PROBE);
        let cand = cand_floats
            .min(cap * self.top_rows[tiled_probe])
            .max(self.top_rows[tiled_probe])
            .max(1);
        // A shard's scan reads the queries and probes on their home device (or its own copy
        // of them) and writes into its reducer slot: only the scan's own work space is
        // allocated here.
        let home = |len: usize| if keep == Keep::Whole { len } else { 1 };
        let inputs = |len: usize| if keep == Keep::Scan { 1 } else { len };
        Ok(Buffers {
            cap,
            q: s.alloc_zeros(inputs(cap * self.dim))?,
            out_ids: s.alloc_zeros(home(cap * GPU_MAX_K))?,
            out_dist: s.alloc_zeros(home(cap * GPU_MAX_K))?,
            scratch: s.alloc_zeros(home(cap * self.nlist))?,
            probes: s.alloc_zeros(inputs(cap * max_probe))?,
            part_ids: s.alloc_zeros(home(cap * GPU_MAX_CANDIDATES))?,
            part_dist: s.alloc_zeros(home(cap * GPU_MAX_CANDIDATES))?,
            counts: s.alloc_zeros(self.nlist)?,
            cursor: s.alloc_zeros(self.nlist)?,
            items: s.alloc_zeros(self.nlist + 1)?,
            next_item: s.alloc_zeros(1)?,
            order: s.alloc_zeros(cap * tiled_probe)?,
            poff: s.alloc_zeros(cap * tiled_probe)?,
            totals: s.alloc_zeros(cap)?,
            cand: s.alloc_zeros(cand)?,
            q8: s.alloc_zeros(cap * self.dim)?,
            q8norm: s.alloc_zeros(cap)?,
            pfirst: s.alloc_zeros(cap.min(kernels::PAIR_MAX_QUERIES) * tiled_probe)?,
        })
    }

    /// The plan `launch_into` takes for a batch of `nq`.
    pub fn plan_for(&self, nq: usize, nprobe: usize) -> Plan {
        if nq >= TILED_MIN_COHORT && nprobe <= TILED_MAX_PROBE {
            Plan::Tiled
        } else {
            Plan::PerPair
        }
    }

    /// Queries the first `nq` queries already in `b.q` on `s`; results land in `b.out_ids` /
    /// `b.out_dist` (nq x k, nearest first). Asynchronous.
    pub fn launch_into(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        nq: usize,
        k: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        self.launch_into_with(s, b, nq, k, nprobe, self.plan_for(nq, nprobe))
    }

    /// As `launch_into`, with the plan chosen by the caller.
    pub fn launch_into_with(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        nq: usize,
        k: usize,
        nprobe: usize,
        plan: Plan,
    ) -> Result<(), GpuError> {
        self.check(k, nprobe).map_err(GpuError::Invalid)?;
        if nq == 0 || nq > b.cap {
            return Err(GpuError::Invalid(format!(
                "batch of {nq} for buffers of {}",
                b.cap
            )));
        }
        match plan {
            Plan::PerPair => self.per_pair_into(s, b, nq, k, nprobe),
            Plan::Tiled if nprobe <= TILED_MAX_PROBE => self.tiled_into(s, b, nq, k, nprobe),
            Plan::Tiled => Err(GpuError::Invalid(format!(
                "the tiled plan serves nprobe up to {TILED_MAX_PROBE}"
            ))),
        }
    }

    /// Whether the kernels can serve (k, nprobe); the message says why not.
    pub fn check(&self, k: usize, nprobe: usize) -> Result<(), String> {
        check_shape(self.nlist, k, nprobe)
    }

    /// The longest candidate row (rows scanned) a query with `nprobe` probes can have.
    pub fn max_candidate_row(&self, nprobe: usize) -> usize {
        self.top_rows[nprobe.min(self.nlist)]
    }

    /// Bytes of vectors (and ids) a query with these probes reads: for bandwidth figures.
    pub fn scan_bytes(&self, rows: usize) -> usize {
        rows * (self.dim * self.vectors.bytes_per_elem() + 4)
    }

    /// Synchronous convenience: queries (row-major) in, neighbours out.
    pub fn search(
        &self,
        s: &Arc<CudaStream>,
        queries: &[f32],
        k: usize,
        nprobe: usize,
    ) -> Result<Vec<Vec<Neighbor>>, GpuError> {
        self.search_with(s, queries, k, nprobe, None)
    }

    /// As `search`, with a plan (None: as `launch_into` chooses).
    pub fn search_with(
        &self,
        s: &Arc<CudaStream>,
        queries: &[f32],
        k: usize,
        nprobe: usize,
        plan: Option<Plan>,
    ) -> Result<Vec<Vec<Neighbor>>, GpuError> {
        let nq = queries.len() / self.dim;
        let mut b = self.buffers(s, nq)?;
        self.search_in(s, &mut b, queries, k, nprobe, plan)
    }

    /// As `search_with`, in the caller's buffers.
    pub fn search_in(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        queries: &[f32],
        k: usize,
        nprobe: usize,
        plan: Option<Plan>,
    ) -> Result<Vec<Vec<Neighbor>>, GpuError> {
        let nq = queries.len() / self.dim;
        s.memcpy_htod(queries, &mut b.q.slice_mut(0..queries.len()))?;
        let plan = plan.unwrap_or_else(|| self.plan_for(nq, nprobe));
        self.launch_into_with(s, b, nq, k, nprobe, plan)?;
        let ids = s.clone_dtoh(&b.out_ids.slice(0..nq * k))?;
        let dist = s.clone_dtoh(&b.out_dist.slice(0..nq * k))?;
        s.synchronize()?;
        Ok(to_neighbors(&ids, &dist, nq, k))
    }
}

/// Whether the kernels serve (k, nprobe) on an index of `nlist` cells; the message says why not.
pub fn check_shape(nlist: usize, k: usize, nprobe: usize) -> Result<(), String> {
    if k == 0 || k > GPU_MAX_K {
        return Err(format!("the gpu engines serve k in 1..={GPU_MAX_K}"));
    }
    if nprobe == 0 || nprobe > nlist {
        return Err(format!("nprobe must be in 1..={nlist}"));
    }
    if nprobe * k > GPU_MAX_CANDIDATES {
        return Err(format!(
            "nprobe x k must be at most {GPU_MAX_CANDIDATES} on the gpu engines"
        ));
    }
    Ok(())
}

/// Rows of k (id, distance), dropping padding (fewer than k candidates).
pub fn to_neighbors(ids: &[u32], dist: &[f32], nq: usize, k: usize) -> Vec<Vec<Neighbor>> {
    (0..nq)
        .map(|i| {
            (0..k)
                .map(|j| (ids[i * k + j], dist[i * k + j]))
                .filter(|(id, _)| *id != NO_ID)
                .map(|(id, distance)| Neighbor { id, distance })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precisions_read_and_print_their_words_and_refuse_others() {
        for p in Precision::ALL {
            assert_eq!(p.to_string().parse::<Precision>(), Ok(p));
        }
        assert_eq!("f16".parse::<Precision>(), Ok(Precision::F16));
        let e = "bf16".parse::<Precision>().unwrap_err();
        assert!(
            e.contains("unknown precision \"bf16\" (f32, f16, u8)"),
            "{e}"
        );
    }

    #[test]
    fn top_rows_sum_the_largest_lists_first() {
        // Lists of 3, 0, 5 and 2 rows.
        assert_eq!(top_rows(&[0, 3, 3, 8, 10]), vec![0, 5, 8, 10, 10]);
    }

    #[test]
    fn u8_storage_takes_integral_bytes_and_refuses_the_rest() {
        assert_eq!(to_u8(&[0.0, 1.0, 255.0]).unwrap(), vec![0, 1, 255]);
        for bad in [256.0, -1.0, 0.5, f32::NAN, f32::INFINITY] {
            let e = to_u8(&[3.0, bad]).unwrap_err().to_string();
            assert!(
                e.contains("u8 storage needs integral vectors"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn precision_names_parse_and_others_are_refused() {
        assert_eq!("u8".parse::<Precision>(), Ok(Precision::U8));
        assert_eq!("f16".parse::<Precision>(), Ok(Precision::F16));
        assert!("f64"
            .parse::<Precision>()
            .unwrap_err()
            .contains("f32, f16, u8"));
    }
}
