//! Where a gpu-persistent request's microseconds go (`profile = N`): the GPU stamps the first
//! N answered requests at each step with %globaltimer (kernels/persistent.cuh, `P_PROF_*`), the
//! egress thread notes when it read each answer (host clock), and the ingress warp charges its
//! SM cycles to phases. This file joins the two sides and reduces them to percentiles.
//!
//! The two clocks are never compared: intervals are taken within one clock (GPU stamps with
//! GPU stamps, host with host), and what the GPU did not see of the host round trip (the RX
//! write becoming visible and polled, the answer's seq crossing back and being polled) is the
//! difference of the two totals.

use super::rt::{
    PROF_REC, STATS, STAT_CLK_CYC, STAT_CLK_NS, STAT_CYC_FIRST, STAT_PROF_N, STAT_TAKEN,
    STAT_VISITS,
};
use serde::Serialize;
use std::collections::HashMap;

/// One interval's distribution over the profiled requests, in microseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Interval {
    pub name: &'static str,
    pub what: &'static str,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

/// One phase of the ingress warp's time.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Phase {
    pub name: &'static str,
    /// Fraction of the cycles the ingress warps charged to phases (summed over the warps).
    pub share: f64,
    /// Nanoseconds per request taken (the warp's cost of a request in this phase).
    pub ns_per_request: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IngressBudget {
    /// The SM clock the warp ran at (cycles over %globaltimer ns of its lifetime).
    pub sm_clock_mhz: f64,
    pub lifetime_ms: f64,
    pub requests: u64,
    pub visits: u64,
    pub requests_per_visit: f64,
    pub phases: Vec<Phase>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Profile {
    /// Requests with every stamp on both sides (answered without error).
    pub requests: usize,
    /// Answers stamped on the GPU beyond the log's capacity (not in the figures).
    pub beyond_log: u64,
    /// The smallest nonzero step between two GPU stamps seen: %globaltimer's resolution here.
    pub globaltimer_step_ns: u64,
    pub intervals: Vec<Interval>,
    pub ingress: IngressBudget,
}

/// The egress thread's side of one answer: when its request arrived at the host ingress and
/// when the answer was read from the TX ring (both `cohort_engine::clock` ns).
#[derive(Debug, Clone, Copy)]
pub struct HostStamp {
    pub arrived: u64,
    pub read: u64,
}

const PHASES: [&str; 7] = [
    "idle polls and back-off",
    "polls that found requests (+ acquire fence)",
    "free-slot pops",
    "copying requests over the bus",
    "publishing the RX tail, routes",
    "service checks (service_accept)",
    "gpipe push to the first stage",
];

/// Joins the GPU log (`PROF_REC` u64 per record) with the host stamps keyed by (request id,
/// route), and reads the ingress phase counters.
pub fn reduce(log: &[u64], host: &HashMap<(u64, u64), HostStamp>, stats: &[u64; STATS]) -> Profile {
    let claimed = stats[STAT_PROF_N] as usize;
    let recs = log.len() / PROF_REC;
    let n = claimed.min(recs);
    // [ring_to_ring, gpu, bus, copy, accept, queue, work, last, tx]
    let mut cols: Vec<Vec<i64>> = (0..9).map(|_| Vec::with_capacity(n)).collect();
    let mut step = u64::MAX;
    for r in log.chunks_exact(PROF_REC).take(n) {
        let (id, route) = (r[0], r[1]);
        let [seen, copied, queued, first, last, begun, commit] =
            [r[2], r[3], r[4], r[5], r[6], r[7], r[8]];
        // Requests refused by the service's checks have no pops: not part of the path.
        if [seen, copied, queued, first, last, begun, commit].contains(&0) {
            continue;
        }
        let Some(h) = host.get(&(id, route)) else {
            continue;
        };
        let d = |a: u64, b: u64| b as i64 - a as i64;
        for (a, b) in [
            (seen, copied),
            (copied, queued),
            (queued, first),
            (begun, commit),
        ] {
            if b > a {
                step = step.min(b - a);
            }
        }
        let rtt = d(h.arrived, h.read);
        let gpu = d(seen, commit);
        for (c, v) in cols.iter_mut().zip([
            rtt,
            gpu,
            rtt - gpu,
            d(seen, copied),
            d(copied, queued),
            d(queued, first),
            d(first, last),
            d(last, begun),
            d(begun, commit),
        ]) {
            c.push(v);
        }
    }
    const NAMES: [(&str, &str); 9] = [
        ("ring_to_ring", "host: request at the RX ring -> its answer read from TX (the goal's round trip)"),
        ("gpu_resident", "GPU: ingress poll saw it -> answer's seq stored"),
        ("bus_and_polling", "ring_to_ring - gpu_resident: RX write seen by a poll + TX seq seen by the egress thread"),
        ("ingress_copy", "GPU: seen -> copied into a slot, RX tail published (includes the rest of its run)"),
        ("ingress_accept", "GPU: copied -> checked and queued (service_accept of its run)"),
        ("queue_wait", "GPU: queued -> a first-stage worker popped it"),
        ("work_to_last_stage", "GPU: first pop -> last pop (k-NN: filter + search; micro: 0)"),
        ("last_stage", "GPU: last pop -> TX slot reserved (k-NN: reduce; spin: the spin)"),
        ("tx_write", "GPU: TX reserved -> answer written and its seq stored"),
    ];
    let intervals = NAMES
        .iter()
        .zip(cols.iter_mut())
        .map(|(&(name, what), c)| summarize(name, what, c))
        .collect();
    let requests = cols[0].len();
    Profile {
        requests,
        beyond_log: (claimed as u64).saturating_sub(recs as u64),
        globaltimer_step_ns: if step == u64::MAX { 0 } else { step },
        intervals,
        ingress: budget(stats),
    }
}

fn summarize(name: &'static str, what: &'static str, c: &mut [i64]) -> Interval {
    c.sort_unstable();
    let q = |p: f64| {
        if c.is_empty() {
            0.0
        } else {
            c[((c.len() - 1) as f64 * p).round() as usize] as f64 / 1e3
        }
    };
    let mean = if c.is_empty() {
        0.0
    } else {
        c.iter().sum::<i64>() as f64 / c.len() as f64 / 1e3
    };
    Interval {
        name,
        what,
        p50_us: q(0.5),
        p90_us: q(0.9),
        p99_us: q(0.99),
        mean_us: mean,
    }
}

fn budget(stats: &[u64; STATS]) -> IngressBudget {
    let cyc = stats[STAT_CLK_CYC] as f64;
    let ns = stats[STAT_CLK_NS] as f64;
    let ghz = if ns > 0.0 { cyc / ns } else { 0.0 };
    let requests = stats[STAT_TAKEN];
    // The phase counters are summed over every ingress warp; the lifetime clock is one warp's.
    let charged: f64 = (0..PHASES.len())
        .map(|i| stats[STAT_CYC_FIRST + i] as f64)
        .sum();
    let phases = PHASES
        .iter()
        .enumerate()
        .map(|(i, &name)| {
            let c = stats[STAT_CYC_FIRST + i] as f64;
            Phase {
                name,
                share: if charged > 0.0 { c / charged } else { 0.0 },
                ns_per_request: if requests > 0 && ghz > 0.0 {
                    c / ghz / requests as f64
                } else {
                    0.0
                },
            }
        })
        .collect();
    let visits = stats[STAT_VISITS];
    IngressBudget {
        sm_clock_mhz: ghz * 1e3,
        lifetime_ms: ns / 1e6,
        requests,
        visits,
        requests_per_visit: if visits > 0 {
            requests as f64 / visits as f64
        } else {
            0.0
        },
        phases,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, t0: u64, steps: [u64; 6]) -> Vec<u64> {
        let mut r = vec![id, 0, t0];
        let mut t = t0;
        for s in steps {
            t += s;
            r.push(t);
        }
        r.push(0);
        r
    }

    #[test]
    fn intervals_come_from_one_clock_each() {
        // GPU clock far from the host's: only differences within a clock may be used.
        let mut log = rec(7, 9_000_000_000, [1000, 2000, 3000, 4000, 5000, 6000]);
        log.extend(rec(8, 9_000_100_000, [1000, 2000, 3000, 4000, 5000, 6000]));
        let mut host = HashMap::new();
        host.insert(
            (7, 0),
            HostStamp {
                arrived: 100,
                read: 100 + 30_000,
            },
        );
        host.insert(
            (8, 0),
            HostStamp {
                arrived: 500,
                read: 500 + 30_000,
            },
        );
        let mut stats = [0u64; STATS];
        stats[STAT_PROF_N] = 2;
        let p = reduce(&log, &host, &stats);
        assert_eq!(p.requests, 2);
        let get = |n: &str| p.intervals.iter().find(|i| i.name == n).unwrap().p50_us;
        assert_eq!(get("ring_to_ring"), 30.0);
        assert_eq!(get("gpu_resident"), 21.0);
        assert_eq!(get("bus_and_polling"), 9.0);
        assert_eq!(get("ingress_copy"), 1.0);
        assert_eq!(get("queue_wait"), 3.0);
        assert_eq!(get("tx_write"), 6.0);
        assert_eq!(p.globaltimer_step_ns, 1000);
    }

    #[test]
    fn unmatched_refused_and_unclaimed_records_are_left_out() {
        let mut log = rec(1, 10, [1, 1, 1, 1, 1, 1]);
        let mut refused = rec(2, 10, [1, 1, 1, 1, 1, 1]);
        refused[5] = 0; // never popped: answered by the service's checks
        log.extend(refused);
        log.extend(rec(3, 10, [1, 1, 1, 1, 1, 1])); // no host stamp
        log.extend(rec(4, 10, [1, 1, 1, 1, 1, 1])); // beyond what the GPU claimed
        let mut host = HashMap::new();
        for id in [1, 2, 4] {
            host.insert(
                (id, 0),
                HostStamp {
                    arrived: 0,
                    read: 50,
                },
            );
        }
        let mut stats = [0u64; STATS];
        stats[STAT_PROF_N] = 3;
        let p = reduce(&log, &host, &stats);
        assert_eq!(p.requests, 1);
        assert_eq!(p.beyond_log, 0);
        stats[STAT_PROF_N] = 10;
        assert_eq!(reduce(&log, &host, &stats).beyond_log, 6);
    }

    #[test]
    fn ingress_budget_converts_cycles_at_the_measured_clock() {
        let mut stats = [0u64; STATS];
        stats[STAT_CLK_CYC] = 2_000_000;
        stats[STAT_CLK_NS] = 1_000_000; // 2 GHz
        stats[STAT_TAKEN] = 100;
        stats[STAT_VISITS] = 10;
        stats[STAT_CYC_FIRST] = 500_000; // idle: a quarter of the charged cycles
        stats[STAT_CYC_FIRST + 3] = 1_000_000; // copying: half
        stats[STAT_CYC_FIRST + 5] = 500_000;
        let b = budget(&stats);
        assert!((b.sm_clock_mhz - 2000.0).abs() < 1e-9);
        assert_eq!(b.requests_per_visit, 10.0);
        assert_eq!(b.phases[3].share, 0.5);
        assert_eq!(b.phases[3].ns_per_request, 5000.0);
    }
}
