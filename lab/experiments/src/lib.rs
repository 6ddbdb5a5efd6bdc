//! Experiments and benchmarks beside the serving path: [`bench`] (`cohort-lab bench ...`: echo,
//! engines fed in process, the served matrix, the k-NN kernels, index builds; each result
//! written with its machine, commit and command), and the experiments with their own kernels
//! and CPU twins: [`streams`] (Czarnul's multi-stream CPU+GPU processing, `cohort-lab bench
//! streams`) and [`numa_calib`] (the kernels that calibrate the NUMA simulator, `cohort-lab sim
//! numa calibrate`). A service's own benchmarks live in its folder (catalog `benches`).

pub mod bench;
pub mod numa_calib;
pub mod selftest;
pub mod streams;

use cohort_gpu::{KernelSource, Prelude};
use std::path::PathBuf;

/// The product's binary, `cohort`, that the lab's runs start (servers, load generators):
/// `COHORT_BIN` where set, else the `cohort` beside this binary (a workspace build, and
/// `scripts/gpu-check build`'s dist/, put both in one folder).
pub fn product_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("COHORT_BIN").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().map_err(|e| anyhow::anyhow!("finding this binary: {e}"))?;
    let cohort = me.with_file_name("cohort");
    anyhow::ensure!(
        cohort.is_file(),
        "no product binary at {} (build it: cargo build -p cohort-cli, with this binary's \
         profile; or name it in COHORT_BIN)",
        cohort.display()
    );
    Ok(cohort)
}

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
        let prelude = Prelude::new("lab/experiments/src/lib.rs")
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
