//! API keys from outside (`--auth-keys`): without a valid key nothing is served, over UDP, TCP
//! or HTTP; a key reaches only its services; a captured signed datagram is refused when sent
//! again; the real load generator signs with `--key` and is served; SIGHUP swaps the keys
//! without a restart; `/metrics` moves to the admin listener; `/openapi.json` and a model's
//! metadata and config need a key too.

use crate::common;
use cohort_load::{ClientKey, LoadConfig, Mode, Target};
use cohort_proto::{
    encode_frame, encode_signed, key_id_bytes, ErrorCode, ErrorPayload, Frame, Header, Kind,
    MAX_PAYLOAD,
};
use cohort_services::micro::load::EchoWorkload;
use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const KEYS: &str = "[[key]]\nid = \"alice\"\nsecret = \"alice-secret-0123\"\nservices = [\"echo\"]\n\n[[key]]\nid = \"bob\"\nsecret = \"bob-secret-456789\"\n";

fn echo_request(id: u64) -> (Header, Vec<u8>) {
    (
        Header::request(cohort_services::echo::ID, id, 5),
        b"hello".to_vec(),
    )
}

fn signed(service: u16, id: u64, key: &str, secret: &str) -> Vec<u8> {
    let h = Header::request(service, id, 0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut f = Vec::new();
    let k = key_id_bytes(key).unwrap();
    encode_signed(h, b"hello", &k, secret.as_bytes(), now, id, &mut f);
    f
}

fn udp_ask(to: SocketAddr, frame: &[u8]) -> (Kind, Option<ErrorPayload>) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.send_to(frame, to).unwrap();
    let mut b = [0u8; 2048];
    let n = s.recv(&mut b).expect("an answer");
    let f = Frame::decode_datagram(&b[..n], MAX_PAYLOAD).unwrap();
    let e = (f.header.kind == Kind::Error).then(|| ErrorPayload::decode(f.payload).unwrap());
    (f.header.kind, e)
}

fn http(addr: SocketAddr, path: &str, bearer: Option<&str>) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = r#"{"data": "hi"}"#;
    let auth = bearer.map_or(String::new(), |b| format!("Authorization: Bearer {b}\r\n"));
    let method = if path.starts_with("/v1/") {
        "POST"
    } else {
        "GET"
    };
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

#[test]
fn without_a_valid_key_nothing_is_served_and_a_key_reaches_only_its_services() {
    let dir = std::env::temp_dir().join(format!("cohort-auth-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    std::fs::write(&keys, KEYS).unwrap();
    let s = Served::start(&[
        "--service",
        "echo,spin",
        "--auth-keys",
        keys.to_str().unwrap(),
        "--admin",
        "127.0.0.1:0",
    ]);
    let admin = s.admin.expect("the admin listener's address");
    let (udp, tcp, web) = (s.udp.unwrap(), s.tcp.unwrap(), s.http.unwrap());
    let echo = cohort_services::echo::ID;
    let spin = cohort_services::spin::ID;
    // UDP: unsigned, unknown key, wrong secret -> UNAUTHORIZED; alice on spin -> FORBIDDEN.
    let (h, p) = echo_request(1);
    let mut plain = Vec::new();
    encode_frame(h, &p, &mut plain);
    for (what, frame, code) in [
        ("unsigned", plain.clone(), ErrorCode::Unauthorized),
        (
            "unknown key",
            signed(echo, 2, "mallory", "mallory-secret-01"),
            ErrorCode::Unauthorized,
        ),
        (
            "wrong secret",
            signed(echo, 3, "alice", "not-alices-secret"),
            ErrorCode::Unauthorized,
        ),
        (
            "other service",
            signed(spin, 4, "alice", "alice-secret-0123"),
            ErrorCode::Forbidden,
        ),
    ] {
        let (kind, e) = udp_ask(udp, &frame);
        assert_eq!(kind, Kind::Error, "{what}");
        assert_eq!(e.unwrap().code, code, "{what}");
    }
    // A good frame is served once; the same bytes again are a replay.
    let good = signed(echo, 5, "alice", "alice-secret-0123");
    assert_eq!(udp_ask(udp, &good).0, Kind::Response);
    let (kind, e) = udp_ask(udp, &good);
    assert_eq!(kind, Kind::Error);
    assert!(e.unwrap().message.contains("replayed"));
    // TCP: unsigned refused with its id, signed served.
    let mut c = TcpStream::connect(tcp).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(&plain).unwrap();
    c.write_all(&signed(echo, 6, "bob", "bob-secret-456789"))
        .unwrap();
    let got: Vec<(u64, Kind)> = read_answers(&mut c, 2)
        .into_iter()
        .map(|(id, kind, _)| (id, kind))
        .collect();
    assert!(
        got.contains(&(1, Kind::Error)) && got.contains(&(6, Kind::Response)),
        "{got:?}"
    );
    // HTTP: no key 401 (WWW-Authenticate), alice on spin 403, alice on echo 200.
    let none = http(web, "/v1/echo", None);
    assert!(none.starts_with("HTTP/1.1 401"), "{none}");
    assert!(
        none.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{none}"
    );
    assert!(http(web, "/v1/spin", Some("alice-secret-0123")).starts_with("HTTP/1.1 403"));
    assert!(http(web, "/v1/echo", Some("alice-secret-0123")).starts_with("HTTP/1.1 200"));
    // What the server serves and how (the OpenAPI document, a model's metadata and config)
    // needs a key too; readiness is a probe and needs none.
    for path in ["/openapi.json", "/v2/models/echo", "/v2/models/echo/config"] {
        let none = http(web, path, None);
        assert!(none.starts_with("HTTP/1.1 401"), "{path}: {none}");
        let bob = http(web, path, Some("bob-secret-456789"));
        assert!(bob.starts_with("HTTP/1.1 200"), "{path}: {bob}");
    }
    let alice = http(web, "/v2/models/echo", Some("alice-secret-0123"));
    assert!(alice.starts_with("HTTP/1.1 200"), "{alice}");
    let ready = http(web, "/v2/models/echo/ready", None);
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    // /metrics is on the admin listener only.
    assert!(http(web, "/metrics", Some("bob-secret-456789")).starts_with("HTTP/1.1 404"));
    let m = http_get(admin, "/metrics");
    assert!(m.contains("outcome=\"unauthorized\""), "{m}");
    let on_admin = http_get(admin, "/healthz");
    assert!(on_admin.contains("200 OK"), "{on_admin}");
    // The same answer on the HTTP port and the admin listener.
    let body = |r: &str| r.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    let on_web = http_get(web, "/healthz");
    assert_eq!(body(&on_web), body(&on_admin), "{on_web}");
    assert_eq!(body(&on_admin), r#"{"status":"ok"}"#);
    // The load generator signs with --key: every answer OK over UDP and TCP.
    for target in [Target::Udp(udp), Target::Tcp(tcp)] {
        let cfg = LoadConfig {
            key: Some("bob:bob-secret-456789".parse::<ClientKey>().unwrap()),
            ..LoadConfig::new(
                target,
                Mode::Closed { concurrency: 4 },
                Duration::from_millis(400),
                2,
            )
        };
        let r = cohort_load::run(&cfg, Arc::new(EchoWorkload { payload_bytes: 32 })).unwrap();
        assert_all_answered(&r);
        assert!(r.ok > 100 && r.error_total() == 0, "{r:#?}");
    }
    // SIGHUP: carol replaces alice and bob without a restart.
    std::fs::write(
        &keys,
        "[[key]]\nid = \"carol\"\nsecret = \"carol-secret-0123\"\n",
    )
    .unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(http(web, "/v1/echo", Some("carol-secret-0123")).starts_with("HTTP/1.1 200"));
    assert!(http(web, "/v1/echo", Some("alice-secret-0123")).starts_with("HTTP/1.1 401"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// With keys on, quotas are per key: two keys from one address each get their own.
#[test]
fn with_keys_the_quota_is_per_key_not_per_address() {
    let dir = std::env::temp_dir().join(format!("cohort-auth-q-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.toml");
    std::fs::write(
        &keys,
        "[[key]]\nid = \"k1\"\nsecret = \"k1-secret-0123456\"\n[[key]]\nid = \"k2\"\nsecret = \"k2-secret-0123456\"\n",
    )
    .unwrap();
    let s = Served::start(&[
        "--service",
        "spin",
        "--workers",
        "2",
        "--client-max-inflight",
        "1",
        "--auth-keys",
        keys.to_str().unwrap(),
    ]);
    let spin = |id: u64, us: u32, key: &str, secret: &str| {
        let p = cohort_services::spin::encode(us, b"");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let mut f = Vec::new();
        let h = Header::request(cohort_services::spin::ID, id, 0);
        encode_signed(
            h,
            &p,
            &key_id_bytes(key).unwrap(),
            secret.as_bytes(),
            now,
            id,
            &mut f,
        );
        f
    };
    let mut c = TcpStream::connect(s.tcp.unwrap()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for id in 1..=3 {
        c.write_all(&spin(id, 100_000, "k1", "k1-secret-0123456"))
            .unwrap();
    }
    c.write_all(&spin(10, 10, "k2", "k2-secret-0123456"))
        .unwrap();
    let mut got: Vec<(u64, Option<ErrorCode>)> = read_answers(&mut c, 4)
        .into_iter()
        .map(|(id, _, code)| (id, code))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (1, None),
            (2, Some(ErrorCode::Overloaded)),
            (3, Some(ErrorCode::Overloaded)),
            (10, None)
        ],
        "k1 is held to one in flight, k2 from the same address is served"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
