//! `cohort-lab bench ...`: benchmarks that write JSON results naming the machine, the commit and
//! the command, under lab/results/ by default. A service's own benchmarks live
//! in its folder and join these through the catalog (`main.rs`).

mod batcher;
mod echo;
mod engine;
mod hog;
mod http_plot;
mod knn;
mod overload;
mod plot;
mod regress;
mod scaling_plot;
mod served;
mod served_limit;
mod streams;

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Echo over loopback: highest rate with p99 under a limit, per transport and io threads.
    Echo(echo::EchoBench),
    /// k-NN on the cpu engine: recall and latency per nprobe, then a served UDP sweep.
    KnnCpu(knn::KnnBench),
    /// The served matrix: services x engines x server cores, server and generator pinned to
    /// disjoint cores, each point's limit named from measured counters.
    Served(served::ServedBench),
    /// Overload, not queueing: a transport's capacity, then open loop at multiples of it
    /// (goodput, refusals and how fast, answered p99, peak RSS; issue 84's goals judged).
    Overload(overload::OverloadBench),
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
        BenchCmd::Overload(a) => overload::run(&a),
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

// Machine, commit, command and date beside each result: the product's crate, which the
// product's own recording commands (`cohort load --out`, `cohort index`) write through too.
pub use cohort_provenance::{machine, provenance, write_result};
