//! Centaur's model through the real binaries: `cohort-lab model centaur knn` over
//! bench-engine results on an index `cohort index build` made (its calibration point
//! predicted exactly, a run that did not start left out by name, a clear error where
//! overheads can be neither measured nor read).

use crate::product as common;
use common::Scratch;
use std::path::Path;
use std::process::{Command, Output};

/// `cohort CMD --log-level warn ARGS...`, the lab's binary for its commands (`model`), the
/// product's for the rest (a model tool takes every argument after its name as its own).
fn cohort(args: &[&str]) -> Output {
    let bin = if args[0] == "model" {
        common::lab_bin()
    } else {
        common::cohort_bin()
    };
    Command::new(bin)
        .arg(args[0])
        .args(["--log-level", "warn"])
        .args(&args[1..])
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: &Output) -> String {
    let t = text(o);
    assert!(o.status.success(), "{t}");
    t
}

/// A SIFT-like 6000 x 16 set with 50 queries under `d/data`; its folder.
fn small_data(d: &Scratch) -> String {
    let data = d.path("data");
    ok(&cohort(&[
        "data",
        "synth",
        "--n",
        "6000",
        "--dim",
        "16",
        "--queries",
        "50",
        "--out",
        &data,
    ]));
    data
}

fn small_index(d: &Scratch) -> (String, String) {
    let data = small_data(d);
    let ix = d.path("ix.index");
    ok(&cohort(&[
        "index",
        "build",
        "--base",
        &format!("{data}/base.fvecs"),
        "--nlist",
        "64",
        "--out",
        &ix,
    ]));
    (ix, format!("{data}/query.fvecs"))
}

/// O_k, O_q, g and the copy bandwidth as `--overheads` takes them (no GPU needed).
fn overheads_file(d: &Scratch) -> String {
    let over = d.path("overheads.json");
    std::fs::write(
        &over,
        r#"{"overheads":{"launch_us":3.0,"device_gap_us":3.0,"query_us":1.0,"copy_gbs":3000.0}}"#,
    )
    .unwrap();
    over
}

/// A `bench engine` result as the binary writes it (one engine's entry).
fn engine_run(path: &Path, gpus: usize, placement: &str, window: usize, rate: f64) {
    engine_run_of(path, "gpu-cohort", gpus, placement, window, rate)
}

fn engine_run_of(
    path: &Path,
    engine: &str,
    gpus: usize,
    placement: &str,
    window: usize,
    rate: f64,
) {
    let v = serde_json::json!({
        "command": "test", "commit": "test", "unix_time": 0,
        "machine": {"cpus": 16},
        "results": [{
            "engine": engine, "service": "knn", "gpus": (0..gpus).collect::<Vec<_>>(),
            "service_opt": [format!("knn.placement={placement}")],
            "window": window, "max_cohort": 2048, "drivers": 8, "nprobe": 8,
            "queries_per_s": rate,
            "latency_us": {"p50": window as f64 * 1e6 / rate, "p99": 2.0 * window as f64 * 1e6 / rate},
        }]
    });
    std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn the_model_predicts_its_calibration_and_names_what_it_left_out() {
    let d = Scratch::new("knn-centaur");
    let (ix, q) = small_index(&d);
    let runs = ["one.json", "two.json", "four.json", "skipped.json"].map(|f| d.path(f));
    engine_run(Path::new(&runs[0]), 1, "replicate", 8192, 140_000.0);
    engine_run(Path::new(&runs[1]), 2, "replicate", 8192, 270_000.0);
    engine_run(Path::new(&runs[2]), 4, "shard", 8192, 300_000.0);
    std::fs::write(
        &runs[3],
        r#"{"machine":{"cpus":16},"results":[{"engine":"gpu-cohort","skipped":"out of memory"}]}"#,
    )
    .unwrap();
    let over = overheads_file(&d);
    let out = d.path("model/m");
    // `cohort-lab model centaur knn RUNS... --index --queries [--overheads] --out`.
    let model = |runs: &[&str], overheads: Option<&str>| {
        let mut args = vec!["model", "centaur", "knn"];
        args.extend(runs);
        args.extend(["--index", &ix, "--queries", &q, "--out", &out]);
        if let Some(o) = overheads {
            args.extend(["--overheads", o]);
        }
        cohort(&args)
    };
    let all: Vec<&str> = runs.iter().map(|s| s.as_str()).collect();
    let printed = ok(&model(&all, Some(&over)));
    assert!(
        printed.contains("left out") && printed.contains("out of memory"),
        "{printed}"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{out}.json")).unwrap()).unwrap();
    let rows = v["results"]["runs"].as_array().expect("runs").clone();
    assert_eq!(rows.len(), 3, "{v}");
    let one = rows.iter().find(|r| r["devices"] == 1).unwrap();
    assert!(one["error"].as_f64().unwrap().abs() < 1e-9, "{one}");
    for r in &rows {
        let p = &r["predicted"];
        let rate = p["rate"].as_f64().unwrap();
        assert!(
            rate > 0.0 && rate <= p["gpu_rate"].as_f64().unwrap() + 1e-6,
            "{r}"
        );
    }
    for f in ["-fig6.png", "-fig2.png"] {
        assert!(std::fs::metadata(format!("{out}{f}")).unwrap().len() > 1000);
    }
    // An earlier run's JSON serves as --overheads (its measured O_k, O_q, g, bandwidth).
    let earlier = d.path("earlier.json");
    std::fs::copy(format!("{out}.json"), &earlier).unwrap();
    ok(&model(&all[..2], Some(&earlier)));
    let again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{out}.json")).unwrap()).unwrap();
    assert_eq!(again["results"]["overheads"], v["results"]["overheads"]);
    // Without --overheads and without a GPU: a clear error, not a crash.
    let o = model(&all[..1], None);
    if !o.status.success() {
        let t = text(&o);
        assert!(t.contains("--overheads"), "{t}");
    }
    // No one-device run: nothing to calibrate eq. 6 with.
    let o = model(&all[1..2], Some(&over));
    assert!(
        !o.status.success() && text(&o).contains("one-device"),
        "{}",
        text(&o)
    );
}

/// A `bench served` result as the binary writes it: one engine's point on `gpus` GPUs.
fn served_run(path: &Path, engine: &str, service: &str, gpus: usize, best: f64) {
    let v = serde_json::json!({
        "command": "test", "commit": "test", "machine": {"cpus": 64},
        "results": {"p99_bound_us": 1000.0, "client_cpus": [8], "hog": "none", "points": [{
            "engine": engine, "service": service, "server_cores": 8, "server_cpus": [0],
            "serve": ["serve", "--service", format!("{service}:{engine}"),
                      format!("--gpus={}", (0..gpus).map(|g| g.to_string()).collect::<Vec<_>>().join(","))],
            "best_at_p99_bound": best, "best_at_p99_5ms": best, "runs": [],
        }]}
    });
    std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn the_scaling_figure_models_each_engine_in_process_and_served() {
    let d = Scratch::new("knn-centaur-fig7");
    let (ix, q) = small_index(&d);
    let mut runs = Vec::new();
    for (engine, one) in [("gpu-cohort", 1_900_000.0), ("gpu-persistent", 1_500_000.0)] {
        for (n, layout, scale) in [
            (1, "replicate", 1.0),
            (2, "replicate", 1.9),
            (4, "replicate", 3.6),
            (4, "shard", 2.8),
        ] {
            let f = d.path(&format!("{engine}-{n}-{layout}.json"));
            engine_run_of(Path::new(&f), engine, n, layout, 8192 * n, one * scale);
            runs.push(f);
        }
    }
    let mut served = Vec::new();
    for (n, best) in [(1, 600_000.0), (4, 600_000.0)] {
        let f = d.path(&format!("served-{n}.json"));
        served_run(Path::new(&f), "gpu-cohort", "knn", n, best);
        served.push(f);
    }
    let anchor = d.path("anchor.json");
    served_run(Path::new(&anchor), "cpu", "echo", 1, 500_000.0);
    let over = overheads_file(&d);
    let out = d.path("model/m");
    let mut args: Vec<&str> = vec!["model", "centaur", "knn"];
    args.extend(runs.iter().map(|s| s.as_str()));
    args.extend([
        "--index",
        &ix,
        "--queries",
        &q,
        "--out",
        &out,
        "--overheads",
        &over,
    ]);
    args.extend(["--memories", "devices", "--anchor", &anchor, "--served"]);
    args.extend(served.iter().map(|s| s.as_str()));
    let printed = ok(&cohort(&args));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{out}.json")).unwrap()).unwrap();
    let fig = v["results"]["fig7_in_process"]
        .as_array()
        .expect("fig7")
        .clone();
    assert_eq!(fig.len(), 8, "{printed}");
    for p in &fig {
        // Each engine's own one-GPU run calibrates it: predicted exactly.
        if p["devices"] == 1 {
            assert!(p["error"].as_f64().unwrap().abs() < 1e-9, "{p}");
        }
        assert!(p["predicted"].as_f64().unwrap() > 0.0, "{p}");
    }
    let engines = v["results"]["engines"].as_array().unwrap();
    assert_eq!(engines.len(), 2);
    assert_eq!(engines[1]["inputs"]["gpu_centric"], true);
    // Served: the echo anchor caps the prediction (the network path, not the GPUs).
    let s = v["results"]["fig7_served"].as_array().unwrap();
    assert_eq!(s.len(), 2, "{v}");
    for p in s {
        assert!(p["predicted"].as_f64().unwrap() <= 500_000.0 + 1e-6, "{p}");
    }
    for f in ["-fig7.png", "-fig7-served.png"] {
        assert!(std::fs::metadata(format!("{out}{f}")).unwrap().len() > 1000);
    }
    // A memories count that is neither a number nor `devices`: a clear error.
    let mut bad = args.clone();
    let at = bad.iter().position(|a| *a == "devices").unwrap();
    bad[at] = "many";
    let o = cohort(&bad);
    assert!(
        !o.status.success() && text(&o).contains("--memories"),
        "{}",
        text(&o)
    );
}
