//! The lenet service served by the real binary: digits over UDP and HTTP (raw bytes and JSON)
//! answered as the CPU forward pass answers them, bad images refused with BAD_REQUEST, the
//! real load generator driving it with every answer checked and the accuracy reported
//! (`cohort-lab model eval lenet` and training: lab/cli/tests/it/lenet_model.rs).

use crate::common;
use cohort_services::lenet::{self, mnist, model};
use common::{udp_answer, Served};
use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

fn testdata() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../services/lenet/src/testdata")
}

fn send(s: &UdpSocket, id: u64, payload: &[u8]) {
    let mut f = Vec::new();
    cohort_proto::encode_frame(
        cohort_proto::Header::request(lenet::ID, id, payload.len()),
        payload,
        &mut f,
    );
    s.send(&f).unwrap();
}

fn http(addr: std::net::SocketAddr, body: &[u8]) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        c,
        "POST /v1/lenet HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    c.write_all(body).unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (
        String::from_utf8_lossy(&out[..at]).into_owned(),
        out[at..].to_vec(),
    )
}

#[test]
fn digits_are_recognised_over_udp_and_http_and_bad_images_refused() {
    let s = Served::start(&["--service", "lenet"]);
    let digits = mnist::read_split(&testdata(), mnist::Split::Test).unwrap();
    let w = model::Weights::load(None).unwrap();
    let mut scratch = model::Scratch::default();
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.connect(s.udp.unwrap()).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for i in 0..20 {
        send(&u, i as u64, digits.image(i));
        let mut b = vec![0u8; 65_536];
        let n = u.recv(&mut b).expect("an answer");
        let f = cohort_proto::Frame::decode_datagram(&b[..n], cohort_proto::MAX_PAYLOAD).unwrap();
        assert_eq!(f.header.kind, cohort_proto::Kind::Response, "{f:?}");
        let (digit, logits) = lenet::decode_answer(f.payload).unwrap();
        let want = model::forward(&w, digits.image(i), &mut scratch);
        assert_eq!((digit, logits), (model::argmax(&want), want), "image {i}");
    }
    // One byte short: BAD_REQUEST (the answer fits: an error frame is shorter than 783 bytes).
    send(&u, 99, &digits.image(0)[..783]);
    assert_eq!(
        udp_answer(&u),
        (
            99,
            cohort_proto::Kind::Error,
            Some(cohort_proto::ErrorCode::BadRequest)
        )
    );
    // HTTP: the raw 784 bytes, and the same image as JSON, answer alike.
    let img = digits.image(3);
    let (head, raw) = http(s.http.unwrap(), img);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let json = serde_json::to_vec(&serde_json::json!({ "image": img })).unwrap();
    let (head, from_json) = http(s.http.unwrap(), &json);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(raw, from_json);
    let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(v["digit"], digits.labels[3]);
    assert_eq!(v["scores"].as_array().unwrap().len(), 10);
    let (head, body) = http(s.http.unwrap(), b"[1,2,3]");
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("784"), "{head}");
}

/// The real load generator over UDP and HTTP: every answer checked against the CPU forward
/// pass of the served model, and the accuracy on MNIST's labels reported.
#[test]
fn the_load_generator_checks_every_answer_and_reports_accuracy() {
    let s = Served::start(&["--service", "lenet", "--workers", "2"]);
    for target in [
        format!("udp://{}", s.udp.unwrap()),
        format!("http://{}", s.http.unwrap()),
    ] {
        let r = common::cohort_load_report(
            &target,
            "lenet",
            &["--rate", "300", "--duration", "1", "--warmup", "0.2"],
        );
        assert!(r["ok"].as_u64().unwrap() > 100, "{target}: {r}");
        assert_eq!(r["ok"], r["sent"], "{target}: {r}");
        let acc = r["accuracy"].as_f64().expect("accuracy reported");
        assert!(acc > 0.97, "{target}: accuracy {acc}");
    }
}

/// A weights file that is not one is refused when the server starts, saying so.
#[test]
fn a_bad_model_file_is_refused_at_start() {
    let bad = std::env::temp_dir().join(format!("cohort-lenet-bad-{}", std::process::id()));
    std::fs::write(&bad, b"not weights").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args([
            "serve",
            "--udp",
            "127.0.0.1:0",
            "--service",
            "lenet",
            "--check-config",
        ])
        .arg("--lenet-model")
        .arg(&bad)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&bad);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not a safetensors"),
        "{err}"
    );
}
