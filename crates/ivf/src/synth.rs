//! SIFT-like synthetic data: clustered, low intrinsic dimension, non-negative and sparse-ish
//! like gradient histograms. IVF recall on it behaves as on real descriptors (neighbours
//! concentrate in a few coarse cells), unlike isotropic noise where every cell is equally far.
//!
//! Model: a mixture of `clusters` anisotropic Gaussians in a `latent_dim`-dimensional space
//! (cluster weights Zipf-like, as real cluster sizes are unbalanced), mapped to `dim`
//! dimensions by one fixed random linear map, plus full-dimensional noise, rectified (SIFT
//! bins are >= 0) and scaled to SIFT's 0..255 range.
//!
//! The defaults (64 components, latent 16, noise 1.0) were tuned so that IVF recall@10
//! against nprobe follows the shape FAISS reports on SIFT (100K x 128, nlist 256: about 0.5
//! at nprobe 1, 0.9 at nprobe 4-8, 0.99 at 16), not the near-perfect recall of well
//! separated clusters.

use crate::vecfile::Vectors;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal, WeightedIndex};
use rayon::prelude::*;

#[derive(Debug, Clone)]
pub struct SynthConfig {
    pub dim: usize,
    pub clusters: usize,
    pub latent_dim: usize,
    /// Std-dev of the full-dimensional noise, relative to the latent signal.
    pub noise: f32,
    pub seed: u64,
}

impl SynthConfig {
    pub fn sift_like(dim: usize, seed: u64) -> SynthConfig {
        SynthConfig {
            dim,
            clusters: 64,
            latent_dim: 16,
            noise: 1.0,
            seed,
        }
    }
}

/// The fixed parts of the model; `sample` draws vectors from it.
pub struct Model {
    cfg: SynthConfig,
    centers: Vec<Vec<f32>>,
    scales: Vec<Vec<f32>>,
    weights: WeightedIndex<f64>,
    /// latent_dim x dim projection.
    proj: Vec<f32>,
    bias: Vec<f32>,
}

impl Model {
    pub fn new(cfg: SynthConfig) -> Model {
        assert!(cfg.dim > 0 && cfg.clusters > 0 && cfg.latent_dim > 0);
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let n01 = Normal::new(0.0f32, 1.0).expect("valid normal");
        let l = cfg.latent_dim;
        let centers = (0..cfg.clusters)
            .map(|_| (0..l).map(|_| 2.5 * n01.sample(&mut rng)).collect())
            .collect();
        // Per-cluster axis scales with a decaying spectrum: most variance in a few directions.
        let scales = (0..cfg.clusters)
            .map(|_| {
                (0..l)
                    .map(|j| rng.gen_range(0.4f32..1.0) / (1.0 + j as f32 * 0.25))
                    .collect()
            })
            .collect();
        let weights =
            WeightedIndex::new((0..cfg.clusters).map(|i| 1.0 / (1.0 + i as f64).powf(0.7)))
                .expect("positive weights");
        let proj = (0..l * cfg.dim)
            .map(|_| n01.sample(&mut rng) / (l as f32).sqrt())
            .collect();
        let bias = (0..cfg.dim).map(|_| rng.gen_range(-0.6f32..0.3)).collect();
        Model {
            cfg,
            centers,
            scales,
            weights,
            proj,
            bias,
        }
    }

    fn one(&self, rng: &mut StdRng, out: &mut [f32]) {
        let n01 = Normal::new(0.0f32, 1.0).expect("valid normal");
        let c = self.weights.sample(rng);
        let z: Vec<f32> = (0..self.cfg.latent_dim)
            .map(|j| self.centers[c][j] + self.scales[c][j] * n01.sample(rng))
            .collect();
        for (d, o) in out.iter_mut().enumerate() {
            let mut v = self.bias[d];
            for (j, zj) in z.iter().enumerate() {
                v += zj * self.proj[j * self.cfg.dim + d];
            }
            v += self.cfg.noise * n01.sample(rng);
            *o = (v.max(0.0) * 60.0).min(255.0).round();
        }
    }

    /// Draws `n` vectors; `stream` separates base from queries (same model, other samples).
    pub fn sample(&self, n: usize, stream: u64) -> Vectors {
        self.sample_rows(0, n, stream)
    }

    /// Rows `start..start + n` of what `sample(N, stream)` draws for any N past them (each
    /// block of `SAMPLE_BLOCK` rows has its own seed): a base drawn a part at a time is the
    /// base drawn whole. `start` is a multiple of `SAMPLE_BLOCK`.
    pub fn sample_rows(&self, start: usize, n: usize, stream: u64) -> Vectors {
        assert!(
            start.is_multiple_of(SAMPLE_BLOCK),
            "parts start on a block boundary"
        );
        let dim = self.cfg.dim;
        let mut data = vec![0f32; n * dim];
        data.par_chunks_mut(SAMPLE_BLOCK * dim)
            .enumerate()
            .for_each(|(i, chunk)| {
                let ci = start / SAMPLE_BLOCK + i;
                let seed = self.cfg.seed
                    ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (ci as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
                let mut rng = StdRng::seed_from_u64(seed);
                for row in chunk.chunks_exact_mut(dim) {
                    self.one(&mut rng, row);
                }
            });
        Vectors::new(dim, data)
    }
}

/// Rows drawn from one seed (`Model::sample_rows`).
pub const SAMPLE_BLOCK: usize = 4096;

/// Base rows generated, searched and written at a time by `write_synth`.
const WRITE_ROWS: usize = 256 * SAMPLE_BLOCK;

/// Generates a SIFT-like set and writes base.fvecs, query.fvecs and groundtruth.ivecs (exact
/// top-`gt_k`) under `out` (`cohort data synth`, the demo, the benchmarks).
#[allow(clippy::too_many_arguments)]
pub fn write_synth(
    out: &std::path::Path,
    n: usize,
    dim: usize,
    nq: usize,
    gt_k: usize,
    seed: u64,
    clusters: usize,
    latent_dim: usize,
    noise: f32,
) -> anyhow::Result<()> {
    let t = std::time::Instant::now();
    let model = Model::new(SynthConfig {
        clusters,
        latent_dim,
        noise,
        ..SynthConfig::sift_like(dim, seed)
    });
    // The base is generated, searched and written a part at a time (memory bounded by one
    // part, not by n): the same file as one drawn whole, and the same exact neighbours (each
    // query's top-k kept across parts, rows met in the same order).
    let queries = model.sample(nq, 2);
    let mut tops: Vec<crate::topk::TopK> = (0..nq).map(|_| crate::topk::TopK::new(gt_k)).collect();
    let base_path = out.join("base.fvecs");
    let mut w = crate::rowfile::FvecsAppender::create(&base_path, dim)?;
    for start in (0..n).step_by(WRITE_ROWS) {
        let part = model.sample_rows(start, WRITE_ROWS.min(n - start), 1);
        tops.par_iter_mut().enumerate().for_each(|(qi, t)| {
            let q = queries.row(qi);
            for (i, row) in part.data.chunks_exact(dim).enumerate() {
                let d = crate::Metric::L2.distance(q, row);
                if d < t.threshold() || t.len() < gt_k {
                    t.push((start + i) as u32, d);
                }
            }
        });
        w.append(&part)?;
    }
    eprintln!(
        "generated {n} x {dim} base and {nq} queries with their exact top-{gt_k} in {:.1?}",
        t.elapsed()
    );
    w.finish(&base_path)?;
    let ids: Vec<i32> = tops
        .into_iter()
        .flat_map(|t| t.into_sorted().into_iter().map(|x| x.id as i32))
        .collect();
    crate::vecfile::write_fvecs(&out.join("query.fvecs"), &queries)?;
    crate::vecfile::write_ivecs(&out.join("groundtruth.ivecs"), gt_k, &ids)?;
    eprintln!("wrote {} in {:.1?}", out.display(), t.elapsed());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_drawn_in_parts_is_the_base_drawn_whole() {
        let m = Model::new(SynthConfig::sift_like(8, 3));
        let whole = m.sample(3 * SAMPLE_BLOCK + 100, 1);
        let mut parts = m.sample_rows(0, 2 * SAMPLE_BLOCK, 1).data;
        parts.extend(m.sample_rows(2 * SAMPLE_BLOCK, SAMPLE_BLOCK + 100, 1).data);
        assert_eq!(parts, whole.data);
    }

    #[test]
    fn the_written_set_reads_back_with_its_exact_neighbours() {
        let d = std::env::temp_dir().join(format!("cohort-synth-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        write_synth(&d, 5000, 8, 20, 10, 9, 16, 4, 1.0).unwrap();
        let base = crate::vecfile::read_vectors(&d.join("base.fvecs")).unwrap();
        let q = crate::vecfile::read_vectors(&d.join("query.fvecs")).unwrap();
        let (nq, k, gt) = crate::vecfile::read_ivecs(&d.join("groundtruth.ivecs")).unwrap();
        assert_eq!((base.n, q.n, nq, k), (5000, 20, 20, 10));
        let exact = crate::exact::search(&base, crate::Metric::L2, &q, 10);
        let want: Vec<i32> = exact
            .iter()
            .flat_map(|r| r.iter().map(|x| x.id as i32))
            .collect();
        assert_eq!(gt, want);
        std::fs::remove_dir_all(d).unwrap();
    }
}
