//! `cohort-lab bench engine` on the cpu engine: a window measured `--repeat` times keeps the
//! fastest run's figures and every run's rate and errors beside them.

use std::process::Command;

#[test]
fn repeated_windows_keep_the_fastest_run_and_every_rate() {
    let dir = std::env::temp_dir().join(format!("cohort-bench-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("engine.json");
    let st = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args([
            "bench",
            "engine",
            "--service",
            "echo",
            "--engines",
            "cpu",
            "--window",
            "8,32",
            "--duration",
            "0.2",
            "--drivers",
            "1",
            "--repeat",
            "3",
            "--log-level",
            "warn",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let rows: Vec<&serde_json::Value> = v["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r.get("queries_per_s").is_some())
        .collect();
    assert_eq!(rows.len(), 2, "one row per window: {v}");
    for r in rows {
        let runs: Vec<f64> = r["queries_per_s_runs"]
            .as_array()
            .expect("every run's rate")
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(runs.len(), 3, "{r}");
        assert!(runs.iter().all(|&q| q > 0.0), "{r}");
        let best = runs.iter().cloned().fold(0.0, f64::max);
        assert_eq!(r["queries_per_s"].as_f64().unwrap(), best, "{r}");
        assert_eq!(r["errors_runs"].as_array().unwrap().len(), 3, "{r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
