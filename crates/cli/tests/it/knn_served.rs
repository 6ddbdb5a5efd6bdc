//! k-NN served over UDP by the real binary and checked by the real load generator against
//! exact search; several services in one server, each on its own engine; `cohort load`
//! failing a run whose answers are all errors.

use crate::common;
use common::*;
use std::process::{Command, Output};

fn cohort(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(args)
        .args(["--log-level", "warn"])
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    text
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn served_knn_recall_equals_the_index_recall_against_exact_search() {
    let d = Scratch::new("knn-served");
    let f = knn_files(&d);
    let (query, gt, ix) = (f.queries, f.gt, f.index);
    let eval = d.path("eval.json");
    ok(&cohort(&[
        "index",
        "eval",
        "--index",
        &ix,
        "--queries",
        &query,
        "--gt",
        &gt,
        "--nprobe",
        "2",
        "--k",
        "10",
        "--json",
        &eval,
    ]));
    let expected = json(std::path::Path::new(&eval))["recall_at_k"]
        .as_f64()
        .unwrap();
    // Two of 64 cells: a recall clearly below 1, so the comparison can tell answers apart.
    assert!(expected > 0.3 && expected < 0.99, "index recall {expected}");
    let s = Served::start(&["--service", "knn:cpu", "--index", &ix, "--workers", "2"]);
    let out = d.path("load.json");
    let target = format!("udp://{}", s.udp.unwrap());
    let load = cohort(&[
        "load",
        "--target",
        &target,
        "--service",
        "knn",
        "--queries",
        &query,
        "--gt",
        &gt,
        "--k",
        "10",
        "--nprobe",
        "2",
        "--rate",
        "2000",
        "--duration",
        "1",
        "--warmup",
        "0.2",
        "--json",
        &out,
        "--min-recall",
        "0.5",
        "--no-gpu-energy",
    ]);
    ok(&load);
    let r = json(std::path::Path::new(&out));
    let got = r["recall_at_k"].as_f64().unwrap();
    assert_eq!(r["ok"].as_u64(), r["sent"].as_u64(), "{r}");
    // Board power left unsampled on request, and the report says so (not "no GPU").
    let absent = r["energy"]["gpu_absent"].as_str().unwrap_or_default();
    assert!(absent.contains("--no-gpu-energy"), "{}", r["energy"]);
    // Every query is asked about equally often, so the served recall is the index's.
    assert!(
        (got - expected).abs() < 0.01,
        "served recall {got}, index recall {expected}"
    );
    // A recall floor above what the index gives fails the run.
    let strict = cohort(&[
        "load",
        "--target",
        &target,
        "--service",
        "knn",
        "--queries",
        &query,
        "--gt",
        &gt,
        "--k",
        "10",
        "--nprobe",
        "1",
        "--rate",
        "500",
        "--duration",
        "0.5",
        "--warmup",
        "0",
        "--min-recall",
        "0.999",
    ]);
    assert!(!strict.status.success());
    assert!(String::from_utf8_lossy(&strict.stderr).contains("below --min-recall"));
}

#[test]
fn one_server_runs_each_service_on_its_own_engine_and_load_fails_when_all_answers_are_errors() {
    let s = Served::start(&[
        "--service",
        "echo:cpu,spin",
        "--engine",
        "cpu",
        "--service-opt",
        "spin.workers=1",
        "--service-opt",
        "echo.max_queue=256",
    ]);
    let target = format!("udp://{}", s.udp.unwrap());
    for svc in ["echo", "spin"] {
        ok(&cohort(&[
            "load",
            "--target",
            &target,
            "--service",
            svc,
            "--rate",
            "1000",
            "--duration",
            "0.5",
            "--warmup",
            "0",
        ]));
    }
    // Nothing serves knn here: every answer is UNKNOWN_SERVICE, and the run fails saying so.
    let d = Scratch::new("knn-none");
    let q = d.path("q");
    ok(&cohort(&[
        "data",
        "synth",
        "--n",
        "100",
        "--dim",
        "4",
        "--queries",
        "5",
        "--gt-k",
        "5",
        "--out",
        &q,
    ]));
    let bad = cohort(&[
        "load",
        "--target",
        &target,
        "--service",
        "knn",
        "--queries",
        &format!("{q}/query.fvecs"),
        "--rate",
        "200",
        "--duration",
        "0.5",
        "--warmup",
        "0",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("every request") && err.contains("UNKNOWN_SERVICE"),
        "{err}"
    );
    // And a server that is not there: all no_answer, also a failure.
    let gone = cohort(&[
        "load",
        "--target",
        "udp://127.0.0.1:9",
        "--service",
        "echo",
        "--rate",
        "100",
        "--duration",
        "0.3",
        "--warmup",
        "0",
        "--answer-timeout-ms",
        "200",
    ]);
    assert!(!gone.status.success());
}

#[test]
fn a_service_on_a_gpu_engine_without_a_gpu_is_refused_at_start_up() {
    if cohort_gpu::probe().is_ok() {
        cohort_gpu::report_skip("gpu engine refusal", "this machine has a GPU");
        return;
    }
    let o = cohort(&[
        "serve",
        "--service",
        "echo:cpu,spin:gpu-direct",
        "--udp",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(1));
    // Refused before anything loads, with --check-config's words.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("service spin runs on gpu-direct, but there is no CUDA device"),
        "{err}"
    );
}
