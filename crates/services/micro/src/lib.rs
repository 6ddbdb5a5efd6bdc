//! Lynx's micro-benchmarks, two services that share their GPU code: `echo` (returns the
//! payload: network-bound) and `spin` (busy-waits a requested time: compute-bound). One batch
//! backend (`gpu.rs`, `kernels/micro.cu`) and one persistent backend (`persistent.rs`,
//! `kernels/micro_persistent.cu`) serve both.

pub mod echo;
#[cfg(feature = "backends")]
pub mod gpu;
pub mod load;
#[cfg(feature = "backends")]
pub mod persistent;
#[cfg(feature = "backends")]
pub mod selftest;
#[cfg(feature = "backends")]
pub mod slice;
pub mod spin;

/// The compilation units of both backends.
#[cfg(feature = "backends")]
pub fn sources() -> Vec<&'static cohort_gpu::KernelSource> {
    vec![gpu::source(), persistent::source()]
}
