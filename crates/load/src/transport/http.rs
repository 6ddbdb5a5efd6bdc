//! HTTP/1.1 JSON: one request at a time per connection (no pipelining). Open loop: each
//! generator thread paces its schedule and hands a due request straight to its most recently
//! freed idle connection, or queues it until one frees up, so latency includes waiting for a
//! free connection, as a real client would see it. That wait is the generator's, not the
//! server's: a request is counted sent (and its lateness as send lag) when a connection takes
//! it, so a run whose connections were all busy is flagged `gen_sat`, never read as a server
//! that queued.

use crate::config::{LoadConfig, Mode};
use crate::recorder::{schedule_for, seq_of, Answer, Recorder, Shared};
use crate::transport::{
    connections_and_threads, into_recorder, on_threads, record, ThreadRecorder,
};
use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use tokio::sync::{mpsc, Notify};

pub(crate) type Conn = SendRequest<Full<Bytes>>;

/// A connection to `addr`, over TLS when the run has a TLS client.
pub(crate) async fn connect(sh: &Shared, addr: SocketAddr) -> Option<Conn> {
    connect_with(sh.tls.as_ref(), addr).await
}

/// A connection to `addr`, over TLS with `tls` when given.
pub(crate) async fn connect_with(
    tls: Option<&Arc<rustls::ClientConfig>>,
    addr: SocketAddr,
) -> Option<Conn> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        return handshake(stream).await;
    };
    let name = rustls::pki_types::ServerName::from(addr.ip());
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, stream)
        .await
        .ok()?;
    handshake(stream).await
}

async fn handshake<S>(stream: S) -> Option<Conn>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// Sends request `seq` on `conn` (reconnecting if needed) and records its answer.
async fn one(
    sh: &Shared,
    rec: &Mutex<Recorder>,
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    seq: u64,
) {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = connect(sh, addr).await;
    }
    let Some(c) = conn.as_mut() else {
        return record(rec).on_answer(sh, seq, Answer::Failed("connect_failed"));
    };
    let (method, path, body) = match sh.workload.http_request(seq) {
        Some(r) => (r.method, r.path, r.body.to_string()),
        None => (
            "POST",
            format!("/v1/{}", sh.workload.service_name()),
            sh.workload.json(seq).to_string(),
        ),
    };
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    if let Some(k) = &sh.key {
        req = req.header("authorization", format!("Bearer {}", k.secret));
    }
    let Ok(req) = req.body(Full::new(Bytes::from(body))) else {
        return record(rec).on_answer(sh, seq, Answer::Failed("bad_request_line"));
    };
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
        Ok(Some((status, v))) => record(rec).on_answer(sh, seq, Answer::Json(status, v)),
        Ok(None) => {
            *conn = None;
            record(rec).on_answer(sh, seq, Answer::Failed("connection_failed"));
        }
        Err(_) => {
            *conn = None;
            record(rec).give_up(sh, seq);
        }
    }
}

/// What a connection of an HTTP run sends: its own state, and one request's round trip
/// (reconnecting if needed, recording the answer in its thread's recorder).
pub(crate) trait Client: Send + 'static {
    fn one<'a>(
        &'a mut self,
        sh: &'a Shared,
        rec: &'a Mutex<Recorder>,
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
        rec: &'a Mutex<Recorder>,
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
///
/// One thread per core the generator may use (`on_threads`), each with its share of the
/// connections. Open loop:
/// each thread paces its own Poisson (or constant) schedule of rate / threads; independent
/// Poisson streams add up to one Poisson stream of the whole rate.
pub(crate) fn drive<C: Client>(
    cfg: &LoadConfig,
    sh: &Arc<Shared>,
    addr: SocketAddr,
    client: impl Fn(usize, usize) -> C + Sync,
) -> Result<Recorder> {
    let (conns, threads) = connections_and_threads(cfg);
    on_threads(sh, "load-http", threads, |t| {
        one_thread(cfg, sh, addr, t, threads, conns, &client)
    })
}

/// Thread `t` of `threads`: connections t, t + threads, ... of `conns`. The thread's
/// connections record into one `ThreadRecorder`: a recorder a connection (four 270 KB
/// histograms, and a page service one more a page type) cost 1 MB to 5 MB a connection, and
/// 1 024 connections took more than the second of warm-up to start (p99 1.1 s at 2 K/s on
/// one core; 3 ms once they had 3 s).
async fn one_thread<C: Client>(
    cfg: &LoadConfig,
    sh: &Arc<Shared>,
    addr: SocketAddr,
    t: usize,
    threads: usize,
    conns: usize,
    client: &(impl Fn(usize, usize) -> C + Sync),
) -> Result<Recorder> {
    let rec: ThreadRecorder = Arc::new(Mutex::new(Recorder::new()));
    let mine: Vec<usize> = (t..conns).step_by(threads).collect();
    let mut tasks = Vec::new();
    match cfg.mode {
        Mode::Open { .. } => {
            let pool = Arc::new(Pool::default());
            let mut lines = Vec::with_capacity(mine.len());
            for (slot, &c) in mine.iter().enumerate() {
                let (tx, mut rx) = mpsc::unbounded_channel::<u64>();
                lines.push(tx);
                let (sh, rec, pool, mut cl) =
                    (sh.clone(), rec.clone(), pool.clone(), client(c, conns));
                tasks.push(tokio::spawn(async move {
                    let mut conn = connect(&sh, addr).await;
                    let mut next = pool.idle(slot);
                    loop {
                        let seq = match next {
                            Some((seq, intended)) => {
                                record(&rec).on_send(&sh, seq, intended, sh.now_ns());
                                seq
                            }
                            None => match rx.recv().await {
                                Some(seq) => seq,
                                None => break,
                            },
                        };
                        cl.one(&sh, &rec, &mut conn, addr, seq).await;
                        next = pool.idle(slot);
                    }
                }));
            }
            // This thread's share of the schedule, paced here between the connections' work.
            pace(cfg, sh, t, threads, |seq, intended| {
                match pool.take(seq, intended) {
                    Some(slot) => {
                        record(&rec).on_send(sh, seq, intended, sh.now_ns());
                        lines[slot].send(seq).is_ok()
                    }
                    None => true,
                }
            })
            .await;
            // Requests still waiting are taken by connections as they free up; then every
            // connection's line closes and its task ends.
            pool.wait_drained().await;
            drop(lines);
        }
        Mode::Closed { .. } => {
            for &c in &mine {
                let (sh, rec, mut cl) = (sh.clone(), rec.clone(), client(c, conns));
                tasks.push(tokio::spawn(async move {
                    let mut conn = connect(&sh, addr).await;
                    wait_until(&sh, 0).await;
                    for k in 0u64.. {
                        let now = sh.now_ns();
                        if now >= sh.end_ns {
                            break;
                        }
                        let seq = seq_of(c, k, conns);
                        record(&rec).on_send(&sh, seq, now, now);
                        cl.one(&sh, &rec, &mut conn, addr, seq).await;
                    }
                }));
            }
        }
    }
    for task in tasks {
        task.await?;
    }
    into_recorder(rec, "a connection task")
}

/// Open loop: thread `t` of `threads` paces its share of the schedule (rate / threads;
/// independent Poisson streams add up to one of the whole rate), handing each request to
/// `due(seq, intended)` when its time comes, until the run's end or until `due` says stop.
pub(crate) async fn pace(
    cfg: &LoadConfig,
    sh: &Shared,
    t: usize,
    threads: usize,
    mut due: impl FnMut(u64, u64) -> bool,
) {
    let share = LoadConfig {
        connections: threads,
        ..cfg.clone()
    };
    let mut sched = schedule_for(&share, t).expect("an open-loop run");
    for k in 0u64.. {
        let intended = sched.next();
        if intended >= sh.end_ns {
            return;
        }
        wait_until(sh, intended).await;
        if !due(seq_of(t, k, threads), intended) {
            return;
        }
    }
}

/// Waits until `t_ns` on the generator's clock without blocking the thread's connections:
/// the runtime's timer (1 ms grain) for long waits, then yielding to the connections' tasks
/// until the time comes (the thread polls rather than sleeps while requests are due soon).
pub(crate) async fn wait_until(sh: &Shared, t_ns: u64) {
    loop {
        let now = sh.now_ns();
        if now >= t_ns {
            return;
        }
        let left = t_ns - now;
        if left > 2_000_000 {
            tokio::time::sleep(std::time::Duration::from_nanos(left - 1_500_000)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

/// A generator thread's connections: the idle ones (most recently freed first, as a client's
/// connection pool reuses its warm connections) and the requests due while none was idle
/// (first come, first served). A due request goes straight to one connection's own line:
/// the earlier design, connections taking turns on one shared receiver behind an async
/// lock, handed on one request per scheduling round of the thread's runtime, so with
/// hundreds of connections due requests queued behind the lock (open loop p99 7.5 ms at
/// 160 K pages/s with 256 connections where closed loop on the same connections had 2 ms
/// at 321 K; H200). The thread's tasks share the pool; none holds its lock across an await.
#[derive(Default)]
struct Pool {
    state: Mutex<PoolState>,
    drained: Notify,
}

#[derive(Default)]
struct PoolState {
    idle: Vec<usize>,
    /// Due requests waiting for a connection: sequence number and intended send time.
    waiting: VecDeque<(u64, u64)>,
}

impl Pool {
    /// A due request: the idle connection to send it on, or None (it waits its turn).
    fn take(&self, seq: u64, intended_ns: u64) -> Option<usize> {
        let mut s = self.state.lock().expect("pool lock");
        let slot = s.idle.pop();
        if slot.is_none() {
            s.waiting.push_back((seq, intended_ns));
        }
        slot
    }

    /// Connection `slot` is free: the next waiting request for it, or None (it is idle now,
    /// and a later due request comes on its line).
    fn idle(&self, slot: usize) -> Option<(u64, u64)> {
        let mut s = self.state.lock().expect("pool lock");
        if let Some(waiting) = s.waiting.pop_front() {
            return Some(waiting);
        }
        s.idle.push(slot);
        self.drained.notify_waiters();
        None
    }

    /// Returns once no request waits for a connection.
    async fn wait_drained(&self) {
        loop {
            let notified = self.drained.notified();
            if self.state.lock().expect("pool lock").waiting.is_empty() {
                return;
            }
            notified.await;
        }
    }
}
