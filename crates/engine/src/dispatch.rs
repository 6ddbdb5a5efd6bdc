//! How an ingress picks one lane of an engine for a request (see `IngressEnds::send`).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchPolicy {
    /// Lanes in turn; a full lane passes the request to the next one.
    RoundRobin,
    /// The lane whose request ring from this ingress holds the fewest messages; a full lane
    /// passes the request on.
    LeastLoaded,
    /// Lane chosen by request id, so a client can keep related requests together; a full
    /// lane answers OVERLOADED.
    KeyHash,
    /// The `hybrid` engine: lanes `0..gpu_lanes` are GPUs, the rest CPU workers. A request
    /// goes to the GPU lane with the shortest expected wait unless that wait exceeds
    /// `budget_us`; then to the CPU lane with the shortest one if it is shorter still. Waits
    /// come from measured answer rates ([`LaneRate`]), not from fixed queue thresholds.
    Hybrid { gpu_lanes: u16, budget_us: u32 },
}

impl std::str::FromStr for DispatchPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" | "rr" => Ok(DispatchPolicy::RoundRobin),
            "least-loaded" => Ok(DispatchPolicy::LeastLoaded),
            "key-hash" => Ok(DispatchPolicy::KeyHash),
            "hybrid" => {
                Err("hybrid dispatch comes with the hybrid engine (engine = \"hybrid\")".into())
            }
            _ => Err(format!(
                "unknown dispatch policy {s:?} (round-robin, least-loaded, key-hash)"
            )),
        }
    }
}

/// The name `from_str` reads (hybrid, which the hybrid engine sets itself, as "hybrid").
impl std::fmt::Display for DispatchPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DispatchPolicy::RoundRobin => "round-robin",
            DispatchPolicy::LeastLoaded => "least-loaded",
            DispatchPolicy::KeyHash => "key-hash",
            DispatchPolicy::Hybrid { .. } => "hybrid",
        })
    }
}

/// How fast one lane answers one ingress, measured over windows of at least [`RATE_WINDOW_NS`]
/// (several batches of a batching lane) and smoothed, so the wait a request sent there now
/// would see is outstanding / rate: Little's law, which holds for a batching GPU lane as for
/// a CPU worker, and needs no per-service threshold.
#[derive(Debug, Default, Clone)]
pub struct LaneRate {
    window_start_ns: u64,
    answered_at_start: u64,
    /// Answers per nanosecond; None until a window with work in it has been measured.
    per_ns: Option<f64>,
    /// Smoothed latency of the lane's answers (arrival at the ingress to answer read):
    /// what a request costs there even when nothing queues (a CPU worker's k-NN query).
    latency_ns: Option<f64>,
}

pub const RATE_WINDOW_NS: u64 = 10_000_000;
/// Weight of a new window in the smoothed rate (a few windows of memory).
const RATE_ALPHA: f64 = 0.3;
/// Weight of one answer in the smoothed latency (about the last hundred answers).
const LATENCY_ALPHA: f64 = 0.01;

impl LaneRate {
    /// Takes a sample when a window has passed. `answered` counts every answer the lane ever
    /// gave this ingress. An idle window (nothing owed, nothing answered) says nothing about
    /// the lane's speed and is skipped; a window in which it owed answers and gave none is a
    /// rate of zero (a stalled lane).
    pub fn update(&mut self, now_ns: u64, answered: u64, outstanding: usize) {
        if self.window_start_ns == 0 {
            // The first call opens the first window.
            self.window_start_ns = now_ns;
            self.answered_at_start = answered;
            return;
        }
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        if elapsed < RATE_WINDOW_NS {
            return;
        }
        let done = answered.saturating_sub(self.answered_at_start);
        if done > 0 || outstanding > 0 {
            let sample = done as f64 / elapsed as f64;
            self.per_ns = Some(match self.per_ns {
                // After a stalled window (rate 0: a batch longer than the window, a lane
                // that just started) the first window with answers is the measurement:
                // blended with the 0 it would understate the lane for several windows.
                None | Some(0.0) => sample,
                Some(old) => RATE_ALPHA * sample + (1.0 - RATE_ALPHA) * old,
            });
        }
        self.window_start_ns = now_ns;
        self.answered_at_start = answered;
    }

    /// One answer came back `latency_ns` after its request arrived.
    pub fn on_answer(&mut self, latency_ns: u64) {
        let l = latency_ns as f64;
        self.latency_ns = Some(match self.latency_ns {
            None => l,
            Some(old) => LATENCY_ALPHA * l + (1.0 - LATENCY_ALPHA) * old,
        });
    }

    /// Expected nanoseconds until a request sent now is answered: outstanding / rate
    /// (Little's law: the lane's queue now), and with `floor` at least the lane's recent
    /// answer latency (its cost even when nothing queues: a CPU worker's k-NN query). A GPU
    /// lane is judged without the floor: an idle GPU starts a batch at once, and a floor
    /// learnt while it was backlogged would never be refreshed if it kept the GPU unused. A
    /// lane never measured is assumed quick (so it gets measured); a lane that owes answers
    /// at a measured rate of zero is avoided.
    pub fn expected_wait_ns(&self, outstanding: usize, floor: bool) -> f64 {
        let queue = match (outstanding, self.per_ns) {
            (0, _) | (_, None) => 0.0,
            (o, Some(r)) if r > 0.0 => o as f64 / r,
            _ => f64::INFINITY,
        };
        if floor {
            queue.max(self.latency_ns.unwrap_or(0.0))
        } else {
            queue
        }
    }

    #[cfg(test)]
    fn per_second(&self) -> f64 {
        self.per_ns.unwrap_or(0.0) * 1e9
    }
}

/// The hybrid choice over lanes' expected waits (None = lane down): the quickest GPU lane
/// while it is within the budget, else the quickest CPU lane if quicker than that GPU lane.
/// None when every lane is down.
pub fn hybrid_choice(waits: &[Option<f64>], gpu_lanes: usize, budget_ns: f64) -> Option<usize> {
    let best = |range: std::ops::Range<usize>| {
        range
            .filter_map(|i| waits.get(i).copied().flatten().map(|w| (i, w)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    let gpu = best(0..gpu_lanes.min(waits.len()));
    let cpu = best(gpu_lanes.min(waits.len())..waits.len());
    match (gpu, cpu) {
        (Some((g, gw)), _) if gw <= budget_ns => Some(g),
        (Some((g, gw)), Some((c, cw))) => Some(if cw < gw { c } else { g }),
        (Some((g, _)), None) => Some(g),
        (None, c) => c.map(|c| c.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_follows_answers_and_skips_idle_windows() {
        let w = RATE_WINDOW_NS;
        let mut r = LaneRate::default();
        assert_eq!(r.expected_wait_ns(3, true), 0.0, "unmeasured: try it");
        r.update(1, 0, 0);
        r.update(w + 1, 10_000, 10); // 10000 answers in 10 ms = 1e6/s
        assert!((r.per_second() - 1e6).abs() < 1.0);
        assert_eq!(r.expected_wait_ns(0, false), 0.0, "nothing owed: no wait");
        // 10 owed at 1 answer/us: 10 us (Little's law).
        assert!((r.expected_wait_ns(10, false) - 10_000.0).abs() < 1e-6);
        r.update(w + 10, 20_000, 10);
        assert!(
            (r.per_second() - 1e6).abs() < 1.0,
            "a short window is no sample"
        );
        r.update(5 * w, 10_000, 0);
        assert!(
            (r.per_second() - 1e6).abs() < 1.0,
            "an idle window says nothing"
        );
        r.update(6 * w, 15_000, 5); // 5000 in 10 ms: smoothed toward 5e5
        let want = RATE_ALPHA * 5e5 + (1.0 - RATE_ALPHA) * 1e6;
        assert!((r.per_second() - want).abs() < 1.0, "{}", r.per_second());
        // A lane whose answers take 4 ms is a 4 ms wait even when idle.
        let mut slow = LaneRate::default();
        slow.on_answer(4_000_000);
        assert_eq!(slow.expected_wait_ns(0, true), 4e6);
        assert_eq!(
            slow.expected_wait_ns(0, false),
            0.0,
            "no floor: idle is no wait"
        );
        slow.on_answer(0);
        assert!((slow.expected_wait_ns(0, true) - 4e6 * (1.0 - LATENCY_ALPHA)).abs() < 1.0);
        let mut stalled = LaneRate::default();
        stalled.update(1, 0, 0);
        stalled.update(w + 1, 0, 4);
        assert!(
            stalled.expected_wait_ns(4, false).is_infinite(),
            "owing, answering nothing"
        );
    }

    #[test]
    fn hybrid_prefers_the_gpu_until_its_wait_breaks_the_budget() {
        let b = 1000.0;
        // GPU lanes 0, 1; CPU lanes 2, 3.
        assert_eq!(
            hybrid_choice(&[Some(500.0), Some(200.0), Some(0.0), Some(0.0)], 2, b),
            Some(1)
        );
        assert_eq!(
            hybrid_choice(
                &[Some(5000.0), Some(3000.0), Some(800.0), Some(400.0)],
                2,
                b
            ),
            Some(3)
        );
        // Over budget but the CPU is slower still: stay on the GPU.
        assert_eq!(
            hybrid_choice(&[Some(3000.0), Some(9000.0), Some(4000.0)], 2, b),
            Some(0)
        );
        // GPUs down: the CPU serves; everything down: nothing.
        assert_eq!(hybrid_choice(&[None, None, Some(7.0)], 2, b), Some(2));
        assert_eq!(hybrid_choice(&[None, None], 2, b), None);
        // No CPU lane: the GPU however long.
        assert_eq!(hybrid_choice(&[Some(1e9)], 1, b), Some(0));
    }
}
