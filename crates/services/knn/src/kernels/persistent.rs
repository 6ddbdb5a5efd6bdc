//! The persistent stages' kernels (`knn_persistent.cu`, `knn_persistent_cohort.cu`), declared
//! once: their argument block and their names, one per element type where the vectors' type
//! matters.

use cohort_gpu::launch::ArgsLayout;
use cohort_gpu::persistent::StageKernel;

cohort_gpu::svc_args! {
    /// The stage kernels' argument block: `struct SvcArgs` of `kernels/knn_persistent.cu`,
    /// field for field (the unit asserts its layout). The cohort plan's fields (from `cmax`)
    /// are zero for the per-pair stages.
    pub struct KnnArgs {
        centroids, vectors, ids, offsets, dim, nlist, n, metric, default_nprobe, queries,
        probes, part_ids, part_dist, scratch, max_probe, max_k, cmax, cand, cand_floats, poff,
        totals, counts, cursor, items, order, taken, ok, cq_slot, ctl, top_rows, groups,
        owners, search_pipe, list_rows,
    }
}

/// Per-pair plan: a request's probes, sent on as (request, cell) tasks.
pub const FILTER: StageKernel<KnnArgs> = StageKernel::new("knn_p_filter");
/// Per-pair plan: one (request, cell) task's k nearest, per element type (f32, f16, u8).
pub const SEARCH: [StageKernel<KnnArgs>; 3] = [
    StageKernel::new("knn_p_search"),
    StageKernel::new("knn_p_search_f16"),
    StageKernel::new("knn_p_search_u8"),
];
/// Per-pair plan: a request's candidates merged into its answer.
pub const REDUCE: StageKernel<KnnArgs> = StageKernel::new("knn_p_reduce");
/// Cohort plan: the whole tiled plan over whatever waited, per element type.
pub const COHORT: [StageKernel<KnnArgs>; 3] = [
    StageKernel::new("knn_p_cohort"),
    StageKernel::new("knn_p_cohort_f16"),
    StageKernel::new("knn_p_cohort_u8"),
];

/// Every stage kernel of the unit with its block (what the kernel check compares).
pub fn checked() -> Vec<(&'static str, ArgsLayout)> {
    let mut v = vec![FILTER.checked(), REDUCE.checked()];
    v.extend(SEARCH.iter().chain(&COHORT).map(|k| k.checked()));
    v
}
