//! The per-pair plan: knn_filter (block per query) -> knn_search (block per (query, probe),
//! top-k in shared memory) -> knn_reduce (block per query). Each stage also launches alone
//! into fresh buffers, so tests compare it with its CPU twin.

use super::{Buffers, GpuIvf, BLOCK, GPU_MAX_CANDIDATES};
use cohort_gpu::GpuError;
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

impl GpuIvf {
    /// The three stages for the first `nq` queries in `b.q` (checked by the caller).
    pub(super) fn per_pair_into(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        nq: usize,
        k: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        self.run_filter(s, &b.q, &mut b.scratch, &mut b.probes, nq, nprobe)?;
        self.run_search(
            s,
            &b.q,
            &b.probes,
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

    pub(super) fn blocks(n: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (n as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    // The one place each kernel's argument list is written (the stage launchers below and
    // `per_pair_into` both go through these).

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
        let mut b = s.launch_builder(&self.kernels.filter);
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

    /// knn_search (by `precision`): one block per (query, probe).
    #[allow(clippy::too_many_arguments)]
    fn run_search(
        &self,
        s: &Arc<CudaStream>,
        q: &CudaSlice<f32>,
        probes: &CudaSlice<u32>,
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
        let mut b = s.launch_builder(&self.kernels.search[self.precision as usize]);
        b.arg(q);
        self.vectors.push(&mut b);
        b.arg(&self.ids).arg(&self.offsets).arg(probes);
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
        let mut b = s.launch_builder(&self.kernels.reduce);
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
        self.run_search(s, q, probes, &mut ids, &mut dist, nq, nprobe, k)?;
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
}
