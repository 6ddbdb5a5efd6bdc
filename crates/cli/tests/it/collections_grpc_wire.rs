//! Cohort's gRPC service for collections on the wire, against the real `cohort serve
//! --data-dir DIR --grpc ADDR`: malformed and lying messages sent as raw HTTP/2 (the `h2`
//! crate, so that the bytes can be anything) are INVALID_ARGUMENT (`BAD_REQUEST: ...`),
//! never a panic, and the server serves on; an expired `grpc-timeout` is not run; keys are
//! checked; without `--data-dir` the service is UNIMPLEMENTED. (The operations and their
//! errors through tonic's client: collections_grpc.rs.)

use crate::common;

use bytes::Bytes;
use cohort_collections_grpc as pb;
use common::Served;
use pb::collections_client::CollectionsClient;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tonic::transport::Channel;
use tonic::Code;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cohort-cgrpcw-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn serve(dir: &Path, extra: &[&str]) -> Served {
    let data = dir.to_str().unwrap();
    let mut args = vec![
        "--service",
        "echo",
        "--data-dir",
        data,
        "--grpc",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Served::start(&args)
}

async fn connect(addr: SocketAddr) -> CollectionsClient<Channel> {
    let url = format!("http://{addr}");
    let ch = tonic::transport::Endpoint::from_shared(url).unwrap();
    CollectionsClient::new(ch.connect().await.expect("connect"))
}

async fn count(c: &mut CollectionsClient<Channel>, name: &str) -> u64 {
    let r = pb::CountRequest {
        collection: name.into(),
    };
    c.count(r).await.expect("count").into_inner().count
}

/// A collection of dimension 4 with an integer attribute `n`.
fn create(name: &str) -> pb::CreateCollectionRequest {
    pb::CreateCollectionRequest {
        name: name.into(),
        dim: 4,
        attributes: HashMap::from([("n".to_string(), pb::AttributeType::Integer as i32)]),
        ..Default::default()
    }
}

fn point(id: u64) -> pb::Point {
    let n = pb::AttributeValue {
        kind: Some(pb::attribute_value::Kind::IntValue(id as i64)),
    };
    pb::Point {
        id,
        vector: vec![id as f32, 1.0, 2.0, 3.0],
        attributes: HashMap::from([("n".to_string(), n)]),
    }
}

/// One raw gRPC call over h2: its grpc-status and grpc-message (from the trailers, or the
/// headers of a trailers-only answer).
async fn raw_call(
    addr: SocketAddr,
    method: &str,
    body: &[u8],
    timeout: Option<&str>,
) -> (i32, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{}{method}", pb::PATH_PREFIX))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = timeout {
        req = req.header("grpc-timeout", t);
    }
    let (answer, mut send) = client.send_request(req.body(()).unwrap(), false).unwrap();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(body);
    send.send_data(Bytes::from(framed), true).unwrap();
    let answer = answer.await.unwrap();
    let read = |h: &http::HeaderMap| {
        let code: i32 = h.get("grpc-status")?.to_str().ok()?.parse().ok()?;
        let msg = h
            .get("grpc-message")
            .map_or(String::new(), |m| percent_decode(m.to_str().unwrap_or("")));
        Some((code, msg))
    };
    if let Some(r) = read(answer.headers()) {
        return r;
    }
    let mut body = answer.into_body();
    while let Some(d) = body.data().await {
        let _ = d.unwrap();
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    read(&trailers).expect("a grpc-status")
}

/// grpc-message is percent-encoded.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(x) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn malformed_and_lying_messages_are_invalid_argument() {
    let dir = scratch("malformed");
    let rt = runtime();
    let s = serve(&dir, &[]);
    let addr = s.grpc.unwrap();
    rt.block_on(async {
        let mut c = connect(addr).await;
        c.create_collection(create("m")).await.unwrap();
        let ok = prost::Message::encode_to_vec(&pb::UpsertRequest {
            collection: "m".into(),
            points: vec![point(1)],
        });
        let invalid = Code::InvalidArgument as i32;
        let every = &["Upsert", "Search", "Get", "Delete", "CreateCollection"][..];
        let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
            // A length prefix past the message's end.
            (
                "a field longer than the message",
                vec![0x0a, 0x7f, b'm'],
                every,
            ),
            // A truncated varint.
            ("a cut varint", vec![0x10, 0xff], every),
            // Wire type 7 does not exist.
            ("an unknown wire type", vec![0x0f, 0x00], every),
            // The collection name as invalid UTF-8.
            ("a string not UTF-8", vec![0x0a, 0x02, 0xff, 0xfe], every),
            // A point whose packed vector is 2 bytes: not a whole float.
            (
                "a packed float cut",
                vec![0x12, 0x04, 0x12, 0x02, 0x00, 0x00],
                &["Upsert"],
            ),
            // A valid message cut in the middle.
            ("a message cut short", ok[..ok.len() - 3].to_vec(), every),
        ];
        for (what, body, methods) in &cases {
            for &method in methods.iter() {
                let (code, msg) = raw_call(addr, method, body, None).await;
                assert_eq!(code, invalid, "{what} to {method}: {msg}");
                assert!(
                    msg.starts_with("BAD_REQUEST: "),
                    "{what} to {method}: {msg}"
                );
            }
        }
        // A filter nested past prost's recursion limit is refused, never a stack overflow.
        let mut nested = Vec::new();
        for _ in 0..200 {
            // Filter.not (field 6) wrapping what follows.
            let mut w = vec![0x32];
            prost::encoding::encode_varint(nested.len() as u64, &mut w);
            w.extend_from_slice(&nested);
            nested = w;
        }
        let mut search = vec![0x0a, 0x01, b'm', 0x2a];
        prost::encoding::encode_varint(nested.len() as u64, &mut search);
        search.extend_from_slice(&nested);
        let (code, msg) = raw_call(addr, "Search", &search, None).await;
        assert_eq!(code, invalid, "{msg}");
        // An unknown method of the service: UNIMPLEMENTED.
        let (code, _) = raw_call(addr, "Explode", &ok, None).await;
        assert_eq!(code, Code::Unimplemented as i32);
        // A call whose grpc-timeout passes before it runs is not run: OVERLOADED (deadline,
        // on arrival) or TIMEOUT (waiting for a thread), and the point is not written.
        let (code, msg) = raw_call(addr, "Upsert", &ok, Some("1n")).await;
        assert!(
            (code == Code::ResourceExhausted as i32 && msg.starts_with("OVERLOADED: deadline"))
                || (code == Code::DeadlineExceeded as i32 && msg.starts_with("TIMEOUT: ")),
            "{code} {msg}"
        );
        assert_eq!(count(&mut c, "m").await, 0);
        // The server is still serving.
        let (code, msg) = raw_call(addr, "Upsert", &ok, None).await;
        assert_eq!(code, 0, "{msg}");
        assert_eq!(count(&mut c, "m").await, 1);
    });
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn keys_guard_the_service_and_without_data_dir_it_is_unimplemented() {
    let dir = scratch("keys");
    std::fs::write(
        dir.join("keys.toml"),
        "[[key]]\nid = \"ci\"\nsecret = \"0123456789abcdef\"\n",
    )
    .unwrap();
    let keys = dir.join("keys.toml");
    let rt = runtime();
    let s = serve(&dir.join("data"), &["--auth-keys", keys.to_str().unwrap()]);
    let addr = s.grpc.unwrap();
    rt.block_on(async {
        let mut c = connect(addr).await;
        let list = c.list_collections(pb::ListCollectionsRequest {}).await;
        let st = list.expect_err("no key");
        assert_eq!(st.code(), Code::Unauthenticated, "{st:?}");
        let mut r = tonic::Request::new(pb::ListCollectionsRequest {});
        r.metadata_mut()
            .insert("authorization", "Bearer 0123456789abcdef".parse().unwrap());
        assert!(c
            .list_collections(r)
            .await
            .unwrap()
            .into_inner()
            .collections
            .is_empty());
    });
    drop(s);
    let s = Served::start(&["--service", "echo", "--grpc", "127.0.0.1:0"]);
    let addr = s.grpc.unwrap();
    rt.block_on(async {
        let mut c = connect(addr).await;
        let st = c
            .list_collections(pb::ListCollectionsRequest {})
            .await
            .expect_err("no collections");
        assert_eq!(st.code(), Code::Unimplemented, "{st:?}");
        assert!(st.message().contains("--data-dir"), "{st:?}");
    });
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}
