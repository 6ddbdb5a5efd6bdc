//! The per-pair plan: knn_filter (block per query) -> knn_search (block per (query, probe),
//! top-k in shared memory) -> knn_reduce (block per query). Each stage also launches alone
//! into fresh buffers, so tests compare it with its CPU twin.

use super::{Buffers, GpuIvf, GPU_MAX_CANDIDATES};
use crate::kernels::per_pair::{KnnFilterArgs, KnnReduceArgs, KnnSearchArgs};
use cohort_gpu::launch::{Dev, Work};
use cohort_gpu::GpuError;
use cudarc::driver::{CudaSlice, CudaStream};
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

    // The one place each kernel's argument block is written (the stage launchers below and
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
        let args = KnnFilterArgs {
            queries: Dev::of(q, s),
            centroids: Dev::of(&self.centroids, s),
            nlist: self.nlist as i32,
            dim: self.dim as i32,
            nprobe: nprobe as i32,
            metric: self.metric,
            scratch: Dev::of_mut(scratch, s),
            probes: Dev::of_mut(probes, s),
        };
        // SAFETY: q holds nq x dim (the caller's), scratch and probes sized as asserted.
        unsafe { self.kernels.filter.launch(s, Work::Items(nq), 0, &args) }
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
        let args = KnnSearchArgs {
            queries: Dev::of(q, s),
            vectors: self.vectors.dev(s),
            row_ids: Dev::of(&self.ids, s),
            offsets: Dev::of(&self.offsets, s),
            probes: Dev::of(probes, s),
            nprobe: nprobe as i32,
            dim: self.dim as i32,
            k: k as i32,
            metric: self.metric,
            out_ids: Dev::of_mut(ids, s),
            out_dist: Dev::of_mut(dist, s),
        };
        let kernel = &self.kernels.search[self.precision as usize];
        // SAFETY: the kernel of the index's precision; outputs sized as asserted above.
        unsafe { kernel.launch(s, Work::Items(nq * nprobe), 0, &args) }
    }

    /// knn_reduce: one block per query, nprobe * k candidates in shared memory.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_reduce(
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
        let args = KnnReduceArgs {
            part_ids: Dev::of(part_ids, s),
            part_dist: Dev::of(part_dist, s),
            nprobe: nprobe as i32,
            k: k as i32,
            out_ids: Dev::of_mut(ids, s),
            out_dist: Dev::of_mut(dist, s),
        };
        let shared = (nprobe * k * 8) as u32;
        // SAFETY: shared memory holds nprobe*k candidates (<= 48 KiB); outputs as asserted.
        unsafe {
            self.kernels
                .reduce
                .launch(s, Work::Items(nq), shared, &args)
        }
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
