//! The services a server can host, each with its CPU function and, where it has one, its GPU
//! backend. Adding a service = its module + one line in [`CATALOG`].

use crate::knn::gpu_ivf::{GpuIvf, Precision};
use crate::micro::gpu::{Micro, MicroGpu};
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::PersistentBackend;
use cohort_gpu::DeviceInfo;
use std::path::PathBuf;
use std::sync::Arc;

/// What services may need at start-up (from flags or the config file).
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// knn: the IVF index file.
    pub index: Option<PathBuf>,
    /// knn on the cpu engine: serve from the mapped file instead of a resident copy.
    pub index_mapped: bool,
    /// knn on the GPU: element type of the vectors there.
    pub precision: Precision,
    /// knn on gpu-persistent: cohorts of the tiled plan, or per-pair stages.
    pub knn_persistent_plan: crate::knn::persistent::PersistentPlan,
    /// knn on gpu-persistent, cohort plan: block groups running cohorts side by side.
    pub knn_cohort_groups: usize,
    /// bank: users in the backend.
    pub bank_users: u32,
    /// bank on the GPU: requests and responses transposed by words (else row-major).
    pub bank_transposed: bool,
    /// bank on the GPU: one page type per cohort, or mixed.
    pub bank_cohorts: crate::bank::backend::Cohorts,
    /// bank: where its records live (computed, memcached, GPU hash tables).
    pub bank_backend: crate::bank::store::Placement,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            index: None,
            index_mapped: false,
            precision: Precision::F32,
            knn_persistent_plan: Default::default(),
            knn_cohort_groups: crate::knn::persistent::DEFAULT_COHORT_GROUPS,
            bank_users: crate::bank::besim::DEFAULT_USERS,
            bank_transposed: true,
            bank_cohorts: Default::default(),
            bank_backend: Default::default(),
        }
    }
}

type CpuBuild = fn(&ServiceOptions, bool) -> Result<Arc<dyn Service>, String>;
type GpuBuild = fn(&ServiceOptions, &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String>;
type PersistentBuild =
    fn(&ServiceOptions, &DeviceInfo) -> Result<Arc<dyn PersistentBackend>, String>;

pub struct Entry {
    pub name: &'static str,
    /// The service itself (schema, CPU function, JSON mapping). The flag says whether a GPU
    /// engine will run it (knn then maps its index instead of holding a resident copy).
    pub build: CpuBuild,
    /// Its GPU backend on one device; None: the service runs on the cpu engine only.
    pub gpu: Option<GpuBuild>,
    /// Its stages for the persistent GPU engine; None: not offered there.
    pub persistent: Option<PersistentBuild>,
    /// Its GPU backend keeps state that requests share (the bank's sessions) in one device's
    /// memory, so it is served from one GPU only.
    pub one_gpu: bool,
}

pub const CATALOG: &[Entry] = &[
    Entry {
        name: "echo",
        build: |_, _| Ok(Arc::new(crate::echo::Echo)),
        gpu: Some(|_, dev| micro(Micro::Echo, dev)),
        persistent: Some(|_, dev| micro_persistent(Micro::Echo, dev)),
        one_gpu: false,
    },
    Entry {
        name: "spin",
        build: |_, _| Ok(Arc::new(crate::spin::Spin)),
        gpu: Some(|_, dev| micro(Micro::Spin, dev)),
        persistent: Some(|_, dev| micro_persistent(Micro::Spin, dev)),
        one_gpu: false,
    },
    Entry {
        name: "knn",
        build: knn_service,
        gpu: Some(knn_gpu),
        persistent: Some(knn_persistent),
        one_gpu: false,
    },
    Entry {
        name: "bank",
        build: bank_service,
        gpu: Some(bank_gpu),
        // Not built for gpu-persistent yet (gpu-cohort first, as Rhythm).
        persistent: None,
        one_gpu: true,
    },
];

/// Connections the cpu engine's workers share to a memcached backend (opened as needed).
const MEMCACHED_CONNECTIONS: u32 = 64;

fn bank_service(o: &ServiceOptions, on_gpu: bool) -> Result<Arc<dyn Service>, String> {
    use crate::bank::store::{Memcached, Placement};
    use crate::bank::{Backend, Bank, BankConfig};
    if o.bank_users == 0 {
        return Err("bank: --bank-users must be at least 1".into());
    }
    let backend = match &o.bank_backend {
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
            m.load(o.bank_users).map_err(|e| format!("bank: {e}"))?;
            Backend::Memcached(m)
        }
    };
    let cfg = BankConfig {
        users: o.bank_users,
        max_sessions: (o.bank_users as usize).max(1024),
        ..Default::default()
    };
    Ok(Arc::new(Bank::with_backend(&cfg, backend)))
}

fn bank_gpu(o: &ServiceOptions, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    if o.bank_users == 0 {
        return Err("bank: --bank-users must be at least 1".into());
    }
    let cfg = crate::bank::backend::BankGpuConfig {
        users: o.bank_users,
        max_sessions: o.bank_users.max(1024),
        secret: rand::random(),
        transposed: o.bank_transposed,
        cohorts: o.bank_cohorts,
        backend: o.bank_backend.clone(),
    };
    Ok(Arc::new(crate::bank::backend::BankGpu::new(dev, cfg)?))
}

/// Every service's kernel compilation units (CI compiles each through NVRTC).
pub fn kernel_sources() -> Vec<&'static cohort_gpu::KernelSource> {
    let mut all = crate::micro::sources();
    all.extend_from_slice(crate::knn::kernels::sources());
    all.push(crate::bank::gpu::source());
    all
}

pub fn entry(name: &str) -> Option<&'static Entry> {
    CATALOG.iter().find(|e| e.name == name)
}

pub fn names() -> Vec<&'static str> {
    CATALOG.iter().map(|e| e.name).collect()
}

fn micro(kind: Micro, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    Ok(Arc::new(
        MicroGpu::new(kind, dev).map_err(|e| e.to_string())?,
    ))
}

fn micro_persistent(kind: Micro, dev: &DeviceInfo) -> Result<Arc<dyn PersistentBackend>, String> {
    Ok(Arc::new(
        crate::micro::persistent::MicroPersistent::new(kind, dev).map_err(|e| e.to_string())?,
    ))
}

fn load_index(o: &ServiceOptions, mapped: bool) -> Result<cohort_knn::IvfIndex, String> {
    let Some(path) = &o.index else {
        return Err("the knn service needs an index (--index PATH)".into());
    };
    let ix = if mapped {
        cohort_knn::IvfIndex::load(path)
    } else {
        cohort_knn::IvfIndex::load_resident(path)
    };
    ix.map_err(|e| format!("loading {}: {e:#}", path.display()))
}

fn knn_service(o: &ServiceOptions, on_gpu: bool) -> Result<Arc<dyn Service>, String> {
    // A GPU engine validates requests itself and uploads its own copy: a mapped index here
    // costs only the pages actually read (header, centroids).
    let index = load_index(o, o.index_mapped || on_gpu)?;
    tracing::info!(
        n = index.n,
        dim = index.dim,
        nlist = index.nlist,
        default_nprobe = index.default_nprobe,
        "index loaded"
    );
    Ok(Arc::new(crate::knn::Knn {
        index: Arc::new(index),
    }))
}

fn knn_gpu(o: &ServiceOptions, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    let index = load_index(o, true)?;
    let ivf = GpuIvf::upload(dev, &index, o.precision).map_err(|e| e.to_string())?;
    Ok(Arc::new(crate::knn::gpu::KnnGpu::new(ivf)))
}

fn knn_persistent(
    o: &ServiceOptions,
    dev: &DeviceInfo,
) -> Result<Arc<dyn PersistentBackend>, String> {
    let index = load_index(o, true)?;
    let ivf = GpuIvf::upload(dev, &index, o.precision).map_err(|e| e.to_string())?;
    Ok(Arc::new(
        crate::knn::persistent::KnnPersistent::new(ivf, dev, o.knn_persistent_plan)
            .and_then(|k| k.with_groups(o.knn_cohort_groups))
            .map_err(|e| e.to_string())?,
    ))
}
