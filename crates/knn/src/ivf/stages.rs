//! The three query stages. Each is a plain function over typed inputs; the GPU kernels are
//! their twins and are tested against them.
//!
//! filter: query x centroids -> the `nprobe` nearest cells.
//! search: each probed cell scanned -> its own top-k (one partial result per probe).
//! reduce: partial results -> the global top-k.

use super::IvfIndex;
use crate::metric::{dot_lanes, l2_sq_lanes, Metric};
use crate::topk::{Neighbor, TopK};

/// Stage 1. Cell ids of the `nprobe` nearest centroids, nearest first.
pub fn filter(centroids: &[f32], dim: usize, metric: Metric, q: &[f32], nprobe: usize) -> Vec<u32> {
    assert_eq!(q.len(), dim);
    let mut t = TopK::new(nprobe);
    for (c, row) in centroids.chunks_exact(dim).enumerate() {
        t.push(c as u32, metric.distance(q, row));
    }
    t.into_sorted().into_iter().map(|n| n.id).collect()
}

#[inline(always)]
fn scan(q: &[f32], vectors: &[f32], ids: &[u32], metric: Metric, t: &mut TopK) {
    let dim = q.len();
    for (row, &id) in vectors.chunks_exact(dim).zip(ids) {
        let d = match metric {
            Metric::L2 => l2_sq_lanes(q, row),
            Metric::InnerProduct => -dot_lanes(q, row),
        };
        if d <= t.threshold() {
            t.push(id, d);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scan_avx2(q: &[f32], vectors: &[f32], ids: &[u32], metric: Metric, t: &mut TopK) {
    scan(q, vectors, ids, metric, t)
}

/// Scans one cell: its k nearest to `q`.
pub fn search_cell(index: &IvfIndex, q: &[f32], cell: u32, k: usize) -> Vec<Neighbor> {
    let (start, end) = index.cell_range(cell as usize);
    let dim = index.dim;
    let vectors = &index.vectors()[start * dim..end * dim];
    let ids = &index.ids()[start..end];
    let mut t = TopK::new(k);
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports avx2 and fma.
        unsafe { scan_avx2(q, vectors, ids, index.metric, &mut t) };
        return t.into_sorted();
    }
    scan(q, vectors, ids, index.metric, &mut t);
    t.into_sorted()
}

/// Stage 2. One partial top-k per probed cell, in probe order.
pub fn search(index: &IvfIndex, q: &[f32], probes: &[u32], k: usize) -> Vec<Vec<Neighbor>> {
    assert_eq!(q.len(), index.dim);
    probes
        .iter()
        .map(|&c| search_cell(index, q, c, k))
        .collect()
}

/// Stage 3. Merges partial results into the global top-k (ties by smaller id).
pub fn reduce(partials: &[Vec<Neighbor>], k: usize) -> Vec<Neighbor> {
    let mut t = TopK::new(k);
    for p in partials {
        for n in p {
            t.push(n.id, n.distance);
        }
    }
    t.into_sorted()
}
