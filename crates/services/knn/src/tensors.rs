//! k-NN over the Open Inference Protocol: input `vector` (FP32 or UINT8 [N, dim]),
//! parameters `k` (default 10) and `nprobe` (default 0: the index's); outputs `ids` (INT64
//! [N, k], -1 past what the probed lists held) and `distances` (FP32 [N, k], +inf there).
//! Each row is one request to the engine.

use super::{decode_response, encode_request, Elems, Knn};
use cohort_engine::tensor::{input, DataType, Parameters, Tensor, TensorModel, TensorSpec};
use cohort_proto::ErrorPayload;
use cohort_service_api::bad_request;

/// A small non-negative integer parameter, or its default.
fn param(p: &Parameters, key: &str, default: u16) -> Result<u16, ErrorPayload> {
    match p.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| {
                bad_request(format!(
                    "parameter {key:?} must be a small non-negative integer"
                ))
            }),
    }
}

impl TensorModel for Knn {
    fn inputs(&self) -> Vec<TensorSpec> {
        vec![TensorSpec {
            name: "vector",
            datatypes: &[DataType::Fp32, DataType::Uint8],
            shape: vec![-1, self.index.dim as i64],
        }]
    }

    fn outputs(&self) -> Vec<TensorSpec> {
        vec![
            TensorSpec {
                name: "ids",
                datatypes: &[DataType::Int64],
                shape: vec![-1, -1],
            },
            TensorSpec {
                name: "distances",
                datatypes: &[DataType::Fp32],
                shape: vec![-1, -1],
            },
        ]
    }

    fn rows(&self, inputs: &[Tensor], p: &Parameters) -> Result<Vec<Vec<u8>>, ErrorPayload> {
        let t = input(inputs, "vector")?;
        let dim = self.index.dim;
        if t.shape.len() != 2 || t.shape[1] != dim {
            return Err(bad_request(format!(
                "vector is [N, {dim}]; got {:?}",
                t.shape
            )));
        }
        let (k, nprobe) = (param(p, "k", 10)?, param(p, "nprobe", 0)?);
        let mut rows = Vec::with_capacity(t.shape[0]);
        match t.datatype {
            DataType::Fp32 => {
                let v: Vec<f32> = t
                    .data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                for row in v.chunks(dim) {
                    let mut out = Vec::with_capacity(12 + 4 * dim);
                    encode_request(k, nprobe, Elems::F32(row), &mut out);
                    rows.push(out);
                }
            }
            DataType::Uint8 => {
                for row in t.data.chunks(dim) {
                    let mut out = Vec::with_capacity(12 + dim);
                    encode_request(k, nprobe, Elems::U8(row), &mut out);
                    rows.push(out);
                }
            }
            d => {
                return Err(bad_request(format!(
                    "vector is FP32 or UINT8, not {}",
                    d.name()
                )))
            }
        }
        Ok(rows)
    }

    fn join(&self, answers: &[Vec<u8>], p: &Parameters) -> Result<Vec<Tensor>, ErrorPayload> {
        let (n, k) = (answers.len(), usize::from(param(p, "k", 10)?));
        let mut ids = Vec::with_capacity(8 * n * k);
        let mut dist = Vec::with_capacity(4 * n * k);
        for a in answers {
            let found = decode_response(a).map_err(|e| {
                ErrorPayload::new(
                    cohort_proto::ErrorCode::Internal,
                    format!("a malformed knn answer: {e}"),
                )
            })?;
            for j in 0..k {
                let (id, d) = found
                    .get(j)
                    .map_or((-1, f32::INFINITY), |x| (i64::from(x.id), x.distance));
                ids.extend_from_slice(&id.to_le_bytes());
                dist.extend_from_slice(&d.to_le_bytes());
            }
        }
        Ok(vec![
            Tensor {
                name: "ids".into(),
                datatype: DataType::Int64,
                shape: vec![n, k],
                data: ids,
            },
            Tensor {
                name: "distances".into(),
                datatype: DataType::Fp32,
                shape: vec![n, k],
                data: dist,
            },
        ])
    }
}
