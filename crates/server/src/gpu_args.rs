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
    /// 0 (the default): chosen from the cores given, [`auto_control_threads`].
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=64))]
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

/// Cores a control thread is given by the auto rule: one per four cores.
pub const CORES_PER_AUTO_CONTROL_THREAD: usize = 4;
/// The most control threads a GPU gets by the auto rule.
pub const MAX_AUTO_CONTROL_THREADS: usize = 4;

/// `--control-threads 0` (auto): control threads per GPU for a server (or an in-process
/// benchmark) on `cores` cores driving `gpus` GPUs: a core in four, shared by the GPUs, from
/// 1 to [`MAX_AUTO_CONTROL_THREADS`] a GPU. What it rests on (k-NN 1M u8 on one H200,
/// `lab/results/control-threads-h200-c8e84bc/`): in process one control thread stages about
/// 1.4-1.8 M queries/s, 2 give 3.0 M, 3 4.1-4.2 M, 4 5.0 M; served on 8 cores 2 control
/// threads beside 6 io threads held p99 1.08 ms at 900 K where 1 beside 8 io threads broke
/// 1 ms at 900 K and 3 beside 5 lost requests there. With 4 GPUs on 8 cores one a GPU
/// (`lab/results/issue48-control-threads-4xh100`).
pub fn auto_control_threads(cores: usize, gpus: usize) -> u16 {
    let per_gpu = cores / (CORES_PER_AUTO_CONTROL_THREAD * gpus.max(1));
    // Bounded by MAX_AUTO_CONTROL_THREADS (4), so the cast cannot truncate.
    per_gpu.clamp(1, MAX_AUTO_CONTROL_THREADS) as u16
}

impl GpuEngineArgs {
    /// Fills in `control_threads` where it is 0 (auto) for `cores` cores; with
    /// `gpus_per_control_thread` above 1 (GPUs sharing a thread) auto is one thread. Returns
    /// why, for the startup log and `--check-config`; None where the number was given.
    pub fn resolve_control_threads(&mut self, cores: usize) -> Option<String> {
        if self.control_threads != 0 {
            return None;
        }
        let gpus = self.gpus.len().max(1);
        if self.gpus_per_control_thread > 1 {
            self.control_threads = 1;
            return Some(format!(
                "control threads: 1 a GPU (auto: gpus_per_control_thread {} shares threads)",
                self.gpus_per_control_thread
            ));
        }
        self.control_threads = auto_control_threads(cores, gpus);
        Some(format!(
            "control threads: {} a GPU (auto: a core in {CORES_PER_AUTO_CONTROL_THREAD} of \
             {cores} over {gpus} GPU(s), at most {MAX_AUTO_CONTROL_THREADS})",
            self.control_threads
        ))
    }

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
        assert_eq!(d.control_threads, 0, "auto");
    }

    #[test]
    fn auto_control_threads_follow_the_measured_points() {
        // One GPU: 8 served cores -> 2 (beside 6 io threads), 16 -> 4, few cores -> 1.
        let one: Vec<u16> = [1, 2, 4, 7, 8, 12, 16, 64]
            .map(|c| auto_control_threads(c, 1))
            .into();
        assert_eq!(one, [1, 1, 1, 1, 2, 3, 4, 4]);
        // Four GPUs on 8 cores: one a GPU (issue 48's measured best); on 32: 2 a GPU.
        assert_eq!(auto_control_threads(8, 4), 1);
        assert_eq!(auto_control_threads(32, 4), 2);
        assert_eq!(auto_control_threads(0, 0), 1);
    }

    #[test]
    fn resolving_fills_only_auto_and_says_why() {
        let mut a = GpuEngineArgs::default();
        let why = a.resolve_control_threads(8).expect("auto");
        assert_eq!(a.control_threads, 2);
        assert!(why.contains("auto") && why.contains("8"), "{why}");
        assert_eq!(a.resolve_control_threads(16), None, "already resolved");
        assert_eq!(a.control_threads, 2);
        let mut shared = GpuEngineArgs {
            gpus_per_control_thread: 2,
            ..GpuEngineArgs::default()
        };
        assert!(shared.resolve_control_threads(16).is_some());
        assert_eq!(shared.control_threads, 1);
    }
}
