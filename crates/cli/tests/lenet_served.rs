//! The lenet service served by the real binary: digits over UDP and HTTP (raw bytes and JSON)
//! answered as the CPU forward pass answers them, bad images refused with BAD_REQUEST, the
//! real load generator driving it with every answer checked and the accuracy reported, and
//! `cohort model eval` on the repository's test digits.

mod common;
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

#[test]
fn model_eval_reports_the_shipped_models_accuracy_and_bad_files_are_refused() {
    let o = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["model", "eval", "lenet", "--data"])
        .arg(testdata())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("on 1000 test images"), "{text}");
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
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not a safetensors"),
        "{err}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["model", "train", "knn", "--data", "x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains(r#"services with "train": lenet"#),
        "{err}"
    );
    // An unknown tool names every tool there is.
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["model", "frob", "lenet"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("train lenet") && err.contains("centaur knn"),
        "{err}"
    );
    // `model --help` lists the tools; `--help` after TOOL SERVICE is the tool's own.
    // A tool without its service is an error (with the list), not a help request.
    let o = run(&["model", "train"]);
    assert!(!o.status.success(), "{o:?}");
    let o = run(&["model", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("load-db facever"),
        "{out}"
    );
    let o = run(&["model", "train", "lenet", "--help"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("cohort model train lenet") && out.contains("--data"),
        "{out}"
    );
    std::fs::remove_file(&bad).unwrap();
}

/// MNIST-format files of `n` random images (and `n / 6` test images): enough to run the
/// trainer, not to learn anything.
fn tiny_mnist(dir: &std::path::Path, n: u32) {
    let mut seed = 12345u64;
    let mut byte = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 56) as u8
    };
    for (stem, count) in [("train", n), ("t10k", n / 6)] {
        let mut images = [2051u32, count, 28, 28]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect::<Vec<u8>>();
        images.extend((0..count * 784).map(|_| byte()));
        std::fs::write(dir.join(format!("{stem}-images.idx3-ubyte")), images).unwrap();
        let mut labels = [2049u32, count]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect::<Vec<u8>>();
        labels.extend((0..count).map(|_| byte() % 10));
        std::fs::write(dir.join(format!("{stem}-labels.idx1-ubyte")), labels).unwrap();
    }
}

#[test]
fn training_with_its_output_redirected_says_how_far_it_is() {
    let dir = std::env::temp_dir().join(format!("cohort-train-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    tiny_mnist(&dir, 640);
    let out = dir.join("w.safetensors");
    let o = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["model", "train", "lenet", "--epochs", "1", "--data"])
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // 640 images in batches of 64: a line at every tenth of the epoch.
    for b in [1, 5, 10] {
        assert!(
            err.contains(&format!("epoch 1/1: {b} of 10 batches")),
            "{err}"
        );
    }
    assert!(out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
