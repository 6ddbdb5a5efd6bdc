//! The Open Inference Protocol over gRPC (`grpc://HOST:PORT`): each request one
//! `ModelInfer` call of one row (the workload's tensor form, raw contents), every answer's
//! output tensors checked. A workload of one of Cohort's own gRPC services (a collection's
//! searches and writes, `Workload::own_grpc`) gives each call's path and encoded message
//! instead, and checks the encoded reply. HTTP/2 multiplexes, so requests do not wait for a free
//! connection: a due request is sent at once on its thread's next connection (round robin).
//! One thread per core the generator may use (`transport::on_threads`), each with its own
//! connections and its share of the schedule, as on HTTP.

use crate::config::{LoadConfig, Mode};
use crate::recorder::{seq_of, Answer, Recorder, Shared};
use crate::transport::http::{pace, wait_until};
use crate::transport::{
    connections_and_threads, into_recorder, on_threads, record, ThreadRecorder,
};
use anyhow::{Context as _, Result};
use cohort_oip::grpc_inference_service_client::GrpcInferenceServiceClient;
use cohort_oip::tensors::{error_name, outputs, request};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tonic::transport::Channel;

type Client = GrpcInferenceServiceClient<Channel>;

/// Messages passed as the bytes the workload encoded (and replies as received): the
/// transport knows no service's messages.
#[derive(Clone, Copy, Default)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(buf, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut v = vec![0; bytes::Buf::remaining(buf)];
        bytes::Buf::copy_to_slice(buf, &mut v);
        Ok(Some(v))
    }
}

/// The request's deadline and key, as every call carries them.
fn prepare<T>(sh: &Shared, req: &mut tonic::Request<T>) -> Option<()> {
    if sh.request_timeout_us > 0 {
        req.set_timeout(std::time::Duration::from_micros(
            sh.request_timeout_us.into(),
        ));
    }
    if let Some(k) = &sh.key {
        let bearer = format!("Bearer {}", k.secret).parse().ok()?;
        req.metadata_mut().insert("authorization", bearer);
    }
    Some(())
}

/// A call of one of Cohort's own services (`Workload::grpc_call`).
async fn own_call(
    sh: &Shared,
    channel: Channel,
    path: &'static str,
    message: Vec<u8>,
) -> Option<Answer<'static>> {
    let mut req = tonic::Request::new(message);
    prepare(sh, &mut req)?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(64 << 20);
    let call = async {
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        grpc.unary(req, http::uri::PathAndQuery::from_static(path), Raw)
            .await
    };
    let answer = match tokio::time::timeout(sh.answer_timeout, call).await {
        Err(_) => return None,
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(error_name(&s)),
    };
    Some(Answer::Grpc(answer))
}

/// One call; None when no answer came within the answer timeout.
async fn call(
    sh: &Shared,
    (mut client, channel): (Client, Channel),
    seq: u64,
) -> Option<Answer<'static>> {
    if let Some((path, message)) = sh.workload.grpc_call(seq) {
        return own_call(sh, channel, path, message).await;
    }
    let Some((inputs, params)) = sh.workload.tensors(seq) else {
        return Some(Answer::Failed("no_tensor_form"));
    };
    let mut req = tonic::Request::new(request(sh.workload.service_name(), inputs, &params));
    prepare(sh, &mut req)?;
    let answer = match tokio::time::timeout(sh.answer_timeout, client.model_infer(req)).await {
        Err(_) => return None,
        Ok(Ok(r)) => outputs(r.into_inner()).ok_or_else(|| "malformed_answer".to_string()),
        Ok(Err(s)) => Err(error_name(&s)),
    };
    Some(Answer::Tensors(answer))
}

/// Records request `seq`'s answer, or that none came, in the thread's recorder.
fn settle(sh: &Shared, rec: &Mutex<Recorder>, seq: u64, a: Option<Answer<'static>>) {
    let mut rec = record(rec);
    match a {
        Some(a) => rec.on_answer(sh, seq, a),
        None => rec.give_up(sh, seq),
    }
}

pub(crate) fn run(cfg: &LoadConfig, sh: &Arc<Shared>, addr: SocketAddr) -> Result<Recorder> {
    anyhow::ensure!(
        cfg.tls.is_none(),
        "the load generator's gRPC target speaks plain HTTP/2 only (no --tls-ca)"
    );
    anyhow::ensure!(
        sh.workload.own_grpc() || sh.workload.tensors(0).is_some(),
        "{} has no tensor form: the gRPC target drives lenet, echo and collections",
        sh.workload.service_name()
    );
    let (conns, threads) = connections_and_threads(cfg);
    on_threads(sh, "load-grpc", threads, |t| {
        one_thread(cfg, sh, addr, t, threads, conns)
    })
}

/// Thread `t` of `threads`: connections t, t + threads, ... of `conns` (closed loop: one
/// request in flight on each; open loop: the thread's share of the schedule spread over
/// them).
async fn one_thread(
    cfg: &LoadConfig,
    sh: &Arc<Shared>,
    addr: SocketAddr,
    t: usize,
    threads: usize,
    conns: usize,
) -> Result<Recorder> {
    let mine: Vec<usize> = (t..conns).step_by(threads).collect();
    let mut clients = Vec::with_capacity(mine.len());
    for _ in &mine {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("connecting to grpc://{addr}"))?;
        clients.push((
            Client::new(channel.clone()).max_decoding_message_size(64 << 20),
            channel,
        ));
    }
    let rec: ThreadRecorder = Arc::new(Mutex::new(Recorder::new()));
    match cfg.mode {
        Mode::Open { .. } => {
            let in_flight = Arc::new(AtomicUsize::new(0));
            let mut k = 0usize;
            pace(cfg, sh, t, threads, |seq, intended| {
                let now = sh.now_ns();
                record(&rec).on_send(sh, seq, intended, now);
                let client = clients[k % clients.len()].clone();
                k += 1;
                let (sh, rec, in_flight) = (sh.clone(), rec.clone(), in_flight.clone());
                in_flight.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let a = call(&sh, client, seq).await;
                    settle(&sh, &rec, seq, a);
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                });
                true
            })
            .await;
            // The calls still out end within the answer timeout, answered or given up.
            while in_flight.load(Ordering::Relaxed) > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
        Mode::Closed { .. } => {
            let mut tasks = Vec::new();
            for (&c, client) in mine.iter().zip(&clients) {
                let (sh, rec, client) = (sh.clone(), rec.clone(), client.clone());
                tasks.push(tokio::spawn(async move {
                    wait_until(&sh, 0).await;
                    for k in 0u64.. {
                        let now = sh.now_ns();
                        if now >= sh.end_ns {
                            break;
                        }
                        let seq = seq_of(c, k, conns);
                        record(&rec).on_send(&sh, seq, now, now);
                        let a = call(&sh, client.clone(), seq).await;
                        settle(&sh, &rec, seq, a);
                    }
                }));
            }
            for task in tasks {
                task.await?;
            }
        }
    }
    into_recorder(rec, "a call")
}
