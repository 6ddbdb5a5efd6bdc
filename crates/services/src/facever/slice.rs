//! The facever service's catalog entry: how the server builds it from its settings.

use super::config::FaceverSettings;
use super::db::FaceDb;
use crate::catalog::{Entry, GpuCheck};
use crate::config::{resolved, typed, Settings};
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::DeviceInfo;
use std::sync::Arc;

pub const ENTRY: Entry = Entry {
    name: "facever",
    id: super::ID,
    flags: super::config::FLAGS,
    resolve: |s| resolved::<FaceverSettings>("facever", s),
    build: service,
    gpu: Some(gpu),
    // Lynx's GPU-centric design runs on gpu-cohort (the slot's client queue); a persistent
    // worker that posts its fetches itself is not built.
    persistent: None,
    one_gpu: false,
    kernels: || vec![super::kernels::source()],
    benches: &[],
    models: super::tools::COMMANDS,
    // The selftest compares engines without a database; the GPU check covers the kernels.
    selftest: None,
    gpu_checks: &[GpuCheck {
        name: "facever kernels vs cpu twin",
        run: super::gpu::check,
    }],
    workload: |o| Ok(Arc::new(super::load::FaceverWorkload::from_options(o)?)),
};

/// Connections the cpu engine's workers (or a device's client queues) share.
const CONNECTIONS: u32 = 64;

/// The database and the threshold: the setting's, or the one stored with the references.
fn database(s: &Settings) -> Result<(FaceverSettings, Arc<FaceDb>, f32), String> {
    let c: FaceverSettings = typed("facever", s)?;
    let db = FaceDb::connect(&c.memcached, CONNECTIONS).map_err(|e| format!("facever: {e}"))?;
    let threshold = match c.threshold {
        Some(t) => t,
        None => db.threshold().map_err(|e| format!("facever: {e}"))?,
    };
    Ok((c, Arc::new(db), threshold))
}

fn service(s: &Settings, _on_gpu: bool) -> Result<Arc<dyn Service>, String> {
    let (_, db, threshold) = database(s)?;
    Ok(Arc::new(super::service::Facever {
        db,
        threshold,
        table: super::lbp::uniform_table(),
    }))
}

fn gpu(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    let (c, db, threshold) = database(s)?;
    Ok(Arc::new(
        super::gpu::FaceverGpu::new(dev, db, threshold, c.design).map_err(|e| e.to_string())?,
    ))
}
