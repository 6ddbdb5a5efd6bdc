//! Throughput against the number of serving devices (Lynx Fig. 8b, Centaur Fig. 6 shape): the
//! results of `cohort bench engine` runs on 1, 2, ... (virtual) GPUs, one curve per engine
//! (its best window at each count) beside the linear ideal from its one-device point, with a
//! table of the scaling efficiency (rate / (N x one device's)).

use anyhow::{Context as _, Result};
use clap::Args;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ScalingPlotArgs {
    #[arg(long)]
    pub title: String,
    /// The PNG to write (the table goes to stdout).
    #[arg(long)]
    pub out: PathBuf,
    /// `cohort bench engine` result files (any number of devices each).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// engine -> devices -> best rate (requests/s).
type Points = BTreeMap<String, BTreeMap<usize, f64>>;

fn points(files: &[PathBuf]) -> Result<Points> {
    let mut out = Points::new();
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", f.display()))?;
        let results = v["results"].as_array().with_context(|| {
            format!(
                "{}: no \"results\" (not a bench engine result)",
                f.display()
            )
        })?;
        for r in results {
            let (Some(engine), Some(gpus), Some(rate)) = (
                r["engine"].as_str(),
                r["gpus"].as_array(),
                r["queries_per_s"].as_f64(),
            ) else {
                continue;
            };
            let best = out
                .entry(engine.to_string())
                .or_default()
                .entry(gpus.len().max(1))
                .or_insert(0.0);
            *best = best.max(rate);
        }
    }
    anyhow::ensure!(!out.is_empty(), "no engine results in the files");
    Ok(out)
}

pub fn run(a: &ScalingPlotArgs) -> Result<()> {
    let pts = points(&a.files)?;
    let mut series = Vec::new();
    println!("engine          devices   rate/s       vs N x one device");
    for (engine, by_n) in &pts {
        let one = by_n.get(&1).copied();
        for (&n, &rate) in by_n {
            let eff = one.map_or(String::from("-"), |o| {
                format!("{:.0}%", 100.0 * rate / (n as f64 * o))
            });
            println!("{engine:<15} {n:>7} {rate:>10.0}   {eff}");
        }
        series.push((
            engine.clone(),
            by_n.iter().map(|(&n, &r)| (n as f64, r / 1e3)).collect(),
        ));
        if let Some(o) = one {
            series.push((
                format!("{engine} ideal (N x one)"),
                by_n.keys()
                    .map(|&n| (n as f64, n as f64 * o / 1e3))
                    .collect(),
            ));
        }
    }
    cohort_load::plot_lines(
        &series,
        &a.title,
        (
            "serving devices (GPUs, or virtual GPUs of one)",
            "K requests/s",
        ),
        false,
        &a.out,
    )?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}
