//! Filtered search on the CPU: throughput and recall@10 at each selectivity, one query a
//! request (as the REST route runs them, without HTTP and JSON), over SIFT-like vectors.
//!
//! cargo run --release -p cohort-collections --example filtered_search -- [N] [DIM] [QUERIES]

use cohort_collections::data::Data;
use cohort_collections::filter::Filter;
use cohort_collections::ops::{Op, Point};
use cohort_collections::schema::AttrValue;
use cohort_collections::search::{self, Plan};
use cohort_collections::{AttrType, Element, Metric, Settings};
use cohort_ivf::synth::{Model, SynthConfig};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::HashSet;
use std::time::Instant;

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (n, dim, nq) = (arg(1, 100_000), arg(2, 128), arg(3, 200));
    let settings = Settings {
        dim,
        metric: Metric::L2,
        element: Element::F32,
        attributes: [("sel".to_string(), AttrType::Integer)]
            .into_iter()
            .collect(),
    };
    let model = Model::new(SynthConfig::sift_like(dim, 3));
    let base = model.sample(n, 0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let mut d = Data::new(settings);
    let t = Instant::now();
    d.apply(&Op::Upsert(
        (0..n)
            .map(|i| Point {
                id: i as u64,
                vector: base.row(i).to_vec(),
                attrs: vec![Some(AttrValue::Int(rng.gen_range(0..10_000)))],
            })
            .collect(),
    ));
    let ivf = search::train(&d);
    let nlist = ivf.nlist;
    d.set_ivf(ivf);
    println!(
        "{n} x {dim}: inserted and trained (nlist {nlist}) in {:.1} s; {} threads",
        t.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    let q = model.sample(nq, 1);
    let qs: Vec<Vec<f32>> = (0..nq).map(|i| q.row(i).to_vec()).collect();
    println!("| selectivity | plan | queries/s (one a request) | recall@10 |");
    println!("| --- | --- | --- | --- |");
    for per_10k in [10_000, 5_000, 1_000, 100, 10] {
        let f = (per_10k < 10_000).then(|| {
            Filter::parse(&json!({"range": ["sel", {"lt": per_10k}]}), &d.settings).unwrap()
        });
        // Ground truth: an exact scan of the matches (the search with every list probed).
        let truth: Vec<HashSet<u32>> = qs
            .iter()
            .map(|q| {
                let (r, _) = search::search(
                    &d,
                    std::slice::from_ref(q),
                    10,
                    Some(usize::MAX),
                    f.as_ref(),
                );
                r[0].iter().map(|x| x.id).collect()
            })
            .collect();
        let t = Instant::now();
        let mut plan = Plan::Exact;
        let mut hits = 0usize;
        let mut total = 0usize;
        for (q, want) in qs.iter().zip(&truth) {
            let (r, p) = search::search(&d, std::slice::from_ref(q), 10, None, f.as_ref());
            plan = p;
            hits += r[0].iter().filter(|x| want.contains(&x.id)).count();
            total += want.len();
        }
        let qps = nq as f64 / t.elapsed().as_secs_f64();
        println!(
            "| {}% | {plan:?} | {qps:.0} | {:.4} |",
            per_10k as f64 / 100.0,
            hits as f64 / total.max(1) as f64
        );
    }
}
