//! Each engine kind's knobs as one typed struct, read the same way from every place that sets
//! them: the serve (and bench) flags through clap, where each knob has its one name, default
//! and help text; and a service's `[services.NAME]` table or `--service-opt NAME.KEY=VALUE`
//! through serde, over the server-wide values (`plan.rs`). `--check-config` writes the same
//! structs back.

use crate::util::{parse_cpu_list, parse_cpus, CpuList};
use clap::Args;
use cohort_engine::DispatchPolicy;
use serde::{Deserialize, Serialize};

pub use crate::gpu_args::GpuEngineArgs;

/// An engine a service runs on: the kind `--engine` and `NAME:ENGINE` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Cpu,
    /// The io thread that read a request runs the CPU function itself (no worker hand-off):
    /// for services whose requests take microseconds.
    Inline,
    GpuDirect,
    GpuCohort,
    GpuPersistent,
    /// gpu-cohort on the GPUs plus cpu workers taking what the GPUs cannot answer within the
    /// latency budget.
    Hybrid,
}

impl EngineKind {
    pub const ALL: [EngineKind; 6] = [
        EngineKind::Cpu,
        EngineKind::Inline,
        EngineKind::GpuDirect,
        EngineKind::GpuCohort,
        EngineKind::GpuPersistent,
        EngineKind::Hybrid,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Cpu => "cpu",
            EngineKind::Inline => cohort_engine::INLINE,
            EngineKind::GpuDirect => "gpu-direct",
            EngineKind::GpuCohort => "gpu-cohort",
            EngineKind::GpuPersistent => "gpu-persistent",
            EngineKind::Hybrid => "hybrid",
        }
    }

    /// Whether the service's CPU function serves requests here (then it gets the resident
    /// index copy rather than a mapped one).
    pub fn runs_cpu_function(self) -> bool {
        matches!(
            self,
            EngineKind::Cpu | EngineKind::Inline | EngineKind::Hybrid
        )
    }

    pub fn is_gpu(self) -> bool {
        !matches!(self, EngineKind::Cpu | EngineKind::Inline)
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<EngineKind, String> {
        EngineKind::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = EngineKind::ALL.iter().map(|e| e.name()).collect();
                format!("unknown engine {s:?} (available: {})", names.join(", "))
            })
    }
}

/// What every engine honours for its service: how much it admits, how long a request may
/// wait, and how an ingress picks among its lanes.
#[derive(Args, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AdmissionArgs {
    /// Requests a service holds at once (waiting in its rings or device slots, or running),
    /// counted across every io thread: one more gets OVERLOADED (HTTP 503) saying so, with
    /// the bound. Rows count, not frames: a knn request of N queries (or an `/v2` request of
    /// N rows) takes N places. The default holds 32 clients x 256 rows (8 192) in flight
    /// twice over, and each io thread's rings to the engine hold those 8 192 alone (all the
    /// clients on one io thread are admitted too). Per service: `NAME.max_queue`.
    #[arg(long, default_value_t = AdmissionArgs::default().max_queue)]
    pub max_queue: usize,
    /// The longest deadline a request may ask for, in milliseconds; a longer one (up to
    /// 4295 s fit the header) is cut to this, so no client holds a worker for long. A
    /// service may set its own (`--service-opt NAME.max_deadline_ms=N`).
    #[arg(long, default_value_t = AdmissionArgs::default().max_deadline_ms)]
    pub max_deadline_ms: u64,
    /// How an ingress picks a lane (cpu worker, GPU): round-robin, least-loaded, key-hash.
    #[arg(long, default_value_t = AdmissionArgs::default().dispatch)]
    #[serde(with = "as_text")]
    pub dispatch: DispatchPolicy,
}

/// The cpu engine's workers (and the cpu side of hybrid). Defaults: 0 workers (chosen), not
/// pinned.
#[derive(Args, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct CpuEngineArgs {
    /// cpu engine worker threads per service (0 = the cores left after the io threads,
    /// shared among the services on the cpu engine, at least 1).
    #[arg(long, default_value_t = CpuEngineArgs::default().workers)]
    pub workers: usize,
    /// Pin cpu engine workers to these cores.
    #[arg(long, value_parser = parse_cpu_list)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_cpus: Option<CpuList>,
}

/// gpu-persistent: the kernel that stays resident and the slots it serves.
#[derive(Args, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PersistentEngineArgs {
    /// gpu-persistent: requests in flight on each GPU (slots).
    #[arg(long, default_value_t = PersistentEngineArgs::default().gpu_slots)]
    pub gpu_slots: usize,
    /// gpu-persistent: worker blocks per stage, e.g. 132:264:33 for k-NN's
    /// filter:search:reduce, one count for echo or spin (default: the service's own).
    #[arg(long, value_parser = parse_stages)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<Stages>,
    /// gpu-persistent: tasks a worker block takes from its gpipe at once.
    #[arg(long, default_value_t = PersistentEngineArgs::default().gpu_batch)]
    pub gpu_batch: usize,
    /// gpu-persistent: restart a GPU that makes no progress for this long (ms).
    #[arg(long, default_value_t = PersistentEngineArgs::default().watchdog_ms)]
    pub watchdog_ms: u64,
    /// gpu-persistent: answers whose steps the GPU stamps, reported at shutdown (where the
    /// time goes; 0 = off).
    #[arg(long, default_value_t = PersistentEngineArgs::default().profile)]
    pub profile: usize,
    /// gpu-persistent: host threads moving each GPU's answers to the io threads, a TX ring
    /// each (one moves about 2-3 M answers/s); 0 = auto: 2 with 4 or more io threads, else 1.
    #[arg(long, default_value_t = PersistentEngineArgs::default().egress_threads)]
    pub egress_threads: usize,
}

/// Each engine group's defaults, defined here once: its flags' clap attributes read them.
impl Default for AdmissionArgs {
    fn default() -> Self {
        AdmissionArgs {
            max_queue: cohort_engine::wiring::DEFAULT_MAX_QUEUE,
            max_deadline_ms: 60_000,
            dispatch: DispatchPolicy::LeastLoaded,
        }
    }
}

impl Default for PersistentEngineArgs {
    fn default() -> Self {
        PersistentEngineArgs {
            gpu_slots: 2048,
            stages: None,
            gpu_batch: 1,
            watchdog_ms: 1000,
            profile: 0,
            egress_threads: 0,
        }
    }
}

impl Default for HybridEngineArgs {
    fn default() -> Self {
        HybridEngineArgs {
            latency_budget_us: 1000,
        }
    }
}

impl PersistentEngineArgs {
    /// The egress threads for a GPU fed by `ingresses` io threads: the number asked for, or
    /// the auto rule (one thread per GPU capped gpu-persistent at ~2-3 M answers/s on the
    /// H200 while its kernels gave 11 M; a second helps once enough io threads feed it).
    /// At most one per ingress (a TX ring answers whole ingresses).
    pub fn egress_threads_for(&self, ingresses: usize) -> usize {
        let want = match self.egress_threads {
            0 if ingresses >= 4 => 2,
            0 => 1,
            n => n,
        };
        want.clamp(1, ingresses.max(1))
    }
}

/// hybrid: when the CPU workers take a request instead of the GPUs.
#[derive(Args, Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HybridEngineArgs {
    /// hybrid: the expected GPU wait (us) beyond which a request goes to a cpu worker.
    #[arg(long, default_value_t = HybridEngineArgs::default().latency_budget_us)]
    pub latency_budget_us: u64,
}

/// One service's engine and all its knobs: the server-wide flags, then the service's own
/// keys over them. The key names are the fields' ([`engine_keys`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct EngineConfig {
    #[serde(with = "as_text")]
    pub engine: EngineKind,
    #[serde(flatten)]
    pub admission: AdmissionArgs,
    #[serde(flatten)]
    pub cpu: CpuEngineArgs,
    #[serde(flatten)]
    pub gpu: GpuEngineArgs,
    #[serde(flatten)]
    pub persistent: PersistentEngineArgs,
    #[serde(flatten)]
    pub hybrid: HybridEngineArgs,
}

/// A group of engine knobs (one of the structs above) and the engines that read it.
pub struct KnobGroup {
    /// Its keys: the struct's flags, as clap declares them (the fields' names).
    pub keys: Vec<&'static str>,
    pub engines: &'static [EngineKind],
}

/// The keys of a group of knobs, from its flags (so no list of them is kept by hand).
fn keys_of<A: Args>() -> Vec<&'static str> {
    A::augment_args(clap::Command::new("keys"))
        .get_arguments()
        .map(|a| &*Box::leak(a.get_id().as_str().to_string().into_boxed_str()))
        .collect()
}

/// Every group of engine knobs, with the engines that read it (`gpus` also names the devices
/// of gpu-persistent; `engine` itself is every engine's).
/// The GPU knobs every GPU engine reads: which GPUs, and how many one host thread drives.
const SHARED_GPU_KEYS: [&str; 2] = ["gpus", "gpus_per_control_thread"];

pub fn knob_groups() -> &'static [KnobGroup] {
    use EngineKind::*;
    static GROUPS: std::sync::OnceLock<Vec<KnobGroup>> = std::sync::OnceLock::new();
    GROUPS.get_or_init(|| {
        vec![
            KnobGroup {
                keys: vec!["engine"],
                engines: &EngineKind::ALL,
            },
            KnobGroup {
                keys: keys_of::<AdmissionArgs>(),
                engines: &EngineKind::ALL,
            },
            KnobGroup {
                keys: keys_of::<CpuEngineArgs>(),
                engines: &[Cpu, Hybrid],
            },
            KnobGroup {
                keys: SHARED_GPU_KEYS.to_vec(),
                engines: &[GpuDirect, GpuCohort, GpuPersistent, Hybrid],
            },
            KnobGroup {
                keys: keys_of::<GpuEngineArgs>()
                    .into_iter()
                    .filter(|k| !SHARED_GPU_KEYS.contains(k))
                    .collect(),
                engines: &[GpuDirect, GpuCohort, Hybrid],
            },
            KnobGroup {
                keys: keys_of::<PersistentEngineArgs>(),
                engines: &[GpuPersistent],
            },
            KnobGroup {
                keys: keys_of::<HybridEngineArgs>(),
                engines: &[Hybrid],
            },
        ]
    })
}

/// The keys of a `[services.NAME]` table that set the service's engine (`EngineConfig`'s
/// fields); any other key is the service's own.
pub fn engine_keys() -> impl Iterator<Item = &'static str> {
    knob_groups().iter().flat_map(|g| g.keys.iter().copied())
}

pub fn is_engine_key(key: &str) -> bool {
    engine_keys().any(|k| k == key)
}

/// Whether `engine` reads knob `key`; if not, the error names the engines that do.
pub fn knob_of(engine: EngineKind, key: &str) -> Result<(), String> {
    let Some(g) = knob_groups().iter().find(|g| g.keys.contains(&key)) else {
        return Err(format!("{key} is not an engine key"));
    };
    if g.engines.contains(&engine) {
        return Ok(());
    }
    let readers: Vec<&str> = g.engines.iter().map(|e| e.name()).collect();
    Err(format!(
        "{key} is a knob of {} only; this service's engine is {engine}",
        readers.join(", ")
    ))
}

impl EngineConfig {
    /// As TOML keys (what `--check-config` prints; read back, the same config).
    pub fn to_table(&self) -> toml::Table {
        toml::Table::try_from(self).expect("an engine config is a TOML table")
    }

    /// The config with every key of `keys` set, read at once; an error names the first key
    /// whose value its knob does not take.
    pub fn with_keys(&self, keys: &toml::Table) -> Result<EngineConfig, String> {
        let mut t = self.to_table();
        t.extend(keys.iter().map(|(k, v)| (k.clone(), v.clone())));
        toml::Value::Table(t)
            .try_into()
            .map_err(|e: toml::de::Error| {
                // Which key: the first that fails alone.
                keys.iter()
                    .find_map(|(k, v)| self.with(k, v.clone()).err())
                    .unwrap_or_else(|| e.message().trim().to_string())
            })
    }

    /// The config with `key` set to `value`; an error names what the key takes.
    pub fn with(&self, key: &str, value: toml::Value) -> Result<EngineConfig, String> {
        debug_assert!(is_engine_key(key));
        let mut t = self.to_table();
        t.insert(key.to_string(), value);
        toml::Value::Table(t)
            .try_into()
            .map_err(|e: toml::de::Error| {
                // serde names Rust's types; a user wrote TOML.
                let m = e.message().trim().replace("expected usize", "expected u64");
                format!(
                    "{key}: {}",
                    m.replace("expected u64", "expected a non-negative integer")
                )
            })
    }
}

/// Worker blocks per persistent stage (`132:264:33`, or a TOML array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stages(pub Vec<usize>);

pub fn parse_stages(s: &str) -> Result<Stages, String> {
    s.split(':')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map(Stages)
        .map_err(|_| format!("stages is a list of block counts like 132:264:33, got {s:?}"))
}

impl Serialize for Stages {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Stages {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberList("block counts like 132:264:33", |s| {
            parse_stages(s).map(|x| x.0)
        }))
        .map(Stages)
    }
}

impl Serialize for CpuList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for CpuList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberList("cores like 0-3,8", parse_cpus))
            .map(CpuList)
    }
}

/// A list of numbers given as a TOML array, one number, or text as on a command line.
pub struct NumberList(pub &'static str, pub fn(&str) -> Result<Vec<usize>, String>);

impl<'de> serde::de::Visitor<'de> for NumberList {
    type Value = Vec<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a list of {}", self.0)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Vec<usize>, E> {
        Ok(vec![v as usize])
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Vec<usize>, E> {
        usize::try_from(v)
            .map(|v| vec![v])
            .map_err(|_| E::custom(format!("expected {}, got {v}", self.expecting_text())))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<usize>, E> {
        (self.1)(v).map_err(E::custom)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Vec<usize>, A::Error> {
        let mut out = Vec::new();
        while let Some(x) = a.next_element::<usize>()? {
            out.push(x);
        }
        Ok(out)
    }
}

impl NumberList {
    fn expecting_text(&self) -> String {
        format!("a list of {}", self.0)
    }
}

/// The GPUs of `gpus = [0, 1]`, `gpus = 0` or `gpus = "0-1"`.
pub mod gpu_list {
    use super::{parse_cpus, NumberList};

    pub fn serialize<S: serde::Serializer>(v: &[usize], s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(v, s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
        d.deserialize_any(NumberList("GPUs like 0-1,3", parse_cpus))
    }
}

/// A value written and read as its text (`FromStr` and `Display`): engines, dispatch policies.
pub mod as_text {
    pub fn serialize<T: std::fmt::Display, S: serde::Serializer>(
        v: &T,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: std::str::FromStr<Err = String>,
        D: serde::Deserializer<'de>,
    {
        let s: String = serde::Deserialize::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_knob_set() -> EngineConfig {
        EngineConfig {
            engine: EngineKind::GpuPersistent,
            admission: AdmissionArgs {
                max_queue: 7,
                max_deadline_ms: 9,
                dispatch: DispatchPolicy::KeyHash,
            },
            cpu: CpuEngineArgs {
                workers: 3,
                worker_cpus: Some(CpuList(vec![0, 1])),
            },
            gpu: GpuEngineArgs {
                gpus: vec![0, 2],
                max_cohort: 77,
                cohort_timeout_us: 5,
                cohort_keep_busy: 0,
                streams: Some(3),
                cohort_graphs: true,
                control_threads: 2,
                gpus_per_control_thread: 1,
            },
            persistent: PersistentEngineArgs {
                gpu_slots: 128,
                stages: Some(Stages(vec![4, 8, 1])),
                gpu_batch: 4,
                watchdog_ms: 50,
                profile: 10,
                egress_threads: 3,
            },
            hybrid: HybridEngineArgs {
                latency_budget_us: 2500,
            },
        }
    }

    #[test]
    fn egress_threads_auto_is_two_from_four_io_threads_and_never_past_one_per_ingress() {
        let mut a = PersistentEngineArgs::default();
        assert_eq!(a.egress_threads, 0, "auto by default");
        let auto: Vec<usize> = [1, 2, 3, 4, 8, 16]
            .map(|i| a.egress_threads_for(i))
            .to_vec();
        assert_eq!(auto, [1, 1, 1, 2, 2, 2]);
        a.egress_threads = 4;
        assert_eq!(a.egress_threads_for(8), 4);
        assert_eq!(
            a.egress_threads_for(3),
            3,
            "one TX ring answers whole ingresses"
        );
        assert_eq!(a.egress_threads_for(0), 1);
    }

    #[test]
    fn the_engine_keys_are_the_structs_fields_and_read_back_alike() {
        let c = every_knob_set();
        let t = c.to_table();
        let mut keys: Vec<&str> = t.keys().map(String::as_str).collect();
        let mut want: Vec<&str> = engine_keys().collect();
        keys.sort_unstable();
        want.sort_unstable();
        assert_eq!(keys, want);
        let back: EngineConfig = toml::Value::Table(t).try_into().unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn lists_come_as_arrays_numbers_or_command_line_text() {
        let c = every_knob_set();
        let gpus = |v: toml::Value| c.with("gpus", v).map(|c| c.gpu.gpus);
        assert_eq!(gpus("0-2".into()).unwrap(), vec![0, 1, 2]);
        assert_eq!(gpus(1.into()).unwrap(), vec![1]);
        assert_eq!(
            gpus(toml::Value::Array(vec![3.into(), 1.into()])).unwrap(),
            vec![3, 1]
        );
        assert!(gpus("x".into()).unwrap_err().starts_with("gpus: "));
        let stages = |v: &str| c.with("stages", v.into()).map(|c| c.persistent.stages);
        assert_eq!(stages("2:4:1").unwrap(), Some(Stages(vec![2, 4, 1])));
        assert!(stages("8:x").unwrap_err().contains("list of block counts"));
        let cpus = c.with("worker_cpus", "4-5".into()).unwrap().cpu.worker_cpus;
        assert_eq!(cpus, Some(CpuList(vec![4, 5])));
    }

    #[test]
    fn a_bad_value_names_its_key_and_what_it_takes() {
        let c = every_knob_set();
        let e = c.with("max_queue", "x".into()).unwrap_err();
        assert!(
            e.starts_with("max_queue: ") && e.contains("non-negative integer"),
            "{e}"
        );
        let e = c.with("watchdog_ms", (-1).into()).unwrap_err();
        assert!(
            e.starts_with("watchdog_ms: ") && e.contains("non-negative integer"),
            "{e}"
        );
        let e = c.with("engine", "warp-drive".into()).unwrap_err();
        assert!(e.contains("unknown engine"), "{e}");
        let e = c.with("dispatch", "hybrid".into()).unwrap_err();
        assert!(e.contains("hybrid engine"), "{e}");
        let e = c.with("cohort_graphs", 3.into()).unwrap_err();
        assert!(e.starts_with("cohort_graphs: "), "{e}");
    }

    /// The shipped example configuration names every engine and no other (it listed a
    /// `gpu-streams` engine that does not exist and left out hybrid).
    #[test]
    fn the_shipped_config_names_the_engines() {
        let text = include_str!("../../../configs/serve.toml");
        for e in EngineKind::ALL {
            assert!(
                text.contains(e.name()),
                "configs/serve.toml does not name the {e} engine"
            );
        }
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            if word.starts_with("gpu-") {
                assert!(
                    word.parse::<EngineKind>().is_ok(),
                    "configs/serve.toml names an engine {word:?} that does not exist"
                );
            }
        }
    }
}
