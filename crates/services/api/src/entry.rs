//! What the server knows of a service: its [`Entry`], serving only (settings, the CPU
//! service, its GPU and persistent backends, its load workload, how it splits over nodes, what
//! it chooses). Its self-checks are its [`Checks`](crate::checks::Checks) and its commands,
//! benchmarks and model tools its [`Tools`](crate::tools::Tools): the server never reads them.
//! Each service's `slice.rs` builds its entry from [`Entry::cpu`] (every GPU part off) and the
//! parts it has, and lists the three together as its [`Listing`](crate::listing::Listing); the
//! catalog crate lists those. Nothing here names a service.

use crate::config::{ServiceFlag, Settings};
use crate::workload::{LoadOptions, Workload};
use cohort_engine::split::{MergeFn, ShardOf};
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::PersistentBackend;
use cohort_gpu::DeviceInfo;
use std::sync::Arc;

type CpuBuild = fn(&Settings, bool) -> Result<Arc<dyn Service>, String>;
/// A backend on one device, and backends for several devices at once (in serving order).
type OneBuild<B> = fn(&Settings, &DeviceInfo) -> Result<B, String>;
type SetBuild<B> = fn(&Settings, &[DeviceInfo]) -> Result<Vec<B>, String>;
type GpuBuild = OneBuild<Arc<dyn GpuBackend>>;
type GpuSetBuild = SetBuild<Arc<dyn GpuBackend>>;
type PersistentBuild = OneBuild<Arc<dyn PersistentBackend>>;
type PersistentSetBuild = SetBuild<Arc<dyn PersistentBackend>>;

/// All the server knows of a service: what serving it needs.
pub struct Entry {
    pub name: &'static str,
    /// Its wire id (the service's `ID`; unique in the catalog).
    pub id: u16,
    /// The `cohort serve` flags that set its settings (`--index` sets knn's `index`).
    pub flags: &'static [ServiceFlag],
    /// Its settings read into its typed struct and written back with every default filled
    /// (`serve --check-config`); an unknown key or a bad value is an error naming it.
    pub resolve: fn(&Settings) -> Result<Settings, String>,
    /// The service itself (schema, CPU function, JSON mapping). The flag says whether a GPU
    /// engine will run it (knn then maps its index instead of holding a resident copy).
    pub build: CpuBuild,
    /// Its GPU backend on one device; None: the service runs on the cpu engine only.
    pub gpu: Option<GpuBuild>,
    /// Its GPU backends for every serving device at once, in serving order, where they share
    /// state across devices (knn's sharded index); None: `gpu` builds each alone.
    pub gpu_set: Option<GpuSetBuild>,
    /// Its stages for the persistent GPU engine; None: not offered there.
    pub persistent: Option<PersistentBuild>,
    /// Its persistent backends for every serving device at once, in serving order, where
    /// their stages span devices (knn's sharded index); None: `persistent` builds each alone.
    pub persistent_set: Option<PersistentSetBuild>,
    /// The largest request its persistent backend reads in place from the request rings,
    /// when the default slot is too small for it (0: the default is enough). The GPU cannot
    /// follow a spill to the heap: the server sizes that engine's slots to carry it.
    pub persistent_request_bytes: usize,
    /// Its GPU backend keeps state that requests share (the bank's sessions) in one device's
    /// memory, so it is served from one GPU only.
    pub one_gpu: bool,
    /// What `cohort load --service NAME` sends it and how it checks the answers.
    pub workload: fn(&LoadOptions) -> Result<Arc<dyn Workload>, String>,
    /// Whether a request may run twice with the same effect (a read): a cluster front end
    /// retries such a request once on another node when its node fails. True unless the
    /// service changes state per request (the bank).
    pub idempotent: bool,
    /// How it splits over cluster nodes that each hold one shard of its state (knn: a part
    /// of the index's lists): the shard a node's settings give it, and the merge of the
    /// shards' answers at the front end. None: every node serves it whole.
    pub split: Option<Split>,
    /// What it chose from its settings and its data where the settings left the choice to it
    /// (knn: the GPU precision `auto` picks from the index), given whether a GPU engine runs
    /// it: `serve --check-config` prints each, the server logs each at start and exports it
    /// on /metrics (`cohort_service_choice`). None: it chooses nothing.
    pub choices: Option<ChoicesFn>,
}

/// One choice a service made (`Entry::choices`): the setting, the value it took, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub setting: &'static str,
    pub value: String,
    pub why: String,
}

/// A service's choices from its settings, on a GPU engine (true) or not.
pub type ChoicesFn = fn(&Settings, bool) -> Result<Vec<Choice>, String>;

/// A service's shards across cluster nodes (`Entry::split`).
#[derive(Clone, Copy)]
pub struct Split {
    /// The shard a node with these settings serves; None: the whole service.
    pub shard_of: fn(&Settings) -> Result<Option<ShardOf>, String>,
    /// The client's answer from one answer per shard.
    pub merge: MergeFn,
}

impl Entry {
    /// A service served by the cpu engine only, with no settings beyond `resolve`'s: what
    /// every entry starts from (`..Entry::cpu(...)`).
    pub const fn cpu(
        name: &'static str,
        id: u16,
        resolve: fn(&Settings) -> Result<Settings, String>,
        build: CpuBuild,
        workload: fn(&LoadOptions) -> Result<Arc<dyn Workload>, String>,
    ) -> Entry {
        Entry {
            name,
            id,
            flags: &[],
            resolve,
            build,
            gpu: None,
            gpu_set: None,
            persistent: None,
            persistent_set: None,
            persistent_request_bytes: 0,
            one_gpu: false,
            workload,
            idempotent: true,
            split: None,
            choices: None,
        }
    }

    /// Its GPU backend for each of `devs` (serving order), through `gpu_set` where the service
    /// has one.
    pub fn gpu_backends(
        &self,
        s: &Settings,
        devs: &[DeviceInfo],
    ) -> Result<Vec<Arc<dyn GpuBackend>>, String> {
        self.per_device("GPU", self.gpu_set, self.gpu, s, devs)
    }

    /// Its persistent backend for each of `devs` (serving order), through `persistent_set`
    /// where the service has one.
    pub fn persistent_backends(
        &self,
        s: &Settings,
        devs: &[DeviceInfo],
    ) -> Result<Vec<Arc<dyn PersistentBackend>>, String> {
        self.per_device("persistent", self.persistent_set, self.persistent, s, devs)
    }

    /// A backend per device: the set's builder where the service has one (its devices share
    /// state), else its one-device builder on each; `what` names the kind in the error.
    fn per_device<B>(
        &self,
        what: &str,
        set: Option<SetBuild<B>>,
        one: Option<OneBuild<B>>,
        s: &Settings,
        devs: &[DeviceInfo],
    ) -> Result<Vec<B>, String> {
        if let Some(set) = set {
            let v = set(s, devs)?;
            assert_eq!(v.len(), devs.len(), "{}: one backend per device", self.name);
            return Ok(v);
        }
        let Some(one) = one else {
            return Err(format!("{} has no {what} backend", self.name));
        };
        devs.iter().map(|d| one(s, d)).collect()
    }
}
