//! Exact (brute-force) k-NN: ground truth and `--exact` queries.

use crate::metric::Metric;
use crate::topk::{Neighbor, TopK};
use crate::vecfile::Vectors;
use rayon::prelude::*;

/// The k nearest base vectors of one query.
pub fn search_one(base: &Vectors, metric: Metric, q: &[f32], k: usize) -> Vec<Neighbor> {
    assert_eq!(q.len(), base.dim, "query dimension differs from the base");
    let mut t = TopK::new(k);
    for (i, row) in base.data.chunks_exact(base.dim).enumerate() {
        let d = metric.distance(q, row);
        if d < t.threshold() || t.len() < k {
            t.push(i as u32, d);
        }
    }
    t.into_sorted()
}

/// All queries, in parallel over queries.
pub fn search(base: &Vectors, metric: Metric, queries: &Vectors, k: usize) -> Vec<Vec<Neighbor>> {
    (0..queries.n)
        .into_par_iter()
        .map(|i| search_one(base, metric, queries.row(i), k))
        .collect()
}

/// recall@k of `found` against ground-truth rows (`gt_dim` ids per query): the fraction of
/// the true k nearest that were returned among the first k answers.
pub fn recall_at_k(found: &[Vec<u32>], gt: &[i32], gt_dim: usize, k: usize) -> f64 {
    assert!(
        k <= gt_dim,
        "ground truth holds only {gt_dim} neighbours per query"
    );
    let mut hits = 0usize;
    for (qi, f) in found.iter().enumerate() {
        let truth = &gt[qi * gt_dim..qi * gt_dim + k];
        hits += f
            .iter()
            .take(k)
            .filter(|id| truth.contains(&(**id as i32)))
            .count();
    }
    hits as f64 / (found.len() * k).max(1) as f64
}
