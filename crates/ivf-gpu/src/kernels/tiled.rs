//! The tiled plan's kernels (`knn_tiled.cu`), declared once: name, argument block, grid rule.

use super::{BLOCK, TC_THREADS, WIDE_BLOCK as WIDE};
use cohort_gpu::kernel_args;
use cohort_gpu::launch::{ArgsLayout, Dev, Grid, KernelDecl};

kernel_args! {
    /// Query x centroid distances as tiled products.
    pub struct KnnFilterTiledArgs {
        queries: Dev<f32>,
        nq: i32,
        centroids: Dev<f32>,
        nlist: i32,
        dim: i32,
        metric: i32,
        chunk: i32,
        scratch: Dev<f32>,
    }
}

kernel_args! {
    /// The nprobe nearest cells of each query (radix select).
    pub struct KnnSelectFilterArgs {
        scratch: Dev<f32>,
        nlist: i32,
        nprobe: i32,
        probes: Dev<u32>,
    }
}

kernel_args! {
    /// Query x centroid scores on the tensor cores (3xTF32; the distance less a per-query
    /// constant).
    pub struct KnnFilterTcArgs {
        queries: Dev<f32>,
        nq: i32,
        centroids: Dev<f32>,
        nlist: i32,
        dim: i32,
        metric: i32,
        scratch: Dev<f32>,
    }
}

kernel_args! {
    /// Each query's `width` best cells by score, then the exact nprobe nearest of them.
    pub struct KnnSelectRerankFilterArgs {
        scratch: Dev<f32>,
        queries: Dev<f32>,
        centroids: Dev<f32>,
        nlist: i32,
        dim: i32,
        metric: i32,
        width: i32,
        nprobe: i32,
        probes: Dev<u32>,
    }
}

kernel_args! {
    /// The exact nprobe nearest of each query's `width` best cells by score (`approx`).
    pub struct KnnRerankFilterArgs {
        queries: Dev<f32>,
        nq: i32,
        centroids: Dev<f32>,
        nlist: i32,
        dim: i32,
        metric: i32,
        approx: Dev<u32>,
        width: i32,
        nprobe: i32,
        probes: Dev<u32>,
    }
}

kernel_args! {
    /// Each query's candidate row layout; queries per cell.
    pub struct KnnPlanArgs {
        probes: Dev<u32>,
        nq: i32,
        nprobe: i32,
        offsets: Dev<u64>,
        poff: Dev<u32>,
        totals: Dev<u32>,
        counts: Dev<u32>,
        /// Where `q8` is given (not null), each query's bytes and norm for the u8 warp
        /// search (`query_bytes_warp`): `queries` nq x dim, `q8` nq x dim, `q8norm` nq.
        queries: Dev<f32>,
        dim: i32,
        q8: Dev<u8>,
        q8norm: Dev<i32>,
    }
}

kernel_args! {
    /// The plan, scan and scatter of a pass of a few queries in one block (the counts and the
    /// search's work counter zeroed first).
    pub struct KnnPlanOneBlockArgs {
        probes: Dev<u32>,
        nq: i32,
        nprobe: i32,
        nlist: i32,
        chunk: i32,
        offsets: Dev<u64>,
        poff: Dev<u32>,
        totals: Dev<u32>,
        counts: Dev<u32>,
        cursor: Dev<u32>,
        items: Dev<u32>,
        next_item: Dev<u32>,
        order: Dev<u32>,
        /// As `KnnPlanArgs`'s.
        queries: Dev<f32>,
        dim: i32,
        q8: Dev<u8>,
        q8norm: Dev<i32>,
    }
}

kernel_args! {
    /// Pair starts and work items per cell (prefix sums).
    pub struct KnnScanItemsArgs {
        counts: Dev<u32>,
        nlist: i32,
        offsets: Dev<u64>,
        chunk: i32,
        cursor: Dev<u32>,
        items: Dev<u32>,
        /// One counter: the search's next work item, zeroed here.
        next_item: Dev<u32>,
    }
}

kernel_args! {
    /// The (query, probe) pairs grouped by cell.
    pub struct KnnScatterArgs {
        probes: Dev<u32>,
        pairs: i32,
        cursor: Dev<u32>,
        order: Dev<u32>,
    }
}

kernel_args! {
    /// Cell x query-group distances into the candidate rows.
    pub struct KnnSearchTiledArgs {
        queries: Dev<f32>,
        /// f32, f16 or u8 rows: the kernel of the index's precision reads them.
        vectors: Dev<()>,
        offsets: Dev<u64>,
        nlist: i32,
        nprobe: i32,
        dim: i32,
        chunk: i32,
        metric: i32,
        counts: Dev<u32>,
        cursor: Dev<u32>,
        items: Dev<u32>,
        order: Dev<u32>,
        poff: Dev<u32>,
        cand: Dev<f32>,
        stride: u64,
        /// The work counter `knn_scan_items` zeroed: blocks take items from it in turn.
        next_item: Dev<u32>,
        /// The u8 warp search's queries as bytes and their norms (the plan's `q8`); null
        /// for the block kernels.
        q8: Dev<u8>,
        q8norm: Dev<i32>,
    }
}

kernel_args! {
    /// The nprobe nearest cells of each query, then its candidate row layout and its bytes
    /// (the pair scan's plan).
    pub struct KnnSelectFilterPlanArgs {
        scratch: Dev<f32>,
        nlist: i32,
        nprobe: i32,
        probes: Dev<u32>,
        offsets: Dev<u64>,
        poff: Dev<u32>,
        /// Each probe's cell's first row.
        pfirst: Dev<u32>,
        totals: Dev<u32>,
        queries: Dev<f32>,
        dim: i32,
        q8: Dev<u8>,
        q8norm: Dev<i32>,
    }
}

kernel_args! {
    /// The pass's candidate rows in runs of equal length, a warp a run (u8 rows; at most
    /// PAIR_MAX_QUERIES queries).
    pub struct KnnSearchPairsArgs {
        queries: Dev<f32>,
        vectors: Dev<()>,
        nq: i32,
        nprobe: i32,
        dim: i32,
        metric: i32,
        poff: Dev<u32>,
        pfirst: Dev<u32>,
        totals: Dev<u32>,
        cand: Dev<f32>,
        stride: u64,
        q8: Dev<u8>,
        q8norm: Dev<i32>,
    }
}

kernel_args! {
    /// The k nearest of each query's candidate row.
    pub struct KnnSelectSearchArgs {
        cand: Dev<f32>,
        stride: u64,
        totals: Dev<u32>,
        poff: Dev<u32>,
        probes: Dev<u32>,
        nprobe: i32,
        offsets: Dev<u64>,
        row_ids: Dev<u32>,
        k: i32,
        out_ids: Dev<u32>,
        out_dist: Dev<f32>,
        /// Elements between rows of the outputs: k, or a shard's devices x k.
        out_stride: i32,
    }
}

const B: u32 = BLOCK as u32;
/// Grid (query groups of QB, centroid chunks).
pub const FILTER: KernelDecl<KnnFilterTiledArgs> =
    KernelDecl::new("knn_filter_tiled", B, Grid::Sized);
/// Grid (query tiles of TC_QTILE, centroid tiles of TC_CTILE).
pub const FILTER_TC: KernelDecl<KnnFilterTcArgs> =
    KernelDecl::new("knn_filter_tc", TC_THREADS as u32, Grid::Sized);
/// A warp per query (cohorts whose width-best select ran as `SELECT_FILTER`).
pub const RERANK_FILTER: KernelDecl<KnnRerankFilterArgs> =
    KernelDecl::new("knn_rerank_filter", B, Grid::ItemsPerBlock(B / 32));
/// WIDE_BLOCK threads per query (cohorts too few to fill the SMs with BLOCK-thread blocks).
pub const SELECT_RERANK_FILTER_WIDE: KernelDecl<KnnSelectRerankFilterArgs> = KernelDecl::new(
    "knn_select_rerank_filter_wide",
    WIDE as u32,
    Grid::BlockPerItem,
);
pub const SELECT_FILTER: KernelDecl<KnnSelectFilterArgs> =
    KernelDecl::new("knn_select_filter", B, Grid::BlockPerItem);
/// WIDE_BLOCK threads per query: for cohorts too small to fill the SMs with BLOCK-thread blocks.
pub const SELECT_FILTER_WIDE: KernelDecl<KnnSelectFilterArgs> =
    KernelDecl::new("knn_select_filter_wide", WIDE as u32, Grid::BlockPerItem);
/// A warp per query.
pub const PLAN: KernelDecl<KnnPlanArgs> =
    KernelDecl::new("knn_plan", B, Grid::ItemsPerBlock(B / 32));
/// One block of WIDE_BLOCK threads: a warp per query, then every cell, then the pairs.
pub const PLAN_ONE_BLOCK: KernelDecl<KnnPlanOneBlockArgs> =
    KernelDecl::new("knn_plan_one_block", WIDE as u32, Grid::Sized);
/// One block of WIDE_BLOCK threads over every cell.
pub const SCAN_ITEMS: KernelDecl<KnnScanItemsArgs> =
    KernelDecl::new("knn_scan_items", WIDE as u32, Grid::Sized);
/// Grid-stride over the pairs.
pub const SCATTER: KernelDecl<KnnScatterArgs> =
    KernelDecl::new("knn_scatter", B, Grid::ThreadPerItem { cap: 1024 });
/// By precision (f32, f16, u8); blocks take work items (only the device counts them) from a
/// counter `knn_scan_items` zeroes, so the caller sizes the grid from the resident blocks.
pub const SEARCH: [KernelDecl<KnnSearchTiledArgs>; 3] = [
    KernelDecl::new("knn_search_tiled", B, Grid::Sized),
    KernelDecl::new("knn_search_tiled_f16", B, Grid::Sized),
    KernelDecl::new("knn_search_tiled_u8", B, Grid::Sized),
];
/// u8 rows, dim a multiple of 32 up to 256: a warp per work item, 16 rows at a time or 32
/// (`_x2`); a warp's first item is its index in the grid, the rest come from the counter, so
/// the grid is the resident blocks (`U8_MIN_BLOCKS` an SM).
pub const SEARCH_WARP_U8: [KernelDecl<KnnSearchTiledArgs>; 2] = [
    KernelDecl::new("knn_search_warp_u8", B, Grid::Sized),
    KernelDecl::new("knn_search_warp_u8_x2", B, Grid::Sized),
];
/// WIDE_BLOCK threads per query: the select, then the candidate row layout and query bytes
/// the pair scan reads.
pub const SELECT_FILTER_PLAN_WIDE: KernelDecl<KnnSelectFilterPlanArgs> = KernelDecl::new(
    "knn_select_filter_plan_wide",
    WIDE as u32,
    Grid::BlockPerItem,
);
/// u8 rows, dim a multiple of 32 up to 256, a warp a run of a query's candidate row (dims
/// other than 32, 64, 128 and 256 on the tensor cores, 16 rows at a time or 32: `_x2`); the
/// kernel sizes the runs for its grid, the resident blocks (`U8_MIN_BLOCKS` an SM).
pub const SEARCH_PAIRS_U8: [KernelDecl<KnnSearchPairsArgs>; 2] = [
    KernelDecl::new("knn_search_pairs_u8", B, Grid::Sized),
    KernelDecl::new("knn_search_pairs_u8_x2", B, Grid::Sized),
];
pub const SELECT_SEARCH: KernelDecl<KnnSelectSearchArgs> =
    KernelDecl::new("knn_select_search", 256, Grid::BlockPerItem);
/// WIDE_BLOCK threads per query: for cohorts too small to fill the SMs with 256-thread blocks.
pub const SELECT_SEARCH_WIDE: KernelDecl<KnnSelectSearchArgs> =
    KernelDecl::new("knn_select_search_wide", WIDE as u32, Grid::BlockPerItem);

/// The tensor-core filter's kernels (`knn_filter_tc.cu`), for the layout check.
pub fn checked_filter_tc() -> Vec<(&'static str, ArgsLayout)> {
    vec![
        FILTER_TC.checked(),
        SELECT_RERANK_FILTER_WIDE.checked(),
        RERANK_FILTER.checked(),
    ]
}

/// Every kernel of `knn_tiled.cu`, for the layout check.
pub fn checked() -> Vec<(&'static str, ArgsLayout)> {
    let mut v = vec![
        FILTER.checked(),
        SELECT_FILTER.checked(),
        SELECT_FILTER_WIDE.checked(),
        PLAN.checked(),
        PLAN_ONE_BLOCK.checked(),
        SCAN_ITEMS.checked(),
        SCATTER.checked(),
        SELECT_SEARCH.checked(),
        SELECT_SEARCH_WIDE.checked(),
        SELECT_FILTER_PLAN_WIDE.checked(),
    ];
    v.extend(SEARCH.iter().map(KernelDecl::checked));
    v.extend(SEARCH_WARP_U8.iter().map(KernelDecl::checked));
    v.extend(SEARCH_PAIRS_U8.iter().map(KernelDecl::checked));
    v
}
