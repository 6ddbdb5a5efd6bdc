//! Cohort's gRPC service for collections (`cohort.collections.v1.Collections`) served by the
//! real `cohort serve --data-dir DIR --grpc ADDR` on loopback, driven by tonic's client:
//! create, upsert, get, filtered search, delete by filter and by ids, read-your-writes,
//! REST seeing the same data, a restart keeping every acknowledged write; every collection
//! error as its status (with Cohort's code name first). Malformed and lying messages, keys
//! and a server without `--data-dir`: collections_grpc_wire.rs.

use crate::common;

use cohort_collections_grpc as pb;
use common::{http_get, Served};
use pb::collections_client::CollectionsClient;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::Channel;
use tonic::Code;

type Client = CollectionsClient<Channel>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cohort-cgrpc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn serve(dir: &Path, extra: &[&str]) -> Served {
    let mut args = vec![
        "--service",
        "echo",
        "--data-dir",
        dir.to_str().unwrap(),
        "--grpc",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Served::start(&args)
}

async fn connect(addr: SocketAddr) -> Client {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    // Room for the oversize test's message and the largest answers.
    CollectionsClient::new(ch)
        .max_encoding_message_size(128 << 20)
        .max_decoding_message_size(128 << 20)
}

fn vector(id: u64) -> Vec<f32> {
    vec![(id % 7) as f32, (id / 7) as f32, 1.0, -(id as f32) / 10.0]
}

const COLORS: [&str; 3] = ["red", "blue", "green"];

fn int(i: i64) -> pb::AttributeValue {
    pb::AttributeValue {
        kind: Some(pb::attribute_value::Kind::IntValue(i)),
    }
}
fn double(d: f64) -> pb::AttributeValue {
    pb::AttributeValue {
        kind: Some(pb::attribute_value::Kind::DoubleValue(d)),
    }
}
fn string(s: &str) -> pb::AttributeValue {
    pb::AttributeValue {
        kind: Some(pb::attribute_value::Kind::StringValue(s.into())),
    }
}

fn point(id: u64) -> pb::Point {
    let attributes = HashMap::from([
        ("color".to_string(), string(COLORS[id as usize % 3])),
        ("price".to_string(), double(id as f64 * 0.5)),
        ("n".to_string(), int(id as i64)),
    ]);
    pb::Point {
        id,
        vector: vector(id),
        attributes,
    }
}

fn eq(field: &str, v: pb::AttributeValue) -> pb::Filter {
    pb::Filter {
        kind: Some(pb::filter::Kind::Eq(pb::Eq {
            field: field.into(),
            value: Some(v),
        })),
    }
}

fn below(field: &str, v: pb::AttributeValue) -> pb::Filter {
    pb::Filter {
        kind: Some(pb::filter::Kind::Range(pb::Range {
            field: field.into(),
            lt: Some(v),
            ..Default::default()
        })),
    }
}

fn all(fs: Vec<pb::Filter>) -> pb::Filter {
    pb::Filter {
        kind: Some(pb::filter::Kind::All(pb::FilterList { filters: fs })),
    }
}

fn any(fs: Vec<pb::Filter>) -> pb::Filter {
    pb::Filter {
        kind: Some(pb::filter::Kind::Any(pb::FilterList { filters: fs })),
    }
}

fn create_items(name: &str) -> pb::CreateCollectionRequest {
    pb::CreateCollectionRequest {
        name: name.into(),
        dim: 4,
        metric: pb::Metric::L2 as i32,
        element: pb::Element::F32 as i32,
        attributes: HashMap::from([
            ("color".to_string(), pb::AttributeType::Keyword as i32),
            ("price".to_string(), pb::AttributeType::Float as i32),
            ("n".to_string(), pb::AttributeType::Integer as i32),
        ]),
    }
}

fn search(collection: &str, queries: Vec<Vec<f32>>, k: u32) -> pb::SearchRequest {
    pb::SearchRequest {
        collection: collection.into(),
        vectors: queries
            .into_iter()
            .map(|values| pb::Vector { values })
            .collect(),
        k: Some(k),
        ..Default::default()
    }
}

async fn count(c: &mut Client, name: &str) -> u64 {
    let r = pb::CountRequest {
        collection: name.into(),
    };
    c.count(r).await.expect("count").into_inner().count
}

/// The status of a refused call, its message starting with Cohort's code name.
fn refused<T: std::fmt::Debug>(
    r: Result<tonic::Response<T>, tonic::Status>,
    code: Code,
    name: &str,
) -> String {
    let s = r.expect_err("refused");
    assert_eq!(s.code(), code, "{s:?}");
    assert!(s.message().starts_with(&format!("{name}: ")), "{s:?}");
    s.message().to_string()
}

fn bad<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> String {
    refused(r, Code::InvalidArgument, "BAD_REQUEST")
}

fn missing<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> String {
    refused(r, Code::NotFound, "NOT_FOUND")
}

#[test]
fn collections_are_served_over_grpc_durably() {
    let dir = scratch("main");
    let rt = runtime();
    let mut s = serve(&dir, &[]);
    let addr = s.grpc.expect("grpc listener");
    let http = s.http.expect("http listener");
    rt.block_on(async {
        let mut c = connect(addr).await;
        let info = c
            .create_collection(create_items("items"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!((info.name.as_str(), info.dim, info.count), ("items", 4, 0));
        assert_eq!(info.metric, pb::Metric::L2 as i32);
        assert_eq!(info.attributes["color"], pb::AttributeType::Keyword as i32);
        let again = c.create_collection(create_items("items")).await;
        refused(again, Code::AlreadyExists, "CONFLICT");

        let points: Vec<pb::Point> = (0..100).map(point).collect();
        let up = pb::UpsertRequest {
            collection: "items".into(),
            points,
        };
        assert_eq!(c.upsert(up).await.unwrap().into_inner().upserted, 100);
        assert_eq!(count(&mut c, "items").await, 100);

        // Get: request order, missing ids left out, vectors and typed attributes as written.
        let got = c
            .get(pb::GetRequest {
                collection: "items".into(),
                ids: vec![3, 1000, 5],
            })
            .await
            .unwrap()
            .into_inner()
            .points;
        assert_eq!(got.iter().map(|p| p.id).collect::<Vec<_>>(), vec![3, 5]);
        assert_eq!(got[0], point(3));
        assert_eq!(got[1], point(5));

        // A filtered search with attributes: every hit red with n < 50, the exact point first.
        let mut q = search("items", vec![vector(9)], 5);
        q.filter = Some(all(vec![eq("color", string("red")), below("n", int(50))]));
        q.with_attributes = true;
        let r = c.search(q).await.unwrap().into_inner().results;
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].hits[0].id, r[0].hits[0].distance), (9, 0.0));
        assert_eq!(r[0].hits.len(), 5);
        for h in &r[0].hits {
            assert_eq!(h.attributes["color"], string("red"), "{h:?}");
            assert!(h.id % 3 == 0 && h.id < 50, "{h:?}");
            assert_eq!(h.attributes["n"], int(h.id as i64));
        }
        // Many queries a call, one list each, nearest first; no attributes unless asked.
        let r = c
            .search(search("items", vec![vector(9), vector(12), vector(40)], 2))
            .await
            .unwrap()
            .into_inner()
            .results;
        let firsts: Vec<u64> = r.iter().map(|h| h.hits[0].id).collect();
        assert_eq!(firsts, vec![9, 12, 40]);
        assert!(r
            .iter()
            .all(|h| h.hits.len() == 2 && h.hits[0].attributes.is_empty()));
        assert!(r.iter().all(|h| h.hits[0].distance <= h.hits[1].distance));

        // Read-your-writes: a search right after an acknowledged upsert sees it.
        for j in 0..20u64 {
            let v = vec![1000.0 + j as f32 * 10.0, 7.0, 7.0, 7.0];
            let p = pb::Point {
                id: 1000 + j,
                vector: v.clone(),
                attributes: HashMap::new(),
            };
            let up = pb::UpsertRequest {
                collection: "items".into(),
                points: vec![p],
            };
            assert_eq!(c.upsert(up).await.unwrap().into_inner().upserted, 1);
            let r = c
                .search(search("items", vec![v], 1))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(r.results[0].hits[0].id, 1000 + j, "write {j} not seen");
        }
        assert_eq!(count(&mut c, "items").await, 120);

        // Delete by filter: green, or priced at 40 or more (ids >= 80); then by ids.
        let doomed = (0..100u64).filter(|&i| i % 3 == 2 || i >= 80).count() as u64;
        let f = any(vec![
            eq("color", string("green")),
            pb::Filter {
                kind: Some(pb::filter::Kind::Range(pb::Range {
                    field: "price".into(),
                    gte: Some(int(40)),
                    ..Default::default()
                })),
            },
        ]);
        let del = pb::DeleteRequest {
            collection: "items".into(),
            selector: Some(pb::delete_request::Selector::Filter(f)),
        };
        assert_eq!(c.delete(del).await.unwrap().into_inner().deleted, doomed);
        let mut q = search("items", vec![vector(5)], 10);
        q.filter = Some(eq("color", string("green")));
        let r = c.search(q).await.unwrap().into_inner();
        assert!(r.results[0].hits.is_empty(), "{r:?}");
        let del = pb::DeleteRequest {
            collection: "items".into(),
            selector: Some(pb::delete_request::Selector::Ids(pb::IdList {
                ids: vec![0, 1, 2, 99_999],
            })),
        };
        assert_eq!(c.delete(del).await.unwrap().into_inner().deleted, 2);
        let left = 120 - doomed - 2;
        assert_eq!(count(&mut c, "items").await, left);

        // REST sees the same collection; list and describe agree.
        let raw = http_get(http, "/v1/collections/items");
        let body = raw.split_once("\r\n\r\n").expect("an HTTP answer").1;
        let rest: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(rest["count"], left);
        let list = c
            .list_collections(pb::ListCollectionsRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(list.collections.len(), 1);
        let d = pb::DescribeCollectionRequest {
            name: "items".into(),
        };
        let info = c.describe_collection(d).await.unwrap().into_inner();
        assert_eq!(info.count, left);
        assert!(info.searches.is_some());
    });

    // A restart keeps every acknowledged write.
    s.sigterm();
    assert_eq!(s.wait_exit(Duration::from_secs(30)), 0);
    let s = serve(&dir, &[]);
    let addr = s.grpc.unwrap();
    rt.block_on(async {
        let mut c = connect(addr).await;
        let doomed = (0..100u64).filter(|&i| i % 3 == 2 || i >= 80).count() as u64;
        assert_eq!(count(&mut c, "items").await, 120 - doomed - 2);
        let got = c
            .get(pb::GetRequest {
                collection: "items".into(),
                ids: vec![0, 3, 1019],
            })
            .await
            .unwrap()
            .into_inner()
            .points;
        assert_eq!(got.iter().map(|p| p.id).collect::<Vec<_>>(), vec![3, 1019]);
        assert_eq!(got[0], point(3));
        let drop = pb::DropCollectionRequest {
            name: "items".into(),
        };
        assert_eq!(
            c.drop_collection(drop).await.unwrap().into_inner().dropped,
            "items"
        );
        let d = pb::DescribeCollectionRequest {
            name: "items".into(),
        };
        refused(c.describe_collection(d).await, Code::NotFound, "NOT_FOUND");
    });
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_collection_error_is_its_grpc_status() {
    let dir = scratch("errors");
    let rt = runtime();
    let s = serve(&dir, &[]);
    let addr = s.grpc.unwrap();
    rt.block_on(async {
        let mut c = connect(addr).await;
        c.create_collection(create_items("e")).await.unwrap();
        let seed = pb::UpsertRequest {
            collection: "e".into(),
            points: (0..10).map(point).collect(),
        };
        c.upsert(seed).await.unwrap();
        let upsert = |points: Vec<pb::Point>| pb::UpsertRequest {
            collection: "e".into(),
            points,
        };

        // Wrong dimension, NaN, an unknown attribute, a type mismatch, an infinite
        // attribute, an id twice: INVALID_ARGUMENT, with words that say which.
        let edit = |id: u64, f: &dyn Fn(&mut pb::Point)| {
            let mut p = point(id);
            f(&mut p);
            vec![p]
        };
        let cases: Vec<(Vec<pb::Point>, &str)> = vec![
            (edit(50, &|p| p.vector.push(1.0)), "dimension 5"),
            (edit(51, &|p| p.vector[2] = f32::NAN), "not a finite number"),
            (
                edit(52, &|p| {
                    p.attributes.insert("size".into(), int(3));
                }),
                "unknown attribute",
            ),
            (
                edit(53, &|p| {
                    p.attributes.insert("n".into(), string("7"));
                }),
                "expected an integer",
            ),
            (
                edit(54, &|p| {
                    p.attributes.insert("price".into(), double(f64::INFINITY));
                }),
                "finite",
            ),
            (vec![point(55), point(55)], "twice"),
        ];
        for (points, words) in cases {
            let m = bad(c.upsert(upsert(points)).await);
            assert!(m.contains(words), "{m} (expected {words:?})");
        }

        // An oversize batch: TOO_LARGE, RESOURCE_EXHAUSTED.
        let big = (0..10_001).map(|i| pb::Point {
            id: i,
            vector: vector(i),
            ..Default::default()
        });
        let m = refused(
            c.upsert(upsert(big.collect())).await,
            Code::ResourceExhausted,
            "TOO_LARGE",
        );
        assert!(m.contains("10001 points"), "{m}");
        // A message over the 64 MiB the service decodes: TOO_LARGE too, before any handler.
        let huge = pb::Point {
            id: 1,
            vector: vec![0.5; 17 << 20],
            ..Default::default()
        };
        refused(
            c.upsert(upsert(vec![huge])).await,
            Code::ResourceExhausted,
            "TOO_LARGE",
        );

        // Unknown collections: NOT_FOUND for every call that names one.
        let m = missing(c.search(search("nope", vec![vector(1)], 3)).await);
        assert!(m.contains("\"nope\""), "{m}");
        let up = pb::UpsertRequest {
            collection: "nope".into(),
            points: vec![point(1)],
        };
        missing(c.upsert(up).await);
        missing(
            c.get(pb::GetRequest {
                collection: "nope".into(),
                ids: vec![1],
            })
            .await,
        );
        missing(
            c.drop_collection(pb::DropCollectionRequest {
                name: "nope".into(),
            })
            .await,
        );

        // Searches: a NaN query, the wrong dimension, k out of range, nprobe 0, no query.
        let mut zero_nprobe = search("e", vec![vector(1)], 3);
        zero_nprobe.nprobe = Some(0);
        for q in [
            search("e", vec![vec![f32::NAN, 0.0, 0.0, 0.0]], 3),
            search("e", vec![vec![1.0, 2.0]], 3),
            search("e", vec![vector(1)], 0),
            search("e", vec![vector(1)], 5000),
            zero_nprobe,
            search("e", vec![], 3),
        ] {
            bad(c.search(q).await);
        }

        // Bad filters: an unknown attribute, type mismatches, a range over a keyword, an
        // empty node, too deep (INVALID_ARGUMENT), too many nodes (TOO_LARGE).
        let filtered = |f: pb::Filter| {
            let mut q = search("e", vec![vector(1)], 3);
            q.filter = Some(f);
            q
        };
        let mut deep = eq("n", int(1));
        for _ in 0..16 {
            deep = pb::Filter {
                kind: Some(pb::filter::Kind::Not(Box::new(deep))),
            };
        }
        for (f, words) in [
            (eq("size", int(1)), "size"),
            (eq("n", string("x")), "expected an integer"),
            (eq("n", double(1.5)), "expected an integer"),
            (below("color", int(3)), "color"),
            (pb::Filter { kind: None }, "one of eq"),
            (deep, "deeper"),
        ] {
            let m = bad(c.search(filtered(f)).await);
            assert!(m.contains(words), "{m} (expected {words:?})");
        }
        let wide = all((0..1100).map(|i| eq("n", int(i))).collect());
        refused(
            c.search(filtered(wide)).await,
            Code::ResourceExhausted,
            "TOO_LARGE",
        );
        let by = |selector| pb::DeleteRequest {
            collection: "e".into(),
            selector,
        };
        bad(c
            .delete(by(Some(pb::delete_request::Selector::Filter(eq(
                "size",
                int(1),
            )))))
            .await);
        bad(c.delete(by(None)).await);

        // Lying enums and settings on create.
        let create = |f: &dyn Fn(&mut pb::CreateCollectionRequest)| {
            let mut r = create_items("f");
            f(&mut r);
            r
        };
        for r in [
            create(&|r| r.metric = 9),
            create(&|r| r.element = -1),
            create(&|r| {
                r.attributes.insert("x".into(), 0);
            }),
            create(&|r| r.dim = 0),
            create(&|r| r.name = "../x".into()),
        ] {
            bad(c.create_collection(r).await);
        }

        // A refused request changes nothing.
        assert_eq!(count(&mut c, "e").await, 10);
        let list = c
            .list_collections(pb::ListCollectionsRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            list.collections
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            vec!["e"]
        );
    });
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}
