//! A live collection's load (`cohort load --collection NAME`): k-NN searches with a share of
//! writes (upserts and deletes by ids) over HTTP to `cohort serve --data-dir`, the shape of
//! every answer checked; and the step before a run that creates the collection and fills it
//! (`prepare`).
//!
//! Request `seq` is decided by `seq` and the seed alone: a search of one query vector, or,
//! with probability `write_share`, a write; one write in `DELETE_EVERY` is a delete of
//! `write_batch` ids, the others an upsert of `write_batch` points. Ids are drawn from
//! `0..points`, the ids the fill wrote, so an upsert replaces live points (or brings deleted
//! ones back) and a delete removes some. Vectors are SIFT-like (`cohort_knn::synth`, one
//! model from the seed): the fill writes rows of stream 0, searches send rows of stream 1,
//! upserts rows of stream 2.

use crate::transport::http::{connect_with, Conn};
use crate::{ClientKey, Workload};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use cohort_knn::synth::{Model, SynthConfig, SAMPLE_BLOCK};
use cohort_knn::Vectors;
use cohort_services::workload::HttpRequest;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The collection's one attribute, an integer: point `id` has `id % TAGS`.
pub const ATTRIBUTE: &str = "tag";
pub const TAGS: u64 = 1000;
/// One write in this many is a delete by ids; the others are upserts.
pub const DELETE_EVERY: u64 = 8;
/// Query vectors (and upsert vectors) drawn ahead, one of them picked per request.
const POOL: usize = 4096;
/// Points a fill upsert carries (the server takes at most 10 000).
const FILL_BATCH: usize = SAMPLE_BLOCK;

/// What `cohort load --collection` asks for.
#[derive(Debug, Clone)]
pub struct CollectionLoad {
    pub name: String,
    pub dim: usize,
    /// Ids of the points are 0..points (the fill writes them all).
    pub points: u64,
    /// Share of requests that are writes, 0..=1.
    pub write_share: f64,
    /// Points an upsert carries, ids a delete carries.
    pub write_batch: usize,
    /// Neighbours a search asks for.
    pub k: usize,
    pub seed: u64,
}

impl CollectionLoad {
    pub fn validate(&self) -> Result<()> {
        let n = &self.name;
        anyhow::ensure!(
            (1..=64).contains(&n.len())
                && !n.starts_with('-')
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "collection name {n:?}: 1-64 of A-Z a-z 0-9 _ -, not starting with -"
        );
        anyhow::ensure!(
            (1..=4096).contains(&self.dim),
            "--collection-dim must be 1..=4096"
        );
        anyhow::ensure!(
            (1..=10_000).contains(&self.write_batch),
            "--write-batch must be 1..=10000"
        );
        anyhow::ensure!(
            self.points >= self.write_batch as u64,
            "--collection-points must be at least --write-batch"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.write_share),
            "--write-share must be in 0..=1"
        );
        anyhow::ensure!((1..=1024).contains(&self.k), "--k must be 1..=1024");
        Ok(())
    }

    fn model(&self) -> Model {
        Model::new(SynthConfig::sift_like(self.dim, self.seed))
    }

    /// The vectors of the fill, point `start` to `start + n` (`start` a multiple of
    /// `SAMPLE_BLOCK`): point i's vector is row i of the model's stream 0.
    pub fn fill_vectors(&self, start: u64, n: usize) -> Vectors {
        self.model().sample_rows(start as usize, n, 0)
    }
}

/// What request `seq` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Search,
    Upsert,
    Delete,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Search => "search",
            Op::Upsert => "upsert",
            Op::Delete => "delete",
        }
    }
}

/// splitmix64's finaliser: a well-mixed 64-bit hash.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The point `id` with `vector`, as an upsert carries it.
pub fn point_json(id: u64, vector: &[f32]) -> Value {
    json!({"id": id, "vector": vector, "attributes": {ATTRIBUTE: id % TAGS}})
}

/// The body of `PUT /v1/collections/{name}`.
pub fn create_json(dim: usize) -> Value {
    json!({"dim": dim, "metric": "l2", "element": "f32", "attributes": {ATTRIBUTE: "integer"}})
}

pub struct CollectionWorkload {
    cfg: CollectionLoad,
    prefix: String,
    queries: Vectors,
    writes: Vectors,
    searches: AtomicU64,
    upserts: AtomicU64,
    deletes: AtomicU64,
    points_upserted: AtomicU64,
    points_deleted: AtomicU64,
}

impl CollectionWorkload {
    pub fn new(cfg: CollectionLoad) -> Result<CollectionWorkload> {
        cfg.validate()?;
        let model = cfg.model();
        Ok(CollectionWorkload {
            prefix: format!("/v1/collections/{}", cfg.name),
            queries: model.sample(POOL, 1),
            writes: model.sample(POOL, 2),
            cfg,
            searches: AtomicU64::new(0),
            upserts: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            points_upserted: AtomicU64::new(0),
            points_deleted: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &CollectionLoad {
        &self.cfg
    }

    /// What request `seq` is: a write with probability `write_share`.
    pub fn op(&self, seq: u64) -> Op {
        let h = mix(self.cfg.seed ^ mix(seq));
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        if u >= self.cfg.write_share {
            Op::Search
        } else if mix(h).is_multiple_of(DELETE_EVERY) {
            Op::Delete
        } else {
            Op::Upsert
        }
    }

    /// The distinct ids write `seq` carries, drawn from 0..points.
    pub fn ids(&self, seq: u64) -> Vec<u64> {
        let mut seen = HashSet::with_capacity(self.cfg.write_batch);
        let mut ids = Vec::with_capacity(self.cfg.write_batch);
        let mut x = mix(seq ^ self.cfg.seed.rotate_left(32));
        while ids.len() < self.cfg.write_batch {
            x = mix(x);
            let id = x % self.cfg.points;
            if seen.insert(id) {
                ids.push(id);
            }
        }
        ids
    }

    /// The vector write `seq` gives point `id`: a row of the upsert pool.
    pub fn upsert_vector(&self, seq: u64, id: u64) -> &[f32] {
        self.writes
            .row((mix(seq ^ mix(id)) % self.writes.n as u64) as usize)
    }

    fn query(&self, seq: u64) -> &[f32] {
        self.queries
            .row((mix(seq.rotate_left(17)) % self.queries.n as u64) as usize)
    }

    /// Request `seq` (route and body).
    pub fn request(&self, seq: u64) -> HttpRequest {
        let (route, body) = match self.op(seq) {
            Op::Search => (
                "search",
                json!({"vectors": [self.query(seq)], "k": self.cfg.k}),
            ),
            Op::Upsert => {
                let points: Vec<Value> = self
                    .ids(seq)
                    .into_iter()
                    .map(|id| point_json(id, self.upsert_vector(seq, id)))
                    .collect();
                ("upsert", json!({ "points": points }))
            }
            Op::Delete => ("delete", json!({"ids": self.ids(seq)})),
        };
        HttpRequest {
            method: "POST",
            path: format!("{}/{route}", self.prefix),
            body,
        }
    }

    /// One result list of at most k hits, each an id the load writes (0..points) once, with
    /// a finite squared distance (l2: >= 0), nearest first.
    fn check_search(&self, v: &Value) -> bool {
        let Some([hits]) = v
            .get("results")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        else {
            return false;
        };
        let Some(hits) = hits.as_array() else {
            return false;
        };
        if hits.len() > self.cfg.k {
            return false;
        }
        let mut ids = Vec::with_capacity(hits.len());
        let mut last = 0.0f64;
        for h in hits {
            let (Some(id), Some(d)) = (
                h.get("id").and_then(Value::as_u64),
                h.get("distance").and_then(Value::as_f64),
            ) else {
                return false;
            };
            if id >= self.cfg.points || !d.is_finite() || d < last {
                return false;
            }
            last = d;
            ids.push(id);
        }
        ids.sort_unstable();
        ids.dedup();
        ids.len() == hits.len()
    }
}

impl Workload for CollectionWorkload {
    fn service(&self) -> u16 {
        0
    }

    fn service_name(&self) -> &'static str {
        "collections"
    }

    /// Collections are served over HTTP only (`cohort load` refuses other targets).
    fn payload(&self, _seq: u64, _out: &mut Vec<u8>) {}

    fn json(&self, seq: u64) -> Value {
        self.request(seq).body
    }

    fn check(&self, _seq: u64, _payload: &[u8]) -> bool {
        false
    }

    fn check_json(&self, seq: u64, v: &Value) -> bool {
        let batch = self.cfg.write_batch as u64;
        match self.op(seq) {
            Op::Search => {
                let right = self.check_search(v);
                self.searches.fetch_add(right as u64, Relaxed);
                right
            }
            Op::Upsert => {
                let right = *v == json!({ "upserted": batch });
                if right {
                    self.upserts.fetch_add(1, Relaxed);
                    self.points_upserted.fetch_add(batch, Relaxed);
                }
                right
            }
            Op::Delete => match v.get("deleted").and_then(Value::as_u64) {
                Some(m) if m <= batch && v.as_object().is_some_and(|o| o.len() == 1) => {
                    self.deletes.fetch_add(1, Relaxed);
                    self.points_deleted.fetch_add(m, Relaxed);
                    true
                }
                _ => false,
            },
        }
    }

    fn http_request(&self, seq: u64) -> Option<HttpRequest> {
        Some(self.request(seq))
    }

    fn request_kind(&self, seq: u64) -> Option<&'static str> {
        Some(self.op(seq).name())
    }

    /// Right answers of each kind since the run started (warm-up included; `per_type` has
    /// the measured window's), and the points the writes' answers counted.
    fn extra(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("collection".into(), self.cfg.name.clone().into());
        m.insert("write_share".into(), self.cfg.write_share.into());
        m.insert("write_batch".into(), self.cfg.write_batch.into());
        for (k, c) in [
            ("searches_right", &self.searches),
            ("upserts_right", &self.upserts),
            ("deletes_right", &self.deletes),
            ("points_upserted", &self.points_upserted),
            ("points_deleted", &self.points_deleted),
        ] {
            m.insert(k.into(), c.load(Relaxed).into());
        }
        m
    }

    fn reset(&self) {
        for c in [
            &self.searches,
            &self.upserts,
            &self.deletes,
            &self.points_upserted,
            &self.points_deleted,
        ] {
            c.store(0, Relaxed);
        }
    }
}

/// One HTTP/1.1 connection for the steps before a run.
struct Client {
    rt: tokio::runtime::Runtime,
    conn: Conn,
    addr: SocketAddr,
    bearer: Option<String>,
}

impl Client {
    fn call(&mut self, method: &str, path: &str, body: &Value) -> Result<(u16, Value)> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("content-type", "application/json");
        if let Some(b) = &self.bearer {
            req = req.header("authorization", format!("Bearer {b}"));
        }
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let req = req.body(Full::new(Bytes::from(body)))?;
        let conn = &mut self.conn;
        self.rt.block_on(async {
            let resp = conn
                .send_request(req)
                .await
                .with_context(|| format!("{method} {path}"))?;
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await?.to_bytes();
            let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            Ok((status, v))
        })
    }
}

/// Before a run: with `create`, creates the collection (an existing one with the same
/// settings is kept) and upserts the points 0..points in batches (replacing what those ids
/// held); then checks the collection's settings fit the load and returns its live points.
pub fn prepare(
    addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    key: Option<&ClientKey>,
    cfg: &CollectionLoad,
    create: bool,
    mut progress: impl FnMut(u64),
) -> Result<u64> {
    cfg.validate()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let conn = rt
        .block_on(connect_with(tls.as_ref(), addr))
        .with_context(|| format!("connecting to {addr}"))?;
    let mut c = Client {
        rt,
        conn,
        addr,
        bearer: key.map(|k| k.secret.clone()),
    };
    let path = format!("/v1/collections/{}", cfg.name);
    if create {
        match c.call("PUT", &path, &create_json(cfg.dim))? {
            (200, _) | (409, _) => {}
            (s, v) => bail!("creating collection {}: HTTP {s}: {v}", cfg.name),
        }
    }
    let (s, v) = c.call("GET", &path, &Value::Null)?;
    match s {
        200 => {}
        404 => bail!(
            "no collection {:?} at {addr}: add --create to make and fill it",
            cfg.name
        ),
        _ => bail!("reading collection {}: HTTP {s}: {v}", cfg.name),
    }
    let dim = v.get("dim").and_then(Value::as_u64);
    anyhow::ensure!(
        dim == Some(cfg.dim as u64),
        "collection {} has dim {dim:?}, the load --collection-dim {}",
        cfg.name,
        cfg.dim
    );
    anyhow::ensure!(
        v.get("metric").and_then(Value::as_str) == Some("l2"),
        "collection {}: the load checks l2 distances, it has metric {}",
        cfg.name,
        v["metric"]
    );
    anyhow::ensure!(
        v.pointer(&format!("/attributes/{ATTRIBUTE}")) == Some(&json!("integer")),
        "collection {}: the load writes an integer attribute {ATTRIBUTE:?}, its schema is {}",
        cfg.name,
        v["attributes"]
    );
    if create {
        let upsert = format!("{path}/upsert");
        let mut start = 0u64;
        while start < cfg.points {
            let n = (cfg.points - start).min(FILL_BATCH as u64) as usize;
            let rows = cfg.fill_vectors(start, n);
            let points: Vec<Value> = (0..n)
                .map(|i| point_json(start + i as u64, rows.row(i)))
                .collect();
            let body = json!({ "points": points });
            match c.call("POST", &upsert, &body)? {
                (200, v) if v == json!({ "upserted": n }) => {}
                (s, v) => bail!("filling collection {}: HTTP {s}: {v}", cfg.name),
            }
            start += n as u64;
            progress(start);
        }
    }
    let (s, v) = c.call("GET", &path, &Value::Null)?;
    anyhow::ensure!(s == 200, "reading collection {}: HTTP {s}: {v}", cfg.name);
    v.get("count")
        .and_then(Value::as_u64)
        .with_context(|| format!("collection {}: no count in {v}", cfg.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(write_share: f64) -> CollectionWorkload {
        CollectionWorkload::new(CollectionLoad {
            name: "items".into(),
            dim: 16,
            points: 1000,
            write_share,
            write_batch: 10,
            k: 10,
            seed: 3,
        })
        .unwrap()
    }

    #[test]
    fn the_write_share_is_kept_and_requests_are_deterministic() {
        let w = workload(0.05);
        let n = 100_000;
        let (mut upserts, mut deletes) = (0, 0);
        for seq in 0..n {
            match w.op(seq) {
                Op::Search => {}
                Op::Upsert => upserts += 1,
                Op::Delete => deletes += 1,
            }
        }
        let writes = (upserts + deletes) as f64 / n as f64;
        assert!((writes - 0.05).abs() < 0.005, "{writes}");
        let del = deletes as f64 / (upserts + deletes) as f64;
        assert!((del - 1.0 / DELETE_EVERY as f64).abs() < 0.03, "{del}");
        let again = workload(0.05);
        for seq in [0, 1, 77, 123_456] {
            assert_eq!(w.request(seq), again.request(seq));
        }
        let (none, all) = (workload(0.0), workload(1.0));
        assert!((0..1000).all(|s| none.op(s) == Op::Search));
        assert!((0..1000).all(|s| all.op(s) != Op::Search));
    }

    #[test]
    fn writes_carry_distinct_ids_in_range_and_searches_one_query() {
        let w = workload(0.5);
        let mut seen = HashSet::new();
        for seq in 0..200 {
            let r = w.request(seq);
            match w.op(seq) {
                Op::Search => {
                    assert_eq!(r.path, "/v1/collections/items/search");
                    assert_eq!(r.body["vectors"].as_array().unwrap().len(), 1);
                    assert_eq!(r.body["vectors"][0].as_array().unwrap().len(), 16);
                    assert_eq!(r.body["k"], 10);
                }
                Op::Upsert => {
                    assert_eq!(r.path, "/v1/collections/items/upsert");
                    let p = r.body["points"].as_array().unwrap();
                    let ids: HashSet<u64> = p.iter().map(|p| p["id"].as_u64().unwrap()).collect();
                    assert_eq!(ids.len(), 10);
                    assert!(ids.iter().all(|&i| i < 1000));
                    assert_eq!(
                        p[0]["attributes"]["tag"],
                        p[0]["id"].as_u64().unwrap() % TAGS
                    );
                    seen.extend(ids);
                }
                Op::Delete => {
                    assert_eq!(r.path, "/v1/collections/items/delete");
                    let ids = w.ids(seq);
                    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 10);
                    assert_eq!(r.body, json!({ "ids": ids }));
                }
            }
        }
        // Ids spread over the range, not a few repeated.
        assert!(seen.len() > 500, "{}", seen.len());
    }

    #[test]
    fn answers_of_the_wrong_shape_are_wrong() {
        let w = workload(0.5);
        let search = (0..).find(|&s| w.op(s) == Op::Search).unwrap();
        let upsert = (0..).find(|&s| w.op(s) == Op::Upsert).unwrap();
        let delete = (0..).find(|&s| w.op(s) == Op::Delete).unwrap();
        let hit = |id: u64, d: f64| json!({"id": id, "distance": d});
        let ok = json!({"results": [[hit(3, 1.0), hit(9, 1.0), hit(4, 7.5)]]});
        assert!(w.check_json(search, &ok));
        assert!(w.check_json(search, &json!({"results": [[]]})));
        for bad in [
            json!({"results": [[hit(3, 2.0), hit(9, 1.0)]]}),
            json!({"results": [[hit(3, 1.0), hit(3, 2.0)]]}),
            json!({"results": [[hit(1000, 1.0)]]}),
            json!({"results": [[hit(1, -1.0)]]}),
            json!({"results": [[{"id": 1}]]}),
            json!({"results": [[hit(1, 1.0)], [hit(2, 1.0)]]}),
            json!({"results": [(0..11).map(|i| hit(i, i as f64)).collect::<Vec<_>>()]}),
            json!({"results": []}),
            json!({"upserted": 10}),
        ] {
            assert!(!w.check_json(search, &bad), "{bad}");
        }
        assert!(w.check_json(upsert, &json!({"upserted": 10})));
        assert!(!w.check_json(upsert, &json!({"upserted": 9})));
        assert!(!w.check_json(upsert, &json!({"deleted": 10})));
        assert!(w.check_json(delete, &json!({"deleted": 0})));
        assert!(w.check_json(delete, &json!({"deleted": 10})));
        assert!(!w.check_json(delete, &json!({"deleted": 11})));
        assert!(!w.check_json(delete, &json!({"upserted": 10})));
        let e = w.extra();
        assert_eq!(e["searches_right"], 2);
        assert_eq!(e["upserts_right"], 1);
        assert_eq!(e["deletes_right"], 2);
        assert_eq!(e["points_deleted"], 10);
    }

    #[test]
    fn bad_settings_are_refused() {
        let good = workload(0.1).config().clone();
        for bad in [
            CollectionLoad {
                name: "-x".into(),
                ..good.clone()
            },
            CollectionLoad {
                name: "a/b".into(),
                ..good.clone()
            },
            CollectionLoad {
                write_share: 1.5,
                ..good.clone()
            },
            CollectionLoad {
                points: 5,
                ..good.clone()
            },
            CollectionLoad {
                dim: 0,
                ..good.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(good.validate().is_ok());
    }
}
