//! Kernel compile checks (NVRTC, no GPU needed) and GPU-vs-CPU checks (skipped with a printed
//! reason where no GPU exists).

use cohort_gpu::{compile_cached, kernel_sources, nvrtc_available, probe, report_skip};

/// CI installs NVRTC from PyPI and sets COHORT_REQUIRE_NVRTC=1, so a kernel that does not
/// compile fails CI.
#[test]
fn every_kernel_compiles_for_sm90_through_nvrtc() {
    if !nvrtc_available() {
        assert!(
            std::env::var_os("COHORT_REQUIRE_NVRTC").is_none(),
            "NVRTC required but not loadable"
        );
        report_skip(
            "kernels compile",
            "NVRTC is not installed (pip install nvidia-cuda-nvrtc; add its lib folder to LD_LIBRARY_PATH)",
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("cohort-kcache-{}", std::process::id()));
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    std::env::set_var("COHORT_KERNEL_CACHE", &dir);
    for src in kernel_sources() {
        let ptx = compile_cached(src, "sm_90").unwrap_or_else(|e| panic!("{}: {e}", src.name));
        let text = ptx.to_src();
        assert!(
            text.contains(".target sm_90"),
            "{}: not sm_90 PTX",
            src.name
        );
        let kernels: &[&str] = match src.name {
            "knn.cu" => &["knn_filter", "knn_search", "knn_search_f16", "knn_reduce"],
            "knn_tiled.cu" => &[
                "knn_filter_tiled",
                "knn_select_filter",
                "knn_plan",
                "knn_scan_items",
                "knn_scatter",
                "knn_search_tiled",
                "knn_search_tiled_f16",
                "knn_search_tiled_u8",
                "knn_select_search",
                "knn_select_search_wide",
            ],
            "kmeans.cu" => &["kmeans_assign"],
            "streams.cu" => &["stream_packet"],
            "numa_calib.cu" => &["calib_triad", "calib_stencil"],
            "knn_persistent.cu" => &[
                "cohort_ingress",
                "p_reset",
                "knn_p_filter",
                "knn_p_search",
                "knn_p_search_f16",
                "knn_p_search_u8",
                "knn_p_reduce",
                "knn_p_cohort",
                "knn_p_cohort_f16",
                "knn_p_cohort_u8",
            ],
            other => panic!("no kernel list for {other}"),
        };
        for f in kernels {
            assert!(
                text.contains(&format!(".entry {f}(")),
                "{} lacks kernel {f}",
                src.name
            );
        }
        // Second call hits the on-disk cache.
        assert!(std::fs::read_dir(&dir).unwrap().count() >= 1);
        compile_cached(src, "sm_90").unwrap();
    }
}

#[test]
fn gpu_kernels_match_cpu_twins() {
    if let Err(e) = probe() {
        report_skip("gpu kernels vs cpu twins", &e.to_string());
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for line in cohort_gpu::selftest::run(seed).unwrap() {
        eprintln!("{line}");
    }
}

/// The NUMA calibration kernels on every split of the work against their twins (one GPU;
/// with two, the second holds the peer halves: `cohort sim numa calibrate` checks that run).
#[test]
fn numa_calibration_kernels_match_cpu_twins() {
    if let Err(e) = probe() {
        report_skip("numa calibration kernels vs cpu twins", &e.to_string());
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for line in cohort_gpu::selftest::check_numa_calib(seed).unwrap() {
        eprintln!("{line}");
    }
}

/// The persistent runtime's argument block and slot, as the device compiler lays them out,
/// equal their host mirrors (RtArgs, SLOT_BYTES) and the mqueue header.
#[test]
fn persistent_layout_matches_the_host_mirror() {
    use cohort_gpu::persistent::rt::{PipeArgs, RtArgs, SLOT_BYTES};
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let devs = match probe() {
        Ok(d) => d,
        Err(e) => {
            report_skip("persistent layout on the GPU", &e.to_string());
            return;
        }
    };
    let ctx = cudarc::driver::CudaContext::new(devs[0].ordinal).unwrap();
    let arch: &'static str = Box::leak(devs[0].arch().into_boxed_str());
    let m = ctx
        .load_module(compile_cached(cohort_gpu::persistent::knn_source(), arch).unwrap())
        .unwrap();
    let f = m.load_function("p_layout").unwrap();
    let s = ctx.default_stream();
    let mut out = s.alloc_zeros::<u64>(5).unwrap();
    let mut b = s.launch_builder(&f);
    b.arg(&mut out);
    unsafe { b.launch(LaunchConfig::for_num_elems(1)) }.unwrap();
    let got = s.clone_dtoh(&out).unwrap();
    let want = [
        std::mem::size_of::<RtArgs>(),
        SLOT_BYTES,
        std::mem::offset_of!(RtArgs, free_slots),
        std::mem::offset_of!(RtArgs, pipes),
        cohort_mq::SLOT_HEADER_BYTES,
    ];
    assert_eq!(
        got,
        want.map(|v| v as u64),
        "PRt/PSlot layout differs from the host's"
    );
    assert_eq!(std::mem::size_of::<PipeArgs>(), 32);
}

#[test]
fn probe_without_a_driver_is_an_error_not_a_panic() {
    // On the CI machine there is no libcuda: probe must say so; on a GPU machine it lists devices.
    match probe() {
        Ok(devs) => assert!(!devs.is_empty()),
        Err(e) => assert!(e.to_string().contains("no CUDA device"), "{e}"),
    }
}

/// The limits the host relies on are defined once (consts.rs) and reach the kernels through
/// the generated prelude; no kernel file restates one.
#[test]
fn kernel_files_never_restate_the_shared_constants() {
    let files = [
        ("common.cuh", include_str!("../kernels/common.cuh")),
        ("knn.cu", include_str!("../kernels/knn.cu")),
        ("knn_tiled.cu", include_str!("../kernels/knn_tiled.cu")),
    ];
    let prelude = cohort_gpu::consts::cuda_prelude();
    for c in ["BLOCK", "MAX_K", "MAX_DIM", "NO_ID", "QB", "RT", "SEL_MAX"] {
        let def = format!("#define {c} ");
        assert!(prelude.contains(&def), "prelude lacks {c}");
        for (name, text) in files {
            assert!(
                !text.lines().any(|l| l.trim_start().starts_with(&def)),
                "{name} restates {c}"
            );
        }
    }
    assert!(prelude.contains(&format!("#define MAX_K {}\n", cohort_gpu::knn::GPU_MAX_K)));
    for s in kernel_sources() {
        assert!(
            s.source.starts_with(&prelude),
            "{} compiled without the prelude",
            s.name
        );
    }
}
