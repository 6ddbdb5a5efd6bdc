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

pub struct GpuIvf {
    pub ctx: Arc<CudaContext>,
    pub dim: usize,
    pub nlist: usize,
    pub n: usize,
    pub default_nprobe: usize,
    metric: i32,
    centroids: CudaSlice<f32>,
    vectors: CudaSlice<f32>,
    ids: CudaSlice<u32>,
    offsets: CudaSlice<u64>,
    f_filter: CudaFunction,
    f_search: CudaFunction,
    f_reduce: CudaFunction,
    /// Bytes held on the device.
    pub device_bytes: usize,
}

/// Device buffers of one launched batch; results are read after the stream has run.
pub struct Launched {
    pub nq: usize,
    pub k: usize,
    pub out_ids: CudaSlice<u32>,
    pub out_dist: CudaSlice<f32>,
}

impl GpuIvf {
    /// Compiles the kernels for this device and uploads the index (f32).
    pub fn upload(dev: &DeviceInfo, ix: &IvfIndex) -> Result<GpuIvf, GpuError> {
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
            vectors: s.clone_htod(ix.vectors())?,
            ids: s.clone_htod(ix.ids())?,
            offsets: s.clone_htod(ix.offsets())?,
            f_filter: module.load_function("knn_filter")?,
            f_search: module.load_function("knn_search")?,
            f_reduce: module.load_function("knn_reduce")?,
            device_bytes: 4 * (ix.centroids().len() + ix.vectors().len() + ix.ids().len())
                + 8 * ix.offsets().len(),
            ctx,
        };
        s.synchronize()?;
        Ok(ivf)
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

    /// Stage 1 on the device: probes (nq x nprobe).
    pub fn launch_filter(
        &self,
        s: &Arc<CudaStream>,
        q: &CudaSlice<f32>,
        nq: usize,
        nprobe: usize,
    ) -> Result<CudaSlice<u32>, GpuError> {
        let mut scratch = s.alloc_zeros::<f32>(nq * self.nlist)?;
        let mut probes = s.alloc_zeros::<u32>(nq * nprobe)?;
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
            .arg(&mut scratch)
            .arg(&mut probes);
        // SAFETY: argument types and order match knn_filter; buffers are sized nq x nlist and
        // nq x nprobe; one block per query.
        unsafe { b.launch(Self::blocks(nq)) }?;
        Ok(probes)
    }

    /// Stage 2 on the device: partial top-k per (query, probe).
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
        let (np, dim, kk, metric) = (nprobe as i32, self.dim as i32, k as i32, self.metric);
        let mut b = s.launch_builder(&self.f_search);
        b.arg(q)
            .arg(&self.vectors)
            .arg(&self.ids)
            .arg(&self.offsets)
            .arg(probes);
        b.arg(&np)
            .arg(&dim)
            .arg(&kk)
            .arg(&metric)
            .arg(&mut ids)
            .arg(&mut dist);
        // SAFETY: matches knn_search; one block per (query, probe); outputs sized nq*nprobe*k.
        unsafe { b.launch(Self::blocks(nq * nprobe)) }?;
        Ok((ids, dist))
    }

    /// Stage 3 on the device: final top-k per query.
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
        let (np, kk) = (nprobe as i32, k as i32);
        let mut b = s.launch_builder(&self.f_reduce);
        b.arg(part_ids)
            .arg(part_dist)
            .arg(&np)
            .arg(&kk)
            .arg(&mut ids)
            .arg(&mut dist);
        let cfg = LaunchConfig {
            shared_mem_bytes: (nprobe * k * 8) as u32,
            ..Self::blocks(nq)
        };
        // SAFETY: matches knn_reduce; shared memory holds nprobe*k candidates (checked <= 48 KiB).
        unsafe { b.launch(cfg) }?;
        Ok((ids, dist))
    }

    /// The whole query on `s` without host round trips between stages (asynchronous).
    pub fn launch(
        &self,
        s: &Arc<CudaStream>,
        q: &CudaSlice<f32>,
        nq: usize,
        k: usize,
        nprobe: usize,
    ) -> Result<Launched, GpuError> {
        self.check(k, nprobe).map_err(GpuError::Invalid)?;
        let probes = self.launch_filter(s, q, nq, nprobe)?;
        let (pi, pd) = self.launch_search(s, q, &probes, nq, nprobe, k)?;
        let (out_ids, out_dist) = self.launch_reduce(s, &pi, &pd, nq, nprobe, k)?;
        Ok(Launched {
            nq,
            k,
            out_ids,
            out_dist,
        })
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
        let q = s.clone_htod(queries)?;
        let l = self.launch(s, &q, nq, k, nprobe)?;
        let ids = s.clone_dtoh(&l.out_ids)?;
        let dist = s.clone_dtoh(&l.out_dist)?;
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
