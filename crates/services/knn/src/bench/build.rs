//! Index build on the CPU and on the GPU, same data and settings: build time (k-means
//! training + filling the lists), energy, and recall of each resulting index, so the GPU
//! build is judged by the index it makes, not only by its speed.

use crate::gpu_kmeans::{assigner_for, BuildDevice};
use anyhow::Result;
use clap::Args;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::{exact, vecfile, IvfIndex, Metric, SearchParams};
use cohort_service_api::tools::Record;
use rayon::prelude::*;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BuildBench {
    /// Folder with base.fvecs, query.fvecs, groundtruth.ivecs (synthesized there if absent).
    #[arg(long)]
    pub data: PathBuf,
    /// Base size when synthesizing.
    #[arg(long, default_value_t = 1_000_000)]
    pub n: usize,
    #[arg(long, default_value_t = 4096)]
    pub nlist: usize,
    #[arg(long, default_value_t = cohort_ivf::kmeans::DEFAULT_ITERS)]
    pub iters: usize,
    /// Devices to build on, in turn: cpu, gpu, gpu:N.
    #[arg(long, value_delimiter = ',', default_value = "cpu,gpu")]
    pub devices: Vec<BuildDevice>,
    /// GPU builds: CUDA streams (several values: one build each).
    #[arg(long, value_delimiter = ',', default_value = "4")]
    pub streams: Vec<usize>,
    #[arg(long, default_value_t = crate::gpu_kmeans::DEFAULT_CHUNK_ROWS)]
    pub chunk_rows: usize,
    #[arg(long, value_delimiter = ',', default_value = "16")]
    pub nprobe: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    #[arg(long, default_value = "lab/results/index-build.json")]
    pub out: PathBuf,
}

pub fn run(a: &BuildBench, record: Record) -> Result<()> {
    let gp = a.data.join("groundtruth.ivecs");
    if !gp.exists() {
        std::fs::create_dir_all(&a.data)?;
        cohort_ivf::synth::write_synth(&a.data, a.n, 128, 1000, 100, 42, 64, 16, 1.0)?;
    }
    let base = vecfile::read_vectors(&a.data.join("base.fvecs"))?;
    let q = vecfile::read_vectors(&a.data.join("query.fvecs"))?;
    let (_, gdim, gt) = vecfile::read_ivecs(&gp)?;
    anyhow::ensure!(a.k <= gdim, "--k over the ground truth's depth {gdim}");
    let km = KMeansConfig {
        iters: a.iters,
        seed: a.seed,
        progress: true,
        ..KMeansConfig::new(a.nlist)
    };
    let mut runs = Vec::new();
    for &device in &a.devices {
        let streams: &[usize] = match device {
            BuildDevice::Cpu => &[0],
            _ => &a.streams,
        };
        for &s in streams {
            let mut assigner = assigner_for(device, s.max(1), a.chunk_rows)?;
            let what = assigner.describe();
            eprintln!("building nlist {} on {what}", a.nlist);
            let meter = cohort_power::Meter::start();
            let t = Instant::now();
            let ix = IvfIndex::build_with(&base, a.nlist, Metric::L2, &km, assigner.as_mut())?;
            let secs = t.elapsed().as_secs_f64();
            let energy = meter.finish();
            let recall: Vec<_> = a
                .nprobe
                .iter()
                .map(|&nprobe| {
                    let p = SearchParams { k: a.k, nprobe };
                    let found: Vec<Vec<u32>> = (0..q.n)
                        .into_par_iter()
                        .map(|i| ix.query(q.row(i), p).into_iter().map(|n| n.id).collect())
                        .collect();
                    json!({"nprobe": nprobe,
                        "recall_at_k": exact::recall_at_k(&found, &gt[..q.n * gdim], gdim, a.k)})
                })
                .collect();
            let r = json!({"device": format!("{device:?}"), "assigner": what, "streams": s,
                "build_s": secs, "n": base.n, "dim": base.dim, "nlist": a.nlist,
                "iters": a.iters, "sample": km.max_sample.min(base.n), "k": a.k, "recall": recall,
                "threads": rayon::current_num_threads(), "energy": energy.to_json(1.0)});
            eprintln!("{r}");
            runs.push(r);
        }
    }
    record(&a.out, serde_json::Value::Array(runs)).map_err(anyhow::Error::msg)
}
