//! The server's bounds, tried from outside as a hostile or careless client would: connections
//! past `--max-connections` and past the descriptor limit are refused at once (not left
//! hanging) while UDP keeps serving; idle connections, frames and request heads or bodies
//! that never complete are closed with their error; clients that pipeline and never read
//! cannot grow the server past its byte budget; SIGTERM ends within its drain timeout
//! whatever the clients do.

use crate::common;
use cohort_proto::{encode_frame, ErrorPayload, Frame, GoAway, Header, Kind, MAX_PAYLOAD};
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn echo_frame(id: u64, len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    let p = vec![b'x'; len];
    encode_frame(
        Header::request(cohort_services::echo::ID, id, p.len()),
        &p,
        &mut f,
    );
    f
}

/// Everything the server sends until it closes (bounded by `within`), as frames.
fn frames_until_close(c: &mut TcpStream, within: Duration) -> Vec<(Header, Vec<u8>)> {
    c.set_read_timeout(Some(within)).unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let mut out = Vec::new();
    let mut at = 0;
    while let Ok(Some((f, used))) = Frame::decode_stream(&raw[at..], MAX_PAYLOAD) {
        out.push((f.header, f.payload.to_vec()));
        at += used;
    }
    out
}

fn closed_within(c: &mut TcpStream, within: Duration) -> bool {
    c.set_read_timeout(Some(within)).unwrap();
    let mut sink = Vec::new();
    // EOF, or a reset (the server closed with the client's request unread): closed either way.
    match c.read_to_end(&mut sink) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn error_of(payload: &[u8]) -> ErrorPayload {
    ErrorPayload::decode(payload).expect("error payload")
}

fn udp_echo_answers(addr: SocketAddr) -> bool {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.send_to(&echo_frame(9, 8), addr).unwrap();
    let mut b = [0u8; 256];
    match s.recv(&mut b) {
        Ok(n) => Frame::decode_datagram(&b[..n], MAX_PAYLOAD)
            .is_ok_and(|f| f.header.kind == Kind::Response && f.header.request_id == 9),
        Err(_) => false,
    }
}

fn metric(addr: SocketAddr, line_prefix: &str) -> f64 {
    let m = http_get(addr, "/metrics");
    m.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn connections_past_the_cap_are_told_at_once_and_a_freed_place_is_served() {
    let s = Served::start(&["--service", "echo", "--max-connections", "3"]);
    let (tcp, http) = (s.tcp.unwrap(), s.http.unwrap());
    let mut held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(tcp).unwrap()).collect();
    // Each held connection is served (so it has been accepted and counted).
    for (i, c) in held.iter_mut().enumerate() {
        c.write_all(&echo_frame(i as u64, 4)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 64];
        assert!(c.read(&mut b).unwrap() > 0);
    }
    let mut fourth = TcpStream::connect(tcp).unwrap();
    let started = Instant::now();
    let got = frames_until_close(&mut fourth, Duration::from_secs(5));
    assert!(started.elapsed() < Duration::from_secs(2), "not at once");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0.kind, Kind::Error);
    let e = error_of(&got[0].1);
    assert_eq!(e.code, cohort_proto::ErrorCode::Overloaded, "{e:?}");
    // HTTP counts against the same cap: 503 with Retry-After, then close.
    let mut h = TcpStream::connect(http).unwrap();
    h.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = String::new();
    let _ = h.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    assert!(out.to_ascii_lowercase().contains("retry-after: 1"), "{out}");
    // A place freed is taken by the next client.
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(200));
    let m = http_get(http, "/metrics");
    assert!(
        m.contains("cohort_connections_refused_total{reason=\"max_connections\"} 2"),
        "{m}"
    );
}

#[test]
fn idle_connections_and_requests_that_never_complete_are_closed_with_their_error() {
    let s = Served::start(&[
        "--service",
        "echo",
        "--idle-timeout-ms",
        "400",
        "--read-timeout-ms",
        "400",
    ]);
    let (tcp, http) = (s.tcp.unwrap(), s.http.unwrap());
    // Idle TCP: GOAWAY with nothing pending, then close.
    let mut idle = TcpStream::connect(tcp).unwrap();
    let got = frames_until_close(&mut idle, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0.kind, Kind::GoAway);
    assert!(GoAway::decode(&got[0].1).unwrap().pending.is_empty());
    // A connection that was served, then went quiet, is idle too.
    let mut quiet = TcpStream::connect(tcp).unwrap();
    quiet.write_all(&echo_frame(5, 3)).unwrap();
    let got = frames_until_close(&mut quiet, Duration::from_secs(5));
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        (got[0].0.kind, got[1].0.kind),
        (Kind::Response, Kind::GoAway)
    );
    // A frame whose header came but whose payload never does: TIMEOUT naming it, then close.
    let mut partial = TcpStream::connect(tcp).unwrap();
    let f = echo_frame(77, 100);
    partial.write_all(&f[..50]).unwrap();
    let got = frames_until_close(&mut partial, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0.kind, got[0].0.request_id), (Kind::Error, 77));
    assert_eq!(error_of(&got[0].1).code, cohort_proto::ErrorCode::Timeout);
    // HTTP: a head that never ends gets 408, as does a body that never comes.
    for req in [
        "POST /v1/echo HTTP/1.1\r\nHost: x\r\n",
        "POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"da",
    ] {
        let mut c = TcpStream::connect(http).unwrap();
        c.write_all(req.as_bytes()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = String::new();
        let started = Instant::now();
        let _ = c.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 408"), "{req:?}: {out}");
        assert!(out.contains("REQUEST_TIMEOUT"), "{out}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
    let m = http_get(http, "/metrics");
    for reason in ["idle", "partial_frame", "http_head", "http_body"] {
        assert!(
            m.contains(&format!(
                "cohort_connections_timed_out_total{{reason=\"{reason}\"}}"
            )),
            "{reason}: {m}"
        );
    }
}

/// A non-blocking connection for a client that will never read: a small receive buffer, so
/// the server's answers stall at once instead of filling megabytes of kernel buffers first.
fn non_reading_client(addr: SocketAddr) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&addr.into()).unwrap();
    let c: TcpStream = sock.into();
    c.set_nonblocking(true).unwrap();
    c
}

fn vm_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Room for the test's own many sockets.
fn raise_own_fd_limit() {
    cohort_net::raise_fd_limit();
}

/// 1000 connections pipeline 60 KB echo requests and never read: the bytes the server holds
/// stay within its budget (the gauge), its resident memory within the budget plus a fixed
/// overhead per connection, and once the stalled readers are closed (the write stall timeout)
/// a well-behaved client is served again.
#[test]
fn clients_that_pipeline_and_never_read_cannot_grow_the_server_past_its_budget() {
    raise_own_fd_limit();
    const CONNS: usize = 1000;
    const BUDGET_MB: u64 = 32;
    let s = Served::start(&[
        "--service",
        "echo",
        "--max-buffered-bytes",
        "32M",
        "--read-timeout-ms",
        "1500",
    ]);
    let (tcp, http) = (s.tcp.unwrap(), s.http.unwrap());
    let pid = s.child.id();
    let before = vm_kb(pid, "VmRSS:");
    let frame = echo_frame(1, 60_000);
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        conns.push(non_reading_client(tcp));
    }
    // Push until every connection's socket buffers are full (the server stopped reading).
    let until = Instant::now() + Duration::from_secs(4);
    let mut peak_buffered = 0.0f64;
    while Instant::now() < until {
        for c in conns.iter_mut() {
            for _ in 0..4 {
                if c.write(&frame).is_err() {
                    break;
                }
            }
        }
        peak_buffered = peak_buffered.max(metric(http, "cohort_buffered_bytes "));
    }
    let peak_kb = vm_kb(pid, "VmHWM:");
    let grown_mb = peak_kb.saturating_sub(before) / 1024;
    // Per connection: a 64-128 KB read buffer and a 64 KB write buffer at most.
    let allowed_mb = BUDGET_MB * 2 + (CONNS as u64 * 192) / 1024 + 64;
    eprintln!(
        "rss before {} MB, peak {} MB (grew {grown_mb} MB, allowed {allowed_mb} MB); \
         peak buffered {:.1} MB",
        before / 1024,
        peak_kb / 1024,
        peak_buffered / 1048576.0
    );
    // The budget, plus one 16 KB read per connection that waits for nothing (each of these
    // did, once, at its start), plus a 64 KB read per io thread.
    let bound = (BUDGET_MB << 20) + CONNS as u64 * (16 << 10) + (64 << 10);
    assert!(peak_buffered <= bound as f64, "{peak_buffered} > {bound}");
    assert!(
        peak_buffered >= (BUDGET_MB as f64 / 2.0) * 1048576.0,
        "the test never loaded the budget: {peak_buffered}"
    );
    assert!(grown_mb <= allowed_mb, "grew {grown_mb} MB");
    // A client that waits for its answers is served at once while the budget is held by
    // those that do not read (they are closed when their writes stall).
    let mut polite = TcpStream::connect(tcp).unwrap();
    polite.write_all(&echo_frame(42, 10)).unwrap();
    polite
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut b = [0u8; 128];
    let n = polite.read(&mut b).unwrap_or_else(|e| {
        let m = http_get(http, "/metrics");
        let m: Vec<&str> = m
            .lines()
            .filter(|l| {
                !l.starts_with("#")
                    && (l.contains("buffered")
                        || l.contains("connections")
                        || l.contains("in_flight")
                        || l.contains("requests_total"))
            })
            .collect();
        panic!("the polite client is not answered ({e}): {m:#?}")
    });
    let f = Frame::decode_datagram(&b[..n], MAX_PAYLOAD).unwrap();
    assert_eq!((f.header.kind, f.header.request_id), (Kind::Response, 42));
    // The clients that never read are closed once a write has stalled for the read timeout.
    let stalled = || {
        metric(
            http,
            "cohort_connections_timed_out_total{reason=\"write_stalled\"}",
        )
    };
    let until = Instant::now() + Duration::from_secs(10);
    while stalled() == 0.0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(stalled() > 0.0, "no stalled writer was closed");
}

/// At the descriptor limit new clients are refused (told and closed, not left after their
/// handshake) while UDP keeps serving.
#[test]
fn at_the_descriptor_limit_new_clients_are_refused_and_udp_still_serves() {
    raise_own_fd_limit();
    let s = Served::start_with(
        &["--service", "echo", "--max-connections", "100000"],
        |cmd| {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; it only lowers the child's own limit.
            unsafe {
                cmd.pre_exec(|| {
                    let r = libc::rlimit {
                        rlim_cur: 96,
                        rlim_max: 96,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        },
    );
    let tcp = s.tcp.unwrap();
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..200u64 {
        let mut c = TcpStream::connect(tcp).unwrap();
        c.write_all(&echo_frame(i, 4)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut b = [0u8; 256];
        let n = c.read(&mut b).unwrap_or(0);
        // Served (an echo answer) or refused (OVERLOADED, or closed): never silence.
        let kind = Frame::decode_stream(&b[..n], MAX_PAYLOAD)
            .ok()
            .flatten()
            .map(|(f, _)| (f.header.kind, f.header.request_id));
        match kind {
            Some((Kind::Response, id)) if id == i => held.push(c),
            Some((Kind::Error, _)) | None => {
                assert!(closed_within(&mut c, Duration::from_secs(3)), "not closed");
                refused += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
        if refused >= 5 {
            break;
        }
    }
    assert!(refused >= 5, "never refused ({} held)", held.len());
    assert!(held.len() < 96, "{}", held.len());
    assert!(udp_echo_answers(s.udp.unwrap()), "UDP stopped serving");
}

/// A slow-body HTTP client, a half-sent TCP frame and an idle connection do not hold SIGTERM
/// past the drain timeout.
#[test]
fn sigterm_ends_within_the_drain_timeout_whatever_the_clients_do() {
    let mut s = Served::start(&["--service", "echo", "--drain-timeout-ms", "500"]);
    let (tcp, http) = (s.tcp.unwrap(), s.http.unwrap());
    let mut slow = TcpStream::connect(http).unwrap();
    slow.write_all(b"POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    let mut partial = TcpStream::connect(tcp).unwrap();
    partial.write_all(&echo_frame(3, 100)[..40]).unwrap();
    let _idle = TcpStream::connect(tcp).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(10)), 0);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        started.elapsed()
    );
}

/// HTTP clients that pipeline 60 KB echoes and never read their answers are closed once a write
/// has waited the read timeout (`write_stalled`), as TCP clients are; meanwhile a normal HTTP
/// client (one request at a time, reading its answers) is served at once, though the
/// flooders hold the whole budget.
#[test]
fn http_clients_that_never_read_are_closed_and_do_not_starve_others() {
    raise_own_fd_limit();
    const CONNS: usize = 200;
    let s = Served::start(&[
        "--service",
        "echo",
        "--max-buffered-bytes",
        "4M",
        "--read-timeout-ms",
        "1500",
    ]);
    let http = s.http.unwrap();
    let body = format!("{{\"data\": \"{}\"}}", "x".repeat(60_000));
    let req = format!(
        "POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        conns.push(non_reading_client(http));
    }
    let started = Instant::now();
    let until = started + Duration::from_secs(2);
    while Instant::now() < until {
        for c in conns.iter_mut() {
            let _ = c.write(req.as_bytes());
        }
    }
    // A normal client, served while the flooders stall.
    for i in 0..5 {
        let t = Instant::now();
        let r = http_post(http, "/v1/echo", "{\"data\": \"polite\"}");
        assert!(
            r.starts_with("HTTP/1.1 200") && r.contains("polite"),
            "try {i}: {r}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "try {i}: {:?}",
            t.elapsed()
        );
    }
    // Every flooder is closed: those whose answers stalled (`write_stalled`), and those left
    // waiting for the budget in the middle of a body (408 at the body deadline). Each wave
    // takes one read timeout. (The metrics request itself is one open connection.)
    // The reading that ends the wait is the one held to 1: a second request could still
    // count the previous metrics connection, closing on another io thread.
    let open = || metric(http, "cohort_connections_open ");
    let until = Instant::now() + Duration::from_secs(30);
    let mut now_open = open();
    while now_open > 1.0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        now_open = open();
    }
    assert_eq!(
        now_open,
        1.0,
        "every flooder closed after {:?}",
        started.elapsed()
    );
    let stalled = metric(
        http,
        "cohort_connections_timed_out_total{reason=\"write_stalled\"}",
    );
    assert!(stalled > 0.0, "no stalled HTTP reader was closed");
    for c in conns.iter_mut() {
        c.set_nonblocking(false).unwrap();
        assert!(closed_within(c, Duration::from_secs(2)));
    }
    assert_eq!(
        metric(http, "cohort_buffered_bytes "),
        0.0,
        "the budget is given back"
    );
}
