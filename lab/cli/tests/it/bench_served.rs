//! `cohort-lab bench served` end to end on this machine: a pinned echo server on core 0, the
//! generator on core 1, two rates; every point carries its measurement and a named limit.

use crate::common;

use std::process::Command;

#[test]
fn served_matrix_measures_each_point_and_names_its_limit() {
    if !common::two_cores_or_skip("served matrix") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("cohort-bench-served-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("served.json");
    // A free port for the server.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let st = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args([
            "bench",
            "served",
            "--services",
            "echo",
            "--engines",
            "cpu",
            "--cores",
            "1",
            "--client-cpus",
            "1",
            "--rates",
            "500,2k",
            "--duration",
            "0.6",
            "--warmup",
            "0.2",
            "--connections",
            "2",
            "--port",
            &port.to_string(),
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "bench served exited with {st}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(v["commit"].is_string() && v["machine"].is_object() && v["command"].is_string());
    let points = v["results"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 1);
    let p = &points[0];
    assert_eq!(p["server_cpus"], serde_json::json!([0]));
    let runs = p["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        let limit = r["limit"].as_str().unwrap();
        assert!(
            [
                "generator_saturated",
                "server_cores",
                "gpu",
                "none",
                "unnamed"
            ]
            .contains(&limit),
            "{r}"
        );
        // The server's CPU time was read from /proc while it ran.
        assert!(r["server_busy"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["report"]["ok"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["errors"].as_u64(), Some(0), "{r}");
    }
    assert!(dir.join("served-echo.png").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad matrices are refused at once with what is wrong, before any server starts.
#[test]
fn served_matrix_refuses_bad_arguments_with_a_message() {
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
            .args(["bench", "served"])
            .args(args)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(run(&["--cores", "0"]).contains("at least one core"));
    assert!(run(&["--cores", "1", "--client-cpus", "0"]).contains("cores of its own"));
    assert!(run(&["--services", "knn", "--client-cpus", "1"]).contains("knn needs --index"));
    assert!(run(&["--rates", "fast", "--client-cpus", "1"]).contains("fast"));
    assert!(run(&["--hog", "sometimes"]).contains("sometimes"));
}
