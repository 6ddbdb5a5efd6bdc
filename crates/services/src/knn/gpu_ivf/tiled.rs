//! The tiled plan for cohorts (kernels/knn_tiled.cu): seven launches on one stream, no host
//! round trip. A cohort whose candidate rows do not fit `Buffers::cand` runs in passes.

use super::{Buffers, GpuIvf, BLOCK};
use cohort_gpu::GpuError;
use cudarc::driver::{LaunchConfig, PushKernelArg};
use std::sync::Arc;

use crate::knn::kernels::{QB, RT};
/// Resident blocks per SM the grid-stride search aims for (256 threads, ~13 KiB shared each).
const BLOCKS_PER_SM: usize = 8;

/// Rows per work item: big enough to amortise staging the queries, small enough that
/// `blocks` work items exist (a multiple of the tile height, 64..=1024).
fn chunk_rows(total_rows: usize, groups: usize, blocks: usize) -> usize {
    let want = total_rows.saturating_mul(groups) / blocks.max(1);
    (want / RT * RT).clamp(RT, 16 * RT)
}

impl GpuIvf {
    /// The cohort in `b.q[..nq]` in passes of as many queries as the candidate buffer holds.
    pub(super) fn tiled_into(
        &self,
        s: &Arc<cudarc::driver::CudaStream>,
        b: &mut Buffers,
        nq: usize,
        k: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        // Longest candidate row a query can have: its probes are the nprobe largest cells.
        let stride = self.top_rows[nprobe].max(1);
        let per_pass = (b.cand.len() / stride).max(1);
        assert!(
            b.cand.len() >= stride,
            "candidate buffer below one query's row"
        );
        let mut q0 = 0;
        while q0 < nq {
            let m = per_pass.min(nq - q0);
            self.tiled_pass(s, b, q0, m, k, nprobe, stride, &mut |_| Ok(()))?;
            q0 += m;
        }
        Ok(())
    }

    /// One pass of the tiled plan (queries 0..nq, which must fit the candidate buffer) with
    /// the GPU time of each of its kernels, in milliseconds: for profiling.
    pub fn profile_tiled(
        &self,
        s: &Arc<cudarc::driver::CudaStream>,
        b: &mut Buffers,
        nq: usize,
        k: usize,
        nprobe: usize,
    ) -> Result<Vec<(&'static str, f32)>, GpuError> {
        self.check(k, nprobe).map_err(GpuError::Invalid)?;
        let stride = self.top_rows[nprobe].max(1);
        if nq == 0 || nq > b.cap || nq * stride > b.cand.len() || nprobe > super::TILED_MAX_PROBE {
            return Err(GpuError::Invalid(
                "profile: batch does not fit one pass".into(),
            ));
        }
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let mut marks = vec![("start", self.ctx.new_event(flags)?)];
        marks[0].1.record(s)?;
        self.tiled_pass(s, b, 0, nq, k, nprobe, stride, &mut |stage| {
            let e = self.ctx.new_event(flags)?;
            e.record(s)?;
            marks.push((stage, e));
            Ok(())
        })?;
        s.synchronize()?;
        marks
            .windows(2)
            .map(|w| Ok((w[1].0, w[0].1.elapsed_ms(&w[1].1)?)))
            .collect()
    }

    /// Queries q0..q0+m. Scratch, probes and the candidate rows are reused by every pass
    /// (stream order keeps the passes apart).
    #[allow(clippy::too_many_arguments)]
    fn tiled_pass(
        &self,
        s: &Arc<cudarc::driver::CudaStream>,
        b: &mut Buffers,
        q0: usize,
        m: usize,
        k: usize,
        nprobe: usize,
        stride: usize,
        after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let (dim, nlist) = (self.dim, self.nlist);
        assert!(
            m * stride <= b.cand.len()
                && m * nlist <= b.scratch.len()
                && m * nprobe <= b.probes.len().min(b.poff.len()).min(b.order.len())
                && (q0 + m) * k <= b.out_ids.len(),
            "tiled buffers too small"
        );
        let q = b.q.slice(q0 * dim..(q0 + m) * dim);
        let (mi, nlist_i, dim_i, np_i, k_i) =
            (m as i32, nlist as i32, dim as i32, nprobe as i32, k as i32);
        let blocks = self.sms * BLOCKS_PER_SM;
        let groups = m.div_ceil(QB);

        // 1. Query x centroid distances.
        let fchunk = chunk_rows(nlist, groups, blocks) as i32;
        let mut l = s.launch_builder(&self.kernels.filter_tiled);
        l.arg(&q)
            .arg(&mi)
            .arg(&self.centroids)
            .arg(&nlist_i)
            .arg(&dim_i)
            .arg(&self.metric)
            .arg(&fchunk)
            .arg(&mut b.scratch);
        let cfg = LaunchConfig {
            grid_dim: (groups as u32, nlist.div_ceil(fchunk as usize) as u32, 1),
            ..Self::blocks(1)
        };
        // SAFETY: matches knn_filter_tiled; scratch holds m x nlist (asserted).
        unsafe { l.launch(cfg) }?;

        after("filter")?;

        // 2. The nprobe nearest cells per query.
        let mut l = s.launch_builder(&self.kernels.select_filter);
        l.arg(&b.scratch)
            .arg(&nlist_i)
            .arg(&np_i)
            .arg(&mut b.probes);
        // SAFETY: matches knn_select_filter; probes holds m x nprobe, nprobe <= SEL_MAX.
        unsafe { l.launch(Self::blocks(m)) }?;

        after("select_filter")?;

        // 3. Candidate row layout per query; queries per cell.
        s.memset_zeros(&mut b.counts)?;
        let mut l = s.launch_builder(&self.kernels.plan);
        l.arg(&b.probes)
            .arg(&mi)
            .arg(&np_i)
            .arg(&self.offsets)
            .arg(&mut b.poff)
            .arg(&mut b.totals)
            .arg(&mut b.counts);
        // SAFETY: matches knn_plan; thread per query; poff m x nprobe, totals m, counts nlist.
        unsafe { l.launch(Self::blocks(m.div_ceil(BLOCK as usize))) }?;

        after("plan")?;

        // 4. Pair starts and work items per cell. Average cell rows x queries per cell sizes
        //    the row chunk so the grid has work for every resident block.
        let pairs = m * nprobe;
        let avg_rows = self.n.div_ceil(nlist).max(1);
        let cell_groups = (pairs / QB).max(pairs.min(nlist));
        let schunk = chunk_rows(avg_rows, cell_groups, blocks) as i32;
        let mut l = s.launch_builder(&self.kernels.scan_items);
        l.arg(&b.counts)
            .arg(&nlist_i)
            .arg(&self.offsets)
            .arg(&schunk)
            .arg(&mut b.cursor)
            .arg(&mut b.items);
        // SAFETY: matches knn_scan_items; one block; items holds nlist + 1.
        unsafe { l.launch(Self::blocks(1)) }?;

        after("scan_items")?;

        // 5. Pairs grouped by cell.
        let pairs_i = pairs as i32;
        let mut l = s.launch_builder(&self.kernels.scatter);
        l.arg(&b.probes)
            .arg(&pairs_i)
            .arg(&mut b.cursor)
            .arg(&mut b.order);
        // SAFETY: matches knn_scatter; order holds >= pairs entries (asserted).
        unsafe { l.launch(Self::blocks(pairs.div_ceil(BLOCK as usize).min(1024))) }?;

        after("scatter")?;

        // 6. Cell x query-group distances into the candidate rows.
        let stride_u = stride as u64;
        let mut l = s.launch_builder(&self.kernels.search_tiled[self.precision as usize]);
        l.arg(&q);
        self.vectors.push(&mut l);
        l.arg(&self.offsets)
            .arg(&nlist_i)
            .arg(&np_i)
            .arg(&dim_i)
            .arg(&schunk)
            .arg(&self.metric)
            .arg(&b.counts)
            .arg(&b.cursor)
            .arg(&b.items)
            .arg(&b.order)
            .arg(&b.poff)
            .arg(&mut b.cand)
            .arg(&stride_u);
        // At most one work item per pair per row chunk of the largest cell.
        let bound = pairs * self.top_rows[1].div_ceil(schunk as usize).max(1);
        // SAFETY: matches knn_search_tiled*; candidate rows hold m x stride (asserted), and
        // every query's row is at most `stride` long by construction of top_rows.
        unsafe { l.launch(Self::blocks(blocks.min(bound))) }?;

        after("search")?;

        // 7. The k nearest of each candidate row; 1024 threads a query when too few queries
        //    would leave SMs idle.
        let mut ids = b.out_ids.slice_mut(q0 * k..(q0 + m) * k);
        let mut dist = b.out_dist.slice_mut(q0 * k..(q0 + m) * k);
        let wide = m < 2 * self.sms;
        let mut l = s.launch_builder(if wide {
            &self.kernels.select_search_wide
        } else {
            &self.kernels.select_search
        });
        l.arg(&b.cand)
            .arg(&stride_u)
            .arg(&b.totals)
            .arg(&b.poff)
            .arg(&b.probes)
            .arg(&np_i)
            .arg(&self.offsets)
            .arg(&self.ids)
            .arg(&k_i)
            .arg(&mut ids)
            .arg(&mut dist);
        let cfg = LaunchConfig {
            block_dim: (if wide { 1024 } else { BLOCK }, 1, 1),
            ..Self::blocks(m)
        };
        // SAFETY: matches knn_select_search(_wide) and its block size; outputs m x k;
        // k <= GPU_MAX_K <= SEL_MAX.
        unsafe { l.launch(cfg) }?;
        after("select_search")
    }
}
