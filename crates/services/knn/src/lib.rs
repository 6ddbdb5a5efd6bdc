//! `knn`: k nearest neighbours of a query vector in an IVF-Flat index.
//!
//! Request (little-endian):
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | k (1..=1024, at most the index size) |
//! | 2 | 2 | nprobe (0 = the index default; at most nlist) |
//! | 4 | 1 | element type: 0 f32, 1 u8 |
//! | 5 | 2 | queries q (0 or 1: one query, today's request; at most [`MAX_QUERIES`]) |
//! | 7 | 1 | reserved, 0 |
//! | 8 | 4 | dim (must equal the index's) |
//! | 12 | max(q, 1) x (dim * 4 or dim) | the query vectors, one after another |
//!
//! Every element must be finite with |x| <= 1e16 (so squared distances cannot overflow f32).
//!
//! Response to one query (q = 0 or 1): count u32, then `count` x (id u32, distance f32),
//! nearest first. Response to q >= 2 queries: q u32, then per query in request order its
//! one-query response (count u32, then count x (id u32, distance f32)). An error in any query
//! (a bad value, a timeout, overload) is the whole request's one error answer.
//!
//! A request of several queries (q >= 1) is split by the server's ingress into one-query
//! requests ([`cohort_engine::rows`]: `Knn`'s [`RowSplit`](cohort_engine::rows::RowSplit)), so
//! each query batches with all other traffic on every engine, and the engines and GPU
//! backends below only ever see q = 0. Each query takes one place of `--max-queue`.
//!
//! The GPU backend (`gpu.rs`) batches requests by (k, nprobe) and stages vectors straight from
//! the request message into pinned memory.

#[cfg(feature = "backends")]
pub mod bench;
#[cfg(feature = "backends")]
pub mod centaur;
#[cfg(feature = "backends")]
pub mod config;
#[cfg(feature = "backends")]
pub mod engine_checks;
#[cfg(feature = "backends")]
pub mod gpu;
/// The index on the GPU (`cohort_ivf_gpu`), under the names the service's code uses.
#[cfg(feature = "backends")]
pub use cohort_ivf_gpu::{gpu_ivf, gpu_kmeans};
#[cfg(feature = "backends")]
pub mod gpu_sharded;
#[cfg(feature = "backends")]
pub mod index_tool;
#[cfg(feature = "backends")]
pub mod kernels;
pub mod load;
#[cfg(feature = "backends")]
pub mod persistent;
#[cfg(feature = "backends")]
pub mod persistent_sharded;
#[cfg(feature = "backends")]
pub mod precision;
#[cfg(feature = "backends")]
pub mod selftest;
#[cfg(feature = "backends")]
pub mod sharded_checks;
#[cfg(feature = "backends")]
pub mod slice;
#[cfg(feature = "backends")]
pub mod split;
pub mod tensors;

use cohort_engine::Service;
use cohort_ivf::{IvfIndex, Neighbor, SearchParams};
use cohort_proto::ErrorPayload;
use std::sync::Arc;

/// Its wire id (in every frame header).
pub const ID: u16 = 3;

pub const MAX_K: usize = 1024;
/// The most query vectors one request carries (a frame's payload limit may allow fewer:
/// `cohort_proto::MAX_PAYLOAD` bytes of vectors, and of answers).
pub const MAX_QUERIES: usize = 1024;
const HEAD: usize = cohort_ivf::QUERY_HEAD;
/// Largest magnitude of a query element (`cohort_ivf::MAX_ABS_ELEMENT`).
pub const MAX_ABS_ELEMENT: f32 = cohort_ivf::MAX_ABS_ELEMENT;

#[derive(Debug, Clone, PartialEq)]
pub struct KnnRequest {
    pub k: usize,
    pub nprobe: usize,
    pub vector: Vec<f32>,
}

/// A query vector as sent on the wire.
pub enum Elems<'a> {
    F32(&'a [f32]),
    U8(&'a [u8]),
}

pub fn encode_request(k: u16, nprobe: u16, v: Elems<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(&k.to_le_bytes());
    out.extend_from_slice(&nprobe.to_le_bytes());
    match v {
        Elems::F32(x) => {
            out.extend_from_slice(&[0, 0, 0, 0]);
            out.extend_from_slice(&(x.len() as u32).to_le_bytes());
            x.iter()
                .for_each(|f| out.extend_from_slice(&f.to_le_bytes()));
        }
        Elems::U8(x) => {
            out.extend_from_slice(&[1, 0, 0, 0]);
            out.extend_from_slice(&(x.len() as u32).to_le_bytes());
            out.extend_from_slice(x);
        }
    }
}

/// A request of `v.len() / dim` queries (`dim` > 0, `v` a whole number of vectors): one
/// query is written exactly as [`encode_request`] does (q = 0), more carry their count.
pub fn encode_queries(k: u16, nprobe: u16, dim: usize, v: Elems<'_>, out: &mut Vec<u8>) {
    let at = out.len();
    let len = match v {
        Elems::F32(x) => x.len(),
        Elems::U8(x) => x.len(),
    };
    assert!(dim > 0 && len % dim == 0, "whole vectors of {dim} elements");
    let q = len / dim;
    match v {
        Elems::F32(x) => encode_request(k, nprobe, Elems::F32(&x[..dim]), out),
        Elems::U8(x) => encode_request(k, nprobe, Elems::U8(&x[..dim]), out),
    }
    if q > 1 {
        out[at + 5..at + 7].copy_from_slice(&(q.min(u16::MAX as usize) as u16).to_le_bytes());
        match v {
            Elems::F32(x) => x[dim..]
                .iter()
                .for_each(|f| out.extend_from_slice(&f.to_le_bytes())),
            Elems::U8(x) => out.extend_from_slice(&x[dim..]),
        }
    }
}

/// The queries field of a request (0: the field is unset, one query).
pub fn queries_field(p: &[u8]) -> usize {
    p.get(5..7)
        .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]) as usize)
}

/// Checks a request that carries a queries field (q >= 1) against an index of `dim`
/// dimensions, `nlist` cells and `n` vectors: its header, the count (1..=[`MAX_QUERIES`]),
/// the frame's length against the count, and that the answer fits a frame. The queries'
/// values are checked as each query runs. Returns q.
pub fn parse_queries(p: &[u8], dim: usize, nlist: usize, n: usize) -> Result<usize, ErrorPayload> {
    let q = queries_field(p);
    if p.len() < HEAD || q == 0 {
        return Err(cohort_service_api::bad_request(
            "a request of several queries needs its header and a query count",
        ));
    }
    if q > MAX_QUERIES {
        return Err(cohort_service_api::bad_request(format!(
            "{q} queries in one request: at most {MAX_QUERIES}"
        )));
    }
    if p[7] != 0 {
        return Err(cohort_service_api::bad_request(
            "reserved byte must be zero",
        ));
    }
    let width = match p[4] {
        0 => dim * 4,
        1 => dim,
        e => {
            return Err(cohort_service_api::bad_request(format!(
                "unknown element type {e} (0 f32, 1 u8)"
            )))
        }
    };
    let body = p.len() - HEAD;
    if body != q * width {
        return Err(cohort_service_api::bad_request(format!(
            "{q} queries of dimension {dim} take {} bytes, the request holds {body}",
            q * width
        )));
    }
    // The first query's header stands for all (they share it): k, nprobe, dim checked once.
    let mut one = [0u8; HEAD];
    one.copy_from_slice(&p[..HEAD]);
    one[5..7].fill(0);
    check_head(&one, body / q, dim, nlist, n)?;
    let k = u16::from_le_bytes([p[0], p[1]]) as usize;
    let answer = 4 + q * (4 + 8 * k);
    if q > 1 && answer > cohort_proto::MAX_PAYLOAD {
        return Err(ErrorPayload::new(
            cohort_proto::ErrorCode::TooLarge,
            format!(
                "{q} answers of k = {k} take {answer} bytes, a frame at most {}: send fewer \
                 queries a request",
                cohort_proto::MAX_PAYLOAD
            ),
        ));
    }
    Ok(q)
}

/// Appends query `i`'s own one-query request (q = 0) of a request [`parse_queries`] accepted.
pub fn query_request(p: &[u8], i: usize, out: &mut Vec<u8>) {
    let width = (p.len() - HEAD) / queries_field(p).max(1);
    out.extend_from_slice(&p[..5]);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(&p[8..HEAD]);
    out.extend_from_slice(&p[HEAD + i * width..HEAD + (i + 1) * width]);
}

/// Appends the answer of a request of `answers.len()` queries from the queries' own answers:
/// one query's answer as it is (the one-query response), several behind their count.
pub fn join_answers<'a>(answers: impl ExactSizeIterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    if answers.len() != 1 {
        out.extend_from_slice(&(answers.len() as u32).to_le_bytes());
    }
    answers.for_each(|a| out.extend_from_slice(a));
}

/// Decodes the answer to a request of `queries` queries (1: the one-query response).
pub fn decode_responses(p: &[u8], queries: usize) -> Result<Vec<Vec<Neighbor>>, String> {
    if queries <= 1 {
        return decode_response(p).map(|r| vec![r]);
    }
    let q = p
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize)
        .ok_or("short response")?;
    if q != queries {
        return Err(format!("response holds {q} answers for {queries} queries"));
    }
    let mut rest = &p[4..];
    let mut out = Vec::with_capacity(q);
    for _ in 0..q {
        let n = rest
            .get(..4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize)
            .ok_or("response ends inside a query's answer")?;
        let len = 4 + 8 * n.min(MAX_K + 1);
        let one = rest
            .get(..len)
            .ok_or("response ends inside a query's answer")?;
        out.push(decode_response(one)?);
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last answer", rest.len()));
    }
    Ok(out)
}

/// A request's header, validated against the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub k: usize,
    /// As sent: 0 = the index default.
    pub nprobe: usize,
    /// 0 f32, 1 u8.
    pub elem: u8,
}

/// Validates everything but the vector's values against an index of `dim` dimensions, `nlist`
/// cells and `n` vectors.
pub fn parse_head(p: &[u8], dim: usize, nlist: usize, n: usize) -> Result<Head, ErrorPayload> {
    if p.len() < HEAD {
        return Err(cohort_service_api::bad_request(format!(
            "knn request needs {HEAD} header bytes, got {}",
            p.len()
        )));
    }
    if queries_field(p) != 0 {
        // The ingress splits these (`Knn`'s RowSplit); the engines take one query.
        return Err(cohort_service_api::bad_request(
            "a request of several queries reached a path that takes one (query count must be 0)",
        ));
    }
    check_head(p, p.len() - HEAD, dim, nlist, n)
}

/// [`parse_head`] of a one-query header whose vector holds `body` bytes.
fn check_head(
    p: &[u8],
    body: usize,
    dim: usize,
    nlist: usize,
    n: usize,
) -> Result<Head, ErrorPayload> {
    let k = u16::from_le_bytes([p[0], p[1]]) as usize;
    let nprobe = u16::from_le_bytes([p[2], p[3]]) as usize;
    let elem = p[4];
    if p[5..8] != [0, 0, 0] {
        return Err(cohort_service_api::bad_request(
            "reserved bytes must be zero",
        ));
    }
    let got_dim = u32::from_le_bytes(p[8..12].try_into().expect("4 bytes")) as usize;
    if got_dim != dim {
        return Err(cohort_service_api::bad_request(format!(
            "vector has dimension {got_dim}, the index has {dim}"
        )));
    }
    if k == 0 || k > MAX_K.min(n) {
        return Err(cohort_service_api::bad_request(format!(
            "k must be in 1..={}",
            MAX_K.min(n)
        )));
    }
    if nprobe > nlist {
        return Err(cohort_service_api::bad_request(format!(
            "nprobe must be at most nlist ({nlist})"
        )));
    }
    match elem {
        0 if body == dim * 4 => {}
        1 if body == dim => {}
        0 | 1 => {
            return Err(cohort_service_api::bad_request(format!(
                "vector bytes ({body}) do not match dim {dim}"
            )))
        }
        e => {
            return Err(cohort_service_api::bad_request(format!(
                "unknown element type {e} (0 f32, 1 u8)"
            )))
        }
    }
    Ok(Head { k, nprobe, elem })
}

/// Writes the vector of a request whose head parsed into `out` (dim floats), refusing
/// non-finite or too large elements.
pub fn vector_into(p: &[u8], head: Head, out: &mut [f32]) -> Result<(), ErrorPayload> {
    let body = &p[HEAD..];
    if head.elem == 0 {
        for (o, c) in out.iter_mut().zip(body.chunks_exact(4)) {
            *o = f32::from_le_bytes(c.try_into().expect("4 bytes"));
        }
    } else {
        for (o, &b) in out.iter_mut().zip(body) {
            *o = b as f32;
        }
    }
    if out.iter().any(|x| !x.is_finite()) {
        return Err(cohort_service_api::bad_request(
            "vector holds NaN or infinity",
        ));
    }
    if out.iter().any(|x| x.abs() > MAX_ABS_ELEMENT) {
        return Err(cohort_service_api::bad_request(format!(
            "vector elements must be at most {MAX_ABS_ELEMENT:e} in magnitude"
        )));
    }
    Ok(())
}

/// Decodes and validates a request against an index of `dim` dimensions, `nlist` cells
/// and `n` vectors.
pub fn decode_request(
    p: &[u8],
    dim: usize,
    nlist: usize,
    n: usize,
) -> Result<KnnRequest, ErrorPayload> {
    let head = parse_head(p, dim, nlist, n)?;
    let mut vector = vec![0.0; dim];
    vector_into(p, head, &mut vector)?;
    Ok(KnnRequest {
        k: head.k,
        nprobe: head.nprobe,
        vector,
    })
}

/// Appends an answer to `out`.
pub fn encode_response_into(r: &[Neighbor], out: &mut Vec<u8>) {
    out.extend_from_slice(&(r.len() as u32).to_le_bytes());
    for n in r {
        out.extend_from_slice(&n.id.to_le_bytes());
        out.extend_from_slice(&n.distance.to_le_bytes());
    }
}

pub fn encode_response(r: &[Neighbor]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 8 * r.len());
    encode_response_into(r, &mut out);
    out
}

pub fn decode_response(p: &[u8]) -> Result<Vec<Neighbor>, String> {
    let n = p
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
        .ok_or("short response")? as usize;
    if n > MAX_K || p.len() != 4 + 8 * n {
        return Err(format!(
            "response length {} does not hold {n} neighbours",
            p.len()
        ));
    }
    Ok(p[4..]
        .chunks_exact(8)
        .map(|c| Neighbor {
            id: u32::from_le_bytes(c[0..4].try_into().expect("4")),
            distance: f32::from_le_bytes(c[4..8].try_into().expect("4")),
        })
        .collect())
}

pub struct Knn {
    pub index: Arc<IvfIndex>,
}

impl Knn {
    pub fn decode(&self, p: &[u8]) -> Result<KnnRequest, ErrorPayload> {
        decode_request(p, self.index.dim, self.index.nlist, self.index.n)
    }

    fn one_query(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let r = self.decode(payload)?;
        let found = self.index.query(
            &r.vector,
            SearchParams {
                k: r.k,
                nprobe: r.nprobe,
            },
        );
        encode_response_into(&found, out);
        Ok(())
    }
}

/// Several queries a request (see the module's text): split by the ingress, joined here.
impl cohort_engine::rows::RowSplit for Knn {
    fn rows(&self, p: &[u8]) -> Result<Option<usize>, ErrorPayload> {
        if queries_field(p) == 0 {
            return Ok(None);
        }
        let ix = &self.index;
        parse_queries(p, ix.dim, ix.nlist, ix.n).map(Some)
    }
    fn row(&self, p: &[u8], i: usize, out: &mut Vec<u8>) {
        query_request(p, i, out)
    }
    fn join(&self, answers: &cohort_engine::rows::RowAnswers<'_>, out: &mut Vec<u8>) {
        join_answers((0..answers.len()).map(|i| answers.get(i)), out)
    }
}

impl Service for Knn {
    fn id(&self) -> u16 {
        ID
    }
    fn name(&self) -> &'static str {
        "knn"
    }
    fn tensor_model(&self) -> Option<&dyn cohort_engine::tensor::TensorModel> {
        Some(self)
    }
    fn http_doc(&self) -> Option<cohort_engine::HttpDoc> {
        let dim = self.index.dim;
        Some(cohort_engine::HttpDoc {
            summary: "The k nearest vectors of the index to a query vector (IVF-Flat)",
            request: serde_json::json!({
                "type": "object",
                "properties": {
                    "vector": { "type": "array", "items": { "type": "number" }, "minItems": dim, "maxItems": dim,
                                "description": format!("the query, {dim} numbers") },
                    "k": { "type": "integer", "minimum": 1, "description": "neighbours to return (default 10)" },
                    "nprobe": { "type": "integer", "minimum": 0, "description": "lists to scan (0: the server's setting)" }
                },
                "required": ["vector"]
            }),
            response: serde_json::json!({
                "type": "object",
                "properties": {
                    "ids": { "type": "array", "items": { "type": "integer", "minimum": 0 }, "description": "row ids, nearest first" },
                    "distances": { "type": "array", "items": { "type": "number" }, "description": "their distances, in the index's metric" }
                },
                "required": ["ids", "distances"]
            }),
            example: serde_json::json!({ "vector": vec![0.0f32; dim], "k": 3 }),
        })
    }
    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        use cohort_engine::rows::RowSplit;
        let Some(q) = self.rows(payload)? else {
            return self.one_query(payload, out);
        };
        // A request of several queries that reached the CPU function whole (a path that does
        // not split, such as the selftest's harness): the queries in order, joined as the
        // ingress joins them.
        let (mut row, mut answers) = (Vec::new(), Vec::with_capacity(q));
        for i in 0..q {
            row.clear();
            query_request(payload, i, &mut row);
            let mut a = Vec::new();
            self.one_query(&row, &mut a)?;
            answers.push(a);
        }
        join_answers(answers.iter().map(|a| &a[..]), out);
        Ok(())
    }
    fn row_split(&self) -> Option<&dyn cohort_engine::rows::RowSplit> {
        Some(self)
    }
    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        let v = body
            .get("vector")
            .and_then(|v| v.as_array())
            .ok_or_else(|| {
                cohort_service_api::bad_request("field \"vector\" (array of numbers) is required")
            })?;
        let vector: Vec<f32> = v
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32))
            .collect::<Option<_>>()
            .ok_or_else(|| cohort_service_api::bad_request("\"vector\" must hold only numbers"))?;
        let num = |key: &str, default: u64| -> Result<u16, ErrorPayload> {
            match body.get(key) {
                None => Ok(default as u16),
                Some(x) => x
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| {
                        cohort_service_api::bad_request(format!(
                            "\"{key}\" must be a small non-negative integer"
                        ))
                    }),
            }
        };
        let mut out = Vec::new();
        encode_request(
            num("k", 10)?,
            num("nprobe", 0)?,
            Elems::F32(&vector),
            &mut out,
        );
        Ok(out)
    }
    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        match decode_response(payload) {
            Ok(r) => serde_json::json!({
                "ids": r.iter().map(|n| n.id).collect::<Vec<_>>(),
                "distances": r.iter().map(|n| n.distance).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({ "error": e }),
        }
    }
}
