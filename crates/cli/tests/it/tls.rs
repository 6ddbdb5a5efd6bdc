//! TLS on the TCP and HTTP listeners (`--tls-cert`, `--tls-key`), from outside: the real load
//! generator over TLS is answered in full on both; a plaintext client gets nothing served; a
//! bad key file is a clear start-up error. (The test pair in tests/data/tls is public: tests
//! only.)

use crate::common;
use cohort_load::{LoadConfig, Mode, Target};
use cohort_services::micro::load::EchoWorkload;
use common::*;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

fn data(name: &str) -> String {
    format!("{}/tests/data/tls/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn tcp_and_http_speak_tls_and_plaintext_is_not_served() {
    let (cert, key) = (data("cert.pem"), data("key.pem"));
    let s = Served::start(&["--service", "echo", "--tls-cert", &cert, "--tls-key", &key]);
    let tls = cohort_load::tls_client(std::path::Path::new(&data("ca.pem"))).unwrap();
    for target in [Target::Tcp(s.tcp.unwrap()), Target::Http(s.http.unwrap())] {
        let cfg = LoadConfig {
            tls: Some(tls.clone()),
            ..LoadConfig::new(
                target,
                Mode::Closed { concurrency: 4 },
                Duration::from_millis(400),
                2,
            )
        };
        let r = cohort_load::run(&cfg, Arc::new(EchoWorkload { payload_bytes: 64 })).unwrap();
        assert_all_answered(&r);
        assert!(r.ok > 50 && r.error_total() == 0, "{target}: {r:#?}");
    }
    // Plain HTTP to the TLS port: no HTTP answer (the handshake fails, the connection closes).
    let mut c = std::net::TcpStream::connect(s.http.unwrap()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    assert!(
        !out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // UDP is not TLS: still served.
    let r = load(
        Target::Udp(s.udp.unwrap()),
        Mode::Closed { concurrency: 1 },
        0.2,
        Arc::new(EchoWorkload { payload_bytes: 8 }),
    );
    assert!(r.ok > 0 && r.error_total() == 0);
}

#[test]
fn a_key_that_is_not_the_certificates_is_a_clear_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["serve", "--service", "echo", "--tcp", "127.0.0.1:0"])
        .args([
            "--tls-cert",
            &data("cert.pem"),
            "--tls-key",
            &data("cert.pem"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--tls-key") && !err.contains("panicked"),
        "{err}"
    );
}

/// Over TLS too, a request head that does not arrive within `--read-timeout-ms` gets 408
/// (written through the TLS session, after hyper gives up on the head) before the close.
#[test]
fn a_stalled_request_head_over_tls_gets_408() {
    use std::io::{Read, Write};
    let (cert, key) = (data("cert.pem"), data("key.pem"));
    let s = Served::start(&[
        "--service",
        "echo",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--read-timeout-ms",
        "300",
    ]);
    let cfg = cohort_load::tls_client(std::path::Path::new(&data("ca.pem"))).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(cfg, name).unwrap();
    let tcp = std::net::TcpStream::connect(s.http.unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(out.contains("REQUEST_TIMEOUT"), "{out}");
}
