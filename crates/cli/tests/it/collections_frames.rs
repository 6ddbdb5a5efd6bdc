//! The collections' native frames (service 7, docs/protocol.md) served by the real `cohort
//! serve --data-dir DIR`: a collection made over REST, upserted and searched over TCP frames
//! (pipelined, read-your-writes), REST seeing the same data, bad frames answered with error
//! frames and changing nothing, and UDP telling the client to use TCP.

use crate::common;
use cohort_collections::frames::{
    self, IdsFrame, PointFrame, Request, SearchFrame, UpsertFrame, SERVICE_ID,
};
use cohort_proto::{encode_frame, ErrorCode, ErrorPayload, Frame, Header, Kind, MAX_PAYLOAD};
use common::{http_get, Served};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A frame client on one TCP connection.
struct Tcp {
    s: TcpStream,
    buf: Vec<u8>,
    next: u64,
}

/// An answer: its request id and its payload, or its error frame.
type Answer = (u64, Result<Vec<u8>, ErrorPayload>);

impl Tcp {
    fn new(addr: SocketAddr) -> Tcp {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Tcp {
            s,
            buf: Vec::new(),
            next: 1,
        }
    }

    /// Sends one request; returns its id.
    fn send(&mut self, payload: &[u8]) -> u64 {
        self.send_within(payload, 0)
    }

    /// Sends one request with its deadline, `timeout_us`; returns its id.
    fn send_within(&mut self, payload: &[u8], timeout_us: u32) -> u64 {
        let id = self.next;
        self.next += 1;
        let mut out = Vec::new();
        let mut h = Header::request(SERVICE_ID, id, 0);
        h.timeout_us = timeout_us;
        encode_frame(h, payload, &mut out);
        self.s.write_all(&out).unwrap();
        id
    }

    fn answer(&mut self) -> Answer {
        let mut chunk = [0u8; 65_536];
        loop {
            if let Some((f, used)) = Frame::decode_stream(&self.buf, MAX_PAYLOAD).unwrap() {
                assert_eq!(f.header.service, SERVICE_ID);
                let a = match f.header.kind {
                    Kind::Response => Ok(f.payload.to_vec()),
                    Kind::Error => Err(ErrorPayload::decode(f.payload).unwrap()),
                    k => panic!("unexpected frame kind {k:?}"),
                };
                let id = f.header.request_id;
                self.buf.drain(..used);
                return (id, a);
            }
            let n = self.s.read(&mut chunk).expect("an answer");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn call(&mut self, payload: &[u8]) -> Result<Vec<u8>, ErrorPayload> {
        let id = self.send(payload);
        let (got, a) = self.answer();
        assert_eq!(got, id);
        a
    }
}

fn vector(id: u64) -> Vec<f32> {
    (0..8).map(|j| ((id * 31 + j * 7) % 97) as f32).collect()
}

const COLORS: [&str; 3] = ["red", "green", "blue"];

fn attrs(id: u64) -> String {
    json!({"color": COLORS[(id % 3) as usize], "price": id as f64}).to_string()
}

fn upsert(ids: impl Iterator<Item = u64>, attributes: &[String]) -> Vec<u8> {
    let points = ids
        .map(|id| PointFrame {
            id,
            vector: vector(id),
            attributes: Some(&attributes[id as usize]),
        })
        .collect();
    let mut b = Vec::new();
    UpsertFrame {
        collection: "items",
        dim: 8,
        points,
    }
    .encode(&mut b);
    b
}

fn search(queries: &[u64], k: u16, filter: Option<&str>) -> Vec<u8> {
    let mut b = Vec::new();
    SearchFrame {
        collection: "items",
        k,
        nprobe: 0,
        filter,
        dim: 8,
        vectors: queries.iter().flat_map(|&q| vector(q)).collect(),
    }
    .encode(&mut b);
    b
}

/// POST/PUT/GET over HTTP/1.1: the JSON body of the answer, with its status.
fn rest(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    let status = out[9..12].parse().unwrap();
    let body = &out[out.find("\r\n\r\n").expect("a head") + 4..];
    (status, serde_json::from_str(body).expect("a JSON body"))
}

fn count(http: SocketAddr) -> u64 {
    rest(http, "GET", "/v1/collections/items", "").1["count"]
        .as_u64()
        .unwrap()
}

/// A server with collections in a fresh data folder (`cohort-frames-TAG-PID` under the
/// temporary folder) and the collection "items" made over REST: dim 8, l2, a keyword
/// "color" and a float "price".
fn serve_items(tag: &str) -> (Served, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("cohort-frames-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = Served::start(&["--service", "echo", "--data-dir", dir.to_str().unwrap()]);
    let (st, v) = rest(
        s.http.unwrap(),
        "PUT",
        "/v1/collections/items",
        r#"{"dim":8,"metric":"l2","attributes":{"color":"keyword","price":"float"}}"#,
    );
    assert_eq!(st, 200, "{v}");
    (s, dir)
}

fn refused(a: Result<Vec<u8>, ErrorPayload>) -> ErrorPayload {
    a.expect_err("an error frame")
}

#[test]
fn collections_are_served_over_native_frames() {
    let (s, dir) = serve_items("coll");
    let (http, tcp) = (s.http.unwrap(), s.tcp.unwrap());

    let attributes: Vec<String> = (0..2000).map(attrs).collect();
    let mut c = Tcp::new(tcp);
    for start in (0..300).step_by(100) {
        let a = c.call(&upsert(start..start + 100, &attributes)).unwrap();
        assert_eq!(frames::decode_upsert_answer(&a).unwrap(), 100);
    }
    // REST sees what the frames wrote: the count, a point's vector and attributes.
    assert_eq!(count(http), 300);
    let (_, v) = rest(http, "POST", "/v1/collections/items/get", r#"{"ids":[42]}"#);
    assert_eq!(v["points"][0]["vector"], json!(vector(42)), "{v}");
    assert_eq!(v["points"][0]["attributes"]["color"], json!("red"), "{v}");

    // A filtered search of two queries over frames, and the same over REST.
    let filter = r#"{"all":[{"eq":["color","red"]},{"range":["price",{"lt":200}]}]}"#;
    let a = c.call(&search(&[42, 43], 5, Some(filter))).unwrap();
    let hits = frames::decode_search_answer(&a).unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0][0], (42, 0.0), "the point itself first");
    for &(id, d) in hits.iter().flatten() {
        assert!(
            id % 3 == 0 && id < 200 && d >= 0.0,
            "hit {id} breaks the filter"
        );
    }
    let body = json!({"vectors": [vector(42), vector(43)], "k": 5,
                      "filter": serde_json::from_str::<Value>(filter).unwrap()});
    let (st, v) = rest(
        http,
        "POST",
        "/v1/collections/items/search",
        &body.to_string(),
    );
    assert_eq!(st, 200, "{v}");
    for (q, list) in hits.iter().enumerate() {
        let rest_ids: Vec<u64> = v["results"][q]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_u64().unwrap())
            .collect();
        let frame_ids: Vec<u64> = list.iter().map(|h| h.0).collect();
        assert_eq!(frame_ids, rest_ids, "query {q}: frames and REST disagree");
    }

    // Read-your-writes: a point upserted over a frame is found by the next search, and by
    // REST; a point upserted over REST by the next frame.
    let mut far = Vec::new();
    UpsertFrame {
        collection: "items",
        dim: 8,
        points: vec![PointFrame {
            id: 5000,
            vector: vec![1000.0; 8],
            attributes: None,
        }],
    }
    .encode(&mut far);
    assert_eq!(
        frames::decode_upsert_answer(&c.call(&far).unwrap()).unwrap(),
        1
    );
    let mut q = Vec::new();
    SearchFrame {
        collection: "items",
        k: 1,
        nprobe: 0,
        filter: None,
        dim: 8,
        vectors: vec![999.0; 8],
    }
    .encode(&mut q);
    let hits = frames::decode_search_answer(&c.call(&q).unwrap()).unwrap();
    assert_eq!(hits[0][0].0, 5000);
    assert_eq!(count(http), 301);
    let (st, _) = rest(
        http,
        "POST",
        "/v1/collections/items/upsert",
        &json!({"points": [{"id": 6000, "vector": vec![-1000.0; 8]}]}).to_string(),
    );
    assert_eq!(st, 200);
    let mut q2 = Vec::new();
    SearchFrame {
        vectors: vec![-999.0; 8],
        ..SearchFrame {
            collection: "items",
            k: 1,
            nprobe: 0,
            filter: None,
            dim: 8,
            vectors: Vec::new(),
        }
    }
    .encode(&mut q2);
    let hits = frames::decode_search_answer(&c.call(&q2).unwrap()).unwrap();
    assert_eq!(hits[0][0].0, 6000);

    // Pipelined: 32 searches sent before any answer is read, each answered once.
    let mut sent = std::collections::HashMap::new();
    for i in 0..32u64 {
        sent.insert(c.send(&search(&[i], 3, None)), i);
    }
    for _ in 0..32 {
        let (id, a) = c.answer();
        let q = sent.remove(&id).expect("an id sent and not yet answered");
        let hits = frames::decode_search_answer(&a.unwrap()).unwrap();
        assert_eq!(hits[0][0], (q, 0.0));
    }

    // Bad frames: error frames with the documented codes, nothing changed, the connection
    // goes on.
    let before = count(http);
    let mut wrong_dim = Vec::new();
    UpsertFrame {
        collection: "items",
        dim: 4,
        points: vec![PointFrame {
            id: 7000,
            vector: vec![1.0; 4],
            attributes: None,
        }],
    }
    .encode(&mut wrong_dim);
    let e = refused(c.call(&wrong_dim));
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("dimension 4"), "{}", e.message);

    let mut nan = upsert(7000..7001, &(0..7001).map(attrs).collect::<Vec<_>>());
    let at = frames::upsert_overhead("items") + 8; // the first element of the first vector
    nan[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let e = refused(c.call(&nan));
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("finite"), "{}", e.message);

    let mut bad_attr = Vec::new();
    UpsertFrame {
        collection: "items",
        dim: 8,
        points: vec![PointFrame {
            id: 7001,
            vector: vector(1),
            attributes: Some(r#"{"size":3}"#),
        }],
    }
    .encode(&mut bad_attr);
    assert_eq!(refused(c.call(&bad_attr)).code, ErrorCode::BadRequest);

    // A duplicate id in one batch refuses all of it.
    let dup = upsert(
        [7002, 7002].into_iter(),
        &(0..7003).map(attrs).collect::<Vec<_>>(),
    );
    assert_eq!(refused(c.call(&dup)).code, ErrorCode::BadRequest);

    let mut unknown = Vec::new();
    SearchFrame {
        collection: "nope",
        k: 1,
        nprobe: 0,
        filter: None,
        dim: 8,
        vectors: vector(1),
    }
    .encode(&mut unknown);
    let e = refused(c.call(&unknown));
    assert_eq!(e.code, ErrorCode::NotFound, "{}", e.message);

    for filter in [
        r#"{"eq":["size",1]}"#,
        r#"{"eq":["price","x"]}"#,
        "{not json",
    ] {
        let e = refused(c.call(&search(&[1], 5, Some(filter))));
        assert_eq!(e.code, ErrorCode::BadRequest, "{filter}: {}", e.message);
    }
    let e = refused(c.call(&search(&[1], 5, Some(r#"{"eq":["size",1]}"#))));
    assert!(e.message.contains("size"), "{}", e.message);

    // A batch over the limit, an answer that could not fit a frame.
    let mut big = upsert(0..1, &attributes);
    big[5 + 4..5 + 4 + 4].copy_from_slice(&10_001u32.to_le_bytes());
    let e = refused(c.call(&big));
    assert_eq!(e.code, ErrorCode::TooLarge, "{}", e.message);
    let e = refused(c.call(&search(&[1, 2, 3, 4, 5, 6, 7, 8], 1024, None)));
    assert_eq!(e.code, ErrorCode::TooLarge, "{}", e.message);
    assert!(e.message.contains("fewer queries"), "{}", e.message);

    // Truncated and garbled payloads.
    let good = search(&[1], 5, None);
    for cut in [0, 3, 10, good.len() - 1] {
        assert_eq!(
            refused(c.call(&good[..cut])).code,
            ErrorCode::BadRequest,
            "cut at {cut}"
        );
    }
    let mut op = good.clone();
    op[0] = 42;
    assert_eq!(refused(c.call(&op)).code, ErrorCode::BadRequest);

    // None of it changed anything, and the connection still serves.
    assert_eq!(count(http), before);
    let (_, v) = rest(
        http,
        "POST",
        "/v1/collections/items/get",
        r#"{"ids":[7000,7001,7002]}"#,
    );
    assert_eq!(v["points"], json!([]), "{v}");
    let hits = frames::decode_search_answer(&c.call(&search(&[7], 1, None)).unwrap()).unwrap();
    assert_eq!(hits[0][0], (7, 0.0));

    // UDP: not served there; the answer says to use TCP, and nothing runs.
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut d = Vec::new();
    encode_frame(
        Header::request(SERVICE_ID, 99, 0),
        &upsert(8000..8001, &(0..8001).map(attrs).collect::<Vec<_>>()),
        &mut d,
    );
    u.send_to(&d, s.udp.unwrap()).unwrap();
    let mut b = vec![0u8; 65_536];
    let n = u.recv(&mut b).unwrap();
    let f = Frame::decode_datagram(&b[..n], MAX_PAYLOAD).unwrap();
    assert_eq!((f.header.kind, f.header.request_id), (Kind::Error, 99));
    let e = ErrorPayload::decode(f.payload).unwrap();
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("TCP"), "{}", e.message);
    assert_eq!(count(http), before);
    // The frames' answers are counted under the service's own name.
    let metrics = common::http_get(http, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("cohort_requests_total{")
                && l.contains("service=\"collections\"")
                && l.contains("outcome=\"bad_request\"")),
        "no collections line in /metrics"
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM with upsert frames in flight: every request is answered exactly once, or listed
/// in GOAWAY and then answered, or neither (never read); after a restart on the same
/// directory the collection holds exactly the points of the upserts acknowledged.
fn ids(get: bool, ids: &[u64]) -> Vec<u8> {
    let f = IdsFrame {
        collection: "items",
        ids: ids.to_vec(),
    };
    let mut b = Vec::new();
    if get {
        Request::Get(f)
    } else {
        Request::Delete(f)
    }
    .encode(&mut b);
    b
}

#[test]
fn deletes_and_gets_over_frames_read_their_writes() {
    let (s, dir) = serve_items("del");
    let (http, tcp) = (s.http.unwrap(), s.tcp.unwrap());
    let attributes: Vec<String> = (0..100).map(attrs).collect();
    let mut c = Tcp::new(tcp);
    assert_eq!(
        frames::decode_upsert_answer(&c.call(&upsert(0..100, &attributes)).unwrap()).unwrap(),
        100
    );

    // Get: the points found, in request order, vectors and attributes as written.
    let a = c.call(&ids(true, &[42, 999, 7])).unwrap();
    let (dim, points) = frames::decode_get_answer(&a).unwrap();
    assert_eq!(dim, 8);
    assert_eq!(points.iter().map(|p| p.id).collect::<Vec<_>>(), [42, 7]);
    assert_eq!(points[0].vector, vector(42));
    let got: Value = serde_json::from_str(points[0].attributes.unwrap()).unwrap();
    assert_eq!(got, serde_json::from_str::<Value>(&attrs(42)).unwrap());

    // Delete: answered with the points deleted; the next frame and REST no longer see them.
    let a = c.call(&ids(false, &[42, 43, 999])).unwrap();
    assert_eq!(frames::decode_delete_answer(&a).unwrap(), 2);
    let a = c.call(&ids(true, &[42, 43, 44])).unwrap();
    let (_, points) = frames::decode_get_answer(&a).unwrap();
    assert_eq!(points.iter().map(|p| p.id).collect::<Vec<_>>(), [44]);
    let hits = frames::decode_search_answer(&c.call(&search(&[42], 3, None)).unwrap()).unwrap();
    assert!(hits[0].iter().all(|h| h.0 != 42 && h.0 != 43), "{hits:?}");
    assert_eq!(count(http), 98);
    // A delete over REST is seen by the next get frame.
    let (st, _) = rest(
        http,
        "POST",
        "/v1/collections/items/delete",
        r#"{"ids":[44]}"#,
    );
    assert_eq!(st, 200);
    let a = c.call(&ids(true, &[44])).unwrap();
    let (_, points) = frames::decode_get_answer(&a).unwrap();
    assert!(points.is_empty());
    assert_eq!(
        frames::decode_delete_answer(&c.call(&ids(false, &[])).unwrap()).unwrap(),
        0
    );

    // Bad input: an error frame with a code, never a hang; nothing changes, the connection
    // goes on.
    let good = ids(false, &[1, 2]);
    let mut op = good.clone();
    op[0] = 9;
    let e = refused(c.call(&op));
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(e.message.contains("unknown op 9"), "{}", e.message);
    for n in [0, 3, 10, good.len() - 1] {
        let e = refused(c.call(&good[..n]));
        assert_eq!(e.code, ErrorCode::BadRequest, "cut at {n}: {}", e.message);
    }
    for lie in [1u32, 3, 5000] {
        let mut l = good.clone();
        let at = frames::ids_overhead("items") - 4;
        l[at..at + 4].copy_from_slice(&lie.to_le_bytes());
        let e = refused(c.call(&l));
        assert_eq!(e.code, ErrorCode::BadRequest, "{lie}: {}", e.message);
    }
    let mut big = good.clone();
    let at = frames::ids_overhead("items") - 4;
    big[at..at + 4].copy_from_slice(&20_000u32.to_le_bytes());
    assert_eq!(refused(c.call(&big)).code, ErrorCode::TooLarge);
    let mut nope = Vec::new();
    Request::Delete(IdsFrame {
        collection: "nope",
        ids: vec![1],
    })
    .encode(&mut nope);
    assert_eq!(refused(c.call(&nope)).code, ErrorCode::NotFound);
    assert_eq!(count(http), 97);
    let a = c.call(&ids(true, &[1, 2])).unwrap();
    let (_, points) = frames::decode_get_answer(&a).unwrap();
    assert_eq!(points.len(), 2, "the refused deletes changed nothing");
    drop(c);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Frames under the server's bounds: a frame whose deadline (`timeout_us`) passed before it
/// ran is answered TIMEOUT and changes nothing; past `MAX_FRAMES_IN_FLIGHT` frames at once
/// the server refuses OVERLOADED at once (never queues); every frame is answered once.
#[test]
fn frames_honour_their_deadline_and_the_in_flight_bound() {
    let (s, dir) = serve_items("bound");
    let (http, tcp) = (s.http.unwrap(), s.tcp.unwrap());
    let attributes: Vec<String> = (0..2000).map(attrs).collect();
    let mut c = Tcp::new(tcp);

    // Deadlines: 1 us has passed before any blocking-pool thread takes the frame; a
    // generous one is met. A timed-out upsert is not applied.
    let mut timed_out = 0;
    for i in 0..20u64 {
        let id = c.send_within(&upsert(i..i + 1, &attributes), 1);
        let (got, a) = c.answer();
        assert_eq!(got, id);
        match a {
            Ok(p) => assert_eq!(frames::decode_upsert_answer(&p).unwrap(), 1),
            Err(e) => {
                assert_eq!(e.code, ErrorCode::Timeout, "{}", e.message);
                assert!(e.message.contains("deadline"), "{}", e.message);
                timed_out += 1;
                let a = c.call(&ids(true, &[i])).unwrap();
                assert!(frames::decode_get_answer(&a).unwrap().1.is_empty());
            }
        }
    }
    assert!(timed_out > 0, "no frame of timeout_us 1 timed out");
    let id = c.send_within(&upsert(100..101, &attributes), 10_000_000);
    let (got, a) = c.answer();
    assert_eq!(got, id);
    assert_eq!(frames::decode_upsert_answer(&a.unwrap()).unwrap(), 1);

    // The bound: 300 searches of 64 queries pipelined at once (on 2 000 points: far more work
    // than the pool finishes while the io thread reads them) overflow it; the excess is
    // refused OVERLOADED naming the bound (or, should the io thread fall behind, its own
    // `ingress:` refusal), the rest answered right, each answered once.
    for start in (0..2000).step_by(100) {
        c.call(&upsert(start..start + 100, &attributes)).unwrap();
    }
    let queries: Vec<u64> = (0..64).collect();
    let mut sent = std::collections::HashSet::new();
    for _ in 0..300 {
        sent.insert(c.send(&search(&queries, 10, None)));
    }
    let (mut ok, mut bound) = (0, 0);
    for _ in 0..300 {
        let (id, a) = c.answer();
        assert!(sent.remove(&id), "an id sent and not yet answered");
        match a {
            Ok(p) => {
                let hits = frames::decode_search_answer(&p).unwrap();
                assert_eq!(hits.len(), 64);
                assert_eq!(hits[5][0], (5, 0.0));
                ok += 1;
            }
            Err(e) => {
                assert_eq!(e.code, ErrorCode::Overloaded, "{}", e.message);
                if e.message.starts_with("queue: collections frames in flight") {
                    bound += 1;
                } else {
                    assert!(e.message.starts_with("ingress:"), "{}", e.message);
                }
            }
        }
    }
    assert!(
        bound > 0,
        "300 pipelined searches never met the bound ({ok} answered)"
    );
    assert!(ok >= cohort_net::MAX_FRAMES_IN_FLIGHT, "{ok} answered");
    // The refusals are counted as the engines' are.
    let metrics = http_get(http, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("cohort_requests_refused_total{")
                && l.contains("reason=\"queue\"")),
        "no queue refusal counted"
    );
    drop(c);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_drain_answers_every_frame_once_and_keeps_every_acknowledged_upsert() {
    let dir = std::env::temp_dir().join(format!("cohort-frames-drain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let args = ["--service", "echo", "--data-dir", dir.to_str().unwrap()];
    let mut s = Served::start(&args);
    let (st, v) = rest(
        s.http.unwrap(),
        "PUT",
        "/v1/collections/items",
        r#"{"dim":8}"#,
    );
    assert_eq!(st, 200, "{v}");
    let mut c = Tcp::new(s.tcp.unwrap());
    const BATCH: u64 = 5;
    let mut sent = std::collections::HashMap::new();
    let mut wire = Vec::new();
    for i in 0..300u64 {
        let mut p = Vec::new();
        UpsertFrame {
            collection: "items",
            dim: 8,
            points: (i * BATCH..(i + 1) * BATCH)
                .map(|id| PointFrame {
                    id,
                    vector: vector(id),
                    attributes: None,
                })
                .collect(),
        }
        .encode(&mut p);
        let id = 1000 + i;
        encode_frame(Header::request(SERVICE_ID, id, 0), &p, &mut wire);
        sent.insert(id, i);
    }
    // The first 20 requests, one answer (the pipeline flows), then the rest and SIGTERM at
    // once: some are answered, some refused UNAVAILABLE, some never read.
    let first = wire.len() / 300 * 20;
    c.s.write_all(&wire[..first]).unwrap();
    let (id, a) = c.answer();
    assert_eq!(
        frames::decode_upsert_answer(&a.unwrap()).unwrap(),
        BATCH as u32
    );
    let (mut answered, mut listed, mut acked) = (
        std::collections::HashMap::<u64, u32>::from([(id, 1)]),
        Vec::new(),
        vec![sent[&id]],
    );
    c.s.write_all(&wire[first..]).unwrap();
    s.sigterm();
    // Read to the end: answers, and one GOAWAY.
    let mut chunk = [0u8; 65_536];
    loop {
        while let Some((f, used)) = Frame::decode_stream(&c.buf, MAX_PAYLOAD).unwrap() {
            match f.header.kind {
                Kind::GoAway => {
                    listed = cohort_proto::GoAway::decode(f.payload).unwrap().pending;
                }
                Kind::Response => {
                    assert_eq!(
                        frames::decode_upsert_answer(f.payload).unwrap(),
                        BATCH as u32
                    );
                    acked.push(sent[&f.header.request_id]);
                    *answered.entry(f.header.request_id).or_default() += 1;
                }
                Kind::Error => {
                    let e = ErrorPayload::decode(f.payload).unwrap();
                    // UNAVAILABLE by the drain, or OVERLOADED past the frames' in-flight
                    // bound: either way not applied.
                    assert!(
                        matches!(e.code, ErrorCode::Unavailable | ErrorCode::Overloaded),
                        "{:?}: {}",
                        e.code,
                        e.message
                    );
                    *answered.entry(f.header.request_id).or_default() += 1;
                }
                k => panic!("unexpected {k:?}"),
            }
            c.buf.drain(..used);
        }
        match c.s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
        }
    }
    assert_eq!(s.wait_exit(Duration::from_secs(30)), 0);
    for (id, n) in &answered {
        assert!(sent.contains_key(id), "an answer to {id}, never sent");
        assert_eq!(*n, 1, "request {id} answered {n} times");
    }
    for id in &listed {
        assert!(
            answered.contains_key(id),
            "{id} listed in GOAWAY, never answered"
        );
    }
    eprintln!(
        "{} sent, {} answered ({} acknowledged), {} listed in GOAWAY",
        sent.len(),
        answered.len(),
        acked.len(),
        listed.len()
    );

    // Restart: exactly the acknowledged points.
    let s = Served::start(&args);
    let http = s.http.unwrap();
    assert_eq!(count(http), acked.len() as u64 * BATCH);
    let ids: Vec<u64> = acked
        .iter()
        .flat_map(|i| i * BATCH..(i + 1) * BATCH)
        .collect();
    let (_, v) = rest(
        http,
        "POST",
        "/v1/collections/items/get",
        &json!({ "ids": ids }).to_string(),
    );
    assert_eq!(v["points"].as_array().unwrap().len(), ids.len());
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
