//! The three query stages. Each is a plain function over typed inputs; the GPU kernels are
//! their twins and are tested against them.
//!
//! filter: query x centroids -> the `nprobe` nearest cells.
//! search: each probed cell scanned -> its own top-k (one partial result per probe).
//! reduce: partial results -> the global top-k.

use super::IvfIndex;
use crate::metric::{dot_lanes, isa, l2_sq_lanes, Isa, Metric};
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

/// Scans rows with distance kernel `dist`, keeping the best in `t`.
#[inline(always)]
fn scan(
    q: &[f32],
    vectors: &[f32],
    ids: &[u32],
    t: &mut TopK,
    dist: impl Fn(&[f32], &[f32]) -> f32,
) {
    for (row, &id) in vectors.chunks_exact(q.len()).zip(ids) {
        let d = dist(q, row);
        if d <= t.threshold() {
            t.push(id, d);
        }
    }
}

/// The scan compiled for one instruction set, with its kernel inlined into the loop.
macro_rules! scan_for {
    ($name:ident, $feat:literal, $l2:path, $dot:path) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        unsafe fn $name(q: &[f32], v: &[f32], ids: &[u32], metric: Metric, t: &mut TopK) {
            match metric {
                Metric::L2 => scan(q, v, ids, t, |a, b| unsafe { $l2(a, b) }),
                Metric::InnerProduct => scan(q, v, ids, t, |a, b| -unsafe { $dot(a, b) }),
            }
        }
    };
}
scan_for!(
    scan_avx2,
    "avx2,fma",
    crate::metric::x86::l2_sq_avx2,
    crate::metric::x86::dot_avx2
);

/// Scans rows `vectors` (with their `ids`) into `t`: the one scan every search runs, so a
/// shard scanning its own copy of a list finds exactly what the whole index finds.
pub fn scan_rows(metric: Metric, q: &[f32], vectors: &[f32], ids: &[u32], t: &mut TopK) {
    match isa() {
        // SAFETY: isa() checked the CPU features.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { scan_avx2(q, vectors, ids, metric, t) },
        _ => match metric {
            Metric::L2 => scan(q, vectors, ids, t, l2_sq_lanes),
            Metric::InnerProduct => scan(q, vectors, ids, t, |a, b| -dot_lanes(a, b)),
        },
    }
}

/// Scans one cell: its k nearest to `q`.
pub fn search_cell(index: &IvfIndex, q: &[f32], cell: u32, k: usize) -> Vec<Neighbor> {
    let (start, end) = index.cell_range(cell as usize);
    let dim = index.dim;
    let mut t = TopK::new(k);
    scan_rows(
        index.metric,
        q,
        &index.vectors()[start * dim..end * dim],
        &index.ids()[start..end],
        &mut t,
    );
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
