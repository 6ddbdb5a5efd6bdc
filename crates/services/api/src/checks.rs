//! A service's self-checks, its [`Checks`]: its kernels (CI compiles each through NVRTC), the
//! requests the engines' selftest sends it, its GPU code against its CPU twins and its own
//! runs through the engines. The product's (`cohort selftest gpu`, the services' GPU test
//! executable), not serving's: the server never reads them. Nothing here names a service.

use crate::config::Settings;
use cohort_gpu::{DeviceInfo, KernelSource};

/// What checks a service beside serving it (none by default: `..Checks::NONE`).
pub struct Checks {
    /// Its kernels' compilation units (CI compiles each through NVRTC).
    pub kernels: fn() -> Vec<&'static KernelSource>,
    /// Requests the selftest sends through every GPU engine it has a backend for, and how an
    /// answer is compared with the CPU function's (`selftest::run`).
    pub selftest: Option<SelftestCase>,
    /// Its GPU code against its CPU twins, beyond what the selftest runs through the engines
    /// (the services' GPU test executable runs every one on the GPU machine).
    pub gpu_checks: &'static [GpuCheck],
    /// Its own checks through the engines beside (or instead of) its selftest case, for what
    /// a case of payloads cannot say (knn: a fresh random index through every engine and
    /// plan; spin: its timing, and the watchdog provoked). Run by the selftest.
    pub engine_checks: Option<EngineChecks>,
}

impl Checks {
    /// No kernels and no checks: a CPU-only service's, and what every service's starts from.
    pub const NONE: Checks = Checks {
        kernels: Vec::new,
        selftest: None,
        gpu_checks: &[],
        engine_checks: None,
    };
}

/// A service's own run through the engines (`harness`) on one device, from a seed;
/// `persistent`: gpu-persistent too. The lines it logs, or the first mismatch.
pub type EngineChecks = fn(&DeviceInfo, u64, bool) -> Result<Vec<String>, String>;

/// A service's requests for the engines' selftest: fresh ones from `seed` (bad ones
/// included), and whether a GPU answer agrees with the CPU function's.
pub struct SelftestCase {
    pub payloads: fn(u64) -> Vec<Vec<u8>>,
    pub compare: fn(&[u8], &[u8]) -> Result<(), String>,
    /// The settings its backends are built with and what must live while they serve
    /// (facever: a memcached it started and filled); None here: the defaults. Ok(None): it
    /// cannot run on this machine (the reason already logged as a skip).
    pub setup: Option<SelftestSetup>,
    /// Settings the persistent engine is checked with too, each on top of the case's own
    /// (`("persistent", "team")`): the plans and maths only that engine's kernels differ in.
    pub persistent_variants: &'static [&'static [(&'static str, &'static str)]],
    /// The largest payload its batched GPU backend carries: a larger one may be refused
    /// TOO_LARGE where the CPU function answers it (usize::MAX: no limit of its own).
    pub gpu_payload_limit: usize,
}

/// What a selftest setup gives: the settings, and what must outlive the run.
pub type SelftestSettings = (Settings, Box<dyn std::any::Any>);
pub type SelftestSetup = fn() -> Result<Option<SelftestSettings>, String>;

/// A check of a service's GPU code against its CPU twin on one device, on fresh random
/// inputs drawn from `seed`: the lines it logs, or why it could not run. A mismatch panics,
/// naming the input and both answers.
pub struct GpuCheck {
    pub name: &'static str,
    /// On the serving devices given (`selftest gpu --gpus`; the first is where a check of one
    /// device runs, a check over several devices adds a run over all of them).
    pub run: fn(&[DeviceInfo], u64) -> Result<Vec<String>, String>,
    /// It runs gpu-persistent's kernels (left out by `selftest gpu --no-persistent`: under
    /// compute-sanitizer they spin too slowly to finish).
    pub persistent: bool,
}
