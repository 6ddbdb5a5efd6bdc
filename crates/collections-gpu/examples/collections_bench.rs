//! Live collections in process on one machine: durable ingest, filtered search on the GPU
//! beside the CPU at selectivities 100 / 50 / 10 / 1 / 0.1 % with recall@10 against exact
//! ground truth over the matching points, and the search rate while writes go on (95 %
//! searches / 5 % writes by operation), with recall after 20 % of the points were replaced
//! against a fresh rebuild's. No HTTP, no JSON: what the device and the host can give.
//!
//! cargo run --release -p cohort-collections-gpu --example collections_bench -- \
//!     N DIM THREADS OUT.json [COMMIT]
//! (on a GPU machine; without one it measures the CPU alone and says so)

use cohort_collections::accel::{Ran, SearchRequest};
use cohort_collections::data::Data;
use cohort_collections::filter::Filter;
use cohort_collections::ops::{Op, Point};
use cohort_collections::schema::AttrValue;
use cohort_collections::search;
use cohort_collections::{AttrType, Collection, Element, Metric, Settings};
use cohort_ivf::synth::{Model, SynthConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const K: usize = 10;
const BATCH: usize = 10_000;
const WINDOW: Duration = Duration::from_secs(2);

fn settings(dim: usize) -> Settings {
    let mut attributes = BTreeMap::new();
    attributes.insert("sel".to_string(), AttrType::Integer);
    Settings {
        dim,
        metric: Metric::L2,
        element: Element::F32,
        attributes,
    }
}

/// Points with ids `from..from + n`, their vectors drawn from stream `stream` (distinct per
/// call: the model draws whole blocks from a stream's start).
fn points(model: &Model, from: usize, n: usize, stream: u64, rng: &mut StdRng) -> Vec<Point> {
    let v = model.sample_rows(0, n, stream);
    (0..n)
        .map(|i| Point {
            id: (from + i) as u64,
            vector: v.row(i).to_vec(),
            // Uniform in 0..100 000: `sel < t` keeps t / 1000 per cent.
            attrs: vec![Some(AttrValue::Int(rng.gen_range(0..100_000)))],
        })
        .collect()
}

fn filter(s: &Settings, selectivity: f64) -> Option<Filter> {
    (selectivity < 1.0).then(|| {
        let t = (selectivity * 100_000.0).round() as i64;
        Filter::parse(&json!({"range": ["sel", {"lt": t}]}), s).unwrap()
    })
}

/// The true k nearest matching live points (a plain scan).
fn truth(d: &Data, q: &[f32], f: Option<&Filter>) -> Vec<u64> {
    let keep: Vec<u32> = match f {
        Some(f) => d.matching(f),
        None => d.live_slots(),
    };
    let mut t = cohort_ivf::TopK::new(K);
    for s in keep {
        t.push(s, cohort_ivf::metric::l2_sq(q, d.row(s as usize)));
    }
    t.into_sorted()
        .iter()
        .map(|n| d.id_of(n.id as usize))
        .collect()
}

fn recall(d: &Data, got: &[cohort_ivf::Neighbor], want: &[u64]) -> f64 {
    if want.is_empty() {
        return 1.0;
    }
    let hit = got
        .iter()
        .filter(|n| want.contains(&d.id_of(n.id as usize)))
        .count();
    hit as f64 / want.len() as f64
}

/// Queries a second from `threads` threads over WINDOW, batches of `batch`, on the device or
/// the CPU (`device`).
fn rate(
    c: &Collection,
    qs: &[Vec<f32>],
    batch: usize,
    f: Option<&Filter>,
    device: bool,
    threads: usize,
) -> f64 {
    let done = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for t in 0..threads {
            let done = &done;
            sc.spawn(move || {
                let mut i = t * 7;
                while t0.elapsed() < WINDOW {
                    let start = (i * batch) % (qs.len() - batch + 1);
                    let q = &qs[start..start + batch];
                    let d = c.read();
                    if device {
                        let r = SearchRequest {
                            queries: q,
                            k: K,
                            nprobe: None,
                            filter: f,
                        };
                        let (_, _, ran) = c.search_in(&d, &r);
                        assert_eq!(ran, Ran::Device, "a device search answered on the CPU");
                    } else {
                        search::search(&d, q, K, None, f);
                    }
                    done.fetch_add(batch as u64, Ordering::Relaxed);
                    i += 1;
                }
            });
        }
    });
    done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let dim: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(128);
    let threads: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(8);
    let out = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| "collections-bench.json".into());
    let commit = args.get(5).cloned().unwrap_or_default();
    let gpus = cohort_gpu::probe().unwrap_or_default();
    let factory = match gpus.first() {
        Some(g) => Some(
            cohort_collections_gpu::GpuFactory::open(std::slice::from_ref(g)).expect("GPU opens"),
        ),
        None => {
            eprintln!("no CUDA device: the CPU alone is measured");
            None
        }
    };
    let dir = std::env::temp_dir().join(format!("cohort-coll-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = settings(dim);
    let c = Arc::new(
        Collection::open_with(&dir, "bench", s.clone(), factory.as_ref().map(|f| f as _)).unwrap(),
    );
    let model = Model::new(SynthConfig::sift_like(dim, 7));
    let mut rng = StdRng::seed_from_u64(1);

    // 1. Durable ingest: writers each upserting batches, acknowledged once synced.
    let batches: Vec<Vec<Point>> = (0..n.div_ceil(BATCH))
        .map(|b| {
            points(
                &model,
                b * BATCH,
                BATCH.min(n - b * BATCH),
                10 + b as u64,
                &mut rng,
            )
        })
        .collect();
    let t0 = Instant::now();
    let next = AtomicU64::new(0);
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| loop {
                let b = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(batch) = batches.get(b) else { break };
                c.write(Op::Upsert(batch.clone())).unwrap();
            });
        }
    });
    let ingest_s = t0.elapsed().as_secs_f64();
    c.wait_for_training();
    let trained = t0.elapsed().as_secs_f64();
    let (records, writes) = c.commit_stats();
    eprintln!(
        "ingest: {n} vectors in {ingest_s:.1} s ({:.0}/s), trained by {trained:.1} s",
        n as f64 / ingest_s
    );
    let ingest = json!({"vectors": n, "batch": BATCH, "writers": threads, "seconds": ingest_s,
        "vectors_per_s": n as f64 / ingest_s, "log_records": records, "writes": writes,
        "seconds_until_trained": trained, "nlist": c.read().nlist()});

    // 2. Filtered search, device and CPU, with recall.
    let qv = model.sample(2048, 1);
    let qs: Vec<Vec<f32>> = (0..qv.n).map(|i| qv.row(i).to_vec()).collect();
    let mut rows = Vec::new();
    for sel in [1.0, 0.5, 0.1, 0.01, 0.001] {
        let f = filter(&s, sel);
        let d = c.read();
        let probe: &[Vec<f32>] = &qs[..100];
        let r = SearchRequest {
            queries: probe,
            k: K,
            nprobe: None,
            filter: f.as_ref(),
        };
        let (ans, plan, ran) = c.search_in(&d, &r);
        let mut rec = 0.0;
        for (q, a) in probe.iter().zip(&ans) {
            rec += recall(&d, a, &truth(&d, q, f.as_ref()));
        }
        let rec = rec / probe.len() as f64;
        drop(d);
        let mut row = json!({"selectivity": sel, "plan": format!("{plan:?}"), "recall_at_10": rec,
            "answered_on": format!("{ran:?}")});
        for batch in [1usize, 64, 1024] {
            if factory.is_some() {
                row[format!("device_qps_batch_{batch}")] =
                    json!(rate(&c, &qs, batch, f.as_ref(), true, threads));
            }
            if batch <= 64 {
                row[format!("cpu_qps_batch_{batch}")] =
                    json!(rate(&c, &qs, batch, f.as_ref(), false, threads));
            }
        }
        eprintln!("{row}");
        rows.push(row);
    }

    // 3. Mixed: searches (batches of 64 on the device, else 1 on the CPU) from all threads but
    // one, which writes: replacing points in batches of 100 and deleting some, until 20 % of
    // the points were replaced; the search rate beside the read-only rate.
    let on_device = factory.is_some();
    let batch = if on_device { 64 } else { 1 };
    let read_only = rate(&c, &qs, batch, None, on_device, threads - 1);
    let stop = AtomicBool::new(false);
    let searched = AtomicU64::new(0);
    let (mut wrote, mut deleted) = (0usize, 0usize);
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for t in 0..threads - 1 {
            let (stop, searched, c, qs) = (&stop, &searched, &c, &qs);
            sc.spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let start = (i * batch) % (qs.len() - batch + 1);
                    let d = c.read();
                    let r = SearchRequest {
                        queries: &qs[start..start + batch],
                        k: K,
                        nprobe: None,
                        filter: None,
                    };
                    c.search_in(&d, &r);
                    searched.fetch_add(batch as u64, Ordering::Relaxed);
                    i += 1;
                }
            });
        }
        let mut wrng = StdRng::seed_from_u64(2);
        while wrote < n / 5 {
            let from = wrng.gen_range(0..n - 100);
            let mut p = points(&model, from, 100, 1_000_000 + wrote as u64, &mut wrng);
            for (j, q) in p.iter_mut().enumerate() {
                q.id = (from + j) as u64;
            }
            c.write(Op::Upsert(p)).unwrap();
            wrote += 100;
            if wrote % 2000 == 0 {
                let ids: Vec<u64> = (0..20).map(|_| wrng.gen_range(0..n as u64)).collect();
                deleted += c.write(Op::DeleteIds(ids)).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let secs = t0.elapsed().as_secs_f64();
    let mixed_rate = searched.load(Ordering::Relaxed) as f64 / secs;
    // Recall of the live collection (lists grown in place since training) against a fresh
    // rebuild of the same live points.
    let d = c.read();
    let probe = &qs[..200];
    let r = SearchRequest {
        queries: probe,
        k: K,
        nprobe: None,
        filter: None,
    };
    let (live_ans, _, _) = c.search_in(&d, &r);
    let truths: Vec<Vec<u64>> = probe.iter().map(|q| truth(&d, q, None)).collect();
    let live_recall = live_ans
        .iter()
        .zip(&truths)
        .map(|(a, t)| recall(&d, a, t))
        .sum::<f64>()
        / probe.len() as f64;
    let mut fresh = Data::new(s.clone());
    let live: Vec<Point> = d
        .live_slots()
        .iter()
        .map(|&sl| d.get(d.id_of(sl as usize)).unwrap())
        .collect();
    fresh.apply(&Op::Upsert(live));
    let ivf = search::train(&fresh);
    fresh.set_ivf(ivf);
    let (fresh_ans, _) = search::search(&fresh, probe, K, None, None);
    let fresh_recall = fresh_ans
        .iter()
        .zip(&truths)
        .map(|(a, t)| recall(&fresh, a, t))
        .sum::<f64>()
        / probe.len() as f64;
    drop(d);
    let mixed = json!({"search_batch": batch, "search_threads": threads - 1,
        "read_only_qps": read_only, "mixed_qps": mixed_rate, "ratio": mixed_rate / read_only,
        "points_replaced": wrote, "deleted": deleted, "seconds": secs,
        "writes_per_s": (wrote + deleted) as f64 / secs,
        "recall_at_10_live": live_recall, "recall_at_10_fresh_rebuild": fresh_recall});
    eprintln!("mixed: {mixed}");
    let (on_dev, on_cpu) = c.search_stats();
    let doc: Value = json!({
        "what": "live collections in process: durable ingest, filtered search (device and CPU), mixed load",
        "machine": {"cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
                    "gpu": gpus.first().map(|g| g.name.clone())},
        "commit": commit,
        "command": args.join(" "),
        "n": n, "dim": dim, "k": K, "threads": threads,
        "ingest": ingest, "search": rows, "mixed": mixed,
        "searches_on_device": on_dev, "searches_on_cpu": on_cpu,
    });
    let tmp = format!("{out}.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    std::fs::rename(&tmp, &out).unwrap();
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}
