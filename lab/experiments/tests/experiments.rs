//! The experiments' kernels: compile checks (NVRTC, no GPU needed) and GPU-vs-CPU checks
//! (SKIPPED with the reason where no GPU exists).

use cohort_gpu::{probe, report_skip};

#[test]
fn every_kernel_compiles_for_sm90_through_nvrtc() {
    cohort_gpu::kernel_check::every_kernel_compiles(
        "experiments",
        cohort_experiments::kernel_sources(),
        &[],
    );
}

fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The multi-stream kernel in every memory mode, and the NUMA calibration kernels on every
/// split of the work, against their twins (one GPU; with two, the second holds the peer halves:
/// `cohort-lab sim numa calibrate` checks that run).
#[test]
fn gpu_kernels_match_cpu_twins() {
    if let Err(e) = probe() {
        report_skip("experiments' kernels vs cpu twins", &e.to_string());
        return;
    }
    for line in cohort_experiments::selftest::run(seed()).unwrap() {
        eprintln!("{line}");
    }
}
