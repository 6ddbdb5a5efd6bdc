//! Energy over a measured window, the way a buyer compares servers: GPU board power sampled
//! through NVML (and the board's own energy counter where it has one), host package energy
//! from RAPL (`/sys/class/powercap`) where the kernel exposes it. Both are optional: a machine
//! without an NVIDIA driver or without readable RAPL gets a report that says so instead of a
//! number, never a made-up one.
//!
//! `Meter::start()` before the window, `Meter::finish()` after it; `EnergyReport::per_joule`
//! turns a count of requests (or packets) into units per joule.

mod gpu;
mod rapl;

pub use gpu::{EnergySince, GpuNow, GpuPower};
pub use rapl::Rapl;

use serde::Serialize;
use std::time::{Duration, Instant};

/// What one GPU drew during a window.
#[derive(Debug, Clone, Serialize)]
pub struct GpuEnergy {
    /// NVML index (PCI order; may differ from the CUDA ordinal).
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub samples: usize,
    pub mean_power_w: f64,
    pub max_power_w: f64,
    pub energy_j: f64,
    /// `nvml_total_energy` (the board's millijoule counter) or `integrated_power` (samples).
    pub energy_source: &'static str,
}

/// Host package energy (RAPL) over the window, or why it is absent.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum HostEnergy {
    Measured {
        packages: usize,
        energy_j: f64,
        mean_power_w: f64,
    },
    Absent {
        absent: String,
    },
}

/// Energy drawn during one measured window.
#[derive(Debug, Clone, Serialize)]
pub struct EnergyReport {
    pub window_s: f64,
    /// Every GPU NVML sees (empty when NVML is unavailable; then `gpu_absent` says why).
    pub gpus: Vec<GpuEnergy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_absent: Option<String>,
    pub gpu_energy_j: f64,
    pub gpu_mean_power_w: f64,
    pub host: HostEnergy,
}

impl EnergyReport {
    /// Units (requests, packets) per joule of GPU board energy; None without a GPU reading.
    pub fn per_gpu_joule(&self, units: f64) -> Option<f64> {
        (self.gpu_energy_j > 0.0).then(|| units / self.gpu_energy_j)
    }

    /// The report as JSON with `units_per_joule` added for `units` done in the window.
    pub fn to_json(&self, units: f64) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("plain data");
        v["units"] = units.into();
        v["units_per_gpu_joule"] = self.per_gpu_joule(units).into();
        if let HostEnergy::Measured { energy_j, .. } = self.host {
            let total = energy_j + self.gpu_energy_j;
            v["units_per_joule_gpu_and_host"] = (total > 0.0).then(|| units / total).into();
        }
        v
    }
}

/// A running measurement: a sampler thread on the GPUs, RAPL read at both ends.
pub struct Meter {
    started: Instant,
    gpu: Result<gpu::Sampling, String>,
    rapl: Result<(Rapl, Vec<u64>), String>,
}

/// How often board power is sampled. NVML refreshes its power reading about every 20-100 ms
/// on recent boards; 10 ms catches every refresh without costing a core.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(10);

impl Meter {
    pub fn start() -> Meter {
        Meter::start_with(GpuPower::shared())
    }

    /// Starts with NVML already opened (opening it takes a while; do it before the window).
    pub fn start_with(gpu: Result<GpuPower, String>) -> Meter {
        let gpu = gpu.and_then(|g| g.sample(SAMPLE_PERIOD));
        let rapl = Rapl::open().and_then(|r| {
            let now = r.read()?;
            Ok((r, now))
        });
        Meter {
            started: Instant::now(),
            gpu,
            rapl,
        }
    }

    pub fn finish(self) -> EnergyReport {
        let window = self.started.elapsed().as_secs_f64();
        let (gpus, gpu_absent) = match self.gpu {
            Ok(s) => (s.finish(), None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let host = match self.rapl.and_then(|(r, before)| {
            let after = r.read()?;
            Ok(r.joules_between(&before, &after))
        }) {
            Ok(j) => HostEnergy::Measured {
                packages: j.len(),
                energy_j: j.iter().sum(),
                mean_power_w: j.iter().sum::<f64>() / window.max(1e-9),
            },
            Err(e) => HostEnergy::Absent { absent: e },
        };
        let gpu_energy_j = gpus.iter().fold(0.0, |s, g| s + g.energy_j);
        EnergyReport {
            window_s: window,
            gpu_mean_power_w: gpus.iter().fold(0.0, |s, g| s + g.mean_power_w),
            gpus,
            gpu_absent,
            gpu_energy_j,
            host,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_reports_numbers_or_why_not() {
        let m = Meter::start();
        std::thread::sleep(Duration::from_millis(30));
        let r = m.finish();
        assert!(r.window_s >= 0.03);
        // Either a GPU reading with samples or the reason there is none (CI has no GPU).
        assert_eq!(r.gpu_absent.is_some(), r.gpus.is_empty());
        for g in &r.gpus {
            assert!(g.samples >= 1 && g.mean_power_w > 0.0 && g.energy_j > 0.0);
        }
        let v = r.to_json(1000.0);
        assert_eq!(v["units"], 1000.0);
        if r.gpus.is_empty() {
            assert!(v["units_per_gpu_joule"].is_null(), "no joules, no ratio");
        }
    }
}
