//! The bank's benchmarks through the lab's binary (moved from crates/cli/tests/it/bank_served.rs).

/// The bank's own benchmarks live in its folder and reach `cohort-lab bench` through the catalog:
/// listed in the help, run with their flags, results recorded with the binary's provenance;
/// a bad flag is a usage error, not a crash.
#[test]
fn the_banks_benchmarks_run_through_cohort_lab_bench() {
    let exe = env!("CARGO_BIN_EXE_cohort-lab");
    let help = std::process::Command::new(exe)
        .args(["bench", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for name in ["bank-cpu", "bank-parse-gpu", "bank-gpu", "bank-plot"] {
        assert!(help.contains(name), "{name} missing from:\n{help}");
    }
    let dir = std::env::temp_dir().join(format!("cohort-bank-bench-{}", std::process::id()));
    let out = dir.join("bank-cpu.json");
    let run = std::process::Command::new(exe)
        .args([
            "bench",
            "bank-cpu",
            "--workers",
            "1",
            "--sessions",
            "5",
            "--users",
            "100",
        ])
        .args(["--duration", "0.1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(
        doc["commit"].is_string() && doc["machine"].is_object(),
        "{doc}"
    );
    let rows = doc["results"]["in_process"].as_array().unwrap();
    assert_eq!(rows[0]["workers"], 1);
    assert!(rows[0]["requests"].as_u64().unwrap() > 0, "{doc}");
    let bad = std::process::Command::new(exe)
        .args(["bench", "bank-cpu", "--workers", "zero"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--workers"));
    let _ = std::fs::remove_dir_all(&dir);
}
