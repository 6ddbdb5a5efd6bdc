//! `knn`: k nearest neighbours of a query vector in an IVF-Flat index.
//!
//! Request (little-endian):
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | k (1..=1024, at most the index size) |
//! | 2 | 2 | nprobe (0 = the index default; at most nlist) |
//! | 4 | 1 | element type: 0 f32, 1 u8 |
//! | 5 | 3 | reserved, 0 |
//! | 8 | 4 | dim (must equal the index's) |
//! | 12 | dim * 4 or dim | the vector |
//!
//! Every element must be finite with |x| <= 1e16 (so squared distances cannot overflow f32).
//!
//! Response: count u32, then `count` x (id u32, distance f32), nearest first.
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
/// The index on the GPU (`cohort_knn_gpu`), under the names the service's code uses.
#[cfg(feature = "backends")]
pub use cohort_knn_gpu::{gpu_ivf, gpu_kmeans};
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
pub mod selftest;
#[cfg(feature = "backends")]
pub mod slice;
#[cfg(feature = "backends")]
pub mod split;
pub mod tensors;

use cohort_engine::Service;
use cohort_knn::{IvfIndex, Neighbor, SearchParams};
use cohort_proto::ErrorPayload;
use std::sync::Arc;

/// Its wire id (in every frame header).
pub const ID: u16 = 3;

pub const MAX_K: usize = 1024;
const HEAD: usize = cohort_knn::QUERY_HEAD;
/// Largest magnitude of a query element (`cohort_knn::MAX_ABS_ELEMENT`).
pub const MAX_ABS_ELEMENT: f32 = cohort_knn::MAX_ABS_ELEMENT;

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
    let body = p.len() - HEAD;
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
