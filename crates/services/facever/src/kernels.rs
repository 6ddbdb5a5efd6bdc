//! facever's kernel file and every size it shares with Rust (`lbp.rs`'s), handed to CUDA by
//! one prelude; the batch kernels' argument blocks and the persistent stages, declared once.

use super::lbp::{BINS, GRID_X, GRID_Y, HEIGHT, IMAGE_BYTES, LABELS, NEIGHBOURS, WIDTH};
use cohort_gpu::kernel_args;
use cohort_gpu::launch::{Dev, Grid, KernelDecl};
use cohort_gpu::persistent::{persistent_source, StageKernel};
use cohort_gpu::{KernelSource, Prelude};

/// Threads of a block (one image's histogram, or one row's distance).
pub const THREADS: usize = 256;

fn prelude() -> Prelude {
    let mut p = Prelude::new("crates/services/facever/src/kernels.rs")
        .int("FACEVER_WIDTH", WIDTH)
        .int("FACEVER_HEIGHT", HEIGHT)
        .int("FACEVER_IMAGE_BYTES", IMAGE_BYTES)
        .int("FACEVER_GRID_X", GRID_X)
        .int("FACEVER_GRID_Y", GRID_Y)
        .int("FACEVER_LABELS", LABELS)
        .int("FACEVER_BINS", BINS)
        .int("FACEVER_THREADS", THREADS)
        .int("FACEVER_REQUEST_BYTES", super::REQUEST_BYTES)
        .int("FACEVER_ANSWER_BYTES", super::ANSWER_BYTES);
    // The persistent ingress's answer to a request of the wrong size (the CPU's words).
    p.define(
        "FACEVER_BAD_SIZE",
        format!(
            "\"facever takes a person id (u32) and one {WIDTH}x{HEIGHT} 8-bit face: {} bytes\"",
            super::REQUEST_BYTES
        ),
    );
    // The neighbours in bit order (bit 7 first), as (dx, dy) pairs.
    let pairs: Vec<String> = NEIGHBOURS
        .iter()
        .map(|(dx, dy)| format!("{dx}, {dy}"))
        .collect();
    p.define("FACEVER_NEIGHBOURS", format!("{{{}}}", pairs.join(", ")));
    p
}

kernel_args! {
    /// One block per image: its grid of LBP histograms.
    pub struct FaceverLbpArgs {
        images: Dev<u8>,
        table: Dev<u8>,
        hists: Dev<f32>,
        rows: u32,
    }
}

kernel_args! {
    /// One block per row: chi-square(probe, reference).
    pub struct FaceverChi2Args {
        probes: Dev<f32>,
        refs: Dev<f32>,
        distances: Dev<f32>,
        rows: u32,
    }
}

pub const LBP: KernelDecl<FaceverLbpArgs> =
    KernelDecl::new("facever_lbp", THREADS as u32, Grid::BlockPerItem);
pub const CHI2: KernelDecl<FaceverChi2Args> =
    KernelDecl::new("facever_chi2", THREADS as u32, Grid::BlockPerItem);

const FACE: (&str, &str) = ("facever_face.cuh", include_str!("kernels/facever_face.cuh"));

/// The batch kernels (`facever.cu`), held to their Rust declarations.
pub fn source() -> &'static KernelSource {
    static S: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        KernelSource::assemble_typed(
            "facever.cu",
            &prelude(),
            &[FACE, ("facever.cu", include_str!("kernels/facever.cu"))],
            vec![LBP.checked(), CHI2.checked()],
        )
    })
}

cohort_gpu::svc_args! {
    /// The stages' argument block: `struct SvcArgs` of `kernels/facever_persistent.cu`.
    pub struct FaceverArgs {
        table, probes, fetches, ready, status, ask_person, ask_fetch, refs, replies,
        replies_cap, relay_tail, relay_seen, threshold
    }
}

/// The persistent stages: workers (a request each: post its fetch, then compare) and the
/// relay warp (the host's replies into device memory).
pub const WORKER: StageKernel<FaceverArgs> = StageKernel::new("facever_p_worker");
pub const RELAY: StageKernel<FaceverArgs> = StageKernel::new("facever_p_relay");

/// The persistent module: the runtime around `facever_persistent.cu`.
pub fn persistent() -> &'static KernelSource {
    static S: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        persistent_source(
            "facever_persistent.cu",
            &prelude(),
            &[FACE],
            &[(
                "facever_persistent.cu",
                include_str!("kernels/facever_persistent.cu"),
            )],
            vec![WORKER.checked(), RELAY.checked()],
        )
    })
}

/// Both units (CI compiles each through NVRTC).
pub fn sources() -> Vec<&'static KernelSource> {
    vec![source(), persistent()]
}
