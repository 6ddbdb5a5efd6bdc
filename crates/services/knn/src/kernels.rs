//! The k-NN service's CUDA: the index's kernels and limits (`cohort_ivf_gpu::kernels`,
//! re-exported here) and the persistent stages' unit, built from the same prelude and files.

pub mod persistent;

use cohort_gpu::persistent::persistent_source;
use cohort_gpu::KernelSource;
pub use cohort_ivf_gpu::kernels::*;

/// The service's compilation units: the index's (`cohort_ivf_gpu::kernels::sources`) and
/// `knn_persistent.cu` (both persistent plans, with the runtime).
pub fn sources() -> &'static [&'static KernelSource] {
    static SOURCES: std::sync::OnceLock<Vec<&'static KernelSource>> = std::sync::OnceLock::new();
    SOURCES.get_or_init(|| {
        let mut v = cohort_ivf_gpu::kernels::sources().to_vec();
        v.push(persistent_source(
            "knn_persistent.cu",
            &prelude(),
            &[COMMON, PER_PAIR, TILED[0], TILED[1], TILED[2]],
            &[
                (
                    "knn_persistent.cu",
                    include_str!("kernels/knn_persistent.cu"),
                ),
                (
                    "knn_persistent_cohort.cu",
                    include_str!("kernels/knn_persistent_cohort.cu"),
                ),
            ],
            // The batch kernels of its library come along (they are exported too).
            [per_pair::checked(), tiled::checked(), persistent::checked()].concat(),
        ));
        v
    })
}

/// The compilation unit `name` of [`sources`].
pub fn source(name: &str) -> &'static KernelSource {
    sources()
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("kernel file {name} is not embedded"))
}
