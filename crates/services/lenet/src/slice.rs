//! The lenet service's catalog listing: how the server builds it from its settings (its
//! entry), its kernels and checks, its benchmark and model tools.

use super::config::{LenetSettings, Math, FLAGS};
use super::model::Weights;
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
    flags: FLAGS,
    gpu: Some(gpu),
    persistent: Some(persistent),
    ..Entry::cpu(
        "lenet",
        super::ID,
        |s| resolved::<LenetSettings>("lenet", s),
        service,
        |o| Ok(Arc::new(super::load::LenetWorkload::from_options(o)?)),
    )
};

pub const LISTING: Listing = Listing {
    entry: ENTRY,
    checks: Checks {
        kernels: super::kernels::sources,
        selftest: Some(SelftestCase {
            payloads: super::gpu::selftest_payloads,
            compare: super::gpu::same_answer,
            setup: None,
            persistent_variants: &[
                &[("math", "fp32")],
                &[("persistent", "team")],
                &[("persistent", "team"), ("math", "fp32")],
            ],
            gpu_payload_limit: usize::MAX,
        }),
        gpu_checks: &[GpuCheck {
            name: "lenet kernels vs cpu twin",
            run: super::gpu::check,
            persistent: false,
        }],
        ..Checks::NONE
    },
    tools: Tools {
        benches: super::bench::BENCHES,
        #[cfg(feature = "train")]
        models: super::train::COMMANDS,
        #[cfg(not(feature = "train"))]
        models: &[],
        ..Tools::NONE
    },
};

fn weights(s: &Settings) -> Result<Arc<Weights>, String> {
    let c: LenetSettings = typed("lenet", s)?;
    Weights::load(c.model.as_deref())
        .map(Arc::new)
        .map_err(|e| format!("lenet: {e}"))
}

fn math(s: &Settings) -> Result<Math, String> {
    Ok(typed::<LenetSettings>("lenet", s)?.math)
}

fn service(s: &Settings, _on_gpu: bool) -> Result<Arc<dyn Service>, String> {
    Ok(Arc::new(super::Lenet {
        weights: weights(s)?,
    }))
}

fn gpu(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    let w = weights(s)?;
    Ok(Arc::new(
        super::gpu::LenetGpu::new(dev, &w, math(s)?).map_err(|e| e.to_string())?,
    ))
}

fn persistent(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn PersistentBackend>, String> {
    let w = weights(s)?;
    let c: LenetSettings = typed("lenet", s)?;
    Ok(Arc::new(
        super::persistent::LenetPersistent::new(dev, &w, c.math, c.persistent)
            .map_err(|e| e.to_string())?,
    ))
}
