//! A live collection's load (`cohort load --collection NAME`): k-NN searches with a share of
//! writes (upserts and deletes by ids) over HTTP to `cohort serve --data-dir`, the shape of
//! every answer checked; and the step before a run that creates the collection and fills it
//! (`prepare`).
//!
//! Request `seq` is decided by `seq` and the seed alone: a search of one query vector, or,
//! with probability `write_share`, a write; one write in `DELETE_EVERY` is a delete of
//! `write_batch` ids, the others an upsert of `write_batch` points. Ids are drawn from
//! `0..points`, the ids the fill wrote, so an upsert replaces live points (or brings deleted
//! ones back) and a delete removes some. Vectors are SIFT-like (`cohort_ivf::synth`, one
//! model from the seed): the fill writes rows of stream 0, searches send rows of stream 1,
//! upserts rows of stream 2.

mod liveness;

use crate::transport::http::{connect_with, Conn};
use crate::{ClientKey, Workload};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use cohort_ivf::metric::l2_sq;
use cohort_ivf::synth::{Model, SynthConfig, SAMPLE_BLOCK};
use cohort_ivf::TopK;
use cohort_ivf::Vectors;
use cohort_services::workload::HttpRequest;
use http_body_util::{BodyExt, Full};
use liveness::Liveness;
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
/// Ids a load writes at most (the client keeps about 24 bytes of state an id).
pub const MAX_POINTS: u64 = 1 << 28;
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
    /// Query vectors a search request carries (1..=1024).
    pub queries_per_request: usize,
    /// Searches carry the filter `tag < T` that matches about this share of the points
    /// (`filter_threshold`); `None`: unfiltered searches.
    pub filter_selectivity: Option<f64>,
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
            self.points <= MAX_POINTS,
            "--collection-points must be at most {MAX_POINTS}"
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
        anyhow::ensure!(
            (1..=1024).contains(&self.queries_per_request),
            "--queries-per-request must be 1..=1024"
        );
        if let Some(f) = self.filter_selectivity {
            anyhow::ensure!(
                f.is_finite() && f > 0.0 && f <= 1.0 && self.filter_threshold() >= 1,
                "--filter-selectivity must be in {}..=1 (the filter keeps whole tags of \
                 {TAGS})",
                0.5 / TAGS as f64
            );
        }
        Ok(())
    }

    /// The filter keeps the points whose `tag` (`id % TAGS`) is below this: the selectivity
    /// rounded to whole tags (`TAGS` when there is no filter).
    pub fn filter_threshold(&self) -> u64 {
        match self.filter_selectivity {
            None => TAGS,
            Some(f) => ((f * TAGS as f64).round() as u64).min(TAGS),
        }
    }

    /// The filter searches carry, if any.
    pub fn filter_json(&self) -> Option<Value> {
        self.filter_selectivity
            .map(|_| json!({"range": [ATTRIBUTE, {"lt": self.filter_threshold()}]}))
    }

    /// Whether point `id` matches the searches' filter.
    pub fn matches(&self, id: u64) -> bool {
        id % TAGS < self.filter_threshold()
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

/// Query vectors of the pool whose exact answers the client computes (`enable_recall`): a
/// search query that is one of them is scored.
pub const GT_QUERIES: usize = 128;
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
    /// Search answers holding a point the filter refuses, or one known deleted.
    filter_violations: AtomicU64,
    deleted_seen: AtomicU64,
    /// Exact k nearest ids (matching the filter) of the first `GT_QUERIES` pool queries,
    /// once `enable_recall` computed them; and the scored queries' hits and truths.
    truth: std::sync::OnceLock<Vec<Vec<u64>>>,
    recall_hits: AtomicU64,
    recall_truths: AtomicU64,
    recall_queries: AtomicU64,
    /// None without writes (nothing is ever deleted).
    liveness: Option<Liveness>,
    /// Over the native frames (tcp:// targets, service 7): searches, upserts and deletes by
    /// ids as frames.
    frames: bool,
    /// Over Cohort's own gRPC service (grpc:// targets, `cohort.collections.v1`).
    grpc: bool,
}

impl CollectionWorkload {
    pub fn new(cfg: CollectionLoad) -> Result<CollectionWorkload> {
        cfg.validate()?;
        let model = cfg.model();
        Ok(CollectionWorkload {
            prefix: format!("/v1/collections/{}", cfg.name),
            queries: model.sample(POOL, 1),
            writes: model.sample(POOL, 2),
            liveness: (cfg.write_share > 0.0).then(|| Liveness::new(cfg.points)),
            cfg,
            searches: AtomicU64::new(0),
            upserts: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            points_upserted: AtomicU64::new(0),
            points_deleted: AtomicU64::new(0),
            filter_violations: AtomicU64::new(0),
            deleted_seen: AtomicU64::new(0),
            truth: std::sync::OnceLock::new(),
            recall_hits: AtomicU64::new(0),
            recall_truths: AtomicU64::new(0),
            recall_queries: AtomicU64::new(0),
            frames: false,
            grpc: false,
        })
    }

    /// Sends searches, upserts and deletes as calls of the collections' gRPC service
    /// (`cohort.collections.v1.Collections`) instead of REST JSON.
    pub fn over_grpc(mut self) -> CollectionWorkload {
        self.grpc = true;
        self
    }

    /// Request `seq` as a call of the gRPC service: its path and encoded message.
    fn grpc_message(&self, seq: u64) -> (&'static str, Vec<u8>) {
        use cohort_collections_grpc as pb;
        use pb::attribute_value::Kind as V;
        use prost::Message as _;
        let collection = self.cfg.name.clone();
        let int = |v: u64| pb::AttributeValue {
            kind: Some(V::IntValue(v as i64)),
        };
        match self.op(seq) {
            Op::Search => {
                // The REST search's filter (`filter_json`) as the service's message.
                let filter = self.cfg.filter_selectivity.map(|_| pb::Filter {
                    kind: Some(pb::filter::Kind::Range(pb::Range {
                        field: ATTRIBUTE.into(),
                        lt: Some(int(self.cfg.filter_threshold())),
                        ..Default::default()
                    })),
                });
                let vectors = (0..self.cfg.queries_per_request)
                    .map(|j| pb::Vector {
                        values: self.queries.row(self.query_row(seq, j)).to_vec(),
                    })
                    .collect();
                let r = pb::SearchRequest {
                    collection,
                    vectors,
                    k: Some(self.cfg.k as u32),
                    nprobe: None,
                    filter,
                    with_attributes: false,
                };
                (
                    "/cohort.collections.v1.Collections/Search",
                    r.encode_to_vec(),
                )
            }
            Op::Upsert => {
                let points = self
                    .ids(seq)
                    .into_iter()
                    .map(|id| pb::Point {
                        id,
                        vector: self.upsert_vector(seq, id).to_vec(),
                        attributes: [(ATTRIBUTE.to_string(), int(id % TAGS))].into(),
                    })
                    .collect();
                let r = pb::UpsertRequest { collection, points };
                (
                    "/cohort.collections.v1.Collections/Upsert",
                    r.encode_to_vec(),
                )
            }
            Op::Delete => {
                let r = pb::DeleteRequest {
                    collection,
                    selector: Some(pb::delete_request::Selector::Ids(pb::IdList {
                        ids: self.ids(seq),
                    })),
                };
                (
                    "/cohort.collections.v1.Collections/Delete",
                    r.encode_to_vec(),
                )
            }
        }
    }

    /// Call `seq`'s encoded reply as its REST twin's JSON (checked by `check_json`).
    fn grpc_reply_json(&self, seq: u64, reply: &[u8]) -> Option<Value> {
        use cohort_collections_grpc as pb;
        use prost::Message as _;
        Some(match self.op(seq) {
            Op::Search => {
                let r = pb::SearchResponse::decode(reply).ok()?;
                json!({"results": r.results.iter().map(|hits| hits.hits.iter()
                    .map(|h| json!({"id": h.id, "distance": h.distance})).collect::<Vec<_>>())
                    .collect::<Vec<_>>()})
            }
            Op::Upsert => json!({ "upserted": pb::UpsertResponse::decode(reply).ok()?.upserted }),
            Op::Delete => json!({ "deleted": pb::DeleteResponse::decode(reply).ok()?.deleted }),
        })
    }

    /// Sends searches and upserts as the collections' native frames (service 7,
    /// docs/protocol.md) instead of REST JSON, deletes included.
    pub fn over_frames(mut self) -> CollectionWorkload {
        self.frames = true;
        self
    }

    /// Notes request `seq` as sent in the client's record of writes and searches in flight.
    fn note_sent(&self, seq: u64) {
        if let Some(l) = &self.liveness {
            match self.op(seq) {
                Op::Search => l.search_sent(seq),
                Op::Upsert => l.upsert_sent(&self.ids(seq)),
                Op::Delete => l.delete_sent(seq, &self.ids(seq)),
            }
        }
    }

    /// Request `seq` as a frame payload.
    fn frame(&self, seq: u64, out: &mut Vec<u8>) {
        use cohort_collections::frames::{IdsFrame, PointFrame, Request, SearchFrame, UpsertFrame};
        let name = &self.cfg.name;
        match self.op(seq) {
            Op::Search => {
                let filter = self.cfg.filter_json().map(|f| f.to_string());
                SearchFrame {
                    collection: name,
                    k: self.cfg.k as u16,
                    nprobe: 0,
                    filter: filter.as_deref(),
                    dim: self.cfg.dim as u32,
                    vectors: (0..self.cfg.queries_per_request)
                        .flat_map(|j| self.queries.row(self.query_row(seq, j)).iter().copied())
                        .collect(),
                }
                .encode(out)
            }
            Op::Delete => Request::Delete(IdsFrame {
                collection: name,
                ids: self.ids(seq),
            })
            .encode(out),
            Op::Upsert => {
                let attrs: Vec<(u64, String)> = self
                    .ids(seq)
                    .into_iter()
                    .map(|id| (id, json!({ ATTRIBUTE: id % TAGS }).to_string()))
                    .collect();
                UpsertFrame {
                    collection: name,
                    dim: self.cfg.dim as u32,
                    points: attrs
                        .iter()
                        .map(|(id, a)| PointFrame {
                            id: *id,
                            vector: self.upsert_vector(seq, *id).to_vec(),
                            attributes: Some(a),
                        })
                        .collect(),
                }
                .encode(out)
            }
        }
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

    /// The pool row of query `j` of search `seq`.
    pub fn query_row(&self, seq: u64, j: usize) -> usize {
        let x = mix(seq.rotate_left(17)) ^ (j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (mix(x) % self.queries.n as u64) as usize
    }

    /// Request `seq` (route and body).
    pub fn request(&self, seq: u64) -> HttpRequest {
        let (route, body) = match self.op(seq) {
            Op::Search => {
                let vectors: Vec<&[f32]> = (0..self.cfg.queries_per_request)
                    .map(|j| self.queries.row(self.query_row(seq, j)))
                    .collect();
                let mut b = json!({"vectors": vectors, "k": self.cfg.k});
                if let Some(f) = self.cfg.filter_json() {
                    b["filter"] = f;
                }
                ("search", b)
            }
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

    /// Computes the exact answers of the first `GT_QUERIES` pool queries over the points the
    /// fill wrote (those the filter matches), so that searches of them are scored: call it
    /// only when the collection holds exactly the fill (a fresh `--create`, no writes).
    /// Cost: `GT_QUERIES x points x dim` multiply-adds, spread over the cores.
    pub fn enable_recall(&self) {
        let cfg = &self.cfg;
        let nq = GT_QUERIES.min(self.queries.n);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut tops: Vec<TopK> = (0..nq).map(|_| TopK::new(cfg.k)).collect();
        let mut start = 0u64;
        while start < cfg.points {
            let n = (cfg.points - start).min(SAMPLE_BLOCK as u64) as usize;
            let rows = cfg.fill_vectors(start, n);
            let per = nq.div_ceil(threads).max(1);
            std::thread::scope(|s| {
                for (c, chunk) in tops.chunks_mut(per).enumerate() {
                    let rows = &rows;
                    s.spawn(move || {
                        for (i, t) in chunk.iter_mut().enumerate() {
                            let q = self.queries.row(c * per + i);
                            for r in 0..n {
                                let id = start + r as u64;
                                if cfg.matches(id) {
                                    t.push(id as u32, l2_sq(q, rows.row(r)));
                                }
                            }
                        }
                    });
                }
            });
            start += n as u64;
        }
        let truth = tops
            .into_iter()
            .map(|t| t.into_sorted().into_iter().map(|n| n.id as u64).collect())
            .collect();
        let _ = self.truth.set(truth);
    }

    /// The answer's result lists, one a query, each of at most k hits: an id the load
    /// writes (0..points) once, matching the filter, not known to be deleted when the
    /// search was sent (`Liveness`), with a finite squared distance (l2: >= 0), nearest
    /// first. Queries with exact answers are scored for recall.
    fn check_search(&self, seq: u64, v: &Value) -> bool {
        let sent = self.liveness.as_ref().and_then(|l| l.search_answered(seq));
        let Some(lists) = v.get("results").and_then(Value::as_array) else {
            return false;
        };
        if lists.len() != self.cfg.queries_per_request {
            return false;
        }
        let mut right = true;
        for (j, hits) in lists.iter().enumerate() {
            let Some(ids) = self.check_hits(hits, sent) else {
                right = false;
                continue;
            };
            if let Some(truth) = self.truth.get() {
                let row = self.query_row(seq, j);
                if let Some(t) = truth.get(row) {
                    let hit = ids.iter().filter(|id| t.contains(id)).count();
                    self.recall_hits.fetch_add(hit as u64, Relaxed);
                    self.recall_truths.fetch_add(t.len() as u64, Relaxed);
                    self.recall_queries.fetch_add(1, Relaxed);
                }
            }
        }
        right
    }

    /// One query's hits (see `check_search`): their ids, or None when wrong.
    fn check_hits(&self, hits: &Value, sent: Option<u64>) -> Option<Vec<u64>> {
        let hits = hits.as_array()?;
        if hits.len() > self.cfg.k {
            return None;
        }
        let mut ids = Vec::with_capacity(hits.len());
        let mut last = 0.0f64;
        for h in hits {
            let id = h.get("id").and_then(Value::as_u64)?;
            let d = h.get("distance").and_then(Value::as_f64)?;
            if id >= self.cfg.points || !d.is_finite() || d < last {
                return None;
            }
            if !self.cfg.matches(id) {
                self.filter_violations.fetch_add(1, Relaxed);
                return None;
            }
            if let (Some(l), Some(sent)) = (&self.liveness, sent) {
                if l.deleted_before(id, sent) {
                    self.deleted_seen.fetch_add(1, Relaxed);
                    return None;
                }
            }
            last = d;
            ids.push(id);
        }
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        (sorted.len() == ids.len()).then_some(ids)
    }
}

impl Workload for CollectionWorkload {
    fn service(&self) -> u16 {
        if self.frames {
            cohort_collections::frames::SERVICE_ID
        } else {
            0
        }
    }

    fn service_name(&self) -> &'static str {
        "collections"
    }

    /// Over frames (`over_frames`): request `seq`'s frame payload, noted as sent; over HTTP
    /// nothing (`http_request` makes the request).
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        if self.frames {
            self.note_sent(seq);
            self.frame(seq, out);
        }
    }

    fn json(&self, seq: u64) -> Value {
        self.request(seq).body
    }

    /// A frame's answer, checked as its JSON twin is (`check_json`).
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        use cohort_collections::frames::{
            decode_delete_answer, decode_search_answer, decode_upsert_answer,
        };
        if !self.frames {
            return false;
        }
        let v = match self.op(seq) {
            Op::Search => match decode_search_answer(payload) {
                Ok(results) => json!({"results": results.iter().map(|hits| hits.iter()
                    .map(|(id, d)| json!({"id": id, "distance": d})).collect::<Vec<_>>())
                    .collect::<Vec<_>>()}),
                Err(_) => return false,
            },
            Op::Upsert => match decode_upsert_answer(payload) {
                Ok(n) => json!({ "upserted": n }),
                Err(_) => return false,
            },
            Op::Delete => match decode_delete_answer(payload) {
                Ok(n) => json!({ "deleted": n }),
                Err(_) => return false,
            },
        };
        self.check_json(seq, &v)
    }

    fn own_grpc(&self) -> bool {
        self.grpc
    }

    /// Over gRPC (`over_grpc`): request `seq` as a call of the collections' service, noted as
    /// sent.
    fn grpc_call(&self, seq: u64) -> Option<(&'static str, Vec<u8>)> {
        self.grpc.then(|| {
            self.note_sent(seq);
            self.grpc_message(seq)
        })
    }

    /// A gRPC reply, checked as its JSON twin is (`check_json`).
    fn check_grpc(&self, seq: u64, answer: &[u8]) -> bool {
        self.grpc
            && self
                .grpc_reply_json(seq, answer)
                .is_some_and(|v| self.check_json(seq, &v))
    }

    fn check_json(&self, seq: u64, v: &Value) -> bool {
        let batch = self.cfg.write_batch as u64;
        match self.op(seq) {
            Op::Search => {
                let right = self.check_search(seq, v);
                self.searches.fetch_add(right as u64, Relaxed);
                right
            }
            Op::Upsert => {
                // Answered 200: applied, whatever the body says.
                if let Some(l) = &self.liveness {
                    l.upsert_answered(&self.ids(seq));
                }
                let right = *v == json!({ "upserted": batch });
                if right {
                    self.upserts.fetch_add(1, Relaxed);
                    self.points_upserted.fetch_add(batch, Relaxed);
                }
                right
            }
            Op::Delete => match v.get("deleted").and_then(Value::as_u64) {
                Some(m) if m <= batch && v.as_object().is_some_and(|o| o.len() == 1) => {
                    if let Some(l) = &self.liveness {
                        l.delete_answered(seq);
                    }
                    self.deletes.fetch_add(1, Relaxed);
                    self.points_deleted.fetch_add(m, Relaxed);
                    true
                }
                _ => false,
            },
        }
    }

    /// Request `seq` as it is sent: the client's record of writes and searches in flight
    /// (`Liveness`) notes it first.
    fn http_request(&self, seq: u64) -> Option<HttpRequest> {
        self.note_sent(seq);
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
        m.insert("k".into(), self.cfg.k.into());
        m.insert(
            "queries_per_request".into(),
            self.cfg.queries_per_request.into(),
        );
        let filter = self.cfg.filter_json();
        m.insert(
            "filter_selectivity".into(),
            (self.cfg.filter_threshold() as f64 / TAGS as f64).into(),
        );
        m.insert("filter".into(), filter.unwrap_or(Value::Null));
        for (k, c) in [
            ("searches_right", &self.searches),
            ("upserts_right", &self.upserts),
            ("deletes_right", &self.deletes),
            ("points_upserted", &self.points_upserted),
            ("points_deleted", &self.points_deleted),
            ("filter_violations", &self.filter_violations),
            ("deleted_points_answered", &self.deleted_seen),
        ] {
            m.insert(k.into(), c.load(Relaxed).into());
        }
        let truths = self.recall_truths.load(Relaxed);
        m.insert(
            "recall_queries".into(),
            self.recall_queries.load(Relaxed).into(),
        );
        if truths > 0 {
            let r = self.recall_hits.load(Relaxed) as f64 / truths as f64;
            m.insert("recall_at_k".into(), r.into());
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
            &self.filter_violations,
            &self.deleted_seen,
            &self.recall_hits,
            &self.recall_truths,
            &self.recall_queries,
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
mod tests;
