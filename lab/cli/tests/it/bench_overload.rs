//! `cohort-lab bench overload` end to end on this machine: a pinned echo server on core 0 and
//! the generator on core 1, UDP, a capacity run and two multiples of it; every point carries
//! its measurement and the goals are judged (no figure is asserted: benchmarks hold those).

use crate::common;

use std::process::Command;

#[test]
fn overload_bench_measures_each_multiple_and_judges_the_goals() {
    if !common::two_cores_or_skip("overload bench") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("cohort-bench-overload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("overload.json");
    // Two free ports in a row (the transport's, then the admin listener's).
    let port = loop {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            break p;
        }
    };
    let st = Command::new(env!("CARGO_BIN_EXE_cohort-lab"))
        .args([
            "bench",
            "overload",
            "--transports",
            "udp",
            "--multiples",
            "0.5,1.5",
            "--capacity-concurrency",
            "8",
            "--duration",
            "0.5",
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
    assert!(st.success(), "bench overload exited with {st}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    for k in ["machine", "commit", "command"] {
        assert!(v.get(k).is_some(), "{k} missing");
    }
    let t = &v["results"][0];
    assert_eq!(t["transport"], "udp");
    assert!(t["capacity"]["rate"].as_f64().unwrap() > 0.0, "{t}");
    let points = t["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for p in points {
        for k in [
            "offered",
            "goodput",
            "refused",
            "no_answer",
            "answered_p99_us",
            "refusal_p99_us",
            "server_refused_by_reason",
            "peak_rss_bytes",
            "generator_saturated",
        ] {
            assert!(p.get(k).is_some(), "{k} missing from {p}");
        }
        assert!(p["peak_rss_bytes"].as_u64().unwrap() > 0, "{p}");
    }
    let judged = t["goals"]["points"].as_array().unwrap();
    assert_eq!(judged.len(), 1, "only the multiple over 1 is judged");
    assert!(judged[0]["met"].is_boolean());
    let _ = std::fs::remove_dir_all(&dir);
}
