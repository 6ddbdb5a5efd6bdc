//! The live collections served by the real `cohort serve --data-dir DIR --http ADDR`, driven
//! over HTTP by a real client (hyper): every route, bad input refused with the gateway's JSON
//! errors, filtered search, /openapi.json; then kill -9 under concurrent writers and a
//! restart on the same directory: every acknowledged write present, exactly once.

use crate::common;
use bytes::Bytes;
use common::Served;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;

/// One keep-alive HTTP/1.1 connection.
struct Client {
    rt: tokio::runtime::Runtime,
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Client {
    fn new(addr: SocketAddr) -> Client {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sender = rt.block_on(async {
            let s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            sender
        });
        Client { rt, sender }
    }

    /// (status, JSON body); Err when the connection failed (the server was killed).
    fn try_call(&mut self, method: &str, path: &str, body: &str) -> Result<(u16, Value), String> {
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "cohort")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let sender = &mut self.sender;
        self.rt.block_on(async {
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            let v = serde_json::from_slice(&bytes).map_err(|e| format!("{e}: {bytes:?}"))?;
            Ok((status, v))
        })
    }

    fn call(&mut self, method: &str, path: &str, body: Value) -> (u16, Value) {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        self.try_call(method, path, &body).unwrap()
    }
}

fn serve(dir: &Path) -> Served {
    Served::start(&["--service", "echo", "--data-dir", dir.to_str().unwrap()])
}

fn vector(id: u64) -> Vec<f32> {
    (0..8).map(|j| ((id * 31 + j * 7) % 97) as f32).collect()
}

fn points(ids: impl Iterator<Item = u64>) -> Value {
    let colors = ["red", "green", "blue"];
    json!({"points": ids.map(|i| json!({"id": i, "vector": vector(i),
        "attributes": {"color": colors[(i % 3) as usize], "price": i as f64}})).collect::<Vec<_>>()})
}

#[test]
fn collections_are_served_durably_over_http() {
    let dir = std::env::temp_dir().join(format!("cohort-served-coll-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut s = serve(&dir);
    let http = s.http.unwrap();
    let mut c = Client::new(http);
    let settings = json!({"dim": 8, "metric": "l2", "element": "f32", "attributes": {"color": "keyword", "price": "float"}});
    let (st, v) = c.call("PUT", "/v1/collections/items", settings.clone());
    assert_eq!(st, 200, "{v}");
    let (st, v) = c.call("PUT", "/v1/collections/items", settings);
    assert_eq!((st, v["error"].as_str()), (409, Some("CONFLICT")), "{v}");
    for start in (0..3000).step_by(500) {
        let (st, v) = c.call(
            "POST",
            "/v1/collections/items/upsert",
            points(start..start + 500),
        );
        assert_eq!((st, v["upserted"].as_u64()), (200, Some(500)), "{v}");
    }
    let (_, v) = c.call("GET", "/v1/collections/items", Value::Null);
    assert_eq!(v["count"], json!(3000));
    let (_, v) = c.call("GET", "/v1/collections", Value::Null);
    assert_eq!(v["collections"][0]["name"], json!("items"));
    // Filtered search: the point itself first, only red ones, attributes returned.
    let (st, v) = c.call("POST", "/v1/collections/items/search", json!({"vectors": [vector(42), vector(43)], "k": 5,
        "filter": {"all": [{"eq": ["color", "red"]}, {"range": ["price", {"lt": 2000}]}]}, "with_attributes": true}));
    assert_eq!(st, 200, "{v}");
    let first = &v["results"][0];
    assert_eq!(first[0]["id"], json!(42));
    assert_eq!(first[0]["distance"], json!(0.0));
    for h in first
        .as_array()
        .unwrap()
        .iter()
        .chain(v["results"][1].as_array().unwrap())
    {
        assert_eq!(h["attributes"]["color"], json!("red"), "{v}");
        assert!(h["attributes"]["price"].as_f64().unwrap() < 2000.0);
    }
    // Bad input: the gateway's JSON errors with 4xx.
    for (method, path, body, status, code) in [
        (
            "POST",
            "/v1/collections/items/upsert",
            json!({"points": [{"id": 1, "vector": [1, 2]}]}).to_string(),
            400,
            "BAD_REQUEST",
        ),
        (
            "POST",
            "/v1/collections/items/upsert",
            r#"{"points":[{"id":1,"vector":[NaN,0,0,0,0,0,0,0]}]}"#.to_string(),
            400,
            "BAD_REQUEST",
        ),
        (
            "POST",
            "/v1/collections/items/search",
            json!({"vectors": [vector(1)], "filter": {"eq": ["size", 1]}}).to_string(),
            400,
            "BAD_REQUEST",
        ),
        (
            "POST",
            "/v1/collections/nope/search",
            json!({"vectors": [vector(1)]}).to_string(),
            404,
            "NOT_FOUND",
        ),
        (
            "PATCH",
            "/v1/collections/items",
            String::new(),
            405,
            "METHOD_NOT_ALLOWED",
        ),
    ] {
        let (st, v) = c.try_call(method, path, &body).unwrap();
        assert_eq!(
            (st, v["error"].as_str()),
            (status, Some(code)),
            "{method} {path}: {v}"
        );
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // Delete by filter and by ids, get.
    let (_, v) = c.call(
        "POST",
        "/v1/collections/items/delete",
        json!({"filter": {"range": ["price", {"lt": 100}]}}),
    );
    assert_eq!(v["deleted"], json!(100));
    let (_, v) = c.call(
        "POST",
        "/v1/collections/items/delete",
        json!({"ids": [100, 101, 5]}),
    );
    assert_eq!(v["deleted"], json!(2));
    let (_, v) = c.call(
        "POST",
        "/v1/collections/items/get",
        json!({"ids": [5, 102]}),
    );
    assert_eq!(v["points"].as_array().unwrap().len(), 1);
    assert_eq!(v["points"][0]["vector"], json!(vector(102)));
    // The routes are in /openapi.json.
    let doc = common::http_get(http, "/openapi.json");
    assert!(doc.contains("/v1/collections/{name}/search"), "openapi");

    // kill -9 under four concurrent writers; their acknowledged ids must all come back.
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Client::new(http);
                let mut acked = Vec::new();
                for r in 0..10_000u64 {
                    let ids: Vec<u64> = (0..20).map(|i| 1_000_000 * (t + 1) + r * 20 + i).collect();
                    match c.try_call(
                        "POST",
                        "/v1/collections/items/upsert",
                        &points(ids.iter().copied()).to_string(),
                    ) {
                        Ok((200, _)) => acked.extend(ids),
                        Ok((st, v)) => panic!("{st} {v}"),
                        Err(_) => break, // killed
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    s.child.kill().unwrap(); // SIGKILL: no shutdown
    s.child.wait().unwrap();
    let acked: Vec<u64> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(
        acked.len() >= 20,
        "the writers got some writes through: {}",
        acked.len()
    );
    drop(s);
    let s = serve(&dir);
    let mut c = Client::new(s.http.unwrap());
    let (_, v) = c.call("GET", "/v1/collections/items", Value::Null);
    let count = v["count"].as_u64().unwrap() as usize;
    eprintln!(
        "after kill -9: {} acknowledged points written, {count} present",
        acked.len()
    );
    let before = 3000 - 102;
    // Acknowledged writes all present; writes in flight at the kill (at most 4 batches)
    // may be present too; nothing twice (ids are keys: the count says so).
    assert!(
        count >= before + acked.len() && count <= before + acked.len() + 4 * 20,
        "count {count}, acked {}",
        acked.len()
    );
    for chunk in acked.chunks(2000) {
        let (_, v) = c.call("POST", "/v1/collections/items/get", json!({ "ids": chunk }));
        assert_eq!(
            v["points"].as_array().unwrap().len(),
            chunk.len(),
            "an acknowledged write lost"
        );
    }
    let (_, v) = c.call(
        "POST",
        "/v1/collections/items/get",
        json!({"ids": [5, 50, 102]}),
    );
    assert_eq!(
        v["points"].as_array().unwrap().len(),
        1,
        "deletes survive too"
    );
    let (_, v) = c.call(
        "POST",
        "/v1/collections/items/search",
        json!({"vectors": [vector(*acked.last().unwrap())], "k": 1}),
    );
    assert_eq!(v["results"][0][0]["distance"], json!(0.0));
    // Dropped collections stay dropped.
    let (st, _) = c.call("DELETE", "/v1/collections/items", Value::Null);
    assert_eq!(st, 200);
    drop(s);
    let s = serve(&dir);
    let mut c = Client::new(s.http.unwrap());
    assert_eq!(
        c.call("GET", "/v1/collections", Value::Null).1,
        json!({"collections": []})
    );
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_corrupt_snapshot_stops_the_start_with_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("cohort-served-corrupt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = dir.join("collections/bad");
    std::fs::create_dir_all(&c).unwrap();
    std::fs::write(c.join("settings.json"), r#"{"dim": 2}"#).unwrap();
    std::fs::write(c.join("snapshot"), b"COHSNAP1 not really a snapshot").unwrap();
    let o = common::cohort(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--data-dir",
        dir.to_str().unwrap(),
        "--log-level",
        "warn",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "served a corrupt snapshot");
    assert!(
        err.contains("snapshot") && err.contains("corrupt") && err.contains("bad"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn with_api_keys_the_collections_need_a_key() {
    let dir = std::env::temp_dir().join(format!("cohort-served-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    std::fs::write(
        &keys,
        "[[key]]\nid = \"ci\"\nsecret = \"0123456789abcdef\"\n",
    )
    .unwrap();
    let data = dir.join("data");
    let s = Served::start(&[
        "--service",
        "echo",
        "--data-dir",
        data.to_str().unwrap(),
        "--auth-keys",
        keys.to_str().unwrap(),
    ]);
    let mut c = Client::new(s.http.unwrap());
    let (st, v) = c.call("GET", "/v1/collections", Value::Null);
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("UNAUTHORIZED")),
        "{v}"
    );
    let req = hyper::Request::builder()
        .method("GET")
        .uri("/v1/collections")
        .header("host", "cohort")
        .header("authorization", "Bearer 0123456789abcdef")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let sender = &mut c.sender;
    let (st, body) = c.rt.block_on(async {
        let r = sender.send_request(req).await.unwrap();
        let st = r.status().as_u16();
        (st, r.into_body().collect().await.unwrap().to_bytes())
    });
    assert_eq!(st, 200, "{body:?}");
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!({"collections": []})
    );
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}
