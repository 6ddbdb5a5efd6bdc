//! `cohort-lab bench batcher`: gpu-cohort's batching loop on CPU twin slots, driven through the
//! real rings, answers every request it admits with the probe's answer, and writes its
//! result; bad arguments are refused with a message.

use crate::product as common;
use common::{lab as cohort, Scratch};

#[test]
fn the_batcher_answers_every_request_and_records_the_run() {
    let dir = Scratch::new("batcher");
    let out = dir.path("batcher.json");
    let o = cohort(&[
        "bench",
        "batcher",
        "--drivers",
        "2",
        "--window",
        "1,64",
        "--max-cohort",
        "32",
        "--duration",
        "0.3",
        "--out",
        &out,
        "--log-level",
        "warn",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let runs = doc["results"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert!(r["answered"].as_u64().unwrap() > 0, "{r}");
        assert!(r["requests_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(
            r["latency_us"]["p99"].as_f64().unwrap() >= r["latency_us"]["p50"].as_f64().unwrap()
        );
    }
    assert!(
        doc["machine"].is_object() && doc["command"].is_string(),
        "{doc}"
    );
}

#[test]
fn bad_batcher_arguments_are_refused() {
    for args in [
        &["--drivers", "0"][..],
        &["--window", "0"],
        &["--payload", "0"],
    ] {
        let mut all = vec![
            "bench",
            "batcher",
            "--duration",
            "0.1",
            "--out",
            "/dev/null",
        ];
        all.extend_from_slice(args);
        let o = cohort(&all);
        assert!(!o.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("at least"), "{args:?}: {err}");
    }
}
