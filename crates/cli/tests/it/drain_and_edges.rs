//! Shutdown and edge cases found by a client written from the docs alone: every id a GOAWAY
//! lists is answered even when work outlasts the drain; /healthz says 503 while draining; a
//! frame cut short by FIN gets its error frame; the HTTP gateway's error bodies, Allow header,
//! size limits and metrics; host names for listen addresses.

use crate::common;
use cohort_proto::{
    encode_frame, ErrorPayload, Frame, GoAway, Header, Kind, HEADER_LEN, MAX_PAYLOAD,
};
use common::*;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn spin_frame(id: u64, us: u32) -> Vec<u8> {
    let mut f = Vec::new();
    let p = cohort_services::spin::encode(us, b"");
    encode_frame(
        Header::request(cohort_services::spin::ID, id, p.len()),
        &p,
        &mut f,
    );
    f
}

/// Reads frames until the server closes: (GOAWAY ids, answered ids with their kinds).
fn read_until_close(c: &mut TcpStream) -> (Vec<u64>, Vec<(u64, Kind)>) {
    let (mut buf, mut goaway, mut answers) = (Vec::new(), Vec::new(), Vec::new());
    let mut chunk = [0u8; 4096];
    loop {
        while let Ok(Some((f, used))) = Frame::decode_stream(&buf, MAX_PAYLOAD) {
            match f.header.kind {
                Kind::GoAway => goaway = GoAway::decode(f.payload).unwrap().pending,
                k => answers.push((f.header.request_id, k)),
            }
            buf.drain(..used);
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return (goaway, answers),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn http(addr: SocketAddr, req: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

#[test]
fn every_id_a_goaway_lists_is_answered_even_when_work_outlasts_the_drain() {
    // One worker, 20 spins of 100 ms pipelined, a 500 ms drain: most cannot finish in time.
    let mut s = Served::start(&[
        "--service",
        "spin",
        "--workers",
        "1",
        "--drain-timeout-ms",
        "500",
    ]);
    let mut c = TcpStream::connect(s.tcp.unwrap()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for id in 1..=20 {
        c.write_all(&spin_frame(id, 100_000)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(150));
    s.sigterm();
    let (goaway, answers) = read_until_close(&mut c);
    assert!(!goaway.is_empty(), "a GOAWAY listing the work in progress");
    let answered: HashSet<u64> = answers.iter().map(|a| a.0).collect();
    assert_eq!(
        answered.len(),
        answers.len(),
        "an id answered twice: {answers:?}"
    );
    for id in &goaway {
        assert!(
            answered.contains(id),
            "GOAWAY listed {id}, never answered: {answers:?}"
        );
    }
    assert_eq!(answered.len(), 20, "{answers:?}");
    assert_eq!(s.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn healthz_answers_503_while_the_server_drains() {
    let mut s = Served::start(&[
        "--service",
        "spin",
        "--workers",
        "1",
        "--drain-timeout-ms",
        "3000",
    ]);
    let http_addr = s.http.unwrap();
    assert!(http(
        http_addr,
        "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .starts_with("HTTP/1.1 200"));
    let mut c = TcpStream::connect(s.tcp.unwrap()).unwrap();
    for id in 1..=10 {
        c.write_all(&spin_frame(id, 100_000)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    s.sigterm();
    std::thread::sleep(Duration::from_millis(300));
    let r = http(
        http_addr,
        "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    assert!(r.to_ascii_lowercase().contains("retry-after: 1"), "{r}");
    let r = http(
        http_addr,
        "POST /v1/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    );
    assert!(
        r.contains("UNAVAILABLE") || r.contains("UNKNOWN_SERVICE"),
        "{r}"
    );
    assert_eq!(s.wait_exit(Duration::from_secs(20)), 0);
}

#[test]
fn a_frame_cut_short_by_the_client_closing_gets_its_error_frame() {
    let s = Served::start(&["--service", "echo"]);
    let mut c = TcpStream::connect(s.tcp.unwrap()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut f = Vec::new();
    encode_frame(
        Header::request(cohort_services::echo::ID, 42, 100),
        &[7u8; 100],
        &mut f,
    );
    c.write_all(&f[..HEADER_LEN + 50]).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = Vec::new();
    c.read_to_end(&mut buf).unwrap();
    let (f, _) = Frame::decode_stream(&buf, MAX_PAYLOAD)
        .unwrap()
        .expect("an error frame");
    assert_eq!((f.header.kind, f.header.request_id), (Kind::Error, 42));
    let e = ErrorPayload::decode(f.payload).unwrap();
    assert_eq!(e.code, cohort_proto::ErrorCode::BadRequest, "{e:?}");
}

#[test]
fn http_errors_share_one_shape_say_their_limits_and_are_counted() {
    let s = Served::start(&["--service", "echo"]);
    let a = s.http.unwrap();
    let r = http(
        a,
        "GET /v1/echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    assert!(r.to_ascii_lowercase().contains("allow: post"), "{r}");
    assert!(
        r.contains("\"error\":\"METHOD_NOT_ALLOWED\"") && r.contains("\"message\""),
        "{r}"
    );
    let r = http(
        a,
        "GET /nowhere HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(
        r.starts_with("HTTP/1.1 404")
            && r.contains("\"error\":\"NOT_FOUND\"")
            && r.contains("\"message\""),
        "{r}"
    );
    let r = http(
        a,
        "POST /v1/echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: close\r\n\r\n{bad}",
    );
    assert!(
        r.starts_with("HTTP/1.1 400") && r.contains("\"error\":\"BAD_REQUEST\""),
        "{r}"
    );
    let big = 5 << 20;
    let mut c = TcpStream::connect(a).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let head = format!(
        "POST /v1/echo HTTP/1.1\r\nhost: x\r\ncontent-length: {big}\r\nconnection: close\r\n\r\n"
    );
    c.write_all(head.as_bytes()).unwrap();
    let _ = c.write_all(&vec![b' '; big]);
    let mut r = String::new();
    let _ = c.read_to_string(&mut r);
    assert!(
        r.starts_with("HTTP/1.1 413") && r.contains("4194304 bytes"),
        "{r}"
    );
    let m = http(
        a,
        "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    let count = |outcome: &str| {
        m.lines()
            .find(|l| {
                l.starts_with("cohort_requests_total{")
                    && l.contains("service=\"echo\"")
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(count("bad_request"), 1, "{m}");
    assert_eq!(count("too_large"), 1, "{m}");
}

#[test]
fn listen_addresses_may_name_hosts() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args([
            "serve",
            "--service",
            "echo",
            "--http",
            "localhost:0",
            "--udp",
            "localhost:0",
            "--log-level",
            "warn",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.starts_with("listening udp=127.0.0.1:") && line.contains("http=127.0.0.1:"),
        "{line}"
    );
}

/// A second server on a port the first one serves is refused with a message naming the port,
/// for UDP, TCP and HTTP alike (SO_REUSEPORT would otherwise let it join the port and split the
/// first one's traffic), and the first keeps serving.
#[test]
fn a_second_server_on_a_taken_port_is_refused_with_a_clear_message() {
    let first = Served::start(&["--service", "echo"]);
    for (flag, addr) in [
        ("--udp", first.udp.unwrap()),
        ("--tcp", first.tcp.unwrap()),
        ("--http", first.http.unwrap()),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["serve", "--service", "echo", flag, &addr.to_string()])
            .args(["--log-level", "warn"])
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{flag} {addr}: second server started"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("already in use") && err.contains(&addr.to_string()),
            "{flag}: {err}"
        );
        // One clear error, not engines started and stopped before it.
        assert!(
            !err.contains("ERROR") && !err.contains("lane"),
            "{flag}: {err}"
        );
    }
    let r = load(
        cohort_load::Target::Udp(first.udp.unwrap()),
        cohort_load::Mode::Closed { concurrency: 1 },
        0.3,
        std::sync::Arc::new(cohort_services::micro::load::EchoWorkload { payload_bytes: 8 }),
    );
    assert_all_answered(&r);
    assert!(r.ok > 0 && r.error_total() == 0, "{r:#?}");
}

/// Request framing that RFC 9112 says to refuse is refused, and the connection closed:
/// Content-Length with Transfer-Encoding (400), a transfer coding other than a lone chunked
/// (501); a chunked body that never comes (a chunk size of 2^64 - 1, then silence) gets 408
/// when the body deadline passes instead of holding the connection forever.
#[test]
fn ambiguous_or_unsupported_http_framing_is_refused_and_closed() {
    let s = Served::start(&["--service", "echo"]);
    let addr = s.http.unwrap();
    let head = |extra: &str| {
        format!(
            "POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}\r\n"
        )
    };
    // read_to_string returns only once the server closed (the helper's read timeout is 5 s).
    let both = http(
        addr,
        &(head("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + "0\r\n\r\n"),
    );
    assert!(both.starts_with("HTTP/1.1 400"), "{both}");
    assert!(
        both.to_ascii_lowercase().contains("connection: close"),
        "{both}"
    );
    let gzip = http(
        addr,
        &(head("Transfer-Encoding: gzip, chunked\r\n") + "0\r\n\r\n"),
    );
    assert!(gzip.starts_with("HTTP/1.1 501"), "{gzip}");
    assert!(gzip.contains("NOT_IMPLEMENTED"), "{gzip}");
    // A lone chunked body still works.
    let ok = http(
        addr,
        &(head("Transfer-Encoding: chunked\r\nConnection: close\r\n")
            + "e\r\n{\"data\": \"hi\"}\r\n0\r\n\r\n"),
    );
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all((head("Transfer-Encoding: chunked\r\n") + "ffffffffffffffff\r\n").as_bytes())
        .unwrap();
    let started = std::time::Instant::now();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

/// Every head RFC 9112 says to refuse (issue 47's list) gets 400, 431 or 501 with the JSON
/// error body and a close - not hyper's bodiless answer - and a pipelined good request ahead
/// of a bad one is answered first, each exactly once.
#[test]
fn every_refused_http_head_gets_the_json_error_body_and_a_close() {
    let s = Served::start(&["--service", "echo"]);
    let addr = s.http.unwrap();
    let post = |fields: &str| format!("POST /v1/echo HTTP/1.1\r\nHost: x\r\n{fields}\r\n");
    let many: String = (0..10_000).map(|i| format!("x-{i}: y\r\n")).collect();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "CL then TE",
            post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + "0\r\n\r\n",
            "400",
        ),
        (
            "TE then CL",
            post("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") + "0\r\n\r\n",
            "400",
        ),
        (
            "TE Chunked with CL",
            post("Transfer-Encoding: Chunked\r\nContent-Length: 5\r\n") + "0\r\n\r\n",
            "400",
        ),
        (
            "TE identity with CL",
            post("Transfer-Encoding: identity\r\nContent-Length: 2\r\n") + "{}",
            "400",
        ),
        ("CL -1", post("Content-Length: -1\r\n"), "400"),
        (
            "CL 2^64+1",
            post("Content-Length: 18446744073709551617\r\n"),
            "400",
        ),
        (
            "two CLs",
            post("Content-Length: 2\r\nContent-Length: 3\r\n") + "{}",
            "400",
        ),
        (
            "HTTP/2.0",
            "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n".into(),
            "400",
        ),
        (
            "NUL in method",
            "G\0T /healthz HTTP/1.1\r\nHost: x\r\n\r\n".into(),
            "400",
        ),
        ("garbage line", "this is not http\r\n\r\n".into(), "400"),
        (
            "gzip, chunked",
            post("Transfer-Encoding: gzip, chunked\r\n") + "0\r\n\r\n",
            "501",
        ),
        (
            "10 000 fields",
            format!("GET /healthz HTTP/1.1\r\n{many}\r\n"),
            "431",
        ),
        (
            "1 MB field",
            format!(
                "GET /healthz HTTP/1.1\r\nx: {}\r\n\r\n",
                "a".repeat(1 << 20)
            ),
            "431",
        ),
        (
            "1 MB URL",
            format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(1 << 20)),
            "431",
        ),
    ];
    for (what, req, status) in cases {
        let r = http(addr, &req);
        assert!(
            r.starts_with(&format!("HTTP/1.1 {status}")),
            "{what}: {r:.200}"
        );
        let lower = r.to_ascii_lowercase();
        assert!(lower.contains("connection: close"), "{what}: {r:.300}");
        assert!(
            lower.contains("content-type: application/json"),
            "{what}: {r:.300}"
        );
        let body = r.split("\r\n\r\n").nth(1).unwrap_or("");
        let v: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{what}: body {body:?} is not JSON: {e}"));
        assert!(
            v["error"].is_string() && v["message"].is_string(),
            "{what}: {v}"
        );
    }
    // A good request pipelined ahead of a refused one: its 200 first, then the 400, then close.
    let json = "{\"data\": \"hi\"}";
    let good = post(&format!("Content-Length: {}\r\n", json.len())) + json;
    let bad = post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + "0\r\n\r\n";
    let r = http(addr, &format!("{good}{good}{bad}{good}"));
    let statuses: Vec<&str> = r
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &r[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, ["200", "200", "400"], "{r}");
}
