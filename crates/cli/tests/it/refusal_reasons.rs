//! What a request is refused for (issue 84): an OVERLOADED answer's message starts with its
//! reason (`queue: ...`, `quota: ...`), and `/metrics` counts refusals by that reason in
//! `cohort_requests_refused_total{service,engine,reason}`, through a real server on loopback.

use crate::common;
use cohort_proto::{encode_frame, ErrorCode, ErrorPayload, Frame, Header, Kind, MAX_PAYLOAD};
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Sends `frames` at once on one connection and reads `frames.len()` answers back.
fn pipelined(addr: SocketAddr, frames: &[Vec<u8>]) -> Vec<(Header, Vec<u8>)> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(&frames.concat()).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (mut raw, mut out, mut at) = (Vec::new(), Vec::new(), 0);
    let until = Instant::now() + Duration::from_secs(20);
    while out.len() < frames.len() {
        assert!(
            Instant::now() < until,
            "{} of {} answers",
            out.len(),
            frames.len()
        );
        let mut b = [0u8; 65536];
        match c.read(&mut b) {
            Ok(0) => panic!("closed after {} answers", out.len()),
            Ok(n) => raw.extend_from_slice(&b[..n]),
            Err(_) => continue,
        }
        while let Ok(Some((f, used))) = Frame::decode_stream(&raw[at..], MAX_PAYLOAD) {
            out.push((f.header, f.payload.to_vec()));
            at += used;
        }
    }
    out
}

/// The OVERLOADED answers' messages.
fn overloaded(answers: &[(Header, Vec<u8>)]) -> Vec<String> {
    answers
        .iter()
        .filter(|(h, _)| h.kind == Kind::Error)
        .map(|(_, p)| ErrorPayload::decode(p).expect("an error payload"))
        .filter(|e| e.code == ErrorCode::Overloaded)
        .map(|e| e.message)
        .collect()
}

fn refused(addr: SocketAddr, service: &str, engine: &str, reason: &str) -> f64 {
    let sample = format!(
        "cohort_requests_refused_total{{service=\"{service}\",engine=\"{engine}\",reason=\"{reason}\"}}"
    );
    let m = http_get(addr, "/metrics");
    m.lines()
        .find_map(|l| l.strip_prefix(&sample)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {sample} in {m}"))
}

#[test]
fn a_full_queue_says_queue_and_is_counted_so() {
    // One worker spinning 5 ms a request, four places in its queue: most of 40 requests sent
    // at once are refused at once.
    let s = Served::start(&[
        "--service",
        "spin",
        "--workers",
        "1",
        "--max-queue",
        "4",
        "--worker-spin-us",
        "0",
    ]);
    let frames: Vec<Vec<u8>> = (1..=40)
        .map(|id| {
            let p = cohort_services::spin::encode(5_000, b"");
            let mut f = Vec::new();
            encode_frame(
                Header::request(cohort_services::spin::ID, id, p.len()),
                &p,
                &mut f,
            );
            f
        })
        .collect();
    let answers = pipelined(s.tcp.unwrap(), &frames);
    let msgs = overloaded(&answers);
    assert!(msgs.len() >= 20, "{msgs:?}");
    assert!(
        msgs.iter().all(|m| m.starts_with("queue: ")),
        "every refusal names its reason: {msgs:?}"
    );
    let http = s.http.unwrap();
    assert_eq!(refused(http, "spin", "cpu", "queue"), msgs.len() as f64);
    for other in ["quota", "deadline", "ingress"] {
        assert_eq!(refused(http, "spin", "cpu", other), 0.0, "{other}");
    }
}

#[test]
fn a_client_over_its_quota_is_told_quota_and_counted_so() {
    // 20 requests a second, a burst of 2: most of 30 sent at once are over the quota.
    let s = Served::start(&["--service", "echo", "--client-rate", "20"]);
    let frames: Vec<Vec<u8>> = (1..=30)
        .map(|id| {
            let mut f = Vec::new();
            encode_frame(
                Header::request(cohort_services::echo::ID, id, 4),
                b"ping",
                &mut f,
            );
            f
        })
        .collect();
    let answers = pipelined(s.tcp.unwrap(), &frames);
    let msgs = overloaded(&answers);
    assert!(msgs.len() >= 20, "{msgs:?}");
    assert!(
        msgs.iter()
            .all(|m| m.starts_with("quota: client over its quota of 20 requests per second")),
        "{msgs:?}"
    );
    let http = s.http.unwrap();
    // Over HTTP too: 429, the same words in the body.
    let mut seen = None;
    for _ in 0..30 {
        let a = http_post(http, "/v1/echo", r#"{"data": "ping"}"#);
        if a.starts_with("HTTP/1.1 429") {
            seen = Some(a);
            break;
        }
    }
    let a = seen.expect("an HTTP request over the quota");
    assert!(a.contains("quota: client over its quota"), "{a}");
    let counted = refused(http, "echo", "cpu", "quota");
    assert!(
        counted > msgs.len() as f64,
        "{counted} counted, {} seen over TCP",
        msgs.len()
    );
    assert_eq!(refused(http, "echo", "cpu", "queue"), 0.0);
}
