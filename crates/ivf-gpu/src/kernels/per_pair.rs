//! The per-pair plan's kernels (`knn.cu`), declared once: name, argument block, grid rule.

use super::BLOCK;
use cohort_gpu::kernel_args;
use cohort_gpu::launch::{Dev, Grid, KernelDecl};

kernel_args! {
    /// Query x centroid distances and the nprobe nearest cells, a block per query.
    pub struct KnnFilterArgs {
        queries: Dev<f32>,
        centroids: Dev<f32>,
        nlist: i32,
        dim: i32,
        nprobe: i32,
        metric: i32,
        scratch: Dev<f32>,
        probes: Dev<u32>,
    }
}

kernel_args! {
    /// The k nearest rows of one probed cell, a block per (query, probe).
    pub struct KnnSearchArgs {
        queries: Dev<f32>,
        /// f32, f16 or u8 rows: the kernel of the index's precision reads them.
        vectors: Dev<()>,
        row_ids: Dev<u32>,
        offsets: Dev<u64>,
        probes: Dev<u32>,
        nprobe: i32,
        dim: i32,
        k: i32,
        metric: i32,
        out_ids: Dev<u32>,
        out_dist: Dev<f32>,
    }
}

kernel_args! {
    /// The k nearest of a query's nprobe partial results, a block per query.
    pub struct KnnReduceArgs {
        part_ids: Dev<u32>,
        part_dist: Dev<f32>,
        nprobe: i32,
        k: i32,
        out_ids: Dev<u32>,
        out_dist: Dev<f32>,
    }
}

const B: u32 = BLOCK as u32;
pub const FILTER: KernelDecl<KnnFilterArgs> = KernelDecl::new("knn_filter", B, Grid::BlockPerItem);
/// By precision: f32, f16, u8.
pub const SEARCH: [KernelDecl<KnnSearchArgs>; 3] = [
    KernelDecl::new("knn_search", B, Grid::BlockPerItem),
    KernelDecl::new("knn_search_f16", B, Grid::BlockPerItem),
    KernelDecl::new("knn_search_u8", B, Grid::BlockPerItem),
];
/// Dynamic shared memory: nprobe * k candidates of 8 bytes.
pub const REDUCE: KernelDecl<KnnReduceArgs> = KernelDecl::new("knn_reduce", B, Grid::BlockPerItem);

/// Every kernel of `knn.cu`, for the layout check.
pub fn checked() -> Vec<(&'static str, cohort_gpu::launch::ArgsLayout)> {
    let mut v = vec![FILTER.checked(), REDUCE.checked()];
    v.extend(SEARCH.iter().map(KernelDecl::checked));
    v
}
