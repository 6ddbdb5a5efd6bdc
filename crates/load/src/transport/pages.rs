//! Page services over HTTP/1.1 (the bank): each connection is a browser running sessions,
//! one request at a time, keep-alive. Open loop as the JSON transport is: a pacing thread
//! releases requests on schedule and a free browser takes the next one, so latency includes
//! waiting for a free connection. Every page is checked against the expected bytes.

use super::http::{connect, Client, Conn};
use crate::bank::{Browser, Visit};
use crate::run::{Answer, LoadConfig, Recorder, Shared};
use anyhow::Result;
use bytes::Bytes;
use cohort_services::bank::client;
use http_body_util::{BodyExt, Full};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

/// The response as the service wrote it (status, the headers the check needs, body).
struct Page {
    status: u16,
    set_cookie: Option<String>,
    body: Bytes,
}

/// One page request; `bearer`: the API key's secret where the server wants keys.
async fn send(c: &mut Conn, addr: SocketAddr, v: &Visit, bearer: Option<&str>) -> Option<Page> {
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
    if let Some(secret) = bearer {
        req = req.header("authorization", format!("Bearer {secret}"));
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
        *conn = connect(sh, addr).await;
    }
    let v = b.next();
    let kind = v.step.kind.name();
    let Some(c) = conn.as_mut() else {
        b.answered(&v, false, None);
        return rec.on_answer(sh, seq, Answer::Page(kind, Err("connect_failed".into())));
    };
    match tokio::time::timeout(
        sh.answer_timeout,
        send(c, addr, &v, sh.key.as_ref().map(|k| k.secret.as_str())),
    )
    .await
    {
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

impl Client for Browser {
    fn one<'a>(
        &'a mut self,
        sh: &'a Shared,
        rec: &'a mut Recorder,
        conn: &'a mut Option<Conn>,
        addr: SocketAddr,
        seq: u64,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(one(sh, rec, conn, self, addr, seq))
    }
}

/// Runs one load point: a browser per connection, users `users` (the transport is the JSON
/// one's; only what a connection sends differs).
pub(crate) fn run(
    cfg: &LoadConfig,
    sh: &Arc<Shared>,
    addr: SocketAddr,
    users: u32,
) -> Result<Recorder> {
    super::http::drive(cfg, sh, addr, |c, n| Browser::new(users, c, n, cfg.seed))
}
