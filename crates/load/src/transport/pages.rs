//! Page services over HTTP/1.1 (a service whose workload has `pages`): each connection is a
//! browser running sessions, one request at a time, keep-alive. Open loop as the JSON
//! transport is: a pacing thread releases requests on schedule and a free browser takes the
//! next one, so latency includes waiting for a free connection. The service's browser checks
//! every page.

use super::http::{connect, Client, Conn};
use super::record;
use crate::config::LoadConfig;
use crate::recorder::{Answer, Recorder, Shared};
use anyhow::Result;
use bytes::Bytes;
use cohort_services::workload::{PageAnswer, PageBrowser, PageRequest, PageSessions};
use http_body_util::{BodyExt, Full};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// The response as the service wrote it (status, the headers the check needs, body).
struct Page {
    status: u16,
    set_cookie: Option<String>,
    body: Bytes,
}

/// One page request; `bearer`: the API key's secret where the server wants keys.
async fn send(
    c: &mut Conn,
    addr: SocketAddr,
    v: &PageRequest,
    bearer: Option<&str>,
) -> Option<Page> {
    let method = if v.post {
        hyper::Method::POST
    } else {
        hyper::Method::GET
    };
    let mut req = hyper::Request::builder()
        .method(method.clone())
        .uri(v.target.as_str())
        .header("host", addr.to_string());
    if let Some(cookie) = &v.cookie {
        req = req.header("cookie", cookie.as_str());
    }
    if method == hyper::Method::POST {
        req = req.header("content-type", "application/x-www-form-urlencoded");
    }
    if let Some(secret) = bearer {
        req = req.header("authorization", format!("Bearer {secret}"));
    }
    let req = req.body(Full::new(Bytes::from(v.body.clone()))).ok()?;
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

/// A connection's browser.
struct Browsing(Box<dyn PageBrowser>);

/// Sends the browser's next request (reconnecting if needed) and records its answer.
async fn one(
    sh: &Shared,
    rec: &Mutex<Recorder>,
    conn: &mut Option<Conn>,
    b: &mut Browsing,
    addr: SocketAddr,
    seq: u64,
) {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = connect(sh, addr).await;
    }
    let v = b.0.next();
    let kind = v.kind;
    let Some(c) = conn.as_mut() else {
        let _ = b.0.answered(None);
        return record(rec).on_answer(sh, seq, Answer::Page(kind, Err("connect_failed".into())));
    };
    match tokio::time::timeout(
        sh.answer_timeout,
        send(c, addr, &v, sh.key.as_ref().map(|k| k.secret.as_str())),
    )
    .await
    {
        Ok(Some(page)) => {
            let outcome = b.0.answered(Some(&PageAnswer {
                status: page.status,
                set_cookie: page.set_cookie.as_deref(),
                body: &page.body,
            }));
            record(rec).on_answer(sh, seq, Answer::Page(kind, outcome));
        }
        Ok(None) => {
            *conn = None;
            let _ = b.0.answered(None);
            record(rec).on_answer(sh, seq, Answer::Page(kind, Err("connection_failed".into())));
        }
        Err(_) => {
            *conn = None;
            let _ = b.0.answered(None);
            record(rec).give_up(sh, seq);
        }
    }
}

impl Client for Browsing {
    fn one<'a>(
        &'a mut self,
        sh: &'a Shared,
        rec: &'a Mutex<Recorder>,
        conn: &'a mut Option<Conn>,
        addr: SocketAddr,
        seq: u64,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(one(sh, rec, conn, self, addr, seq))
    }
}

/// Runs one load point: a browser per connection (the transport is the JSON one's; only what
/// a connection sends differs).
pub(crate) fn run(
    cfg: &LoadConfig,
    sh: &Arc<Shared>,
    addr: SocketAddr,
    pages: &dyn PageSessions,
) -> Result<Recorder> {
    super::http::drive(cfg, sh, addr, |c, n| {
        Browsing(pages.browser(c, n, cfg.seed))
    })
}
