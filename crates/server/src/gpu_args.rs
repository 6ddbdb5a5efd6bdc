//! The GPU batching engines' settings (gpu-direct, gpu-cohort, hybrid), as one typed group of
//! flags that `serve`, `bench engine` and `bench knn` share (and, through serde, a service's
//! `[services.NAME]` table: `engine_config.rs`): each knob has one name, one
//! default and one help text (the clap attributes below). A service may set its own with
//! `--service-opt NAME.KEY=VALUE` (`plan.rs`).

use clap::{Args, FromArgMatches};
use serde::{Deserialize, Serialize};

#[derive(Args, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct GpuEngineArgs {
    /// GPUs for the gpu engines (one control thread per GPU and service; a service's backend
    /// on each).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    #[serde(with = "crate::engine_config::gpu_list")]
    pub gpus: Vec<usize>,
    /// gpu-cohort: a cohort closes at this many requests...
    #[arg(long, default_value_t = 256)]
    pub max_cohort: usize,
    /// ...or when its first request has waited this long...
    #[arg(long, default_value_t = 200)]
    pub cohort_timeout_us: u64,
    /// ...or at once while fewer than this many cohorts are in flight on the GPU
    /// (work-conserving: an idle GPU never waits out the timeout, and cohorts grow with the
    /// load by themselves; 0 = fixed cohorts, size or timeout only).
    #[arg(long, default_value_t = 1)]
    pub cohort_keep_busy: usize,
    /// gpu engines: slots per GPU, each with its own stream and staging (default 8 direct;
    /// cohort: 3 + one per batch key of the service, e.g. 4 for a service of one key).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<usize>,
    /// gpu-cohort: replay a CUDA graph per cohort-size bucket instead of launching each copy
    /// and kernel (measured within +-3% of launching on the H200: off by default).
    #[arg(long)]
    pub cohort_graphs: bool,
    /// gpu-direct, gpu-cohort (and hybrid's GPU side): control threads per GPU, each with its
    /// own slots and streams, sharing the GPU's backend (its index or weights): one GPU's host
    /// work (staging, launching, answering) spread over this many cores. One control thread
    /// stages and answers about 2 M requests/s (docs/gpu.md); LeNet's kernels do more.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub control_threads: u16,
    /// Every GPU engine: GPUs one host thread drives in turn (Centaur: one core feeds many
    /// GPUs): gpu-direct's and gpu-cohort's control thread, gpu-persistent's egress thread.
    /// Each GPU keeps its own lane, slots and rings; the host threads become ceil(GPUs /
    /// this), so the cores spent polling GPUs stop growing with them. One control thread
    /// still stages and answers about 2 M requests/s in all: for a served rate under that it
    /// frees cores for the io threads. Not with --control-threads above 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub gpus_per_control_thread: u16,
}

impl GpuEngineArgs {
    /// The control threads (engine lanes) of a GPU batching engine: one set per GPU.
    pub fn gpu_lanes(&self) -> usize {
        self.gpus.len() * usize::from(self.control_threads.max(1))
    }

    /// The host threads behind those lanes: a thread per lane, or one per
    /// `gpus_per_control_thread` GPUs.
    pub fn gpu_threads(&self) -> usize {
        self.gpu_lanes()
            .div_ceil(usize::from(self.gpus_per_control_thread.max(1)))
    }
}

impl Default for GpuEngineArgs {
    /// The defaults the flags declare (no second copy of them here).
    fn default() -> Self {
        let cmd = GpuEngineArgs::augment_args(clap::Command::new("defaults"));
        let m = cmd.get_matches_from(["defaults"]);
        GpuEngineArgs::from_arg_matches(&m).expect("the declared defaults parse")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_declared_ones() {
        let d = GpuEngineArgs::default();
        assert_eq!(d.gpus, vec![0]);
        assert_eq!(
            (d.max_cohort, d.cohort_timeout_us, d.cohort_keep_busy),
            (256, 200, 1)
        );
        assert_eq!((d.streams, d.cohort_graphs), (None, false));
        assert_eq!(d.control_threads, 1);
    }
}
