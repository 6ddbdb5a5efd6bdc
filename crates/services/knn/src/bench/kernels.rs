//! Kernel-level k-NN on one GPU: queries/s per cohort size for both plans (tiled, per-pair),
//! and the per-pair search kernel's achieved memory bandwidth against the measured
//! device-to-device copy (the tiled plan reads a cell once for many queries, so its
//! "effective" scan bandwidth, logical bytes over time, may exceed the copy's).

use crate::gpu_ivf::{Buffers, GpuIvf, Plan, NO_ID};
use anyhow::{Context, Result};
use clap::Args;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::{vecfile, IvfIndex, Metric};
use cohort_service_api::tools::Record;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
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
    /// Vector precisions on the GPU to measure (f32, f16, u8).
    #[arg(long, value_delimiter = ',', default_value = "f32,f16,u8")]
    pub precision: Vec<crate::gpu_ivf::Precision>,
    /// Seconds to spend timing each point.
    #[arg(long, default_value_t = 0.5)]
    pub seconds: f64,
    /// Index placements to time: 1 is the whole index; N > 1 times the first device's shard
    /// of the index placed over N devices (its own lists beside every centroid), as a
    /// sharded server's device searches it: where a shard's time does not fall as 1/N.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub shards: Vec<usize>,
    #[arg(long, default_value = "lab/results/gpu-kernels.json")]
    pub out: PathBuf,
}

/// Seconds per call of `f`: one warm-up call, then as many as fit in `budget` seconds.
fn time(budget: f64, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let (t, mut reps) = (Instant::now(), 0usize);
    while t.elapsed().as_secs_f64() < budget || reps == 0 {
        f()?;
        reps += 1;
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

/// Seconds per cohort of the tiled plan captured once as a CUDA graph (on a stream of its
/// own: the legacy default stream cannot be captured) and replayed, each replay waited for.
fn tiled_graph_secs(
    g: &GpuIvf,
    bufs: &mut Buffers,
    cohort: usize,
    k: usize,
    nprobe: usize,
    budget: f64,
) -> Result<f64> {
    g.ctx.default_stream().synchronize()?;
    let s = g.ctx.new_stream()?;
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let queued = g.launch_into_with(&s, bufs, cohort, k, nprobe, Plan::Tiled);
    // End the capture whatever happened, so the stream is usable again.
    let graph = s.end_capture(CUgraphInstantiate_flags(0))?;
    queued?;
    let graph = graph.context("graph capture produced no graph")?;
    time(budget, || {
        graph.launch()?;
        Ok(s.synchronize()?)
    })
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

pub fn run(a: &GpuKernelBench, record: Record) -> Result<()> {
    let devs = cohort_gpu::probe()?;
    let dev = &devs[0];
    if !a.data.join("query.fvecs").exists() {
        std::fs::create_dir_all(&a.data)?;
        cohort_ivf::synth::write_synth(&a.data, a.n, 128, 1000, 100, 42, 64, 16, 1.0)?;
    }
    let queries = vecfile::read_vectors(&a.data.join("query.fvecs"))?;
    // Each plan's recall@k on the cohort's first queries, where the folder has their truth.
    let nqueries = queries.n;
    let truth = vecfile::read_ivecs(&a.data.join("groundtruth.ivecs"))
        .ok()
        .filter(|&(n, gdim, _)| n >= nqueries && gdim >= a.k);
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
        let mut sorted = sizes.clone();
        sorted.sort_unstable();
        eprintln!(
            "nlist {nlist}: cell rows min {} median {} p99 {} max {}",
            sorted[0],
            sorted[sorted.len() / 2],
            sorted[sorted.len() * 99 / 100],
            sorted[sorted.len() - 1]
        );
        for (&precision, &shards) in a
            .precision
            .iter()
            .flat_map(|p| a.shards.iter().map(move |n| (p, n)))
        {
            anyhow::ensure!(shards >= 1, "--shards takes device counts of at least 1");
            // The rows of each cell this device holds (none of another shard's).
            let mut sizes = sizes.clone();
            let g = if shards == 1 {
                GpuIvf::upload(dev, &ix, precision)?
            } else {
                let placement = ix.placement_for(shards);
                for (rows, &owner) in sizes.iter_mut().zip(&placement.owner) {
                    if owner != 0 {
                        *rows = 0;
                    }
                }
                let cut = cohort_ivf::ivf::shard::IvfShard::cut(&ix, &placement, 0);
                GpuIvf::upload_shard(dev, &ix, &cut, precision)?
            };
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
                    let qd = s.clone_htod(&qh)?;
                    // Rows the cohort's probes cover (the per-pair search reads each once per
                    // probing query; the tiled plan once per 32 queries probing a cell).
                    let probes = g.launch_filter(&s, &qd, c, nprobe)?;
                    let ph = s.clone_dtoh(&probes)?;
                    s.synchronize()?;
                    let rows: usize = ph.iter().map(|&p| sizes[p as usize]).sum();
                    let bytes = g.scan_bytes(rows);
                    let mut bufs = g.buffers(&s, c)?;
                    s.memcpy_htod(&qh, &mut bufs.q)?;
                    let mut point = json!({
                        "nlist": nlist, "nprobe": nprobe, "k": a.k, "cohort": c, "shards": shards,
                        "precision": format!("{precision:?}"), "scan_bytes": bytes,
                        "default_plan": format!("{:?}", g.plan_for(c, nprobe)),
                    });
                    for plan in [Plan::Tiled, Plan::PerPair] {
                        let meter = cohort_power::Meter::start();
                        let secs = time(a.seconds, || {
                            g.launch_into_with(&s, &mut bufs, c, a.k, nprobe, plan)?;
                            Ok(s.synchronize()?)
                        })?;
                        let name = format!("{plan:?}").to_lowercase();
                        let energy = meter.finish();
                        // Queries in the window = its length x the measured rate.
                        let queries = energy.window_s * c as f64 / secs;
                        point[format!("{name}_energy")] = energy.to_json(queries);
                        point[format!("{name}_queries_per_s")] = json!(c as f64 / secs);
                        point[format!("{name}_ms")] = json!(secs * 1e3);
                        // Logical scan bytes over the whole plan's time: above the copy
                        // bandwidth means cells were read once for several queries.
                        point[format!("{name}_effective_scan_gb_s")] =
                            json!(bytes as f64 / secs / 1e9);
                        // The last timed call's answers: query i of the cohort is query
                        // i % nqueries of the file.
                        if let Some((_, gdim, gt)) = &truth {
                            let checked = c.min(nqueries);
                            let ids = s.clone_dtoh(&bufs.out_ids.slice(..checked * a.k))?;
                            s.synchronize()?;
                            let found: Vec<Vec<u32>> = ids
                                .chunks_exact(a.k)
                                .map(|row| row.iter().copied().filter(|&id| id != NO_ID).collect())
                                .collect();
                            let r = cohort_ivf::exact::recall_at_k(&found, gt, *gdim, a.k);
                            point[format!("{name}_recall_at_k")] = json!(r);
                            point[format!("{name}_recall_queries")] = json!(checked);
                        }
                    }
                    // The tiled plan replayed as one captured CUDA graph (what `--cohort-graphs`
                    // serves): one driver call a cohort instead of one a kernel, so at small
                    // cohorts the figure is the kernels' time more than their launches'.
                    let secs = tiled_graph_secs(&g, &mut bufs, c, a.k, nprobe, a.seconds)?;
                    point["tiled_graph_queries_per_s"] = json!(c as f64 / secs);
                    point["tiled_graph_ms"] = json!(secs * 1e3);
                    // Where the tiled plan's time goes, kernel by kernel (one pass if it fits).
                    if let Ok(stages) = g.profile_tiled(&s, &mut bufs, c, a.k, nprobe) {
                        point["tiled_stage_ms"] = stages
                            .iter()
                            .map(|(n, ms)| (n.to_string(), json!(ms)))
                            .collect();
                    }
                    point["max_candidate_row"] = json!(g.max_candidate_row(nprobe));
                    point["mean_candidate_row"] = json!(rows as f64 / c as f64);
                    drop(bufs);
                    // The per-pair search kernel alone, on fixed probes: its real traffic.
                    let search = time(a.seconds, || {
                        drop(g.launch_search(&s, &qd, &probes, c, nprobe, a.k)?);
                        Ok(s.synchronize()?)
                    })?;
                    let search_bw = bytes as f64 / search;
                    point["per_pair_search_ms"] = json!(search * 1e3);
                    point["per_pair_search_gb_s"] = json!(search_bw / 1e9);
                    point["per_pair_search_fraction_of_copy_bw"] = json!(search_bw / bw);
                    eprintln!("{point}");
                    results.push(point);
                }
            }
        }
    }
    record(
        &a.out,
        json!({ "device": dev.name, "copy_bandwidth_gb_s": copy_bw.map(|b| b / 1e9), "points": results }),
    )
    .map_err(anyhow::Error::msg)
}
