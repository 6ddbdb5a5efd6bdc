//! `cohort-lab bench suite`: the smoke suite runs end to end with the real binary (a server and
//! the load generator on loopback) and leaves its results and a summary naming each step; a
//! step that asks for more GPUs than the machine has is skipped, saying why; a bad suite is
//! refused before anything runs.

use std::process::Command;

/// `cohort-lab ARGS...` (its suites start the product's `cohort` beside it).
fn cohort(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn the_smoke_suite_runs_and_records_every_step() {
    let dir = std::env::temp_dir().join(format!("cohort-suite-{}", std::process::id()));
    let out = dir.join("out");
    let o = cohort(&[
        "bench",
        "suite",
        "smoke",
        "--out",
        out.to_str().unwrap(),
        "--work",
        dir.join("work").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("suite-smoke.json")).unwrap())
            .unwrap();
    assert!(summary["commit"].is_string() && summary["machine"].is_object());
    let r = &summary["results"];
    assert_eq!(r["failed"], 0);
    assert_eq!(r["steps"][0]["step"], "served-echo");
    assert_eq!(r["steps"][0]["status"], "ok");
    // The step's own result, with every answer checked.
    let served: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("served-echo.json")).unwrap())
            .unwrap();
    assert!(served["results"].is_object() || served["results"].is_array());
    assert!(out.join("logs/served-echo.log").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes a manifest of `steps` (TOML `[[step]]` tables) into `dir` and runs it, results
/// under `dir/out`, work files in `dir`.
fn run_manifest(dir: &std::path::Path, steps: &str) -> (bool, String) {
    std::fs::create_dir_all(dir).unwrap();
    let manifest = dir.join("suite.toml");
    std::fs::write(
        &manifest,
        format!("about = \"a test\"\nsection = \"none\"\n{steps}"),
    )
    .unwrap();
    let o = cohort(&[
        "bench",
        "suite",
        manifest.to_str().unwrap(),
        "--out",
        dir.join("out").to_str().unwrap(),
        "--work",
        dir.to_str().unwrap(),
    ]);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_step_needing_more_gpus_than_the_machine_has_is_skipped_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("cohort-suite-gpu-{}", std::process::id()));
    let (ok, err) = run_manifest(
        &dir,
        "[[step]]\nname = \"kernels\"\nrun = \"cohort-lab bench lenet-kernels --out {out}/k.json\"\ngpus = 64\n",
    );
    assert!(
        ok && err.contains("skipped") && err.contains("needs 64 GPUs, this machine has"),
        "{err}"
    );
    // A step whose file is already made is skipped too, saying so.
    std::fs::write(dir.join("made.txt"), "x").unwrap();
    let (ok, err) = run_manifest(
        &dir,
        "[[step]]\nname = \"make\"\nrun = \"cohort gpus\"\nmakes = \"{work}/made.txt\"\n",
    );
    assert!(ok && err.contains("made.txt is already there"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_suite_is_refused_before_anything_runs() {
    let o = cohort(&["bench", "suite", "nope"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("unknown suite \"nope\""),
        "{err}"
    );
    let dir = std::env::temp_dir().join(format!("cohort-suite-bad-{}", std::process::id()));
    let (ok, err) = run_manifest(
        &dir,
        "[[step]]\nname = \"x\"\nrun = \"cohort-lab bench served --no-such-flag 1\"\n",
    );
    assert!(
        !ok && err.contains("step x") && err.contains("--no-such-flag"),
        "{err}"
    );
    assert!(!dir.join("out/logs").exists(), "nothing ran");
    std::fs::remove_dir_all(&dir).unwrap();
}
