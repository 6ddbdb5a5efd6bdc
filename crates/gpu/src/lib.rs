//! The GPU layer. Everything here works on a machine without CUDA: [`probe`] says "no CUDA
//! device" instead of the driver library panicking, and every driver or NVRTC failure is a
//! typed [`GpuError`].

pub mod consts;
mod device;
pub mod engine;
mod error;
pub mod kmeans;
pub mod knn;
pub mod numa_calib;
mod nvrtc;
pub mod persistent;
pub mod selftest;
pub mod streams;

pub use device::{probe, DeviceInfo};
pub use error::GpuError;
pub use nvrtc::{
    compile_cached, embedded, kernel_sources, load_module, nvrtc_available, KernelSource,
};

/// Says that a GPU check was skipped, on the process's real stderr: the test harness captures
/// `eprintln!`, which would leave a skipped check looking like a pass in the log.
pub fn report_skip(check: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {check}: {reason}");
}
