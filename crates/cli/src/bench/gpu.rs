//! Kernel-level k-NN on one GPU: queries/s per cohort size for the chained stages, and the
//! search kernel's achieved memory bandwidth against the measured device-to-device copy.

use anyhow::{Context, Result};
use clap::Args;
use cohort_gpu::knn::GpuIvf;
use cohort_knn::kmeans::KMeansConfig;
use cohort_knn::{vecfile, IvfIndex, Metric};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct GpuKernelBench {
    /// Folder with base.fvecs and query.fvecs (synthesized there if absent).
    #[arg(long)]
    pub data: PathBuf,
    #[arg(long, default_value_t = 1_000_000)]
    pub n: usize,
    #[arg(long, value_delimiter = ',', default_value = "1024,4096")]
    pub nlist: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    pub nprobe: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "1,64,1024,8192")]
    pub cohorts: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Vector precisions on the GPU to measure (f32, f16).
    #[arg(long, value_delimiter = ',', default_value = "f32,f16")]
    pub precision: Vec<cohort_gpu::knn::Precision>,
    /// Seconds to spend timing each point.
    #[arg(long, default_value_t = 0.5)]
    pub seconds: f64,
    #[arg(long, default_value = "bench/results/gpu-kernels.json")]
    pub out: PathBuf,
}

fn copy_bandwidth(g: &GpuIvf) -> Result<f64> {
    let s = g.ctx.default_stream();
    let n = 256 << 20; // 1 GiB of f32
    let src = s.alloc_zeros::<f32>(n)?;
    let mut dst = s.alloc_zeros::<f32>(n)?;
    s.memcpy_dtod(&src, &mut dst)?;
    s.synchronize()?;
    let reps = 10;
    let t = Instant::now();
    for _ in 0..reps {
        s.memcpy_dtod(&src, &mut dst)?;
    }
    s.synchronize()?;
    // Traffic: every byte is read once and written once.
    Ok(2.0 * (n * 4 * reps) as f64 / t.elapsed().as_secs_f64())
}

pub fn run(a: &GpuKernelBench) -> Result<()> {
    let devs = cohort_gpu::probe()?;
    let dev = &devs[0];
    if !a.data.join("query.fvecs").exists() {
        std::fs::create_dir_all(&a.data)?;
        crate::data_cmd::write_synth(&a.data, a.n, 128, 1000, 100, 42, 64, 16, 1.0)?;
    }
    let queries = vecfile::read_vectors(&a.data.join("query.fvecs"))?;
    let mut results = Vec::new();
    let mut copy_bw = None;
    for &nlist in &a.nlist {
        let ipath = a.data.join(format!("ivf{nlist}.index"));
        if IvfIndex::load(&ipath).is_err() {
            let base = vecfile::read_vectors(&a.data.join("base.fvecs"))?;
            let km = KMeansConfig {
                iters: 10,
                max_sample: (64 * nlist).max(262_144),
                progress: true,
                ..KMeansConfig::new(nlist)
            };
            IvfIndex::build(&base, nlist, Metric::L2, &km).save(&ipath)?;
        }
        let ix = IvfIndex::load(&ipath).context("index")?;
        let sizes = ix.cell_sizes();
        for &precision in &a.precision {
            let g = GpuIvf::upload(dev, &ix, precision)?;
            let bw = match copy_bw {
                Some(b) => b,
                None => {
                    let b = copy_bandwidth(&g)?;
                    copy_bw = Some(b);
                    eprintln!(
                        "device-to-device copy: {:.0} GB/s (read + write traffic)",
                        b / 1e9
                    );
                    b
                }
            };
            let s = g.ctx.default_stream();
            for &nprobe in &a.nprobe {
                for &c in &a.cohorts {
                    let mut qh = Vec::with_capacity(c * ix.dim);
                    for i in 0..c {
                        qh.extend_from_slice(queries.row(i % queries.n));
                    }
                    let mut bufs = g.buffers(&s, c)?;
                    s.memcpy_htod(&qh, &mut bufs.q)?;
                    let qd = s.clone_htod(&qh)?;
                    // Warm-up, then the chained stages as many times as fit in the time budget.
                    g.launch_into(&s, &mut bufs, c, a.k, nprobe)?;
                    s.synchronize()?;
                    let (t, mut reps) = (Instant::now(), 0usize);
                    while t.elapsed().as_secs_f64() < a.seconds || reps == 0 {
                        g.launch_into(&s, &mut bufs, c, a.k, nprobe)?;
                        s.synchronize()?;
                        reps += 1;
                    }
                    drop(bufs);
                    let chained = t.elapsed().as_secs_f64() / reps as f64;
                    // The search kernel alone, on fixed probes.
                    let probes = g.launch_filter(&s, &qd, c, nprobe)?;
                    let ph = s.clone_dtoh(&probes)?;
                    s.synchronize()?;
                    let rows: usize = ph.iter().map(|&p| sizes[p as usize]).sum();
                    let elem = if precision == cohort_gpu::knn::Precision::F16 {
                        2
                    } else {
                        4
                    };
                    let bytes = rows * (ix.dim * elem + 4);
                    let (t, mut sreps) = (Instant::now(), 0usize);
                    while t.elapsed().as_secs_f64() < a.seconds || sreps == 0 {
                        drop(g.launch_search(&s, &qd, &probes, c, nprobe, a.k)?);
                        s.synchronize()?;
                        sreps += 1;
                    }
                    let search = t.elapsed().as_secs_f64() / sreps as f64;
                    let search_bw = bytes as f64 / search;
                    let r = json!({
                        "nlist": nlist, "nprobe": nprobe, "k": a.k, "cohort": c, "precision": format!("{precision:?}"),
                        "grouped_search": c * nprobe >= 2 * nlist,
                        "queries_per_s": c as f64 / chained, "chained_ms": chained * 1e3,
                        "search_ms": search * 1e3, "search_bytes": bytes, "search_gb_s": search_bw / 1e9,
                        "search_fraction_of_copy_bw": search_bw / bw,
                    });
                    eprintln!("{r}");
                    results.push(r);
                }
            }
        }
    }
    super::write_result(
        &a.out,
        json!({ "device": dev.name, "copy_bandwidth_gb_s": copy_bw.map(|b| b / 1e9), "points": results }),
    )
}
