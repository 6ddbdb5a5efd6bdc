//! The check every kernel registry's test runs (the runtime's, each service's, the
//! experiments'): each source compiles for sm_90 through NVRTC, exports every kernel its files
//! declare, hits the on-disk cache the second time, and restates no generated limit. A unit of
//! typed batch kernels also exports exactly the kernels Rust declares, and compiles with
//! `static_assert`s that every argument block's CUDA struct has Rust's size and offsets. CI
//! installs NVRTC and sets `COHORT_REQUIRE_NVRTC=1`, so a kernel that does not compile fails CI.

use crate::{compile_cached, nvrtc_available, report_skip, KernelSource};
use rayon::prelude::*;

/// Compiles and checks `sources`; panics (this is a test helper) on the first failure. `also`
/// names kernels a source's macros make (which its text does not spell out), for units
/// without typed declarations: a typed unit's exports are checked against its declarations.
/// Without NVRTC it reports the skip, unless `COHORT_REQUIRE_NVRTC` is set.
pub fn every_kernel_compiles(what: &str, sources: &[&KernelSource], also: &[(&str, &[&str])]) {
    for s in sources {
        let restated = s.restated();
        assert!(restated.is_empty(), "{restated:#?}");
    }
    if !nvrtc_available() {
        assert!(
            std::env::var_os("COHORT_REQUIRE_NVRTC").is_none(),
            "NVRTC required but not loadable"
        );
        report_skip(
            &format!("{what} kernels compile"),
            "NVRTC is not installed (pip install nvidia-cuda-nvrtc; add its lib folder to LD_LIBRARY_PATH)",
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("cohort-kcache-{what}-{}", std::process::id()));
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    std::env::set_var("COHORT_KERNEL_CACHE", &dir);
    // NVRTC compiles one program per call on one thread; the units are independent, so they
    // compile side by side (the whole check takes minutes serially on a 2-core CI machine).
    let compiled: Vec<_> = sources
        .par_iter()
        .map(|src| {
            let t = std::time::Instant::now();
            let ptx = compile_cached(src, "sm_90").map(|ptx| ptx.to_src());
            // The slowest unit bounds the check (and a service's first start).
            eprintln!(
                "{what}: {} compiled in {:.1} s",
                src.name,
                t.elapsed().as_secs_f64()
            );
            ptx
        })
        .collect();
    for (src, text) in sources.iter().zip(compiled) {
        let text = text.unwrap_or_else(|e| panic!("{}: {e}", src.name));
        assert!(
            text.contains(".target sm_90"),
            "{}: not sm_90 PTX",
            src.name
        );
        let mut entries = src.entry_points();
        for (name, more) in also {
            if *name == src.name {
                entries.extend_from_slice(more);
            }
        }
        assert!(!entries.is_empty(), "{} declares no kernel", src.name);
        for f in entries {
            assert!(
                text.contains(&format!(".entry {f}(")),
                "{} lacks kernel {f}",
                src.name
            );
        }
        if !src.typed.is_empty() {
            typed_kernels_match(src, &text);
        }
        // The second call hits the on-disk cache.
        assert!(std::fs::read_dir(&dir).unwrap().count() >= 1);
        compile_cached(src, "sm_90").unwrap();
    }
    for (name, _) in also {
        assert!(
            sources.iter().any(|s| s.name == *name),
            "no source {name} to look for its macro-made kernels in"
        );
    }
}

/// `src`'s exports are exactly its Rust-declared kernels, and its argument blocks' layouts are
/// asserted in it.
fn typed_kernels_match(src: &KernelSource, ptx: &str) {
    let exported: Vec<&str> = ptx
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
        .chain(
            ptx.lines()
                .filter_map(|l| l.trim_start().strip_prefix(".entry ")),
        )
        .map(|l| l.split('(').next().unwrap_or("").trim())
        .collect();
    for (name, _) in &src.typed {
        assert!(
            exported.contains(name),
            "{}: declared kernel {name} is not exported",
            src.name
        );
    }
    for e in &exported {
        assert!(
            src.typed.iter().any(|(n, _)| n == e),
            "{}: kernel {e} has no Rust declaration (KernelDecl with its argument block)",
            src.name
        );
    }
    // The layouts are asserted inside the unit itself (KernelSource::assemble_typed), which
    // compiled above.
    assert!(
        src.source
            .contains(&format!("static_assert(sizeof({})", src.typed[0].1.name)),
        "{}: the unit lacks its layout assertions",
        src.name
    );
}
