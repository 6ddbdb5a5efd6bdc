//! Per-client quotas from outside: one client (its own loopback address) floods the spin
//! service with long requests while another sends short ones. Without quotas the second waits
//! behind the flood; with `--client-max-inflight` it is served as if alone and the flood gets
//! OVERLOADED (HTTP 429, the same quota over UDP). Fair queueing inside the service
//! (`--fair-queue on`) serves the second client ahead of the flood without refusing the flood.
//! `--max-deadline-ms` cuts a deadline a client asks for; `--max-queue` is exact.

use crate::common;
use cohort_proto::{encode_frame, ErrorCode, Header, Kind};
use common::*;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn spin_frame(id: u64, us: u32, timeout_us: u32) -> Vec<u8> {
    let p = cohort_services::spin::encode(us, b"");
    let mut h = Header::request(cohort_services::spin::ID, id, p.len());
    h.timeout_us = timeout_us;
    let mut f = Vec::new();
    encode_frame(h, &p, &mut f);
    f
}

/// A TCP connection from a given loopback address (127.0.0.0/8 is all loopback on Linux).
fn connect_from(ip: &str, to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = (ip.parse::<IpAddr>().unwrap(), 0).into();
    s.bind(&from.into()).unwrap();
    s.connect(&to.into()).unwrap();
    let c: TcpStream = s.into();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c
}

/// The flooder pipelines 60 requests of 20 ms from 127.0.0.2; the victim then sends 10 short
/// ones from 127.0.0.3, one at a time. Returns the victim's slowest answer and the flood's
/// answers by outcome (ok, overloaded).
fn flood_and_probe(s: &Served) -> (Duration, usize, usize) {
    let tcp = s.tcp.unwrap();
    let mut flood = connect_from("127.0.0.2", tcp);
    let frames: Vec<u8> = (0..60).flat_map(|i| spin_frame(i, 20_000, 0)).collect();
    flood.write_all(&frames).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut victim = connect_from("127.0.0.3", tcp);
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let t = Instant::now();
        victim.write_all(&spin_frame(1000 + i, 100, 0)).unwrap();
        let a = read_answers(&mut victim, 1);
        assert_eq!(a[0].1, Kind::Response, "victim request {i}: {a:?}");
        slowest = slowest.max(t.elapsed());
    }
    let answers = read_answers(&mut flood, 60);
    let ok = answers.iter().filter(|a| a.1 == Kind::Response).count();
    let overloaded = answers
        .iter()
        .filter(|a| a.2 == Some(ErrorCode::Overloaded))
        .count();
    (slowest, ok, overloaded)
}

/// Fair queueing alone (`--fair-queue on`, no quotas): the flood is all admitted, yet the
/// other client's requests run next instead of after it; with `--fair-queue off` (the
/// default) they wait behind the whole flood (arrival order).
#[test]
fn fair_queueing_serves_a_light_client_ahead_of_a_flood_without_refusing_it() {
    // One io thread: one arrival order for both clients (serve's default is one per core).
    let base = ["--service", "spin", "--workers", "2", "--io-threads", "1"];
    let arrival_order = Served::start(&[&base[..], &["--fair-queue", "off"]].concat());
    let (slowest_fifo, ok, _) = flood_and_probe(&arrival_order);
    drop(arrival_order);
    assert_eq!(ok, 60);
    let fair = Served::start(&[&base[..], &["--fair-queue", "on"]].concat());
    let (slowest_fair, ok, _) = flood_and_probe(&fair);
    eprintln!("victim's slowest: {slowest_fifo:?} in arrival order, {slowest_fair:?} fair");
    assert_eq!(ok, 60, "fair queueing refuses nothing");
    assert!(
        slowest_fifo > Duration::from_millis(150),
        "{slowest_fifo:?}"
    );
    assert!(slowest_fair < Duration::from_millis(60), "{slowest_fair:?}");
}

#[test]
fn a_flooding_client_is_held_to_its_quota_and_another_is_served_as_if_alone() {
    // Arrival order inside the service (no fair queueing): the quota alone isolates.
    // One io thread: one arrival order for both clients (serve's default is one per core).
    let base = [
        "--service",
        "spin",
        "--workers",
        "2",
        "--io-threads",
        "1",
        "--fair-queue",
        "off",
    ];
    // Without quotas the victim waits behind the flood (60 x 20 ms over 2 workers).
    let unfair = Served::start(&base);
    let (slowest_unfair, ok, _) = flood_and_probe(&unfair);
    drop(unfair);
    assert_eq!(ok, 60);
    // With one request in flight per client, the flood holds one worker at most.
    let fair = Served::start(&[&base[..], &["--client-max-inflight", "1"]].concat());
    let (slowest_fair, ok, overloaded) = flood_and_probe(&fair);
    eprintln!("victim's slowest: {slowest_unfair:?} without quotas, {slowest_fair:?} with");
    assert!(
        slowest_unfair > Duration::from_millis(150),
        "{slowest_unfair:?}"
    );
    assert!(slowest_fair < Duration::from_millis(60), "{slowest_fair:?}");
    assert!(
        ok >= 1 && overloaded >= 50,
        "ok {ok} overloaded {overloaded}"
    );
    assert_eq!(ok + overloaded, 60);
    // The same quota over HTTP (429) ...
    let http = fair.http.unwrap();
    let mut busy = connect_from("127.0.0.4", fair.tcp.unwrap());
    busy.write_all(&spin_frame(1, 100_000, 0)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut h = connect_from("127.0.0.4", http);
    let body = r#"{"spin_us": 10}"#;
    write!(
        h,
        "POST /v1/spin HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = h.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 429"), "{out}");
    assert!(out.contains("OVERLOADED") && out.contains("quota"), "{out}");
    // ... and over UDP.
    let u = UdpSocket::bind("127.0.0.4:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    u.send_to(&spin_frame(2, 10, 0), fair.udp.unwrap()).unwrap();
    let (_, kind, code) = udp_answer(&u);
    assert_eq!((kind, code), (Kind::Error, Some(ErrorCode::Overloaded)));
}

#[test]
fn a_deadline_longer_than_the_servers_or_the_services_maximum_is_cut_to_it() {
    for cut in [
        &["--max-deadline-ms", "100"][..],
        &["--service-opt", "spin.max_deadline_ms=100"][..],
    ] {
        let s = Served::start(&[&["--service", "spin,echo", "--workers", "1"][..], cut].concat());
        let mut c = TcpStream::connect(s.tcp.unwrap()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // The worker is busy for 400 ms; the last request asks to wait ~71 minutes.
        for id in 1..=4 {
            c.write_all(&spin_frame(id, 100_000, 0)).unwrap();
        }
        c.write_all(&spin_frame(5, 10, u32::MAX)).unwrap();
        let t = Instant::now();
        let a = read_answers(&mut c, 5);
        let last = a.iter().find(|a| a.0 == 5).unwrap();
        assert_eq!(last.2, Some(ErrorCode::Timeout), "{cut:?}: {a:?}");
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}

/// `--max-queue N` is exact: N + k requests sent at once to a one-worker service over two
/// io threads (each with its own rings, where ring sizes round up) get N answers and exactly
/// k OVERLOADED; the same bound then holds per service (`NAME.max_queue`).
#[test]
fn max_queue_admits_exactly_that_many_requests() {
    for (flags, n) in [
        (&["--max-queue", "3"][..], 3usize),
        (&["--service-opt", "spin.max_queue=5"][..], 5),
    ] {
        let s = Served::start(
            &[
                &["--service", "spin", "--workers", "1", "--io-threads", "2"][..],
                flags,
            ]
            .concat(),
        );
        let k = 4;
        // Two connections (either shard), then UDP: N + k requests of 100 ms in all.
        let tcp = s.tcp.unwrap();
        let mut a = connect_from("127.0.0.5", tcp);
        let mut b = connect_from("127.0.0.6", tcp);
        let split = (n + k) / 2;
        let frames = |ids: std::ops::Range<usize>| -> Vec<u8> {
            ids.flat_map(|i| spin_frame(i as u64, 100_000, 5_000_000))
                .collect()
        };
        a.write_all(&frames(0..split)).unwrap();
        b.write_all(&frames(split..n + k - 1)).unwrap();
        let u = UdpSocket::bind("127.0.0.7:0").unwrap();
        u.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        std::thread::sleep(Duration::from_millis(10));
        u.send_to(&spin_frame(99, 100_000, 5_000_000), s.udp.unwrap())
            .unwrap();
        let mut all = read_answers(&mut a, split);
        all.extend(read_answers(&mut b, n + k - 1 - split));
        all.push(udp_answer(&u));
        let ok = all.iter().filter(|a| a.1 == Kind::Response).count();
        let overloaded = all
            .iter()
            .filter(|a| a.2 == Some(ErrorCode::Overloaded))
            .count();
        assert_eq!((ok, overloaded), (n, k), "{flags:?}: {all:?}");
    }
}
