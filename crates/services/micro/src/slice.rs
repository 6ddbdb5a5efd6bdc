//! The catalog listings of echo and spin: no settings of their own, no tools; their kernels
//! (one set of units, listed under echo) and selftest cases.

use super::gpu::{Micro, MicroGpu, MAX_ROW_BYTES};
use super::persistent::MicroPersistent;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::PersistentBackend;
use cohort_gpu::DeviceInfo;
use cohort_service_api::checks::{Checks, SelftestCase};
use cohort_service_api::config::{resolved, ServiceConfig};
use cohort_service_api::entry::Entry;
use cohort_service_api::harness::exact;
use cohort_service_api::listing::Listing;
use cohort_service_api::tools::Tools;
use std::sync::Arc;

/// Echo and spin take no settings: any key is unknown.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

impl ServiceConfig for NoSettings {}

pub const ECHO: Listing = Listing {
    entry: ECHO_ENTRY,
    checks: Checks {
        kernels: super::sources,
        selftest: Some(SelftestCase {
            payloads: super::selftest::echo_payloads,
            compare: exact,
            setup: None,
            persistent_variants: &[],
            gpu_payload_limit: MAX_ROW_BYTES,
        }),
        ..Checks::NONE
    },
    tools: Tools::NONE,
};

const ECHO_ENTRY: Entry = Entry {
    gpu: Some(|_, dev| gpu(Micro::Echo, dev)),
    persistent: Some(|_, dev| persistent(Micro::Echo, dev)),
    ..Entry::cpu(
        "echo",
        super::echo::ID,
        |s| resolved::<NoSettings>("echo", s),
        |s, _| {
            resolved::<NoSettings>("echo", s)?;
            Ok(Arc::new(super::echo::Echo))
        },
        |o| {
            Ok(Arc::new(super::load::EchoWorkload {
                payload_bytes: o.payload_bytes,
            }))
        },
    )
};

/// Spin's kernels are echo's units (listed once, under echo).
pub const SPIN: Listing = Listing {
    entry: SPIN_ENTRY,
    checks: Checks {
        selftest: Some(SelftestCase {
            payloads: super::selftest::spin_payloads,
            compare: exact,
            setup: None,
            persistent_variants: &[],
            gpu_payload_limit: MAX_ROW_BYTES,
        }),
        engine_checks: Some(super::selftest::spin_checks),
        ..Checks::NONE
    },
    tools: Tools::NONE,
};

const SPIN_ENTRY: Entry = Entry {
    gpu: Some(|_, dev| gpu(Micro::Spin, dev)),
    persistent: Some(|_, dev| persistent(Micro::Spin, dev)),
    ..Entry::cpu(
        "spin",
        super::spin::ID,
        |s| resolved::<NoSettings>("spin", s),
        |s, _| {
            resolved::<NoSettings>("spin", s)?;
            Ok(Arc::new(super::spin::Spin))
        },
        |o| {
            Ok(Arc::new(super::load::SpinWorkload {
                spin_us: o.spin_us,
                payload_bytes: o.payload_bytes,
            }))
        },
    )
};

fn gpu(kind: Micro, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    Ok(Arc::new(
        MicroGpu::new(kind, dev).map_err(|e| e.to_string())?,
    ))
}

pub(crate) fn persistent(
    kind: Micro,
    dev: &DeviceInfo,
) -> Result<Arc<dyn PersistentBackend>, String> {
    Ok(Arc::new(
        MicroPersistent::new(kind, dev).map_err(|e| e.to_string())?,
    ))
}
