//! Where a search runs with a device attached: an exact search of few matching points
//! (`search::CPU_EXACT_FLOATS`) on the CPU, whose gather of the matches beats the device's
//! scan of every slot's mask; everything else on the device. The decision is tested on the
//! planning functions, then through a collection with a stand-in device that answers as the
//! CPU does and counts what it was given.

use cohort_collections::accel::{Accelerator, AcceleratorFactory, Ran, SearchRequest};
use cohort_collections::data::Data;
use cohort_collections::filter::Filter;
use cohort_collections::ops::{Op, Point};
use cohort_collections::schema::AttrValue;
use cohort_collections::search::{self, Plan, CPU_EXACT_FLOATS};
use cohort_collections::{AttrType, Collection, Element, Metric, Settings};
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::Neighbor;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const N: usize = 20_000;
const DIM: usize = 128;
/// Matches the CPU takes at this dimension: 4096.
const LIMIT: usize = CPU_EXACT_FLOATS / DIM;

fn settings() -> Settings {
    let mut attributes = BTreeMap::new();
    attributes.insert("sel".to_string(), AttrType::Integer);
    Settings {
        dim: DIM,
        metric: Metric::L2,
        element: Element::F32,
        attributes,
    }
}

/// N points, `sel` = id % 1000 (so `sel < t` keeps t per mille), ids in slot order: an
/// attribute that follows the slot order, which a strided sample would misjudge.
fn points() -> Vec<Point> {
    let base = Model::new(SynthConfig::sift_like(DIM, 4)).sample(N, 0);
    (0..N)
        .map(|i| Point {
            id: i as u64,
            vector: base.row(i).to_vec(),
            attrs: vec![Some(AttrValue::Int((i % 1000) as i64))],
        })
        .collect()
}

fn below(s: &Settings, t: i64) -> Filter {
    Filter::parse(&json!({"range": ["sel", {"lt": t}]}), s).unwrap()
}

fn trained() -> Data {
    let mut d = Data::new(settings());
    d.apply(&Op::Upsert(points()));
    let ivf = search::train(&d);
    d.set_ivf(ivf);
    d
}

#[test]
fn the_cpu_takes_exact_searches_of_few_matches_only() {
    let d = trained();
    let s = &d.settings;
    assert_eq!(LIMIT, 4096);
    // The count decides: up to the limit, exact plans only.
    assert!(search::cpu_takes(&d, 10, None, 0));
    assert!(search::cpu_takes(&d, 10, None, LIMIT));
    assert!(!search::cpu_takes(&d, 10, None, LIMIT + 1));
    // 4000 of 20 000 match (20 %): exact at the default nprobe, but an IVF plan with one
    // list probed (s^2 = 0.04 > 1/nlist, and more than 64 k): not the CPU's then.
    assert_eq!(search::plan(&d, 10, None, Some(4000)), Plan::Exact);
    assert!(search::cpu_takes(&d, 10, None, 4000));
    assert!(matches!(
        search::plan(&d, 10, Some(1), Some(4000)),
        Plan::Ivf { .. }
    ));
    assert!(!search::cpu_takes(&d, 10, Some(1), 4000));
    // The sample's estimate: 0.1 % and 10 % may be selective (then they are counted), 30 %
    // (6 000 matches) and 50 % are not.
    for (t, may) in [(1, true), (100, true), (300, false), (500, false)] {
        let f = below(s, t);
        assert_eq!(search::may_be_selective(&d, &f), may, "sel < {t}");
        let (_, n) = d.matching_bits(&f);
        assert_eq!(n, N * t as usize / 1000);
        assert_eq!(search::cpu_takes(&d, 10, None, n), may, "sel < {t}");
    }
    // A small collection: whatever matches fits, so every filter is counted.
    let mut small = Data::new(settings());
    small.apply(&Op::Upsert(points()[..LIMIT].to_vec()));
    assert!(search::may_be_selective(&small, &below(s, 1000)));
}

/// A stand-in device: answers as the CPU does, counting the searches it took.
struct Twin {
    searches: Arc<AtomicUsize>,
}

impl Accelerator for Twin {
    fn name(&self) -> String {
        "a twin of the CPU".into()
    }
    fn sync(&self, _d: &Data, _killed: &[u32]) -> Result<(), String> {
        Ok(())
    }
    #[allow(clippy::type_complexity)]
    fn search(
        &self,
        d: &Data,
        r: &SearchRequest<'_>,
    ) -> Result<Option<(Vec<Vec<Neighbor>>, Plan)>, String> {
        self.searches.fetch_add(1, Ordering::SeqCst);
        Ok(Some(search::search(d, r.queries, r.k, r.nprobe, r.filter)))
    }
}

struct Factory(Arc<AtomicUsize>);

impl AcceleratorFactory for Factory {
    fn attach(&self, _c: &str, _s: &Settings) -> Result<Box<dyn Accelerator>, String> {
        Ok(Box::new(Twin {
            searches: self.0.clone(),
        }))
    }
}

#[test]
fn a_collection_sends_selective_exact_searches_to_the_cpu() {
    let dir = std::env::temp_dir().join(format!("cohort-selective-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let on_device = Arc::new(AtomicUsize::new(0));
    let f = Factory(on_device.clone());
    let c = Arc::new(Collection::open_with(&dir, "c", settings(), Some(&f)).unwrap());
    let all = points();
    for batch in all.chunks(10_000) {
        c.write(Op::Upsert(batch.to_vec())).unwrap();
    }
    c.wait_for_training();
    let s = settings();
    let q: Vec<Vec<f32>> = vec![all[17].vector.clone(), all[4242].vector.clone()];
    let ask = |filter: Option<&Filter>| {
        let r = SearchRequest {
            queries: &q,
            k: 10,
            nprobe: None,
            filter,
        };
        let d = c.read();
        let (got, plan, ran) = c.search(&d, &r).unwrap();
        // The same answers and plan wherever it ran.
        assert_eq!((got, plan), search::search(&d, &q, 10, None, filter));
        ran
    };
    let (narrow, tenth, wide) = (below(&s, 1), below(&s, 100), below(&s, 500));
    assert_eq!(ask(Some(&narrow)), Ran::Cpu, "0.1 %: 20 matches");
    assert_eq!(ask(Some(&tenth)), Ran::Cpu, "10 %: 2 000 matches");
    assert_eq!(ask(Some(&wide)), Ran::Device, "50 %: an IVF plan");
    assert_eq!(ask(None), Ran::Device, "no filter");
    assert_eq!(on_device.load(Ordering::SeqCst), 2);
    assert_eq!(c.search_stats(), (2, 2));
    assert_eq!(c.selective_on_cpu(), 2);
    // search_in still gives the device everything it takes (benchmarks of the device).
    let d = c.read();
    let r = SearchRequest {
        queries: &q,
        k: 10,
        nprobe: None,
        filter: Some(&narrow),
    };
    assert_eq!(c.search_in(&d, &r).2, Ran::Device);
    drop(d);
    drop(c);
    // Without a device everything is the CPU's, none of it counted as sent there.
    let c = Collection::open(&dir, "c", settings()).unwrap();
    let d = c.read();
    let r = SearchRequest {
        queries: &q,
        k: 10,
        nprobe: None,
        filter: Some(&wide),
    };
    assert_eq!(c.search(&d, &r).unwrap().2, Ran::Cpu);
    drop(d);
    assert_eq!((c.search_stats(), c.selective_on_cpu()), ((0, 1), 0));
    std::fs::remove_dir_all(&dir).unwrap();
}
