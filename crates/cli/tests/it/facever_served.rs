//! The facever service served by the real binary against a real memcached: the database
//! filled by `cohort facever load-db` (the product's command), verdicts over UDP and HTTP as the CPU twin
//! computes them, NOT_FOUND for a person without a reference, BAD_REQUEST for a bad image,
//! UNAVAILABLE while memcached is gone and answers again once it is back, and the real load
//! generator checking every answer.

use crate::common;
use cohort_proto::{ErrorCode, Kind};
use cohort_services::facever::{self, lbp, orl, Verdict};
use cohort_services::memcached::spawn_for_test;
use common::{udp_answer, Served};
use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

fn send(s: &UdpSocket, id: u64, payload: &[u8]) {
    let mut f = Vec::new();
    cohort_proto::encode_frame(
        cohort_proto::Header::request(facever::ID, id, payload.len()),
        payload,
        &mut f,
    );
    s.send(&f).unwrap();
}

fn verdict(s: &UdpSocket) -> Verdict {
    let mut b = vec![0u8; 65_536];
    let n = s.recv(&mut b).expect("an answer");
    let f = cohort_proto::Frame::decode_datagram(&b[..n], cohort_proto::MAX_PAYLOAD).unwrap();
    assert_eq!(f.header.kind, Kind::Response, "{f:?}");
    Verdict::decode(f.payload).expect("a verdict")
}

fn load_db(addr: &str) {
    let o = Command::new(common::cohort_bin())
        .args(["facever", "load-db", "--memcached", addr])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("stored 10 references"),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn http(addr: std::net::SocketAddr, body: &serde_json::Value) -> (String, serde_json::Value) {
    use std::io::{Read, Write};
    let body = serde_json::to_vec(body).unwrap();
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        c,
        "POST /v1/facever HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    c.write_all(&body).unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (
        String::from_utf8_lossy(&out[..at]).into_owned(),
        serde_json::from_slice(&out[at..]).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn faces_are_verified_against_memcached_and_its_failures_are_per_request_errors() {
    let Some(mut mc) = spawn_for_test(16) else {
        return;
    };
    // No database yet: the server refuses to start, naming the tool.
    let o = Command::new(common::cohort_bin())
        .args(["serve", "--udp", "127.0.0.1:0", "--service", "facever"])
        .args(["--facever-memcached", &mc.addr, "--check-config"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("load-db"), "{err}");
    load_db(&mc.addr);
    let s = Served::start(&[
        "--service",
        "facever",
        "--facever-memcached",
        &mc.addr,
        "--workers",
        "2",
    ]);
    let faces = orl::embedded();
    let table = lbp::uniform_table();
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.connect(s.udp.unwrap()).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut payload = Vec::new();
    for (i, (person, claimed)) in [(1, 1), (2, 2), (1, 3), (4, 9)].into_iter().enumerate() {
        payload.clear();
        facever::encode_request(claimed, faces.image(person, 7), &mut payload);
        send(&u, i as u64, &payload);
        let v = verdict(&u);
        let want = lbp::chi_square(
            &lbp::histogram(faces.image(person, 7), &table),
            &faces.reference(claimed, &table),
        );
        assert_eq!(v.distance, want, "pair ({person}, {claimed})");
        assert_eq!(v.same, want <= v.threshold);
    }
    // A person with no reference, and an image one byte short.
    payload.clear();
    facever::encode_request(99, faces.image(1, 7), &mut payload);
    send(&u, 50, &payload);
    assert_eq!(udp_answer(&u), (50, Kind::Error, Some(ErrorCode::NotFound)));
    send(&u, 51, &payload[..payload.len() - 1]);
    assert_eq!(
        udp_answer(&u),
        (51, Kind::Error, Some(ErrorCode::BadRequest))
    );
    // HTTP: JSON in and out; the unknown person is a 404.
    let img = faces.image(3, 6);
    let (head, v) = http(
        s.http.unwrap(),
        &serde_json::json!({"person": 3, "image": img}),
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        v["match"].is_boolean() && v["distance"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    let (head, _) = http(
        s.http.unwrap(),
        &serde_json::json!({"person": 99, "image": img}),
    );
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // The real load generator: every answer checked, the verdicts mostly right.
    for target in [
        format!("udp://{}", s.udp.unwrap()),
        format!("http://{}", s.http.unwrap()),
    ] {
        let r = common::cohort_load_report(
            &target,
            "facever",
            &["--rate", "300", "--duration", "1", "--warmup", "0.2"],
        );
        assert!(r["ok"].as_u64().unwrap() > 100, "{target}: {r}");
        assert_eq!(r["ok"], r["sent"], "{target}: {r}");
        let acc = r["accuracy"].as_f64().expect("accuracy reported");
        assert!(acc > 0.85, "{target}: accuracy {acc}");
    }
    // memcached gone: UNAVAILABLE per request, the server still up; back (same port,
    // refilled): answered again.
    let addr = mc.addr.clone();
    mc.kill();
    payload.clear();
    facever::encode_request(1, faces.image(1, 7), &mut payload);
    send(&u, 60, &payload);
    assert_eq!(
        udp_answer(&u),
        (60, Kind::Error, Some(ErrorCode::Unavailable))
    );
    let port = addr.rsplit_once(':').unwrap().1;
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let mut again = Command::new("memcached")
        .args([
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-m",
            "16",
            "-p",
            port,
            "-u",
            &user,
        ])
        .spawn()
        .unwrap();
    while std::net::TcpStream::connect(&addr).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    load_db(&addr);
    let mut answered = false;
    for id in 61..81u64 {
        send(&u, id, &payload);
        let mut b = vec![0u8; 65_536];
        let n = u.recv(&mut b).expect("an answer");
        let f = cohort_proto::Frame::decode_datagram(&b[..n], cohort_proto::MAX_PAYLOAD).unwrap();
        if f.header.kind == Kind::Response {
            answered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = again.kill();
    let _ = again.wait();
    assert!(answered, "answered again once memcached was back");
}
