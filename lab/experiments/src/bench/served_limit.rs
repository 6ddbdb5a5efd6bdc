//! What limited a served point, named from counters measured during it (never guessed from the
//! latency alone). A point whose generator fell behind describes the generator; one within the
//! latency bound and without errors was served (its server may still be busy: polling io
//! threads count as busy); one that failed the bound is put down to the server's cores or the
//! GPU when their counter saturated, else its limit has no counter here.

use serde::Serialize;

/// Share of a resource's time in use from which it counts as the limit.
pub const BUSY: f64 = 0.9;

/// Counters of one point.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed {
    pub generator_saturated: bool,
    /// Server CPU seconds over the measured window, and the window and the server's cores.
    pub server_cpu_s: Option<f64>,
    pub window_s: f64,
    pub server_cores: usize,
    /// Mean NVML GPU utilization (percent) over the point; None without NVML.
    pub gpu_util: Option<f64>,
    /// Persistent kernels run all the time: NVML's utilization says nothing about them.
    pub persistent_gpu: bool,
    pub p99_us: f64,
    pub errors: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The load generator fell behind its schedule: the point describes the generator.
    GeneratorSaturated,
    /// The server's cores were busy at least `BUSY` of the window.
    ServerCores,
    /// The GPU ran kernels at least `BUSY` of the time.
    Gpu,
    /// Answered within the latency bound, without errors.
    None,
    /// Over the latency bound or with errors, and no counter here saturated (persistent
    /// kernels: the GPU's share is not measured by NVML).
    Unnamed,
}

impl Observed {
    pub fn server_busy(&self) -> Option<f64> {
        let s = self.server_cpu_s?;
        (self.window_s > 0.0 && self.server_cores > 0)
            .then(|| s / (self.window_s * self.server_cores as f64))
    }

    /// The point's limit; `p99_bound_us` is the latency a point must keep to count as served.
    pub fn limit(&self, p99_bound_us: f64) -> Limit {
        if self.generator_saturated {
            return Limit::GeneratorSaturated;
        }
        if self.errors == 0 && self.p99_us <= p99_bound_us {
            return Limit::None;
        }
        if self.server_busy().is_some_and(|b| b >= BUSY) {
            return Limit::ServerCores;
        }
        if !self.persistent_gpu && self.gpu_util.is_some_and(|u| u >= 100.0 * BUSY) {
            return Limit::Gpu;
        }
        Limit::Unnamed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Observed {
        Observed {
            server_cpu_s: Some(1.0),
            window_s: 2.0,
            server_cores: 4,
            gpu_util: Some(40.0),
            p99_us: 300.0,
            ..Observed::default()
        }
    }

    #[test]
    fn each_counter_names_its_limit_in_order() {
        assert_eq!(ok().limit(1000.0), Limit::None);
        // Within the bound, a busy server is not a limit (polling io threads look busy).
        let busy_but_served = Observed {
            server_cpu_s: Some(8.0),
            ..ok()
        };
        assert_eq!(busy_but_served.limit(1000.0), Limit::None);
        let late = Observed {
            p99_us: 5000.0,
            ..ok()
        };
        assert_eq!(late.limit(1000.0), Limit::Unnamed);
        let gpu = Observed {
            gpu_util: Some(95.0),
            ..late
        };
        assert_eq!(gpu.limit(1000.0), Limit::Gpu);
        // Persistent kernels keep NVML at 100%: not a measurement of their load.
        let persistent = Observed {
            persistent_gpu: true,
            ..gpu
        };
        assert_eq!(persistent.limit(1000.0), Limit::Unnamed);
        let cores = Observed {
            server_cpu_s: Some(7.5),
            ..gpu
        };
        assert_eq!(cores.server_busy(), Some(0.9375));
        assert_eq!(cores.limit(1000.0), Limit::ServerCores);
        let generator = Observed {
            generator_saturated: true,
            ..cores
        };
        assert_eq!(generator.limit(1000.0), Limit::GeneratorSaturated);
    }

    #[test]
    fn without_counters_nothing_is_named_saturated() {
        let o = Observed {
            server_cpu_s: None,
            gpu_util: None,
            errors: 3,
            ..ok()
        };
        assert_eq!(o.server_busy(), None);
        assert_eq!(o.limit(1000.0), Limit::Unnamed);
    }
}
