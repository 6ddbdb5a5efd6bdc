//! `cohort-lab sim numa ...`: the NUMA multi-socket GPU simulator's experiments (cohort-sim) as
//! commands: each figure writes JSON (machine, commit, command) and a PNG under --out, and
//! prints the paper's numbers beside Cohort's.

mod calibrate;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};
use cohort_sim::experiments::{run_figure, Figure, FIGURES};
use cohort_sim::workloads::{names, suite, Workload};
use cohort_sim::{simulate, SimConfig};
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum SimCmd {
    /// NUMA multi-socket GPU simulator: the paper's figures, single runs, calibration.
    Numa(NumaArgs),
}

#[derive(Args, Debug)]
pub struct NumaArgs {
    /// fig3, fig6, fig8, fig10, fig11, energy, all (every figure), run (one machine, the
    /// workloads' stats), calibrate (two real GPUs against a 2-socket prediction).
    pub what: String,
    /// Machine configuration (TOML, keys of cohort-sim's SimConfig; configs/sim/ has
    /// presets); default: the paper's Table 1 (4 sockets x 64 SMs).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Footprint scale of every workload (1.0: the sizes docs/numa-sim.md lists).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Seed of the irregular workloads and the k-NN trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Only these workloads (repeatable; default all).
    #[arg(long)]
    pub workload: Vec<String>,
    /// Threads simulating runs in parallel (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Where results (JSON, PNG) go.
    #[arg(long, default_value = "lab/results")]
    pub out: PathBuf,
    /// Suffix of the result files (e.g. the machine).
    #[arg(long)]
    pub tag: Option<String>,
    /// calibrate: the GPUs' measured numbers instead of measuring (JSON of an earlier run),
    /// to redo the prediction without GPUs.
    #[arg(long)]
    pub measured: Option<PathBuf>,
}

pub fn run(cmd: SimCmd) -> Result<()> {
    let SimCmd::Numa(a) = cmd;
    if !(a.scale.is_finite() && a.scale > 0.0 && a.scale <= 64.0) {
        bail!("--scale must be in (0, 64]");
    }
    if let Some(t) = a.threads {
        if t == 0 {
            bail!("--threads must be at least 1");
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .context("starting the simulation threads")?;
    }
    let base = match &a.config {
        Some(p) => SimConfig::load(p)?,
        None => SimConfig::default(),
    };
    match a.what.as_str() {
        "calibrate" => return calibrate::run(&a),
        "run" | "all" => {}
        f if FIGURES.contains(&f) => {}
        other => bail!(
            "unknown experiment {other:?}: one of {}, all, run, calibrate",
            FIGURES.join(", ")
        ),
    }
    let workloads = workloads(&a)?;
    if a.what == "run" {
        return run_one(&base, &workloads);
    }
    let figs: Vec<&str> = if a.what == "all" {
        FIGURES.to_vec()
    } else {
        vec![a.what.as_str()]
    };
    for f in figs {
        let fig = run_figure(f, &base, &workloads, &progress(f)).expect("a known figure");
        print_figure(&fig);
        let stem = match &a.tag {
            Some(t) => format!("sim-numa-{f}-{t}"),
            None => format!("sim-numa-{f}"),
        };
        let json = serde_json::json!({
            "config": base,
            "scale": a.scale,
            "seed": a.seed,
            "figure": fig,
        });
        cohort_experiments::bench::write_result(&a.out.join(format!("{stem}.json")), json)?;
        plot_figure(&fig, &a.out.join(format!("{stem}.png")))?;
    }
    Ok(())
}

/// What a figure's run shows while it runs: a bar on a terminal; else a line at every tenth
/// of the simulations, so that a redirected run is not silent for minutes.
fn progress(figure: &str) -> impl Fn(usize, usize) + Sync {
    use std::io::IsTerminal;
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {pos}/{len} simulations, {eta} left",
            )
            .expect("a valid template"),
        );
        b.set_message(figure.to_string());
        b
    });
    let figure = figure.to_string();
    move |done, total| match &bar {
        Some(b) => {
            b.set_length(total as u64);
            b.set_position(done as u64);
            if done == total {
                b.finish_and_clear();
            }
        }
        None => {
            let tenth = |n: usize| n * 10 / total.max(1);
            if done == total || tenth(done) != tenth(done - 1) {
                eprintln!("{figure}: {done} of {total} simulations done");
            }
        }
    }
}

fn workloads(a: &NumaArgs) -> Result<Vec<Workload>> {
    let known = names(a.scale);
    for w in &a.workload {
        if !known.contains(w) {
            bail!("unknown workload {w:?}: one of {}", known.join(", "));
        }
    }
    let t = std::time::Instant::now();
    let ws: Vec<Workload> = suite(a.scale, a.seed)
        .into_iter()
        .filter(|w| a.workload.is_empty() || a.workload.contains(&w.name))
        .collect();
    eprintln!(
        "{} workloads generated in {:.1}s",
        ws.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(ws)
}

fn run_one(cfg: &SimConfig, ws: &[Workload]) -> Result<()> {
    println!(
        "{:<22} {:>12} {:>10} {:>7} {:>7} {:>7} {:>10} {:>9}",
        "workload", "cycles", "requests", "l1 hit", "l2 hit", "remote", "link MB", "M req/s"
    );
    for w in ws {
        let t = std::time::Instant::now();
        let s = simulate(cfg, w);
        let secs = t.elapsed().as_secs_f64();
        let n = s.accesses.max(1) as f64;
        println!(
            "{:<22} {:>12.0} {:>10} {:>6.1}% {:>6.1}% {:>6.1}% {:>10.1} {:>9.2}",
            w.name,
            s.cycles,
            s.accesses,
            100.0 * s.l1_hits as f64 / n,
            100.0 * s.l2_hits as f64 / n,
            100.0 * s.remote as f64 / n,
            s.link_bytes as f64 / 1e6,
            n / secs / 1e6
        );
    }
    Ok(())
}

fn print_figure(f: &Figure) {
    println!("\n{}: {}", f.name, f.title);
    let variants: Vec<&str> = f.variants.iter().map(|v| v.name.as_str()).collect();
    let energy = f.name == "energy";
    // Columns as wide as their whole names (fig11's `2-sockets-of-ideal` was cut).
    let width = |v: &str| v.len().max(if energy { 13 } else { 8 });
    print!("{:<22}", "workload");
    for v in &variants {
        print!(" {:>w$}", v, w = width(v));
    }
    println!();
    let mut seen = Vec::new();
    for r in &f.runs {
        if seen.contains(&r.workload) {
            continue;
        }
        seen.push(r.workload.clone());
        print!("{:<22}", r.workload);
        for v in &variants {
            let x = f
                .runs
                .iter()
                .find(|x| x.workload == r.workload && x.variant == *v)
                .expect("every run");
            let cell = if energy {
                format!("{:.3}x {:>3.0}mJ", x.speedup, x.link_joules * 1e3)
            } else {
                format!("{:.2}x", x.speedup)
            };
            print!(" {:>w$}", cell, w = width(v));
        }
        println!();
    }
    // Whole names (no cut), and the paper's figure only where it gives one.
    let label = |s: &cohort_sim::experiments::Summary| format!("{} over {}", s.variant, s.baseline);
    let w = f
        .summary
        .iter()
        .map(|s| label(s).len())
        .max()
        .unwrap_or(8)
        .max(8);
    println!(
        "{:<w$} {:>8} {:>8} {:>8}  paper's note",
        "variant", "mean", "geomean", "paper"
    );
    for s in &f.summary {
        let paper = s.paper.map(|p| format!("{p:.2}x")).unwrap_or("-".into());
        let note = match (&s.paper_note, s.paper) {
            (Some(n), _) => n.as_str(),
            (None, None) => "(the paper gives no number for this)",
            (None, Some(_)) => "",
        };
        println!(
            "{:<w$} {:>7.2}x {:>7.2}x {:>8}  {}",
            label(s),
            s.mean_speedup,
            s.geomean_speedup,
            paper,
            note
        );
    }
    println!(
        "{} simulated line requests in {:.1}s wall ({:.2} M requests per core-second)",
        f.total_requests,
        f.wall_s,
        f.requests_per_core_s / 1e6
    );
}

fn plot_figure(f: &Figure, out: &Path) -> Result<()> {
    let mut cats: Vec<String> = Vec::new();
    for r in &f.runs {
        if !cats.contains(&r.workload) {
            cats.push(r.workload.clone());
        }
    }
    let energy = f.name == "energy";
    let value = |r: &cohort_sim::experiments::Run| {
        if energy {
            r.link_joules * 1e3
        } else {
            r.speedup
        }
    };
    let series: Vec<(String, Vec<f64>)> = f
        .variants
        .iter()
        .filter(|v| v.name != v.baseline)
        .map(|v| {
            let mut vals: Vec<f64> = cats
                .iter()
                .map(|w| {
                    f.runs
                        .iter()
                        .find(|r| &r.workload == w && r.variant == v.name)
                        .map_or(f64::NAN, value)
                })
                .collect();
            let mean = vals.iter().sum::<f64>() / vals.len().max(1) as f64;
            vals.push(mean);
            (v.name.clone(), vals)
        })
        .collect();
    cats.push("mean".into());
    let (y, reference) = if energy {
        ("link energy, mJ", None)
    } else if f.name == "fig11" {
        // Its `N-sockets-of-ideal` bars are fractions of an ideal GPU, not speedups.
        (
            "speedup over 1 socket; *-of-ideal: fraction of the ideal",
            Some(1.0),
        )
    } else {
        ("speedup", Some(1.0))
    };
    let tmp = cohort_server::util::tmp_path(out);
    cohort_load::plot_bars(&cats, &series, &f.title, y, reference, &tmp)?;
    std::fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display()))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
