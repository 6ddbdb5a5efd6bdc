//! HTTP/1.1 JSON: one request at a time per connection (no pipelining). Open loop: a pacing
//! thread queues requests on schedule and connection tasks take them as they free up, so
//! latency includes waiting for a free connection, as a real client would see it.

use crate::run::{schedule_for, seq_of, Answer, LoadConfig, Mode, Recorder, Shared};
use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, Mutex};

pub(crate) type Conn = SendRequest<Full<Bytes>>;

/// Cores this process may run on: the generator's threads (it is pinned with `taskset`).
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(crate) async fn connect(addr: SocketAddr) -> Option<Conn> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// Sends request `seq` on `conn` (reconnecting if needed) and records its answer.
async fn one(sh: &Shared, rec: &mut Recorder, conn: &mut Option<Conn>, addr: SocketAddr, seq: u64) {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = connect(addr).await;
    }
    let Some(c) = conn.as_mut() else {
        return rec.on_answer(sh, seq, Answer::Failed("connect_failed"));
    };
    let body = sh.workload.json(seq).to_string();
    let req = hyper::Request::post(format!("/v1/{}", sh.workload.service_name()))
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("static request parts");
    let fut = async {
        let resp = c.send_request(req).await.ok()?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.ok()?.to_bytes();
        Some((
            status,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        ))
    };
    match tokio::time::timeout(sh.answer_timeout, fut).await {
        Ok(Some((status, v))) => rec.on_answer(sh, seq, Answer::Json(status, v)),
        Ok(None) => {
            *conn = None;
            rec.on_answer(sh, seq, Answer::Failed("connection_failed"));
        }
        Err(_) => {
            *conn = None;
            rec.give_up(sh, seq);
        }
    }
}

/// What a connection of an HTTP run sends: its own state, and one request's round trip
/// (reconnecting if needed, recording the answer).
pub(crate) trait Client: Send + 'static {
    fn one<'a>(
        &'a mut self,
        sh: &'a Shared,
        rec: &'a mut Recorder,
        conn: &'a mut Option<Conn>,
        addr: SocketAddr,
        seq: u64,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// The JSON gateway's client: request `seq`'s body from the workload.
struct Json;

impl Client for Json {
    fn one<'a>(
        &'a mut self,
        sh: &'a Shared,
        rec: &'a mut Recorder,
        conn: &'a mut Option<Conn>,
        addr: SocketAddr,
        seq: u64,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(one(sh, rec, conn, addr, seq))
    }
}

pub(crate) fn run(cfg: &LoadConfig, sh: &Arc<Shared>, addr: SocketAddr) -> Result<Recorder> {
    drive(cfg, sh, addr, |_, _| Json)
}

/// Runs one load point over HTTP/1.1 connections, each with the client `client(c, n)` makes
/// for connection c of n.
pub(crate) fn drive<C: Client>(
    cfg: &LoadConfig,
    sh: &Arc<Shared>,
    addr: SocketAddr,
    client: impl Fn(usize, usize) -> C,
) -> Result<Recorder> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.connections.clamp(1, available_cores()))
        .enable_all()
        .build()?;
    let mut total = Recorder::new();
    match cfg.mode {
        Mode::Open { .. } => {
            let (tx, rx) = mpsc::unbounded_channel::<u64>();
            let rx = Arc::new(Mutex::new(rx));
            let mut tasks = Vec::new();
            for c in 0..cfg.connections {
                let (sh, rx, mut cl) = (sh.clone(), rx.clone(), client(c, cfg.connections));
                tasks.push(rt.spawn(async move {
                    let mut rec = Recorder::new();
                    let mut conn = connect(addr).await;
                    loop {
                        let next = rx.lock().await.recv().await;
                        let Some(seq) = next else { break };
                        cl.one(&sh, &mut rec, &mut conn, addr, seq).await;
                    }
                    rec
                }));
            }
            // The pacing thread: one schedule for the whole rate.
            let mut sched = schedule_for(
                &LoadConfig {
                    connections: 1,
                    ..cfg.clone()
                },
                0,
            )
            .expect("open");
            let mut pace = Recorder::new();
            for k in 0u64.. {
                let intended = sched.next();
                if intended >= sh.end_ns {
                    break;
                }
                sh.wait_until(intended);
                let seq = seq_of(0, k, 1);
                pace.on_send(sh, seq, intended, sh.now_ns());
                if tx.send(seq).is_err() {
                    break;
                }
            }
            drop(tx);
            total.merge(pace);
            for t in tasks {
                total.merge(rt.block_on(t)?);
            }
        }
        Mode::Closed { concurrency } => {
            let mut tasks = Vec::new();
            for c in 0..concurrency {
                let (sh, mut cl) = (sh.clone(), client(c, concurrency));
                tasks.push(rt.spawn(async move {
                    let mut rec = Recorder::new();
                    let mut conn = connect(addr).await;
                    sh.wait_until(0);
                    for k in 0u64.. {
                        let now = sh.now_ns();
                        if now >= sh.end_ns {
                            break;
                        }
                        let seq = seq_of(c, k, concurrency);
                        rec.on_send(&sh, seq, now, now);
                        cl.one(&sh, &mut rec, &mut conn, addr, seq).await;
                    }
                    rec
                }));
            }
            for t in tasks {
                total.merge(rt.block_on(t)?);
            }
        }
    }
    sh.stop.store(true, Ordering::Release);
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(total)
}
