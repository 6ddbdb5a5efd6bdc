//! Durability: every acknowledged write is present exactly once after the store is dropped
//! without a clean shutdown and reopened (with a torn log tail on top, and across snapshots);
//! a corrupt snapshot or damaged log is refused; a full disk refuses writes and searches go on.

use cohort_collections::api::handle;
use cohort_collections::{Kind, Store};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cohort-coll-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn call(s: &Store, method: &str, path: &str, body: Value) -> (u16, Value) {
    let a = handle(s, method, path, body.to_string().as_bytes());
    (a.status, serde_json::from_slice(&a.body).unwrap())
}

fn create(s: &Store) {
    let (st, v) = call(
        s,
        "PUT",
        "/v1/collections/c",
        json!({"dim": 4, "metric": "l2", "element": "f32", "attributes": {"tag": "keyword", "n": "integer"}}),
    );
    assert_eq!(st, 200, "{v}");
}

/// What the collection must hold: id -> (vector, n).
type Expected = BTreeMap<u64, (Vec<f32>, i64)>;

/// Writers on threads (their ids disjoint, so the final state does not depend on how their
/// writes interleave): upserts, overwrites and deletes, every one acknowledged.
fn write_concurrently(s: &Arc<Store>, threads: u64, rounds: u64) -> Expected {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut want = Expected::new();
                for r in 0..rounds {
                    let points: Vec<Value> = (0..20)
                        .map(|i| {
                            let id = t * 1_000_000 + (r * 7 + i) % 300;
                            let v = vec![id as f32, r as f32, i as f32, t as f32];
                            want.insert(id, (v.clone(), r as i64));
                            json!({"id": id, "vector": v, "attributes": {"tag": format!("t{t}"), "n": r}})
                        })
                        .collect();
                    let (st, v) = call(&s, "POST", "/v1/collections/c/upsert", json!({ "points": points }));
                    assert_eq!(st, 200, "{v}");
                    if r % 5 == 4 {
                        let id = t * 1_000_000 + r % 300;
                        let (st, _) = call(&s, "POST", "/v1/collections/c/delete", json!({"ids": [id]}));
                        assert_eq!(st, 200);
                        want.remove(&id);
                    }
                }
                want
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

fn check(s: &Store, want: &Expected) {
    let (_, d) = call(s, "GET", "/v1/collections/c", json!(null));
    assert_eq!(
        d["count"],
        json!(want.len()),
        "every acknowledged point exactly once"
    );
    let ids: Vec<u64> = want.keys().copied().collect();
    for chunk in ids.chunks(1000) {
        let (st, got) = call(s, "POST", "/v1/collections/c/get", json!({ "ids": chunk }));
        assert_eq!(st, 200);
        let pts = got["points"].as_array().unwrap();
        assert_eq!(pts.len(), chunk.len());
        for p in pts {
            let (v, n) = &want[&p["id"].as_u64().unwrap()];
            assert_eq!(p["vector"], json!(v));
            assert_eq!(p["attributes"]["n"], json!(n));
        }
    }
}

fn wal_of(dir: &Path) -> PathBuf {
    dir.join("collections/c/wal")
}

#[test]
fn acknowledged_writes_survive_a_crash_and_a_torn_tail_exactly_once() {
    let dir = temp("crash");
    let s = Arc::new(Store::open(&dir).unwrap());
    create(&s);
    // Snapshots now and then, so recovery crosses snapshot + log.
    s.get("c").unwrap().set_snapshot_at(64 << 10);
    let want = write_concurrently(&s, 4, 60);
    assert!(
        dir.join("collections/c/snapshot").exists(),
        "a snapshot was taken"
    );
    drop(s); // no shutdown: every acknowledged write was synced, nothing else is kept
             // A crash in the middle of an append: half a record at the end.
    let mut tail = std::fs::read(wal_of(&dir)).unwrap();
    let cut = tail.len();
    tail.extend_from_slice(b"CWAL\x40\x00\x00\x00garbage");
    std::fs::write(wal_of(&dir), &tail).unwrap();
    let s = Store::open(&dir).unwrap();
    check(&s, &want);
    assert_eq!(
        std::fs::metadata(wal_of(&dir)).unwrap().len() as usize,
        cut,
        "tail cut"
    );
    // Writes go on after recovery, and survive another reopen.
    let (st, _) = call(
        &s,
        "POST",
        "/v1/collections/c/upsert",
        json!({"points": [{"id": 99_999_999u64, "vector": [1, 2, 3, 4]}]}),
    );
    assert_eq!(st, 200);
    drop(s);
    let s = Store::open(&dir).unwrap();
    let (_, d) = call(&s, "GET", "/v1/collections/c", json!(null));
    assert_eq!(d["count"], json!(want.len() + 1));
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_corrupt_snapshot_or_damaged_log_is_refused() {
    let dir = temp("corrupt");
    let s = Store::open(&dir).unwrap();
    create(&s);
    let c = s.get("c").unwrap();
    for r in 0..3 {
        let pts: Vec<Value> = (0..10)
            .map(|i| json!({"id": r * 10 + i, "vector": [i, r, 0, 1]}))
            .collect();
        assert_eq!(
            call(
                &s,
                "POST",
                "/v1/collections/c/upsert",
                json!({"points": pts})
            )
            .0,
            200
        );
    }
    c.snapshot().unwrap();
    drop((c, s));
    let snap = dir.join("collections/c/snapshot");
    let good = std::fs::read(&snap).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x10;
    std::fs::write(&snap, &bad).unwrap();
    let e = Store::open(&dir)
        .err()
        .expect("a corrupt snapshot is refused");
    assert!(
        e.message.contains("snapshot")
            && e.message.contains("corrupt")
            && e.message.contains("checksum"),
        "{e}"
    );
    std::fs::write(&snap, &good).unwrap();
    // Two log records, the first damaged: acknowledged data lost, refused.
    let s = Store::open(&dir).unwrap();
    for r in 3..5 {
        let pts: Vec<Value> = (0..10)
            .map(|i| json!({"id": r * 10 + i, "vector": [i, r, 0, 1]}))
            .collect();
        assert_eq!(
            call(
                &s,
                "POST",
                "/v1/collections/c/upsert",
                json!({"points": pts})
            )
            .0,
            200
        );
    }
    drop(s);
    let mut log = std::fs::read(wal_of(&dir)).unwrap();
    log[20] ^= 1;
    std::fs::write(wal_of(&dir), &log).unwrap();
    let e = Store::open(&dir).err().expect("a damaged log is refused");
    assert!(e.message.contains("log damaged"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_full_disk_refuses_writes_and_searches_go_on() {
    let Ok(full) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/full")
    else {
        eprintln!("skipped: no /dev/full");
        return;
    };
    let dir = temp("full");
    let s = Store::open(&dir).unwrap();
    create(&s);
    assert_eq!(
        call(
            &s,
            "POST",
            "/v1/collections/c/upsert",
            json!({"points": [{"id": 1, "vector": [1, 1, 1, 1]}]})
        )
        .0,
        200
    );
    s.get("c").unwrap().swap_log_file(full);
    let (st, e) = call(
        &s,
        "POST",
        "/v1/collections/c/upsert",
        json!({"points": [{"id": 2, "vector": [2, 2, 2, 2]}]}),
    );
    assert_eq!(
        (st, e["error"].as_str()),
        (507, Some("INSUFFICIENT_STORAGE")),
        "{e}"
    );
    assert!(
        e["message"].as_str().unwrap().contains("No space left"),
        "{e}"
    );
    let (st, r) = call(
        &s,
        "POST",
        "/v1/collections/c/search",
        json!({"vectors": [[2, 2, 2, 2]], "k": 5}),
    );
    assert_eq!(st, 200);
    assert_eq!(
        r["results"][0].as_array().unwrap().len(),
        1,
        "the refused write is not visible: {r}"
    );
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn creates_and_drops_are_durable_and_a_dropped_collection_refuses_writes() {
    let dir = temp("catalog");
    let s = Store::open(&dir).unwrap();
    create(&s);
    let (st, e) = call(&s, "PUT", "/v1/collections/c", json!({"dim": 4}));
    assert_eq!((st, e["error"].as_str()), (409, Some("CONFLICT")));
    assert!(
        Store::open(&dir).is_err(),
        "a second store on one directory is refused"
    );
    let c = s.get("c").unwrap();
    assert_eq!(call(&s, "DELETE", "/v1/collections/c", json!(null)).0, 200);
    let e = c
        .write(cohort_collections::ops::Op::DeleteIds(vec![1]))
        .unwrap_err();
    assert_eq!(e.kind, Kind::NotFound);
    assert_eq!(call(&s, "GET", "/v1/collections/c", json!(null)).0, 404);
    drop((c, s));
    let s = Store::open(&dir).unwrap();
    assert_eq!(
        call(&s, "GET", "/v1/collections", json!(null)).1,
        json!({"collections": []})
    );
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_search_after_an_acknowledgement_sees_the_write() {
    let dir = temp("ryw");
    let s = Arc::new(Store::open(&dir).unwrap());
    create(&s);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let id = t * 1000 + i;
                    let v = [id as f32, 1.0, 2.0, 3.0];
                    let body = json!({"points": [{"id": id, "vector": v}]});
                    assert_eq!(call(&s, "POST", "/v1/collections/c/upsert", body).0, 200);
                    // Acknowledged: any search from now on sees it.
                    let (_, r) = call(
                        &s,
                        "POST",
                        "/v1/collections/c/search",
                        json!({"vectors": [v], "k": 1}),
                    );
                    assert_eq!(r["results"][0][0]["id"], json!(id), "{r}");
                    let (_, r) = call(&s, "POST", "/v1/collections/c/delete", json!({"ids": [id]}));
                    assert_eq!(r["deleted"], json!(1));
                    let (_, r) = call(&s, "POST", "/v1/collections/c/get", json!({"ids": [id]}));
                    assert_eq!(r["points"], json!([]), "a deleted point is gone at once");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (records, writes) = s.get("c").unwrap().commit_stats();
    assert_eq!(writes, 400);
    eprintln!("{writes} writes in {records} log records");
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn training_and_compaction_run_between_groups_and_survive_a_reopen() {
    let dir = temp("upkeep");
    let s = Store::open(&dir).unwrap();
    create(&s);
    for b in 0..6u64 {
        let pts: Vec<Value> = (0..1000)
            .map(|i| {
                let id = b * 1000 + i;
                json!({"id": id, "vector": [id as f32, (id % 7) as f32, (id % 13) as f32, 1.0]})
            })
            .collect();
        assert_eq!(
            call(
                &s,
                "POST",
                "/v1/collections/c/upsert",
                json!({ "points": pts })
            )
            .0,
            200
        );
    }
    let c = s.get("c").unwrap();
    c.wait_for_training();
    assert!(c.read().nlist().is_some(), "trained at 4096 points");
    let doomed: Vec<u64> = (0..5000).collect();
    for ids in doomed.chunks(1000) {
        assert_eq!(
            call(
                &s,
                "POST",
                "/v1/collections/c/delete",
                json!({ "ids": ids })
            )
            .0,
            200
        );
    }
    // 5000 tombstones over 1000 live points: compacted by the write that made them so.
    assert_eq!((c.read().count(), c.read().slots()), (1000, 1000));
    let probe = |s: &Store| {
        let (_, r) = call(
            s,
            "POST",
            "/v1/collections/c/search",
            json!({"vectors": [[5500.0, 5500.0 % 7.0, 5500.0 % 13.0, 1.0]], "k": 3}),
        );
        r["results"][0][0]["id"].clone()
    };
    assert_eq!(probe(&s), json!(5500));
    drop((c, s));
    let s = Store::open(&dir).unwrap();
    assert_eq!(s.get("c").unwrap().count(), 1000);
    assert_eq!(probe(&s), json!(5500));
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn points_written_while_training_runs_are_in_the_new_lists() {
    let dir = temp("bgtrain");
    let s = Store::open(&dir).unwrap();
    let (st, _) = call(&s, "PUT", "/v1/collections/t", json!({"dim": 16}));
    assert_eq!(st, 200);
    let c = s.get("t").unwrap();
    let vec_of = |id: u64| -> Vec<f32> {
        (0..16)
            .map(|j| ((id * 2654435761 + j * 40503) % 1000) as f32)
            .collect()
    };
    let mut during = 0;
    for b in 0..20u64 {
        let pts: Vec<Value> = (0..1000)
            .map(|i| json!({"id": b * 1000 + i, "vector": vec_of(b * 1000 + i)}))
            .collect();
        let training = c.read().nlist().is_none() && b >= 5;
        assert_eq!(
            call(
                &s,
                "POST",
                "/v1/collections/t/upsert",
                json!({ "points": pts })
            )
            .0,
            200
        );
        during += usize::from(training);
    }
    eprintln!("{during} batches acknowledged before the first lists were installed");
    c.wait_for_training();
    assert!(c.read().nlist().is_some());
    assert_eq!(c.count(), 20_000);
    // Every point, whichever training it was written during, is found as its own nearest.
    for id in (0..20_000u64).step_by(97) {
        let (_, r) = call(
            &s,
            "POST",
            "/v1/collections/t/search",
            json!({"vectors": [vec_of(id)], "k": 1}),
        );
        assert_eq!(
            r["results"][0][0]["distance"],
            json!(0.0),
            "point {id}: {r}"
        );
    }
    drop((c, s));
    std::fs::remove_dir_all(&dir).unwrap();
}
