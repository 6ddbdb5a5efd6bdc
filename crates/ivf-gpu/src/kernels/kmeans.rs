//! The k-means assignment kernel (`kmeans.cu`), declared once: name, argument block, grid rule.

use super::KM_TILE;
use cohort_gpu::kernel_args;
use cohort_gpu::launch::{ArgsLayout, Dev, Grid, KernelDecl};

kernel_args! {
    /// The nearest centroid of each of n rows.
    pub struct KmeansAssignArgs {
        x: Dev<f32>,
        n: u64,
        c: Dev<f32>,
        c_norm: Dev<f32>,
        k: i32,
        dim: i32,
        metric: i32,
        out: Dev<u32>,
    }
}

/// 16 x 16 threads, a block per KM_TILE rows.
pub const ASSIGN: KernelDecl<KmeansAssignArgs> =
    KernelDecl::new("kmeans_assign", 256, Grid::ItemsPerBlock(KM_TILE as u32));

pub fn checked() -> Vec<(&'static str, ArgsLayout)> {
    vec![ASSIGN.checked()]
}
