//! The k-NN index's CUDA: every limit its kernels and its host code share, defined once here
//! and handed to the kernels as a generated prelude, and the compilation units built from
//! `kernels/` (the per-pair and tiled batch kernels, k-means assignment). The k-NN service's
//! persistent stages build their unit from the same prelude and files (`COMMON`, `PER_PAIR`,
//! `TILED`).

pub mod kmeans;
pub mod per_pair;
pub mod tiled;

use cohort_gpu::{KernelSource, Prelude};

/// Threads per block of the per-pair kernels and the filter.
pub const BLOCK: usize = 256;
/// Largest k a kernel returns.
pub const MAX_K: usize = 128;
/// Largest vector dimension (the per-pair kernels stage a query in shared memory).
pub const MAX_DIM: usize = 1024;
/// The id of an empty result position (fewer than k candidates).
pub const NO_ID: u32 = u32::MAX;
/// Threads of the one-block-wide kernels: the selects for cohorts too few to fill the SMs
/// with `BLOCK`-thread blocks, and the tiled plan's one-block scan of every cell.
pub const WIDE_BLOCK: usize = 1024;
/// Tiled plan: queries per work item.
pub const QB: usize = 32;
/// Tiled plan: rows per shared-memory tile.
pub const RT: usize = 64;
/// Tiled plan: blocks of the u8 search resident per SM (its launch bound; the warp search's
/// grid, whose warps take their first items by index, is exactly this many blocks an SM).
/// At 2 (the other storages' bound) its 128 registers left 16 warps an SM, and Nsight Compute
/// found them stalled on their loads, 73% of cycles with no warp eligible (82337b0, cohort
/// 8 192). Measured on one H100 (lab/results/knn-u8-scan-e2c6bad-h100): 4 blocks with
/// 2 k-steps a batch beat 2 with 4, 3 with 4 and 4 with 4 at cohorts 64 and 1 024 (search
/// 0.178 -> 0.141 ms at 1 024) and equal them at 8 192. The f32 path the u8 kernels keep for
/// queries off the integers spills under it.
pub const U8_MIN_BLOCKS: usize = 4;
/// Tensor-core filter: queries per block tile.
pub const TC_QTILE: usize = 128;
/// Tensor-core filter: centroids per block tile.
pub const TC_CTILE: usize = 64;
/// Tensor-core filter: threads per block (eight warps, each 32 queries x 32 centroids).
pub const TC_THREADS: usize = 256;
/// Tiled plan: the largest k or nprobe a radix select returns (so the largest nprobe).
pub const SEL_MAX: usize = 256;
/// Tiled plan: the most queries a pass the pair scan takes (`knn_search_pairs_u8` keeps
/// their row lengths in registers, PAIR_MAX_QUERIES / 32 a lane; a multiple of 32).
pub const PAIR_MAX_QUERIES: usize = 128;
/// k-means assignment: rows per block and centroids per shared-memory tile (a multiple of 16:
/// the block's 16 x 16 threads each own a (KM_TILE/16)^2 register tile).
pub const KM_TILE: usize = 64;
/// The per-pair reduce (and the persistent engine's reducer slots) hold nprobe * k
/// candidates, 8 bytes each, in shared memory.
pub const GPU_MAX_CANDIDATES: usize = 6144;
/// Largest magnitude of a query element (defined with the k-NN library).
pub const MAX_ABS_ELEMENT: f32 = cohort_ivf::MAX_ABS_ELEMENT;
/// Bytes of a query message before its vector (defined with the k-NN library).
pub const KNN_HEAD: usize = cohort_ivf::QUERY_HEAD;

/// The `#define`s every k-NN kernel file is compiled with.
pub fn prelude() -> Prelude {
    let mut p = Prelude::new("crates/ivf-gpu/src/kernels.rs")
        .int("KM_TILE", KM_TILE)
        .int("BLOCK", BLOCK)
        .int("MAX_K", MAX_K)
        .int("MAX_DIM", MAX_DIM)
        .int("WIDE_BLOCK", WIDE_BLOCK)
        .int("QB", QB)
        .int("RT", RT)
        .int("U8_MIN_BLOCKS", U8_MIN_BLOCKS)
        .int("SEL_MAX", SEL_MAX)
        .int("PAIR_MAX_QUERIES", PAIR_MAX_QUERIES)
        .int("TC_QTILE", TC_QTILE)
        .int("TC_CTILE", TC_CTILE)
        .int("TC_THREADS", TC_THREADS)
        .int("GPU_MAX_CANDIDATES", GPU_MAX_CANDIDATES)
        .int("KNN_HEAD", KNN_HEAD);
    p.define("NO_ID", format!("{NO_ID:#x}u"));
    p.define("KNN_MAX_ABS_ELEMENT", format!("{MAX_ABS_ELEMENT:e}f"));
    p
}

/// Device functions every k-NN compilation unit starts with.
pub const COMMON: (&str, &str) = ("common.cuh", include_str!("kernels/common.cuh"));
/// The per-pair plan's kernels (and the device functions the persistent per-pair stages call).
pub const PER_PAIR: (&str, &str) = ("knn.cu", include_str!("kernels/knn.cu"));
/// The tiled plan's kernels (and the stage functions the persistent cohort plan calls), after
/// their distance loops and selects.
pub const TILED: [(&str, &str); 3] = [
    (
        "knn_tiled_distances.cuh",
        include_str!("kernels/knn_tiled_distances.cuh"),
    ),
    (
        "knn_tiled_select.cuh",
        include_str!("kernels/knn_tiled_select.cuh"),
    ),
    ("knn_tiled.cu", include_str!("kernels/knn_tiled.cu")),
];
/// The tiled plan's filter on the tensor cores (compiled in `knn_tiled.cu`'s unit).
const FILTER_TC: (&str, &str) = ("knn_filter_tc.cu", include_str!("kernels/knn_filter_tc.cu"));

/// The index's compilation units: `knn.cu` (per-pair plan), `knn_tiled.cu` (tiled plan, with
/// its tensor-core filter `knn_filter_tc.cu`), `kmeans.cu` (index build).
pub fn sources() -> &'static [&'static KernelSource] {
    static SOURCES: std::sync::OnceLock<Vec<&'static KernelSource>> = std::sync::OnceLock::new();
    SOURCES.get_or_init(|| {
        let p = prelude();
        vec![
            KernelSource::assemble_typed("knn.cu", &p, &[COMMON, PER_PAIR], per_pair::checked()),
            KernelSource::assemble_typed(
                "knn_tiled.cu",
                &p,
                &[COMMON, TILED[0], TILED[1], TILED[2], FILTER_TC],
                [tiled::checked(), tiled::checked_filter_tc()].concat(),
            ),
            KernelSource::assemble_typed(
                "kmeans.cu",
                &p,
                &[COMMON, ("kmeans.cu", include_str!("kernels/kmeans.cu"))],
                kmeans::checked(),
            ),
        ]
    })
}

/// The compilation unit `name` of [`sources`].
pub fn source(name: &str) -> &'static KernelSource {
    sources()
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("kernel file {name} is not embedded"))
}
