//! Typed tensors for the Open Inference Protocol (KServe v2, served at `/v2/...`): a service
//! whose requests are tensors says how a request's tensors split into wire payloads, one
//! per row of the first dimension (so the rows batch with every other request), and how the
//! rows' answers join into its output tensors. The transport (JSON or binary tensors) is the
//! gateway's; the mapping is the service's.

use cohort_proto::ErrorPayload;

/// The element types the services use, with the protocol's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// One byte each, 0 or 1.
    Bool,
    Uint8,
    Int32,
    Int64,
    Fp32,
    /// Each element a byte string (binary form: a u32 LE length, then the bytes).
    Bytes,
}

impl DataType {
    pub fn name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp32 => "FP32",
            DataType::Bytes => "BYTES",
        }
    }

    pub fn parse(s: &str) -> Option<DataType> {
        [
            DataType::Bool,
            DataType::Uint8,
            DataType::Int32,
            DataType::Int64,
            DataType::Fp32,
            DataType::Bytes,
        ]
        .into_iter()
        .find(|d| d.name() == s)
    }

    /// Bytes per element (None for BYTES: each its own length).
    pub fn size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 => Some(1),
            DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Int64 => Some(8),
            DataType::Bytes => None,
        }
    }
}

/// A tensor: its elements as little-endian bytes, row-major (BYTES: length-prefixed).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Tensor {
    /// Elements its shape holds (usize::MAX when the product overflows: no data fits it).
    pub fn elements(&self) -> usize {
        self.shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .unwrap_or(usize::MAX)
    }

    /// The tensor when its bytes fit its shape and type (BYTES: well-formed, one element per
    /// cell), else BAD_REQUEST naming it.
    pub fn checked(self) -> Result<Tensor, ErrorPayload> {
        let fits = match self.datatype.size() {
            Some(s) => self.elements().checked_mul(s) == Some(self.data.len()),
            None => byte_elements(&self).is_ok(),
        };
        if fits {
            return Ok(self);
        }
        Err(ErrorPayload::new(
            cohort_proto::ErrorCode::BadRequest,
            format!(
                "input {}: {} bytes do not make a {} tensor of shape {:?}",
                self.name,
                self.data.len(),
                self.datatype.name(),
                self.shape
            ),
        ))
    }

    /// An FP32 tensor's elements (None for another type).
    pub fn f32s(&self) -> Option<Vec<f32>> {
        (self.datatype == DataType::Fp32).then(|| {
            let b = self.data.chunks_exact(4);
            b.map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect()
        })
    }

    /// An INT64 tensor's elements (None for another type).
    pub fn i64s(&self) -> Option<Vec<i64>> {
        (self.datatype == DataType::Int64).then(|| {
            let b = self.data.chunks_exact(8);
            b.map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                .collect()
        })
    }
}

/// An input or output as a model's metadata lists it: -1 for a dimension of any size (the
/// first is the batch); `datatypes` the types accepted (outputs: one).
#[derive(Debug, Clone)]
pub struct TensorSpec {
    pub name: &'static str,
    pub datatypes: &'static [DataType],
    pub shape: Vec<i64>,
}

/// The parameters of an inference request that a mapping reads (e.g. knn's `k`).
pub type Parameters = serde_json::Map<String, serde_json::Value>;

/// A service's tensors (see the module's text).
pub trait TensorModel: Send + Sync {
    fn inputs(&self) -> Vec<TensorSpec>;
    fn outputs(&self) -> Vec<TensorSpec>;
    /// One wire payload per row of the inputs' first dimension; BAD_REQUEST names what is
    /// wrong (a missing input, a shape, a type, a parameter).
    fn rows(&self, inputs: &[Tensor], params: &Parameters) -> Result<Vec<Vec<u8>>, ErrorPayload>;
    /// The output tensors of the rows' answers (in row order).
    fn join(&self, answers: &[Vec<u8>], params: &Parameters) -> Result<Vec<Tensor>, ErrorPayload>;
}

/// The input named `name`, or BAD_REQUEST.
pub fn input<'a>(inputs: &'a [Tensor], name: &str) -> Result<&'a Tensor, ErrorPayload> {
    inputs.iter().find(|t| t.name == name).ok_or_else(|| {
        ErrorPayload::new(
            cohort_proto::ErrorCode::BadRequest,
            format!("input {name:?} is required"),
        )
    })
}

/// A BYTES tensor's elements.
pub fn byte_elements(t: &Tensor) -> Result<Vec<&[u8]>, ErrorPayload> {
    let bad = || {
        ErrorPayload::new(
            cohort_proto::ErrorCode::BadRequest,
            "a malformed BYTES tensor",
        )
    };
    let mut out = Vec::with_capacity(t.elements());
    let mut rest = &t.data[..];
    while !rest.is_empty() {
        let len = u32::from_le_bytes(rest.get(..4).ok_or_else(bad)?.try_into().unwrap()) as usize;
        out.push(rest.get(4..4 + len).ok_or_else(bad)?);
        rest = &rest[4 + len..];
    }
    if out.len() != t.elements() {
        return Err(bad());
    }
    Ok(out)
}

/// BYTES elements as a tensor's data.
pub fn bytes_data<'a>(elements: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for e in elements {
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    out
}
