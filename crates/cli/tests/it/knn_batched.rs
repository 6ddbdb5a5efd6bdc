//! Several k-NN queries a request, served by the real binary (cpu engine) over UDP and TCP:
//! the real load generator sends 64 queries a request and checks each query's answer against
//! exact search; requests over 1 024 queries or whose length disagrees with their count get
//! one BAD_REQUEST; the default `--max-queue` holds 32 clients x 256 queries in flight.

use crate::common;
use cohort_proto::{encode_frame, ErrorCode, Frame, Header, Kind, MAX_PAYLOAD};
use cohort_services::knn::{decode_responses, encode_queries, Elems};
use common::*;
use std::io::{Read, Write};
use std::time::Duration;

const DIM: usize = 32;

fn frame(id: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    encode_frame(
        Header::request(cohort_services::knn::ID, id, 50_000_000),
        payload,
        &mut f,
    );
    f
}

/// `q` queries (distinct, so their answers differ) as one request.
fn queries(q: usize, k: u16) -> Vec<u8> {
    let v: Vec<f32> = (0..q * DIM)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
        .collect();
    let mut p = Vec::new();
    encode_queries(k, 1, DIM, Elems::F32(&v), &mut p);
    p
}

#[test]
fn batched_knn_over_udp_and_tcp_answers_every_query_right() {
    let d = Scratch::new("knn-batched");
    let f = knn_files(&d);
    let s = Served::start(&[
        "--service",
        "knn:cpu",
        "--index",
        &f.index,
        "--workers",
        "2",
    ]);
    let run = |target: &str, per: &str| {
        cohort_load_report(
            target,
            "knn",
            &[
                "--queries",
                &f.queries,
                "--gt",
                &f.gt,
                "--k",
                "10",
                "--nprobe",
                "4",
                "--queries-per-request",
                per,
                "--rate",
                "40",
                "--duration",
                "1",
                "--warmup",
                "0.2",
                "--no-gpu-energy",
            ],
        )
    };
    for target in [
        format!("udp://{}", s.udp.unwrap()),
        format!("tcp://{}", s.tcp.unwrap()),
    ] {
        let one = run(&target, "1");
        let r = run(&target, "50");
        assert_eq!(r["ok"].as_u64(), r["sent"].as_u64(), "{target}: {r}");
        assert!(r["sent"].as_u64().unwrap() >= 30, "{target}: {r}");
        assert_eq!(r["queries_per_request"].as_u64(), Some(50), "{r}");
        // 50 a request over the 200 queries: each query asked equally often, and each
        // answered as alone, so the recall is the one-query run's.
        let (got, alone) = (
            r["recall_at_k"].as_f64().unwrap(),
            one["recall_at_k"].as_f64().unwrap(),
        );
        assert!(
            got > 0.5 && (got - alone).abs() < 0.01,
            "{target}: {got} vs {alone}"
        );
    }
}

#[test]
fn bad_batches_get_one_bad_request_and_the_default_queue_holds_32_x_256_queries() {
    let d = Scratch::new("knn-batched-bad");
    let f = knn_files(&d);
    let s = Served::start(&[
        "--service",
        "knn:cpu",
        "--index",
        &f.index,
        "--workers",
        "2",
    ]);
    // Over UDP: 1 025 queries of u8 (fits a datagram), and 3 queries with a short body.
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    u.connect(s.udp.unwrap()).unwrap();
    let mut many = Vec::new();
    encode_queries(10, 0, DIM, Elems::U8(&[3u8; DIM * 2]), &mut many);
    many.extend_from_slice(&vec![3u8; DIM * 1023]);
    many[5..7].copy_from_slice(&1025u16.to_le_bytes());
    let mut short = queries(3, 10);
    short.truncate(short.len() - 4);
    for (id, p) in [(1u64, &many), (2, &short)] {
        u.send(&frame(id, p)).unwrap();
        let (got, kind, code) = udp_answer(&u);
        assert_eq!(
            (got, kind, code),
            (id, Kind::Error, Some(ErrorCode::BadRequest))
        );
    }
    // Nothing more comes for them: one answer each.
    u.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(u.recv(&mut [0u8; 64]).is_err(), "a second answer");

    // 32 TCP clients each send a request of 256 queries before reading anything: with the
    // default --max-queue all 8 192 queries are admitted, and each answer holds 256 answers.
    let mut conns: Vec<std::net::TcpStream> = (0..32)
        .map(|_| std::net::TcpStream::connect(s.tcp.unwrap()).unwrap())
        .collect();
    let p = queries(256, 10);
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(&frame(100 + i as u64, &p)).unwrap();
    }
    for (i, c) in conns.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65_536];
        let (h, payload) = loop {
            if let Ok(Some((f, _))) = Frame::decode_stream(&buf, MAX_PAYLOAD) {
                break (f.header, f.payload.to_vec());
            }
            let n = c.read(&mut chunk).unwrap();
            assert!(n > 0, "closed");
            buf.extend_from_slice(&chunk[..n]);
        };
        assert_eq!(
            (h.request_id, h.kind),
            (100 + i as u64, Kind::Response),
            "{:?}",
            String::from_utf8_lossy(&payload)
        );
        let answers = decode_responses(&payload, 256).unwrap();
        assert!(answers.iter().all(|a| a.len() == 10));
    }
}
