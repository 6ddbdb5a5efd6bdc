//! The Open Inference Protocol's REST request body read into tensors: its JSON part (inputs
//! as nested or flat `data`, or sizes of the binary extension's bytes after it) and tensors
//! written back as its JSON `data`. The HTTP side (`cohort-net`'s v2 routes) and the fuzz
//! target share it; it needs no HTTP stack.

use crate::tensor::{DataType, Parameters, Tensor};
use cohort_proto::{ErrorCode, ErrorPayload};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
pub struct InferRequest {
    pub id: Option<String>,
    #[serde(default)]
    pub parameters: Parameters,
    pub inputs: Vec<InputTensor>,
    pub outputs: Option<Vec<RequestedOutput>>,
}

#[derive(Deserialize)]
pub struct InputTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub datatype: String,
    #[serde(default)]
    pub parameters: Parameters,
    pub data: Option<Value>,
}

#[derive(Deserialize)]
pub struct RequestedOutput {
    pub name: String,
    #[serde(default)]
    pub parameters: Parameters,
}

fn bad(msg: impl Into<String>) -> ErrorPayload {
    ErrorPayload::new(ErrorCode::BadRequest, msg)
}

/// JSON `data` (nested or flat) as the tensor's bytes.
fn from_json(d: DataType, data: &Value, out: &mut Vec<u8>) -> Result<usize, ErrorPayload> {
    match data {
        Value::Array(a) => a.iter().try_fold(0, |n, x| Ok(n + from_json(d, x, out)?)),
        x => {
            let int = |lo: i64, hi: i64| {
                x.as_i64()
                    .filter(|v| (lo..=hi).contains(v))
                    .ok_or_else(|| bad(format!("{x} is not a {} element", d.name())))
            };
            match d {
                DataType::Bool => {
                    let b = x
                        .as_bool()
                        .ok_or_else(|| bad(format!("{x} is not a BOOL element")))?;
                    out.push(b as u8);
                }
                DataType::Uint8 => out.push(int(0, 255)? as u8),
                DataType::Int32 => out.extend_from_slice(
                    &(int(i32::MIN.into(), i32::MAX.into())? as i32).to_le_bytes(),
                ),
                DataType::Int64 => out.extend_from_slice(&int(i64::MIN, i64::MAX)?.to_le_bytes()),
                DataType::Fp32 => {
                    let v = x
                        .as_f64()
                        .ok_or_else(|| bad(format!("{x} is not a number")))?;
                    out.extend_from_slice(&(v as f32).to_le_bytes());
                }
                DataType::Bytes => {
                    let s = x
                        .as_str()
                        .ok_or_else(|| bad(format!("{x} is not a string")))?;
                    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                    out.extend_from_slice(s.as_bytes());
                }
            }
            Ok(1)
        }
    }
}

/// A tensor's bytes as JSON `data` (flat, row-major). Non-finite FP32 values are null.
pub fn to_json(t: &Tensor) -> Value {
    match t.datatype {
        DataType::Bool => t.data.iter().map(|&b| json!(b != 0)).collect(),
        DataType::Uint8 => t.data.iter().map(|&b| json!(b)).collect(),
        DataType::Int32 => t
            .data
            .chunks_exact(4)
            .map(|b| json!(i32::from_le_bytes(b.try_into().unwrap())))
            .collect(),
        DataType::Int64 => t
            .data
            .chunks_exact(8)
            .map(|b| json!(i64::from_le_bytes(b.try_into().unwrap())))
            .collect(),
        DataType::Fp32 => t
            .data
            .chunks_exact(4)
            .map(|b| json!(f32::from_le_bytes(b.try_into().unwrap())))
            .collect(),
        DataType::Bytes => crate::tensor::byte_elements(t)
            .unwrap_or_default()
            .into_iter()
            .map(|e| json!(String::from_utf8_lossy(e)))
            .collect(),
    }
}

/// The request's tensors from its JSON part and binary part.
pub fn tensors(r: &InferRequest, mut binary: &[u8]) -> Result<Vec<Tensor>, ErrorPayload> {
    let mut out = Vec::with_capacity(r.inputs.len());
    for i in &r.inputs {
        let d = DataType::parse(&i.datatype).ok_or_else(|| {
            bad(format!(
                "input {}: datatype {} is not served",
                i.name, i.datatype
            ))
        })?;
        let elements = (i.shape.iter())
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                bad(format!(
                    "input {}: shape {:?} is too large",
                    i.name, i.shape
                ))
            })?;
        let data = match (i.parameters.get("binary_data_size"), &i.data) {
            (Some(n), _) => {
                let n = n
                    .as_u64()
                    .ok_or_else(|| bad("binary_data_size is a byte count"))?
                    as usize;
                if n > binary.len() {
                    return Err(bad(format!(
                        "input {}: {n} binary bytes, {} left",
                        i.name,
                        binary.len()
                    )));
                }
                let (mine, rest) = binary.split_at(n);
                binary = rest;
                mine.to_vec()
            }
            (None, Some(v)) => {
                let mut b = Vec::new();
                let n = from_json(d, v, &mut b)?;
                if n != elements {
                    return Err(bad(format!(
                        "input {}: {n} elements for shape {:?}",
                        i.name, i.shape
                    )));
                }
                b
            }
            (None, None) => return Err(bad(format!("input {} has no data", i.name))),
        };
        let t = Tensor {
            name: i.name.clone(),
            datatype: d,
            shape: i.shape.clone(),
            data,
        };
        out.push(t.checked()?);
    }
    if !binary.is_empty() {
        return Err(bad(format!(
            "{} binary bytes that no input claims",
            binary.len()
        )));
    }
    Ok(out)
}

/// An inference request's JSON part.
pub fn parse_request(json: &[u8]) -> Result<InferRequest, ErrorPayload> {
    serde_json::from_slice(json).map_err(|e| bad(format!("not an inference request: {e}")))
}

/// An inference request's tensors and parameters from its JSON part and the binary part
/// after it (empty without the binary extension): what `infer` reads before the model does.
pub fn parse_infer(json: &[u8], binary: &[u8]) -> Result<(Vec<Tensor>, Parameters), ErrorPayload> {
    let r = parse_request(json)?;
    Ok((tensors(&r, binary)?, r.parameters))
}
