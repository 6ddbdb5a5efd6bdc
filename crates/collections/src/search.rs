//! Search over a collection: an IVF-Flat kept in memory (k-means from `cohort_ivf`, trained
//! once the collection has `TRAIN_MIN` points and again when it has grown fourfold; new
//! points appended to their nearest list in place), or an exact scan, chosen per request.
//!
//! The plan under a filter: the filter is evaluated over the attribute columns first (one
//! pass), which gives the matching points and so the selectivity `s`. Probing `nprobe` of
//! `nlist` lists and keeping only matches finds about `s` times the candidates an unfiltered
//! search finds, so the IVF plan probes `nprobe / s` lists; it costs about
//! `n * nprobe / (nlist * s)` distances, the exact scan of the matches `n * s`: the exact scan
//! is chosen when `s * s <= nprobe / nlist`, or when at most `EXACT_PER_K * k` points match.
//! Recall then holds at every selectivity (tests/it/recall.rs measures it).

use crate::data::Data;
use crate::filter::Filter;
use crate::ivf::{index_vector, Ivf};
use crate::schema::Metric;
use cohort_ivf::kmeans::{self, KMeansConfig};
use cohort_ivf::metric::{dot, l2_sq};
use cohort_ivf::{Neighbor, TopK, Vectors};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::SeedableRng;
use rayon::prelude::*;

/// Points before the first k-means (below it every search is an exact scan).
pub const TRAIN_MIN: usize = 4096;
/// A retraining once the live points are this many times those of the last one.
pub(crate) const RETRAIN_GROWTH: usize = 4;
/// At most this many matches per k, the filtered plan scans them exactly.
const EXACT_PER_K: usize = 64;
/// Slots one rayon task scans.
const CHUNK: usize = 4096;
/// An exact search of at most this many floats of matching points (matches x dim) is
/// answered on the CPU even when a device is attached (`cpu_takes`): the device's exact plan
/// reads every slot's mask bit for each query, so its cost follows the collection's size,
/// while the CPU's gather of the matches follows their number. Measured on an H200 with 16
/// host cores (1M x 128, 64 queries a request): 1 000 matches, CPU 69.2 K q/s against the
/// device's 19.4 K; 10 000 matches, CPU 17.4 K against 19.7 K; the break-even is near 8 000
/// matches of 128 floats. This is half that (4 096 at dim 128), leaving the CPU's margin to
/// the server's other work.
pub const CPU_EXACT_FLOATS: usize = 1 << 19;
/// Slots a filter is tried on to estimate its matches before they are counted exactly.
pub const ESTIMATE_SLOTS: usize = 8192;

/// nprobe when the request names none: an eighth of the lists, at least 8.
pub fn default_nprobe(nlist: usize) -> usize {
    (nlist / 8).max(8).min(nlist)
}

pub fn needs_training(d: &Data) -> bool {
    match &d.ivf {
        None => d.live_count >= TRAIN_MIN,
        Some(ivf) => d.live_count >= RETRAIN_GROWTH * ivf.trained_at,
    }
}

/// Trains an IVF over the live points (k-means on a sample of at most 256 per list, as
/// FAISS does) and assigns every live point to its list. Reads `d` only: the caller installs
/// the result, with no write in between.
pub fn train(d: &Data) -> Ivf {
    let mut ivf = Trainer::sample(d).centroids();
    assign(&mut ivf, d, 0..d.slots());
    ivf
}

/// A training in steps, so that a collection can train without holding its lock: the sample
/// is copied under the read lock (`sample`), k-means runs on the copy with no lock
/// (`centroids`), the points are assigned under the read lock a chunk at a time (`assign`),
/// and the points written meanwhile under the write lock, which installs the lists. Slots are
/// append-only between compactions (the collection holds compaction off meanwhile), so an
/// assignment made early stays right.
pub struct Trainer {
    sample: Vectors,
    nlist: usize,
    live: usize,
    ip: bool,
}

impl Trainer {
    pub fn sample(d: &Data) -> Trainer {
        let live = d.live_slots();
        let nlist = ((live.len() as f64).sqrt() as usize)
            .clamp(16, 4096)
            .min(live.len().max(1));
        let mut rng = StdRng::seed_from_u64(0x1f);
        let want = (256 * nlist).min(live.len());
        let mut picks = sample(&mut rng, live.len(), want).into_vec();
        picks.sort_unstable();
        let mut data = Vec::with_capacity(want * d.dim);
        for &i in &picks {
            data.extend(index_vector(d.settings.metric, d.row(live[i] as usize)));
        }
        Trainer {
            sample: Vectors::new(d.dim, data),
            nlist,
            live: live.len(),
            ip: d.settings.metric == Metric::Ip,
        }
    }

    /// k-means on the sample: the lists, still empty.
    pub fn centroids(self) -> Ivf {
        let mut cfg = KMeansConfig::new(self.nlist);
        cfg.max_sample = self.sample.n;
        Ivf {
            nlist: self.nlist,
            dim: self.sample.dim,
            centroids: kmeans::train(&self.sample, &cfg).data,
            lists: vec![Vec::new(); self.nlist],
            trained_at: self.live,
            ip: self.ip,
        }
    }
}

/// Appends the live slots of `range` to their nearest lists (in parallel).
pub fn assign(ivf: &mut Ivf, d: &Data, range: std::ops::Range<usize>) {
    let metric = d.settings.metric;
    let lists: Vec<(u32, usize)> = range
        .into_par_iter()
        .filter(|&s| d.live[s])
        .map(|s| (s as u32, ivf.nearest(&index_vector(metric, d.row(s)))))
        .collect();
    for (s, c) in lists {
        ivf.lists[c].push(s);
    }
}

/// How a request was answered (reported for tests and diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Exact,
    Ivf { nprobe: usize },
}

/// A query prepared for the metric.
struct Query {
    v: Vec<f32>,
}

fn distance(d: &Data, metric: Metric, q: &Query, slot: usize) -> f32 {
    let row = d.row(slot);
    match metric {
        Metric::L2 => l2_sq(&q.v, row),
        Metric::Ip => -dot(&q.v, row),
        Metric::Cosine => 1.0 - dot(&q.v, row) * d.inv_norms[slot],
    }
}

fn merge(mut a: TopK, b: TopK) -> TopK {
    for n in b.into_sorted() {
        a.push(n.id, n.distance);
    }
    a
}

/// The plan of a search for k neighbours with the requested nprobe, given how many live
/// points the filter matches (`None`: no filter). The device runs the same plan
/// (`cohort-collections-gpu`).
pub fn plan(d: &Data, k: usize, nprobe: Option<usize>, matches: Option<usize>) -> Plan {
    let Some(ivf) = &d.ivf else {
        return Plan::Exact;
    };
    let nprobe = nprobe
        .unwrap_or_else(|| default_nprobe(ivf.nlist))
        .clamp(1, ivf.nlist);
    match matches {
        None => Plan::Ivf { nprobe },
        Some(matches) => {
            let s = matches as f64 / d.live_count.max(1) as f64;
            if matches <= EXACT_PER_K * k || s * s <= nprobe as f64 / ivf.nlist as f64 {
                Plan::Exact
            } else {
                let wide = (nprobe as f64 / s).ceil() as usize;
                Plan::Ivf {
                    nprobe: wide.clamp(1, ivf.nlist),
                }
            }
        }
    }
}

/// Whether a search of `matches` filtered points is the CPU's even with a device attached:
/// its plan is the exact scan of the matches, and they are few (`CPU_EXACT_FLOATS`).
pub fn cpu_takes(d: &Data, k: usize, nprobe: Option<usize>, matches: usize) -> bool {
    matches.saturating_mul(d.dim.max(1)) <= CPU_EXACT_FLOATS
        && plan(d, k, nprobe, Some(matches)) == Plan::Exact
}

/// Whether `f` may match few enough live points for `cpu_takes`, judged from at most
/// `ESTIMATE_SLOTS` slots picked by a fixed hash (not a stride: slot order follows the
/// writes, and an attribute may follow it too), with a margin of three standard deviations:
/// a filter this says no to matches more than the CPU's share with near certainty, one it
/// says yes to is counted exactly (`Data::matching_bits`) before the CPU takes it.
pub fn may_be_selective(d: &Data, f: &Filter) -> bool {
    let limit = CPU_EXACT_FLOATS / d.dim.max(1);
    let n = d.slots();
    if d.live_count <= limit || n <= ESTIMATE_SLOTS {
        return true; // every match fits, or the count is as cheap as the estimate
    }
    let c = f.compile(&d.cols);
    let (mut live, mut hits) = (0usize, 0usize);
    for i in 0..ESTIMATE_SLOTS as u64 {
        let s = (splitmix(i) % n as u64) as usize;
        if d.live[s] {
            live += 1;
            hits += c.matches(&d.cols, s) as usize;
        }
    }
    if live == 0 {
        return true; // too few live slots to tell: count them
    }
    let h = hits as f64;
    let upper = (h + 3.0 * h.sqrt() + 3.0) / live as f64 * d.live_count as f64;
    upper <= limit as f64
}

fn splitmix(i: u64) -> u64 {
    let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The query as the search compares it: normalised for cosine (`index_vector`).
pub fn prepared_query(metric: Metric, q: &[f32]) -> Vec<f32> {
    index_vector(metric, q)
}

/// The k nearest live points to each query (checked vectors), nearest first; `Neighbor::id`
/// is the slot.
pub fn search(
    d: &Data,
    queries: &[Vec<f32>],
    k: usize,
    nprobe: Option<usize>,
    filter: Option<&Filter>,
) -> (Vec<Vec<Neighbor>>, Plan) {
    let matched = filter.map(|f| d.matching_bits(f));
    search_matched(d, queries, k, nprobe, matched)
}

/// As `search`, with the filter already evaluated: its matching live slots as a bitset and
/// their count (`Data::matching_bits`), or None for no filter.
pub fn search_matched(
    d: &Data,
    queries: &[Vec<f32>],
    k: usize,
    nprobe: Option<usize>,
    matched: Option<(Vec<u64>, usize)>,
) -> (Vec<Vec<Neighbor>>, Plan) {
    let metric = d.settings.metric;
    let qs: Vec<Query> = queries
        .iter()
        .map(|q| Query {
            v: index_vector(metric, q),
        })
        .collect();
    let plan = plan(d, k, nprobe, matched.as_ref().map(|(_, n)| *n));
    let answers = match (plan, &matched) {
        (Plan::Exact, Some((bits, _))) => {
            let m = slots_of(bits);
            qs.par_iter()
                .map(|q| {
                    m.par_chunks(CHUNK)
                        .map(|ch| {
                            let mut t = TopK::new(k);
                            ch.iter()
                                .for_each(|&s| t.push(s, distance(d, metric, q, s as usize)));
                            t
                        })
                        .reduce(|| TopK::new(k), merge)
                        .into_sorted()
                })
                .collect()
        }
        (Plan::Exact, None) => qs
            .par_iter()
            .map(|q| {
                (0..d.slots().div_ceil(CHUNK))
                    .into_par_iter()
                    .map(|c| {
                        let mut t = TopK::new(k);
                        for s in c * CHUNK..((c + 1) * CHUNK).min(d.slots()) {
                            if d.live[s] {
                                t.push(s as u32, distance(d, metric, q, s));
                            }
                        }
                        t
                    })
                    .reduce(|| TopK::new(k), merge)
                    .into_sorted()
            })
            .collect(),
        (Plan::Ivf { nprobe }, m) => {
            let ivf = d.ivf.as_ref().expect("an IVF plan has lists");
            let allowed = m.as_ref().map(|(bits, _)| bits);
            // Lists in parallel too: a request of one query still uses every core.
            qs.par_iter()
                .map(|q| {
                    ivf.probe(&q.v, nprobe)
                        .par_iter()
                        .map(|&l| {
                            let mut t = TopK::new(k);
                            for &s in &ivf.lists[l] {
                                let s = s as usize;
                                let ok = match &allowed {
                                    Some(b) => b[s / 64] >> (s % 64) & 1 == 1,
                                    None => d.live[s],
                                };
                                if ok {
                                    t.push(s as u32, distance(d, metric, q, s));
                                }
                            }
                            t
                        })
                        .reduce(|| TopK::new(k), merge)
                        .into_sorted()
                })
                .collect()
        }
    };
    (answers, plan)
}

/// The slots a bitset holds, in order.
fn slots_of(bits: &[u64]) -> Vec<u32> {
    let mut out = Vec::new();
    for (w, &word) in bits.iter().enumerate() {
        let mut b = word;
        while b != 0 {
            out.push((w * 64) as u32 + b.trailing_zeros());
            b &= b - 1;
        }
    }
    out
}
