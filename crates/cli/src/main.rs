//! `cohort`: one binary for the server, the load generator, the demo and the tools.

mod bench;
mod config;
mod data_cmd;
mod demo;
mod fetch;
mod index_cmd;
mod load_cmd;
mod serve;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cohort",
    version,
    about = "Accelerator-centric network server runtime"
)]
struct Cli {
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, global = true, default_value = "info")]
    log_level: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a server until SIGINT/SIGTERM.
    Serve(serve::ServeArgs),
    /// Drive load at a server and report throughput, latency and errors.
    Load(load_cmd::LoadArgs),
    /// Start a server on loopback, sweep load at it, print a table.
    Demo(demo::DemoArgs),
    /// Vector data sets: synthesize or fetch.
    #[command(subcommand)]
    Data(data_cmd::DataCmd),
    /// IVF-Flat indexes: build, inspect, evaluate.
    #[command(subcommand)]
    Index(index_cmd::IndexCmd),
    /// Benchmarks; results go to bench/results/ with machine, commit and command.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
}

fn main() {
    let args = match config::expand(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    };
    let cli = Cli::parse_from(args);
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.cmd {
        Cmd::Serve(a) => serve::run(a),
        Cmd::Load(a) => load_cmd::run(a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Data(c) => data_cmd::run(c),
        Cmd::Index(c) => index_cmd::run(c),
        Cmd::Bench(c) => bench::run(c),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
