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
use cohort_knn::metric::l2_sq;
use cohort_knn::synth::{Model, SynthConfig, SAMPLE_BLOCK};
use cohort_knn::TopK;
use cohort_knn::Vectors;
use cohort_services::workload::HttpRequest;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};

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
/// Lock stripes over the ids' write state.
const STRIPES: usize = 1024;
/// Shards of the maps from a request in flight to what it was sent with.
const SHARDS: usize = 16;
/// `dead_from` of an id not known to be deleted.
const ALIVE: u64 = u64::MAX;

/// A delete in flight: its send tick and the ids that had no upsert outstanding then.
type InFlightDelete = (u64, Vec<u64>);

/// What the client knows of each id's writes, to tell a deleted point in an answer
/// (`CollectionWorkload::check_search`). Clock values are ticks of `clock`, taken at sends
/// and acknowledgements (all `SeqCst`, so their order is one total order).
///
/// An id is *known deleted since tick a* when a delete carrying it was acknowledged at tick
/// a, every upsert of it sent before that delete was sent had been answered by then (so
/// none can be applied after the delete), and no upsert of it has been sent since the
/// delete was sent. An upsert sent later clears it at once, before it is sent. A search
/// sent at tick g answering an id that is still known deleted, since a tick before g, when
/// its answer arrives has answered a point that was deleted all the time the search could
/// have run: a wrong answer. Anything less certain is not judged.
struct Liveness {
    clock: AtomicU64,
    stripes: Vec<Mutex<()>>,
    /// Per id: upserts sent and not yet answered; the tick of the last upsert sent; the tick
    /// since which it is known deleted (`ALIVE`: not known).
    pending: Vec<AtomicU64>,
    last_upsert: Vec<AtomicU64>,
    dead_from: Vec<AtomicU64>,
    /// Searches in flight: their send tick. Deletes in flight: their send tick and the ids
    /// that had no upsert outstanding then.
    searches: Vec<Mutex<HashMap<u64, u64>>>,
    deletes: Vec<Mutex<HashMap<u64, InFlightDelete>>>,
}

impl Liveness {
    fn new(points: u64) -> Liveness {
        let n = points as usize;
        let atomics = |v| (0..n).map(|_| AtomicU64::new(v)).collect::<Vec<_>>();
        Liveness {
            clock: AtomicU64::new(0),
            stripes: (0..STRIPES).map(|_| Default::default()).collect(),
            pending: atomics(0),
            last_upsert: atomics(0),
            dead_from: atomics(ALIVE),
            searches: (0..SHARDS).map(|_| Default::default()).collect(),
            deletes: (0..SHARDS).map(|_| Default::default()).collect(),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, SeqCst)
    }

    fn lock(&self, id: u64) -> MutexGuard<'_, ()> {
        self.stripes[id as usize % STRIPES]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn shard<T>(v: &[Mutex<T>], seq: u64) -> MutexGuard<'_, T> {
        v[(mix(seq) % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn upsert_sent(&self, ids: &[u64]) {
        for &id in ids {
            let _g = self.lock(id);
            let i = id as usize;
            self.pending[i].fetch_add(1, SeqCst);
            self.dead_from[i].store(ALIVE, SeqCst);
            self.last_upsert[i].store(self.tick(), SeqCst);
        }
    }

    fn upsert_answered(&self, ids: &[u64]) {
        for &id in ids {
            let _g = self.lock(id);
            self.pending[id as usize].fetch_sub(1, SeqCst);
        }
    }

    fn delete_sent(&self, seq: u64, ids: &[u64]) {
        // The tick first: an upsert ticked before it has its pending count seen below.
        let sent = self.tick();
        let clean = ids
            .iter()
            .copied()
            .filter(|&id| {
                let _g = self.lock(id);
                self.pending[id as usize].load(SeqCst) == 0
            })
            .collect();
        Self::shard(&self.deletes, seq).insert(seq, (sent, clean));
    }

    fn delete_answered(&self, seq: u64) {
        let Some((sent, clean)) = Self::shard(&self.deletes, seq).remove(&seq) else {
            return;
        };
        for id in clean {
            let _g = self.lock(id);
            let i = id as usize;
            if self.last_upsert[i].load(SeqCst) < sent {
                let at = self.tick();
                self.dead_from[i].store(at, SeqCst);
            }
        }
    }

    fn search_sent(&self, seq: u64) {
        let at = self.tick();
        Self::shard(&self.searches, seq).insert(seq, at);
    }

    /// The search's send tick (once: its answer is being checked).
    fn search_answered(&self, seq: u64) -> Option<u64> {
        Self::shard(&self.searches, seq).remove(&seq)
    }

    /// Whether `id` was deleted since before tick `sent` and still is.
    fn deleted_before(&self, id: u64, sent: u64) -> bool {
        self.dead_from[id as usize].load(SeqCst) < sent
    }
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
    /// Over the native frames (tcp:// targets, service 7): searches and upserts only (the
    /// frames have no delete: a write that would be a delete is an upsert).
    frames: bool,
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
        })
    }

    /// Sends searches and upserts as the collections' native frames (service 7,
    /// docs/protocol.md) instead of REST JSON; there are no deletes then.
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
        use cohort_collections::frames::{PointFrame, SearchFrame, UpsertFrame};
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
            Op::Upsert | Op::Delete => {
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
        } else if !self.frames && mix(h).is_multiple_of(DELETE_EVERY) {
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
        use cohort_collections::frames::{decode_search_answer, decode_upsert_answer};
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
            _ => match decode_upsert_answer(payload) {
                Ok(n) => json!({ "upserted": n }),
                Err(_) => return false,
            },
        };
        self.check_json(seq, &v)
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
mod tests {
    use super::*;

    fn config(write_share: f64) -> CollectionLoad {
        CollectionLoad {
            name: "items".into(),
            dim: 16,
            points: 1000,
            write_share,
            write_batch: 10,
            k: 10,
            seed: 3,
            queries_per_request: 1,
            filter_selectivity: None,
        }
    }

    fn workload(write_share: f64) -> CollectionWorkload {
        CollectionWorkload::new(config(write_share)).unwrap()
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
            CollectionLoad {
                queries_per_request: 0,
                ..good.clone()
            },
            CollectionLoad {
                queries_per_request: 1025,
                ..good.clone()
            },
            CollectionLoad {
                filter_selectivity: Some(0.0),
                ..good.clone()
            },
            CollectionLoad {
                filter_selectivity: Some(0.0004),
                ..good.clone()
            },
            CollectionLoad {
                filter_selectivity: Some(1.5),
                ..good.clone()
            },
            CollectionLoad {
                filter_selectivity: Some(f64::NAN),
                ..good.clone()
            },
            CollectionLoad {
                points: MAX_POINTS + 1,
                ..good.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(good.validate().is_ok());
    }

    #[test]
    fn filtered_searches_of_many_queries_are_sent_and_checked() {
        let w = CollectionWorkload::new(CollectionLoad {
            queries_per_request: 3,
            filter_selectivity: Some(0.01),
            ..config(0.0)
        })
        .unwrap();
        assert_eq!(w.config().filter_threshold(), 10);
        let r = w.request(0);
        assert_eq!(r.path, "/v1/collections/items/search");
        assert_eq!(r.body["vectors"].as_array().unwrap().len(), 3);
        assert_eq!(r.body["filter"], json!({"range": ["tag", {"lt": 10}]}));
        // Distinct rows for the queries of one request, the same again for the same seq.
        let rows: HashSet<usize> = (0..3).map(|j| w.query_row(0, j)).collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(w.request(0), w.request(0));
        let hit = |id: u64, d: f64| json!({"id": id, "distance": d});
        let ok = json!({"results": [[hit(5, 1.0), hit(7, 2.0)], [], [hit(9, 0.5)]]});
        assert!(w.check_json(0, &ok));
        // Tag 10 is outside the filter; two lists for three queries is wrong.
        let outside = json!({"results": [[hit(5, 1.0), hit(10, 2.0)], [], []]});
        assert!(!w.check_json(1, &outside));
        assert!(!w.check_json(2, &json!({"results": [[], []]})));
        let e = w.extra();
        assert_eq!(e["filter_violations"], 1);
        assert_eq!(e["filter_selectivity"], 0.01);
        assert_eq!(e["queries_per_request"], 3);
        assert!(e.get("recall_at_k").is_none(), "no truth computed");
    }

    #[test]
    fn recall_is_scored_against_the_exact_answers_of_the_matches() {
        let cfg = CollectionLoad {
            filter_selectivity: Some(0.1),
            ..config(0.0)
        };
        let w = CollectionWorkload::new(cfg.clone()).unwrap();
        w.enable_recall();
        let truth = w.truth.get().unwrap();
        assert_eq!(truth.len(), GT_QUERIES);
        // The truth by brute force over the fill, for one query.
        let fill = cfg.fill_vectors(0, cfg.points as usize);
        let q = w.queries.row(7);
        let mut all: Vec<(f32, u64)> = (0..cfg.points)
            .filter(|&id| cfg.matches(id))
            .map(|id| (l2_sq(q, fill.row(id as usize)), id))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        let want: Vec<u64> = all.iter().take(10).map(|x| x.1).collect();
        assert_eq!(truth[7], want);
        assert!(truth.iter().flatten().all(|&id| cfg.matches(id)));
        // A search whose query has truth: the exact answer scores 1, half of it 0.5.
        let seq = (0..).find(|&s| w.query_row(s, 0) < GT_QUERIES).unwrap();
        let t = &truth[w.query_row(seq, 0)];
        let answer = |ids: &[u64]| {
            json!({"results": [ids.iter().enumerate()
                .map(|(i, id)| json!({"id": id, "distance": i as f64}))
                .collect::<Vec<_>>()]})
        };
        assert!(w.check_json(seq, &answer(t)));
        assert_eq!(w.extra()["recall_at_k"], 1.0);
        assert!(w.check_json(seq, &answer(&t[..5])));
        assert_eq!(w.extra()["recall_at_k"], 0.75);
        assert_eq!(w.extra()["recall_queries"], 2);
        w.reset();
        assert!(w.extra().get("recall_at_k").is_none());
    }

    #[test]
    fn a_point_known_deleted_in_an_answer_is_wrong() {
        let w = workload(0.5);
        let l = w.liveness.as_ref().unwrap();
        let hit = |id: u64| json!({"results": [[{"id": id, "distance": 1.0}]]});
        let search = |from: u64| (from..).find(|&s| w.op(s) == Op::Search).unwrap();
        let delete = (0..).find(|&s| w.op(s) == Op::Delete).unwrap();
        let gone = w.ids(delete)[0];
        // A search sent before the delete was acknowledged may find the point.
        let s0 = search(0);
        w.http_request(s0);
        w.http_request(delete);
        assert!(w.check_json(delete, &json!({"deleted": 10})));
        assert!(w.check_json(s0, &hit(gone)));
        // One sent after it must not.
        let s1 = search(s0 + 1);
        w.http_request(s1);
        assert!(!w.check_json(s1, &hit(gone)));
        assert_eq!(w.extra()["deleted_points_answered"], 1);
        // An upsert of it sent before the search's answer came: not judged.
        let s2 = search(s1 + 1);
        w.http_request(s2);
        l.upsert_sent(&[gone]);
        assert!(w.check_json(s2, &hit(gone)));
        // A delete sent while an upsert of the id is unanswered marks nothing (the upsert
        // may land after it), nor does one acknowledged after a later upsert was sent.
        let d2 = (delete + 1..).find(|&s| w.op(s) == Op::Delete).unwrap();
        let other = w.ids(d2)[0];
        l.upsert_sent(&[other]);
        w.http_request(d2);
        assert!(w.check_json(d2, &json!({"deleted": 1})));
        let s3 = search(s2 + 1);
        w.http_request(s3);
        assert!(w.check_json(s3, &hit(other)));
    }
}
