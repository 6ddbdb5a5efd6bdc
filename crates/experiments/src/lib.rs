//! Experiments and benchmarks beside the serving path: [`bench`] (`cohort bench ...`: echo,
//! engines fed in process, the served matrix, the k-NN kernels, index builds; each result
//! written with its machine, commit and command), and the experiments with their own kernels
//! and CPU twins: [`streams`] (Czarnul's multi-stream CPU+GPU processing, `cohort bench
//! streams`) and [`numa_calib`] (the kernels that calibrate the NUMA simulator, `cohort sim
//! numa calibrate`). A service's own benchmarks live in its folder (catalog `benches`).

pub mod bench;
pub mod numa_calib;
pub mod selftest;
pub mod streams;

use cohort_gpu::{KernelSource, Prelude};

/// NUMA calibration kernels: threads per CTA, floats of each array a CTA covers (32 lines of
/// 128 B: the simulator's CTA), stencil tile rows and grid width (the simulator's
/// `stencil::TILE_ROWS`, `ROW_LINES`; the cli asserts they agree).
pub const CALIB_THREADS: usize = 256;
pub const CALIB_CHUNK_FLOATS: usize = 1024;
pub const CALIB_TILE_ROWS: usize = 8;
pub const CALIB_ROW_FLOATS: usize = 4096;

/// The experiments' kernel files, each compiled with the constants above.
pub fn kernel_sources() -> &'static [&'static KernelSource] {
    static SOURCES: std::sync::OnceLock<Vec<&'static KernelSource>> = std::sync::OnceLock::new();
    SOURCES.get_or_init(|| {
        let prelude = Prelude::new("crates/experiments/src/lib.rs")
            .int("CALIB_THREADS", CALIB_THREADS)
            .int("CALIB_CHUNK_FLOATS", CALIB_CHUNK_FLOATS)
            .int("CALIB_TILE_ROWS", CALIB_TILE_ROWS)
            .int("CALIB_ROW_FLOATS", CALIB_ROW_FLOATS);
        vec![
            KernelSource::assemble_typed(
                "streams.cu",
                &prelude,
                &[("streams.cu", include_str!("../kernels/streams.cu"))],
                streams::checked(),
            ),
            KernelSource::assemble_typed(
                "numa_calib.cu",
                &prelude,
                &[("numa_calib.cu", include_str!("../kernels/numa_calib.cu"))],
                numa_calib::checked(),
            ),
        ]
    })
}

/// The kernel file `name` of [`kernel_sources`].
pub(crate) fn source(name: &str) -> &'static KernelSource {
    kernel_sources()
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("kernel file {name} is not embedded"))
}
