//! Garbage on every listener beside a valid load that must see no errors.

use crate::common;
use cohort_load::{Mode, Target};
use cohort_proto::{
    encode_frame, ErrorCode, ErrorPayload, Frame, Header, Kind, HEADER_LEN, MAX_PAYLOAD,
};
use cohort_services::micro::load::EchoWorkload;
use common::*;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

fn udp_client() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s
}

/// The error answer to a datagram of `sent` bytes: never larger than it (no amplification).
fn expect_error(s: &UdpSocket, code: ErrorCode, sent: usize) {
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf).expect("an error answer");
    assert!(n <= sent, "a {n}-byte answer to a {sent}-byte datagram");
    let f = Frame::decode_datagram(&buf[..n], MAX_PAYLOAD).unwrap();
    assert_eq!(f.header.kind, Kind::Error);
    assert_eq!(ErrorPayload::decode(f.payload).unwrap().code, code);
}

fn udp_garbage(addr: SocketAddr, rng: &mut impl Rng) {
    let s = udp_client();
    // Foreign datagrams: dropped, never answered.
    for _ in 0..500 {
        let len = rng.gen_range(0..1500);
        let mut b: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if b.len() >= 2 && b[0..2] == *b"CH" {
            b[0] = b'X';
        }
        s.send_to(&b, addr).unwrap();
    }
    let mut buf = [0u8; 2048];
    assert!(
        s.recv(&mut buf).is_err(),
        "a foreign datagram was answered (reflection)"
    );
    // Truncated: header promises 100 bytes, 50 arrive.
    let mut f = Vec::new();
    encode_frame(Header::request(1, 1, 0), &[7u8; 100], &mut f);
    s.send_to(&f[..HEADER_LEN + 50], addr).unwrap();
    expect_error(&s, ErrorCode::BadRequest, HEADER_LEN + 50);
    // Oversized: header claims more than a frame may carry. A bare header is smaller than
    // any error frame (24 bytes against 28): it gets nothing, where it used to get 3.4x.
    let mut h = [0u8; HEADER_LEN];
    Header {
        payload_len: u32::MAX,
        ..Header::request(1, 2, 0)
    }
    .encode(&mut h);
    s.send_to(&h, addr).unwrap();
    assert!(
        s.recv(&mut buf).is_err(),
        "a bare header was answered with a larger error frame"
    );
    let mut padded = h.to_vec();
    padded.extend_from_slice(&[0u8; 12]);
    s.send_to(&padded, addr).unwrap();
    expect_error(&s, ErrorCode::TooLarge, padded.len());
    // Unknown service: its error message cut to the request's size.
    f.clear();
    encode_frame(Header::request(999, 3, 0), b"xxxxxxxx", &mut f);
    s.send_to(&f, addr).unwrap();
    expect_error(&s, ErrorCode::UnknownService, f.len());
}

fn tcp_garbage(addr: SocketAddr, rng: &mut impl Rng) {
    for _ in 0..20 {
        let mut c = TcpStream::connect(addr).unwrap();
        let b: Vec<u8> = (0..rng.gen_range(1..4000)).map(|_| rng.gen()).collect();
        let _ = c.write_all(&b);
    }
    // Truncated frame, then the client goes away.
    let mut f = Vec::new();
    encode_frame(Header::request(1, 1, 0), &[1u8; 64], &mut f);
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(&f[..40]).unwrap();
    drop(c);
    // Oversized: TOO_LARGE answer, then the server closes the connection.
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut h = [0u8; HEADER_LEN];
    Header {
        payload_len: 1 << 30,
        ..Header::request(1, 5, 0)
    }
    .encode(&mut h);
    c.write_all(&h).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let (f, _) = Frame::decode_stream(&got, MAX_PAYLOAD)
        .unwrap()
        .expect("an answer frame");
    assert_eq!((f.header.kind, f.header.request_id), (Kind::Error, 5));
    assert_eq!(
        ErrorPayload::decode(f.payload).unwrap().code,
        ErrorCode::TooLarge
    );
}

fn http_garbage(addr: SocketAddr, rng: &mut impl Rng) -> Vec<TcpStream> {
    let ask = |req: &[u8]| -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(req).unwrap();
        let mut out = vec![0u8; 512];
        let n = c.read(&mut out).unwrap_or(0);
        String::from_utf8_lossy(&out[..n]).into_owned()
    };
    let r = ask(b"POST /v1/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\n{bad}");
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    let r = ask(b"POST /v1/none HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}");
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    let big = format!(
        "POST /v1/echo HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        5 << 20
    );
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(big.as_bytes()).unwrap();
    let _ = c.write_all(&vec![b'a'; 5 << 20]);
    let mut out = vec![0u8; 256];
    let n = c.read(&mut out).unwrap_or(0);
    assert!(
        String::from_utf8_lossy(&out[..n]).starts_with("HTTP/1.1 413"),
        "oversized body"
    );
    for _ in 0..10 {
        let mut c = TcpStream::connect(addr).unwrap();
        let b: Vec<u8> = (0..rng.gen_range(1..2000)).map(|_| rng.gen()).collect();
        let _ = c.write_all(&b);
    }
    // Slow clients: connect, send half a request line, then nothing. Kept open.
    (0..20)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            let _ = c.write_all(b"POST /v1/ec");
            c
        })
        .collect()
}

#[test]
fn malformed_traffic_on_every_listener_beside_clean_load() {
    let mut s = Served::start(&["--service", "echo,spin"]);
    let (udp, tcp, http) = (s.udp.unwrap(), s.tcp.unwrap(), s.http.unwrap());
    let echo = Arc::new(EchoWorkload { payload_bytes: 32 });
    let (e1, e2) = (echo.clone(), echo.clone());
    let lu = std::thread::spawn(move || {
        load(
            Target::Udp(udp),
            Mode::Open {
                rate: 2000.0,
                poisson: true,
            },
            3.0,
            e1,
        )
    });
    let lt = std::thread::spawn(move || {
        load(
            Target::Tcp(tcp),
            Mode::Open {
                rate: 2000.0,
                poisson: true,
            },
            3.0,
            e2,
        )
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    std::thread::sleep(Duration::from_millis(300));
    udp_garbage(udp, &mut rng);
    tcp_garbage(tcp, &mut rng);
    let slow = http_garbage(http, &mut rng);
    let lh = load(
        Target::Http(http),
        Mode::Closed { concurrency: 2 },
        0.5,
        echo,
    );
    for r in [lu.join().unwrap(), lt.join().unwrap(), lh] {
        assert_all_answered(&r);
        assert_eq!(r.error_total(), 0, "valid load saw errors: {r:#?}");
        assert!(r.ok > 0);
    }
    drop(slow);
    // The foreign datagrams were counted as dropped.
    let mut c = TcpStream::connect(http).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut m = String::new();
    c.read_to_string(&mut m).unwrap();
    let dropped: u64 = m
        .lines()
        .find(|l| l.starts_with("cohort_udp_dropped_total{reason=\"not_cohort\"}"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .expect("metric present");
    assert!(dropped >= 400, "dropped {dropped}");
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(15)), 0);
}
