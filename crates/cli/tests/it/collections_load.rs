//! `cohort load --collection` against the real `cohort serve --data-dir DIR --http ADDR`:
//! the load creates and fills a collection, then drives searches with a share of upserts and
//! deletes open loop; every answer must be right, and afterwards the collection must show
//! the writes (points replaced by upserts, points gone by deletes, each point as written).

use crate::common;
use cohort_load::collections::{CollectionLoad, TAGS};
use common::{cohort, http_get, http_post, Scratch, Served};
use serde_json::{json, Value};
use std::net::SocketAddr;

/// The JSON body of a whole HTTP/1.1 response (status 200 required).
fn body(response: &str) -> Value {
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{response}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}

const POINTS: u64 = 2000;
const DIM: usize = 16;
const SEED: u64 = 5;

fn load_args<'a>(http: &'a str, json_out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "load",
        "--target",
        http,
        "--collection",
        "items",
        "--collection-points",
        "2000",
        "--collection-dim",
        "16",
        "--seed",
        "5",
        "--log-level",
        "warn",
        "--json",
        json_out,
    ];
    a.extend_from_slice(extra);
    a
}

#[test]
fn a_collection_load_with_writes_is_answered_right_and_the_writes_land() {
    let d = Scratch::new("coll-load");
    let s = Served::start(&["--service", "echo", "--data-dir", &d.path("data")]);
    let addr: SocketAddr = s.http.unwrap();
    let http = format!("http://{addr}");
    let out = d.path("report.json");

    // Without --create a missing collection is refused, naming the fix.
    let o = cohort(&load_args(
        &http,
        &out,
        &["--rate", "100", "--duration", "0.2"],
    ));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--create"), "{err}");
    // A collection is loaded over HTTP only.
    let udp = format!("udp://{}", s.udp.unwrap());
    let o = cohort(&load_args(
        &udp,
        &out,
        &["--rate", "100", "--duration", "0.2"],
    ));
    assert!(!o.status.success());

    let o = cohort(&load_args(
        &http,
        &out,
        &[
            "--create",
            "--filter-selectivity",
            "0.2",
            "--queries-per-request",
            "3",
            "--write-share",
            "0.3",
            "--write-batch",
            "10",
            "--rate",
            "400",
            "--poisson",
            "--duration",
            "2",
            "--warmup",
            "0.3",
            "--connections",
            "4",
        ],
    ));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("search:"), "{stdout}");
    assert!(
        stderr.contains("collection items: 2000 live points"),
        "{stderr}"
    );

    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(r["service"], "collections", "{r:#}");
    // Filtered searches of three queries, every hit matching, no deleted point answered;
    // recall is not scored while the points change.
    assert_eq!(r["filter"], json!({"range": ["tag", {"lt": 200}]}), "{r:#}");
    assert_eq!(r["queries_per_request"], 3, "{r:#}");
    assert_eq!(r["filter_violations"], 0, "{r:#}");
    assert_eq!(r["deleted_points_answered"], 0, "{r:#}");
    assert!(r.get("recall_at_k").is_none(), "{r:#}");
    assert!(stderr.contains("recall not scored"), "{stderr}");
    let sent = r["sent"].as_u64().unwrap();
    assert!(sent >= 600, "{r:#}");
    assert_eq!(r["ok"].as_u64(), Some(sent), "every answer right: {r:#}");
    assert_eq!(r["errors"], json!({}), "{r:#}");
    assert_eq!(r["unexpected_answers"], 0, "{r:#}");
    let kinds = &r["per_type"];
    let answers = |k: &str| kinds[k]["answers"].as_u64().unwrap_or(0);
    for k in ["search", "upsert", "delete"] {
        assert!(answers(k) > 0, "no {k} answered: {r:#}");
        assert_eq!(kinds[k]["errors"], 0, "{r:#}");
    }
    assert_eq!(
        answers("search") + answers("upsert") + answers("delete"),
        sent
    );
    // 30 % writes (within what a few hundred draws give).
    let writes = (answers("upsert") + answers("delete")) as f64 / sent as f64;
    assert!((0.2..0.4).contains(&writes), "{writes}: {r:#}");
    assert!(r["upserts_right"].as_u64().unwrap() >= answers("upsert"));
    let deleted = r["points_deleted"].as_u64().unwrap();
    assert!(deleted > 0, "no delete removed a point: {r:#}");

    // The collection after the run: deletes removed points (not all came back by a later
    // upsert), upserts replaced vectors, every point left is one the load wrote.
    let count = body(&http_get(addr, "/v1/collections/items"))["count"]
        .as_u64()
        .unwrap();
    assert!(count < POINTS, "{count}");
    assert!(count >= POINTS - deleted, "{count} {deleted}");
    let ids: Vec<u64> = (0..POINTS).collect();
    let got = body(&http_post(
        addr,
        "/v1/collections/items/get",
        &json!({ "ids": ids }).to_string(),
    ));
    let points = got["points"].as_array().unwrap();
    assert_eq!(points.len() as u64, count);
    let fill = CollectionLoad {
        name: "items".into(),
        dim: DIM,
        points: POINTS,
        write_share: 0.3,
        write_batch: 10,
        k: 10,
        seed: SEED,
        queries_per_request: 1,
        filter_selectivity: None,
    }
    .fill_vectors(0, POINTS as usize);
    let mut replaced = 0;
    for p in points {
        let id = p["id"].as_u64().unwrap();
        assert_eq!(p["attributes"], json!({"tag": id % TAGS}), "{p}");
        let v: Vec<f32> = serde_json::from_value(p["vector"].clone()).unwrap();
        assert_eq!(v.len(), DIM);
        replaced += (v != fill.row(id as usize)) as u64;
    }
    assert!(replaced > 0, "no upsert replaced a vector");

    // A second run without --create loads the collection as it is.
    let o = cohort(&load_args(
        &http,
        &out,
        &["--rate", "200", "--duration", "0.5", "--warmup", "0.1"],
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(r["ok"], r["sent"], "{r:#}");
    assert!(r["per_type"]["search"]["answers"].as_u64().unwrap() > 0);
}

/// Read-only filtered loads of a freshly filled collection are scored against the exact
/// answers over the matching points, at a wide and at a narrow selectivity (the server's
/// IVF plan and its exact plan), and --min-recall holds the run to it.
#[test]
fn a_read_only_filtered_load_reports_recall_against_exact_answers() {
    let d = Scratch::new("coll-recall");
    let s = Served::start(&["--service", "echo", "--data-dir", &d.path("data")]);
    let addr: SocketAddr = s.http.unwrap();
    let http = format!("http://{addr}");
    let out = d.path("report.json");
    // 6000 points: past the 4096 at which the collection trains its IVF.
    let run = |sel: &str, qpr: &str| {
        let o = cohort(&[
            "load",
            "--target",
            &http,
            "--collection",
            "ro",
            "--create",
            "--collection-points",
            "6000",
            "--collection-dim",
            "16",
            "--write-share",
            "0",
            "--filter-selectivity",
            sel,
            "--queries-per-request",
            qpr,
            "--rate",
            "200",
            "--duration",
            "1.5",
            "--warmup",
            "0.2",
            "--connections",
            "2",
            "--min-recall",
            "0.9",
            "--log-level",
            "warn",
            "--json",
            &out,
        ]);
        let stderr = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{stderr}");
        assert!(stderr.contains("recall@10 scored"), "{stderr}");
        let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(r["ok"], r["sent"], "{r:#}");
        assert_eq!(r["filter_violations"], 0, "{r:#}");
        assert!(r["recall_queries"].as_u64().unwrap() > 0, "{r:#}");
        let recall = r["recall_at_k"].as_f64().unwrap();
        assert!(recall >= 0.9, "{r:#}");
        r
    };
    let wide = run("0.5", "4");
    assert_eq!(wide["filter_selectivity"], 0.5);
    let narrow = run("0.005", "1");
    assert_eq!(narrow["filter"], json!({"range": ["tag", {"lt": 5}]}));
    // 30 points match: the server scans them exactly.
    assert_eq!(narrow["recall_at_k"], 1.0, "{narrow:#}");
}

/// A collection load at `target` (tcp:// or grpc://) with `--collection-http http`: the
/// collection made and filled over REST, then searches and writes at the target, every
/// answer checked as over HTTP; a read-only run scores recall, a run with writes lands its
/// upserts and its deletes. Returns the points the deletes removed.
fn load_over(target: &str, http: SocketAddr, d: &Scratch) -> u64 {
    let http_url = format!("http://{http}");
    let out = d.path("report.json");
    let run = |extra: &[&str]| {
        let mut a = load_args(target, &out, &["--collection-http", &http_url]);
        a.extend_from_slice(&[
            "--rate",
            "300",
            "--duration",
            "1.5",
            "--warmup",
            "0.2",
            "--connections",
            "2",
        ]);
        a.extend_from_slice(extra);
        let o = cohort(&a);
        let stderr = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{stderr}");
        let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(r["ok"], r["sent"], "{r:#}");
        assert!(r["ok"].as_u64().unwrap() > 100, "{r:#}");
        assert_eq!(r["filter_violations"], 0, "{r:#}");
        (r, stderr)
    };
    let (r, stderr) = run(&[
        "--create",
        "--write-share",
        "0",
        "--filter-selectivity",
        "0.05",
        "--queries-per-request",
        "4",
        "--min-recall",
        "0.9",
    ]);
    assert!(stderr.contains("recall@10 scored"), "{stderr}");
    assert!(r["recall_queries"].as_u64().unwrap() > 0, "{r:#}");
    assert!(r["recall_at_k"].as_f64().unwrap() >= 0.9, "{r:#}");
    let (r, _) = run(&["--write-share", "0.5"]);
    assert!(r["points_upserted"].as_u64().unwrap() > 0, "{r:#}");
    assert!(r["deletes_right"].as_u64().unwrap() > 0, "{r:#}");
    let deleted = r["points_deleted"].as_u64().unwrap();
    assert!(deleted > 0, "no delete removed a point: {r:#}");
    assert_eq!(r["deleted_points_answered"], 0, "{r:#}");
    // The deletes landed: the collection holds fewer than the filled points (upserts only
    // replace or bring back ids of the fill).
    let v = body(&http_get(http, "/v1/collections/items"));
    let n = v["count"].as_u64().unwrap();
    assert!(n < POINTS, "{n} points after deletes of {deleted}: {v}");
    // Without --collection-http such a load is refused, saying what to give.
    let o = cohort(&load_args(
        target,
        &out,
        &["--rate", "100", "--duration", "0.2"],
    ));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--collection-http"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    deleted
}

/// `--target tcp://`: searches, upserts and deletes as native frames (service 7; deletes
/// are op 3), counted by the server under "collections".
#[test]
fn a_collection_load_over_native_tcp_frames() {
    let d = Scratch::new("coll-frames");
    let s = Served::start(&["--service", "echo", "--data-dir", &d.path("data")]);
    load_over(&format!("tcp://{}", s.tcp.unwrap()), s.http.unwrap(), &d);
    let framed: f64 = http_get(s.http.unwrap(), "/metrics")
        .lines()
        .filter(|l| {
            l.starts_with("cohort_requests_total{")
                && l.contains("service=\"collections\"")
                && l.contains("outcome=\"ok\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(framed > 200.0, "{framed} collections frames answered ok");
}

/// `--target grpc://`: searches, upserts and deletes as calls of the collections' gRPC
/// service (`cohort.collections.v1.Collections`), its replies checked as REST's answers.
#[test]
fn a_collection_load_over_the_grpc_service() {
    let d = Scratch::new("coll-grpc");
    let s = Served::start(&[
        "--service",
        "echo",
        "--data-dir",
        &d.path("data"),
        "--grpc",
        "127.0.0.1:0",
    ]);
    load_over(&format!("grpc://{}", s.grpc.unwrap()), s.http.unwrap(), &d);
}
