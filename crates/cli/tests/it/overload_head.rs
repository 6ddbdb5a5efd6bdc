//! A unary gRPC inference is refused at its HEADERS while the io thread sheds (issue 84):
//! the refusal must cost the thread far less than an answer, so it is made before a byte of
//! the message is read. A flood of echo calls puts the one io thread behind its arrivals;
//! meanwhile calls that send HEADERS and only part of their message are tried, one after
//! another: one of them must be refused RESOURCE_EXHAUSTED `OVERLOADED: ingress: ...` at
//! once (a refusal that waited for the message would never come: the message never ends),
//! and counted under service "unknown" (the model is named in the message, never read).
//! With keys on, such a call without a valid key is refused UNAUTHENTICATED instead: a client
//! must not retry a call that can never pass.

use crate::common;
use crate::grpc_hostile::echo_message;

use bytes::Bytes;
use common::{http_get, Served};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// The key of the keyed server (`KEYS`), as gRPC metadata carries it.
const BEARER: &str = "Bearer 0123456789abcdef";
const KEYS: &str = "[[key]]\nid = \"ci\"\nsecret = \"0123456789abcdef\"\n";

fn model_infer(addr: SocketAddr) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{addr}/inference.GRPCInferenceService/ModelInfer"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

async fn connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::Builder::new()
        .handshake(tcp)
        .await
        .expect("h2 handshake");
    tokio::spawn(conn);
    client
}

/// Whole echo calls in bursts of 256 on one connection until `stop`, their answers awaited
/// and dropped (whatever they are).
async fn flood(addr: SocketAddr, stop: Arc<AtomicBool>, keyed: bool) {
    use cohort_oip::grpc_inference_service_client::GrpcInferenceServiceClient;
    use cohort_oip::model_infer_request::InferInputTensor;
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let client = GrpcInferenceServiceClient::new(ch);
    let r = cohort_oip::ModelInferRequest {
        model_name: "echo".into(),
        inputs: vec![InferInputTensor {
            name: "data".into(),
            datatype: "BYTES".into(),
            shape: vec![1],
            ..Default::default()
        }],
        raw_input_contents: vec![vec![4, 0, 0, 0, b'p', b'i', b'n', b'g']],
        ..Default::default()
    };
    while !stop.load(Ordering::Relaxed) {
        let calls: Vec<_> = (0..256)
            .map(|_| {
                let (mut c, mut r) = (client.clone(), tonic::Request::new(r.clone()));
                if keyed {
                    r.metadata_mut()
                        .insert("authorization", BEARER.parse().unwrap());
                }
                tokio::spawn(async move { c.model_infer(r).await.is_ok() })
            })
            .collect();
        for c in calls {
            let _ = c.await;
        }
    }
}

/// The counter `cohort_requests_refused_total` for `service` and `reason`, summed.
fn refused(http: SocketAddr, service: &str, reason: &str) -> f64 {
    let m = http_get(http, "/metrics");
    let head = format!("cohort_requests_refused_total{{service=\"{service}\",");
    m.lines()
        .filter_map(|l| l.strip_prefix(&head))
        .filter(|l| l.contains(&format!("reason=\"{reason}\"")))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum()
}

/// Floods `s` (with the key where `keyed`) and tries partial calls without a key until one is
/// answered before its message ends; that answer's grpc-status and message, the tries and
/// how long the answer took.
fn partial_call_while_shedding(s: &Served, keyed: bool) -> (String, String, usize, Duration) {
    let addr = s.grpc.expect("grpc listener");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let floods: Vec<_> = (0..4)
        .map(|_| rt.spawn(flood(addr, stop.clone(), keyed)))
        .collect();
    let msg = echo_message(16);
    let seen = rt.block_on(async {
        let start = Instant::now();
        let mut tries = 0;
        while start.elapsed() < Duration::from_secs(30) {
            tries += 1;
            // HEADERS and 10 bytes of the message; the rest never comes.
            let mut c = connect(addr).await.ready().await.expect("ready");
            let (answer, mut tx) = c.send_request(model_infer(addr), false).unwrap();
            tx.send_data(msg.slice(..10), false).unwrap();
            let sent = Instant::now();
            let Ok(answer) = tokio::time::timeout(Duration::from_millis(500), answer).await else {
                continue; // admitted: it waits for the rest of its message
            };
            let answer = answer.expect("an answer, not a reset");
            let h = answer.headers();
            let text = |k: &str| {
                h.get(k)
                    .map_or(String::new(), |v| v.to_str().unwrap().replace("%20", " "))
            };
            return Some((
                text("grpc-status"),
                text("grpc-message"),
                tries,
                sent.elapsed(),
            ));
        }
        None
    });
    stop.store(true, Ordering::Relaxed);
    for f in floods {
        f.abort();
    }
    seen.expect("no partial call was answered within 30 s of a flood")
}

#[test]
fn a_call_arriving_while_the_io_thread_sheds_is_refused_before_its_message_is_read() {
    let s = Served::start(&[
        "--service",
        "echo",
        "--io-threads",
        "1",
        "--grpc",
        "127.0.0.1:0",
    ]);
    let (status, message, tries, took) = partial_call_while_shedding(&s, false);
    assert_eq!(
        status, "8",
        "a partial call answered before its message ends is refused RESOURCE_EXHAUSTED, \
         trailers-only: {message:?}"
    );
    assert!(message.starts_with("OVERLOADED: ingress: "), "{message:?}");
    let http = s.http.expect("http");
    eprintln!(
        "ingress refusals: {} at the head, {} in the handler; answered {}",
        refused(http, "unknown", "ingress"),
        refused(http, "echo", "ingress"),
        http_get(http, "/metrics")
            .lines()
            .filter(|l| l.starts_with("cohort_requests_total{service=\"echo\"")
                && l.contains("outcome=\"ok\""))
            .collect::<Vec<_>>()
            .join(" ")
    );
    eprintln!("refused at the head on try {tries}, {took:?} after it was sent: {message}");
    assert!(
        refused(http, "unknown", "ingress") >= 1.0,
        "a head-time refusal is counted under service \"unknown\""
    );
}

#[test]
fn without_a_valid_key_a_call_refused_at_its_head_is_told_unauthenticated() {
    let dir = std::env::temp_dir().join(format!("cohort-overload-head-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    std::fs::write(&keys, KEYS).unwrap();
    let s = Served::start(&[
        "--service",
        "echo",
        "--io-threads",
        "1",
        "--grpc",
        "127.0.0.1:0",
        "--auth-keys",
        keys.to_str().unwrap(),
    ]);
    // The flood carries the key; the partial calls do not.
    let (status, message, _, _) = partial_call_while_shedding(&s, true);
    assert_eq!(status, "16", "UNAUTHENTICATED, not OVERLOADED: {message:?}");
    assert!(message.starts_with("UNAUTHORIZED"), "{message:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
