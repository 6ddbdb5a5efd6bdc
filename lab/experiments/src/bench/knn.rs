//! k-NN on the cpu engine: data (synthesized unless given), index (built unless given),
//! recall@k and single-query latency per nprobe, then a served throughput-latency sweep
//! over UDP.

use anyhow::{Context, Result};
use clap::Args;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::{exact, vecfile, IvfIndex, Metric, SearchParams};
use cohort_load::{LoadConfig, Mode, Target};
use cohort_server::{self as serve, ServeArgs};
use cohort_services::knn::load::KnnWorkload;
use rayon::prelude::*;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct KnnBench {
    /// Folder with base.fvecs, query.fvecs, groundtruth.ivecs (synthesized there if absent).
    #[arg(long)]
    pub data: PathBuf,
    #[arg(long, default_value_t = 1_000_000)]
    pub n: usize,
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    #[arg(long, default_value_t = 1024)]
    pub nlist: usize,
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64")]
    pub nprobe: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// nprobe of the served sweep.
    #[arg(long, default_value_t = 16)]
    pub serve_nprobe: u16,
    /// Rates of the served sweep (empty = skip).
    #[arg(long, value_delimiter = ',', value_parser = cohort_server::util::parse_rate)]
    pub sweep: Vec<f64>,
    #[arg(long, default_value_t = 1)]
    pub io_threads: usize,
    #[arg(long, default_value_t = 2)]
    pub connections: usize,
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Engine of the served sweep: cpu, gpu-direct, gpu-cohort.
    #[arg(long, default_value = "cpu")]
    pub engine: String,
    /// The GPU batching engines' settings, as `cohort serve` takes them (the same defaults).
    #[command(flatten)]
    pub gpu: cohort_server::GpuEngineArgs,
    /// The GPU engines: element type of the vectors there (f32, f16, u8), as
    /// `cohort serve --gpu-precision`.
    #[arg(long, default_value = "f32")]
    pub gpu_precision: String,
    /// Skip the per-nprobe CPU measurements (served sweep only).
    #[arg(long)]
    pub served_only: bool,
    #[arg(long, default_value = "lab/results/knn-cpu.json")]
    pub out: PathBuf,
    /// Plot of the served sweep.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

pub fn run(a: &KnnBench) -> Result<()> {
    let (bp, qp, gp) = (
        a.data.join("base.fvecs"),
        a.data.join("query.fvecs"),
        a.data.join("groundtruth.ivecs"),
    );
    if !gp.exists() {
        std::fs::create_dir_all(&a.data)?;
        cohort_ivf::synth::write_synth(&a.data, a.n, 128, a.queries, 100, 42, 64, 16, 1.0)?;
    }
    let ipath = a.data.join(format!("ivf{}.index", a.nlist));
    let build_s = if IvfIndex::load(&ipath).is_err() {
        let t = Instant::now();
        let base = vecfile::read_vectors(&bp)?;
        let ix = IvfIndex::build(
            &base,
            a.nlist,
            Metric::L2,
            &KMeansConfig {
                progress: true,
                ..KMeansConfig::new(a.nlist)
            },
        );
        ix.save(&ipath)?;
        Some(t.elapsed().as_secs_f64())
    } else {
        None
    };
    let ix = IvfIndex::load_resident(&ipath).context("loading the index")?;
    let q = vecfile::read_vectors(&qp)?;
    let (_, gdim, gt) = vecfile::read_ivecs(&gp)?;
    let mut per_nprobe = Vec::new();
    println!(
        "{:>7} {:>9} {:>12} {:>12} {:>12}",
        "nprobe", "recall", "lat_us(1t)", "p99_us(1t)", "qps(all)"
    );
    for &nprobe in a.nprobe.iter().filter(|_| !a.served_only) {
        let p = SearchParams { k: a.k, nprobe };
        let mut lat = hdrhistogram::Histogram::<u64>::new(3)?;
        let mut found = Vec::with_capacity(q.n);
        for i in 0..q.n {
            let t = Instant::now();
            let r = ix.query(q.row(i), p);
            lat.record(t.elapsed().as_nanos() as u64)?;
            found.push(r.into_iter().map(|n| n.id).collect::<Vec<_>>());
        }
        let t = Instant::now();
        (0..q.n)
            .into_par_iter()
            .for_each(|i| drop(ix.query(q.row(i), p)));
        let qps = q.n as f64 / t.elapsed().as_secs_f64();
        let recall = exact::recall_at_k(&found, &gt, gdim, a.k);
        let (mean, p99) = (lat.mean() / 1e3, lat.value_at_quantile(0.99) as f64 / 1e3);
        println!("{nprobe:>7} {recall:>9.4} {mean:>12.1} {p99:>12.1} {qps:>12.0}");
        per_nprobe.push(json!({"nprobe": nprobe, "k": a.k, "recall_at_k": recall,
            "single_thread_latency_us_mean": mean, "single_thread_latency_us_p99": p99,
            "single_thread_qps": 1e6 / mean, "all_threads_qps": qps, "threads": rayon::current_num_threads()}));
    }
    let mut served = Vec::new();
    if !a.sweep.is_empty() {
        let mut sa = ServeArgs::loopback("knn");
        sa.set_service("knn", "index", ipath.display().to_string());
        sa.set_service("knn", "precision", a.gpu_precision.clone());
        sa.http = None;
        sa.io_threads = a.io_threads;
        sa.engine = a.engine.clone();
        sa.gpu = a.gpu.clone();
        let stack = serve::start(&serve::ServerConfig::resolve(&sa)?)?;
        let w = Arc::new(KnnWorkload::new(
            q.clone(),
            Some((gdim, gt.clone())),
            a.k,
            a.serve_nprobe,
        ));
        let cfg = LoadConfig::new(
            Target::Udp(stack.server.udp_addr.expect("udp")),
            Mode::Open {
                rate: 1.0,
                poisson: true,
            },
            Duration::from_secs_f64(a.duration),
            a.connections,
        );
        let reports = cohort_load::run_sweep(&cfg, &a.sweep, w);
        stack.shutdown();
        let reports = reports?;
        cohort_load::Report::print_table(&reports);
        if let Some(p) = &a.plot {
            let title = format!(
                "knn cpu engine, nlist {} nprobe {}",
                a.nlist, a.serve_nprobe
            );
            cohort_load::plot_sweep(&[("cpu".into(), reports.clone())], &title, p)?;
        }
        served = reports;
    }
    super::write_result(
        &a.out,
        json!({
            "data": a.data, "n": ix.n, "dim": ix.dim, "nlist": ix.nlist, "queries": q.n, "build_seconds": build_s,
            "per_nprobe": per_nprobe, "served_udp": {"engine": a.engine, "gpus": a.gpu.gpus, "nprobe": a.serve_nprobe, "io_threads": a.io_threads, "max_cohort": a.gpu.max_cohort, "runs": served},
        }),
    )
}
