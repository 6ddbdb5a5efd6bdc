//! The bank's catalog listing: how the server builds it from its settings (its entry), its
//! kernels and GPU checks, its benchmarks.

use super::config::{BankSettings, Layout, FLAGS};
use super::store::{Memcached, Placement};
use super::{Backend, Bank};
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::DeviceInfo;
use cohort_service_api::checks::Checks;
use cohort_service_api::config::{resolved, typed, Settings};
use cohort_service_api::entry::Entry;
use cohort_service_api::listing::Listing;
use cohort_service_api::tools::Tools;
use std::sync::Arc;

/// Not built for gpu-persistent yet (gpu-cohort first, as Rhythm); no selftest case (its
/// GPU checks compare whole pages).
pub const ENTRY: Entry = Entry {
    flags: FLAGS,
    gpu: Some(gpu),
    // Sessions live in one device's memory.
    one_gpu: true,
    // Transfers and payees change the bank's state: never sent twice.
    idempotent: false,
    ..Entry::cpu(
        "bank",
        super::ID,
        |s| resolved::<BankSettings>("bank", s),
        service,
        |o| {
            if o.users == 0 {
                return Err("bank load: --users must be at least 1".into());
            }
            Ok(Arc::new(super::load::BankWorkload { users: o.users }))
        },
    )
};

pub const LISTING: Listing = Listing {
    entry: ENTRY,
    checks: Checks {
        kernels: || vec![super::kernels::source()],
        gpu_checks: super::gpu_checks::CHECKS,
        ..Checks::NONE
    },
    tools: Tools {
        benches: super::bench::BENCHES,
        ..Tools::NONE
    },
};

/// Connections the cpu engine's workers share to a memcached backend (opened as needed).
const MEMCACHED_CONNECTIONS: u32 = 64;

fn service(s: &Settings, on_gpu: bool) -> Result<Arc<dyn Service>, String> {
    let c: BankSettings = typed("bank", s)?;
    let backend = match &c.backend {
        // An engine that never runs the CPU function: the GPU backend owns the records (and
        // connects to and loads memcached itself); this object only maps JSON.
        _ if on_gpu => Backend::Computed,
        Placement::Computed => Backend::Computed,
        Placement::Gpu => {
            return Err(
                "bank: --bank-backend gpu keeps the records in GPU memory: it needs a GPU engine (gpu-cohort or gpu-direct)"
                    .into(),
            )
        }
        Placement::Memcached(addr) => {
            let m = Memcached::connect(addr, MEMCACHED_CONNECTIONS).map_err(|e| format!("bank: {e}"))?;
            m.load(c.users).map_err(|e| format!("bank: {e}"))?;
            Backend::Memcached(m)
        }
    };
    let cfg = super::BankConfig {
        users: c.users,
        max_sessions: (c.users as usize).max(1024),
        ..Default::default()
    };
    Ok(Arc::new(Bank::with_backend(&cfg, backend)))
}

fn gpu(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    let c: BankSettings = typed("bank", s)?;
    let cfg = super::backend::BankGpuConfig {
        users: c.users,
        max_sessions: c.users.max(1024),
        secret: rand::random(),
        transposed: c.layout == Layout::Transposed,
        cohorts: c.cohorts,
        backend: c.backend,
    };
    Ok(Arc::new(super::backend::BankGpu::new(dev, cfg)?))
}
