//! Live collections on a GPU (issue 82's device side): the `Accelerator` of
//! `cohort-collections` for CUDA devices. Each collection keeps a device copy (`mirror`) in
//! step with its state write by write, before the write is acknowledged, and answers searches
//! there with the CPU's plan (`search`), through kernels that are twins of the CPU code and
//! tested against it (`kernels/collection.cu`, tests/gpu.rs). Filters run on the device as a
//! stack program over the attribute columns held there (`program`).
//!
//! A collection lives whole on one device; with several, collections are placed round-robin
//! (a collection sharded over devices is not built).

pub mod kernels;
pub mod mirror;
pub mod program;
pub mod search;

use cohort_collections::accel::{Accelerator, AcceleratorFactory, SearchRequest};
use cohort_collections::data::Data;
use cohort_collections::search::Plan;
use cohort_collections::Settings;
use cohort_gpu::launch::Kernel;
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cohort_ivf::Neighbor;
use cudarc::driver::CudaContext;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// The collection kernels, loaded on one device.
pub struct Kernels {
    pub filter: Kernel<kernels::CollFilterArgs>,
    pub coarse: Kernel<kernels::CollCoarseArgs>,
    pub scan: Kernel<kernels::CollScanArgs>,
    pub reduce: Kernel<kernels::CollReduceArgs>,
    pub scatter: Kernel<kernels::CollScatterArgs>,
}

/// One device's context and kernels, shared by the collections placed on it.
pub struct Device {
    pub info: DeviceInfo,
    ctx: Arc<CudaContext>,
    kernels: Kernels,
}

impl Device {
    pub fn open(info: DeviceInfo) -> Result<Arc<Device>, GpuError> {
        let ctx = cohort_gpu::launch::context(&info)?;
        let m = load_module(&ctx, &info, kernels::source())?;
        let kernels = Kernels {
            filter: Kernel::load(&m, &kernels::FILTER)?,
            coarse: Kernel::load(&m, &kernels::COARSE)?,
            scan: Kernel::load(&m, &kernels::SCAN)?,
            reduce: Kernel::load(&m, &kernels::REDUCE)?,
            scatter: Kernel::load(&m, &kernels::SCATTER)?,
        };
        Ok(Arc::new(Device { info, ctx, kernels }))
    }

    fn name(&self) -> String {
        format!("GPU {} ({})", self.info.ordinal, self.info.name)
    }
}

/// One collection's device copy.
pub struct GpuCollection {
    dev: Arc<Device>,
    /// Written by syncs (the collection's write lock held), read by searches (its read lock
    /// held), so the two never wait on each other here.
    mirror: RwLock<Option<mirror::Mirror>>,
    /// Buffers and streams of the searches in flight and past (one a concurrent search).
    pool: Mutex<Vec<search::Scratch>>,
}

impl GpuCollection {
    pub fn new(dev: Arc<Device>) -> GpuCollection {
        GpuCollection {
            dev,
            mirror: RwLock::new(None),
            pool: Mutex::new(Vec::new()),
        }
    }
}

impl Accelerator for GpuCollection {
    fn name(&self) -> String {
        self.dev.name()
    }

    fn sync(&self, d: &Data, killed: &[u32]) -> Result<(), String> {
        let mut g = self.mirror.write().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            let s = self.dev.ctx.new_stream().map_err(|e| e.to_string())?;
            *g = Some(mirror::Mirror::new(s, d).map_err(|e| e.to_string())?);
        }
        let m = g.as_mut().expect("made above");
        m.sync(&self.dev.kernels, d, killed)
            .map_err(|e| e.to_string())
    }

    fn search(
        &self,
        d: &Data,
        r: &SearchRequest<'_>,
    ) -> Result<Option<(Vec<Vec<Neighbor>>, Plan)>, String> {
        if !search::takes(d, r) {
            return Ok(None);
        }
        let g = self.mirror.read().unwrap_or_else(|p| p.into_inner());
        let Some(m) = g.as_ref().filter(|m| m.mirrors(d)) else {
            return Ok(None);
        };
        let taken = self.pool.lock().expect("scratch pool").pop();
        let mut x = match taken {
            Some(x) => x,
            None => {
                let s = self.dev.ctx.new_stream().map_err(|e| e.to_string())?;
                search::Scratch::new(s).map_err(|e| e.to_string())?
            }
        };
        let out = search::run(&self.dev.kernels, m, &mut x, d, r).map_err(|e| e.to_string());
        // A failed search's stream may hold an error: it is not reused.
        if out.is_ok() {
            self.pool.lock().expect("scratch pool").push(x);
        }
        out
    }
}

/// Places each collection on one of `devices`, round-robin.
pub struct GpuFactory {
    devices: Vec<Arc<Device>>,
    next: AtomicUsize,
}

impl GpuFactory {
    /// Opens `infos` (contexts, kernels compiled): fails when one cannot be.
    pub fn open(infos: &[DeviceInfo]) -> Result<GpuFactory, GpuError> {
        if infos.is_empty() {
            return Err(GpuError::Invalid("no GPU to serve collections on".into()));
        }
        Ok(GpuFactory {
            devices: infos
                .iter()
                .cloned()
                .map(Device::open)
                .collect::<Result<_, _>>()?,
            next: AtomicUsize::new(0),
        })
    }
}

impl AcceleratorFactory for GpuFactory {
    fn attach(
        &self,
        _collection: &str,
        _settings: &Settings,
    ) -> Result<Box<dyn Accelerator>, String> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.devices.len();
        Ok(Box::new(GpuCollection::new(self.devices[i].clone())))
    }
}
