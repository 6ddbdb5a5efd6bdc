//! Without a GPU the gpu engines refuse to start with a clear message and a non-zero exit,
//! never a panic or a hang.

use crate::common;
use common::cohort;
use std::time::{Duration, Instant};

#[test]
fn gpu_engines_exit_cleanly_without_a_gpu() {
    if cohort_gpu::probe().is_ok() {
        cohort_gpu::report_skip(
            "gpu engines without a gpu",
            "this machine has a GPU; the no-GPU path cannot be checked here",
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("cohort-nogpu-{}", std::process::id()));
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    let d = dir.to_str().unwrap();
    assert!(cohort(&[
        "data",
        "synth",
        "--n",
        "2000",
        "--dim",
        "8",
        "--queries",
        "5",
        "--gt-k",
        "5",
        "--out",
        d
    ])
    .status
    .success());
    let base = format!("{d}/base.fvecs");
    let index = format!("{d}/ix");
    assert!(
        cohort(&["index", "build", "--base", &base, "--nlist", "8", "--out", &index])
            .status
            .success()
    );
    for engine in ["gpu-direct", "gpu-cohort"] {
        let t = Instant::now();
        let out = cohort(&[
            "serve",
            "--service",
            "knn",
            "--index",
            &index,
            "--engine",
            engine,
            "--udp",
            "127.0.0.1:0",
        ]);
        assert!(t.elapsed() < Duration::from_secs(20), "took too long");
        assert_eq!(out.status.code(), Some(1), "{engine}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no CUDA device") && !err.contains("panicked"),
            "{err}"
        );
    }
    // Refused before anything is loaded: an index that is not there is never reached (the
    // error would name it if the index were read first).
    let missing = format!("{d}/no-such-index");
    let out = cohort(&[
        "serve",
        "--service",
        "knn",
        "--index",
        &missing,
        "--engine",
        "gpu-cohort",
        "--udp",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("service knn runs on gpu-cohort, but there is no CUDA device")
            && !err.contains("no-such-index"),
        "{err}"
    );
    // --check-config checks what serve would: the GPU is not there.
    let out = cohort(&[
        "serve",
        "--service",
        "knn",
        "--index",
        &index,
        "--engine",
        "gpu-cohort",
        "--udp",
        "127.0.0.1:0",
        "--check-config",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("service knn runs on gpu-cohort, but there is no CUDA device"),
        "{err}"
    );
    assert_eq!(err.matches("no CUDA device").count(), 1, "said once: {err}");
    // Listing the GPUs of a machine with none is an answer, not a failure.
    let out = cohort(&["gpus"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("0 GPUs: "),
        "{out:?}"
    );
    let out = cohort(&["selftest", "gpu"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no CUDA device"));
}
