//! Page services over HTTP/1.1 (the bank): each connection is a browser running sessions,
//! one request at a time, keep-alive. Open loop as the JSON transport is: a pacing thread
//! releases requests on schedule and a free browser takes the next one, so latency includes
//! waiting for a free connection. Every page is checked against the expected bytes.

use crate::bank::{Browser, Visit};
use crate::run::{schedule_for, seq_of, Answer, LoadConfig, Mode, Recorder, Shared};
use anyhow::Result;
use bytes::Bytes;
use cohort_services::bank::client;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, Mutex};

type Conn = SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Option<Conn> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(sender)
}

/// The response as the service wrote it (status, the headers the check needs, body).
struct Page {
    status: u16,
    set_cookie: Option<String>,
    body: Bytes,
}

async fn send(c: &mut Conn, addr: SocketAddr, v: &Visit) -> Option<Page> {
    let method = match v.step.kind.info().method {
        cohort_services::bank::kinds::Method::Get => hyper::Method::GET,
        cohort_services::bank::kinds::Method::Post => hyper::Method::POST,
    };
    let mut req = hyper::Request::builder()
        .method(method.clone())
        .uri(v.step.target())
        .header("host", addr.to_string());
    if let Some(cookie) = v.cookie {
        req = req.header(
            "cookie",
            format!("SID={}", cohort_services::bank::page::cookie_value(cookie)),
        );
    }
    if method == hyper::Method::POST {
        req = req.header("content-type", "application/x-www-form-urlencoded");
    }
    let req = req
        .body(Full::new(Bytes::from(v.step.body().to_owned())))
        .ok()?;
    let resp = c.send_request(req).await.ok()?;
    let status = resp.status().as_u16();
    let set_cookie = resp
        .headers()
        .get("set-cookie")
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some(Page {
        status,
        set_cookie,
        body,
    })
}

/// Checks a page: 200 and exactly the expected body (a login's cookie read from it).
fn check(
    v: &Visit,
    p: &Page,
) -> (
    Result<(), String>,
    Option<cohort_services::bank::parse::Cookie>,
) {
    if p.status != 200 {
        return (Err(format!("http_{}", p.status)), None);
    }
    let set = p
        .set_cookie
        .as_deref()
        .and_then(|s| client::set_cookie(format!("X\r\nSet-Cookie: {s}\r\n\r\n").as_bytes()));
    let want = v.step.expected(v.user, set);
    let body_at = want
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("rendered pages have a header")
        + 4;
    if p.body[..] != want[body_at..] {
        return (Err("wrong_answer".into()), set);
    }
    (Ok(()), set)
}

/// Sends the browser's next request (reconnecting if needed) and records its answer.
async fn one(
    sh: &Shared,
    rec: &mut Recorder,
    conn: &mut Option<Conn>,
    b: &mut Browser,
    addr: SocketAddr,
    seq: u64,
) {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = connect(addr).await;
    }
    let v = b.next();
    let kind = v.step.kind.name();
    let Some(c) = conn.as_mut() else {
        b.answered(&v, false, None);
        return rec.on_answer(sh, seq, Answer::Page(kind, Err("connect_failed".into())));
    };
    match tokio::time::timeout(sh.answer_timeout, send(c, addr, &v)).await {
        Ok(Some(page)) => {
            let (outcome, set) = check(&v, &page);
            b.answered(&v, outcome.is_ok(), set);
            rec.on_answer(sh, seq, Answer::Page(kind, outcome));
        }
        Ok(None) => {
            *conn = None;
            b.answered(&v, false, None);
            rec.on_answer(sh, seq, Answer::Page(kind, Err("connection_failed".into())));
        }
        Err(_) => {
            *conn = None;
            b.answered(&v, false, None);
            rec.give_up(sh, seq);
        }
    }
}

pub(crate) fn run(
    cfg: &LoadConfig,
    sh: &Arc<Shared>,
    addr: SocketAddr,
    users: u32,
) -> Result<Recorder> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.connections.clamp(1, 4))
        .enable_all()
        .build()?;
    let mut total = Recorder::new();
    let browser = |c: usize, n: usize| Browser::new(users, c, n, cfg.seed);
    match cfg.mode {
        Mode::Open { .. } => {
            let (tx, rx) = mpsc::unbounded_channel::<u64>();
            let rx = Arc::new(Mutex::new(rx));
            let mut tasks = Vec::new();
            for c in 0..cfg.connections {
                let (sh, rx, mut b) = (sh.clone(), rx.clone(), browser(c, cfg.connections));
                tasks.push(rt.spawn(async move {
                    let mut rec = Recorder::new();
                    let mut conn = connect(addr).await;
                    loop {
                        let next = rx.lock().await.recv().await;
                        let Some(seq) = next else { break };
                        one(&sh, &mut rec, &mut conn, &mut b, addr, seq).await;
                    }
                    rec
                }));
            }
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
                let (sh, mut b) = (sh.clone(), browser(c, concurrency));
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
                        one(&sh, &mut rec, &mut conn, &mut b, addr, seq).await;
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
