//! The GPU layer. Everything here works on a machine without CUDA: [`probe`] says "no CUDA
//! device" instead of the driver library panicking, and every driver or NVRTC failure is a
//! typed [`GpuError`].

mod device;
pub mod engine;
mod error;
pub mod knn;
mod nvrtc;
pub mod selftest;

pub use device::{probe, DeviceInfo};
pub use error::GpuError;
pub use nvrtc::{compile_cached, kernel_sources, nvrtc_available, KernelSource};
