//! How many io threads and cpu workers `serve` runs when the user names none, from the cores
//! it is given (`--cpus`, else the process's affinity) and the GPU engines' host threads (the
//! control threads, or one egress thread per GPU on gpu-persistent). The served benchmark
//! (`bench suite served`) starts its servers with this rule too: defined here once.
//!
//! The rule, and what it rests on (k-NN 1M served on 8 cores, p99 <= 1 ms):
//! - io threads: one per core. One GPU host thread shares them: 8 io threads gave 898 K q/s
//!   with gpu-cohort on one H200 where `--io-threads 4` gave 400 K (issue 83). Several GPU
//!   host threads take cores of their own: with 4 GPUs, 8 io threads and 4 control threads on
//!   8 cores gave p99 4.4 ms at 300 K, 4 io threads 0.43 ms at 600 K
//!   (`lab/results/issue48-control-threads-4xh100`). So: `cores` when the GPU engines have at
//!   most one host thread, else `cores - gpu_threads` (at least 1).
//! - at most [`MAX_IO_THREADS`] io threads however many cores: the sweeps stop at 16 server
//!   cores, and each io thread holds request and answer rings to every engine (16 MiB at the
//!   default `--max-queue`, `wiring::slots_for`).
//! - cpu workers (the cpu engine, hybrid's CPU side): one per core for each such service,
//!   sharing the cores with the io threads (the served benchmark's cpu runs, `workers = N`);
//!   idle workers park rather than spin on shared cores (`--worker-spin-us`).

use crate::plan::{EngineKind, ServicePlan};

/// The most io threads the rule chooses (name more with `--io-threads`).
pub const MAX_IO_THREADS: usize = 16;

/// The threads chosen for a server, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Threads {
    pub io_threads: usize,
    /// cpu workers of each service on the cpu engine (or hybrid's CPU side).
    pub workers: usize,
    pub why: String,
}

/// The rule: `cores` the server runs on, `gpu_threads` host threads of its GPU engines
/// (all services together), `cpu_services` services whose engine runs cpu workers.
pub fn choose(cores: usize, gpu_threads: usize, cpu_services: usize) -> Threads {
    let cores = cores.max(1);
    let (io_threads, mut io_why) = if gpu_threads <= 1 {
        (
            cores,
            format!(
                "one io thread per core ({cores}){}",
                if gpu_threads == 1 {
                    ", the one GPU host thread sharing them"
                } else {
                    ""
                }
            ),
        )
    } else {
        let io = cores.saturating_sub(gpu_threads).max(1);
        (
            io,
            format!("{cores} cores less a core for each of the {gpu_threads} GPU host threads"),
        )
    };
    if io_threads > MAX_IO_THREADS {
        io_why = format!("{io_why}, at most {MAX_IO_THREADS}");
    }
    let io_threads = io_threads.min(MAX_IO_THREADS);
    // None: no service runs cpu workers.
    let workers = cores.checked_div(cpu_services).map_or(0, |w| w.max(1));
    let why = if cpu_services == 0 {
        io_why
    } else {
        format!(
            "{io_why}; {workers} cpu workers per service ({cores} cores over {cpu_services} \
             cpu-engine services, sharing the io threads' cores)"
        )
    };
    Threads {
        io_threads,
        workers,
        why,
    }
}

/// A service's GPU host threads: `--control-threads` per GPU, or one per
/// `--gpus-per-control-thread` GPUs, on the batching engines (hybrid's GPU side included), one
/// per GPU on gpu-persistent, none on the CPU engines.
pub(crate) fn gpu_threads(p: &ServicePlan) -> usize {
    match p.cfg.engine {
        EngineKind::GpuDirect | EngineKind::GpuCohort | EngineKind::Hybrid => {
            p.cfg.gpu.gpu_threads()
        }
        EngineKind::GpuPersistent => p.cfg.gpu.gpus.len(),
        EngineKind::Cpu | EngineKind::Inline => 0,
    }
}

/// The services whose engine runs cpu workers (the cpu engine, hybrid's CPU side).
fn cpu_services(plans: &[ServicePlan]) -> usize {
    plans
        .iter()
        .filter(|p| matches!(p.cfg.engine, EngineKind::Cpu | EngineKind::Hybrid))
        .count()
}

/// The server's io threads and default cpu workers: `io_threads` (`--io-threads`) where
/// given (not 0), else `threads::choose` over its `cores`, its GPU engines' host threads and
/// its cpu services. Chosen once, by `ServerConfig::resolve`.
pub(crate) fn for_plans(
    cores: usize,
    io_threads: usize,
    plans: &[ServicePlan],
) -> crate::threads::Threads {
    let gpu: usize = plans.iter().map(gpu_threads).sum();
    let mut t = choose(cores, gpu, cpu_services(plans));
    if io_threads > 0 {
        t.io_threads = io_threads;
        t.why = format!("--io-threads {io_threads} (given); workers: {}", t.why);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_points_follow_the_rule() {
        // 8 cores, one GPU (one control thread): the bench's 8 io threads.
        assert_eq!(choose(8, 1, 0).io_threads, 8);
        // 8 cores, 4 GPUs with a control thread each: 4 io threads.
        assert_eq!(choose(8, 4, 0).io_threads, 4);
        // The cpu engine on 8 cores: 8 io threads and 8 workers (the served bench's runs).
        let t = choose(8, 0, 1);
        assert_eq!((t.io_threads, t.workers), (8, 8));
        assert!(t.why.contains("8 cpu workers per service"), "{}", t.why);
    }

    #[test]
    fn every_choice_has_a_thread_and_says_why() {
        for cores in [0, 1, 2, 3, 8, 16, 128] {
            for gpu_threads in [0, 1, 2, 4, 8, 64] {
                for cpu_services in [0, 1, 2, 3] {
                    let t = choose(cores, gpu_threads, cpu_services);
                    assert!(t.io_threads >= 1 && t.io_threads <= cores.max(1));
                    assert!(t.io_threads <= MAX_IO_THREADS);
                    assert_eq!(t.workers == 0, cpu_services == 0);
                    assert!(t.workers <= cores.max(1));
                    assert!(!t.why.is_empty());
                    if gpu_threads >= 2 && cores > gpu_threads && cores - gpu_threads <= 16 {
                        assert_eq!(t.io_threads + gpu_threads, cores, "{t:?}");
                    }
                }
            }
        }
        assert_eq!(choose(1, 0, 1).io_threads, 1);
        let big = choose(128, 1, 0);
        assert_eq!(big.io_threads, MAX_IO_THREADS);
        assert!(big.why.ends_with("at most 16"), "{}", big.why);
        assert_eq!(choose(2, 8, 0).io_threads, 1);
        assert_eq!(choose(6, 0, 2).workers, 3);
        assert!(choose(8, 4, 0).why.contains("4 GPU host threads"));
    }
}
