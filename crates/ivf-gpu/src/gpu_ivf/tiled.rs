//! The tiled plan for cohorts (kernels/knn_tiled.cu): five to eight launches on one stream,
//! no host round trip. A cohort whose candidate rows do not fit `Buffers::cand` runs in passes.

use super::{Buffers, FilterKind, GpuIvf, Precision, SearchKind};
use crate::kernels::tiled::*;
use cohort_gpu::launch::{Dev, Kernel, Work};
use cohort_gpu::GpuError;
use cudarc::driver::CudaStream;
use std::sync::Arc;

use crate::kernels::{BLOCK, PAIR_MAX_QUERIES, QB, RT, TC_CTILE, TC_QTILE, U8_MIN_BLOCKS};
/// Resident blocks per SM the grid-stride search aims for (256 threads, ~13 KiB shared each).
const BLOCKS_PER_SM: usize = 8;
/// The warp-per-item search runs while a cohort's probes average at most this many queries a
/// cell (measured: 4 won, 32 lost; between them not measured, so the bound sits low).
const WARP_SEARCH_MAX_QUERIES_PER_CELL: usize = 8;
/// Passes of at most this many queries plan, scan and scatter in one block
/// (`knn_plan_one_block`: a warp plans 4 queries in turn at most) instead of four launches.
const PLAN_ONE_BLOCK_MAX_QUERIES: usize = 128;

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
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        nq: usize,
        k: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        let stride = self.candidate_stride(nprobe);
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

    /// Whether a select of m queries takes a block of WIDE_BLOCK threads a query: too few
    /// queries to fill the SMs with BLOCK-thread blocks.
    fn wide_selects(&self, m: usize) -> bool {
        m < 2 * self.sms
    }

    /// The select kernel for m queries: `wide` (WIDE_BLOCK threads a query) below
    /// `wide_selects`, else `narrow` (BLOCK threads).
    fn select_for<'k, A>(
        &self,
        m: usize,
        narrow: &'k Kernel<A>,
        wide: &'k Kernel<A>,
    ) -> &'k Kernel<A> {
        if self.wide_selects(m) {
            wide
        } else {
            narrow
        }
    }

    /// Longest candidate row a query can have here: its probes are the nprobe largest cells.
    fn candidate_stride(&self, nprobe: usize) -> usize {
        self.top_rows[nprobe].max(1)
    }

    /// Filter only: the nprobe nearest cells of each query in `b.q[..nq]` into
    /// `b.probes[..nq * nprobe]` (a sharded index's home device; the shards then scan).
    pub fn filter_into(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        nq: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        if nq == 0 || nq > b.cap || nprobe == 0 || nprobe > self.nlist.min(super::TILED_MAX_PROBE) {
            return Err(GpuError::Invalid(format!(
                "filter of {nq} queries, nprobe {nprobe}, for buffers of {} and {} cells",
                b.cap, self.nlist
            )));
        }
        self.filter_step(s, b, 0, nq, nprobe, &mut |_| Ok(()))
    }

    /// Scan and select only: the k nearest of each of `nq` queries among this device's lists
    /// of its probes (`io`: the queries, probes and result rows, possibly on another device
    /// of the same memory or a peer), in passes of what `b.cand` holds. Asynchronous on `s`.
    pub fn scan_into(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        io: ScanIo,
        nq: usize,
        k: usize,
        nprobe: usize,
    ) -> Result<(), GpuError> {
        self.check(k, nprobe).map_err(GpuError::Invalid)?;
        if nq == 0 || nq > b.cap || nprobe > super::TILED_MAX_PROBE || io.out_stride < k {
            return Err(GpuError::Invalid(format!(
                "scan of {nq} queries (nprobe {nprobe}, k {k}, row {}) for buffers of {}",
                io.out_stride, b.cap
            )));
        }
        let stride = self.candidate_stride(nprobe);
        let per_pass = (b.cand.len() / stride).max(1);
        let mut q0 = 0;
        while q0 < nq {
            let m = per_pass.min(nq - q0);
            self.scan_step(
                s,
                b,
                io.at(q0, self.dim, nprobe),
                m,
                k,
                nprobe,
                stride,
                &mut |_| Ok(()),
            )?;
            q0 += m;
        }
        Ok(())
    }

    /// One pass of the tiled plan (queries 0..nq, which must fit the candidate buffer) with
    /// the GPU time of each of its kernels, in milliseconds: for profiling.
    pub fn profile_tiled(
        &self,
        s: &Arc<CudaStream>,
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
        let mut timer = cohort_gpu::StageTimer::start(s)?;
        self.tiled_pass(s, b, 0, nq, k, nprobe, stride, &mut |stage| {
            timer.mark(stage)
        })?;
        timer.finish()
    }

    /// Queries q0..q0+m. Scratch and the candidate rows are reused by every pass (stream
    /// order keeps the passes apart); the probes of query q stay at row q.
    #[allow(clippy::too_many_arguments)]
    fn tiled_pass(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        q0: usize,
        m: usize,
        k: usize,
        nprobe: usize,
        stride: usize,
        after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        assert!((q0 + m) * k <= b.out_ids.len(), "tiled buffers too small");
        if let Some(search) = self.pair_scan(b, m, nprobe) {
            return self.pairs_pass(s, b, q0, m, k, nprobe, stride, search, after);
        }
        self.filter_step(s, b, q0, m, nprobe, after)?;
        let io = ScanIo {
            queries: Dev::of(&b.q, s),
            probes: Dev::of(&b.probes, s),
            out_ids: Dev::of_mut(&mut b.out_ids, s),
            out_dist: Dev::of_mut(&mut b.out_dist, s),
            out_stride: k,
        };
        self.scan_step(
            s,
            b,
            io.at(q0, self.dim, nprobe),
            m,
            k,
            nprobe,
            stride,
            after,
        )
    }

    /// Stages 1-2 for queries q0..q0+m: their probes into `b.probes` from row q0.
    fn filter_step(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        q0: usize,
        m: usize,
        nprobe: usize,
        after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let (dim, nlist) = (self.dim, self.nlist);
        assert!(
            m * nlist <= b.scratch.len() && (q0 + m) * nprobe <= b.probes.len(),
            "filter buffers too small"
        );
        let q = Dev::of(&b.q.slice(q0 * dim..(q0 + m) * dim), s);
        let kn = &self.kernels;
        if let Some(width) = self.tc_filter_width(b, m, nprobe) {
            return self.filter_tc_step(s, b, q, q0, m, nprobe, width, after);
        }

        // 1. Query x centroid distances.
        self.filter_distances(s, b, q, m)?;
        after("filter")?;

        // 2. The nprobe nearest cells per query.
        let args = KnnSelectFilterArgs {
            scratch: Dev::of(&b.scratch, s),
            nlist: nlist as i32,
            nprobe: nprobe as i32,
            probes: Dev::of_mut(&mut b.probes.slice_mut(q0 * nprobe..(q0 + m) * nprobe), s),
        };
        let select = self.select_for(m, &kn.select_filter, &kn.select_filter_wide);
        // SAFETY: probes rows q0..q0+m exist (asserted), nprobe <= SEL_MAX.
        unsafe { select.launch(s, Work::Items(m), 0, &args) }?;
        after("select_filter")
    }

    /// Where the tensor cores filter a pass of m queries: the cells each query keeps for the
    /// exact re-rank (in the candidate buffer, free until the scan: stream order). None: the
    /// CUDA cores filter it.
    fn tc_filter_width(&self, b: &Buffers, m: usize, nprobe: usize) -> Option<usize> {
        let FilterKind::TensorCores { min_queries } = self.filter else {
            return None;
        };
        FilterKind::rerank_width(nprobe, self.nlist)
            .filter(|w| m >= min_queries && m * w <= b.cand.len())
    }

    /// Stage 1 on the CUDA cores: the m queries at `q` against every centroid into
    /// `b.scratch` (m x nlist, which the caller checked).
    fn filter_distances(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        q: Dev<f32>,
        m: usize,
    ) -> Result<(), GpuError> {
        let nlist = self.nlist;
        let groups = m.div_ceil(QB);
        let fchunk = chunk_rows(nlist, groups, self.sms * BLOCKS_PER_SM) as i32;
        let args = KnnFilterTiledArgs {
            queries: q,
            nq: m as i32,
            centroids: Dev::of(&self.centroids, s),
            nlist: nlist as i32,
            dim: self.dim as i32,
            metric: self.metric,
            chunk: fchunk,
            scratch: Dev::of_mut(&mut b.scratch, s),
        };
        let grid = Work::Grid(groups as u32, nlist.div_ceil(fchunk as usize) as u32);
        assert!(m * nlist <= b.scratch.len(), "filter scratch too small");
        // SAFETY: scratch holds m x nlist (asserted).
        unsafe { self.kernels.filter_tiled.launch(s, grid, 0, &args) }
    }

    /// Stages 1-2 on the tensor cores (kernels/knn_filter_tc.cu): scores, each query's
    /// `width` best, and their exact re-rank into the nprobe probes.
    #[allow(clippy::too_many_arguments)]
    fn filter_tc_step(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        q: Dev<f32>,
        q0: usize,
        m: usize,
        nprobe: usize,
        width: usize,
        after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let (dim, nlist) = (self.dim, self.nlist);
        let kn = &self.kernels;
        let args = KnnFilterTcArgs {
            queries: q,
            nq: m as i32,
            centroids: Dev::of(&self.centroids, s),
            nlist: nlist as i32,
            dim: dim as i32,
            metric: self.metric,
            scratch: Dev::of_mut(&mut b.scratch, s),
        };
        let grid = Work::Grid(m.div_ceil(TC_QTILE) as u32, nlist.div_ceil(TC_CTILE) as u32);
        // SAFETY: scratch holds m x nlist (the caller asserted).
        unsafe { kn.filter_tc.launch(s, grid, 0, &args) }?;
        after("filter")?;

        let probes = Dev::of_mut(&mut b.probes.slice_mut(q0 * nprobe..(q0 + m) * nprobe), s);
        if self.wide_selects(m) {
            // Each query's `width` best cells by score, then the nprobe nearest of them by
            // exact distance, in one block a query.
            let args = KnnSelectRerankFilterArgs {
                scratch: Dev::of(&b.scratch, s),
                queries: q,
                centroids: Dev::of(&self.centroids, s),
                nlist: nlist as i32,
                dim: dim as i32,
                metric: self.metric,
                width: width as i32,
                nprobe: nprobe as i32,
                probes,
            };
            // SAFETY: probes rows q0..q0+m exist (the caller asserted); nprobe <= width <= SEL_MAX.
            unsafe {
                kn.select_rerank_filter_wide
                    .launch(s, Work::Items(m), 0, &args)
            }?;
            return after("select_rerank_filter");
        }

        // Cohorts that fill the SMs: the `width` best scores per query into the candidate
        // buffer's first m x width words, then the re-rank a warp a query (fused, the re-rank
        // lengthened every resident block: knn_filter_tc.cu's head).
        let approx: Dev<u32> = Dev::raw(Dev::of_mut(&mut b.cand, s).addr());
        let args = KnnSelectFilterArgs {
            scratch: Dev::of(&b.scratch, s),
            nlist: nlist as i32,
            nprobe: width as i32,
            probes: approx,
        };
        // SAFETY: cand holds m x width 4-byte words (the caller checked); width <= SEL_MAX.
        unsafe { kn.select_filter.launch(s, Work::Items(m), 0, &args) }?;
        after("select_filter")?;
        let args = KnnRerankFilterArgs {
            queries: q,
            nq: m as i32,
            centroids: Dev::of(&self.centroids, s),
            nlist: nlist as i32,
            dim: dim as i32,
            metric: self.metric,
            approx,
            width: width as i32,
            nprobe: nprobe as i32,
            probes,
        };
        // SAFETY: probes rows q0..q0+m exist (the caller asserted); approx rows as above.
        unsafe { kn.rerank_filter.launch(s, Work::Items(m), 0, &args) }?;
        after("rerank_filter")
    }

    /// Where the warp searches apply (SearchKind::Warp, u8 rows, the dimension a multiple of
    /// 32 up to 256): which of their kernels, 0 (16 rows a step) or 1 (32).
    fn warp_rows(&self) -> Option<usize> {
        match self.search {
            SearchKind::Warp { rows, .. } => {
                (self.precision == Precision::U8 && self.dim.is_multiple_of(32) && self.dim <= 256)
                    .then_some(usize::from(rows > 16))
            }
            SearchKind::Block => None,
        }
    }

    /// Whether a pass of m queries takes the pair scan, and with which of its kernels: where
    /// the warp searches apply, the pass is at most `pairs_up_to` queries, and its filter runs
    /// on the CUDA cores (the tensor cores' select is another kernel, and they start at
    /// cohorts the grouped search serves better).
    fn pair_scan(&self, b: &Buffers, m: usize, nprobe: usize) -> Option<usize> {
        let SearchKind::Warp { pairs_up_to, .. } = self.search else {
            return None;
        };
        let fits = m * self.dim <= b.q8.len().min(i32::MAX as usize)
            && m <= b.q8norm.len().min(b.totals.len())
            && m * nprobe <= b.poff.len().min(b.pfirst.len());
        self.warp_rows().filter(|_| {
            m <= pairs_up_to.min(PAIR_MAX_QUERIES)
                && fits
                && self.tc_filter_width(b, m, nprobe).is_none()
        })
    }

    /// A pass by the pair scan: the filter's distances, then one block a query selects its
    /// probes, lays out its candidate row and makes its bytes (`knn_select_filter_plan_wide`),
    /// then a warp a run of one query's candidate row computes their distances
    /// (`knn_search_pairs_u8`, the runs cut so that one wave of warps takes them all), then
    /// the usual select. Four launches where the
    /// grouped plan makes five, with no one-block plan: at a cohort of 64 the pairs hardly
    /// share a cell (lab/results/knn-filter-rows/, cells.txt), so grouping them saved few rows.
    #[allow(clippy::too_many_arguments)]
    fn pairs_pass(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        q0: usize,
        m: usize,
        k: usize,
        nprobe: usize,
        stride: usize,
        x2: usize,
        after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let (dim, nlist) = (self.dim, self.nlist);
        assert!(
            m <= PAIR_MAX_QUERIES
                && m * nlist <= b.scratch.len()
                && (q0 + m) * nprobe <= b.probes.len()
                && m * stride <= b.cand.len(),
            "pair scan buffers too small"
        );
        let q = Dev::of(&b.q.slice(q0 * dim..(q0 + m) * dim), s);
        let kn = &self.kernels;
        self.filter_distances(s, b, q, m)?;
        after("filter")?;

        let args = KnnSelectFilterPlanArgs {
            scratch: Dev::of(&b.scratch, s),
            nlist: nlist as i32,
            nprobe: nprobe as i32,
            probes: Dev::of_mut(&mut b.probes.slice_mut(q0 * nprobe..(q0 + m) * nprobe), s),
            offsets: Dev::of(&self.offsets, s),
            poff: Dev::of_mut(&mut b.poff, s),
            pfirst: Dev::of_mut(&mut b.pfirst, s),
            totals: Dev::of_mut(&mut b.totals, s),
            queries: q,
            dim: dim as i32,
            q8: Dev::of_mut(&mut b.q8, s),
            q8norm: Dev::of_mut(&mut b.q8norm, s),
        };
        // SAFETY: probes rows q0..q0+m, poff and pfirst m x nprobe, totals, q8 and q8norm
        // (pair_scan checked them); nprobe <= SEL_MAX.
        unsafe {
            kn.select_filter_plan_wide
                .launch(s, Work::Items(m), 0, &args)
        }?;
        after("select_filter_plan")?;

        // The kernel cuts the pass's rows into runs no more than its warps: the resident ones.
        let grid = self.sms * U8_MIN_BLOCKS;
        let args = KnnSearchPairsArgs {
            queries: q,
            vectors: self.vectors.dev(s),
            nq: m as i32,
            nprobe: nprobe as i32,
            dim: dim as i32,
            metric: self.metric,
            poff: Dev::of(&b.poff, s),
            pfirst: Dev::of(&b.pfirst, s),
            totals: Dev::of(&b.totals, s),
            cand: Dev::of_mut(&mut b.cand, s),
            stride: stride as u64,
            q8: Dev::of(&b.q8, s),
            q8norm: Dev::of(&b.q8norm, s),
        };
        // SAFETY: candidate rows hold m x stride (asserted), and every query's row is at most
        // `stride` long by construction of top_rows; the other buffers as the select's.
        unsafe { kn.search_pairs_u8[x2].launch(s, Work::Grid(grid as u32, 1), 0, &args) }?;
        after("search_pairs")?;

        let io = ScanIo {
            queries: Dev::of(&b.q, s),
            probes: Dev::of(&b.probes, s),
            out_ids: Dev::of_mut(&mut b.out_ids, s),
            out_dist: Dev::of_mut(&mut b.out_dist, s),
            out_stride: k,
        };
        self.select_step(s, b, io.at(q0, dim, nprobe), m, k, nprobe, stride, after)
    }

    /// Stages 3-7 for the m queries of `io` (which starts at the pass's first query).
    #[allow(clippy::too_many_arguments)]
    fn scan_step(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        io: ScanIo,
        m: usize,
        k: usize,
        nprobe: usize,
        stride: usize,
        after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let (dim, nlist) = (self.dim, self.nlist);
        assert!(
            m * stride <= b.cand.len()
                && m * nprobe <= b.poff.len().min(b.order.len())
                && m <= b.totals.len(),
            "scan buffers too small"
        );
        let (q, probes) = (io.queries, io.probes);
        let (offsets, metric) = (Dev::of(&self.offsets, s), self.metric);
        let (mi, nlist_i, dim_i, np_i) = (m as i32, nlist as i32, dim as i32, nprobe as i32);
        let blocks = self.sms * BLOCKS_PER_SM;
        let kn = &self.kernels;
        // The warp-per-item search where it applies (u8 rows, dim a multiple of 32 up to
        // 256) and pays: a warp stages 16 queries at a time and reads the rows again for the
        // next 16, so cells probed by many of the cohort's queries go to the block kernel,
        // which multiplies 32 queries per row read. Measured on one H100 (1M, nlist 4096,
        // nprobe 16; knn-search-counter-h100/): 4 queries a cell (cohort 1 024) 5.30 against
        // 4.72-4.88 M q/s, 32 a cell (8 192) 9.59 against 10.50 M. Warps take the items, so
        // the items are sized for the warps.
        let warp_search = self
            .warp_rows()
            .filter(|_| m * nprobe <= WARP_SEARCH_MAX_QUERIES_PER_CELL * nlist)
            .map(|x2| &kn.search_warp_u8[x2]);
        let workers = if warp_search.is_some() {
            blocks * BLOCK / 32
        } else {
            blocks
        };
        // The warp search's queries as bytes with their norms, made by the plan.
        let (q8, q8norm) = if warp_search.is_some() {
            assert!(
                m * dim <= b.q8.len().min(i32::MAX as usize) && m <= b.q8norm.len(),
                "query byte buffers too small"
            );
            (Dev::of_mut(&mut b.q8, s), Dev::of_mut(&mut b.q8norm, s))
        } else {
            (Dev::default(), Dev::default())
        };

        // The search's row chunk: average cell rows x queries per cell, so the grid has work
        // for every resident block.
        let pairs = m * nprobe;
        let avg_rows = self.n.div_ceil(nlist).max(1);
        let cell_groups = (pairs / QB).max(pairs.min(nlist));
        let schunk = chunk_rows(avg_rows, cell_groups, workers) as i32;
        if m <= PLAN_ONE_BLOCK_MAX_QUERIES {
            // 3-5. Candidate row layout per query, queries per cell, pair starts and work
            // items per cell, pairs grouped by cell: one block.
            let args = KnnPlanOneBlockArgs {
                probes,
                nq: mi,
                nprobe: np_i,
                nlist: nlist_i,
                chunk: schunk,
                offsets,
                poff: Dev::of_mut(&mut b.poff, s),
                totals: Dev::of_mut(&mut b.totals, s),
                counts: Dev::of_mut(&mut b.counts, s),
                cursor: Dev::of_mut(&mut b.cursor, s),
                items: Dev::of_mut(&mut b.items, s),
                next_item: Dev::of_mut(&mut b.next_item, s),
                order: Dev::of_mut(&mut b.order, s),
                queries: q,
                dim: dim_i,
                q8,
                q8norm,
            };
            // SAFETY: one block; poff and order hold m x nprobe (asserted), totals m, counts
            // and cursor nlist, items nlist + 1, next_item 1; q8 and q8norm null or m x dim
            // and m (asserted).
            unsafe { kn.plan_one_block.launch(s, Work::Grid(1, 1), 0, &args) }?;
            after("plan_one_block")?;
        } else {
            // 3. Candidate row layout per query; queries per cell.
            s.memset_zeros(&mut b.counts)?;
            let args = KnnPlanArgs {
                probes,
                nq: mi,
                nprobe: np_i,
                offsets,
                poff: Dev::of_mut(&mut b.poff, s),
                totals: Dev::of_mut(&mut b.totals, s),
                counts: Dev::of_mut(&mut b.counts, s),
                queries: q,
                dim: dim_i,
                q8,
                q8norm,
            };
            // SAFETY: poff m x nprobe, totals m, counts nlist; q8 and q8norm null or m x dim
            // and m (asserted).
            unsafe { kn.plan.launch(s, Work::Items(m), 0, &args) }?;
            after("plan")?;

            // 4. Pair starts and work items per cell.
            let args = KnnScanItemsArgs {
                counts: Dev::of(&b.counts, s),
                nlist: nlist_i,
                offsets,
                chunk: schunk,
                cursor: Dev::of_mut(&mut b.cursor, s),
                items: Dev::of_mut(&mut b.items, s),
                next_item: Dev::of_mut(&mut b.next_item, s),
            };
            // SAFETY: one block; cursor holds nlist, items nlist + 1, next_item 1.
            unsafe { kn.scan_items.launch(s, Work::Grid(1, 1), 0, &args) }?;
            after("scan_items")?;

            // 5. Pairs grouped by cell.
            let args = KnnScatterArgs {
                probes,
                pairs: pairs as i32,
                cursor: Dev::of_mut(&mut b.cursor, s),
                order: Dev::of_mut(&mut b.order, s),
            };
            // SAFETY: order holds >= pairs entries (asserted).
            unsafe { kn.scatter.launch(s, Work::Items(pairs), 0, &args) }?;
            after("scatter")?;
        }

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
            next_item: Dev::of_mut(&mut b.next_item, s),
            q8,
            q8norm,
        };
        // At most one work item per pair per row chunk of the largest cell. The warp search's
        // grid is its resident blocks: a warp's first item is its index.
        let bound = pairs * self.top_rows[1].div_ceil(schunk as usize).max(1);
        let resident = if warp_search.is_some() {
            self.sms * U8_MIN_BLOCKS
        } else {
            blocks
        };
        let grid = Work::Grid(resident.min(bound).max(1) as u32, 1);
        // SAFETY: candidate rows hold m x stride (asserted), and every query's row is at most
        // `stride` long by construction of top_rows.
        let search = warp_search.unwrap_or(&kn.search_tiled[self.precision as usize]);
        unsafe { search.launch(s, grid, 0, &args) }?;
        after("search")?;

        self.select_step(s, b, io, m, k, nprobe, stride, after)
    }

    /// Stage 7: the k nearest of each of the m queries' candidate rows, into the rows of `io`.
    #[allow(clippy::too_many_arguments)]
    fn select_step(
        &self,
        s: &Arc<CudaStream>,
        b: &Buffers,
        io: ScanIo,
        m: usize,
        k: usize,
        nprobe: usize,
        stride: usize,
        after: &mut dyn FnMut(&'static str) -> Result<(), GpuError>,
    ) -> Result<(), GpuError> {
        let kn = &self.kernels;
        let args = KnnSelectSearchArgs {
            cand: Dev::of(&b.cand, s),
            stride: stride as u64,
            totals: Dev::of(&b.totals, s),
            poff: Dev::of(&b.poff, s),
            probes: io.probes,
            nprobe: nprobe as i32,
            offsets: Dev::of(&self.offsets, s),
            row_ids: Dev::of(&self.ids, s),
            k: k as i32,
            out_ids: io.out_ids,
            out_dist: io.out_dist,
            out_stride: io.out_stride as i32,
        };
        let select = self.select_for(m, &kn.select_search, &kn.select_search_wide);
        // SAFETY: the caller's rows hold m x out_stride >= k (checked by the callers);
        // k <= GPU_MAX_K <= SEL_MAX.
        unsafe { select.launch(s, Work::Items(m), 0, &args) }?;
        after("select_search")
    }
}

/// Where a scan reads its queries and probes and writes each query's k nearest: device
/// addresses, query 0 first (on the scanning device or one it may address).
#[derive(Debug, Clone, Copy)]
pub struct ScanIo {
    /// nq x dim.
    pub queries: Dev<f32>,
    /// nq x nprobe.
    pub probes: Dev<u32>,
    /// nq rows of `out_stride` elements; the k nearest go to the first k of a row.
    pub out_ids: Dev<u32>,
    pub out_dist: Dev<f32>,
    pub out_stride: usize,
}

impl ScanIo {
    /// The same rows from query q0 on.
    pub fn at(self, q0: usize, dim: usize, nprobe: usize) -> ScanIo {
        let at = |d: u64, elems: usize| d + (q0 * elems * 4) as u64;
        ScanIo {
            queries: Dev::raw(at(self.queries.addr(), dim)),
            probes: Dev::raw(at(self.probes.addr(), nprobe)),
            out_ids: Dev::raw(at(self.out_ids.addr(), self.out_stride)),
            out_dist: Dev::raw(at(self.out_dist.addr(), self.out_stride)),
            out_stride: self.out_stride,
        }
    }
}
