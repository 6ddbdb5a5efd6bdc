//! LeNet's kernel files and every size they share with Rust (the network's, from `model.rs`,
//! and the kernels' block shapes), handed to CUDA by one prelude; the batch kernels' argument
//! blocks and the persistent worker, declared once.

use super::model::{C1, C2, C2_SIDE, CLASSES, FLAT, HIDDEN, KERNEL, P1_SIDE, P2_SIDE, SIDE};
use cohort_gpu::kernel_args;
use cohort_gpu::launch::{Dev, Grid, KernelDecl};
use cohort_gpu::persistent::{persistent_source, StageKernel};
use cohort_gpu::{KernelSource, Prelude};

/// Threads of a `lenet_conv` block (one image).
pub const CONV_THREADS: usize = 256;
/// Side of `lenet_dense`'s square tile (rows x outputs, and the k step).
pub const TILE: usize = 16;
// The tensor-core conv2 splits its 4 row tiles over the warps: a multiple of 4 warps.
const _: () = assert!(CONV_THREADS.is_multiple_of(128) && P_THREADS.is_multiple_of(128));

/// Threads of a `lenet_dense_tc` block: eight warps, each 16 rows x 32 outputs.
pub const DENSE_TC_THREADS: usize = 256;
/// Rows and outputs of a `lenet_dense_tc` block's tile.
pub const DENSE_TC_TILE: usize = 64;
/// Threads of a persistent worker block (one image at a time: more threads, less latency).
pub const P_THREADS: usize = 512;

/// Blocks of a team in the persistent `team` plan: one per conv2 channel tile of 8.
pub const TEAM: usize = C2.div_ceil(8);
/// A team's device memory, in 4-byte words: the image's features, its hidden layer and the
/// leader's mailbox (the slot in hand), each starting on its own 128-byte line.
pub const TEAM_FEATURES: usize = 0;
pub const TEAM_HIDDEN: usize = (TEAM_FEATURES + FLAT).next_multiple_of(32);
pub const TEAM_MAIL: usize = (TEAM_HIDDEN + HIDDEN).next_multiple_of(32);
pub const TEAM_STRIDE: usize = TEAM_MAIL + 32;

fn prelude() -> Prelude {
    Prelude::new("crates/services/lenet/src/kernels.rs")
        .int("LENET_SIDE", SIDE)
        .int("LENET_KERNEL", KERNEL)
        .int("LENET_C1", C1)
        .int("LENET_P1_SIDE", P1_SIDE)
        .int("LENET_C2", C2)
        .int("LENET_C2_SIDE", C2_SIDE)
        .int("LENET_P2_SIDE", P2_SIDE)
        .int("LENET_FLAT", FLAT)
        .int("LENET_HIDDEN", HIDDEN)
        .int("LENET_CLASSES", CLASSES)
        .int("LENET_CONV_THREADS", CONV_THREADS)
        .int("LENET_TILE", TILE)
        .int("LENET_P_THREADS", P_THREADS)
        .int("LENET_DENSE_TC_THREADS", DENSE_TC_THREADS)
        .int("LENET_DENSE_TC_TILE", DENSE_TC_TILE)
        .int("LENET_TEAM", TEAM)
        .int("LENET_TEAM_FEATURES", TEAM_FEATURES)
        .int("LENET_TEAM_HIDDEN", TEAM_HIDDEN)
        .int("LENET_TEAM_MAIL", TEAM_MAIL)
        .int("LENET_TEAM_STRIDE", TEAM_STRIDE)
}

kernel_args! {
    /// One block per image: the convolutions, their tanh and pools, the image's features.
    pub struct LenetConvArgs {
        images: Dev<u8>,
        w1: Dev<f32>,
        b1: Dev<f32>,
        w2: Dev<f32>,
        b2: Dev<f32>,
        features: Dev<f32>,
        rows: u32,
    }
}

kernel_args! {
    /// out[r][n] = bias[n] + sum_k input[r][k] * weight[n][k], ReLU'd when `relu` is 1.
    pub struct LenetDenseArgs {
        input: Dev<f32>,
        weight: Dev<f32>,
        bias: Dev<f32>,
        out: Dev<f32>,
        rows: u32,
        k: u32,
        n: u32,
        relu: u32,
    }
}

pub const CONV: KernelDecl<LenetConvArgs> =
    KernelDecl::new("lenet_conv", CONV_THREADS as u32, Grid::BlockPerItem);
pub const CONV_TC: KernelDecl<LenetConvArgs> =
    KernelDecl::new("lenet_conv_tc", CONV_THREADS as u32, Grid::BlockPerItem);
pub const DENSE: KernelDecl<LenetDenseArgs> =
    KernelDecl::new("lenet_dense", TILE as u32, Grid::Sized).with_block_y(TILE as u32);
pub const DENSE_TC: KernelDecl<LenetDenseArgs> =
    KernelDecl::new("lenet_dense_tc", DENSE_TC_THREADS as u32, Grid::Sized);

const NET: (&str, &str) = ("lenet_net.cuh", include_str!("kernels/lenet_net.cuh"));

/// The batch kernels (`lenet.cu`), held to their Rust declarations.
pub fn batch() -> &'static KernelSource {
    static S: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        KernelSource::assemble_typed(
            "lenet.cu",
            &prelude(),
            &[NET, ("lenet.cu", include_str!("kernels/lenet.cu"))],
            vec![
                CONV.checked(),
                CONV_TC.checked(),
                DENSE.checked(),
                DENSE_TC.checked(),
            ],
        )
    })
}

cohort_gpu::svc_args! {
    /// The worker's argument block: `struct SvcArgs` of `kernels/lenet_persistent.cu` (the
    /// weights' device addresses).
    pub struct LenetArgs { w1, b1, w2, b2, f1w, f1b, f2w, f2b, team }
}

/// The persistent stages, one per `lenet.persistent` plan and `lenet.math`: a block per
/// image, or a team of blocks per image; conv2 on the CUDA cores (fp32) or the tensor cores.
pub const WORKER: StageKernel<LenetArgs> = StageKernel::new("lenet_p_worker");
pub const WORKER_TC: StageKernel<LenetArgs> = StageKernel::new("lenet_p_worker_tc");
pub const TEAM_WORKER: StageKernel<LenetArgs> = StageKernel::new("lenet_p_team");
pub const TEAM_WORKER_TC: StageKernel<LenetArgs> = StageKernel::new("lenet_p_team_tc");

/// The persistent module: the runtime around `lenet_persistent.cu`.
pub fn persistent() -> &'static KernelSource {
    static S: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        persistent_source(
            "lenet_persistent.cu",
            &prelude(),
            &[NET],
            &[(
                "lenet_persistent.cu",
                include_str!("kernels/lenet_persistent.cu"),
            )],
            [WORKER, WORKER_TC, TEAM_WORKER, TEAM_WORKER_TC]
                .iter()
                .map(|k| k.checked())
                .collect(),
        )
    })
}

/// Both units (CI compiles each through NVRTC).
pub fn sources() -> Vec<&'static KernelSource> {
    vec![batch(), persistent()]
}
