//! Nearest-centroid assignment, the O(n k d) part of k-means and of filling an IVF index.
//! [`Assigner`] lets the build run on the CPU ([`CpuGemm`]) or on a GPU (cohort-gpu's
//! streaming assigner) with the same training loop around it; [`exact`] is the exact scan
//! both are tested against ([`check`]). k-means (its training loop) builds on this module,
//! never the other way.

use crate::metric::Metric;
use crate::vecfile::Vectors;
use rayon::prelude::*;

pub trait Assigner {
    /// Where it runs, for logs and results ("cpu", "gpu 0 (4 streams)").
    fn describe(&self) -> String;
    /// The index of the nearest centroid of every row of `data`.
    fn assign(
        &mut self,
        data: &Vectors,
        centroids: &Vectors,
        metric: Metric,
    ) -> anyhow::Result<Vec<u32>>;
}

/// Index of the nearest centroid of every row, by exact distances (parallel): the reference
/// the faster assigners are checked against.
pub fn exact(data: &Vectors, centroids: &Vectors, metric: Metric) -> Vec<u32> {
    assert_eq!(data.dim, centroids.dim);
    (0..data.n)
        .into_par_iter()
        .map(|i| nearest(data.row(i), centroids, metric).0)
        .collect()
}

/// The nearest centroid of `x` and its distance (the first of equals).
pub(crate) fn nearest(x: &[f32], c: &Vectors, metric: Metric) -> (u32, f32) {
    let mut best = (0u32, f32::INFINITY);
    for (j, row) in c.data.chunks_exact(c.dim).enumerate() {
        let d = metric.distance(x, row);
        if d < best.1 {
            best = (j as u32, d);
        }
    }
    best
}

/// Rows per GEMM block: a block's scores (ROWS x CENTROID_STEP f32) stay in L2 cache.
const ROWS: usize = 128;
const CENTROID_STEP: usize = 1024;

/// CPU assignment as blocked matrix products (matrixmultiply's SGEMM, row blocks in parallel
/// on rayon): |c|^2 - 2 x.c for L2 (|x|^2 does not change the ranking), -x.c for inner
/// product. The same form FAISS uses through BLAS; ~4x the exact per-pair scan.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuGemm;

impl Assigner for CpuGemm {
    fn describe(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn assign(
        &mut self,
        data: &Vectors,
        centroids: &Vectors,
        metric: Metric,
    ) -> anyhow::Result<Vec<u32>> {
        anyhow::ensure!(data.dim == centroids.dim, "dimensions differ");
        Ok(gemm_assign(data, centroids, metric))
    }
}

/// Squared norms of the centroids (the L2 ranking term).
pub fn norms(c: &Vectors) -> Vec<f32> {
    c.data
        .chunks_exact(c.dim.max(1))
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect()
}

fn gemm_assign(data: &Vectors, c: &Vectors, metric: Metric) -> Vec<u32> {
    let (dim, k) = (data.dim, c.n);
    let cn = norms(c);
    let mut out = vec![0u32; data.n];
    if data.n == 0 || k == 0 {
        return out;
    }
    out.par_chunks_mut(ROWS).enumerate().for_each_init(
        || vec![0f32; ROWS * CENTROID_STEP],
        |scores, (b, assigned)| {
            let rows = assigned.len();
            let x = &data.data[b * ROWS * dim..(b * ROWS + rows) * dim];
            let mut best = [(f32::INFINITY, 0u32); ROWS];
            for c0 in (0..k).step_by(CENTROID_STEP) {
                let m = CENTROID_STEP.min(k - c0);
                let cb = &c.data[c0 * dim..(c0 + m) * dim];
                // scores[rows x m] = x[rows x dim] . cb[m x dim]^T
                // SAFETY: the pointers cover rows*dim, m*dim and rows*m elements with the
                // strides given (row-major x and scores, cb read transposed).
                unsafe {
                    matrixmultiply::sgemm(
                        rows,
                        dim,
                        m,
                        1.0,
                        x.as_ptr(),
                        dim as isize,
                        1,
                        cb.as_ptr(),
                        1,
                        dim as isize,
                        0.0,
                        scores.as_mut_ptr(),
                        m as isize,
                        1,
                    );
                }
                for (i, best) in best.iter_mut().enumerate().take(rows) {
                    let s = &scores[i * m..(i + 1) * m];
                    for (j, &dot) in s.iter().enumerate() {
                        let d = match metric {
                            Metric::L2 => cn[c0 + j] - 2.0 * dot,
                            Metric::InnerProduct => -dot,
                        };
                        if d < best.0 {
                            *best = (d, (c0 + j) as u32);
                        }
                    }
                }
            }
            for (o, b) in assigned.iter_mut().zip(best.iter()) {
                *o = b.1;
            }
        },
    );
    out
}

/// Checks an assignment against the exact scan ([`exact`]): every row's centroid must
/// be as near as the exact nearest, to within f32 rounding of the expanded |c|^2 - 2 x.c form
/// (relative to the magnitudes involved), so only near-ties may differ. The GPU and GEMM paths
/// are tested with it.
pub fn check(data: &Vectors, c: &Vectors, metric: Metric, got: &[u32]) -> Result<(), String> {
    if got.len() != data.n {
        return Err(format!("{} assignments for {} rows", got.len(), data.n));
    }
    let want = exact(data, c, metric);
    for i in 0..data.n {
        let x = data.row(i);
        let Some(picked) = (got[i] as usize).lt(&c.n).then(|| c.row(got[i] as usize)) else {
            return Err(format!("row {i}: centroid {} out of range", got[i]));
        };
        let dg = metric.distance(x, picked);
        let de = metric.distance(x, c.row(want[i] as usize));
        let scale: f32 =
            x.iter().map(|v| v * v).sum::<f32>() + picked.iter().map(|v| v * v).sum::<f32>() + 1.0;
        if dg > de + 1e-5 * scale {
            return Err(format!(
                "row {i}: picked {} at {dg}, nearest {} at {de}",
                got[i], want[i]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn gemm_matches_the_exact_scan(n in 1usize..400, k in 1usize..1500, dim in 1usize..70,
                                       ip in any::<bool>(), seed in any::<u64>()) {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut v = |m: usize| Vectors::new(dim, (0..m * dim).map(|_| rng.gen_range(-10.0..10.0f32)).collect());
            let (data, c) = (v(n), v(k));
            let metric = if ip { Metric::InnerProduct } else { Metric::L2 };
            let got = CpuGemm.assign(&data, &c, metric).unwrap();
            prop_assert_eq!(got.len(), n);
            prop_assert_eq!(check(&data, &c, metric, &got), Ok(()));
        }
    }

    #[test]
    fn mismatched_dimensions_are_an_error() {
        let a = Vectors::new(2, vec![0.0; 4]);
        let b = Vectors::new(3, vec![0.0; 3]);
        assert!(CpuGemm.assign(&a, &b, Metric::L2).is_err());
    }
}
