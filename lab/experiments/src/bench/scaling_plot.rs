//! Throughput against the number of serving devices (Lynx Fig. 8b, Centaur Fig. 6 and 7 shape):
//! the results of `cohort-lab bench engine` runs (in process: each engine's best window) and of
//! `cohort-lab bench served` runs (served: the highest rate within the p99 bound) on 1, 2, ...
//! (virtual) GPUs, one curve per engine and setup (sharded, GPUs per host thread) beside the
//! linear ideal from its one-device point, with a table of the scaling efficiency (rate / (N x
//! one device's)).

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
    /// `cohort-lab bench engine` or `cohort-lab bench served` result files (any number of devices each).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// engine -> devices -> best rate (requests/s).
type Points = BTreeMap<String, BTreeMap<usize, f64>>;

fn points(files: &[PathBuf]) -> Result<Points> {
    let mut out = Points::new();
    let mut add = |label: String, devices: usize, rate: f64| {
        let best = out
            .entry(label)
            .or_default()
            .entry(devices.max(1))
            .or_insert(0.0);
        *best = best.max(rate);
    };
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", f.display()))?;
        if let Some(served) = v["results"]["points"].as_array() {
            let from_command = ServedSetup::of(v["command"].as_str().unwrap_or(""));
            for p in served {
                // Results since the served bench records its server's settings say them as
                // data; older ones only in their command line.
                let setup = ServedSetup::of_settings(&p["serve_settings"]).unwrap_or(from_command);
                let (Some(engine), Some(rate)) =
                    (p["engine"].as_str(), p["best_at_p99_bound"].as_f64())
                else {
                    continue;
                };
                add(
                    label("served", engine, setup.sharded, setup.per_thread),
                    setup.devices,
                    rate,
                );
            }
            continue;
        }
        let results = v["results"].as_array().with_context(|| {
            format!(
                "{}: no \"results\" (neither a bench engine nor a bench served result)",
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
            let sharded = r["service_opt"]
                .as_array()
                .is_some_and(|o| o.iter().any(|x| x.as_str().is_some_and(is_shard_opt)));
            let per_thread = r["gpus_per_control_thread"].as_u64().unwrap_or(1) as usize;
            add(
                label("in process", engine, sharded, per_thread),
                gpus.len(),
                rate,
            );
        }
    }
    anyhow::ensure!(!out.is_empty(), "no engine or served results in the files");
    Ok(out)
}

fn is_shard_opt(o: &str) -> bool {
    o.ends_with("placement=shard")
}

/// A curve's name: where it was measured, the engine, and what sets it apart.
fn label(how: &str, engine: &str, sharded: bool, per_thread: usize) -> String {
    let mut l = format!("{engine} {how}");
    if sharded {
        l.push_str(", sharded");
    }
    if per_thread > 1 {
        l.push_str(&format!(", {per_thread} GPUs per host thread"));
    }
    l
}

/// The serving setup of a `bench served` point: from the server's settings it recorded, or
/// (older results) from the run's command (`--serve-arg=...`).
#[derive(Debug, PartialEq, Clone, Copy)]
struct ServedSetup {
    devices: usize,
    sharded: bool,
    per_thread: usize,
}

impl ServedSetup {
    /// From the settings (`ServeArgs` as JSON) a point recorded; None where it has none.
    fn of_settings(s: &serde_json::Value) -> Option<ServedSetup> {
        let devices = s.get("gpus")?.as_array()?.len();
        let per_thread = s["gpus_per_control_thread"].as_u64().unwrap_or(1) as usize;
        // A service's settings arrive as `--service-opt NAME.KEY=VALUE` (the parsed table is
        // filled later, by serve's main).
        let sharded = s["service_opt"]
            .as_array()
            .is_some_and(|o| o.iter().filter_map(|x| x.as_str()).any(is_shard_opt));
        Some(ServedSetup {
            devices,
            sharded,
            per_thread,
        })
    }

    fn of(command: &str) -> ServedSetup {
        let mut s = ServedSetup {
            devices: 1,
            sharded: false,
            per_thread: 1,
        };
        for w in command.split_whitespace() {
            let Some(arg) = w.strip_prefix("--serve-arg=") else {
                continue;
            };
            if let Some(list) = arg.strip_prefix("--gpus=") {
                s.devices = list.split(',').filter(|x| !x.is_empty()).count();
            } else if let Some(n) = arg.strip_prefix("--gpus-per-control-thread=") {
                s.per_thread = n.parse().unwrap_or(1);
            } else if arg.strip_prefix("--service-opt=").is_some_and(is_shard_opt) {
                s.sharded = true;
            }
        }
        s
    }
}

pub fn run(a: &ScalingPlotArgs) -> Result<()> {
    let pts = points(&a.files)?;
    let mut series = Vec::new();
    println!("{:<48} devices   rate/s       vs N x one device", "curve");
    for (engine, by_n) in &pts {
        // A sharded curve, or one of several GPUs per host thread, starts where its engine's
        // plain one-device point is (one GPU holds the whole index on its own thread).
        let one = by_n.get(&1).copied().or_else(|| {
            let plain = engine.split(", ").next().unwrap_or(engine);
            pts.get(plain).and_then(|p| p.get(&1)).copied()
        });
        for (&n, &rate) in by_n {
            let eff = one.map_or(String::from("-"), |o| {
                format!("{:.0}%", 100.0 * rate / (n as f64 * o))
            });
            println!("{engine:<48} {n:>7} {rate:>10.0}   {eff}");
        }
        series.push((
            engine.clone(),
            by_n.iter().map(|(&n, &r)| (n as f64, r / 1e3)).collect(),
        ));
        // The ideal once per engine: from a curve's own one-device point.
        if let Some(&o) = by_n.get(&1) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_run_names_its_devices_and_setup() {
        let c = "cohort-lab bench served --services knn --engines gpu-persistent --cores 8 \
                 --serve-arg=--gpus=0,1,2,3 --serve-arg=--gpus-per-control-thread=4 \
                 --serve-arg=--service-opt=knn.placement=replicate --out x.json";
        assert_eq!(
            ServedSetup::of(c),
            ServedSetup {
                devices: 4,
                sharded: false,
                per_thread: 4
            }
        );
        let c = "cohort-lab bench served --serve-arg=--gpus=0,1 --serve-arg=--service-opt=knn.placement=shard";
        let s = ServedSetup::of(c);
        assert_eq!((s.devices, s.sharded, s.per_thread), (2, true, 1));
        assert_eq!(ServedSetup::of("cohort-lab bench served").devices, 1);
        // Recorded settings win over the command, and read the same setup.
        let flags = [
            "--udp",
            "127.0.0.1:7300",
            "--gpus=0,1,2",
            "--gpus-per-control-thread=3",
            "--service-opt=knn.placement=shard",
        ];
        let settings =
            serde_json::to_value(cohort_server::ServeArgs::from_flags(flags).unwrap()).unwrap();
        assert_eq!(
            ServedSetup::of_settings(&settings),
            Some(ServedSetup {
                devices: 3,
                sharded: true,
                per_thread: 3
            })
        );
        assert_eq!(ServedSetup::of_settings(&serde_json::Value::Null), None);
        assert_eq!(
            label("served", "gpu-cohort", true, 4),
            "gpu-cohort served, sharded, 4 GPUs per host thread"
        );
    }

    #[test]
    fn served_and_engine_files_make_separate_curves() {
        let dir = std::env::temp_dir().join(format!("cohort-scaling-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let served = dir.join("served.json");
        std::fs::write(
            &served,
            r#"{"command": "cohort-lab bench served --serve-arg=--gpus=0,1", "results": {"points": [{"engine": "gpu-cohort", "best_at_p99_bound": 600000.0}]}}"#,
        )
        .unwrap();
        let engine = dir.join("engine.json");
        std::fs::write(
            &engine,
            r#"{"command": "x", "results": [{"engine": "gpu-cohort", "gpus": [0], "queries_per_s": 2.0e6, "service_opt": []}, {"engine": "gpu-cohort", "gpus": [0], "queries_per_s": 1.5e6, "service_opt": []}]}"#,
        )
        .unwrap();
        let p = points(&[served, engine]).unwrap();
        assert_eq!(p["gpu-cohort served"][&2], 600000.0);
        assert_eq!(p["gpu-cohort in process"][&1], 2.0e6, "the best window");
        assert_eq!(p.len(), 2);
        let bad = dir.join("bad.json");
        std::fs::write(&bad, r#"{"results": {"nothing": 1}}"#).unwrap();
        assert!(points(&[bad]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
