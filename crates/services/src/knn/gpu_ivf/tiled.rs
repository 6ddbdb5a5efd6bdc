//! The tiled plan for cohorts (kernels/knn_tiled.cu): seven launches on one stream, no host
//! round trip. A cohort whose candidate rows do not fit `Buffers::cand` runs in passes.

use super::{Buffers, GpuIvf};
use crate::knn::kernels::tiled::*;
use cohort_gpu::launch::{Dev, Work};
use cohort_gpu::GpuError;
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
        let q = Dev::of(&b.q.slice(q0 * dim..(q0 + m) * dim), s);
        let (offsets, metric) = (Dev::of(&self.offsets, s), self.metric);
        let (mi, nlist_i, dim_i, np_i) = (m as i32, nlist as i32, dim as i32, nprobe as i32);
        let blocks = self.sms * BLOCKS_PER_SM;
        let groups = m.div_ceil(QB);
        let kn = &self.kernels;

        // 1. Query x centroid distances.
        let fchunk = chunk_rows(nlist, groups, blocks) as i32;
        let args = KnnFilterTiledArgs {
            queries: q,
            nq: mi,
            centroids: Dev::of(&self.centroids, s),
            nlist: nlist_i,
            dim: dim_i,
            metric,
            chunk: fchunk,
            scratch: Dev::of_mut(&mut b.scratch, s),
        };
        let grid = Work::Grid(groups as u32, nlist.div_ceil(fchunk as usize) as u32);
        // SAFETY: scratch holds m x nlist (asserted).
        unsafe { kn.filter_tiled.launch(s, grid, 0, &args) }?;
        after("filter")?;

        // 2. The nprobe nearest cells per query.
        let args = KnnSelectFilterArgs {
            scratch: Dev::of(&b.scratch, s),
            nlist: nlist_i,
            nprobe: np_i,
            probes: Dev::of_mut(&mut b.probes, s),
        };
        // SAFETY: probes holds m x nprobe, nprobe <= SEL_MAX.
        unsafe { kn.select_filter.launch(s, Work::Items(m), 0, &args) }?;
        after("select_filter")?;

        // 3. Candidate row layout per query; queries per cell.
        s.memset_zeros(&mut b.counts)?;
        let args = KnnPlanArgs {
            probes: Dev::of(&b.probes, s),
            nq: mi,
            nprobe: np_i,
            offsets,
            poff: Dev::of_mut(&mut b.poff, s),
            totals: Dev::of_mut(&mut b.totals, s),
            counts: Dev::of_mut(&mut b.counts, s),
        };
        // SAFETY: poff m x nprobe, totals m, counts nlist.
        unsafe { kn.plan.launch(s, Work::Items(m), 0, &args) }?;
        after("plan")?;

        // 4. Pair starts and work items per cell. Average cell rows x queries per cell sizes
        //    the row chunk so the grid has work for every resident block.
        let pairs = m * nprobe;
        let avg_rows = self.n.div_ceil(nlist).max(1);
        let cell_groups = (pairs / QB).max(pairs.min(nlist));
        let schunk = chunk_rows(avg_rows, cell_groups, blocks) as i32;
        let args = KnnScanItemsArgs {
            counts: Dev::of(&b.counts, s),
            nlist: nlist_i,
            offsets,
            chunk: schunk,
            cursor: Dev::of_mut(&mut b.cursor, s),
            items: Dev::of_mut(&mut b.items, s),
        };
        // SAFETY: one block; cursor holds nlist, items nlist + 1.
        unsafe { kn.scan_items.launch(s, Work::Grid(1, 1), 0, &args) }?;
        after("scan_items")?;

        // 5. Pairs grouped by cell.
        let args = KnnScatterArgs {
            probes: Dev::of(&b.probes, s),
            pairs: pairs as i32,
            cursor: Dev::of_mut(&mut b.cursor, s),
            order: Dev::of_mut(&mut b.order, s),
        };
        // SAFETY: order holds >= pairs entries (asserted).
        unsafe { kn.scatter.launch(s, Work::Items(pairs), 0, &args) }?;
        after("scatter")?;

        // 6. Cell x query-group distances into the candidate rows.
        let args = KnnSearchTiledArgs {
            queries: q,
            vectors: self.vectors.dev(s),
            offsets,
            nlist: nlist_i,
            nprobe: np_i,
            dim: dim_i,
            chunk: schunk,
            metric,
            counts: Dev::of(&b.counts, s),
            cursor: Dev::of(&b.cursor, s),
            items: Dev::of(&b.items, s),
            order: Dev::of(&b.order, s),
            poff: Dev::of(&b.poff, s),
            cand: Dev::of_mut(&mut b.cand, s),
            stride: stride as u64,
        };
        // At most one work item per pair per row chunk of the largest cell.
        let bound = pairs * self.top_rows[1].div_ceil(schunk as usize).max(1);
        let grid = Work::Grid(blocks.min(bound) as u32, 1);
        // SAFETY: candidate rows hold m x stride (asserted), and every query's row is at most
        // `stride` long by construction of top_rows.
        unsafe { kn.search_tiled[self.precision as usize].launch(s, grid, 0, &args) }?;
        after("search")?;

        // 7. k nearest per query; the results of queries q0.. land at rows q0..
        let args = KnnSelectSearchArgs {
            cand: Dev::of(&b.cand, s),
            stride: stride as u64,
            totals: Dev::of(&b.totals, s),
            poff: Dev::of(&b.poff, s),
            probes: Dev::of(&b.probes, s),
            nprobe: np_i,
            offsets,
            row_ids: Dev::of(&self.ids, s),
            k: k as i32,
            out_ids: Dev::of_mut(&mut b.out_ids.slice_mut(q0 * k..(q0 + m) * k), s),
            out_dist: Dev::of_mut(&mut b.out_dist.slice_mut(q0 * k..(q0 + m) * k), s),
        };
        // Few queries: 1024 threads each, so the select still fills the SMs.
        let select = if m < 2 * self.sms {
            &kn.select_search_wide
        } else {
            &kn.select_search
        };
        // SAFETY: outputs m x k; k <= GPU_MAX_K <= SEL_MAX.
        unsafe { select.launch(s, Work::Items(m), 0, &args) }?;
        after("select_search")
    }
}
