//! The Open Inference Protocol (KServe v2) over gRPC: `inference.GRPCInferenceService` as
//! NVIDIA's clients call it (tritonclient's gRPC client, perf_analyzer `-i grpc`). The same
//! tensor models, quotas, keys and deadlines as `/v2` over HTTP (`crate::v2`): the messages
//! are read into the same tensors and run through the same `v2::run`. Inputs arrive raw
//! (`raw_input_contents`) or typed (`contents`); outputs leave raw, as Triton sends them.
//! Errors are gRPC statuses whose message starts with Cohort's code name.

use crate::context::Context;
use crate::quota::Who;
use crate::shard::Shard;
use crate::v2::{bad, checked, refused, run, Ask, Failed};
use cohort_engine::tensor::{DataType, Parameters, Tensor, TensorModel, TensorSpec};
use cohort_engine::Service;
use cohort_oip as pb;
use cohort_proto::{ErrorCode, ErrorPayload};
use serde_json::Value;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// What every connection's service shares on one shard.
pub(crate) struct GrpcShared {
    pub ctx: Arc<Context>,
    pub shard: Arc<Shard>,
    /// Requests of one inference stream in flight at once (more wait to be read).
    pub stream_window: usize,
    pub ids: AtomicU64,
}

/// The service one connection talks to (it knows its peer, for quotas).
pub(crate) struct Inference {
    pub shared: Arc<GrpcShared>,
    pub peer: Option<IpAddr>,
}

/// A Cohort error as a gRPC status (the message starts with the code's name).
pub(crate) fn status(e: ErrorPayload) -> Status {
    let code = match e.code {
        ErrorCode::BadRequest => tonic::Code::InvalidArgument,
        ErrorCode::UnknownService | ErrorCode::NotFound => tonic::Code::NotFound,
        ErrorCode::TooLarge => tonic::Code::ResourceExhausted,
        ErrorCode::Overloaded | ErrorCode::Unavailable => tonic::Code::Unavailable,
        ErrorCode::Timeout => tonic::Code::DeadlineExceeded,
        ErrorCode::Internal | ErrorCode::Truncated => tonic::Code::Internal,
        ErrorCode::Unauthorized => tonic::Code::Unauthenticated,
        ErrorCode::Forbidden => tonic::Code::PermissionDenied,
    };
    Status::new(code, format!("{}: {}", e.code.name(), e.message))
}

/// A deadline from gRPC's `grpc-timeout` header (digits, then H, M, S, m, u or n), in
/// microseconds; None when absent or malformed (the server's default deadline applies).
pub(crate) fn grpc_timeout_us(v: &str) -> Option<u64> {
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
pub(crate) fn parameters(
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
pub(crate) fn input_tensors(r: &pb::ModelInferRequest) -> Result<Vec<Tensor>, ErrorPayload> {
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
            checked(Tensor {
                name: i.name.clone(),
                datatype: d,
                shape,
                data,
            })
        })
        .collect()
}

/// A `ModelInferRequest` message's tensors and parameters, as `ModelInfer` reads them
/// before the model does (the gRPC twin of `parse_infer`; every refusal is BAD_REQUEST).
pub fn parse_grpc_infer(message: &[u8]) -> Result<(Vec<Tensor>, Parameters), ErrorPayload> {
    let r = <pb::ModelInferRequest as prost::Message>::decode(message)
        .map_err(|e| bad(format!("not a ModelInferRequest: {e}")))?;
    Ok((input_tensors(&r)?, parameters(&r.parameters)?))
}

/// The answer: the requested outputs (all when none are named), in raw form.
pub(crate) fn response(
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

fn tensor_metadata(v: Vec<TensorSpec>) -> Vec<pb::model_metadata_response::TensorMetadata> {
    v.into_iter()
        .map(|s| pb::model_metadata_response::TensorMetadata {
            name: s.name.into(),
            datatype: s.datatypes[0].name().into(),
            shape: s.shape,
        })
        .collect()
}

/// The model configuration Triton's tools read (as `/v2/models/{name}/config` on HTTP).
fn model_config(name: &str, m: &dyn TensorModel) -> pb::ModelConfig {
    let ty = |d: DataType| match d {
        DataType::Bytes => pb::DataType::TypeString,
        d => pb::config_type(d.name()),
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

impl Inference {
    /// The tensor model `name` (version "" or "1"), or NOT_FOUND.
    fn model(&self, name: &str, version: &str) -> Result<Arc<dyn Service>, Status> {
        let s = self
            .shared
            .ctx
            .registry
            .by_name(name)
            .filter(|s| s.tensor_model().is_some());
        match s {
            Some(s) if version.is_empty() || version == "1" => Ok(s.clone()),
            Some(_) => Err(status(ErrorPayload::new(
                ErrorCode::NotFound,
                format!("model {name:?} has only version 1"),
            ))),
            None => Err(status(ErrorPayload::new(
                ErrorCode::NotFound,
                format!("no model {name:?}"),
            ))),
        }
    }

    /// The key the request's `authorization` metadata carries, if keys are on and it allows
    /// `sid`; else the refusal (counted).
    fn key<T>(
        &self,
        req: &Request<T>,
        sid: u16,
    ) -> Result<Option<[u8; cohort_proto::KEY_ID_LEN]>, Status> {
        let ctx = &self.shared.ctx;
        let Some(auth) = ctx.auth.as_ref() else {
            return Ok(None);
        };
        let value = req
            .metadata()
            .get("authorization")
            .and_then(|v| hyper::header::HeaderValue::from_bytes(v.as_bytes()).ok());
        auth.bearer(value.as_ref(), Some(sid))
            .map(Some)
            .map_err(|e| status(refused(ctx, sid, e)))
    }

    /// One inference, whichever RPC carried it.
    async fn infer(
        &self,
        r: pb::ModelInferRequest,
        key: Option<[u8; cohort_proto::KEY_ID_LEN]>,
        deadline_us: Option<u64>,
    ) -> Result<pb::ModelInferResponse, Status> {
        let service = self.model(&r.model_name, &r.model_version)?;
        let ctx = &self.shared.ctx;
        let sid = service.id();
        let read = input_tensors(&r).and_then(|t| Ok((t, parameters(&r.parameters)?)));
        let (inputs, params) = read.map_err(|e| status(refused(ctx, sid, e)))?;
        let timeout_us = match params.get("timeout_us").and_then(Value::as_u64) {
            Some(t) => Some(deadline_us.map_or(t, |d| d.min(t))),
            None => deadline_us,
        };
        let ask = Ask {
            who: Who::of(key, self.peer),
            id: self.shared.ids.fetch_add(1, Ordering::Relaxed),
            timeout_us,
        };
        match run(ctx, &self.shared.shard, &*service, &inputs, &params, ask).await {
            Ok(outputs) => response(&r, service.name(), outputs).map_err(status),
            // A client over its quota may come back later: RESOURCE_EXHAUSTED, not UNAVAILABLE.
            Err(Failed::OverQuota(e)) => Err(Status::resource_exhausted(status(e).message())),
            Err(Failed::Error(e)) => Err(status(e)),
        }
    }
}

fn deadline<T>(req: &Request<T>) -> Option<u64> {
    req.metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(grpc_timeout_us)
}

type AnswerStream =
    Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl pb::grpc_inference_service_server::GrpcInferenceService for Inference {
    async fn server_live(
        &self,
        _: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        let ready = !self.shared.ctx.is_shutting_down();
        Ok(Response::new(pb::ServerReadyResponse { ready }))
    }

    async fn model_ready(
        &self,
        req: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let r = req.get_ref();
        let ready = self.model(&r.name, &r.version).is_ok() && !self.shared.ctx.is_shutting_down();
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: "cohort".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: vec![],
        }))
    }

    async fn model_metadata(
        &self,
        req: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let r = req.get_ref();
        let s = self.model(&r.name, &r.version)?;
        let m = s.tensor_model().expect("a tensor model");
        Ok(Response::new(pb::ModelMetadataResponse {
            name: r.name.clone(),
            versions: vec!["1".into()],
            platform: "cohort".into(),
            inputs: tensor_metadata(m.inputs()),
            outputs: tensor_metadata(m.outputs()),
        }))
    }

    async fn model_config(
        &self,
        req: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        let r = req.get_ref();
        let s = self.model(&r.name, &r.version)?;
        let config = model_config(&r.name, s.tensor_model().expect("a tensor model"));
        Ok(Response::new(pb::ModelConfigResponse {
            config: Some(config),
        }))
    }

    async fn model_infer(
        &self,
        req: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let service = self.model(&req.get_ref().model_name, &req.get_ref().model_version)?;
        let key = self.key(&req, service.id())?;
        let deadline = deadline(&req);
        let r = self.infer(req.into_inner(), key, deadline).await?;
        Ok(Response::new(r))
    }

    type ModelStreamInferStream = AnswerStream;

    /// Requests on one stream run concurrently (up to the stream window) and their answers
    /// leave as they finish, each carrying its request's id; a failed request is an answer
    /// with `error_message`, and the stream goes on. The key and deadline are the stream's.
    async fn model_stream_infer(
        &self,
        req: Request<Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<AnswerStream>, Status> {
        let deadline = deadline(&req);
        let auth_value = req.metadata().get("authorization").cloned();
        let me = Inference {
            shared: self.shared.clone(),
            peer: self.peer,
        };
        let me = Arc::new(me);
        let mut incoming = req.into_inner();
        let window = self.shared.stream_window.max(1);
        let (tx, rx) = tokio::sync::mpsc::channel(window);
        let slots = Arc::new(tokio::sync::Semaphore::new(window));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let r = match incoming.message().await {
                    Ok(Some(r)) => r,
                    Ok(None) => return,
                    Err(s) => {
                        let _ = tx.send(Err(s)).await;
                        return;
                    }
                };
                let (me, tx, auth_value) = (me.clone(), tx.clone(), auth_value.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    let answer = me.stream_one(r, auth_value, deadline).await;
                    let _ = tx.send(Ok(answer)).await;
                });
            }
        });
        let out = tokio_stream::wrappers::ReceiverStream::new(rx);
        Ok(Response::new(Box::pin(out)))
    }
}

impl Inference {
    async fn stream_one(
        &self,
        r: pb::ModelInferRequest,
        auth_value: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
        deadline: Option<u64>,
    ) -> pb::ModelStreamInferResponse {
        let id = r.id.clone();
        let run = async {
            let service = self.model(&r.model_name, &r.model_version)?;
            let mut probe = Request::new(());
            if let Some(v) = auth_value {
                probe.metadata_mut().insert("authorization", v);
            }
            let key = self.key(&probe, service.id())?;
            self.infer(r, key, deadline).await
        };
        match run.await {
            Ok(answer) => pb::ModelStreamInferResponse {
                error_message: String::new(),
                infer_response: Some(answer),
            },
            Err(s) => pb::ModelStreamInferResponse {
                error_message: s.message().to_string(),
                // The failed request's id, so that a client can match the error to it.
                infer_response: Some(pb::ModelInferResponse {
                    id,
                    ..Default::default()
                }),
            },
        }
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
        }
    }

    proptest! {
        /// Any bytes: a clear refusal or tensors that fit their shapes, never a panic.
        #[test]
        fn any_message_is_refused_or_fits(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            match parse_grpc_infer(&bytes) {
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
