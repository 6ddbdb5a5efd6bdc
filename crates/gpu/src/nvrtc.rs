//! CUDA sources (each backend's, embedded in the binary) compiled by NVRTC at run time and
//! cached on disk by (source hash, architecture), so a restart does not pay ~100 ms per
//! kernel file again.

use crate::prelude::KernelSource;
use crate::{DeviceInfo, GpuError};
use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::{CompileOptions, Ptx};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// `src` compiled for `dev` (from the cache when it was before) and loaded into `ctx`: what
/// every GPU backend does once at start.
pub fn load_module(
    ctx: &Arc<CudaContext>,
    dev: &DeviceInfo,
    src: &KernelSource,
) -> Result<Arc<CudaModule>, GpuError> {
    Ok(ctx.load_module(compile_cached(src, arch_name(dev))?)?)
}

/// NVRTC takes the architecture as `&'static str`: one interned copy per architecture, not
/// one leaked per backend started.
fn arch_name(dev: &DeviceInfo) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let want = dev.arch();
    let mut names = NAMES.lock().expect("arch names");
    if let Some(n) = names.iter().find(|n| **n == want) {
        return n;
    }
    let n: &'static str = Box::leak(want.into_boxed_str());
    names.push(n);
    n
}

pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("COHORT_KERNEL_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cohort").join("kernels")
}

/// PTX for `src` on `arch` (e.g. "sm_90"), from the cache or freshly compiled.
pub fn compile_cached(src: &KernelSource, arch: &'static str) -> Result<Ptx, GpuError> {
    let mut h = Sha256::new();
    h.update(src.source.as_bytes());
    h.update(arch.as_bytes());
    let key: String = h
        .finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = cache_dir().join(format!(
        "{}-{arch}-{key}.ptx",
        src.name.trim_end_matches(".cu")
    ));
    if let Ok(text) = std::fs::read_to_string(&path) {
        return Ok(Ptx::from_src(text));
    }
    if !nvrtc_available() {
        return Err(GpuError::NoNvrtc("libnvrtc not found (install nvidia-cuda-nvrtc and add its lib folder to LD_LIBRARY_PATH)".into()));
    }
    let opts = CompileOptions {
        arch: Some(arch),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    let ptx =
        cudarc::nvrtc::compile_ptx_with_opts(src.source, opts).map_err(|e| GpuError::Compile {
            name: src.name.into(),
            log: format!("{e:?}"),
        })?;
    // Cache write is best effort and atomic (temporary file, then rename).
    if std::fs::create_dir_all(cache_dir()).is_ok() {
        // Unique per process and thread: two threads may compile the same unit at once.
        let tmp = path.with_extension(format!(
            "tmp.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        if std::fs::write(&tmp, ptx.to_src()).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(ptx)
}
