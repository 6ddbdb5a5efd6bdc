//! GPU board power and energy through NVML (loaded at run time: a machine without the
//! NVIDIA driver gets an error string, not a link failure).

use crate::GpuEnergy;
use nvml_wrapper::Nvml;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The driver installs the versioned name; the unversioned one exists only with dev packages.
const LIB_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// NVML, opened once, with the boards it sees.
#[derive(Clone)]
pub struct GpuPower {
    nvml: Arc<Nvml>,
    boards: Vec<Board>,
}

#[derive(Clone, Debug)]
struct Board {
    index: u32,
    name: String,
    uuid: String,
    /// Whether the board keeps a total-energy counter (Volta and later).
    has_energy_counter: bool,
}

/// One board's reading now (for `/metrics`).
#[derive(Debug, Clone)]
pub struct GpuNow {
    pub index: u32,
    pub uuid: String,
    pub power_w: f64,
    /// The board's energy counter since the driver loaded, where it has one.
    pub energy_j: Option<f64>,
    /// The fraction of the driver's last sample period in which a kernel ran (0 to 1),
    /// where the board reports it (always 1 while persistent kernels are resident).
    pub utilization: Option<f64>,
}

impl GpuPower {
    /// One NVML handle per process, opened on first use: initialising NVML takes from
    /// milliseconds to seconds (more without persistence mode), too long to pay per window.
    pub fn shared() -> Result<GpuPower, String> {
        static SHARED: std::sync::OnceLock<Result<GpuPower, String>> = std::sync::OnceLock::new();
        SHARED.get_or_init(GpuPower::open).clone()
    }

    pub fn open() -> Result<GpuPower, String> {
        let mut last = String::new();
        for lib in LIB_NAMES {
            match Nvml::builder().lib_path(std::ffi::OsStr::new(lib)).init() {
                Ok(nvml) => return GpuPower::with(nvml),
                Err(e) => last = format!("NVML unavailable ({lib}: {e})"),
            }
        }
        Err(last)
    }

    fn with(nvml: Nvml) -> Result<GpuPower, String> {
        let n = nvml
            .device_count()
            .map_err(|e| format!("NVML device count: {e}"))?;
        let mut boards = Vec::new();
        for index in 0..n {
            let d = nvml
                .device_by_index(index)
                .map_err(|e| format!("NVML device {index}: {e}"))?;
            if d.power_usage().is_err() {
                continue;
            }
            boards.push(Board {
                index,
                name: d.name().unwrap_or_default(),
                uuid: d.uuid().unwrap_or_default(),
                has_energy_counter: d.total_energy_consumption().is_ok(),
            });
        }
        if boards.is_empty() {
            return Err("NVML sees no GPU whose power is readable".into());
        }
        Ok(GpuPower {
            nvml: Arc::new(nvml),
            boards,
        })
    }

    pub fn count(&self) -> usize {
        self.boards.len()
    }

    /// Every board's power and energy counter now.
    pub fn now(&self) -> Vec<GpuNow> {
        self.boards
            .iter()
            .filter_map(|b| {
                let d = self.nvml.device_by_index(b.index).ok()?;
                Some(GpuNow {
                    index: b.index,
                    uuid: b.uuid.clone(),
                    power_w: d.power_usage().ok()? as f64 / 1e3,
                    energy_j: d.total_energy_consumption().ok().map(|mj| mj as f64 / 1e3),
                    utilization: d.utilization_rates().ok().map(|u| f64::from(u.gpu) / 100.0),
                })
            })
            .collect()
    }

    /// Every board's GPU utilization now: the percentage of the last sample period in which
    /// a kernel ran (always 100 while persistent kernels are resident).
    pub fn utilization(&self) -> Vec<u32> {
        self.boards
            .iter()
            .filter_map(|b| {
                let d = self.nvml.device_by_index(b.index).ok()?;
                Some(d.utilization_rates().ok()?.gpu)
            })
            .collect()
    }

    /// Starts sampling every board's power every `period` on a thread of its own.
    pub fn sample(self, period: Duration) -> Result<Sampling, String> {
        let start_energy: Vec<Option<u64>> = self
            .boards
            .iter()
            .map(|b| {
                let d = self.nvml.device_by_index(b.index).ok()?;
                b.has_energy_counter
                    .then(|| d.total_energy_consumption().ok())
                    .flatten()
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let me = self.clone();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("power-sampler".into())
            .spawn(move || me.sample_loop(period, &flag))
            .map_err(|e| format!("power sampler thread: {e}"))?;
        Ok(Sampling {
            power: self,
            start_energy,
            started: Instant::now(),
            stop,
            thread: Some(thread),
        })
    }

    /// Per board: (seconds since start, watts) samples until `stop`.
    fn sample_loop(&self, period: Duration, stop: &AtomicBool) -> Traces {
        let t0 = Instant::now();
        let mut out = vec![Vec::new(); self.boards.len()];
        let devices: Vec<_> = self
            .boards
            .iter()
            .map(|b| self.nvml.device_by_index(b.index).ok())
            .collect();
        loop {
            let t = t0.elapsed().as_secs_f64();
            for (samples, d) in out.iter_mut().zip(&devices) {
                if let Some(mw) = d.as_ref().and_then(|d| d.power_usage().ok()) {
                    samples.push((t, mw as f64 / 1e3));
                }
            }
            // Checked after a sample so a window always ends with one.
            if stop.load(Ordering::Acquire) {
                return out;
            }
            std::thread::sleep(period);
        }
    }
}

/// Energy drawn between successive readings, per board (for a counter on `/metrics`):
/// the board's energy counter where it has one, else power x time since the last reading.
pub struct EnergySince {
    power: GpuPower,
    last: Vec<(Instant, Option<f64>)>,
}

impl EnergySince {
    pub fn new(power: GpuPower) -> EnergySince {
        let now = power.now();
        let last = power
            .boards
            .iter()
            .map(|b| {
                let e = now
                    .iter()
                    .find(|n| n.index == b.index)
                    .and_then(|n| n.energy_j);
                (Instant::now(), e)
            })
            .collect();
        EnergySince { power, last }
    }

    /// Every readable board now, with the joules drawn since the previous call.
    pub fn read(&mut self) -> Vec<(GpuNow, f64)> {
        let now = self.power.now();
        let mut out = Vec::with_capacity(now.len());
        for n in now {
            let Some(i) = self.power.boards.iter().position(|b| b.index == n.index) else {
                continue;
            };
            let (t, e) = self.last[i];
            let joules = match (e, n.energy_j) {
                (Some(a), Some(z)) if z >= a => z - a,
                _ => n.power_w * t.elapsed().as_secs_f64(),
            };
            self.last[i] = (Instant::now(), n.energy_j);
            out.push((n, joules));
        }
        out
    }
}

/// Per board, (seconds since the window began, watts).
type Traces = Vec<Vec<(f64, f64)>>;

/// A sampler running over a measured window.
pub struct Sampling {
    power: GpuPower,
    start_energy: Vec<Option<u64>>,
    started: Instant,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Traces>>,
}

impl Sampling {
    pub fn finish(mut self) -> Vec<GpuEnergy> {
        let window = self.started.elapsed().as_secs_f64();
        self.stop.store(true, Ordering::Release);
        let samples = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let mut out = Vec::new();
        for (i, b) in self.power.boards.iter().enumerate() {
            let s = samples.get(i).map(Vec::as_slice).unwrap_or(&[]);
            let mean = mean_power(s);
            let end = self
                .power
                .nvml
                .device_by_index(b.index)
                .ok()
                .and_then(|d| d.total_energy_consumption().ok());
            let (energy_j, energy_source) = match (self.start_energy[i], end) {
                (Some(a), Some(z)) if z >= a => ((z - a) as f64 / 1e3, "nvml_total_energy"),
                _ => (mean * window, "integrated_power"),
            };
            out.push(GpuEnergy {
                index: b.index,
                name: b.name.clone(),
                uuid: b.uuid.clone(),
                samples: s.len(),
                mean_power_w: mean,
                max_power_w: s.iter().map(|x| x.1).fold(0.0, f64::max),
                energy_j,
                energy_source,
            });
        }
        out
    }
}

impl Drop for Sampling {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Time-weighted mean of (t, watts) samples (trapezoids); one sample is its own mean.
pub(crate) fn mean_power(s: &[(f64, f64)]) -> f64 {
    match s {
        [] => 0.0,
        [one] => one.1,
        _ => {
            let span = s[s.len() - 1].0 - s[0].0;
            if span <= 0.0 {
                return s.iter().map(|x| x.1).sum::<f64>() / s.len() as f64;
            }
            let area: f64 = s
                .windows(2)
                .map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0)
                .sum();
            area / span
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mean_power;

    #[test]
    fn mean_power_weights_by_time() {
        assert_eq!(mean_power(&[]), 0.0);
        assert_eq!(mean_power(&[(0.0, 80.0)]), 80.0);
        // 100 W for 1 s then a ramp to 300 W over 1 s: (100 + 200) / 2 s = 150 W.
        let m = mean_power(&[(0.0, 100.0), (1.0, 100.0), (2.0, 300.0)]);
        assert!((m - 150.0).abs() < 1e-9, "{m}");
    }
}
