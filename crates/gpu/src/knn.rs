//! The IVF-Flat index on one GPU and the host side of the three k-NN kernels
//! (`kernels/knn.cu`): filter -> search -> reduce, each launchable alone (tests compare
//! each with its CPU twin) or chained on one stream without a host round trip.

use crate::{compile_cached, kernel_sources, DeviceInfo, GpuError};
use cohort_knn::{IvfIndex, Metric, Neighbor};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// Limits of the kernels (compile-time sizes in knn.cu).
pub const GPU_MAX_K: usize = 128;
pub const GPU_MAX_DIM: usize = 1024;
/// The reduce kernel holds nprobe * k candidates (8 bytes each) in shared memory.
pub const GPU_MAX_CANDIDATES: usize = 6144;
const BLOCK: u32 = 256;
const NO_ID: u32 = u32::MAX;

/// Element type of the vectors on the device. f16 halves the bytes every scan streams;
/// distances are still computed in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F32,
    F16,
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Precision, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            _ => Err(format!("unknown precision {s:?} (f32, f16)")),
        }
    }
}

/// The value an f32 takes once stored as f16 (the CPU twin of f16 storage rounds with this).
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

pub struct GpuIvf {
    pub ctx: Arc<CudaContext>,
    pub dim: usize,
    pub nlist: usize,
    pub n: usize,
    pub default_nprobe: usize,
    metric: i32,
    pub precision: Precision,
    centroids: CudaSlice<f32>,
    /// Exactly one of these holds the cell-major vectors, per `precision`.
    vectors: Option<CudaSlice<f32>>,
    vectors16: Option<CudaSlice<u16>>,
    ids: CudaSlice<u32>,
    offsets: CudaSlice<u64>,
    f_filter: CudaFunction,
    f_search: CudaFunction,
    f_search16: CudaFunction,
    f_reduce: CudaFunction,
    f_count: CudaFunction,
    f_scan: CudaFunction,
    f_scatter: CudaFunction,
    /// Bytes held on the device.
    pub device_bytes: usize,
}

/// Device buffers for batches of up to `cap` queries at the kernels' limits, allocated once
/// (the engines keep one set per stream: no allocation or memset per launch).
pub struct Buffers {
    pub cap: usize,
    pub q: CudaSlice<f32>,
    scratch: CudaSlice<f32>,
    probes: CudaSlice<u32>,
    part_ids: CudaSlice<u32>,
    part_dist: CudaSlice<f32>,
    pub out_ids: CudaSlice<u32>,
    pub out_dist: CudaSlice<f32>,
    counts: CudaSlice<u32>,
    cursor: CudaSlice<u32>,
    order: CudaSlice<u32>,
}

impl GpuIvf {
    /// Compiles the kernels for this device and uploads the index (f32).
    pub fn upload(
        dev: &DeviceInfo,
        ix: &IvfIndex,
        precision: Precision,
    ) -> Result<GpuIvf, GpuError> {
        if ix.dim > GPU_MAX_DIM {
            return Err(GpuError::Invalid(format!(
                "dimension {} over the GPU limit {GPU_MAX_DIM}",
                ix.dim
            )));
        }
        let ctx = CudaContext::new(dev.ordinal)?;
        let arch: &'static str = Box::leak(dev.arch().into_boxed_str());
        let src = kernel_sources()
            .iter()
            .find(|s| s.name == "knn.cu")
            .expect("knn.cu is embedded");
        let module = ctx.load_module(compile_cached(src, arch)?)?;
        let s = ctx.default_stream();
        let ivf = GpuIvf {
            dim: ix.dim,
            nlist: ix.nlist,
            n: ix.n,
            default_nprobe: ix.default_nprobe,
            metric: match ix.metric {
                Metric::L2 => 0,
                Metric::InnerProduct => 1,
            },
            centroids: s.clone_htod(ix.centroids())?,
            precision,
            vectors: match precision {
                Precision::F32 => Some(s.clone_htod(ix.vectors())?),
                Precision::F16 => None,
            },
            vectors16: match precision {
                Precision::F16 => {
                    let h: Vec<u16> = ix
                        .vectors()
                        .iter()
                        .map(|x| half::f16::from_f32(*x).to_bits())
                        .collect();
                    Some(s.clone_htod(&h)?)
                }
                Precision::F32 => None,
            },
            ids: s.clone_htod(ix.ids())?,
            offsets: s.clone_htod(ix.offsets())?,
            f_filter: module.load_function("knn_filter")?,
            f_search: module.load_function("knn_search")?,
            f_search16: module.load_function("knn_search_f16")?,
            f_reduce: module.load_function("knn_reduce")?,
            f_count: module.load_function("knn_count")?,
            f_scan: module.load_function("knn_scan")?,
            f_scatter: module.load_function("knn_scatter")?,
            device_bytes: 4 * (ix.centroids().len() + ix.ids().len())
                + ix.vectors().len() * if precision == Precision::F16 { 2 } else { 4 }
                + 8 * ix.offsets().len(),
            ctx,
        };
        s.synchronize()?;
        Ok(ivf)
    }

    pub fn buffers(&self, s: &Arc<CudaStream>, cap: usize) -> Result<Buffers, GpuError> {
        let max_probe = self.nlist.min(GPU_MAX_CANDIDATES);
        Ok(Buffers {
            cap,
            q: s.alloc_zeros(cap * self.dim)?,
            scratch: s.alloc_zeros(cap * self.nlist)?,
            probes: s.alloc_zeros(cap * max_probe)?,
            part_ids: s.alloc_zeros(cap * GPU_MAX_CANDIDATES)?,
            part_dist: s.alloc_zeros(cap * GPU_MAX_CANDIDATES)?,
            out_ids: s.alloc_zeros(cap * GPU_MAX_K)?,
            out_dist: s.alloc_zeros(cap * GPU_MAX_K)?,
            counts: s.alloc_zeros(self.nlist)?,
            cursor: s.alloc_zeros(self.nlist)?,
            order: s.alloc_zeros(cap * max_probe)?,
        })
    }

    /// The three stages on `s` for the first `nq` queries already in `b.q`; results land in
    /// `b.out_ids` / `b.out_dist` (nq x k). Asynchronous. Cohorts large enough that cells are
    /// probed more than once on average take the grouped (cache-sharing) search.
    pub fn launch_into(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        nq: usize,
        k: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        self.launch_into_with(s, b, nq, k, nprobe, nq * nprobe >= 2 * self.nlist)
    }

    /// As `launch_into`, choosing the search order: `grouped` sorts the (query, probe) pairs
    /// by cell first (three small kernels) so queries probing one cell share its reads.
    pub fn launch_into_with(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        nq: usize,
        k: usize,
        nprobe: usize,
        grouped: bool,
    ) -> Result<(), GpuError> {
        self.check(k, nprobe).map_err(GpuError::Invalid)?;
        if nq == 0 || nq > b.cap {
            return Err(GpuError::Invalid(format!(
                "batch of {nq} for buffers of {}",
                b.cap
            )));
        }
        self.run_filter(s, &b.q, &mut b.scratch, &mut b.probes, nq, nprobe)?;
        let order = if grouped {
            let (pairs, nlist) = ((nq * nprobe) as i32, self.nlist as i32);
            s.memset_zeros(&mut b.counts)?;
            let grid = LaunchConfig {
                grid_dim: ((pairs as u32).div_ceil(BLOCK).min(1024), 1, 1),
                ..Self::blocks(1)
            };
            let mut c = s.launch_builder(&self.f_count);
            c.arg(&b.probes).arg(&pairs).arg(&mut b.counts);
            // SAFETY: matches knn_count; counts has nlist entries, probes are < nlist.
            unsafe { c.launch(grid) }?;
            let mut sc = s.launch_builder(&self.f_scan);
            sc.arg(&b.counts).arg(&nlist).arg(&mut b.cursor);
            // SAFETY: matches knn_scan; one block.
            unsafe { sc.launch(Self::blocks(1)) }?;
            let mut sa = s.launch_builder(&self.f_scatter);
            sa.arg(&b.probes)
                .arg(&pairs)
                .arg(&mut b.cursor)
                .arg(&mut b.order);
            // SAFETY: matches knn_scatter; order holds cap*max_probe >= pairs entries.
            unsafe { sa.launch(grid) }?;
            Some(&b.order)
        } else {
            None
        };
        self.run_search(
            s,
            &b.q,
            &b.probes,
            order,
            &mut b.part_ids,
            &mut b.part_dist,
            nq,
            nprobe,
            k,
        )?;
        self.run_reduce(
            s,
            &b.part_ids,
            &b.part_dist,
            &mut b.out_ids,
            &mut b.out_dist,
            nq,
            nprobe,
            k,
        )
    }

    fn search_fn(&self) -> &CudaFunction {
        match self.precision {
            Precision::F32 => &self.f_search,
            Precision::F16 => &self.f_search16,
        }
    }

    fn push_vectors<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        match (&self.vectors, &self.vectors16) {
            (Some(v), _) => b.arg(v),
            (None, Some(v)) => b.arg(v),
            (None, None) => unreachable!("upload stores the vectors in one precision"),
        };
    }

    /// Whether the kernels can serve (k, nprobe); the message says why not.
    pub fn check(&self, k: usize, nprobe: usize) -> Result<(), String> {
        if k == 0 || k > GPU_MAX_K {
            return Err(format!("the gpu engines serve k in 1..={GPU_MAX_K}"));
        }
        if nprobe == 0 || nprobe > self.nlist {
            return Err(format!("nprobe must be in 1..={}", self.nlist));
        }
        if nprobe * k > GPU_MAX_CANDIDATES {
            return Err(format!(
                "nprobe x k must be at most {GPU_MAX_CANDIDATES} on the gpu engines"
            ));
        }
        Ok(())
    }

    fn blocks(n: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (n as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    // The one place each kernel's argument list is written (the stage launchers below and
    // `launch_into_with` both go through these).

    /// knn_filter: one block per query; scratch holds nq x nlist, probes nq x nprobe.
    fn run_filter(
        &self,
        s: &Arc<CudaStream>,
        q: &CudaSlice<f32>,
        scratch: &mut CudaSlice<f32>,
        probes: &mut CudaSlice<u32>,
        nq: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        assert!(
            scratch.len() >= nq * self.nlist && probes.len() >= nq * nprobe,
            "filter buffers too small"
        );
        let (nlist, dim, np, metric) = (
            self.nlist as i32,
            self.dim as i32,
            nprobe as i32,
            self.metric,
        );
        let mut b = s.launch_builder(&self.f_filter);
        b.arg(q)
            .arg(&self.centroids)
            .arg(&nlist)
            .arg(&dim)
            .arg(&np)
            .arg(&metric)
            .arg(scratch)
            .arg(probes);
        // SAFETY: argument types and order match knn_filter; buffer sizes asserted above.
        unsafe { b.launch(Self::blocks(nq)) }?;
        Ok(())
    }

    /// knn_search (f32 or f16 by `precision`): one block per (query, probe), in `order` if given.
    #[allow(clippy::too_many_arguments)]
    fn run_search(
        &self,
        s: &Arc<CudaStream>,
        q: &CudaSlice<f32>,
        probes: &CudaSlice<u32>,
        order: Option<&CudaSlice<u32>>,
        ids: &mut CudaSlice<u32>,
        dist: &mut CudaSlice<f32>,
        nq: usize,
        nprobe: usize,
        k: usize,
    ) -> Result<(), GpuError> {
        assert!(
            ids.len() >= nq * nprobe * k && dist.len() >= nq * nprobe * k,
            "search buffers too small"
        );
        let (np, dim, kk, metric) = (nprobe as i32, self.dim as i32, k as i32, self.metric);
        let null: u64 = 0; // no order: block b scans pair b
        let mut b = s.launch_builder(self.search_fn());
        b.arg(q);
        self.push_vectors(&mut b);
        b.arg(&self.ids).arg(&self.offsets).arg(probes);
        match order {
            Some(o) => b.arg(o),
            None => b.arg(&null),
        };
        b.arg(&np)
            .arg(&dim)
            .arg(&kk)
            .arg(&metric)
            .arg(ids)
            .arg(dist);
        // SAFETY: matches knn_search / knn_search_f16; outputs sized as asserted above.
        unsafe { b.launch(Self::blocks(nq * nprobe)) }?;
        Ok(())
    }

    /// knn_reduce: one block per query, nprobe * k candidates in shared memory.
    #[allow(clippy::too_many_arguments)]
    fn run_reduce(
        &self,
        s: &Arc<CudaStream>,
        part_ids: &CudaSlice<u32>,
        part_dist: &CudaSlice<f32>,
        ids: &mut CudaSlice<u32>,
        dist: &mut CudaSlice<f32>,
        nq: usize,
        nprobe: usize,
        k: usize,
    ) -> Result<(), GpuError> {
        assert!(
            nprobe * k <= GPU_MAX_CANDIDATES && ids.len() >= nq * k && dist.len() >= nq * k,
            "reduce buffers"
        );
        let (np, kk) = (nprobe as i32, k as i32);
        let mut b = s.launch_builder(&self.f_reduce);
        b.arg(part_ids)
            .arg(part_dist)
            .arg(&np)
            .arg(&kk)
            .arg(ids)
            .arg(dist);
        let cfg = LaunchConfig {
            shared_mem_bytes: (nprobe * k * 8) as u32,
            ..Self::blocks(nq)
        };
        // SAFETY: matches knn_reduce; shared memory holds nprobe*k candidates (<= 48 KiB).
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// Stage 1 alone: probes (nq x nprobe) in fresh buffers.
    pub fn launch_filter(
        &self,
        s: &Arc<CudaStream>,
        q: &CudaSlice<f32>,
        nq: usize,
        nprobe: usize,
    ) -> Result<CudaSlice<u32>, GpuError> {
        let mut scratch = s.alloc_zeros::<f32>(nq * self.nlist)?;
        let mut probes = s.alloc_zeros::<u32>(nq * nprobe)?;
        self.run_filter(s, q, &mut scratch, &mut probes, nq, nprobe)?;
        Ok(probes)
    }

    /// Stage 2 alone: partial top-k per (query, probe) in fresh buffers.
    pub fn launch_search(
        &self,
        s: &Arc<CudaStream>,
        q: &CudaSlice<f32>,
        probes: &CudaSlice<u32>,
        nq: usize,
        nprobe: usize,
        k: usize,
    ) -> Result<(CudaSlice<u32>, CudaSlice<f32>), GpuError> {
        let mut ids = s.alloc_zeros::<u32>(nq * nprobe * k)?;
        let mut dist = s.alloc_zeros::<f32>(nq * nprobe * k)?;
        self.run_search(s, q, probes, None, &mut ids, &mut dist, nq, nprobe, k)?;
        Ok((ids, dist))
    }

    /// Stage 3 alone: final top-k per query in fresh buffers.
    pub fn launch_reduce(
        &self,
        s: &Arc<CudaStream>,
        part_ids: &CudaSlice<u32>,
        part_dist: &CudaSlice<f32>,
        nq: usize,
        nprobe: usize,
        k: usize,
    ) -> Result<(CudaSlice<u32>, CudaSlice<f32>), GpuError> {
        let mut ids = s.alloc_zeros::<u32>(nq * k)?;
        let mut dist = s.alloc_zeros::<f32>(nq * k)?;
        self.run_reduce(s, part_ids, part_dist, &mut ids, &mut dist, nq, nprobe, k)?;
        Ok((ids, dist))
    }

    /// Synchronous convenience: queries (row-major) in, neighbours out.
    pub fn search(
        &self,
        s: &Arc<CudaStream>,
        queries: &[f32],
        k: usize,
        nprobe: usize,
    ) -> Result<Vec<Vec<Neighbor>>, GpuError> {
        let nq = queries.len() / self.dim;
        let mut b = self.buffers(s, nq)?;
        s.memcpy_htod(queries, &mut b.q)?;
        self.launch_into(s, &mut b, nq, k, nprobe)?;
        let ids = s.clone_dtoh(&b.out_ids.slice(0..nq * k))?;
        let dist = s.clone_dtoh(&b.out_dist.slice(0..nq * k))?;
        s.synchronize()?;
        Ok(to_neighbors(&ids, &dist, nq, k))
    }
}

/// Rows of k (id, distance), dropping padding (cells smaller than k).
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
