//! The facever service's catalog listing: how the server builds it from its settings (its
//! entry), its kernels and checks, its database's command and its evaluation.

use super::config::FaceverSettings;
use super::db::FaceDb;
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::PersistentBackend;
use cohort_gpu::DeviceInfo;
use cohort_service_api::checks::{Checks, GpuCheck, SelftestCase};
use cohort_service_api::config::{resolved, typed, Settings};
use cohort_service_api::entry::Entry;
use cohort_service_api::listing::Listing;
use cohort_service_api::tools::Tools;
use std::sync::Arc;

pub const ENTRY: Entry = Entry {
    flags: super::config::FLAGS,
    gpu: Some(gpu),
    // The GPU-centric design only: the worker posts its fetches itself.
    persistent: Some(persistent),
    persistent_request_bytes: super::REQUEST_BYTES,
    ..Entry::cpu(
        "facever",
        super::ID,
        |s| resolved::<FaceverSettings>("facever", s),
        service,
        |o| Ok(Arc::new(super::load::FaceverWorkload::from_options(o)?)),
    )
};

pub const LISTING: Listing = Listing {
    entry: ENTRY,
    checks: Checks {
        kernels: super::kernels::sources,
        // Every GPU engine against the CPU function, over a real memcached the case starts.
        selftest: Some(SelftestCase {
            payloads: super::selftest::payloads,
            compare: super::selftest::same_verdict,
            setup: Some(super::selftest::setup),
            persistent_variants: &[],
            gpu_payload_limit: usize::MAX,
        }),
        gpu_checks: &[GpuCheck {
            name: "facever kernels vs cpu twin",
            run: super::gpu::check,
            persistent: false,
        }],
        ..Checks::NONE
    },
    tools: Tools {
        // `cohort facever load-db`: serving it needs its database filled.
        commands: super::tools::COMMANDS,
        models: super::tools::MODELS,
        ..Tools::NONE
    },
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

fn persistent(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn PersistentBackend>, String> {
    let (c, db, threshold) = database(s)?;
    if c.design != super::config::Design::Gpu {
        return Err(
            "facever: gpu-persistent runs the GPU-centric design only (design = gpu); \
             the host-centric design runs on gpu-direct and gpu-cohort"
                .into(),
        );
    }
    Ok(Arc::new(
        super::persistent::FaceverPersistent::new(dev, db, threshold).map_err(|e| e.to_string())?,
    ))
}
