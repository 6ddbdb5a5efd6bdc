//! Overload is refused, not queued (issue 84), through a real server on loopback: a gRPC
//! flood far past a small queue gets exactly one answer per call, every refusal
//! RESOURCE_EXHAUSTED naming its reason (`OVERLOADED: queue: ...`) and counted by that reason
//! in /metrics; over HTTP the v2 protocol's refusals are 503 with Retry-After. No timing
//! thresholds: what is checked is who got which answer.

use crate::common;
use cohort_oip::grpc_inference_service_client::GrpcInferenceServiceClient;
use cohort_oip::model_infer_request::InferInputTensor;
use common::*;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// One LeNet image as the Open Inference Protocol's message (raw UINT8, 1x28x28).
fn lenet_request(id: u64) -> cohort_oip::ModelInferRequest {
    cohort_oip::ModelInferRequest {
        model_name: "lenet".into(),
        id: id.to_string(),
        inputs: vec![InferInputTensor {
            name: "image".into(),
            datatype: "UINT8".into(),
            shape: vec![1, 28, 28],
            ..Default::default()
        }],
        raw_input_contents: vec![vec![(id % 251) as u8; 28 * 28]],
        ..Default::default()
    }
}

/// The refusals by reason in /metrics for `service` (summed over engines).
fn refused_by_reason(http: SocketAddr, service: &str) -> Vec<(String, f64)> {
    let m = http_get(http, "/metrics");
    let head = format!("cohort_requests_refused_total{{service=\"{service}\",");
    m.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&head)?;
            let (labels, v) = rest.split_once("} ")?;
            let reason = labels.split_once("reason=\"")?.1.trim_end_matches('"');
            Some((reason.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The reasons a refusal may give.
const REASONS: [&str; 6] = ["queue", "quota", "deadline", "ingress", "nodes", "budget"];

#[test]
fn a_grpc_flood_past_the_queue_is_refused_resource_exhausted_with_its_reason() {
    // One worker, four places in its queue, one io thread: of 400 calls sent at once on four
    // connections most cannot be queued, and must be told so at once.
    let s = Served::start(&[
        "--service",
        "lenet",
        "--workers",
        "1",
        "--io-threads",
        "1",
        "--max-queue",
        "4",
        "--grpc",
        "127.0.0.1:0",
    ]);
    let addr = s.grpc.expect("grpc listener");
    let calls = 400u64;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let answers: Vec<Result<String, tonic::Status>> = rt.block_on(async move {
        let mut clients = Vec::new();
        for _ in 0..4 {
            let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .expect("connect");
            clients.push(GrpcInferenceServiceClient::new(ch));
        }
        let mut tasks = Vec::new();
        for id in 0..calls {
            let mut c = clients[id as usize % clients.len()].clone();
            tasks.push(tokio::spawn(async move {
                let call = c.model_infer(lenet_request(id));
                match tokio::time::timeout(Duration::from_secs(60), call).await {
                    Ok(r) => r.map(|a| a.into_inner().id),
                    Err(_) => panic!("call {id} got no answer within 60 s"),
                }
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("a call's task"));
        }
        out
    });
    // Exactly one answer per call: each call's future resolved once, an answer or a status.
    assert_eq!(answers.len() as u64, calls);
    let mut ok = 0u64;
    let mut refused = 0u64;
    for (id, a) in answers.iter().enumerate() {
        match a {
            Ok(answer_id) => {
                assert_eq!(answer_id, &id.to_string(), "the answer is to its own call");
                ok += 1;
            }
            Err(st) => {
                assert_eq!(
                    st.code(),
                    tonic::Code::ResourceExhausted,
                    "an overload refusal is RESOURCE_EXHAUSTED: {st:?}"
                );
                let reason = st
                    .message()
                    .strip_prefix("OVERLOADED: ")
                    .and_then(|m| m.split_once(": "))
                    .map(|(r, _)| r)
                    .unwrap_or_else(|| panic!("no reason in {:?}", st.message()));
                assert!(REASONS.contains(&reason), "{:?}", st.message());
                refused += 1;
            }
        }
    }
    assert!(ok > 0, "the server kept serving: {ok} answered");
    assert!(
        refused > 0,
        "400 calls at once past a queue of 4 are refused, not queued: {ok} answered"
    );
    // What the clients were told is what /metrics counts, by reason: under the model, or
    // under "unknown" for a call refused at its HEADERS (`ingress:`), before the message
    // that names its model was read.
    let http = s.http.unwrap();
    let counted: f64 = ["lenet", "unknown"]
        .iter()
        .flat_map(|service| refused_by_reason(http, service))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        counted, refused as f64,
        "every refusal counted by its reason"
    );
}

/// A raw HTTP/1.1 exchange: the answer's head and body.
fn post(addr: SocketAddr, path: &str, body: &str) -> std::net::TcpStream {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).unwrap();
    c
}

#[test]
fn an_http_v2_flood_past_the_queue_is_refused_503_with_retry_after() {
    let s = Served::start(&[
        "--service",
        "lenet",
        "--workers",
        "1",
        "--io-threads",
        "1",
        "--max-queue",
        "2",
    ]);
    let http = s.http.unwrap();
    let data = vec!["7"; 28 * 28].join(",");
    let body = format!(
        r#"{{"inputs":[{{"name":"image","datatype":"UINT8","shape":[1,28,28],"data":[{data}]}}]}}"#
    );
    // 120 requests on their own connections, all sent before any answer is read.
    let conns: Vec<_> = (0..120)
        .map(|_| post(http, "/v2/models/lenet/infer", &body))
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for mut c in conns {
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).expect("one answer");
        let head = answer
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .to_ascii_lowercase();
        if head.starts_with("http/1.1 200") {
            ok += 1;
            continue;
        }
        assert!(head.starts_with("http/1.1 503"), "{answer}");
        assert!(
            head.contains("\r\nretry-after: "),
            "503 says when: {answer}"
        );
        assert!(answer.contains("\"code\":\"OVERLOADED\""), "{answer}");
        let named = REASONS
            .iter()
            .any(|r| answer.contains(&format!("\"error\":\"{r}: ")));
        assert!(named, "the refusal names its reason: {answer}");
        refused += 1;
    }
    assert!(ok > 0, "the server kept serving");
    assert!(refused > 0, "120 at once past a queue of 2 are refused");
    let counted: f64 = refused_by_reason(http, "lenet")
        .iter()
        .map(|(_, v)| v)
        .sum();
    assert_eq!(counted, refused as f64);
}
