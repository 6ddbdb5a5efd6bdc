//! `cohort-lab model centaur knn`: the model's inputs measured (or read), its predictions beside
//! the measured runs with their errors, Centaur's Fig. 6 and Fig. 2 shapes plotted.

use super::inputs::{
    bytes_per_query, cohort_bytes, host_cost_us, probe_shares, read_runs, scan_share, shard_work,
    Run,
};
use super::{
    fig2, fit_cohort_time, imbalance, scaling, Inputs, Layout, Prediction, LAUNCHES_PER_COHORT,
};
use clap::{value_parser, Arg, ArgAction, ArgMatches, Command};
use cohort_gpu::overheads::Overheads;
use cohort_ivf::IvfIndex;
use cohort_service_api::tools::{Record, ServiceCommand};
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
                .help("`cohort-lab bench engine` results of the knn service (1..N devices, replicate and shard); the one-device runs calibrate the cohort time"),
        )
        .arg(path("index", "The index the runs served").required(true))
        .arg(path("queries", "The queries the runs sent (.fvecs)").required(true))
        .arg(path("whole-device", "A `bench engine` run on one whole physical device (no virtual GPUs), same settings: eq. 3's ceiling for virtual GPUs of it"))
        .arg(path("overheads", "O_k, O_q and g from an earlier run's JSON (its `overheads`); without it they are measured on GPU 0"))
        .arg(path("shard-profile", "r(N) of eq. 9 from a `cohort-lab bench gpu-kernels --shards` result (the tiled plan per stage on one shard of N); without it r(N) = 1"))
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
                .help("P of eq. 3: separate device memories the runs' devices had (virtual GPUs of one device share one), or `devices`: each device its own (physical GPUs)"),
        )
        .arg(
            Arg::new("served")
                .long("served")
                .num_args(1..)
                .value_parser(value_parser!(PathBuf))
                .help("`cohort-lab bench served` results of the same engines on 1..N GPUs: Fig. 7's served curve, each point beside its prediction"),
        )
        .arg(path("anchor", "An echo served on the same cores (`bench served --services echo --engines inline`: answered on the io threads, the network path alone): its ceiling in the served prediction"))
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
    // The engines in the order they come; the first one's runs draw Fig. 6 and Fig. 2.
    let mut engines: Vec<String> = Vec::new();
    for r in &runs {
        if !engines.contains(&r.engine) {
            engines.push(r.engine.clone());
        }
    }
    // The first engine's first one-device run: the settings every engine's runs share (nprobe,
    // the machine's cores, the cohort limit of the shard profile).
    let first = engines
        .first()
        .and_then(|e| runs.iter().find(|r| &r.engine == e && r.devices == 1))
        .ok_or("no one-device run of the first engine: eq. 6 is fitted to one device's rates")?;
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
    let queries = cohort_ivf::vecfile::read_vectors(&q_path)
        .map_err(|e| format!("{}: {e:#}", q_path.display()))?;
    if queries.dim != ix.dim {
        return Err(format!(
            "queries have dimension {}, the index {}",
            queries.dim, ix.dim
        ));
    }
    let (memories, memory_per_device) =
        match m.get_one::<String>("memories").expect("default").as_str() {
            "devices" => (1.0, true),
            n => (
                n.parse::<f64>()
                    .ok()
                    .filter(|p| *p >= 1.0)
                    .ok_or_else(|| format!("--memories {n}: a count of 1 or more, or `devices`"))?,
                false,
            ),
        };
    let probed = probe_shares(&ix, &queries.data, first.nprobe.max(1).min(ix.nlist));
    let base = Inputs {
        launch_us: over.launch_us,
        query_us: over.query_us,
        gap_us: over.device_gap_us,
        host_us: host_cost_us(ix.dim, ix.nlist, &queries.data, 10),
        host_threads: first.drivers as f64, // (each engine's own: `engine_inputs`)
        // The curves' window: the multi-device runs' (the largest measured).
        window: runs.iter().map(|r| r.window).max().unwrap_or(first.window) as f64,
        max_cohort: first.max_cohort as f64,
        in_flight,
        t0_us: 0.0,
        tq_us: 0.0,
        scan_share: scan_share(&ix, &probed),
        bytes_per_query: bytes_per_query(&ix, &probed),
        bandwidth_gbs: over.copy_gbs,
        memories,
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
        memory_per_device,
        cohort_bytes: cohort_bytes(
            &ix,
            &probed,
            &[
                1.0, 16.0, 128.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 65536.0,
            ],
        ),
        gpu_centric: false,
    };
    let mut fitted = Vec::new();
    for e in &engines {
        let mine: Vec<&Run> = runs.iter().filter(|r| &r.engine == e).collect();
        fitted.push(engine_inputs(e, &mine, &base, over.device_gap_us)?);
    }
    let (inputs, points) = fitted[0].clone();
    let sizes = ix.cell_sizes();
    // Eq. 8 for a sharded layout; a replicated index's devices each scan whole queries.
    let skew = |n: usize, layout: Layout| match layout {
        Layout::Shard => imbalance(&ix.placement_for(n).owner, &sizes, &probed, n),
        Layout::Replicate => 1.0,
    };
    println!(
        "inputs: O_k {:.2} us, O_q {:.3} us, g {:.2} us, c_r {:.2} us, H {}, C {}, W {}, B {}, m {}, t(b) = {:.0} + {:.3} b us, s {:.3}, {:.2} MB/query ({:.3} MB in a cohort of B) at {:.0} GB/s x {} memories, whole device {:.0} q/s: ceiling {:.0} q/s",
        inputs.launch_us, inputs.query_us, inputs.gap_us, inputs.host_us, inputs.host_threads, inputs.host_cores,
        inputs.window, inputs.max_cohort, inputs.in_flight, inputs.t0_us, inputs.tq_us, inputs.scan_share,
        inputs.bytes_per_query / 1e6, inputs.bytes_at(inputs.max_cohort) / 1e6, inputs.bandwidth_gbs, inputs.memories, inputs.whole_rate, inputs.memory_rate(1, inputs.max_cohort)
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
        "{:<15} {:<10} {:>7} {:>7} {:>11} {:>11} {:>7} {:>6} {:>9} {:>11} {:>11}",
        "engine",
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
    let mut fig7 = Vec::new();
    let mut worst: f64 = 0.0;
    for (e, (engine_in, _)) in engines.iter().zip(&fitted) {
        for r in runs.iter().filter(|r| &r.engine == e) {
            let at_window = Inputs {
                window: r.window as f64,
                ..engine_in.clone()
            };
            let p = at_window.predict(r.devices, r.layout, skew(r.devices, r.layout));
            let err = (p.rate - r.rate) / r.rate;
            worst = worst.max(err.abs());
            println!(
                "{:<15} {:<10} {:>7} {:>7} {:>11.0} {:>11.0} {:>+6.0}% {:>6} {:>9.4} {:>9.1}ms {:>9.1}ms{}",
                r.engine,
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
            fig7.push(scaling::Point {
                engine: r.engine.clone(),
                layout: r.layout,
                devices: r.devices,
                measured: r.rate,
                predicted: p.rate,
                error: err,
                file: r.file.clone(),
            });
            rows.push(serde_json::json!({
                "file": r.file, "engine": r.engine, "devices": r.devices, "layout": r.layout,
                "window": r.window, "measured": r.rate, "measured_p50_us": r.p50_us,
                "measured_p99_us": r.p99_us, "predicted": p, "error": err,
            }));
        }
    }
    println!(
        "largest error {:.0}% (goal: within {:.0}%)",
        worst * 100.0,
        GOAL_ERROR * 100.0
    );
    // Each configuration's best window, as Fig. 7 shows it.
    let fig7 = scaling::best_points(fig7);
    let served = served_points(m, &engines, &fitted, &skew)?;
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
    let first_runs: Vec<Run> = runs
        .iter()
        .filter(|r| r.engine == first.engine)
        .cloned()
        .collect();
    plot_fig6(&first_runs, &rep, &shard, &out)?;
    plot_fig7(&fig7, &served, &out)?;
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
            "engines": engines.iter().zip(&fitted).map(|(e, (i, pts))| serde_json::json!({
                "engine": e, "inputs": i, "calibration_points": pts,
            })).collect::<Vec<_>>(),
            "fig7_in_process": fig7,
            "fig7_served": served,
            "predicted_replicate": rep, "predicted_shard": shard,
            "fig2": f2.iter().map(|(n, p)| serde_json::json!({"design": n, "points": p})).collect::<Vec<_>>(),
        }),
    )?;
    println!(
        "wrote {}, {}, {}, {}",
        suffixed(&out, ".json").display(),
        suffixed(&out, "-fig6.png").display(),
        suffixed(&out, "-fig2.png").display(),
        suffixed(&out, "-fig7.png").display()
    );
    Ok(())
}

/// One engine's inputs: the common ones with its own host threads (its runs' drivers), window
/// and cohort limit, design, and cohort time fitted to its own one-device runs (eq. 6).
fn engine_inputs(
    engine: &str,
    runs: &[&Run],
    base: &Inputs,
    gap_us: f64,
) -> Result<(Inputs, Vec<(f64, f64)>), String> {
    let calib: Vec<&&Run> = runs.iter().filter(|r| r.devices == 1).collect();
    let first = calib.first().ok_or_else(|| {
        format!("{engine}: no one-device run: eq. 6 is fitted to one device's rates")
    })?;
    if let Some(r) = runs.iter().find(|r| r.drivers != first.drivers) {
        return Err(format!(
            "{} has {} driver threads, {} has {}: H of eq. 2 must be one per engine",
            r.file, r.drivers, first.file, first.drivers
        ));
    }
    let points: Vec<(f64, f64)> = calib
        .iter()
        .map(|r| {
            let b = (r.window as f64 / base.in_flight)
                .min(r.max_cohort as f64)
                .max(1.0);
            (b, b * 1e6 / r.rate)
        })
        .collect();
    let gpu_centric = engine == "gpu-persistent";
    // The GPU-centric design has no launches: its floor is not theirs.
    let floor = if gpu_centric {
        0.0
    } else {
        LAUNCHES_PER_COHORT * gap_us
    };
    let (t0_us, tq_us) = fit_cohort_time(&points, floor);
    Ok((
        Inputs {
            host_threads: first.drivers as f64,
            window: runs.iter().map(|r| r.window).max().unwrap_or(first.window) as f64,
            max_cohort: first.max_cohort as f64,
            t0_us,
            tq_us,
            gpu_centric,
            ..base.clone()
        },
        points,
    ))
}

/// The served points (`--served`) beside their predictions (`scaling::predict_served`, the
/// anchor from `--anchor`); engines with no in-process runs are left out, said so.
fn served_points(
    m: &ArgMatches,
    engines: &[String],
    fitted: &[(Inputs, Vec<(f64, f64)>)],
    skew: &dyn Fn(usize, Layout) -> f64,
) -> Result<Vec<scaling::Point>, String> {
    let Some(files) = m.get_many::<PathBuf>("served") else {
        return Ok(Vec::new());
    };
    let anchor = match m.get_one::<PathBuf>("anchor") {
        Some(p) => scaling::read_served(p)?
            .iter()
            .map(|s| s.rate)
            .fold(0.0, f64::max),
        None => 0.0,
    };
    println!("served (anchor: the network path's {anchor:.0} q/s at the same p99 bound):");
    let mut out = Vec::new();
    for f in files {
        for s in scaling::read_served(f)? {
            let Some(i) = engines.iter().position(|e| *e == s.engine) else {
                println!(
                    "left out: {} serves {}, which has no in-process runs",
                    s.file, s.engine
                );
                continue;
            };
            let p = scaling::predict_served(&fitted[i].0, &s, anchor, skew(s.devices, s.layout));
            let err = if s.rate > 0.0 {
                (p.rate - s.rate) / s.rate
            } else {
                f64::INFINITY
            };
            println!(
                "{:<15} {:<10} {:>7} {:>11.0} {:>11.0} {:>+6.0}% {:>8} (p99 <= {:.0} us, {} cores)",
                s.engine,
                format!("{:?}", s.layout).to_lowercase(),
                s.devices,
                s.rate,
                p.rate,
                err * 100.0,
                p.bound,
                s.p99_bound_us,
                s.server_cores
            );
            out.push(scaling::Point {
                engine: s.engine.clone(),
                layout: s.layout,
                devices: s.devices,
                measured: s.rate,
                predicted: p.rate,
                error: err,
                file: s.file.clone(),
            });
        }
    }
    Ok(scaling::best_points(out))
}

/// Centaur's Fig. 7 shape: rate against devices, in process and (a second chart) served, each
/// configuration's best point (`scaling::best_points`).
fn plot_fig7(
    in_process: &[scaling::Point],
    served: &[scaling::Point],
    out: &Path,
) -> Result<(), String> {
    let mut charts = vec![(
        scaling::series(in_process, "measured"),
        "Centaur Fig. 7 shape: k-NN rate against GPUs in process, measured and modelled",
        "-fig7.png",
    )];
    if !served.is_empty() {
        charts.push((
            scaling::series(served, "served"),
            "Centaur Fig. 7 shape: k-NN served at the p99 bound against GPUs, measured and modelled",
            "-fig7-served.png",
        ));
    }
    for (series, title, tail) in charts {
        cohort_plot::plot_lines(
            &series,
            title,
            ("GPUs", "queries/s"),
            false,
            &suffixed(out, tail),
        )
        .map_err(|e| e.to_string())?;
    }
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
