//! The REST JSON surface without a server: each operation, and bad input answered with a
//! clear error and no change.

use cohort_collections::api::handle;
use cohort_collections::schema::limits;
use cohort_collections::Store;
use serde_json::{json, Value};

fn store(name: &str) -> (Store, std::path::PathBuf) {
    let d = std::env::temp_dir().join(format!("cohort-api-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    (Store::open(&d).unwrap(), d)
}

fn call(s: &Store, method: &str, path: &str, body: &str) -> (u16, Value) {
    let a = handle(s, method, path, body.as_bytes());
    (a.status, serde_json::from_slice(&a.body).unwrap())
}

fn ok(s: &Store, method: &str, path: &str, body: Value) -> Value {
    let (st, v) = call(s, method, path, &body.to_string());
    assert_eq!(st, 200, "{method} {path} {body}: {v}");
    v
}

#[test]
fn every_operation_answers_as_documented() {
    let (s, dir) = store("ops");
    let d = ok(
        &s,
        "PUT",
        "/v1/collections/shop",
        json!({"dim": 3, "metric": "cosine", "element": "f16", "attributes": {"color": "keyword", "price": "float"}}),
    );
    assert_eq!(
        d,
        json!({"name": "shop", "dim": 3, "metric": "cosine", "element": "f16", "attributes": {"color": "keyword", "price": "float"}, "count": 0,
               "searches": {"device": null, "on_device": 0, "on_cpu": 0, "selective_on_cpu": 0,
                            "device_passes": 0, "requests_in_passes": 0}})
    );
    ok(
        &s,
        "PUT",
        "/v1/collections/u8s",
        json!({"dim": 2, "element": "u8"}),
    );
    let list = ok(&s, "GET", "/v1/collections", json!(null));
    assert_eq!(list["collections"].as_array().unwrap().len(), 2);
    let r = ok(
        &s,
        "POST",
        "/v1/collections/shop/upsert",
        json!({"points": [
            {"id": 1, "vector": [1, 0, 0], "attributes": {"color": "red", "price": 5}},
            {"id": 2, "vector": [0, 1, 0], "attributes": {"color": "blue", "price": 7.5}},
            {"id": 3, "vector": [0.9, 0.1, 0], "attributes": {"color": "blue"}},
        ]}),
    );
    assert_eq!(r, json!({"upserted": 3}));
    let r = ok(
        &s,
        "POST",
        "/v1/collections/shop/search",
        json!({"vectors": [[1, 0, 0]], "k": 2, "with_attributes": true}),
    );
    let hits = r["results"][0].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(
        (hits[0]["id"].clone(), hits[1]["id"].clone()),
        (json!(1), json!(3))
    );
    assert!(hits[0]["distance"].as_f64().unwrap().abs() < 1e-6);
    assert_eq!(hits[0]["attributes"], json!({"color": "red", "price": 5.0}));
    let r = ok(
        &s,
        "POST",
        "/v1/collections/shop/search",
        json!({"vectors": [[1, 0, 0], [0, 1, 0]], "k": 5, "filter": {"eq": ["color", "blue"]}}),
    );
    let ids = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&r["results"][0]), vec![3, 2]);
    assert_eq!(ids(&r["results"][1]), vec![2, 3]);
    let r = ok(
        &s,
        "POST",
        "/v1/collections/shop/get",
        json!({"ids": [2, 99]}),
    );
    assert_eq!(
        r,
        json!({"points": [{"id": 2, "vector": [0.0, 1.0, 0.0], "attributes": {"color": "blue", "price": 7.5}}]})
    );
    assert_eq!(
        ok(
            &s,
            "POST",
            "/v1/collections/shop/delete",
            json!({"filter": {"range": ["price", {"gt": 6}]}})
        ),
        json!({"deleted": 1})
    );
    assert_eq!(
        ok(
            &s,
            "POST",
            "/v1/collections/shop/delete",
            json!({"ids": [1, 42]})
        ),
        json!({"deleted": 1})
    );
    assert_eq!(
        ok(&s, "GET", "/v1/collections/shop", json!(null))["count"],
        json!(1)
    );
    // An upsert of an existing id replaces it.
    ok(
        &s,
        "POST",
        "/v1/collections/shop/upsert",
        json!({"points": [{"id": 3, "vector": [0, 0, 2]}]}),
    );
    let r = ok(&s, "POST", "/v1/collections/shop/get", json!({"ids": [3]}));
    assert_eq!(r["points"][0]["attributes"], json!({}));
    assert_eq!(
        ok(&s, "GET", "/v1/collections/shop", json!(null))["count"],
        json!(1)
    );
    assert_eq!(
        ok(&s, "DELETE", "/v1/collections/shop", json!(null)),
        json!({"dropped": "shop"})
    );
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let (s, dir) = store("bad");
    ok(
        &s,
        "PUT",
        "/v1/collections/c",
        json!({"dim": 2, "element": "u8", "attributes": {"n": "integer"}}),
    );
    ok(
        &s,
        "POST",
        "/v1/collections/c/upsert",
        json!({"points": [{"id": 1, "vector": [1, 2]}]}),
    );
    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        ("PUT", "/v1/collections/c", json!({"dim": 2}).to_string(), 409, "exists"),
        ("PUT", "/v1/collections/x", json!({"dim": 0}).to_string(), 400, "dim 0"),
        ("PUT", "/v1/collections/x", json!({"dim": 2, "metric": "hamming"}).to_string(), 400, "unknown variant"),
        ("PUT", "/v1/collections/x", json!({"dim": 2, "attributes": {"a": "date"}}).to_string(), 400, "unknown variant"),
        ("PUT", "/v1/collections/x%2F..", json!({"dim": 2}).to_string(), 400, "collection name"),
        ("GET", "/v1/collections/nope", String::new(), 404, "no collection"),
        ("POST", "/v1/collections/nope/upsert", json!({"points": []}).to_string(), 404, "no collection"),
        ("POST", "/v1/collections/c/upsert", json!({"points": [{"id": 2, "vector": [1, 2, 3]}]}).to_string(), 400, "dimension 3"),
        ("POST", "/v1/collections/c/upsert", json!({"points": [{"id": 2, "vector": [1.5, 2]}]}).to_string(), 400, "0..=255"),
        ("POST", "/v1/collections/c/upsert", r#"{"points":[{"id":2,"vector":[NaN,1]}]}"#.to_string(), 400, "body"),
        ("POST", "/v1/collections/c/upsert", r#"{"points":[{"id":2,"vector":[1e400,1]}]}"#.to_string(), 400, "body"),
        ("POST", "/v1/collections/c/upsert", json!({"points": [{"id": 2, "vector": [1, 2], "attributes": {"m": 1}}]}).to_string(), 400, "unknown attribute \"m\""),
        ("POST", "/v1/collections/c/upsert", json!({"points": [{"id": 2, "vector": [1, 2], "attributes": {"n": "x"}}]}).to_string(), 400, "expected an integer"),
        ("POST", "/v1/collections/c/upsert", json!({"points": [{"id": 2, "vector": [1, 2]}, {"id": 3, "vector": [1, 2]}, {"id": 2, "vector": [2, 2]}]}).to_string(), 400, "id 2 appears twice"),
        ("POST", "/v1/collections/c/upsert", json!({"points": [{"id": -2, "vector": [1, 2]}]}).to_string(), 400, "body"),
        ("POST", "/v1/collections/c/upsert", json!({"points": vec![json!({"id": 9, "vector": [1, 2]}); limits::MAX_BATCH + 1]}).to_string(), 413, "over the limit of 10000"),
        ("POST", "/v1/collections/c/search", json!({"vectors": [[1, 2]], "filter": {"eq": ["color", "red"]}}).to_string(), 400, "unknown attribute"),
        ("POST", "/v1/collections/c/search", json!({"vectors": [[1, 2]], "filter": {"eq": ["n", "red"]}}).to_string(), 400, "expected an integer"),
        ("POST", "/v1/collections/c/search", json!({"vectors": [[1, 2]], "k": 0}).to_string(), 400, "k 0"),
        ("POST", "/v1/collections/c/search", json!({"vectors": []}).to_string(), 400, "no query"),
        ("POST", "/v1/collections/c/search", json!({"vectors": [[1]]}).to_string(), 400, "dimension 1"),
        ("POST", "/v1/collections/c/search", json!({"vector": [[1, 2]]}).to_string(), 400, "unknown field"),
        ("POST", "/v1/collections/c/delete", json!({}).to_string(), 400, "either"),
        ("POST", "/v1/collections/c/delete", json!({"ids": [1], "filter": {"eq": ["n", 1]}}).to_string(), 400, "either"),
        ("POST", "/v1/collections/c/frobnicate", String::new(), 404, "no route"),
        ("PATCH", "/v1/collections/c", String::new(), 405, "not allowed"),
        ("GET", "/v1/collections/c/search", String::new(), 405, "not allowed"),
    ];
    for (m, p, body, status, says) in cases {
        let (st, v) = call(&s, m, p, &body);
        let shown = if body.len() > 200 {
            &body[..200]
        } else {
            &body
        };
        assert_eq!(st, status, "{m} {p} {shown}: {v}");
        assert!(
            v["message"].as_str().unwrap().contains(says),
            "{m} {p} {shown}: {v}"
        );
        assert!(v["error"].is_string());
    }
    // Nothing changed.
    assert_eq!(
        ok(&s, "GET", "/v1/collections/c", json!(null))["count"],
        json!(1)
    );
    assert_eq!(
        ok(&s, "GET", "/v1/collections", json!(null))["collections"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}
