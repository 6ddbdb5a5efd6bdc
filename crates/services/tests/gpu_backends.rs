//! The services' kernels compile (NVRTC, no GPU needed; CI requires it), and on a GPU machine
//! every GPU backend matches its CPU twin through the real engines. A check that cannot run
//! says so on the real stderr (`SKIPPED ...`), so the log never shows a skip as a pass.

use cohort_gpu::{compile_cached, nvrtc_available, probe, report_skip};

#[test]
fn service_kernels_compile_for_sm90_through_nvrtc() {
    if !nvrtc_available() {
        assert!(
            std::env::var_os("COHORT_REQUIRE_NVRTC").is_none(),
            "NVRTC required but not loadable"
        );
        report_skip("service kernels compile", "NVRTC is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("cohort-skcache-{}", std::process::id()));
    std::env::set_var("COHORT_KERNEL_CACHE", &dir);
    let sources: [(&cohort_gpu::KernelSource, &[&str]); 2] = [
        (
            &cohort_services::micro_gpu::KERNELS,
            &["echo_rows", "spin_rows"],
        ),
        (
            cohort_services::micro_persistent::source(),
            &["cohort_ingress", "p_reset", "micro_p_worker"],
        ),
    ];
    for (src, kernels) in sources {
        let ptx = compile_cached(src, "sm_90").unwrap_or_else(|e| panic!("{}: {e}", src.name));
        let text = ptx.to_src();
        for f in kernels {
            assert!(
                text.contains(&format!(".entry {f}(")),
                "{} lacks {f}",
                src.name
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
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
