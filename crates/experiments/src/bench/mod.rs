//! `cohort bench ...`: benchmarks that write JSON results naming the machine, the commit and
//! the command, under lab/results/ by default. A service's own benchmarks live
//! in its folder and join these through the catalog (`main.rs`).

mod batcher;
mod echo;
mod engine;
mod hog;
mod http_plot;
mod knn;
mod plot;
mod regress;
mod scaling_plot;
mod served;
mod served_limit;
mod streams;

use anyhow::Result;
use clap::Subcommand;
use serde_json::{json, Value};
use std::path::Path;

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Echo over loopback: highest rate with p99 under a limit, per transport and io threads.
    Echo(echo::EchoBench),
    /// k-NN on the cpu engine: recall and latency per nprobe, then a served UDP sweep.
    KnnCpu(knn::KnnBench),
    /// The served matrix: services x engines x server cores, server and generator pinned to
    /// disjoint cores, each point's limit named from measured counters.
    Served(served::ServedBench),
    /// Engines fed directly (no sockets): throughput and latency per outstanding window.
    Engine(engine::EngineBench),
    /// gpu-cohort's batching loop alone on CPU twin slots (no GPU): what each request costs
    /// the control thread and the drivers.
    Batcher(batcher::BatcherBench),
    /// A CPU-hungry neighbour that measures its own rate (noisy-neighbour experiments).
    Hog(hog::HogBench),
    /// Czarnul's multi-stream CPU+GPU packet processing: streams, memory modes, CPU threads.
    Streams(streams::StreamsBench),
    /// Several sweeps on one throughput-latency plot.
    Plot(plot::PlotArgs),
    /// The HTTP path beside nginx as bars (`scripts/http-served.sh`'s JSON).
    HttpPlot(http_plot::HttpPlotArgs),
    /// Throughput against the number of (virtual) GPUs from `bench engine` results.
    ScalingPlot(scaling_plot::ScalingPlotArgs),
    /// A suite's results against the figures last recorded on the same kind of machine:
    /// regressions past a tolerance and stalled sweep points, exit non-zero on any.
    Regress(regress::RegressArgs),
}

pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Echo(a) => echo::run(&a),
        BenchCmd::KnnCpu(a) => knn::run(&a),
        BenchCmd::Served(a) => served::run(&a),
        BenchCmd::Engine(a) => engine::run(&a),
        BenchCmd::Batcher(a) => batcher::run(&a),
        BenchCmd::Hog(a) => hog::run(&a),
        BenchCmd::Streams(a) => streams::run(&a),
        BenchCmd::Plot(a) => plot::run(&a),
        BenchCmd::HttpPlot(a) => http_plot::run(&a),
        BenchCmd::ScalingPlot(a) => scaling_plot::run(&a),
        BenchCmd::Regress(a) => regress::run(&a),
    }
}

/// The machine a result was measured on.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string());
    let gpus = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    json!({
        "hostname": std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "gpus": gpus,
        // Virtual GPUs (green contexts) the run served on, if any: DEV:NxS.
        "virtual_gpus": std::env::var("COHORT_VIRTUAL_GPUS").ok(),
    })
}

/// Machine, commit, command and date of a result.
pub fn provenance() -> serde_json::Map<String, Value> {
    let v = json!({
        "machine": machine(),
        "commit": env!("COHORT_COMMIT"),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("an object literal"),
    }
}

/// Wraps results with machine, commit, command and date, and writes them atomically.
pub fn write_result(path: &Path, results: Value) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut doc = provenance();
    doc.insert("results".into(), results);
    let doc = Value::Object(doc);
    cohort_server::util::write_atomic(path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
