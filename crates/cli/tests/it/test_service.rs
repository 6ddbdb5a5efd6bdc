//! The test service `reverse` (crates/services/reverse: its folder and one catalog line,
//! served only by the tests' build) served by the real binary: its flag and its settings reach
//! it, it answers over UDP and HTTP, bad input gets its errors, and the configuration check
//! prints its resolved settings. What this proves is docs/adding-a-service.md: a service added
//! that way is served like any other.

use crate::common;
use common::{http_post, udp_answer, Served};
use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

const REVERSE: u16 = cohort_services::reverse::ID;

fn ask(s: &UdpSocket, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    cohort_proto::encode_frame(
        cohort_proto::Header::request(REVERSE, id, payload.len()),
        payload,
        &mut f,
    );
    s.send(&f).unwrap();
    let mut b = vec![0u8; 65_536];
    let n = s.recv(&mut b).expect("an answer");
    let frame = cohort_proto::Frame::decode_datagram(&b[..n], cohort_proto::MAX_PAYLOAD).unwrap();
    assert_eq!(frame.header.request_id, id);
    assert_eq!(frame.header.kind, cohort_proto::Kind::Response, "{frame:?}");
    frame.payload.to_vec()
}

#[test]
fn the_test_service_is_served_with_its_own_flag_and_errors() {
    let s = Served::start(&["--service", "reverse,echo", "--reverse-max-len", "8"]);
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.connect(s.udp.unwrap()).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(ask(&u, 1, b"abc"), b"cba");
    assert_eq!(ask(&u, 2, b"12345678"), b"87654321");
    // Over its max_len (8, from its flag): TOO_LARGE. (A UDP answer is never larger than its
    // request, so the request is long enough for the error to come back whole.)
    let long = [b'x'; 40];
    let mut f = Vec::new();
    cohort_proto::encode_frame(
        cohort_proto::Header::request(REVERSE, 3, long.len()),
        &long,
        &mut f,
    );
    u.send(&f).unwrap();
    assert_eq!(
        udp_answer(&u),
        (
            3,
            cohort_proto::Kind::Error,
            Some(cohort_proto::ErrorCode::TooLarge)
        )
    );
    // Empty: BAD_REQUEST (over HTTP: 400 with the code).
    let r = http_post(s.http.unwrap(), "/v1/reverse", r#"{"data":""}"#);
    assert!(
        r.starts_with("HTTP/1.1 400") && r.contains("BAD_REQUEST"),
        "{r}"
    );
    let r = http_post(s.http.unwrap(), "/v1/reverse", r#"{"data":"hello"}"#);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.ends_with(r#"{"data":"olleh"}"#), "{r}");
}

fn check_config(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["serve", "--udp", "127.0.0.1:0", "--check-config"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn its_settings_are_typed_checked_and_printed() {
    let out = check_config(&["--service", "reverse", "--service-opt", "reverse.max_len=5"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("[services.reverse]\n"), "{text}");
    assert!(text.contains("max_len = 5\n"), "{text}");
    let out = check_config(&[
        "--service",
        "reverse",
        "--service-opt",
        "reverse.colour=red",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("colour") && err.contains("max_len"), "{err}");
    let out = check_config(&["--service", "reverse", "--reverse-max-len", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_len must be at least 1"), "{err}");
    // CPU only: a GPU engine refuses it by name.
    let out = check_config(&["--service", "reverse:gpu-cohort"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no GPU backend"), "{err}");
}

/// The real load generator drives it through its catalog entry's workload (its folder's
/// `load.rs`), over UDP and HTTP, every answer checked.
#[test]
fn the_load_generator_drives_it_through_its_workload() {
    let s = Served::start(&["--service", "reverse", "--reverse-max-len", "32"]);
    for target in [
        format!("udp://{}", s.udp.unwrap()),
        format!("http://{}", s.http.unwrap()),
    ] {
        let r = common::cohort_load_report(
            &target,
            "reverse",
            &[
                "--payload-bytes",
                "24",
                "--rate",
                "500",
                "--duration",
                "0.5",
                "--warmup",
                "0.1",
            ],
        );
        assert!(r["ok"].as_u64().unwrap() > 100, "{target}: {r}");
        assert_eq!(r["ok"], r["sent"], "{target}: {r}");
    }
}
