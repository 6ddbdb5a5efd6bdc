//! The collection kernels compile (NVRTC, no GPU needed; CI requires it), and on a GPU the
//! device search answers as the CPU search does (`cohort_collections::search::search`, its
//! twin) through a history of writes: appends below and above the training size, a training,
//! replacements and deletes (by ids and by filter) that grow lists in place and past their
//! room, and a compaction, each synced to the device as the collection does before it
//! acknowledges; on fresh random inputs (the seed is printed), for every metric, with and
//! without filters at selectivities from none to all. A check that cannot run says so
//! (`SKIPPED ...`), which the GPU machine's script counts as a failure.

use cohort_collections::accel::{Accelerator, Ran, SearchRequest};
use cohort_collections::data::Data;
use cohort_collections::filter::Filter;
use cohort_collections::ops::{Op, Point};
use cohort_collections::schema::AttrValue;
use cohort_collections::search::{self, Plan};
use cohort_collections::{AttrType, Collection, Element, Metric, Settings};
use cohort_collections_gpu::{kernels, Device, GpuCollection, GpuFactory};
use cohort_gpu::{probe, report_skip, DeviceInfo};
use cohort_ivf::Neighbor;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

#[test]
fn collection_kernels_compile_for_sm90_through_nvrtc() {
    cohort_gpu::kernel_check::every_kernel_compiles("collections", &[kernels::source()], &[]);
}

fn first_gpu(check: &str) -> Option<DeviceInfo> {
    match probe() {
        Ok(d) if !d.is_empty() => Some(d[0].clone()),
        Ok(_) => {
            report_skip(check, "no CUDA device");
            None
        }
        Err(e) => {
            report_skip(check, &e.to_string());
            None
        }
    }
}

fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {s}");
    s
}

const DIM: usize = 24;

fn settings(metric: Metric) -> Settings {
    let mut attributes = BTreeMap::new();
    attributes.insert("color".to_string(), AttrType::Keyword);
    attributes.insert("n".to_string(), AttrType::Integer);
    attributes.insert("price".to_string(), AttrType::Float);
    Settings {
        dim: DIM,
        metric,
        element: Element::F32,
        attributes,
    }
}

const COLORS: [&str; 5] = ["red", "green", "blue", "cyan", "black"];

/// Clustered points (so that IVF lists differ in length), attributes sometimes missing.
fn point(rng: &mut StdRng, id: u64) -> Point {
    let centre = rng.gen_range(0..8) as f32;
    let vector = (0..DIM)
        .map(|j| centre * ((j % 3) as f32 - 1.0) + rng.gen_range(-1.0f32..1.0))
        .collect();
    let attr = |rng: &mut StdRng, v: AttrValue| rng.gen_bool(0.9).then_some(v);
    let color = AttrValue::Keyword(COLORS[rng.gen_range(0..COLORS.len())].to_string());
    let n = AttrValue::Int(rng.gen_range(-50..50));
    let price = AttrValue::Float(rng.gen_range(0.0..100.0f64).round() / 4.0);
    Point {
        id,
        vector,
        attrs: vec![attr(rng, color), attr(rng, n), attr(rng, price)],
    }
}

fn upsert(d: &mut Data, rng: &mut StdRng, n: usize, ids: std::ops::Range<u64>) {
    let mut seen = std::collections::HashSet::new();
    let ids: Vec<u64> = (0..n)
        .map(|_| rng.gen_range(ids.clone()))
        .filter(|id| seen.insert(*id))
        .collect();
    let points: Vec<Point> = ids.into_iter().map(|id| point(rng, id)).collect();
    d.apply(&Op::Upsert(points));
}

/// Filters from none to all of the points, over every attribute type and combinator.
fn filters(s: &Settings) -> Vec<Option<Filter>> {
    let f = |v: serde_json::Value| Some(Filter::parse(&v, s).expect("a valid filter"));
    vec![
        None,
        f(json!({"eq": ["color", "red"]})),
        f(json!({"eq": ["color", "mauve"]})), // no point has it: nothing matches
        f(json!({"in": ["n", [-3, 0, 7, 11, 49]]})),
        f(json!({"in": ["price", [0.25, 10.0, 24.5]]})),
        f(json!({"range": ["price", {"gte": 5.0, "lt": 7.5}]})),
        f(json!({"range": ["n", {"gt": -50, "lte": 40}]})),
        f(json!({"not": {"eq": ["color", "blue"]}})),
        f(
            json!({"all": [{"any": [{"eq": ["color", "red"]}, {"range": ["n", {"lt": -30}]}]},
                          {"not": {"range": ["price", {"gt": 20}]}}]}),
        ),
        f(json!({"all": []})),
        f(json!({"any": []})),
        f(json!({"any": [{"range": ["n", {"gte": 49}]}, {"in": ["color", ["cyan"]]}]})),
    ]
}

const TOL: f32 = 1e-4;

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= TOL * a.abs().max(b.abs()).max(1.0)
}

/// The same neighbours: distances agree place by place, ids wherever the distance is not a
/// near-tie with a neighbour's (near-ties may swap between float summation orders).
fn agree(gpu: &[Neighbor], cpu: &[Neighbor]) -> Result<(), String> {
    if gpu.len() != cpu.len() {
        return Err(format!(
            "{} neighbours on the device, {} on the CPU",
            gpu.len(),
            cpu.len()
        ));
    }
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        if !close(g.distance, c.distance) {
            return Err(format!(
                "place {i}: distance {} on the device, {} on the CPU",
                g.distance, c.distance
            ));
        }
        let tied = |j: usize| cpu.get(j).is_some_and(|o| close(o.distance, c.distance));
        if g.id != c.id && !(i > 0 && tied(i - 1)) && !tied(i + 1) {
            return Err(format!(
                "place {i}: slot {} on the device, {} on the CPU",
                g.id, c.id
            ));
        }
    }
    Ok(())
}

/// Every filter, k and nprobe: the device's answers and plan against the CPU's.
fn compare(acc: &GpuCollection, d: &Data, rng: &mut StdRng, stage: &str) -> usize {
    let queries: Vec<Vec<f32>> = (0..9).map(|i| point(rng, i).vector).collect();
    let mut checked = 0;
    for f in filters(&d.settings) {
        for (k, nprobe) in [(1, None), (10, None), (10, Some(3)), (100, Some(1000))] {
            let r = SearchRequest {
                queries: &queries,
                k,
                nprobe,
                filter: f.as_ref(),
            };
            let (gpu, gplan) = acc
                .search(d, &r)
                .unwrap_or_else(|e| panic!("{stage}: device search failed: {e}"))
                .unwrap_or_else(|| panic!("{stage}: the device declined k={k}"));
            let (cpu, cplan) = search::search(d, &queries, k, nprobe, f.as_ref());
            assert_eq!(gplan, cplan, "{stage}: plans differ for {f:?} k={k}");
            for (q, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
                agree(g, c).unwrap_or_else(|e| {
                    panic!("{stage}: query {q}, filter {f:?}, k={k}, nprobe {nprobe:?}: {e}")
                });
                checked += 1;
            }
        }
    }
    checked
}

fn sync(acc: &GpuCollection, d: &mut Data) {
    let killed = d.take_killed();
    acc.sync(d, &killed).expect("device sync");
}

#[test]
fn device_search_matches_the_cpu_through_writes() {
    let Some(info) = first_gpu("collections: device search vs CPU") else {
        return;
    };
    let dev = Device::open(info).expect("device opens");
    let mut rng = StdRng::seed_from_u64(seed());
    for metric in [Metric::L2, Metric::Ip, Metric::Cosine] {
        let s = settings(metric);
        let mut d = Data::new(s.clone());
        let acc = GpuCollection::new(dev.clone());
        sync(&acc, &mut d);
        let mut n = compare(&acc, &d, &mut rng, "empty");
        upsert(&mut d, &mut rng, 3000, 0..4000);
        sync(&acc, &mut d);
        n += compare(&acc, &d, &mut rng, "exact plan");
        upsert(&mut d, &mut rng, 6000, 0..12_000);
        sync(&acc, &mut d);
        assert!(search::needs_training(&d));
        let ivf = search::train(&d);
        d.set_ivf(ivf);
        sync(&acc, &mut d);
        n += compare(&acc, &d, &mut rng, "trained");
        // Small groups of writes, each synced as a commit group is: lists grow in place,
        // then past their room.
        for round in 0..6 {
            upsert(&mut d, &mut rng, 200 + 400 * round, 0..12_000);
            let doomed: Vec<u64> = (0..150).map(|_| rng.gen_range(0..12_000)).collect();
            d.apply(&Op::DeleteIds(doomed));
            sync(&acc, &mut d);
        }
        let f = Filter::parse(&json!({"eq": ["color", "green"]}), &s).unwrap();
        d.apply(&Op::DeleteFilter(f, String::new()));
        sync(&acc, &mut d);
        n += compare(&acc, &d, &mut rng, "after writes");
        d.compact();
        sync(&acc, &mut d);
        n += compare(&acc, &d, &mut rng, "compacted");
        eprintln!("{metric:?}: {n} queries agree with the CPU");
    }
}

/// Through the collection's own commit path (log, apply, device sync, acknowledgement): a
/// search after each acknowledgement runs on the device and sees the write.
#[test]
fn acknowledged_writes_are_seen_by_device_searches() {
    let Some(info) = first_gpu("collections: read-your-writes on the device") else {
        return;
    };
    let factory = GpuFactory::open(&[info]).expect("device opens");
    let dir = std::env::temp_dir().join(format!("cohort-gpu-ryw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = settings(Metric::L2);
    let c = Arc::new(Collection::open_with(&dir, "ryw", s.clone(), Some(&factory)).unwrap());
    assert!(c.device().is_some());
    let mut rng = StdRng::seed_from_u64(seed());
    let batch: Vec<Point> = (0..6000).map(|i| point(&mut rng, i)).collect();
    c.write(Op::Upsert(batch)).unwrap();
    c.wait_for_training();
    for i in 0..300u64 {
        let id = 10_000 + i % 50; // replaced again and again
        let p = point(&mut rng, id);
        let v = p.vector.clone();
        c.write(Op::Upsert(vec![p])).unwrap();
        let d = c.read();
        let q = [v];
        let r = SearchRequest {
            queries: &q,
            k: 1,
            nprobe: None,
            filter: None,
        };
        let (ans, plan, ran) = c.search_in(&d, &r);
        assert_eq!(ran, Ran::Device, "write {i}: answered on the CPU");
        let hit = ans[0][0];
        assert!(
            hit.distance < 1e-3,
            "write {i}: nearest at {} ({plan:?})",
            hit.distance
        );
        assert_eq!(
            d.id_of(hit.id as usize),
            id,
            "write {i}: another point nearest"
        );
        drop(d);
        if i % 7 == 0 {
            c.write(Op::DeleteIds(vec![id])).unwrap();
            let d = c.read();
            let (ans, _, ran) = c.search_in(&d, &r);
            assert_eq!(ran, Ran::Device);
            assert!(
                ans[0].iter().all(|n| d.id_of(n.id as usize) != id),
                "write {i}: a deleted point answered"
            );
        }
    }
    c.wait_for_training();
    let (on_device, on_cpu) = c.search_stats();
    assert_eq!(
        on_cpu, 0,
        "{on_device} searches on the device, {on_cpu} on the CPU"
    );
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Requests the device does not take (k over its limit) are answered on the CPU, the same.
#[test]
fn requests_over_the_device_limits_fall_back_to_the_cpu() {
    let Some(info) = first_gpu("collections: CPU fallback") else {
        return;
    };
    let dev = Device::open(info).expect("device opens");
    let mut rng = StdRng::seed_from_u64(seed());
    let mut d = Data::new(settings(Metric::L2));
    upsert(&mut d, &mut rng, 500, 0..1000);
    let acc = GpuCollection::new(dev);
    sync(&acc, &mut d);
    let q = vec![point(&mut rng, 0).vector];
    let r = SearchRequest {
        queries: &q,
        k: kernels::MAX_K + 1,
        nprobe: None,
        filter: None,
    };
    assert!(acc.search(&d, &r).unwrap().is_none());
    let r = SearchRequest {
        queries: &q,
        k: kernels::MAX_K,
        nprobe: None,
        filter: None,
    };
    let (gpu, plan) = acc.search(&d, &r).unwrap().unwrap();
    assert_eq!(plan, Plan::Exact);
    let (cpu, _) = search::search(&d, &q, kernels::MAX_K, None, None);
    agree(&gpu[0], &cpu[0]).unwrap();
}
