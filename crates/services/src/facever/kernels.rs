//! facever's kernel file and every size it shares with Rust (`lbp.rs`'s), handed to CUDA by
//! one prelude.

use super::lbp::{BINS, GRID_X, GRID_Y, HEIGHT, IMAGE_BYTES, LABELS, NEIGHBOURS, WIDTH};
use cohort_gpu::{KernelSource, Prelude};

/// Threads of a block (one image's histogram, or one row's distance).
pub const THREADS: usize = 256;

fn prelude() -> Prelude {
    let mut p = Prelude::new("crates/services/src/facever/kernels.rs")
        .int("FACEVER_WIDTH", WIDTH)
        .int("FACEVER_HEIGHT", HEIGHT)
        .int("FACEVER_IMAGE_BYTES", IMAGE_BYTES)
        .int("FACEVER_GRID_X", GRID_X)
        .int("FACEVER_GRID_Y", GRID_Y)
        .int("FACEVER_LABELS", LABELS)
        .int("FACEVER_BINS", BINS)
        .int("FACEVER_THREADS", THREADS);
    // The neighbours in bit order (bit 7 first), as (dx, dy) pairs.
    let pairs: Vec<String> = NEIGHBOURS
        .iter()
        .map(|(dx, dy)| format!("{dx}, {dy}"))
        .collect();
    p.define("FACEVER_NEIGHBOURS", format!("{{{}}}", pairs.join(", ")));
    p
}

/// The kernels (`facever.cu`), held to their Rust declarations.
pub fn source() -> &'static KernelSource {
    static S: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        KernelSource::assemble_typed(
            "facever.cu",
            &prelude(),
            &[("facever.cu", include_str!("kernels/facever.cu"))],
            vec![super::gpu::LBP.checked(), super::gpu::CHI2.checked()],
        )
    })
}
