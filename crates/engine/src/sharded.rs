//! Counters and histograms that every request touches, kept per thread and summed when
//! `/metrics` is read.
//!
//! prometheus-client's `Histogram` takes a write lock for each observation and its `Counter`
//! is one atomic: with several engine lanes and ingress threads recording every request, each
//! observation moved the lock's cache line between cores. On two GPUs that made a control
//! thread's CPU per request 1.6x what it was on one, and more drivers made one GPU slower
//! (docs/gpu.md, "What caps gpu-cohort's host side"). Here each thread adds to a shard of its
//! own (a cache-line-aligned block; threads past `SHARDS` share one), so recording is a few
//! uncontended atomic adds; reading sums the shards.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Shards per metric: more than the threads that record on a busy server (ingress, lanes).
const SHARDS: usize = 32;

/// Most finite buckets a histogram may have.
pub const MAX_BUCKETS: usize = 31;

/// This thread's shard (assigned round robin at its first observation).
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.with(|m| {
        if m.get() == usize::MAX {
            m.set(NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
        }
        m.get()
    })
}

/// Adds `v` to an f64 kept as bits (uncontended: the shard is this thread's).
fn add_f64(a: &AtomicU64, v: f64) {
    let mut cur = a.load(Ordering::Relaxed);
    loop {
        let next = (f64::from_bits(cur) + v).to_bits();
        match a.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// One shard of a counter: a cache line (two, against adjacent-line prefetch) of its own.
#[repr(align(128))]
#[derive(Default)]
struct CounterShard(AtomicU64);

/// A monotonic counter (`cohort_requests`...), per-thread shards.
#[derive(Clone)]
pub struct ShardedCounter(Arc<[CounterShard; SHARDS]>);

impl Default for ShardedCounter {
    fn default() -> Self {
        ShardedCounter(Arc::new(std::array::from_fn(|_| CounterShard::default())))
    }
}

impl std::fmt::Debug for ShardedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShardedCounter({})", self.get())
    }
}

impl ShardedCounter {
    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn inc_by(&self, n: u64) {
        self.0[shard_index()].0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// One shard of a histogram: its bucket counts (the last one +Inf), count and sum.
#[repr(align(128))]
struct HistogramShard {
    buckets: [AtomicU64; MAX_BUCKETS + 1],
    count: AtomicU64,
    sum: AtomicU64,
}

impl Default for HistogramShard {
    fn default() -> Self {
        HistogramShard {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }
}

struct HistogramInner {
    /// Upper bounds of the finite buckets, increasing.
    bounds: Vec<f64>,
    shards: Box<[HistogramShard]>,
}

/// A histogram with fixed upper bounds (`cohort_request_duration_seconds`...), per-thread
/// shards.
#[derive(Clone)]
pub struct ShardedHistogram(Arc<HistogramInner>);

impl std::fmt::Debug for ShardedHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sum, count, _) = self.get();
        write!(f, "ShardedHistogram(count {count}, sum {sum})")
    }
}

impl ShardedHistogram {
    /// A histogram of the given finite upper bounds (increasing, at most `MAX_BUCKETS`).
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> ShardedHistogram {
        let bounds: Vec<f64> = bounds.into_iter().collect();
        assert!(bounds.len() <= MAX_BUCKETS, "{} buckets", bounds.len());
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "bucket bounds must increase"
        );
        let shards = (0..SHARDS).map(|_| HistogramShard::default()).collect();
        ShardedHistogram(Arc::new(HistogramInner { bounds, shards }))
    }

    pub fn observe(&self, v: f64) {
        let inner = &*self.0;
        let bucket = inner
            .bounds
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(inner.bounds.len());
        let s = &inner.shards[shard_index()];
        s.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        s.count.fetch_add(1, Ordering::Relaxed);
        add_f64(&s.sum, v);
    }

    /// (sum, count, per bucket (upper bound, count) with +Inf last) over every shard.
    pub fn get(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let inner = &*self.0;
        let mut buckets: Vec<(f64, u64)> = inner
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::MAX))
            .map(|b| (b, 0))
            .collect();
        let (mut sum, mut count) = (0.0, 0);
        for s in inner.shards.iter() {
            for (b, n) in buckets.iter_mut().zip(&s.buckets) {
                b.1 += n.load(Ordering::Relaxed);
            }
            count += s.count.load(Ordering::Relaxed);
            sum += f64::from_bits(s.sum.load(Ordering::Relaxed));
        }
        (sum, count, buckets)
    }
}

impl TypedMetric for ShardedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ShardedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.get();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

    #[test]
    fn a_sharded_histogram_encodes_as_prometheus_own_does() {
        let bounds: Vec<f64> = exponential_buckets(1e-6, 2.0, 25).collect();
        let (ours, theirs) = (
            ShardedHistogram::new(bounds.clone()),
            Histogram::new(bounds),
        );
        // Binary fractions (and one past the last bucket): their sum is exact in any order.
        let p = |e: i32| 2f64.powi(e);
        let values = [0.0, p(-20), 3.0 * p(-21), p(-8), 0.25, 1024.0, p(-14)];
        std::thread::scope(|s| {
            for chunk in values.chunks(2) {
                let ours = &ours;
                s.spawn(move || chunk.iter().for_each(|&v| ours.observe(v)));
            }
        });
        values.iter().for_each(|&v| theirs.observe(v));
        let text = |h: Box<dyn EncodeMetric + Send + Sync>| {
            let mut r = prometheus_client::registry::Registry::default();
            r.register("h", "h", BoxedMetric(h));
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &r).expect("encode");
            out
        };
        assert_eq!(text(Box::new(ours)), text(Box::new(theirs)));
    }

    #[test]
    fn a_sharded_counter_sums_every_thread() {
        let c = ShardedCounter::default();
        std::thread::scope(|s| {
            for _ in 0..40 {
                let c = &c;
                s.spawn(move || (0..1000).for_each(|_| c.inc()));
            }
        });
        c.inc_by(5);
        assert_eq!(c.get(), 40_005);
    }

    /// A boxed metric the registry accepts (it wants `Metric`: Debug + Send + Sync).
    struct BoxedMetric(Box<dyn EncodeMetric + Send + Sync>);

    impl std::fmt::Debug for BoxedMetric {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("boxed")
        }
    }

    impl EncodeMetric for BoxedMetric {
        fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
            self.0.encode(encoder)
        }

        fn metric_type(&self) -> MetricType {
            self.0.metric_type()
        }
    }
}
