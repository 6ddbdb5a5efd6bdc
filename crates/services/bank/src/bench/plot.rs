//! The bank's figures from recorded results (`cohort-lab bench bank-gpu` and `bank-cpu` JSON):
//! the cohort-size sweep, per-type throughput (Rhythm's Fig. 10), the streams sweep, and
//! Table 3 (requests/s and requests per joule, cpu engine beside the GPU path), as PNGs
//! beside the GPU JSON and Table 3 as markdown on stdout.

use crate::kinds::KINDS;
use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct BankPlotArgs {
    /// `cohort-lab bench bank-gpu` results.
    #[arg(long)]
    pub gpu: PathBuf,
    /// `cohort-lab bench bank-cpu` results (in-process rows) for Table 3.
    #[arg(long)]
    pub cpu: Option<PathBuf>,
}

fn load(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    v.get("results")
        .cloned()
        .with_context(|| format!("{}: no \"results\"", path.display()))
}

fn f(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// `base` with `-what.png` in place of `.json`.
fn beside(base: &Path, what: &str) -> PathBuf {
    let stem = base.file_stem().and_then(|s| s.to_str()).unwrap_or("bank");
    base.with_file_name(format!("{stem}-{what}.png"))
}

pub fn run(a: &BankPlotArgs) -> Result<()> {
    let g = load(&a.gpu)?;
    let points = g["points"]
        .as_array()
        .context("no \"points\" (not bank-gpu results)")?;
    // Cohort sweep: mix requests/s per cohort size, both layouts, in GPU memory and to host.
    let mut series = Vec::new();
    for (tr, name) in [(true, "transposed"), (false, "row-major")] {
        let of = |key: &str| -> Vec<(f64, f64)> {
            points
                .iter()
                .filter(|p| p["transposed"] == tr)
                .map(|p| (f(p, "cohort"), f(p, key) / 1e6))
                .collect()
        };
        series.push((
            format!("{name}, pages in GPU memory"),
            of("mix_requests_per_s_in_gpu"),
        ));
        series.push((
            format!("{name}, copied to host"),
            of("mix_requests_per_s_to_host"),
        ));
        series.push((
            format!("{name}, PCIe bound"),
            of("pcie_bound_requests_per_s"),
        ));
    }
    let out = beside(&a.gpu, "cohorts");
    cohort_plot::plot_lines(
        &series,
        "bank on one GPU: cohort size (one stream)",
        ("requests per cohort", "M requests/s (Table 2 mix)"),
        true,
        &out,
    )?;
    eprintln!("wrote {}", out.display());
    // Per type at the largest cohort (Fig. 10).
    let largest = points.iter().map(|p| f(p, "cohort")).fold(0.0, f64::max);
    let names: Vec<String> = KINDS.iter().map(|k| k.name.to_string()).collect();
    let mut bars = Vec::new();
    for (tr, name) in [(true, "transposed"), (false, "row-major")] {
        let p = points
            .iter()
            .find(|p| p["transposed"] == tr && f(p, "cohort") == largest)
            .context("no point at the largest cohort")?;
        let rates = names
            .iter()
            .map(|n| f(&p["per_type"][n], "requests_per_s_in_gpu") / 1e6)
            .collect();
        bars.push((format!("{name}, pages in GPU memory"), rates));
    }
    let out = beside(&a.gpu, "per-type");
    cohort_plot::plot_bars(
        &names,
        &bars,
        &format!("bank per type, cohort {largest}"),
        "M requests/s",
        None,
        &out,
    )?;
    eprintln!("wrote {}", out.display());
    // Streams: the sustained mix with several cohorts in flight.
    let runs = g["sustained"]["runs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !runs.is_empty() {
        let of = |copy: bool| -> Vec<(f64, f64)> {
            runs.iter()
                .filter(|r| r["copied_to_host"] == copy)
                .map(|r| (f(r, "streams"), f(r, "requests_per_s") / 1e6))
                .collect()
        };
        let out = beside(&a.gpu, "streams");
        cohort_plot::plot_lines(
            &[
                ("pages in GPU memory".into(), of(false)),
                ("copied to host".into(), of(true)),
            ],
            "bank sustained mix, cohorts of 4096 on several streams",
            ("streams", "M requests/s"),
            true,
            &out,
        )?;
        eprintln!("wrote {}", out.display());
    }
    if let Some(cpu) = &a.cpu {
        table3(&load(cpu)?, &g, &a.gpu)?;
    }
    Ok(())
}

/// Table 3: the cpu engine per worker count beside the GPU path's best sustained runs.
fn table3(cpu: &Value, g: &Value, gpu_path: &Path) -> Result<()> {
    let mut rows: Vec<(String, f64, f64)> = Vec::new();
    for r in cpu["in_process"]
        .as_array()
        .context("no cpu \"in_process\" rows")?
    {
        rows.push((
            format!("cpu engine, {} workers", f(r, "workers")),
            f(r, "requests_per_s"),
            f(r, "requests_per_joule"),
        ));
    }
    for (key, name) in [
        ("best_pages_in_gpu", "GPU, pages in GPU memory"),
        ("best_pages_to_host", "GPU, pages copied to host"),
    ] {
        let r = &g["sustained"][key];
        if r.is_object() {
            rows.push((
                format!("{name} ({} streams)", f(r, "streams")),
                f(r, "requests_per_s"),
                f(r, "requests_per_joule_gpu_and_core"),
            ));
        }
    }
    println!("| configuration | M requests/s | requests/J |");
    println!("|---|---:|---:|");
    for (name, rate, per_j) in &rows {
        println!("| {name} | {:.2} | {:.0} |", rate / 1e6, per_j);
    }
    // Short names under the bars (the long ones are in the table).
    let names: Vec<String> = rows
        .iter()
        .map(|r| {
            let n = &r.0;
            n.replace("cpu engine, ", "cpu ")
                .replace("GPU, pages in GPU memory", "gpu mem")
                .replace("GPU, pages copied to host", "gpu host")
                .replace(" workers", "w")
                .replace(" streams", "s")
        })
        .collect();
    for (what, y, pick) in [
        ("table3-rate", "M requests/s", 1usize),
        ("table3-energy", "K requests per joule", 2),
    ] {
        let values = rows
            .iter()
            .map(|r| if pick == 1 { r.1 / 1e6 } else { r.2 / 1e3 })
            .collect();
        let out = beside(gpu_path, what);
        cohort_plot::plot_bars(
            &names,
            &[(y.to_string(), values)],
            "bank: Table 3",
            y,
            None,
            &out,
        )?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}
