//! The gRPC messages as Cohort's tensors, both ways: what the server reads from a
//! `ModelInferRequest` and answers (`input_tensors`, `parameters`, `response`, metadata and
//! config, Cohort's errors as statuses, the `grpc-timeout` deadline), and what a client
//! sends and reads back (`request`, `outputs`, `error_name`). Every refusal is BAD_REQUEST.

use crate as pb;
use cohort_engine::tensor::{DataType, Parameters, Tensor, TensorModel, TensorSpec};
use cohort_proto::{ErrorCode, ErrorPayload};
use serde_json::Value;
use tonic::Status;

fn bad(msg: impl Into<String>) -> ErrorPayload {
    ErrorPayload::new(ErrorCode::BadRequest, msg)
}

/// A Cohort error as a gRPC status (the message starts with the code's name).
pub fn status(e: ErrorPayload) -> Status {
    let code = match e.code {
        ErrorCode::BadRequest => tonic::Code::InvalidArgument,
        ErrorCode::UnknownService | ErrorCode::NotFound => tonic::Code::NotFound,
        // Refused at once for a bound (queue, quota, deadline, budget): the client may try
        // again later, as gRPC's RESOURCE_EXHAUSTED says; UNAVAILABLE is a server going away.
        ErrorCode::TooLarge | ErrorCode::Overloaded => tonic::Code::ResourceExhausted,
        ErrorCode::Unavailable => tonic::Code::Unavailable,
        ErrorCode::Timeout => tonic::Code::DeadlineExceeded,
        ErrorCode::Internal | ErrorCode::Truncated => tonic::Code::Internal,
        ErrorCode::Unauthorized => tonic::Code::Unauthenticated,
        ErrorCode::Forbidden => tonic::Code::PermissionDenied,
    };
    Status::new(code, format!("{}: {}", e.code.name(), e.message))
}

/// A deadline from gRPC's `grpc-timeout` header (digits, then H, M, S, m, u or n), in
/// microseconds; None when absent or malformed (the server's default deadline applies).
pub fn grpc_timeout_us(v: &str) -> Option<u64> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => n * 3_600_000_000,
        "M" => n * 60_000_000,
        "S" => n * 1_000_000,
        "m" => n * 1_000,
        "u" => n,
        "n" => n.div_ceil(1_000),
        _ => return None,
    })
}

fn parameter(p: &pb::InferParameter) -> Result<Value, ErrorPayload> {
    use pb::infer_parameter::ParameterChoice as C;
    Ok(match &p.parameter_choice {
        Some(C::BoolParam(b)) => Value::Bool(*b),
        Some(C::Int64Param(i)) => Value::from(*i),
        Some(C::Uint64Param(u)) => Value::from(*u),
        Some(C::StringParam(s)) => Value::from(s.as_str()),
        Some(C::DoubleParam(d)) => serde_json::Number::from_f64(*d)
            .map(Value::Number)
            .ok_or_else(|| bad(format!("parameter {d} is not a finite number")))?,
        None => Value::Null,
    })
}

/// The request's parameters as the tensor mappings read them (the HTTP side's JSON map).
pub fn parameters(
    m: &std::collections::HashMap<String, pb::InferParameter>,
) -> Result<Parameters, ErrorPayload> {
    m.iter()
        .map(|(k, v)| Ok((k.clone(), parameter(v)?)))
        .collect()
}

/// A typed `contents` field as the tensor's little-endian bytes.
fn from_contents(d: DataType, c: &pb::InferTensorContents) -> Result<Vec<u8>, ErrorPayload> {
    let le = |v: &mut Vec<u8>, b: &[u8]| v.extend_from_slice(b);
    let mut out = Vec::new();
    match d {
        DataType::Bool => out.extend(c.bool_contents.iter().map(|&b| b as u8)),
        DataType::Uint8 => {
            for &u in &c.uint_contents {
                out.push(u8::try_from(u).map_err(|_| bad(format!("{u} is not a UINT8")))?);
            }
        }
        DataType::Int32 => c
            .int_contents
            .iter()
            .for_each(|i| le(&mut out, &i.to_le_bytes())),
        DataType::Int64 => c
            .int64_contents
            .iter()
            .for_each(|i| le(&mut out, &i.to_le_bytes())),
        DataType::Fp32 => c
            .fp32_contents
            .iter()
            .for_each(|f| le(&mut out, &f.to_le_bytes())),
        DataType::Bytes => {
            out = cohort_engine::tensor::bytes_data(c.bytes_contents.iter().map(|b| &b[..]))
        }
    }
    Ok(out)
}

/// The request's input tensors, each checked against its shape and type.
pub fn input_tensors(r: &pb::ModelInferRequest) -> Result<Vec<Tensor>, ErrorPayload> {
    let raw = !r.raw_input_contents.is_empty();
    if raw && r.raw_input_contents.len() != r.inputs.len() {
        return Err(bad(format!(
            "{} raw_input_contents for {} inputs",
            r.raw_input_contents.len(),
            r.inputs.len()
        )));
    }
    r.inputs
        .iter()
        .enumerate()
        .map(|(n, i)| {
            let d = DataType::parse(&i.datatype).ok_or_else(|| {
                bad(format!(
                    "input {}: datatype {} is not served",
                    i.name, i.datatype
                ))
            })?;
            let shape = i
                .shape
                .iter()
                .map(|&s| {
                    usize::try_from(s)
                        .map_err(|_| bad(format!("input {}: shape {:?}", i.name, i.shape)))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let data = match (raw, &i.contents) {
                (true, Some(_)) => {
                    return Err(bad(format!(
                        "input {}: both contents and raw contents",
                        i.name
                    )))
                }
                (true, None) => r.raw_input_contents[n].to_vec(),
                (false, Some(c)) => from_contents(d, c)?,
                (false, None) => return Err(bad(format!("input {} has no data", i.name))),
            };
            Tensor {
                name: i.name.clone(),
                datatype: d,
                shape,
                data,
            }
            .checked()
        })
        .collect()
}

/// A `ModelInferRequest` message's tensors and parameters, as `ModelInfer` reads them
/// before the model does (the gRPC twin of `parse_infer`; every refusal is BAD_REQUEST).
pub fn parse_infer(message: &[u8]) -> Result<(Vec<Tensor>, Parameters), ErrorPayload> {
    let r = <pb::ModelInferRequest as prost::Message>::decode(message)
        .map_err(|e| bad(format!("not a ModelInferRequest: {e}")))?;
    Ok((input_tensors(&r)?, parameters(&r.parameters)?))
}

/// The answer: the requested outputs (all when none are named), in raw form.
pub fn response(
    r: &pb::ModelInferRequest,
    model: &str,
    outputs: Vec<Tensor>,
) -> Result<pb::ModelInferResponse, ErrorPayload> {
    let mut chosen = Vec::with_capacity(outputs.len());
    if r.outputs.is_empty() {
        chosen.extend(outputs);
    } else {
        let mut outputs: Vec<Option<Tensor>> = outputs.into_iter().map(Some).collect();
        for w in &r.outputs {
            let slot = outputs
                .iter_mut()
                .find(|t| t.as_ref().is_some_and(|t| t.name == w.name));
            let Some(t) = slot.and_then(Option::take) else {
                return Err(bad(format!("no output {:?} (or named twice)", w.name)));
            };
            chosen.push(t);
        }
    }
    let (listed, raw) = chosen
        .into_iter()
        .map(|t| {
            let o = pb::model_infer_response::InferOutputTensor {
                name: t.name,
                datatype: t.datatype.name().into(),
                shape: t.shape.iter().map(|&d| d as i64).collect(),
                parameters: Default::default(),
                contents: None,
            };
            (o, t.data)
        })
        .unzip();
    Ok(pb::ModelInferResponse {
        model_name: model.into(),
        model_version: "1".into(),
        id: r.id.clone(),
        parameters: Default::default(),
        outputs: listed,
        raw_output_contents: raw,
    })
}

pub fn tensor_metadata(v: Vec<TensorSpec>) -> Vec<pb::model_metadata_response::TensorMetadata> {
    v.into_iter()
        .map(|s| pb::model_metadata_response::TensorMetadata {
            name: s.name.into(),
            datatype: s.datatypes[0].name().into(),
            shape: s.shape,
        })
        .collect()
}

/// The model configuration Triton's tools read (as `/v2/models/{name}/config` on HTTP).
pub fn model_config(name: &str, m: &dyn TensorModel) -> pb::ModelConfig {
    let ty = |d: DataType| match d {
        DataType::Bytes => pb::DataType::TypeString,
        d => crate::config_type(d.name()),
    } as i32;
    pb::ModelConfig {
        name: name.into(),
        platform: "cohort".into(),
        max_batch_size: 0,
        input: m
            .inputs()
            .into_iter()
            .map(|s| pb::ModelInput {
                name: s.name.into(),
                data_type: ty(s.datatypes[0]),
                dims: s.shape,
            })
            .collect(),
        output: m
            .outputs()
            .into_iter()
            .map(|s| pb::ModelOutput {
                name: s.name.into(),
                data_type: ty(s.datatypes[0]),
                dims: s.shape,
            })
            .collect(),
    }
}

/// A JSON parameter as the protocol's (None for what it has no form of: null, arrays, maps).
fn to_parameter(v: &Value) -> Option<pb::InferParameter> {
    use pb::infer_parameter::ParameterChoice as C;
    let choice = match v {
        Value::Bool(b) => C::BoolParam(*b),
        Value::String(s) => C::StringParam(s.clone()),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => C::Int64Param(i),
            (_, Some(u), _) => C::Uint64Param(u),
            (_, _, Some(f)) => C::DoubleParam(f),
            _ => return None,
        },
        _ => return None,
    };
    Some(pb::InferParameter {
        parameter_choice: Some(choice),
    })
}

/// A client's `ModelInferRequest` of `inputs` (raw contents, as tritonclient sends them).
pub fn request(model: &str, inputs: Vec<Tensor>, params: &Parameters) -> pb::ModelInferRequest {
    let (listed, raw) = inputs
        .into_iter()
        .map(|t| {
            let i = pb::model_infer_request::InferInputTensor {
                name: t.name,
                datatype: t.datatype.name().into(),
                shape: t.shape.iter().map(|&d| d as i64).collect(),
                ..Default::default()
            };
            (i, t.data)
        })
        .unzip();
    pb::ModelInferRequest {
        model_name: model.into(),
        parameters: params
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), to_parameter(v)?)))
            .collect(),
        inputs: listed,
        raw_input_contents: raw,
        ..Default::default()
    }
}

/// A response's output tensors (raw contents, as the server sends them); None when malformed.
pub fn outputs(r: pb::ModelInferResponse) -> Option<Vec<Tensor>> {
    if r.outputs.len() != r.raw_output_contents.len() {
        return None;
    }
    r.outputs
        .into_iter()
        .zip(r.raw_output_contents)
        .map(|(o, data)| {
            let shape = o.shape.iter().map(|&d| usize::try_from(d).ok());
            Some(Tensor {
                name: o.name,
                datatype: DataType::parse(&o.datatype)?,
                shape: shape.collect::<Option<_>>()?,
                data,
            })
        })
        .collect()
}

/// A status's error name: Cohort's code, which starts its message (`status`), or the gRPC
/// code's.
pub fn error_name(s: &Status) -> String {
    let head = s.message().split(':').next().unwrap_or("");
    let cohort = !head.is_empty() && head.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
    match cohort {
        true => head.to_string(),
        false => format!("grpc_{:?}", s.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grpc_timeouts_in_every_unit() {
        assert_eq!(grpc_timeout_us("2S"), Some(2_000_000));
        assert_eq!(grpc_timeout_us("250m"), Some(250_000));
        assert_eq!(grpc_timeout_us("7u"), Some(7));
        assert_eq!(grpc_timeout_us("1500n"), Some(2));
        assert_eq!(grpc_timeout_us("1H"), Some(3_600_000_000));
        for bad in ["", "S", "12", "123456789S", "1x", "-1S", "1.5S"] {
            assert_eq!(grpc_timeout_us(bad), None, "{bad:?}");
        }
    }

    fn raw_request(datatype: &str, shape: Vec<i64>, raw: Vec<u8>) -> pb::ModelInferRequest {
        pb::ModelInferRequest {
            model_name: "echo".into(),
            inputs: vec![pb::model_infer_request::InferInputTensor {
                name: "x".into(),
                datatype: datatype.into(),
                shape,
                ..Default::default()
            }],
            raw_input_contents: vec![raw],
            ..Default::default()
        }
    }

    #[test]
    fn raw_and_typed_contents_make_the_same_tensor() {
        let raw = raw_request(
            "FP32",
            vec![1, 2],
            [1.5f32, -2.0]
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect(),
        );
        let mut typed = raw_request("FP32", vec![1, 2], vec![]);
        typed.raw_input_contents.clear();
        typed.inputs[0].contents = Some(pb::InferTensorContents {
            fp32_contents: vec![1.5, -2.0],
            ..Default::default()
        });
        let (a, b) = (input_tensors(&raw).unwrap(), input_tensors(&typed).unwrap());
        assert_eq!(a, b);
        assert_eq!(a[0].f32s(), Some(vec![1.5, -2.0]));
    }

    #[test]
    fn malformed_inputs_are_bad_requests() {
        let cases = [
            raw_request("FP32", vec![3], vec![0; 8]), // 8 bytes for 3 floats
            raw_request("FP16", vec![1], vec![0; 2]), // a type no service takes
            raw_request("UINT8", vec![-1], vec![]),   // a negative dimension
            raw_request("BYTES", vec![1], vec![9, 0, 0, 0]), // an element longer than the data
            raw_request("UINT8", vec![1 << 62, 1 << 62], vec![]), // a shape whose product overflows
        ];
        for r in cases {
            let e = input_tensors(&r).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{r:?}");
        }
        let mut two = raw_request("UINT8", vec![1], vec![1]);
        two.raw_input_contents.push(vec![2]);
        assert!(
            input_tensors(&two).is_err(),
            "two raw contents for one input"
        );
        let mut big = raw_request("UINT8", vec![1], vec![1]);
        big.inputs[0].contents = Some(pb::InferTensorContents {
            uint_contents: vec![256],
            ..Default::default()
        });
        big.raw_input_contents.clear();
        assert!(input_tensors(&big).is_err(), "256 is not a UINT8");
    }

    #[test]
    fn outputs_are_chosen_by_name_once_each() {
        let t = |n: &str| Tensor {
            name: n.into(),
            datatype: DataType::Uint8,
            shape: vec![1],
            data: vec![n.len() as u8],
        };
        let mut r = raw_request("UINT8", vec![1], vec![1]);
        r.id = "seven".into();
        let all = response(&r, "m", vec![t("a"), t("bb")]).unwrap();
        assert_eq!(all.raw_output_contents, vec![vec![1], vec![2]]);
        assert_eq!(all.id, "seven");
        let want = |n: &str| pb::model_infer_request::InferRequestedOutputTensor {
            name: n.into(),
            ..Default::default()
        };
        r.outputs = vec![want("bb")];
        let one = response(&r, "m", vec![t("a"), t("bb")]).unwrap();
        assert_eq!(one.outputs.len(), 1);
        assert_eq!(one.raw_output_contents, vec![vec![2]]);
        r.outputs = vec![want("bb"), want("bb")];
        assert!(response(&r, "m", vec![t("a"), t("bb")]).is_err());
        r.outputs = vec![want("zz")];
        assert!(response(&r, "m", vec![t("a")]).is_err());
    }

    #[test]
    fn every_code_maps_to_a_status_naming_it() {
        for code in ErrorCode::ALL {
            let s = status(ErrorPayload::new(code, "why"));
            assert!(s.message().starts_with(code.name()), "{s:?}");
            assert_ne!(s.code(), tonic::Code::Ok);
            assert_eq!(error_name(&s), code.name());
        }
        assert_eq!(error_name(&Status::cancelled("gone")), "grpc_Cancelled");
    }

    #[test]
    fn a_client_request_reads_back_as_its_tensors() {
        let t = Tensor {
            name: "data".into(),
            datatype: DataType::Bytes,
            shape: vec![2],
            data: cohort_engine::tensor::bytes_data([&b"ab"[..], b""]),
        };
        let mut params = Parameters::new();
        params.insert("k".into(), Value::from(5));
        params.insert("exact".into(), Value::from(true));
        let r = request("echo", vec![t.clone()], &params);
        let (back, p) = parse_infer(&prost::Message::encode_to_vec(&r)).unwrap();
        assert_eq!(back, vec![t.clone()]);
        assert_eq!(p, params);
        let answer = response(&r, "echo", vec![t.clone()]).unwrap();
        assert_eq!(outputs(answer), Some(vec![t]));
    }

    proptest! {
        /// Any bytes: a clear refusal or tensors that fit their shapes, never a panic.
        #[test]
        fn any_message_is_refused_or_fits(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            match parse_infer(&bytes) {
                Ok((tensors, _)) => {
                    for t in tensors {
                        if let Some(s) = t.datatype.size() {
                            prop_assert_eq!(t.data.len(), s * t.elements());
                        }
                    }
                }
                Err(e) => prop_assert_eq!(e.code, ErrorCode::BadRequest),
            }
        }
    }
}
