//! `cohort data synth|fetch`.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use cohort_knn::synth::{Model, SynthConfig};
use cohort_knn::{exact, vecfile, Metric};
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum DataCmd {
    /// Write SIFT-like base.fvecs, query.fvecs and groundtruth.ivecs (exact top-100).
    Synth(SynthArgs),
    /// Download a public TEXMEX set (sift1m, siftsmall), verify and unpack it.
    Fetch(crate::fetch::FetchArgs),
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Neighbours per query in groundtruth.ivecs.
    #[arg(long, default_value_t = 100)]
    pub gt_k: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Mixture components of the generator.
    #[arg(long, default_value_t = 64)]
    pub clusters: usize,
    /// Intrinsic dimension of the generator.
    #[arg(long, default_value_t = 16)]
    pub latent_dim: usize,
    /// Full-dimensional noise of the generator (relative to the latent signal).
    #[arg(long, default_value_t = 1.0)]
    pub noise: f32,
    #[arg(long)]
    pub out: PathBuf,
}

pub fn synth(a: &SynthArgs) -> Result<()> {
    anyhow::ensure!(
        a.n >= 1 && a.dim >= 1 && a.queries >= 1,
        "--n, --dim and --queries must be positive"
    );
    anyhow::ensure!(
        a.gt_k >= 1 && a.gt_k <= a.n,
        "--gt-k must be between 1 and --n"
    );
    anyhow::ensure!(a.clusters >= 1, "--clusters must be positive");
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    write_synth(
        &a.out,
        a.n,
        a.dim,
        a.queries,
        a.gt_k,
        a.seed,
        a.clusters,
        a.latent_dim,
        a.noise,
    )
}

/// Generates and writes a data set; shared with the demo.
#[allow(clippy::too_many_arguments)]
pub fn write_synth(
    out: &Path,
    n: usize,
    dim: usize,
    nq: usize,
    gt_k: usize,
    seed: u64,
    clusters: usize,
    latent_dim: usize,
    noise: f32,
) -> Result<()> {
    let t = std::time::Instant::now();
    let model = Model::new(SynthConfig {
        clusters,
        latent_dim,
        noise,
        ..SynthConfig::sift_like(dim, seed)
    });
    let base = model.sample(n, 1);
    let queries = model.sample(nq, 2);
    eprintln!(
        "generated {n} x {dim} base and {nq} queries in {:.1?}; computing exact top-{gt_k}",
        t.elapsed()
    );
    let gt = exact::search(&base, Metric::L2, &queries, gt_k);
    let ids: Vec<i32> = gt
        .iter()
        .flat_map(|r| r.iter().map(|x| x.id as i32))
        .collect();
    vecfile::write_fvecs(&out.join("base.fvecs"), &base)?;
    vecfile::write_fvecs(&out.join("query.fvecs"), &queries)?;
    vecfile::write_ivecs(&out.join("groundtruth.ivecs"), gt_k, &ids)?;
    eprintln!("wrote {} in {:.1?}", out.display(), t.elapsed());
    Ok(())
}

pub fn run(cmd: DataCmd) -> Result<()> {
    match cmd {
        DataCmd::Synth(a) => synth(&a),
        DataCmd::Fetch(a) => crate::fetch::run(&a),
    }
}
