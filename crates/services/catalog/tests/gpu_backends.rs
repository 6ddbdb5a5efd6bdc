//! The services' kernels compile (NVRTC, no GPU needed; CI requires it), and on a GPU machine
//! every GPU backend matches its CPU twin through the real engines. A check that cannot run
//! says so on the real stderr (`SKIPPED ...`), so the log never shows a skip as a pass.

use cohort_gpu::{probe, report_skip};

#[test]
fn service_kernels_compile_for_sm90_through_nvrtc() {
    // Every unit's kernels, batch and persistent, are held to their Rust declarations.
    cohort_gpu::kernel_check::every_kernel_compiles(
        "services",
        &cohort_services::catalog::kernel_sources(),
        &[],
    );
}

/// Every service's own GPU checks (its listing's `Checks::gpu_checks`, in its folder: kernels,
/// parsers, backends) against their CPU twins on fresh random inputs, each on the first GPU
/// (and a check over several devices over every GPU found too).
#[test]
fn every_services_gpu_checks_match_their_cpu_twins() {
    let devs = match probe() {
        Ok(d) => d,
        Err(e) => {
            for (service, check) in cohort_services::catalog::gpu_checks() {
                report_skip(&format!("{service}: {}", check.name), &e.to_string());
            }
            return;
        }
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    for (service, check) in cohort_services::catalog::gpu_checks() {
        eprintln!("{service}: {} (seed {seed})", check.name);
        match (check.run)(&devs, seed) {
            Ok(lines) => lines.iter().for_each(|l| eprintln!("{l}")),
            Err(e) => panic!("{service}: {}: {e}", check.name),
        }
    }
}

#[test]
fn gpu_backends_match_their_cpu_twins() {
    // Before cuInit: persistent kernels need eager module loading.
    std::env::set_var("CUDA_MODULE_LOADING", "EAGER");
    if let Err(e) = probe() {
        report_skip("gpu backends vs cpu twins", &e.to_string());
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    eprintln!("seed {seed}");
    for line in cohort_services::selftest::run(seed, true).unwrap() {
        eprintln!("{line}");
    }
}
