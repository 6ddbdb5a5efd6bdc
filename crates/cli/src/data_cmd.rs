//! `cohort data synth|fetch`.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;

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
    cohort_ivf::synth::write_synth(
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

pub fn run(cmd: DataCmd) -> Result<()> {
    // Vector files stopped half-written by ^C or SIGTERM are removed.
    cohort_ivf::atomic_file::remove_temps_on_signals()?;
    match cmd {
        DataCmd::Synth(a) => synth(&a),
        DataCmd::Fetch(a) => crate::fetch::run(&a),
    }
}
