//! k-means for the IVF coarse quantizer: random or k-means++ initialisation on a sample,
//! Lloyd iterations in parallel (rayon), empty clusters re-seeded by splitting the largest.

use crate::assign::{nearest, Assigner, CpuGemm};
use crate::metric::{l2_sq, Metric};
use crate::vecfile::Vectors;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    Random,
    PlusPlus,
}

impl std::str::FromStr for Init {
    type Err = String;
    fn from_str(s: &str) -> Result<Init, String> {
        match s {
            "random" => Ok(Init::Random),
            "kmeans++" | "plusplus" => Ok(Init::PlusPlus),
            _ => Err(format!("unknown init {s:?} (random, kmeans++)")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct KMeansConfig {
    pub k: usize,
    pub iters: usize,
    /// Train on at most this many points (a uniform sample); FAISS uses 256 per centroid.
    pub max_sample: usize,
    pub init: Init,
    pub seed: u64,
    pub progress: bool,
}

/// Iterations of an index's k-means: FAISS's default. Twenty measured no better recall on
/// SIFT-like 200K x 128, nlist 1024 (recall@10 0.7787 / 0.9086 / 0.9712 at nprobe 8 / 16 / 32
/// with ten, 0.7765 / 0.9054 / 0.9702 with twenty) and took twice as long.
pub const DEFAULT_ITERS: usize = 10;

impl KMeansConfig {
    pub fn new(k: usize) -> KMeansConfig {
        KMeansConfig {
            k,
            iters: DEFAULT_ITERS,
            max_sample: 256 * k,
            init: Init::Random,
            seed: 1234,
            progress: false,
        }
    }
}

fn sample_rows(data: &Vectors, m: usize, rng: &mut StdRng) -> Vectors {
    if m >= data.n {
        return data.clone();
    }
    let mut idx = sample(rng, data.n, m).into_vec();
    idx.sort_unstable();
    let mut out = Vec::with_capacity(m * data.dim);
    for i in idx {
        out.extend_from_slice(data.row(i));
    }
    Vectors::new(data.dim, out)
}

fn init_centroids(x: &Vectors, k: usize, init: Init, rng: &mut StdRng) -> Vectors {
    match init {
        Init::Random => sample_rows(x, k, rng),
        Init::PlusPlus => {
            let mut c = Vec::with_capacity(k * x.dim);
            c.extend_from_slice(x.row(rng.gen_range(0..x.n)));
            let mut d2: Vec<f32> = (0..x.n)
                .into_par_iter()
                .map(|i| l2_sq(x.row(i), &c[..x.dim]))
                .collect();
            for _ in 1..k {
                let total: f64 = d2.iter().map(|&v| v as f64).sum();
                let pick = if total > 0.0 {
                    let mut r = rng.gen::<f64>() * total;
                    d2.iter()
                        .position(|&v| {
                            r -= v as f64;
                            r <= 0.0
                        })
                        .unwrap_or(x.n - 1)
                } else {
                    rng.gen_range(0..x.n)
                };
                let start = c.len();
                c.extend_from_slice(x.row(pick));
                let new = &c[start..];
                d2.par_iter_mut()
                    .enumerate()
                    .for_each(|(i, d)| *d = d.min(l2_sq(x.row(i), new)));
            }
            Vectors::new(x.dim, c)
        }
    }
}

/// Trains `cfg.k` centroids on (a sample of) `data` with squared-L2 k-means, on the CPU.
pub fn train(data: &Vectors, cfg: &KMeansConfig) -> Vectors {
    train_with(data, cfg, &mut CpuGemm).expect("the CPU assigner fails only on bad dimensions")
}

/// Trains with the nearest-centroid step on `assigner` (CPU or GPU); the update, the
/// empty-cluster splits and the sampling stay here, identical for every assigner.
pub fn train_with(
    data: &Vectors,
    cfg: &KMeansConfig,
    assigner: &mut dyn Assigner,
) -> anyhow::Result<Vectors> {
    assert!(
        cfg.k >= 1 && cfg.k <= data.n,
        "k must be between 1 and the number of points"
    );
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let x = sample_rows(data, cfg.max_sample.max(cfg.k), &mut rng);
    let mut c = init_centroids(&x, cfg.k, cfg.init, &mut rng);
    let dim = x.dim;
    let bar = if cfg.progress {
        indicatif::ProgressBar::new(cfg.iters as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("k-means {bar:30} {pos}/{len} iterations {msg}")
            .expect("static template"),
    );
    for _ in 0..cfg.iters {
        let a = assigner.assign(&x, &c, Metric::L2)?;
        let (sums, mut counts) = cluster_sums(&x, &a, cfg.k);
        for j in 0..cfg.k {
            if counts[j] > 0 {
                for d in 0..dim {
                    c.data[j * dim + d] = (sums[j * dim + d] / counts[j] as f64) as f32;
                }
            }
        }
        // Empty clusters: split the largest one (copy its centroid, nudge both apart).
        for j in 0..cfg.k {
            if counts[j] == 0 {
                let big = (0..cfg.k).max_by_key(|&i| counts[i]).expect("k >= 1");
                for d in 0..dim {
                    let v = c.data[big * dim + d];
                    let eps = 1e-3 * (v.abs() + 1.0) * if rng.gen::<bool>() { 1.0 } else { -1.0 };
                    c.data[j * dim + d] = v + eps;
                    c.data[big * dim + d] = v - eps;
                }
                counts[j] = counts[big] / 2;
                counts[big] -= counts[j];
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(c)
}

/// Per cluster, the f64 sum of its rows and their count. Rows are grouped by cluster first
/// (a counting sort of the assignment), then clusters summed in parallel: no per-thread
/// k x dim accumulators to zero and merge (those cost more than the GPU's assignment).
fn cluster_sums(x: &Vectors, a: &[u32], k: usize) -> (Vec<f64>, Vec<usize>) {
    let dim = x.dim;
    let mut counts = vec![0usize; k];
    for &j in a {
        counts[j as usize] += 1;
    }
    let mut start = vec![0usize; k + 1];
    for j in 0..k {
        start[j + 1] = start[j] + counts[j];
    }
    let mut order = vec![0u32; a.len()];
    let mut at = start.clone();
    for (i, &j) in a.iter().enumerate() {
        order[at[j as usize]] = i as u32;
        at[j as usize] += 1;
    }
    let mut sums = vec![0f64; k * dim];
    sums.par_chunks_mut(dim.max(1))
        .enumerate()
        .for_each(|(j, s)| {
            for &i in &order[start[j]..start[j + 1]] {
                for (acc, v) in s.iter_mut().zip(x.row(i as usize)) {
                    *acc += *v as f64;
                }
            }
        });
    (sums, counts)
}

/// Mean squared distance of points to their nearest centroid (the k-means objective).
pub fn inertia(data: &Vectors, c: &Vectors) -> f64 {
    (0..data.n)
        .into_par_iter()
        .map(|i| nearest(data.row(i), c, Metric::L2).1 as f64)
        .sum::<f64>()
        / data.n as f64
}
