//! The Grafana dashboard shipped in deploy/grafana/cohort.json queries only what the server
//! exports: every metric its queries name is a sample name of `/metrics` (as `Metrics::encode`
//! writes it once every family has a value), every label it selects or groups by is one that
//! metric carries (or one Prometheus attaches to every target), and every variable it uses is
//! defined. A renamed metric or label fails here instead of leaving an empty panel.

use cohort_engine::metrics::{GpuBoardReading, GpuLabels, Metrics, ServiceLabel};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Labels Prometheus adds to every scraped series (the target's), not the server.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];
/// Grafana's own variables.
const BUILTIN_VARIABLES: [&str; 2] = ["__rate_interval", "__interval"];

fn dashboard() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/cohort.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `/metrics` of a server with a cpu and a GPU service after every kind of event was recorded
/// once: sample name -> the label names its samples carry.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let services = HashMap::from([
        (
            1,
            ServiceLabel {
                name: "echo".into(),
                engine: "inline".into(),
            },
        ),
        (
            2,
            ServiceLabel {
                name: "knn".into(),
                engine: "gpu-cohort".into(),
            },
        ),
    ]);
    let m = Metrics::new(services);
    let ms = Duration::from_millis(1);
    m.answered(1, "ok", ms);
    m.answered(2, "overloaded", ms);
    m.stage("gpu-cohort", "gpu", ms, ms);
    m.cohort("gpu-cohort", 64);
    m.set_in_flight("udp-0", 3);
    m.datagrams("rx", 2);
    m.dropped("not_cohort");
    m.udp_io_thread("recvmmsg");
    m.refused_connection("max_connections");
    m.timed_out_connection("idle");
    m.tcp_connections.inc();
    m.tcp_protocol_errors.inc();
    m.http_requests.inc();
    m.connections_open.set(1);
    m.buffered_bytes.set(10);
    m.gpu_memory_used
        .get_or_create(&GpuLabels { gpu: "0".into() })
        .set(1 << 20);
    m.record_gpu_board(&GpuBoardReading {
        gpu: 0,
        uuid: "GPU-0".into(),
        watts: 300.0,
        utilization: Some(0.5),
        joules_since_last: 3.0,
    });
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in m.encode().lines().filter(|l| !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_string()).or_default();
        if line[name_end..].starts_with('{') {
            let body = &line[name_end + 1..line.rfind('}').expect("a closed label set")];
            for pair in body.split(',').filter(|p| !p.is_empty()) {
                labels.insert(pair.split('=').next().unwrap().to_string());
            }
        }
    }
    out
}

/// Every query string of the dashboard: panel targets and template variable queries.
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                match (k.as_str(), x) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    ("query", Value::Object(q)) => {
                        if let Some(Value::String(s)) = q.get("query") {
                            out.push(s.clone());
                        }
                    }
                    _ => queries(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
        _ => {}
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The server's metric names a query uses, each with the label names of its selector.
fn selectors(q: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let bytes: Vec<char> = q.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let at_word = i == 0 || !is_ident(bytes[i - 1]);
        let rest: String = bytes[i..].iter().collect();
        if at_word && (rest.starts_with("cohort_") || rest.starts_with("nv_")) {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            i += name.chars().count();
            let mut labels = Vec::new();
            if bytes.get(i) == Some(&'{') {
                // Matchers `label op "value"`, values quoted (they may hold commas or braces).
                i += 1;
                loop {
                    while bytes.get(i).is_some_and(|&c| c == ',' || c == ' ') {
                        i += 1;
                    }
                    match bytes.get(i) {
                        Some('}') => break,
                        None => panic!("{q}: an unclosed selector"),
                        _ => {}
                    }
                    let label: String = bytes[i..].iter().take_while(|&&c| is_ident(c)).collect();
                    assert!(!label.is_empty(), "{q}: a matcher without a label at {i}");
                    i += label.len();
                    while bytes.get(i).is_some_and(|&c| "=!~ ".contains(c)) {
                        i += 1;
                    }
                    assert_eq!(
                        bytes.get(i),
                        Some(&'"'),
                        "{q}: {label}'s value is not quoted"
                    );
                    i += 1;
                    while bytes.get(i).is_some_and(|&c| c != '"') {
                        i += if bytes[i] == '\\' { 2 } else { 1 };
                    }
                    i += 1;
                    labels.push(label);
                }
                i += 1;
            }
            out.push((name, labels));
        } else {
            i += 1;
        }
    }
    out
}

/// The label names of every `by (...)` and `label_values(..., LABEL)` of a query.
fn grouped_labels(q: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in q.split("by (").skip(1) {
        let list = &part[..part.find(')').expect("closed by list")];
        out.extend(list.split(',').map(|l| l.trim().to_string()));
    }
    if let Some(rest) = q.strip_prefix("label_values(") {
        let last = rest.trim_end_matches(')').rsplit(',').next().unwrap();
        out.push(last.trim().to_string());
    }
    out
}

#[test]
fn every_metric_and_label_the_dashboard_queries_is_exported() {
    let exported = exported();
    let mut qs = Vec::new();
    queries(&dashboard(), &mut qs);
    assert!(
        qs.len() > 20,
        "the dashboard's queries were found ({})",
        qs.len()
    );
    let mut used = BTreeSet::new();
    for q in &qs {
        let sel = selectors(q);
        assert!(!sel.is_empty(), "{q}: queries no Cohort metric");
        let mut on_these = BTreeSet::new();
        for (name, labels) in &sel {
            let Some(has) = exported.get(name) else {
                panic!("{q}: {name} is not exported; /metrics has {exported:#?}");
            };
            for l in labels {
                assert!(
                    has.contains(l) || TARGET_LABELS.contains(&l.as_str()),
                    "{q}: {name} has no label {l} (it has {has:?})"
                );
            }
            on_these.extend(has.iter().cloned());
            used.insert(name.clone());
        }
        for l in grouped_labels(q) {
            assert!(
                on_these.contains(&l) || TARGET_LABELS.contains(&l.as_str()),
                "{q}: groups by {l}, which none of its metrics carries"
            );
        }
    }
    // What the dashboard is for: rate and errors, latency, queue depth, GPU use and power.
    for needed in [
        "cohort_requests_total",
        "cohort_request_duration_seconds_bucket",
        "cohort_queue_wait_seconds_bucket",
        "cohort_in_flight",
        "nv_gpu_utilization",
        "nv_gpu_power_usage",
        "nv_energy_consumption_total",
    ] {
        assert!(
            used.contains(needed),
            "the dashboard does not show {needed}"
        );
    }
}

#[test]
fn the_dashboard_defines_every_variable_it_uses_and_ids_are_unique() {
    let d = dashboard();
    let defined: BTreeSet<String> = d["templating"]["list"]
        .as_array()
        .expect("template variables")
        .iter()
        .map(|v| v["name"].as_str().expect("a named variable").to_string())
        .collect();
    let text = d.to_string();
    for (i, _) in text.match_indices('$') {
        let rest = text[i + 1..].trim_start_matches('{');
        let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        assert!(
            defined.contains(&name) || BUILTIN_VARIABLES.contains(&name.as_str()),
            "${name} is used but not defined (defined: {defined:?})"
        );
    }
    let mut ids = BTreeSet::new();
    let panels = d["panels"].as_array().expect("panels");
    for p in panels {
        let id = p["id"].as_u64().expect("a panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(x + w <= 24, "panel {id} runs past the grid's 24 columns");
        for t in p["targets"].as_array().into_iter().flatten() {
            assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
}

#[test]
fn the_query_reader_finds_metrics_labels_and_groupings() {
    let q = r#"sum by (le, service) (rate(cohort_request_duration_seconds_bucket{instance=~"$instance", service="a,b"}[5m])) / nv_gpu_power_usage"#;
    let s = selectors(q);
    assert_eq!(s[0].0, "cohort_request_duration_seconds_bucket");
    assert_eq!(s[1], ("nv_gpu_power_usage".to_string(), vec![]));
    assert_eq!(grouped_labels(q), ["le", "service"]);
    assert_eq!(
        grouped_labels("label_values(cohort_requests_total, service)"),
        ["service"]
    );
}
