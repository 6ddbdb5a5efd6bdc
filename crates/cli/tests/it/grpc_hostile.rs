//! Hostile gRPC clients against a real `cohort serve --grpc` on loopback (issue 84), each
//! speaking HTTP/2 through the `h2` crate so that it can misbehave as no gRPC library does:
//! - a client that reads frames (and acknowledges pings) but never grants window, on 20
//!   ModelStreamInfer streams of 60 KB echoes: its answers count in `cohort_buffered_bytes`,
//!   the server's memory stays bounded, and the connection is closed within the read timeout;
//! - calls sent half (HEADERS and 20 bytes of a message) that held every connection slot:
//!   closed within the read timeout, and so are empty and preface-only connections;
//! - a request message over the size limit: RESOURCE_EXHAUSTED (TOO_LARGE), as documented.

use crate::common;

use bytes::Bytes;
use common::{http_get, Served};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const READ_TIMEOUT_MS: u64 = 2000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A ModelInferRequest for `echo` with one BYTES element of `len` bytes, gRPC-framed (the
/// head-time refusal test's too, `overload_head.rs`).
pub(crate) fn echo_message(len: usize) -> Bytes {
    use cohort_oip::model_infer_request::InferInputTensor;
    let mut raw = (len as u32).to_le_bytes().to_vec();
    raw.resize(4 + len, b'x');
    let r = cohort_oip::ModelInferRequest {
        model_name: "echo".into(),
        inputs: vec![InferInputTensor {
            name: "data".into(),
            datatype: "BYTES".into(),
            shape: vec![1],
            ..Default::default()
        }],
        raw_input_contents: vec![raw],
        ..Default::default()
    };
    let body = prost::Message::encode_to_vec(&r);
    let mut m = vec![0u8];
    m.extend_from_slice(&(body.len() as u32).to_be_bytes());
    m.extend_from_slice(&body);
    Bytes::from(m)
}

fn call(addr: SocketAddr, method: &str) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{addr}/inference.GRPCInferenceService/{method}"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// An HTTP/2 connection whose frames are read (pings acknowledged) by a task of its own,
/// and that grants no window beyond the protocol's initial 64 KiB.
async fn connect(
    addr: SocketAddr,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::Builder::new()
        .handshake(tcp)
        .await
        .expect("h2 handshake");
    (client, tokio::spawn(conn))
}

/// The server's `name` gauge from /metrics.
fn gauge(s: &Served, name: &str) -> f64 {
    metric(s.http.expect("http"), name)
}

fn metric(http: SocketAddr, name: &str) -> f64 {
    let m = http_get(http, "/metrics");
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

fn rss_bytes(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kb << 10
}

#[test]
fn a_client_that_grants_no_window_is_inside_the_budget_and_closed() {
    let budget = 4u64 << 20;
    let s = Served::start(&[
        "--service",
        "echo",
        "--grpc",
        "127.0.0.1:0",
        "--max-buffered-bytes",
        "4M",
        "--read-timeout-ms",
        &READ_TIMEOUT_MS.to_string(),
    ]);
    let addr = s.grpc.expect("grpc listener");
    let pid = s.child.id();
    let rss_before = rss_bytes(pid);
    // The server's counted bytes and RSS, sampled from the first request to the close.
    let http = s.http.expect("http");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let (mut buffered, mut rss) = (0f64, 0u64);
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                buffered = buffered.max(metric(http, "cohort_buffered_bytes"));
                rss = rss.max(rss_bytes(pid));
                std::thread::sleep(Duration::from_millis(50));
            }
            (buffered, rss)
        })
    };
    let rt = runtime();
    let (driver, sent) = rt.block_on(async {
        let (client, driver) = connect(addr).await;
        let msg = echo_message(60_000);
        let mut senders = Vec::new();
        for _ in 0..20 {
            let mut c = client.clone().ready().await.expect("ready");
            let (answer, tx) = c
                .send_request(call(addr, "ModelStreamInfer"), false)
                .unwrap();
            let msg = msg.clone();
            senders.push(tokio::spawn(async move {
                // Requests are sent while the server grants window for them: until it
                // stops reading the stream (or 6 MB a stream have gone).
                let (mut tx, mut sent) = (tx, 0usize);
                for _ in 0..100 {
                    tx.reserve_capacity(msg.len());
                    let got = tokio::time::timeout(Duration::from_millis(1500), async {
                        while tx.capacity() < msg.len() {
                            if std::future::poll_fn(|cx| tx.poll_capacity(cx))
                                .await
                                .is_none()
                            {
                                return false;
                            }
                        }
                        true
                    })
                    .await;
                    if !matches!(got, Ok(true)) || tx.send_data(msg.clone(), false).is_err() {
                        break;
                    }
                    sent += 1;
                }
                // The answer and the send side are kept, never read: no window granted.
                (sent, answer, tx)
            }));
        }
        let mut sent = 0;
        let mut kept = Vec::new();
        for t in senders {
            let (n, answer, tx) = t.await.unwrap();
            sent += n;
            kept.push((answer, tx));
        }
        // (Kept open: dropped, they would end the streams and the connection.)
        std::mem::forget((kept, client));
        (driver, sent)
    });
    assert!(
        sent >= 20,
        "the server read the streams at first ({sent} sent)"
    );
    // The connection stalls: closed within the read timeout (generously).
    let stalled_at = Instant::now();
    let closed = rt.block_on(async {
        let wait = Duration::from_millis(READ_TIMEOUT_MS * 3 + 5000);
        tokio::time::timeout(wait, driver).await.is_ok()
    });
    done.store(true, std::sync::atomic::Ordering::Release);
    let (peak_buffered, peak_rss) = sampler.join().unwrap();
    eprintln!(
        "{sent} requests sent; closed {:?} after the last; peak cohort_buffered_bytes \
         {peak_buffered}, RSS {} -> {} MB",
        stalled_at.elapsed(),
        rss_before >> 20,
        peak_rss >> 20
    );
    assert!(
        peak_buffered > 0.0,
        "the stalled answers are counted in cohort_buffered_bytes"
    );
    assert!(
        peak_buffered <= (budget + 20 * 2 * 70_000) as f64,
        "within the budget and a request and an answer a stream: {peak_buffered}"
    );
    assert!(
        peak_rss < rss_before + (200 << 20),
        "RSS {} MB from {} MB",
        peak_rss >> 20,
        rss_before >> 20
    );
    assert!(
        closed,
        "the connection was still open {:?} after its window stalled ({sent} requests sent)",
        stalled_at.elapsed()
    );
    // Its bytes leave the budget with it, and the server still answers.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(gauge(&s, "cohort_buffered_bytes"), 0.0);
    assert!(http_get(s.http.unwrap(), "/v2/health/live").starts_with("HTTP/1.1 200"));
}

/// Waits for the server to close `c` (EOF or reset); how long it took, or None past `max`.
async fn closed_within(c: &mut TcpStream, max: Duration) -> Option<Duration> {
    let t = Instant::now();
    let mut sink = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((t + max).into(), c.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(t.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

#[test]
fn half_sent_calls_and_silent_connections_are_closed_within_the_read_timeout() {
    let s = Served::start(&[
        "--service",
        "echo",
        "--grpc",
        "127.0.0.1:0",
        "--max-connections",
        "8",
        "--read-timeout-ms",
        &READ_TIMEOUT_MS.to_string(),
    ]);
    let addr = s.grpc.expect("grpc listener");
    let within = Duration::from_millis(READ_TIMEOUT_MS + 3000);
    let rt = runtime();
    rt.block_on(async {
        // Every slot held by a call sent half: HEADERS and 20 bytes of its message.
        let msg = echo_message(1000);
        let mut held = Vec::new();
        for _ in 0..8 {
            let (client, driver) = connect(addr).await;
            let mut c = client.ready().await.expect("ready");
            let (answer, mut tx) = c.send_request(call(addr, "ModelInfer"), false).unwrap();
            tx.send_data(msg.slice(..20), false).unwrap();
            held.push((driver, answer, tx, c));
        }
        let t = Instant::now();
        for (driver, ..) in held.iter_mut() {
            let left = (t + within).saturating_duration_since(Instant::now());
            let r = tokio::time::timeout(left, driver).await;
            assert!(
                r.is_ok(),
                "a half-sent call's connection was still open after {:?}",
                t.elapsed()
            );
        }
        drop(held);
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The slots are free again.
        let (client, _driver) = connect(addr).await;
        client.ready().await.expect("a new connection is served");

        // A connection that sends nothing, and one that sends only the preface.
        let mut empty = TcpStream::connect(addr).await.unwrap();
        let mut preface = TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        for (what, c) in [("empty", &mut empty), ("preface-only", &mut preface)] {
            let took = closed_within(c, within).await;
            assert!(took.is_some(), "an {what} connection was still open");
        }
    });
}

#[test]
fn an_over_size_request_message_is_resource_exhausted() {
    let s = Served::start(&["--service", "echo", "--grpc", "127.0.0.1:0"]);
    let addr = s.grpc.expect("grpc listener");
    runtime().block_on(async {
        let (client, _driver) = connect(addr).await;
        let mut c = client.ready().await.expect("ready");
        let (answer, mut tx) = c.send_request(call(addr, "ModelInfer"), false).unwrap();
        // A prefix that says 5 MiB (the limit is 4 MiB), then a little of it.
        let mut m = vec![0u8];
        m.extend_from_slice(&(5u32 << 20).to_be_bytes());
        m.extend_from_slice(&[0; 100]);
        tx.send_data(Bytes::from(m), false).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .expect("an answer in time")
            .expect("an answer");
        let h = answer.headers();
        assert_eq!(
            h.get("grpc-status").map(|v| v.to_str().unwrap()),
            Some("8"),
            "RESOURCE_EXHAUSTED: {h:?}"
        );
        let msg = h.get("grpc-message").unwrap().to_str().unwrap();
        assert!(msg.starts_with("TOO_LARGE"), "{msg}");
    });
}

#[test]
fn an_open_stream_that_sends_nothing_is_closed_after_the_idle_timeout() {
    let (idle_ms, read_ms) = (2000, 1000);
    let s = Served::start(&[
        "--service",
        "echo",
        "--grpc",
        "127.0.0.1:0",
        "--idle-timeout-ms",
        &idle_ms.to_string(),
        "--read-timeout-ms",
        &read_ms.to_string(),
    ]);
    let addr = s.grpc.expect("grpc listener");
    runtime().block_on(async {
        let (client, driver) = connect(addr).await;
        let mut c = client.ready().await.expect("ready");
        // A stream opened, then nothing: its HEADERS alone (pings are still answered).
        let (answer, tx) = c
            .send_request(call(addr, "ModelStreamInfer"), false)
            .unwrap();
        let t = Instant::now();
        let within = Duration::from_millis(idle_ms + read_ms + 3000);
        let r = tokio::time::timeout(within, driver).await;
        assert!(
            r.is_ok(),
            "a connection whose one stream sent nothing was still open after {:?}",
            t.elapsed()
        );
        drop((answer, tx, c));
    });
}
