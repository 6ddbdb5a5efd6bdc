//! Several sweeps (`cohort load --sweep ... --json`) on one throughput-latency plot, e.g.
//! Centaur's Fig. 11: one curve per engine.

use anyhow::{Context as _, Result};
use clap::Args;
use cohort_load::Report;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// The plot's title.
    #[arg(long)]
    pub title: String,
    /// The PNG to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Curves as NAME=SWEEP.json.
    #[arg(required = true)]
    pub series: Vec<String>,
}

pub fn run(a: &PlotArgs) -> Result<()> {
    let mut series = Vec::new();
    for s in &a.series {
        let (name, path) = s.split_once('=').context("a curve is NAME=SWEEP.json")?;
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {path}"))?;
        let runs: Vec<Report> = serde_json::from_value(
            v.get("runs")
                .cloned()
                .context("no \"runs\" (not a sweep)")?,
        )
        .with_context(|| format!("{path}: sweep runs"))?;
        series.push((name.to_string(), runs));
    }
    cohort_load::plot_sweep(&series, &a.title, &a.out)
}
