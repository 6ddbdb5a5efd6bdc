//! What a service declares to the server (its [`Entry`]) and the pieces an entry holds: its
//! selftest case, its GPU checks, its commands. Each service's `slice.rs` builds one from
//! [`Entry::cpu`] (every GPU part off) and the parts it has; the catalog crate lists them.
//! Nothing here names a service.

use crate::config::{ServiceFlag, Settings};
use crate::workload::{LoadOptions, Workload};
use cohort_engine::split::{MergeFn, ShardOf};
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::PersistentBackend;
use cohort_gpu::{DeviceInfo, KernelSource};
use std::sync::Arc;

type CpuBuild = fn(&Settings, bool) -> Result<Arc<dyn Service>, String>;
/// A backend on one device, and backends for several devices at once (in serving order).
type OneBuild<B> = fn(&Settings, &DeviceInfo) -> Result<B, String>;
type SetBuild<B> = fn(&Settings, &[DeviceInfo]) -> Result<Vec<B>, String>;
type GpuBuild = OneBuild<Arc<dyn GpuBackend>>;
type GpuSetBuild = SetBuild<Arc<dyn GpuBackend>>;
type PersistentBuild = OneBuild<Arc<dyn PersistentBackend>>;
type PersistentSetBuild = SetBuild<Arc<dyn PersistentBackend>>;

/// All the server knows of a service.
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
    /// Its kernels' compilation units (CI compiles each through NVRTC).
    pub kernels: fn() -> Vec<&'static KernelSource>,
    /// What `cohort load --service NAME` sends it and how it checks the answers.
    pub workload: fn(&LoadOptions) -> Result<Arc<dyn Workload>, String>,
    /// Its own benchmarks (`cohort-lab bench NAME ...`), beside its code.
    pub benches: &'static [ServiceCommand],
    /// Its model's tools, `cohort-lab model COMMAND NAME ...` (lenet: `train`, `eval`).
    pub models: &'static [ServiceCommand],
    /// Commands of its own, `cohort COMMAND ...` (knn: `index`); a name is unique in the
    /// catalog and never one of the binary's own commands.
    pub commands: &'static [ServiceCommand],
    /// Requests the selftest sends through every GPU engine it has a backend for, and how an
    /// answer is compared with the CPU function's (`selftest::run`).
    pub selftest: Option<SelftestCase>,
    /// Its GPU code against its CPU twins, beyond what the selftest runs through the engines
    /// (the services' GPU test executable runs every one on the GPU machine).
    pub gpu_checks: &'static [GpuCheck],
    /// Its own checks through the engines beside (or instead of) its selftest case, for what
    /// a case of payloads cannot say (knn: a fresh random index through every engine and
    /// plan; spin: its timing, and the watchdog provoked). Run by the selftest.
    pub engine_checks: Option<EngineChecks>,
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

/// A service's own run through the engines (`harness`) on one device, from a seed;
/// `persistent`: gpu-persistent too. The lines it logs, or the first mismatch.
pub type EngineChecks = fn(&DeviceInfo, u64, bool) -> Result<Vec<String>, String>;

impl Entry {
    /// A service served by the cpu engine only, with no settings beyond `resolve`'s, no
    /// kernels, commands or checks: what every entry starts from (`..Entry::cpu(...)`).
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
            kernels: Vec::new,
            workload,
            benches: &[],
            models: &[],
            commands: &[],
            selftest: None,
            gpu_checks: &[],
            engine_checks: None,
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

/// A service's requests for the engines' selftest: fresh ones from `seed` (bad ones
/// included), and whether a GPU answer agrees with the CPU function's.
pub struct SelftestCase {
    pub payloads: fn(u64) -> Vec<Vec<u8>>,
    pub compare: fn(&[u8], &[u8]) -> Result<(), String>,
    /// The settings its backends are built with and what must live while they serve
    /// (facever: a memcached it started and filled); None here: the defaults. Ok(None): it
    /// cannot run on this machine (the reason already logged as a skip).
    pub setup: Option<SelftestSetup>,
    /// Settings the persistent engine is checked with too, each on top of the case's own
    /// (`("persistent", "team")`): the plans and maths only that engine's kernels differ in.
    pub persistent_variants: &'static [&'static [(&'static str, &'static str)]],
    /// The largest payload its batched GPU backend carries: a larger one may be refused
    /// TOO_LARGE where the CPU function answers it (usize::MAX: no limit of its own).
    pub gpu_payload_limit: usize,
}

/// What a selftest setup gives: the settings, and what must outlive the run.
pub type SelftestSettings = (Settings, Box<dyn std::any::Any>);
pub type SelftestSetup = fn() -> Result<Option<SelftestSettings>, String>;

/// A check of a service's GPU code against its CPU twin on one device, on fresh random
/// inputs drawn from `seed`: the lines it logs, or why it could not run. A mismatch panics,
/// naming the input and both answers.
pub struct GpuCheck {
    pub name: &'static str,
    /// On the serving devices given (`selftest gpu --gpus`; the first is where a check of one
    /// device runs, a check over several devices adds a run over all of them).
    pub run: fn(&[DeviceInfo], u64) -> Result<Vec<String>, String>,
    /// It runs gpu-persistent's kernels (left out by `selftest gpu --no-persistent`: under
    /// compute-sanitizer they spin too slowly to finish).
    pub persistent: bool,
}

/// Writes a benchmark's result at a path, with the machine, commit and command beside it
/// (the binary's: it knows its commit), atomically.
pub type Record<'a> = &'a dyn Fn(&std::path::Path, serde_json::Value) -> Result<(), String>;

/// A command a service brings (a benchmark, `cohort-lab bench NAME`; a model tool, `cohort-lab model
/// NAME SERVICE`; a command of its own, `cohort NAME`), with the flags `command` declares.
pub struct ServiceCommand {
    pub name: &'static str,
    pub command: fn() -> clap::Command,
    pub run: fn(&clap::ArgMatches, Record) -> Result<(), String>,
}

/// The flags of `A` (clap derive) as the command `name`, described by `about`: what a
/// `ServiceCommand::command` returns.
pub fn args_command<A: clap::Args>(name: &'static str, about: &'static str) -> clap::Command {
    A::augment_args(clap::Command::new(name)).about(about)
}

/// The flags parsed into `A`, then `run` on them; any error as text, its causes included
/// (`{:#}`): what a `ServiceCommand::run` does.
pub fn parsed<A: clap::FromArgMatches, E: std::fmt::Display>(
    m: &clap::ArgMatches,
    run: impl FnOnce(&A) -> Result<(), E>,
) -> Result<(), String> {
    let a = A::from_arg_matches(m).map_err(|e| e.to_string())?;
    run(&a).map_err(|e| format!("{e:#}"))
}
