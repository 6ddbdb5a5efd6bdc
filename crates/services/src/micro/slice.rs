//! The catalog entries of echo and spin: no settings of their own.

use super::gpu::{Micro, MicroGpu};
use super::persistent::MicroPersistent;
use crate::config::{resolved, ServiceConfig};
use crate::entry::Entry;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::PersistentBackend;
use cohort_gpu::DeviceInfo;
use std::sync::Arc;

/// Echo and spin take no settings: any key is unknown.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

impl ServiceConfig for NoSettings {}

pub const ECHO: Entry = Entry {
    name: "echo",
    id: super::echo::ID,
    flags: &[],
    resolve: |s| resolved::<NoSettings>("echo", s),
    build: |s, _| {
        resolved::<NoSettings>("echo", s)?;
        Ok(Arc::new(super::echo::Echo))
    },
    gpu: Some(|_, dev| gpu(Micro::Echo, dev)),
    gpu_set: None,
    persistent_set: None,
    persistent: Some(|_, dev| persistent(Micro::Echo, dev)),
    persistent_request_bytes: 0,
    one_gpu: false,
    kernels: super::sources,
    benches: &[],
    models: &[],
    selftest: None,
    gpu_checks: &[],
    workload: |o| {
        Ok(Arc::new(super::load::EchoWorkload {
            payload_bytes: o.payload_bytes,
        }))
    },
};

pub const SPIN: Entry = Entry {
    name: "spin",
    id: super::spin::ID,
    flags: &[],
    resolve: |s| resolved::<NoSettings>("spin", s),
    build: |s, _| {
        resolved::<NoSettings>("spin", s)?;
        Ok(Arc::new(super::spin::Spin))
    },
    gpu: Some(|_, dev| gpu(Micro::Spin, dev)),
    gpu_set: None,
    persistent_set: None,
    persistent: Some(|_, dev| persistent(Micro::Spin, dev)),
    persistent_request_bytes: 0,
    one_gpu: false,
    // The same units as echo's (listed once, under echo).
    kernels: Vec::new,
    benches: &[],
    models: &[],
    selftest: None,
    gpu_checks: &[],
    workload: |o| {
        Ok(Arc::new(super::load::SpinWorkload {
            spin_us: o.spin_us,
            payload_bytes: o.payload_bytes,
        }))
    },
};

fn gpu(kind: Micro, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    Ok(Arc::new(
        MicroGpu::new(kind, dev).map_err(|e| e.to_string())?,
    ))
}

fn persistent(kind: Micro, dev: &DeviceInfo) -> Result<Arc<dyn PersistentBackend>, String> {
    Ok(Arc::new(
        MicroPersistent::new(kind, dev).map_err(|e| e.to_string())?,
    ))
}
