//! `GET /openapi.json` against the real server: every route it answers is documented, and
//! every documented route answers as documented - each service's example gets 200 and an
//! answer that validates against the documented schema, a body that is not the service's
//! request gets the documented 400 and the Error body, and the fixed routes answer their
//! documented content. The schemas are checked with a validator of exactly the keywords the
//! document may use (it fails on any other, so none is silently skipped).

use crate::common;

use common::{cohort, http_get, http_post, Scratch, Served};
use serde_json::Value;
use std::collections::BTreeSet;

const KEYWORDS: [&str; 10] = [
    "type",
    "properties",
    "required",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "description",
    "$ref",
];

/// `v` against `schema` (the keywords above; `$ref` into `doc`'s components): the first
/// violation, with its JSON path.
fn violation(doc: &Value, schema: &Value, v: &Value, at: &str) -> Option<String> {
    let o = schema.as_object().expect("a schema is an object");
    for k in o.keys() {
        assert!(
            KEYWORDS.contains(&k.as_str()),
            "{at}: keyword {k} not understood"
        );
    }
    if let Some(r) = o.get("$ref").and_then(Value::as_str) {
        let name = r
            .strip_prefix("#/components/schemas/")
            .expect("a local $ref");
        return violation(doc, &doc["components"]["schemas"][name], v, at);
    }
    let ok_type = match o.get("type").and_then(Value::as_str) {
        None => true,
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some(t) => panic!("{at}: type {t} not understood"),
    };
    if !ok_type {
        return Some(format!("{at}: {v} is not a {}", o["type"]));
    }
    if let (Some(n), Some(min)) = (v.as_f64(), o.get("minimum").and_then(Value::as_f64)) {
        if n < min {
            return Some(format!("{at}: {n} under {min}"));
        }
    }
    if let (Some(n), Some(max)) = (v.as_f64(), o.get("maximum").and_then(Value::as_f64)) {
        if n > max {
            return Some(format!("{at}: {n} over {max}"));
        }
    }
    if let Some(a) = v.as_array() {
        let len = a.len() as u64;
        if o.get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| len < m)
            || o.get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| len > m)
        {
            return Some(format!("{at}: {len} items"));
        }
        if let Some(items) = o.get("items") {
            for (i, x) in a.iter().enumerate() {
                if let Some(e) = violation(doc, items, x, &format!("{at}[{i}]")) {
                    return Some(e);
                }
            }
        }
    }
    if let Some(m) = v.as_object() {
        for r in o
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap();
            if !m.contains_key(r) {
                return Some(format!("{at}: {r} is missing"));
            }
        }
        for (k, s) in o
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if let Some(x) = m.get(k) {
                if let Some(e) = violation(doc, s, x, &format!("{at}.{k}")) {
                    return Some(e);
                }
            }
        }
    }
    None
}

/// (status, content type, body) of a whole HTTP/1.1 answer read to its close.
fn parse(answer: &str) -> (u16, String, String) {
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, ctype, body.to_string())
}

/// The schema a documented answer of `status` has, as JSON.
fn answer_schema(op: &Value, status: u16) -> &Value {
    let r = &op["responses"][status.to_string()];
    assert!(r.is_object(), "status {status} is not documented in {op}");
    &r["content"]["application/json"]["schema"]
}

#[test]
fn every_route_is_documented_and_answers_as_documented() {
    let d = Scratch::new("openapi");
    let data = d.path("data");
    let ix = d.path("ix.index");
    let o = cohort(&[
        "data",
        "synth",
        "--n",
        "600",
        "--dim",
        "8",
        "--queries",
        "4",
        "--gt-k",
        "3",
        "--out",
        &data,
    ]);
    assert!(o.status.success(), "{o:?}");
    let base = format!("{data}/base.fvecs");
    let o = cohort(&[
        "index", "build", "--base", &base, "--nlist", "8", "--out", &ix,
    ]);
    assert!(o.status.success(), "{o:?}");
    let services = ["echo", "spin", "reverse", "lenet", "knn", "bank"];
    let list = services.join(",");
    let s = Served::start(&[
        "--service",
        &list,
        "--index",
        &ix,
        "--bank-users",
        "50",
        "--workers",
        "1",
    ]);
    let addr = s.http.expect("an HTTP listener");
    let (status, ctype, body) = parse(&http_get(addr, "/openapi.json"));
    assert_eq!((status, ctype.as_str()), (200, "application/json"));
    let doc: Value = serde_json::from_str(&body).expect("the document is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");

    // What the server answers (docs/protocol.md's routes) and what is documented: the same.
    let mut served: BTreeSet<String> = ["/healthz", "/metrics", "/openapi.json"]
        .map(String::from)
        .into();
    for name in services {
        served.insert(if name == "bank" {
            "/bank/{page}".to_string()
        } else {
            format!("/v1/{name}")
        });
    }
    served.extend(["/v2", "/v2/health/live", "/v2/health/ready"].map(String::from));
    for model in ["echo", "lenet", "knn"] {
        for tail in ["", "/ready", "/config", "/infer"] {
            served.insert(format!("/v2/models/{model}{tail}"));
        }
    }
    let documented: BTreeSet<String> = paths.keys().cloned().collect();
    assert_eq!(documented, served);

    for (path, item) in paths {
        if path == "/bank/{page}" {
            // Without a session a page answers the log-in page as 401; an unknown one 404.
            for (page, want) in [("account_summary", 401), ("no_such_page", 404)] {
                let (status, ctype, _) = parse(&http_get(addr, &format!("/bank/{page}")));
                assert_eq!(status, want, "GET /bank/{page}");
                assert!(
                    item["get"]["responses"][status.to_string()]["content"]["text/html"]
                        .is_object()
                );
                assert!(ctype.starts_with("text/html"), "{path}: {ctype}");
            }
            continue;
        }
        if let Some(op) = item.get("get") {
            let (status, ctype, body) = parse(&http_get(addr, path));
            assert_eq!(status, 200, "GET {path}");
            let content = &op["responses"]["200"]["content"];
            let documented_type = content.as_object().unwrap().keys().next().unwrap();
            assert!(
                ctype.starts_with(documented_type.as_str()),
                "{path}: {ctype}"
            );
            if documented_type == "application/json" {
                let v: Value = serde_json::from_str(&body).unwrap();
                let schema = &content["application/json"]["schema"];
                assert_eq!(violation(&doc, schema, &v, path), None);
            }
        }
        if let Some(op) = item.get("post") {
            let req = &op["requestBody"]["content"]["application/json"];
            let example = &req["example"];
            assert_eq!(
                violation(&doc, &req["schema"], example, path),
                None,
                "{path}: the example is not its own request"
            );
            let (status, _, body) = parse(&http_post(addr, path, &example.to_string()));
            assert_eq!(status, 200, "POST {path} {example}: {body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(violation(&doc, answer_schema(op, 200), &v, path), None);
            // Not the service's request: the documented 400 with the Error body.
            let (status, _, body) = parse(&http_post(addr, path, "[true]"));
            assert_eq!(status, 400, "POST {path} [true]: {body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(violation(&doc, answer_schema(op, 400), &v, path), None);
        }
    }
}

#[test]
fn the_validator_refuses_what_the_schema_refuses() {
    let doc = serde_json::json!({ "components": { "schemas": {} } });
    let s = serde_json::json!({ "type": "object", "required": ["a"], "properties": {
        "a": { "type": "array", "minItems": 2, "items": { "type": "integer", "minimum": 0, "maximum": 9 } } } });
    assert_eq!(
        violation(&doc, &s, &serde_json::json!({ "a": [1, 2] }), "$"),
        None
    );
    for bad in [
        serde_json::json!({}),
        serde_json::json!({ "a": [1] }),
        serde_json::json!({ "a": [1, 10] }),
        serde_json::json!({ "a": [1, -1] }),
        serde_json::json!({ "a": [1, 1.5] }),
        serde_json::json!([]),
    ] {
        assert!(violation(&doc, &s, &bad, "$").is_some(), "{bad} passed");
    }
}
