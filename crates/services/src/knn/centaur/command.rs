//! `cohort model centaur knn`: the model's inputs measured (or read), its predictions beside
//! the measured runs with their errors, Centaur's Fig. 6 and Fig. 2 shapes plotted.

use super::inputs::{
    bytes_per_query, host_cost_us, probe_shares, read_runs, scan_share, shard_work, Run,
};
use super::{fig2, fit_cohort_time, imbalance, Inputs, Layout, Prediction, LAUNCHES_PER_COHORT};
use crate::catalog::{Record, ServiceCommand};
use clap::{value_parser, Arg, ArgAction, ArgMatches, Command};
use cohort_gpu::overheads::Overheads;
use cohort_knn::IvfIndex;
use std::path::{Path, PathBuf};

pub const COMMANDS: &[ServiceCommand] = &[ServiceCommand {
    name: "centaur",
    command: centaur_command,
    run: run_centaur,
}];

/// Predictions further than this from the measured rate are flagged (the goal).
const GOAL_ERROR: f64 = 0.2;

fn centaur_command() -> Command {
    let path = |name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_parser(value_parser!(PathBuf))
            .help(help)
    };
    Command::new("centaur")
        .about("Centaur's analytical model (eqs. 1-9): the rate on N devices predicted from measured inputs, beside the measured runs, with Fig. 6 and Fig. 2 shapes plotted")
        .arg(
            Arg::new("runs")
                .required(true)
                .num_args(1..)
                .value_parser(value_parser!(PathBuf))
                .help("`cohort bench engine` results of the knn service (1..N devices, replicate and shard); the one-device runs calibrate the cohort time"),
        )
        .arg(path("index", "The index the runs served").required(true))
        .arg(path("queries", "The queries the runs sent (.fvecs)").required(true))
        .arg(path("whole-device", "A `bench engine` run on one whole physical device (no virtual GPUs), same settings: eq. 3's ceiling for virtual GPUs of it"))
        .arg(path("overheads", "O_k, O_q and g from an earlier run's JSON (its `overheads`); without it they are measured on GPU 0"))
        .arg(path("shard-profile", "r(N) of eq. 9 from a `cohort bench gpu-kernels --shards` result (the tiled plan per stage on one shard of N); without it r(N) = 1"))
        .arg(
            Arg::new("in-flight")
                .long("in-flight")
                .default_value("2")
                .value_parser(value_parser!(f64))
                .help("m of eq. 4: cohorts per device at once (one running, one filling)"),
        )
        .arg(
            Arg::new("host-cores")
                .long("host-cores")
                .value_parser(value_parser!(f64))
                .help("C of eq. 2: the host's cores [default: the runs' machine.cpus]"),
        )
        .arg(
            Arg::new("memories")
                .long("memories")
                .default_value("1")
                .value_parser(value_parser!(f64))
                .help("P of eq. 3: separate device memories the runs' devices had (virtual GPUs of one device share one)"),
        )
        .arg(
            Arg::new("fig2-devices")
                .long("fig2-devices")
                .default_value("8")
                .value_parser(value_parser!(usize))
                .help("Devices of the Fig. 2 curves (rate against host threads)"),
        )
        .arg(path("out", "Writes OUT.json (inputs, predictions, measured, errors), OUT-fig6.png and OUT-fig2.png").required(true))
        .arg(
            Arg::new("launches")
                .long("launches")
                .default_value("20000")
                .value_parser(value_parser!(usize))
                .action(ArgAction::Set)
                .help("Launches and queries timed when measuring the overheads"),
        )
}

fn run_centaur(m: &ArgMatches, record: Record) -> Result<(), String> {
    let path = |k: &str| m.get_one::<PathBuf>(k).cloned();
    let mut runs = Vec::new();
    for p in m.get_many::<PathBuf>("runs").expect("required") {
        for run in read_runs(p)? {
            match run {
                Ok(r) => runs.push(r),
                Err(e) => println!("left out: {e}"),
            }
        }
    }
    let calib: Vec<&Run> = runs.iter().filter(|r| r.devices == 1).collect();
    let first = *calib
        .first()
        .ok_or("no one-device run among the runs: eq. 6 is fitted to one device's rates")?;
    if let Some(r) = runs.iter().find(|r| r.drivers != first.drivers) {
        return Err(format!(
            "{} has {} driver threads, {} has {}: H of eq. 2 must be one",
            r.file, r.drivers, first.file, first.drivers
        ));
    }
    let in_flight = *m.get_one::<f64>("in-flight").expect("default");
    let over = match path("overheads") {
        Some(p) => read_overheads(&p)?,
        None => {
            let devs = cohort_gpu::probe().map_err(|e| {
                format!("measuring O_k and O_q needs a GPU ({e}); pass --overheads FILE from a run that had one")
            })?;
            cohort_gpu::overheads::measure(
                &devs[0],
                *m.get_one::<usize>("launches").expect("default"),
            )
            .map_err(|e| e.to_string())?
        }
    };
    let ix_path = path("index").expect("required");
    let ix = IvfIndex::load(&ix_path).map_err(|e| format!("{}: {e:#}", ix_path.display()))?;
    let q_path = path("queries").expect("required");
    let queries = cohort_knn::vecfile::read_vectors(&q_path)
        .map_err(|e| format!("{}: {e:#}", q_path.display()))?;
    if queries.dim != ix.dim {
        return Err(format!(
            "queries have dimension {}, the index {}",
            queries.dim, ix.dim
        ));
    }
    let probed = probe_shares(&ix, &queries.data, first.nprobe.max(1).min(ix.nlist));
    let points: Vec<(f64, f64)> = calib
        .iter()
        .map(|r| {
            let b = (r.window as f64 / in_flight)
                .min(r.max_cohort as f64)
                .max(1.0);
            (b, b * 1e6 / r.rate)
        })
        .collect();
    let (t0_us, tq_us) = fit_cohort_time(&points, LAUNCHES_PER_COHORT * over.device_gap_us);
    let inputs = Inputs {
        launch_us: over.launch_us,
        query_us: over.query_us,
        gap_us: over.device_gap_us,
        host_us: host_cost_us(ix.dim, ix.nlist, &queries.data, 10),
        host_threads: first.drivers as f64,
        // The curves' window: the multi-device runs' (the largest measured).
        window: runs.iter().map(|r| r.window).max().unwrap_or(first.window) as f64,
        max_cohort: first.max_cohort as f64,
        in_flight,
        t0_us,
        tq_us,
        scan_share: scan_share(&ix, &probed),
        bytes_per_query: bytes_per_query(&ix, &probed),
        bandwidth_gbs: over.copy_gbs,
        memories: *m.get_one::<f64>("memories").expect("default"),
        host_cores: match m.get_one::<f64>("host-cores") {
            Some(&c) => c,
            None => first
                .cpus
                .ok_or_else(|| format!("{}: no machine.cpus: pass --host-cores", first.file))?
                as f64,
        },
        shard_work: match path("shard-profile") {
            None => Vec::new(),
            Some(p) => {
                let text =
                    std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                let v: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| format!("{}: not JSON: {e}", p.display()))?;
                shard_work(&v, first.max_cohort as f64)
                    .map_err(|e| format!("{}: {e}", p.display()))?
            }
        },
        whole_rate: match path("whole-device") {
            None => 0.0,
            Some(p) => {
                let whole = read_runs(&p)?
                    .into_iter()
                    .find_map(Result::ok)
                    .ok_or_else(|| format!("{}: no run that started", p.display()))?;
                whole.rate
            }
        },
    };
    let sizes = ix.cell_sizes();
    // Eq. 8 for a sharded layout; a replicated index's devices each scan whole queries.
    let skew = |n: usize, layout: Layout| match layout {
        Layout::Shard => imbalance(&ix.placement_for(n).owner, &sizes, &probed, n),
        Layout::Replicate => 1.0,
    };
    println!(
        "inputs: O_k {:.2} us, O_q {:.3} us, g {:.2} us, c_r {:.2} us, H {}, C {}, W {}, B {}, m {}, t(b) = {:.0} + {:.3} b us, s {:.3}, {:.2} MB/query at {:.0} GB/s x {} memories, whole device {:.0} q/s: ceiling {:.0} q/s",
        inputs.launch_us, inputs.query_us, inputs.gap_us, inputs.host_us, inputs.host_threads, inputs.host_cores,
        inputs.window, inputs.max_cohort, inputs.in_flight, inputs.t0_us, inputs.tq_us, inputs.scan_share,
        inputs.bytes_per_query / 1e6, inputs.bandwidth_gbs, inputs.memories, inputs.whole_rate, inputs.memory_rate()
    );
    if !inputs.shard_work.is_empty() {
        println!(
            "r(N) of eq. 9, measured: {}",
            inputs
                .shard_work
                .iter()
                .map(|(n, r)| format!("{n}: {r:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!(
        "{:<10} {:>7} {:>7} {:>11} {:>11} {:>7} {:>6} {:>9} {:>11} {:>11}",
        "layout",
        "devices",
        "window",
        "measured",
        "predicted",
        "error",
        "bound",
        "I(N)",
        "p50 meas",
        "p50 pred"
    );
    let mut rows = Vec::new();
    let mut worst: f64 = 0.0;
    for r in runs.iter().filter(|r| r.engine == first.engine) {
        let at_window = Inputs {
            window: r.window as f64,
            ..inputs.clone()
        };
        let p = at_window.predict(r.devices, r.layout, skew(r.devices, r.layout));
        let err = (p.rate - r.rate) / r.rate;
        worst = worst.max(err.abs());
        println!(
            "{:<10} {:>7} {:>7} {:>11.0} {:>11.0} {:>+6.0}% {:>6} {:>9.4} {:>9.1}ms {:>9.1}ms{}",
            format!("{:?}", r.layout).to_lowercase(),
            r.devices,
            r.window,
            r.rate,
            p.rate,
            err * 100.0,
            p.bound,
            p.imbalance,
            r.p50_us / 1e3,
            p.latency_us / 1e3,
            if err.abs() > GOAL_ERROR {
                "  beyond 20%"
            } else {
                ""
            }
        );
        rows.push(serde_json::json!({
            "file": r.file, "devices": r.devices, "layout": r.layout, "window": r.window,
            "measured": r.rate, "measured_p50_us": r.p50_us, "measured_p99_us": r.p99_us,
            "predicted": p, "error": err,
        }));
    }
    println!(
        "largest error {:.0}% (goal: within {:.0}%)",
        worst * 100.0,
        GOAL_ERROR * 100.0
    );
    let out = path("out").expect("required");
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let curve = |layout: Layout| -> Vec<Prediction> {
        (1..=15)
            .map(|n| inputs.predict(n, layout, skew(n, layout)))
            .collect()
    };
    let (rep, shard) = (curve(Layout::Replicate), curve(Layout::Shard));
    let threads: Vec<usize> = vec![1, 2, 4, 8, 16];
    let f2 = fig2(
        &inputs,
        *m.get_one::<usize>("fig2-devices").expect("default"),
        &threads,
    );
    plot_fig6(&runs, &rep, &shard, &out)?;
    cohort_plot::plot_lines(
        &f2,
        &format!(
            "Centaur Fig. 2 shape: the model on {} devices",
            m.get_one::<usize>("fig2-devices").expect("default")
        ),
        ("host threads", "queries/s"),
        true,
        &suffixed(&out, "-fig2.png"),
    )
    .map_err(|e| e.to_string())?;
    record(
        &suffixed(&out, ".json"),
        serde_json::json!({
            "model": "centaur eqs. 1-9 (docs/centaur-model.md)",
            "overheads": over, "inputs": inputs, "calibration_points": points,
            "runs": rows, "largest_error": worst,
            "predicted_replicate": rep, "predicted_shard": shard,
            "fig2": f2.iter().map(|(n, p)| serde_json::json!({"design": n, "points": p})).collect::<Vec<_>>(),
        }),
    )?;
    println!(
        "wrote {}, {}, {}",
        suffixed(&out, ".json").display(),
        suffixed(&out, "-fig6.png").display(),
        suffixed(&out, "-fig2.png").display()
    );
    Ok(())
}

fn read_overheads(p: &Path) -> Result<Overheads, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    // An earlier model run's JSON keeps them under `results` (as every recorded result);
    // a hand-written file may give them at the top.
    let o = v
        .get("results")
        .unwrap_or(&v)
        .get("overheads")
        .ok_or_else(|| {
            format!(
                "{}: no `overheads` (an earlier model run's JSON)",
                p.display()
            )
        })?;
    serde_json::from_value(o.clone()).map_err(|e| format!("{}: overheads: {e}", p.display()))
}

fn suffixed(out: &Path, tail: &str) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(tail);
    PathBuf::from(s)
}

fn plot_fig6(
    runs: &[Run],
    rep: &[Prediction],
    shard: &[Prediction],
    out: &Path,
) -> Result<(), String> {
    let measured = |layout: Layout| -> Vec<(f64, f64)> {
        let mut v: Vec<_> = runs
            .iter()
            .filter(|r| r.layout == layout)
            .map(|r| (r.devices as f64, r.rate))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let line = |p: &[Prediction]| p.iter().map(|p| (p.devices as f64, p.rate)).collect();
    let series = vec![
        (
            "replicate, measured".to_string(),
            measured(Layout::Replicate),
        ),
        ("replicate, model".to_string(), line(rep)),
        ("shard, measured".to_string(), measured(Layout::Shard)),
        ("shard, model".to_string(), line(shard)),
    ];
    cohort_plot::plot_lines(
        &series,
        "Centaur Fig. 6 shape: k-NN rate against devices, measured and modelled",
        ("devices (groups of SMs)", "queries/s"),
        false,
        &suffixed(out, "-fig6.png"),
    )
    .map_err(|e| e.to_string())
}
