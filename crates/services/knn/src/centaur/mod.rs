//! Centaur's analytical model (eqs. 1-9 of the paper, as Cohort's engines realise them):
//! the highest rate a k-NN server reaches on N devices is the smaller of what the host can
//! drive and what the devices can compute, the latter set by the cohort size the window
//! leaves each device and, for a sharded index, by the load of the busiest device.
//!
//! 1. T_max(N) = min(T_C, T_G(N))
//! 2. T_C = H / (c_r + (n_k O_k + O_q) / b): H host threads, c_r host time per request,
//!    n_k launches per cohort of b requests, O_k per launch, O_q per completion query. The
//!    host has C cores for the H threads and the N devices' control threads (each polls its
//!    device); past C threads every one runs a share f = C / (H + N) of the time, and a
//!    device whose control thread is off its core waits: both terms of eq. 1 scale by f.
//! 3. T_G(N) = min(N b_N / t_dev(N), P BW / bytes_q, P T_whole): P physical devices' memory
//!    bandwidth BW over the bytes a query reads (its probed rows), and the rate of one whole
//!    physical device where measured: virtual GPUs of one device share its memory and its
//!    L2 (P = 1), and together cannot beat the whole device.
//! 4. b_N = min(B, W / (m N)): a closed window W over N devices, m cohorts per device at once
//!    (one running, one filling), B the engine's largest cohort.
//! 5. latency = W / T_max (Little's law for a closed window)
//! 6. t(b) = t_0 + t_q b: a cohort's device time, fitted to one device's measured rates.
//! 7. w_d = sum over the lists l of device d of f_l |l|: rows device d scans per query, f_l
//!    the share of queries that probe list l.
//! 8. I(N) = max_d w_d / mean_d w_d: the placement's imbalance.
//! 9. sharded: t_dev(N) = r(N) t(b_N) + (N - 1) n_s g + s t_q b_N (I(N) - 1): every device
//!    runs its own scan for each of the N homes' cohorts (n_s launches, g each) over the share
//!    s of a query's time that is scanning, and the busiest device sets the pace. r(N) is a
//!    device's kernel time per round sharded (its cohort's filter, then its shard's scan of
//!    each of the N homes' cohorts) over a whole device's per cohort, measured per stage
//!    (`bench gpu-kernels --shards`): the parts of a scan that do not fall as 1/N (the
//!    select over each query's candidates). 1 where not measured.

pub mod command;
pub mod inputs;
pub mod scaling;

use serde::{Deserialize, Serialize};

/// Where the lists are: a whole copy per device, or split over them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Replicate,
    Shard,
}

/// Launches per cohort of the tiled plan (`gpu_ivf/tiled.rs`: filter 2, scan 5, plus the
/// query upload and the answers' download; a shard's scan adds the home's reduce, and an
/// event record and wait per other device).
pub const LAUNCHES_PER_COHORT: f64 = 9.0;
pub const LAUNCHES_PER_SHARD_SCAN: f64 = 7.0;

/// The model's measured inputs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Inputs {
    /// O_k, O_q and g, microseconds.
    pub launch_us: f64,
    pub query_us: f64,
    pub gap_us: f64,
    /// c_r: host time per request of the codec and staging, microseconds.
    pub host_us: f64,
    /// H: threads doing the host's per-request work.
    pub host_threads: f64,
    /// W, B and m of eq. 4.
    pub window: f64,
    pub max_cohort: f64,
    pub in_flight: f64,
    /// t_0 and t_q of eq. 6, microseconds.
    pub t0_us: f64,
    pub tq_us: f64,
    /// s of eq. 9: the share of a query's device time that is scanning lists.
    pub scan_share: f64,
    /// Eq. 3's memory bound: bytes a query reads, one memory's bandwidth (GB/s) and the
    /// number of separate memories (physical devices) the devices have.
    pub bytes_per_query: f64,
    pub bandwidth_gbs: f64,
    pub memories: f64,
    /// One whole physical device's measured rate (0: not measured).
    pub whole_rate: f64,
    /// C of eq. 2: the host's cores.
    pub host_cores: f64,
    /// r(N) of eq. 9 where measured, by device count (ascending); empty: 1 for every N.
    #[serde(default)]
    pub shard_work: Vec<(usize, f64)>,
    /// P of eq. 3 is N: each device has a memory of its own (physical GPUs, not groups of
    /// one GPU's SMs); `memories` is then not used.
    #[serde(default)]
    pub memory_per_device: bool,
    /// Eq. 3's bytes per query by cohort size (ascending; `inputs::cohort_bytes`): a cohort
    /// reads a list once for all its queries. Empty: `bytes_per_query` at every size.
    #[serde(default)]
    pub cohort_bytes: Vec<(f64, f64)>,
    /// The GPU-centric design (gpu-persistent): the GPU forms its cohorts and the host
    /// launches nothing and queries no completion, so eq. 2 keeps only c_r, and a shard's
    /// scan adds no launch gaps to eq. 9.
    #[serde(default)]
    pub gpu_centric: bool,
}

/// One predicted point.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Prediction {
    pub devices: usize,
    pub layout: Layout,
    pub cohort: f64,
    pub host_rate: f64,
    pub gpu_rate: f64,
    pub rate: f64,
    /// "host" or "gpu": the smaller of eq. 1.
    pub bound: String,
    pub latency_us: f64,
    pub imbalance: f64,
}

impl Inputs {
    /// Eq. 4.
    pub fn cohort(&self, devices: usize) -> f64 {
        (self.window / (self.in_flight * devices as f64))
            .min(self.max_cohort)
            .max(1.0)
    }

    /// Eq. 2's f: the share of a core each of the H + N host threads gets.
    pub fn core_share(&self, devices: usize) -> f64 {
        (self.host_cores / (self.host_threads + devices as f64)).min(1.0)
    }

    /// Eq. 6.
    pub fn cohort_time_us(&self, b: f64) -> f64 {
        self.t0_us + self.tq_us * b
    }

    /// Eq. 2, for cohorts of `b` with `launches` each.
    pub fn host_rate(&self, b: f64, launches: f64) -> f64 {
        let per_request = self.host_us + (launches * self.launch_us + self.query_us) / b;
        self.host_threads * 1e6 / per_request
    }

    /// r(N) of eq. 9: the measured value at N, linear between measured device counts (1 at
    /// one device), the last measured one past them; 1 where none is measured.
    pub fn shard_factor(&self, devices: usize) -> f64 {
        let mut prev = (1usize, 1.0f64);
        for &(n, r) in &self.shard_work {
            if devices <= n {
                if n == prev.0 {
                    return r;
                }
                let t = (devices.saturating_sub(prev.0)) as f64 / (n - prev.0) as f64;
                return prev.1 + t.clamp(0.0, 1.0) * (r - prev.1);
            }
            prev = (n, r);
        }
        prev.1
    }

    /// Eqs. 3 and 9: the devices' rate.
    pub fn gpu_rate(&self, devices: usize, layout: Layout, imbalance: f64) -> f64 {
        let b = self.cohort(devices);
        let n = devices as f64;
        let t = match layout {
            Layout::Replicate => self.cohort_time_us(b),
            Layout::Shard => {
                let gaps = if self.gpu_centric {
                    0.0
                } else {
                    LAUNCHES_PER_SHARD_SCAN
                };
                self.shard_factor(devices) * self.cohort_time_us(b)
                    + (n - 1.0) * gaps * self.gap_us
                    + self.scan_share * self.tq_us * b * (imbalance - 1.0).max(0.0)
            }
        };
        (n * b * 1e6 / t).min(self.memory_rate(devices, b))
    }

    /// Bytes a query reads in a cohort of `b` (`cohort_bytes`, linear between the sizes
    /// given, the nearest one outside them).
    pub fn bytes_at(&self, b: f64) -> f64 {
        let t = &self.cohort_bytes;
        match t.iter().position(|&(size, _)| size >= b) {
            None => t.last().map_or(self.bytes_per_query, |p| p.1),
            Some(0) => t[0].1,
            Some(i) => {
                let ((b0, y0), (b1, y1)) = (t[i - 1], t[i]);
                y0 + (y1 - y0) * (b - b0) / (b1 - b0)
            }
        }
    }

    /// Eq. 3's second term, on `devices` devices running cohorts of `b`.
    pub fn memory_rate(&self, devices: usize, b: f64) -> f64 {
        let p = if self.memory_per_device {
            devices as f64
        } else {
            self.memories
        };
        let bw = p * self.bandwidth_gbs * 1e9 / self.bytes_at(b);
        if self.whole_rate > 0.0 {
            bw.min(p * self.whole_rate)
        } else {
            bw
        }
    }

    /// Eqs. 1 and 5.
    pub fn predict(&self, devices: usize, layout: Layout, imbalance: f64) -> Prediction {
        assert!(devices > 0, "at least one device");
        let b = self.cohort(devices);
        let launches = match layout {
            _ if self.gpu_centric => 0.0,
            Layout::Replicate => LAUNCHES_PER_COHORT,
            Layout::Shard => LAUNCHES_PER_COHORT + (devices as f64 - 1.0) * LAUNCHES_PER_SHARD_SCAN,
        };
        let share = self.core_share(devices);
        let host = Inputs {
            query_us: if self.gpu_centric { 0.0 } else { self.query_us },
            ..self.clone()
        };
        let host_rate = share * host.host_rate(b, launches);
        let gpu_rate = share * self.gpu_rate(devices, layout, imbalance);
        let rate = host_rate.min(gpu_rate);
        Prediction {
            devices,
            layout,
            cohort: b,
            host_rate,
            gpu_rate,
            rate,
            bound: if host_rate < gpu_rate { "host" } else { "gpu" }.into(),
            latency_us: self.window * 1e6 / rate,
            imbalance,
        }
    }
}

/// Eq. 6 fitted: (t_0, t_q) by least squares over (cohort size, device time in us) points;
/// with one size, t_0 is the launches' floor `floor_us` and t_q what remains.
pub fn fit_cohort_time(points: &[(f64, f64)], floor_us: f64) -> (f64, f64) {
    assert!(!points.is_empty(), "at least one measured point");
    let n = points.len() as f64;
    let mb = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mt = points.iter().map(|p| p.1).sum::<f64>() / n;
    let var = points.iter().map(|p| (p.0 - mb).powi(2)).sum::<f64>();
    if var < 1e-9 {
        let t0 = floor_us.min(mt);
        return (t0, (mt - t0) / mb);
    }
    let cov = points.iter().map(|p| (p.0 - mb) * (p.1 - mt)).sum::<f64>();
    let tq = (cov / var).max(0.0);
    let t0 = (mt - tq * mb).max(0.0);
    (t0, tq)
}

/// Eqs. 7 and 8: the busiest device's rows per query over the mean, for list owners `owner`,
/// rows `sizes` and probe shares `probed` (per list).
pub fn imbalance(owner: &[u16], sizes: &[usize], probed: &[f64], devices: usize) -> f64 {
    assert_eq!(owner.len(), sizes.len());
    assert_eq!(owner.len(), probed.len());
    let mut w = vec![0.0; devices];
    for l in 0..owner.len() {
        w[owner[l] as usize] += probed[l] * sizes[l] as f64;
    }
    let mean = w.iter().sum::<f64>() / devices as f64;
    if mean <= 0.0 {
        return 1.0;
    }
    w.iter().cloned().fold(0.0, f64::max) / mean
}

/// Centaur's Fig. 2 shape: the rate against host threads for the three designs on `devices`
/// devices: CPU-driven (each request its own launches, `n_k` of them, on overlapping streams:
/// the device spends n_k g + t_q on it, none of a cohort's fixed t_0), micro-batched (cohorts
/// of B, t(B) each), GPU-centric (cohorts of B formed on the GPU: no launches or completion
/// queries on the host, only c_r).
pub fn fig2(inp: &Inputs, devices: usize, threads: &[usize]) -> Vec<(String, Vec<(f64, f64)>)> {
    let n = devices as f64;
    let b = inp.max_cohort;
    let direct = 1e6 / (LAUNCHES_PER_COHORT * inp.gap_us + inp.tq_us);
    let batched = b * 1e6 / inp.cohort_time_us(b);
    let designs: [(&str, f64, f64, f64); 3] = [
        ("CPU-driven (gpu-direct)", 1.0, LAUNCHES_PER_COHORT, direct),
        (
            "micro-batching (gpu-cohort)",
            b,
            LAUNCHES_PER_COHORT,
            batched,
        ),
        ("GPU-centric (gpu-persistent)", b, 0.0, batched),
    ];
    designs
        .iter()
        .map(|&(name, b, launches, per_device)| {
            let gpu = (n * per_device).min(inp.memory_rate(devices, b));
            let pts = threads
                .iter()
                .map(|&h| {
                    let one = Inputs {
                        host_threads: h as f64,
                        query_us: if launches == 0.0 { 0.0 } else { inp.query_us },
                        ..inp.clone()
                    };
                    (h as f64, one.host_rate(b, launches).min(gpu))
                })
                .collect();
            (name.to_string(), pts)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            launch_us: 3.0,
            query_us: 0.5,
            gap_us: 3.0,
            host_us: 1.0,
            host_threads: 8.0,
            window: 8192.0,
            max_cohort: 2048.0,
            in_flight: 2.0,
            t0_us: 1000.0,
            tq_us: 5.0,
            scan_share: 0.5,
            bytes_per_query: 1e6,
            bandwidth_gbs: 1e6,
            memories: 1.0,
            whole_rate: 0.0,
            host_cores: 64.0,
            shard_work: Vec::new(),
            memory_per_device: false,
            cohort_bytes: Vec::new(),
            gpu_centric: false,
        }
    }

    #[test]
    fn the_shard_factor_is_measured_interpolated_or_one() {
        let mut i = inputs();
        assert_eq!(i.shard_factor(4), 1.0);
        i.shard_work = vec![(2, 1.02), (4, 1.06), (8, 1.14)];
        assert_eq!(i.shard_factor(1), 1.0);
        assert_eq!(i.shard_factor(4), 1.06);
        assert!((i.shard_factor(6) - 1.10).abs() < 1e-12);
        assert_eq!(i.shard_factor(15), 1.14);
        // The measured extra work slows the sharded devices by that factor (launch and
        // imbalance terms aside).
        let plain = Inputs {
            shard_work: Vec::new(),
            ..i.clone()
        };
        let (a, b) = (
            plain.gpu_rate(4, Layout::Shard, 1.0),
            i.gpu_rate(4, Layout::Shard, 1.0),
        );
        assert!(b < a && b > a / 1.06 * 0.99, "{a} {b}");
    }

    #[test]
    fn the_fit_recovers_a_line_and_one_point_keeps_its_floor() {
        let pts: Vec<_> = [256.0, 512.0, 2048.0]
            .iter()
            .map(|&b| (b, 700.0 + 3.0 * b))
            .collect();
        let (t0, tq) = fit_cohort_time(&pts, 0.0);
        assert!((t0 - 700.0).abs() < 1e-6 && (tq - 3.0).abs() < 1e-9);
        let (t0, tq) = fit_cohort_time(&[(2048.0, 14_000.0)], 27.0);
        assert_eq!(t0, 27.0);
        assert!((t0 + tq * 2048.0 - 14_000.0).abs() < 1e-6);
    }

    #[test]
    fn cohorts_shrink_with_devices_and_the_rate_is_the_smaller_bound() {
        let i = inputs();
        assert_eq!(i.cohort(1), 2048.0);
        assert_eq!(i.cohort(4), 1024.0);
        assert_eq!(i.cohort(16), 256.0);
        for n in [1, 2, 4, 8, 15] {
            let p = i.predict(n, Layout::Replicate, 1.0);
            assert_eq!(p.rate, p.host_rate.min(p.gpu_rate));
            assert!((p.latency_us - i.window * 1e6 / p.rate).abs() < 1e-6);
        }
        // A single device at full cohorts: b / t(b).
        let one = i.predict(1, Layout::Replicate, 1.0);
        assert!((one.gpu_rate - 2048.0 * 1e6 / (1000.0 + 5.0 * 2048.0)).abs() < 1e-6);
    }

    #[test]
    fn sharding_costs_launches_and_imbalance_and_never_gains() {
        let i = inputs();
        for n in [2, 4, 8] {
            let r = i.gpu_rate(n, Layout::Replicate, 1.0);
            let even = i.gpu_rate(n, Layout::Shard, 1.0);
            let skewed = i.gpu_rate(n, Layout::Shard, 1.5);
            assert!(even < r && skewed < even, "{n}: {r} {even} {skewed}");
        }
        assert_eq!(
            i.gpu_rate(1, Layout::Shard, 1.0),
            i.gpu_rate(1, Layout::Replicate, 1.0)
        );
    }

    #[test]
    fn more_threads_than_cores_slow_every_one() {
        let i = Inputs {
            host_cores: 16.0,
            ..inputs()
        };
        assert_eq!(i.core_share(8), 1.0);
        assert_eq!(i.core_share(16), 16.0 / 24.0);
        let p = i.predict(16, Layout::Replicate, 1.0);
        let free = Inputs {
            host_cores: 64.0,
            ..i.clone()
        }
        .predict(16, Layout::Replicate, 1.0);
        assert!((p.rate - free.rate * 16.0 / 24.0).abs() < 1e-6);
    }

    #[test]
    fn one_memory_caps_every_device_count() {
        let i = Inputs {
            bandwidth_gbs: 1000.0,
            bytes_per_query: 2e6,
            ..inputs()
        };
        assert_eq!(i.memory_rate(1, 1.0), 500_000.0);
        assert!(i.gpu_rate(1, Layout::Replicate, 1.0) < 500_000.0);
        assert_eq!(i.gpu_rate(15, Layout::Replicate, 1.0), 500_000.0);
        let two = Inputs {
            memories: 2.0,
            ..i.clone()
        };
        assert!(two.gpu_rate(15, Layout::Replicate, 1.0) > 500_000.0);
        let whole = Inputs {
            whole_rate: 300_000.0,
            ..i
        };
        assert_eq!(whole.gpu_rate(15, Layout::Replicate, 1.0), 300_000.0);
    }

    #[test]
    fn separate_memories_scale_the_memory_bound_with_the_devices() {
        let i = Inputs {
            bandwidth_gbs: 1000.0,
            bytes_per_query: 2e6,
            memory_per_device: true,
            ..inputs()
        };
        assert_eq!(i.memory_rate(1, 1.0), 500_000.0);
        assert_eq!(i.memory_rate(4, 1.0), 2_000_000.0);
        // Compute-bound devices then scale linearly, replicated.
        let one = i.gpu_rate(1, Layout::Replicate, 1.0);
        let four = Inputs {
            window: i.window * 4.0,
            ..i.clone()
        }
        .gpu_rate(4, Layout::Replicate, 1.0);
        assert!((four - 4.0 * one).abs() < 1e-6 * four, "{one} {four}");
    }

    #[test]
    fn a_cohort_that_shares_its_lists_reads_fewer_bytes_per_query() {
        let i = Inputs {
            bandwidth_gbs: 1000.0,
            bytes_per_query: 2e6,
            cohort_bytes: vec![(1.0, 2e6), (1024.0, 1e5), (4096.0, 5e4)],
            ..inputs()
        };
        assert_eq!(i.bytes_at(1.0), 2e6);
        assert_eq!(i.bytes_at(0.5), 2e6);
        assert!((i.bytes_at(2560.0) - 7.5e4).abs() < 1e-6);
        assert_eq!(i.bytes_at(1e6), 5e4);
        assert_eq!(i.memory_rate(1, 4096.0), 20_000_000.0);
    }

    #[test]
    fn the_gpu_centric_host_pays_only_its_per_request_cost() {
        let i = Inputs {
            gpu_centric: true,
            host_cores: 1e6,
            ..inputs()
        };
        for layout in [Layout::Replicate, Layout::Shard] {
            let p = i.predict(4, layout, 1.0);
            assert!(
                (p.host_rate - i.host_threads * 1e6 / i.host_us).abs() < 1e-6,
                "{p:?}"
            );
        }
        // A sharded cohort adds no launch gaps where nothing is launched.
        let launched = Inputs {
            gpu_centric: false,
            ..i.clone()
        };
        assert!(i.gpu_rate(4, Layout::Shard, 1.0) > launched.gpu_rate(4, Layout::Shard, 1.0));
        assert_eq!(
            i.gpu_rate(4, Layout::Replicate, 1.0),
            launched.gpu_rate(4, Layout::Replicate, 1.0)
        );
    }

    #[test]
    fn imbalance_is_the_busiest_device_over_the_mean() {
        let owner = [0u16, 1, 0, 1];
        let sizes = [10, 10, 10, 30];
        assert_eq!(imbalance(&owner, &sizes, &[1.0; 4], 2), 40.0 / 30.0);
        assert_eq!(
            imbalance(&owner, &sizes, &[1.0, 1.0, 1.0, 0.0], 2),
            20.0 / 15.0
        );
        assert_eq!(imbalance(&[0, 0], &[5, 5], &[1.0, 1.0], 1), 1.0);
    }

    #[test]
    fn fig2_cpu_driven_is_host_bound_and_gpu_centric_needs_fewest_threads() {
        let i = inputs();
        let curves = fig2(&i, 4, &[1, 2, 4, 8, 16]);
        let cpu = &curves[0].1;
        let centric = &curves[2].1;
        // One request per launch set: the rate grows with threads (host bound).
        assert!(cpu[1].1 > cpu[0].1 * 1.9);
        // GPU-centric at one thread reaches at least the CPU-driven design at sixteen.
        assert!(centric[0].1 >= cpu[4].1);
    }
}
