//! `cohort-lab bench streams`: Czarnul's multi-stream CPU+GPU benchmark (crate::streams)
//! as the paper's experiments: streams x compute/communication ratio for versions A and B
//! (Fig. 2), memory modes (Fig. 6/14), CPU threads added to the GPUs (Fig. 8/9), and packets
//! per joule of every run (Fig. 10-12). MPS is a GPU setting and is never started here: the
//! paper's MPS runs have no counterpart.

use crate::streams::{
    run as run_packets, Inputs, MemoryMode, RunConfig, StreamGpu, Version, CHECK_EVERY, OUT_FLOATS,
};
use anyhow::Result;
use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct StreamsBench {
    /// GPUs taking packets (CUDA ordinals).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub gpus: Vec<usize>,
    /// Input data in total, MB (two input chunks per packet).
    #[arg(long, default_value_t = 1600)]
    pub total_mb: usize,
    /// Size of one input chunk, KB.
    #[arg(long, default_value_t = 256)]
    pub chunk_kb: usize,
    /// Inner loop counts (compute per byte; the measured ratio is reported).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    pub inner: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    pub streams: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "A,B")]
    pub versions: Vec<Version>,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pinned,managed,managed-prefetch"
    )]
    pub modes: Vec<MemoryMode>,
    /// CPU threads added to the GPUs (Fig. 8/9), at --cpu-streams streams, version A, pinned.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8")]
    pub cpu_threads: Vec<usize>,
    #[arg(long, default_value_t = 4)]
    pub cpu_streams: usize,
    /// Which experiments: fig2, memory, cpu (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "fig2,memory,cpu")]
    pub parts: Vec<String>,
    #[arg(long, default_value = "lab/results/streams.json")]
    pub out: PathBuf,
    /// Folder for the PNG plots (beside the JSON when absent).
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,
}

/// One run over `gpus`, measured and logged.
fn one(gpus: &[StreamGpu], inputs: &Inputs, cfg: RunConfig) -> Result<Value> {
    inputs.to_host(&gpus[0].context().default_stream())?;
    let meter = cohort_power::Meter::start();
    let r = run_packets(gpus, inputs, &cfg)?;
    let energy = meter.finish();
    let v = json!({"mode": cfg.mode.name(), "version": format!("{:?}", cfg.version),
        "streams": cfg.streams, "inner": cfg.inner, "cpu_threads": cfg.cpu_threads,
        "gpus": gpus.len(), "result": r, "energy": energy.to_json(cfg.packets as f64)});
    eprintln!(
        "{:>16} {:?} S {:>2} inner {:>4} cpu {:>2}: {:>9.0} packets/s ({:.2} GB/s in), gpu {:?} cpu {}",
        cfg.mode.name(),
        cfg.version,
        cfg.streams,
        cfg.inner,
        cfg.cpu_threads,
        r.packets_per_s,
        r.input_gb_per_s,
        r.gpu_packets,
        r.cpu_packets
    );
    Ok(v)
}

pub fn run(a: &StreamsBench) -> Result<()> {
    let devs = cohort_gpu::probe()?;
    let gpus: Vec<StreamGpu> = a
        .gpus
        .iter()
        .map(|&o| {
            let d = cohort_gpu::find_device(&devs, o)?;
            Ok(StreamGpu::open(d)?)
        })
        .collect::<Result<_>>()?;
    anyhow::ensure!(!gpus.is_empty(), "--gpus names no GPU");
    let chunk_floats = a.chunk_kb * 1024 / 4;
    anyhow::ensure!(chunk_floats >= 128, "--chunk-kb must be at least 1");
    let packets = (a.total_mb << 20) / (2 * chunk_floats * 4);
    anyhow::ensure!(packets >= 1, "--total-mb below one packet");
    let base = |inner, streams, version, mode, cpu_threads| RunConfig {
        packets,
        chunk_floats,
        inner,
        streams,
        version,
        mode,
        cpu_threads,
        check_every: CHECK_EVERY,
    };
    let max_streams = a
        .streams
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(a.cpu_streams);
    let managed_extra = gpus.len() * max_streams * OUT_FLOATS * 4;
    let mut out = serde_json::Map::new();
    out.insert(
        "setup".into(),
        json!({"packets": packets, "chunk_bytes": chunk_floats * 4, "output_bytes": OUT_FLOATS * 4,
            "blocks": crate::streams::BLOCKS, "threads_per_block": crate::streams::THREADS_PER_BLOCK,
            "gpus": gpus.iter().map(|g| g.dev.name.clone()).collect::<Vec<_>>(),
            "check_every": CHECK_EVERY, "mps": "not used: MPS daemons are GPU settings, never started"}),
    );
    let pinned = Inputs::new(
        gpus[0].context(),
        MemoryMode::Pinned,
        packets,
        chunk_floats,
        0,
    )?;
    // The measured compute/communication ratio per inner loop count, and the CPU's speed.
    let mut ratios = Vec::new();
    for &inner in &a.inner {
        let cfg = base(inner, 1, Version::A, MemoryMode::Pinned, 0);
        let (kernel, copy) = gpus[0].kernel_and_copy_time(&pinned, &cfg, 50)?;
        let t = std::time::Instant::now();
        let mut o = vec![0f32; OUT_FLOATS];
        let reps = 3;
        for p in 0..reps {
            crate::streams::packet_cpu(
                pinned.chunk(p, 0, chunk_floats),
                pinned.chunk(p, 1, chunk_floats),
                &mut o,
                inner,
            );
        }
        let cpu_s = t.elapsed().as_secs_f64() / reps as f64;
        ratios.push(json!({"inner": inner, "kernel_s": kernel, "copy_s": copy,
            "compute_to_communication": kernel / copy, "cpu_thread_packet_s": cpu_s}));
        eprintln!("inner {inner}: kernel {:.1} us, copies {:.1} us, ratio {:.2}, one CPU thread {:.0} us a packet",
            kernel * 1e6, copy * 1e6, kernel / copy, cpu_s * 1e6);
    }
    out.insert("ratios".into(), Value::Array(ratios.clone()));
    let plot_dir = a
        .plot_dir
        .clone()
        .unwrap_or_else(|| a.out.parent().map(PathBuf::from).unwrap_or_default());
    let stem = a
        .out
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("streams")
        .to_string();
    let ratio_of = |inner: usize| {
        ratios
            .iter()
            .find(|r| r["inner"] == inner)
            .and_then(|r| r["compute_to_communication"].as_f64())
            .unwrap_or(0.0)
    };
    if a.parts.iter().any(|p| p == "fig2") {
        let mut runs = Vec::new();
        let mut series = Vec::new();
        for &version in &a.versions {
            for &inner in &a.inner {
                let mut line = Vec::new();
                for &s in &a.streams {
                    let v = one(
                        &gpus,
                        &pinned,
                        base(inner, s, version, MemoryMode::Pinned, 0),
                    )?;
                    line.push((
                        s as f64,
                        v["result"]["packets_per_s"].as_f64().unwrap_or(0.0),
                    ));
                    runs.push(v);
                }
                series.push((
                    format!("{version:?} ratio {:.2} (inner {inner})", ratio_of(inner)),
                    line,
                ));
            }
        }
        plot(
            &series,
            "packets/s by streams (pinned)",
            "CUDA streams per GPU",
            &plot_dir.join(format!("{stem}-fig2.png")),
        )?;
        out.insert("fig2".into(), Value::Array(runs));
        super::write_result(&a.out, Value::Object(out.clone()))?;
    }
    if a.parts.iter().any(|p| p == "memory") {
        let mut runs = Vec::new();
        let mut series = Vec::new();
        let mid = a.inner[a.inner.len() / 2];
        for &mode in &a.modes {
            let managed;
            let inputs = if mode == MemoryMode::Pinned {
                &pinned
            } else {
                managed = Inputs::new(
                    gpus[0].context(),
                    mode,
                    packets,
                    chunk_floats,
                    managed_extra,
                )?;
                &managed
            };
            let mut line = Vec::new();
            for &s in &a.streams {
                let v = one(&gpus, inputs, base(mid, s, Version::A, mode, 0))?;
                line.push((
                    s as f64,
                    v["result"]["packets_per_s"].as_f64().unwrap_or(0.0),
                ));
                runs.push(v);
            }
            series.push((mode.name().to_string(), line));
        }
        plot(
            &series,
            &format!("memory modes, version A, ratio {:.2}", ratio_of(mid)),
            "CUDA streams per GPU",
            &plot_dir.join(format!("{stem}-memory.png")),
        )?;
        out.insert("memory".into(), Value::Array(runs));
        super::write_result(&a.out, Value::Object(out.clone()))?;
    }
    if a.parts.iter().any(|p| p == "cpu") {
        let mut runs = Vec::new();
        let mut series = Vec::new();
        let mut energy_series = Vec::new();
        for &inner in &a.inner {
            let mut line = Vec::new();
            let mut eline = Vec::new();
            for &t in &a.cpu_threads {
                let v = one(
                    &gpus,
                    &pinned,
                    base(inner, a.cpu_streams, Version::A, MemoryMode::Pinned, t),
                )?;
                line.push((
                    t as f64,
                    v["result"]["packets_per_s"].as_f64().unwrap_or(0.0),
                ));
                if let Some(ppj) = v["energy"]["units_per_gpu_joule"].as_f64() {
                    eline.push((t as f64, ppj));
                }
                runs.push(v);
            }
            series.push((
                format!("ratio {:.2} (inner {inner})", ratio_of(inner)),
                line,
            ));
            energy_series.push((
                format!("ratio {:.2} (inner {inner})", ratio_of(inner)),
                eline,
            ));
        }
        plot(
            &series,
            "GPU + CPU threads, version A, pinned",
            "CPU threads taking packets",
            &plot_dir.join(format!("{stem}-cpu.png")),
        )?;
        if energy_series.iter().any(|s| !s.1.is_empty()) {
            cohort_load::plot_lines(
                &energy_series,
                "packets per joule of GPU board energy",
                ("CPU threads taking packets", "packets / J"),
                false,
                &plot_dir.join(format!("{stem}-energy.png")),
            )?;
        }
        out.insert("cpu".into(), Value::Array(runs));
    }
    super::write_result(&a.out, Value::Object(out))
}

fn plot(
    series: &[(String, Vec<(f64, f64)>)],
    title: &str,
    x: &str,
    path: &std::path::Path,
) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    cohort_load::plot_lines(series, title, (x, "packets/s"), x.contains("streams"), path)
}
