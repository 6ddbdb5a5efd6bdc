//! The collection load's requests, answer checks and fill (`mod.rs`).

use super::*;

fn config(write_share: f64) -> CollectionLoad {
    CollectionLoad {
        name: "items".into(),
        dim: 16,
        points: 1000,
        write_share,
        write_batch: 10,
        k: 10,
        seed: 3,
        queries_per_request: 1,
        filter_selectivity: None,
    }
}

fn workload(write_share: f64) -> CollectionWorkload {
    CollectionWorkload::new(config(write_share)).unwrap()
}

#[test]
fn the_write_share_is_kept_and_requests_are_deterministic() {
    let w = workload(0.05);
    let n = 100_000;
    let (mut upserts, mut deletes) = (0, 0);
    for seq in 0..n {
        match w.op(seq) {
            Op::Search => {}
            Op::Upsert => upserts += 1,
            Op::Delete => deletes += 1,
        }
    }
    let writes = (upserts + deletes) as f64 / n as f64;
    assert!((writes - 0.05).abs() < 0.005, "{writes}");
    let del = deletes as f64 / (upserts + deletes) as f64;
    assert!((del - 1.0 / DELETE_EVERY as f64).abs() < 0.03, "{del}");
    let again = workload(0.05);
    for seq in [0, 1, 77, 123_456] {
        assert_eq!(w.request(seq), again.request(seq));
    }
    let (none, all) = (workload(0.0), workload(1.0));
    assert!((0..1000).all(|s| none.op(s) == Op::Search));
    assert!((0..1000).all(|s| all.op(s) != Op::Search));
}

#[test]
fn writes_carry_distinct_ids_in_range_and_searches_one_query() {
    let w = workload(0.5);
    let mut seen = HashSet::new();
    for seq in 0..200 {
        let r = w.request(seq);
        match w.op(seq) {
            Op::Search => {
                assert_eq!(r.path, "/v1/collections/items/search");
                assert_eq!(r.body["vectors"].as_array().unwrap().len(), 1);
                assert_eq!(r.body["vectors"][0].as_array().unwrap().len(), 16);
                assert_eq!(r.body["k"], 10);
            }
            Op::Upsert => {
                assert_eq!(r.path, "/v1/collections/items/upsert");
                let p = r.body["points"].as_array().unwrap();
                let ids: HashSet<u64> = p.iter().map(|p| p["id"].as_u64().unwrap()).collect();
                assert_eq!(ids.len(), 10);
                assert!(ids.iter().all(|&i| i < 1000));
                assert_eq!(
                    p[0]["attributes"]["tag"],
                    p[0]["id"].as_u64().unwrap() % TAGS
                );
                seen.extend(ids);
            }
            Op::Delete => {
                assert_eq!(r.path, "/v1/collections/items/delete");
                let ids = w.ids(seq);
                assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 10);
                assert_eq!(r.body, json!({ "ids": ids }));
            }
        }
    }
    // Ids spread over the range, not a few repeated.
    assert!(seen.len() > 500, "{}", seen.len());
}

#[test]
fn answers_of_the_wrong_shape_are_wrong() {
    let w = workload(0.5);
    let search = (0..).find(|&s| w.op(s) == Op::Search).unwrap();
    let upsert = (0..).find(|&s| w.op(s) == Op::Upsert).unwrap();
    let delete = (0..).find(|&s| w.op(s) == Op::Delete).unwrap();
    let hit = |id: u64, d: f64| json!({"id": id, "distance": d});
    let ok = json!({"results": [[hit(3, 1.0), hit(9, 1.0), hit(4, 7.5)]]});
    assert!(w.check_json(search, &ok));
    assert!(w.check_json(search, &json!({"results": [[]]})));
    for bad in [
        json!({"results": [[hit(3, 2.0), hit(9, 1.0)]]}),
        json!({"results": [[hit(3, 1.0), hit(3, 2.0)]]}),
        json!({"results": [[hit(1000, 1.0)]]}),
        json!({"results": [[hit(1, -1.0)]]}),
        json!({"results": [[{"id": 1}]]}),
        json!({"results": [[hit(1, 1.0)], [hit(2, 1.0)]]}),
        json!({"results": [(0..11).map(|i| hit(i, i as f64)).collect::<Vec<_>>()]}),
        json!({"results": []}),
        json!({"upserted": 10}),
    ] {
        assert!(!w.check_json(search, &bad), "{bad}");
    }
    assert!(w.check_json(upsert, &json!({"upserted": 10})));
    assert!(!w.check_json(upsert, &json!({"upserted": 9})));
    assert!(!w.check_json(upsert, &json!({"deleted": 10})));
    assert!(w.check_json(delete, &json!({"deleted": 0})));
    assert!(w.check_json(delete, &json!({"deleted": 10})));
    assert!(!w.check_json(delete, &json!({"deleted": 11})));
    assert!(!w.check_json(delete, &json!({"upserted": 10})));
    let e = w.extra();
    assert_eq!(e["searches_right"], 2);
    assert_eq!(e["upserts_right"], 1);
    assert_eq!(e["deletes_right"], 2);
    assert_eq!(e["points_deleted"], 10);
}

#[test]
fn bad_settings_are_refused() {
    let good = workload(0.1).config().clone();
    for bad in [
        CollectionLoad {
            name: "-x".into(),
            ..good.clone()
        },
        CollectionLoad {
            name: "a/b".into(),
            ..good.clone()
        },
        CollectionLoad {
            write_share: 1.5,
            ..good.clone()
        },
        CollectionLoad {
            points: 5,
            ..good.clone()
        },
        CollectionLoad {
            dim: 0,
            ..good.clone()
        },
        CollectionLoad {
            queries_per_request: 0,
            ..good.clone()
        },
        CollectionLoad {
            queries_per_request: 1025,
            ..good.clone()
        },
        CollectionLoad {
            filter_selectivity: Some(0.0),
            ..good.clone()
        },
        CollectionLoad {
            filter_selectivity: Some(0.0004),
            ..good.clone()
        },
        CollectionLoad {
            filter_selectivity: Some(1.5),
            ..good.clone()
        },
        CollectionLoad {
            filter_selectivity: Some(f64::NAN),
            ..good.clone()
        },
        CollectionLoad {
            points: MAX_POINTS + 1,
            ..good.clone()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
    assert!(good.validate().is_ok());
}

#[test]
fn filtered_searches_of_many_queries_are_sent_and_checked() {
    let w = CollectionWorkload::new(CollectionLoad {
        queries_per_request: 3,
        filter_selectivity: Some(0.01),
        ..config(0.0)
    })
    .unwrap();
    assert_eq!(w.config().filter_threshold(), 10);
    let r = w.request(0);
    assert_eq!(r.path, "/v1/collections/items/search");
    assert_eq!(r.body["vectors"].as_array().unwrap().len(), 3);
    assert_eq!(r.body["filter"], json!({"range": ["tag", {"lt": 10}]}));
    // Distinct rows for the queries of one request, the same again for the same seq.
    let rows: HashSet<usize> = (0..3).map(|j| w.query_row(0, j)).collect();
    assert_eq!(rows.len(), 3);
    assert_eq!(w.request(0), w.request(0));
    let hit = |id: u64, d: f64| json!({"id": id, "distance": d});
    let ok = json!({"results": [[hit(5, 1.0), hit(7, 2.0)], [], [hit(9, 0.5)]]});
    assert!(w.check_json(0, &ok));
    // Tag 10 is outside the filter; two lists for three queries is wrong.
    let outside = json!({"results": [[hit(5, 1.0), hit(10, 2.0)], [], []]});
    assert!(!w.check_json(1, &outside));
    assert!(!w.check_json(2, &json!({"results": [[], []]})));
    let e = w.extra();
    assert_eq!(e["filter_violations"], 1);
    assert_eq!(e["filter_selectivity"], 0.01);
    assert_eq!(e["queries_per_request"], 3);
    assert!(e.get("recall_at_k").is_none(), "no truth computed");
}

#[test]
fn recall_is_scored_against_the_exact_answers_of_the_matches() {
    let cfg = CollectionLoad {
        filter_selectivity: Some(0.1),
        ..config(0.0)
    };
    let w = CollectionWorkload::new(cfg.clone()).unwrap();
    w.enable_recall();
    let truth = w.truth.get().unwrap();
    assert_eq!(truth.len(), GT_QUERIES);
    // The truth by brute force over the fill, for one query.
    let fill = cfg.fill_vectors(0, cfg.points as usize);
    let q = w.queries.row(7);
    let mut all: Vec<(f32, u64)> = (0..cfg.points)
        .filter(|&id| cfg.matches(id))
        .map(|id| (l2_sq(q, fill.row(id as usize)), id))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let want: Vec<u64> = all.iter().take(10).map(|x| x.1).collect();
    assert_eq!(truth[7], want);
    assert!(truth.iter().flatten().all(|&id| cfg.matches(id)));
    // A search whose query has truth: the exact answer scores 1, half of it 0.5.
    let seq = (0..).find(|&s| w.query_row(s, 0) < GT_QUERIES).unwrap();
    let t = &truth[w.query_row(seq, 0)];
    let answer = |ids: &[u64]| {
        json!({"results": [ids.iter().enumerate()
            .map(|(i, id)| json!({"id": id, "distance": i as f64}))
            .collect::<Vec<_>>()]})
    };
    assert!(w.check_json(seq, &answer(t)));
    assert_eq!(w.extra()["recall_at_k"], 1.0);
    assert!(w.check_json(seq, &answer(&t[..5])));
    assert_eq!(w.extra()["recall_at_k"], 0.75);
    assert_eq!(w.extra()["recall_queries"], 2);
    w.reset();
    assert!(w.extra().get("recall_at_k").is_none());
}

#[test]
fn a_point_known_deleted_in_an_answer_is_wrong() {
    let w = workload(0.5);
    let l = w.liveness.as_ref().unwrap();
    let hit = |id: u64| json!({"results": [[{"id": id, "distance": 1.0}]]});
    let search = |from: u64| (from..).find(|&s| w.op(s) == Op::Search).unwrap();
    let delete = (0..).find(|&s| w.op(s) == Op::Delete).unwrap();
    let gone = w.ids(delete)[0];
    // A search sent before the delete was acknowledged may find the point.
    let s0 = search(0);
    w.http_request(s0);
    w.http_request(delete);
    assert!(w.check_json(delete, &json!({"deleted": 10})));
    assert!(w.check_json(s0, &hit(gone)));
    // One sent after it must not.
    let s1 = search(s0 + 1);
    w.http_request(s1);
    assert!(!w.check_json(s1, &hit(gone)));
    assert_eq!(w.extra()["deleted_points_answered"], 1);
    // An upsert of it sent before the search's answer came: not judged.
    let s2 = search(s1 + 1);
    w.http_request(s2);
    l.upsert_sent(&[gone]);
    assert!(w.check_json(s2, &hit(gone)));
    // A delete sent while an upsert of the id is unanswered marks nothing (the upsert
    // may land after it), nor does one acknowledged after a later upsert was sent.
    let d2 = (delete + 1..).find(|&s| w.op(s) == Op::Delete).unwrap();
    let other = w.ids(d2)[0];
    l.upsert_sent(&[other]);
    w.http_request(d2);
    assert!(w.check_json(d2, &json!({"deleted": 1})));
    let s3 = search(s2 + 1);
    w.http_request(s3);
    assert!(w.check_json(s3, &hit(other)));
}
