//! The Open Inference Protocol (KServe v2) over gRPC: `inference.GRPCInferenceService` as
//! NVIDIA's clients call it (tritonclient's gRPC client, perf_analyzer `-i grpc`). The same
//! tensor models, quotas, keys and deadlines as `/v2` over HTTP (`crate::v2`): the messages
//! are read into the same tensors and run through the same `v2::run`. Inputs arrive raw
//! (`raw_input_contents`) or typed (`contents`); outputs leave raw, as Triton sends them.
//! Errors are gRPC statuses whose message starts with Cohort's code name.

use crate::context::Context;
use crate::grpc_activity::{Activity, Quiet};
use crate::grpc_body::HeldAnswer;
use crate::grpc_flow::{Held, Ledger};
use crate::quota::Who;
use crate::shard::Shard;
use crate::v2::{refused, run, Ask, Failed};
use cohort_engine::Service;
use cohort_oip as pb;
use cohort_oip::tensors::{
    grpc_timeout_us, input_tensors, model_config, parameters, response, status, tensor_metadata,
};
use cohort_proto::{ErrorCode, ErrorPayload};
use serde_json::Value;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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

/// The service one connection talks to (it knows its peer, for quotas, and its share of the
/// byte budget).
pub(crate) struct Inference {
    pub shared: Arc<GrpcShared>,
    pub peer: Option<IpAddr>,
    pub ledger: Arc<Ledger>,
    /// The connection's calls in progress (a stream waiting idle is not: `Quiet`).
    pub activity: Arc<Activity>,
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
        let value = req.metadata().get("authorization").map(|v| v.as_bytes());
        auth.bearer(value, Some(sid))
            .map(Some)
            .map_err(|e| status(refused(ctx, sid, e)))
    }

    /// One inference, whichever RPC carried it.
    async fn infer(
        &self,
        r: pb::ModelInferRequest,
        key: Option<[u8; cohort_proto::KEY_ID_LEN]>,
        deadline_us: Option<u64>,
        admitted: bool,
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
            admitted,
        };
        match run(ctx, &self.shared.shard, &*service, &inputs, &params, ask).await {
            Ok(outputs) => response(&r, service.name(), outputs).map_err(status),
            // A client over its quota may come back later: RESOURCE_EXHAUSTED, not UNAVAILABLE.
            Err(Failed::OverQuota(e)) => Err(Status::resource_exhausted(status(e).message())),
            Err(Failed::Error(e)) => Err(status(e)),
        }
    }
}

/// When the call's head was read (`crate::grpc::serve_h2`): the time since is what the call
/// waited on this io thread before its handler ran.
#[derive(Clone, Copy)]
pub(crate) struct Arrived(pub std::time::Instant);

/// The call was already admitted past this io thread's backlog at its head
/// (`crate::grpc::serve_h2`): the handler does not ask again (a second ask would take a
/// second share of the admissions, refusing more than the thread needs).
#[derive(Clone, Copy)]
pub(crate) struct HeadAdmitted;

impl Inference {
    /// Whether a unary call to `sid` is admitted, and with which deadline left (its
    /// `grpc-timeout` less what it already waited here): refused at once, RESOURCE_EXHAUSTED,
    /// when this io thread is behind its arrivals (`ingress:`) or the wait has already spent
    /// its deadline (`deadline:`), rather than queued.
    fn admit<T>(&self, req: &Request<T>, sid: u16) -> Result<Option<u64>, Status> {
        admit(&self.shared, req, sid)
    }
}

/// `Inference::admit` for any unary call of the listener (the collections' too,
/// `crate::collections_grpc`).
pub(crate) fn admit<T>(
    shared: &GrpcShared,
    req: &Request<T>,
    sid: u16,
) -> Result<Option<u64>, Status> {
    let ctx = &shared.ctx;
    let waited = req
        .extensions()
        .get::<Arrived>()
        .map_or(0, |a| a.0.elapsed().as_micros() as u64);
    let left = match deadline(req) {
        Some(d) if waited >= d => {
            let detail = format!(
                "the call waited {waited} us on the io thread, past its grpc-timeout of \
                 {d} us; refused rather than run late"
            );
            let e = ctx
                .metrics
                .shed(sid, cohort_engine::Shed::Deadline, &detail);
            return Err(status(e));
        }
        d => d.map(|d| d - waited),
    };
    if req.extensions().get::<HeadAdmitted>().is_some() {
        return Ok(left);
    }
    match ctx.behind(&shared.shard, sid) {
        Some(e) => Err(status(e)),
        None => Ok(left),
    }
}

fn deadline<T>(req: &Request<T>) -> Option<u64> {
    req.metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(grpc_timeout_us)
}

/// A stream's answer, with its request's slot and its charge (`model_stream_infer`).
type Answered = (pb::ModelStreamInferResponse, OwnedSemaphorePermit, Held);

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
        // With keys on, a model's description needs a key that allows it, as its calls do.
        self.key(&req, s.id())?;
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
        self.key(&req, s.id())?;
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
        let deadline = self.admit(&req, service.id())?;
        // The request counts in the budget until its answer is made (then the answer does).
        let request = self
            .ledger
            .budget()
            .hold(prost::Message::encoded_len(req.get_ref()));
        // (Admitted past the io thread's backlog just now, or at its head.)
        let r = self.infer(req.into_inner(), key, deadline, true).await?;
        drop(request);
        // The answer counts in the budget from now until its bytes are written.
        let held = self.ledger.charge(prost::Message::encoded_len(&r));
        let mut answer = Response::new(r);
        answer.extensions_mut().insert(HeldAnswer::new(held));
        Ok(answer)
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
            ledger: self.ledger.clone(),
            activity: self.activity.clone(),
        };
        let me = Arc::new(me);
        let mut incoming = req.into_inner();
        let window = self.shared.stream_window.clamp(1, Semaphore::MAX_PERMITS);
        // A slot is one request of the stream from when it is read until its answer has
        // been taken to be sent: a stream whose answers the client does not take (no
        // window granted) stops being read after `window` of them.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Answered, Status>>(window);
        let slots = Arc::new(Semaphore::new(window));
        let budget = self.ledger.budget().clone();
        tokio::spawn(async move {
            loop {
                // Over the byte budget, a stream with answers outstanding reads no more
                // until the budget has room or its answers have gone (one that holds
                // none reads on: a client that waits for its answers is served).
                if budget.over() {
                    tokio::select! {
                        _ = budget.under() => {}
                        all = slots.clone().acquire_many_owned(window as u32) => drop(all),
                    }
                }
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                // Waiting for the next request with none in flight and every answer taken:
                // the stream is idle (for the connection's idle timeout) until one comes.
                let idle = slots.available_permits() + 1 == window;
                let quiet = idle.then(|| Quiet::start(&me.activity));
                let next = incoming.message().await;
                drop(quiet);
                let r = match next {
                    Ok(Some(r)) => r,
                    Ok(None) => return,
                    Err(s) => {
                        let _ = tx.send(Err(too_large(s))).await;
                        return;
                    }
                };
                // The request counts in the budget from being read until its answer is
                // made (as on TCP), so that streams read together stop at the budget.
                let request = budget.hold(prost::Message::encoded_len(&r));
                let (me, tx, auth_value) = (me.clone(), tx.clone(), auth_value.clone());
                tokio::spawn(async move {
                    let answer = me.stream_one(r, auth_value, deadline).await;
                    drop(request);
                    let held = me.ledger.charge(prost::Message::encoded_len(&answer));
                    let _ = tx.send(Ok((answer, slot, held))).await;
                });
            }
        });
        // Taking an answer frees its slot and hands its charge on (`Tracked`).
        let out =
            tokio_stream::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), |r| {
                r.map(|(answer, _slot, _held)| answer)
            });
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
            // A stream's requests are asked one by one as they are submitted.
            self.infer(r, key, deadline, false).await
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

/// tonic refuses a request message over the size limit with OUT_OF_RANGE; Cohort's
/// TOO_LARGE is RESOURCE_EXHAUSTED (docs/protocol.md).
pub(crate) fn too_large(s: tonic::Status) -> tonic::Status {
    if s.code() != tonic::Code::OutOfRange {
        return s;
    }
    status(ErrorPayload::new(ErrorCode::TooLarge, s.message()))
}
