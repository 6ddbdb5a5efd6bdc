//! The GPU layer: device probe, NVRTC with an on-disk cache, pinned and mapped memory, and
//! the generic GPU engines (gpu-direct, gpu-cohort, gpu-persistent). It knows no service:
//! a service brings its kernels and backends through the traits of [`engine`] and
//! [`persistent`]. Everything here works on a machine without CUDA: [`probe`] says "no CUDA
//! device" instead of the driver library panicking, and every driver or NVRTC failure is a
//! typed [`GpuError`].

mod device;
pub mod engine;
mod error;
pub mod green;
pub mod kernel_check;
pub mod launch;
mod nvrtc;
pub mod overheads;
pub mod persistent;
pub mod prelude;
mod stage_timer;

pub use device::{find_device, pick_devices, probe, probe_physical, virtual_devices, DeviceInfo};
pub use error::GpuError;
pub use nvrtc::{compile_cached, load_module, nvrtc_available};
pub use prelude::{KernelSource, Prelude};
pub use stage_timer::StageTimer;

/// Hardware work queues per context the driver opens (`CUDA_DEVICE_MAX_CONNECTIONS`, 8 by
/// default, 32 at most). Streams beyond them share a queue, and a stream waiting on another
/// stream's event then also holds back the work queued behind it on the same queue. A
/// sharded index's devices wait on one another's events from many streams at once: sharded
/// k-NN over 8 virtual GPUs of an H100 served 334 K queries/s with 8 connections and 635 K
/// with 32 (lab/results/knn-shard-connections-h100).
pub const DEVICE_CONNECTIONS: &str = "32";

/// The driver settings the process needs, unless the user set them: the driver reads them at
/// cuInit, so this runs before any CUDA call (first thing in `main`, single-threaded).
/// Persistent kernels never end, so with lazy module loading a later module load could wait
/// on them forever (`CUDA_MODULE_LOADING=EAGER`); and every stream a queue of its own
/// ([`DEVICE_CONNECTIONS`]).
pub fn set_driver_defaults() {
    for (key, value) in [
        ("CUDA_MODULE_LOADING", "EAGER"),
        ("CUDA_DEVICE_MAX_CONNECTIONS", DEVICE_CONNECTIONS),
    ] {
        if std::env::var_os(key).is_none() {
            std::env::set_var(key, value);
        }
    }
}

/// Says that a GPU check was skipped, on the process's real stderr: the test harness captures
/// `eprintln!`, which would leave a skipped check looking like a pass in the log.
pub fn report_skip(check: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {check}: {reason}");
}
