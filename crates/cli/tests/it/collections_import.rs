//! `cohort collections import`: a static k-NN index file seeds a collection of a --data-dir,
//! which `cohort serve --data-dir` then serves beside the knn service on the same file: the
//! collection's answers are the index's rows by row number (recall against the exact top-10),
//! and bad imports are refused with a clear error, leaving the directory as it was.

use crate::common;
use common::{cohort, http_get, http_post, knn_files, Scratch, Served};
use serde_json::{json, Value};
use std::path::Path;

fn body(response: &str) -> Value {
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{response}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}

#[test]
fn an_imported_index_is_served_as_a_collection() {
    let d = Scratch::new("coll-import");
    let f = knn_files(&d);
    let data = d.path("dir");
    let import = |name: &str, index: &str, extra: &[&str]| {
        let mut a = vec![
            "collections",
            "import",
            "--index",
            index,
            "--data-dir",
            &data,
            "--name",
            name,
            "--log-level",
            "warn",
        ];
        a.extend_from_slice(extra);
        cohort(&a)
    };
    let o = import("sift", &f.index, &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains("collection sift: 20000 points of dim 32 (l2, u8)"),
        "{stdout}"
    );
    assert!(stdout.contains("64 centroids"), "{stdout}");
    // Refused with a clear error, changing nothing: the name taken, not an index, a bad
    // element, a bad name.
    let junk = d.path("junk");
    std::fs::write(&junk, "not an index").unwrap();
    for (name, index, extra, want) in [
        ("sift", f.index.as_str(), &[][..], "exists"),
        ("other", junk.as_str(), &[][..], "junk"),
        (
            "other",
            f.index.as_str(),
            &["--element", "f64"][..],
            "--element",
        ),
        ("-x", f.index.as_str(), &[][..], "name"),
    ] {
        let o = import(name, index, extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name} {index} {extra:?}");
        assert!(err.contains(want), "{want}: {err}");
    }
    let names: Vec<String> = std::fs::read_dir(Path::new(&data).join("collections"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["sift"]);

    // Served with the knn service on the same file.
    let s = Served::start(&[
        "--service",
        "knn:cpu",
        "--index",
        &f.index,
        "--data-dir",
        &data,
    ]);
    let addr = s.http.unwrap();
    // A second import while the server holds the directory: refused, naming the lock.
    let o = import("again", &f.index, &[]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("LOCK"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let desc = body(&http_get(addr, "/v1/collections/sift"));
    assert_eq!(desc["count"], 20000, "{desc}");
    assert_eq!(
        (&desc["dim"], &desc["metric"], &desc["element"]),
        (&json!(32), &json!("l2"), &json!("u8"))
    );
    let q = cohort_ivf::vecfile::read_vectors(Path::new(&f.queries)).unwrap();
    let (_, gdim, gt) = cohort_ivf::vecfile::read_ivecs(Path::new(&f.gt)).unwrap();
    let nq = 50;
    let vectors: Vec<&[f32]> = (0..nq).map(|i| q.row(i)).collect();
    let r = body(&http_post(
        addr,
        "/v1/collections/sift/search",
        &json!({"vectors": vectors, "k": 10, "nprobe": 16}).to_string(),
    ));
    let mut hits = 0;
    for (i, res) in r["results"].as_array().unwrap().iter().enumerate() {
        let truth: Vec<u64> = gt[i * gdim..i * gdim + 10]
            .iter()
            .map(|&x| x as u64)
            .collect();
        hits += res
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| truth.contains(&h["id"].as_u64().unwrap()))
            .count();
    }
    let recall = hits as f64 / (nq * 10) as f64;
    assert!(recall >= 0.9, "recall@10 {recall}");
    // The static service answers from the same file still.
    let knn = http_post(
        addr,
        "/v1/knn",
        &json!({"vector": q.row(0), "k": 10}).to_string(),
    );
    assert!(knn.starts_with("HTTP/1.1 200"), "{knn}");
}
