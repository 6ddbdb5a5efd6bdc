//! Which engine runs each service, with what knobs: `--service NAME[:ENGINE]` and the config
//! file's `[services.NAME]` tables (passed on as `--service-opt NAME.KEY=VALUE`), over the
//! server-wide flags as defaults (Triton's per-model configuration).

use super::ServeArgs;
use anyhow::{bail, Context as _, Result};
use cohort_engine::DispatchPolicy;
use cohort_services::knn::gpu_ivf::Precision;
use cohort_services::knn::persistent::PersistentPlan;

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

/// One service's engine and knobs.
#[derive(Debug, Clone)]
pub struct ServicePlan {
    pub name: &'static str,
    pub engine: EngineKind,
    pub gpus: Vec<usize>,
    pub max_cohort: usize,
    pub cohort_timeout_us: u64,
    pub cohort_keep_busy: usize,
    pub streams: Option<usize>,
    pub precision: Precision,
    pub cohort_graphs: bool,
    /// cpu engine: workers (0 = share of the cores left after the io threads).
    pub workers: usize,
    pub worker_cpus: Vec<usize>,
    pub max_queue: usize,
    pub dispatch: DispatchPolicy,
    /// gpu-persistent: requests in flight on each GPU (slots).
    pub gpu_slots: usize,
    /// gpu-persistent: worker blocks per stage (k-NN filter:search:reduce; echo/spin one
    /// count); None = the service's default.
    pub stages: Option<Vec<usize>>,
    /// gpu-persistent: tasks a worker block takes from its gpipe at once.
    pub gpu_batch: usize,
    /// gpu-persistent k-NN: cohorts of the tiled plan, or per-pair stages.
    pub persistent_plan: PersistentPlan,
    /// gpu-persistent k-NN, cohort plan: block groups running cohorts side by side.
    pub persistent_groups: usize,
    /// gpu-persistent: restart a GPU that makes no progress for this long.
    pub watchdog_ms: u64,
    /// gpu-persistent: answers whose steps the GPU stamps, reported at shutdown (0 = off).
    pub profile: usize,
    /// hybrid: the expected GPU wait beyond which a request goes to a CPU worker.
    pub latency_budget_us: u64,
    /// The longest deadline a request of this service may ask for (ms).
    pub max_deadline_ms: u64,
}

/// Keys a `[services.NAME]` table (or `--service-opt NAME.KEY=VALUE`) may set.
pub const SERVICE_KEYS: [&str; 21] = [
    "engine",
    "gpus",
    "max_cohort",
    "cohort_timeout_us",
    "cohort_keep_busy",
    "streams",
    "gpu_precision",
    "cohort_graphs",
    "workers",
    "worker_cpus",
    "max_queue",
    "dispatch",
    "gpu_slots",
    "stages",
    "gpu_batch",
    "persistent_plan",
    "persistent_groups",
    "watchdog_ms",
    "profile",
    "latency_budget_us",
    "max_deadline_ms",
];

pub fn plans(a: &ServeArgs) -> Result<Vec<ServicePlan>> {
    let default_engine: EngineKind = a.engine.parse().map_err(anyhow::Error::msg)?;
    let mut out: Vec<ServicePlan> = Vec::new();
    for item in a
        .service
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (name, engine) = match item.split_once(':') {
            Some((n, e)) => (n.trim(), e.trim().parse().map_err(anyhow::Error::msg)?),
            None => (item, default_engine),
        };
        let Some(entry) = cohort_services::catalog::entry(name) else {
            bail!(
                "unknown service {name:?} (available: {})",
                cohort_services::catalog::names().join(", ")
            );
        };
        if out.iter().any(|p| p.name == name) {
            bail!("service {name:?} is listed twice in --service");
        }
        out.push(ServicePlan {
            name: entry.name,
            engine,
            gpus: a.gpu.gpus.clone(),
            max_cohort: a.gpu.max_cohort,
            cohort_timeout_us: a.gpu.cohort_timeout_us,
            cohort_keep_busy: a.gpu.cohort_keep_busy,
            streams: a.gpu.streams,
            precision: a.gpu.gpu_precision,
            cohort_graphs: a.gpu.cohort_graphs,
            workers: a.workers,
            worker_cpus: a.worker_cpus.clone().map(|c| c.0).unwrap_or_default(),
            max_queue: a.max_queue,
            dispatch: a.dispatch,
            gpu_slots: 2048,
            stages: None,
            gpu_batch: 1,
            persistent_plan: PersistentPlan::default(),
            persistent_groups: cohort_services::knn::persistent::DEFAULT_COHORT_GROUPS,
            watchdog_ms: 1000,
            profile: 0,
            latency_budget_us: 1000,
            max_deadline_ms: a.max_deadline_ms,
        });
    }
    anyhow::ensure!(!out.is_empty(), "--service names no service");
    for opt in &a.service_opt {
        apply(&mut out, opt).with_context(|| format!("--service-opt {opt:?}"))?;
    }
    for p in &out {
        check(p)?;
    }
    Ok(out)
}

/// `NAME.KEY=VALUE` onto the plan of NAME.
fn apply(plans: &mut [ServicePlan], opt: &str) -> Result<()> {
    let Some((path, value)) = opt.split_once('=') else {
        bail!("expected NAME.KEY=VALUE");
    };
    let Some((name, key)) = path.split_once('.') else {
        bail!("expected NAME.KEY=VALUE");
    };
    let key = key.replace('-', "_");
    let Some(p) = plans.iter_mut().find(|p| p.name == name) else {
        bail!("service {name:?} is not in --service");
    };
    let num = |v: &str| -> Result<u64> {
        v.parse()
            .with_context(|| format!("{key} must be a non-negative integer, got {v:?}"))
    };
    let list =
        |v: &str| -> Result<Vec<usize>> { crate::util::parse_cpus(v).map_err(anyhow::Error::msg) };
    match key.as_str() {
        "engine" => p.engine = value.parse().map_err(anyhow::Error::msg)?,
        "gpus" => p.gpus = list(value)?,
        "max_cohort" => p.max_cohort = num(value)? as usize,
        "cohort_timeout_us" => p.cohort_timeout_us = num(value)?,
        "cohort_keep_busy" => p.cohort_keep_busy = num(value)? as usize,
        "streams" => p.streams = Some(num(value)? as usize),
        "gpu_precision" => p.precision = value.parse().map_err(anyhow::Error::msg)?,
        "cohort_graphs" => {
            p.cohort_graphs = value
                .parse()
                .with_context(|| format!("cohort_graphs must be true or false, got {value:?}"))?
        }
        "workers" => p.workers = num(value)? as usize,
        "worker_cpus" => p.worker_cpus = list(value)?,
        "max_queue" => p.max_queue = num(value)? as usize,
        "dispatch" => p.dispatch = value.parse().map_err(anyhow::Error::msg)?,
        "gpu_slots" => p.gpu_slots = num(value)? as usize,
        "stages" => {
            p.stages = Some(
                value
                    .split(':')
                    .map(|v| num(v.trim()).map(|n| n as usize))
                    .collect::<Result<_>>()
                    .context("stages is a list of block counts like 132:264:33")?,
            )
        }
        "gpu_batch" => p.gpu_batch = num(value)? as usize,
        "persistent_plan" => {
            if p.name != "knn" {
                bail!("{}: persistent_plan applies to knn only", p.name);
            }
            p.persistent_plan = value.parse().map_err(anyhow::Error::msg)?
        }
        "persistent_groups" => {
            if p.name != "knn" {
                bail!("{}: persistent_groups applies to knn only", p.name);
            }
            p.persistent_groups = num(value)? as usize
        }
        "watchdog_ms" => p.watchdog_ms = num(value)?,
        "profile" => p.profile = num(value)? as usize,
        "latency_budget_us" => p.latency_budget_us = num(value)?,
        "max_deadline_ms" => p.max_deadline_ms = num(value)?,
        other => bail!(
            "unknown per-service key {other:?} (known: {})",
            SERVICE_KEYS.join(", ")
        ),
    }
    Ok(())
}

fn check(p: &ServicePlan) -> Result<()> {
    anyhow::ensure!(p.max_queue >= 1, "{}: max_queue must be at least 1", p.name);
    anyhow::ensure!(
        p.max_cohort >= 1,
        "{}: max_cohort must be at least 1",
        p.name
    );
    anyhow::ensure!(
        p.streams != Some(0),
        "{}: streams must be at least 1",
        p.name
    );
    anyhow::ensure!(
        (1..=1 << 20).contains(&p.gpu_slots),
        "{}: gpu_slots must be in 1..=1048576",
        p.name
    );
    anyhow::ensure!(
        (1..=cohort_gpu::persistent::rt::MAX_BATCH).contains(&p.gpu_batch),
        "{}: gpu_batch must be in 1..={}",
        p.name,
        cohort_gpu::persistent::rt::MAX_BATCH
    );
    let groups = cohort_gpu::persistent::rt::BAR_GROUPS;
    anyhow::ensure!(
        (1..=groups).contains(&p.persistent_groups),
        "{}: persistent_groups must be in 1..={groups}",
        p.name
    );
    anyhow::ensure!(
        p.profile <= 1 << 22,
        "{}: profile must be at most 4194304 answers",
        p.name
    );
    anyhow::ensure!(
        p.watchdog_ms >= 1,
        "{}: watchdog_ms must be at least 1",
        p.name
    );
    anyhow::ensure!(
        p.max_deadline_ms >= 1,
        "{}: max_deadline_ms must be at least 1",
        p.name
    );
    anyhow::ensure!(
        (1..=u32::MAX as u64).contains(&p.latency_budget_us),
        "{}: latency_budget_us must be in 1..=4294967295",
        p.name
    );
    if p.engine.is_gpu() {
        let entry = cohort_services::catalog::entry(p.name).expect("plans hold catalog names");
        let has = if p.engine == EngineKind::GpuPersistent {
            entry.persistent.is_some()
        } else {
            entry.gpu.is_some()
        };
        check_backend(has, p.name, p.engine)?;
        anyhow::ensure!(!p.gpus.is_empty(), "{}: no GPU listed (gpus)", p.name);
        anyhow::ensure!(
            !entry.one_gpu || (p.gpus.len() == 1 && p.engine != EngineKind::Hybrid),
            "{}: its GPU backend keeps state its requests share (sessions) in one GPU's \
             memory; serve it on one GPU (gpus = [N]) and not on hybrid",
            p.name
        );
    }
    Ok(())
}

/// A service runs on a GPU engine only if it has a GPU backend.
pub fn check_backend(has_gpu_backend: bool, name: &str, engine: EngineKind) -> Result<()> {
    if engine.is_gpu() && !has_gpu_backend {
        bail!(
            "service {name:?} has no GPU backend, so it cannot run on {}; serve it with {name}:cpu",
            engine.name()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_with_per_gpu_state_is_refused_on_two_gpus_and_on_hybrid() {
        let mut a = args("bank:gpu-cohort", &[]);
        a.gpu.gpus = vec![0];
        assert!(plans(&a).is_ok());
        a.gpu.gpus = vec![0, 1];
        let e = plans(&a).unwrap_err().to_string();
        assert!(e.contains("one GPU"), "{e}");
        a.gpu.gpus = vec![0];
        a.service = "bank:hybrid".into();
        assert!(plans(&a).is_err());
    }

    fn args(service: &str, opts: &[&str]) -> ServeArgs {
        let mut a = ServeArgs::loopback(service);
        a.service_opt = opts.iter().map(|s| s.to_string()).collect();
        a
    }

    #[test]
    fn services_name_their_engines_and_the_rest_take_the_default() {
        let mut a = args(
            "knn:gpu-cohort, echo:cpu,spin",
            &[
                "knn.max_cohort=512",
                "spin.engine=gpu-direct",
                "knn.gpus=0-1",
            ],
        );
        a.engine = "cpu".into();
        let p = plans(&a).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(
            (p[0].name, p[0].engine, p[0].max_cohort),
            ("knn", EngineKind::GpuCohort, 512)
        );
        assert_eq!(p[0].gpus, vec![0, 1]);
        assert_eq!((p[1].name, p[1].engine), ("echo", EngineKind::Cpu));
        assert_eq!((p[2].name, p[2].engine), ("spin", EngineKind::GpuDirect));
        assert_eq!(p[2].max_cohort, 256, "server-wide default");
    }

    #[test]
    fn bad_plans_are_refused_with_the_reason() {
        let e = |s: &str, o: &[&str]| format!("{:#}", plans(&args(s, o)).unwrap_err());
        assert!(e("echo,echo", &[]).contains("listed twice"));
        assert!(e("nope", &[]).contains("unknown service \"nope\""));
        assert!(e("echo:warp-drive", &[]).contains("unknown engine"));
        assert!(e("echo", &["spin.workers=2"]).contains("not in --service"));
        assert!(e("echo", &["echo.colour=red"]).contains("unknown per-service key"));
        assert!(e("echo", &["echo.max_queue=x"]).contains("non-negative integer"));
        assert!(e("echo", &["echo.streams=0"]).contains("streams must be at least 1"));
        assert!(e("echo", &["echo"]).contains("NAME.KEY=VALUE"));
        assert!(e("knn", &["knn.stages=8:x:2"]).contains("stages is a list of block counts"));
        assert!(e("knn", &["knn.stages="]).contains("stages is a list of block counts"));
        assert!(e("echo", &["echo.gpu_batch=0"]).contains("gpu_batch must be in 1..=32"));
        assert!(e("echo", &["echo.gpu_batch=33"]).contains("gpu_batch must be in 1..=32"));
        assert!(e("echo", &["echo.gpu_slots=0"]).contains("gpu_slots must be in"));
        assert!(e("echo", &["echo.watchdog_ms=0"]).contains("watchdog_ms must be at least 1"));
        assert!(e("echo", &["echo.profile=99999999"]).contains("profile must be at most"));
        assert!(e("echo", &["echo.profile=x"]).contains("profile"));
        assert!(e("echo", &["echo.latency_budget_us=0"]).contains("latency_budget_us must be"));
        assert!(e("knn", &["knn.persistent_plan=x"]).contains("cohort, per-pair"));
        assert!(e("echo", &["echo.persistent_plan=cohort"]).contains("knn only"));
        assert!(
            e("knn", &["knn.persistent_groups=0"]).contains("persistent_groups must be in 1..=8")
        );
        assert!(
            e("knn", &["knn.persistent_groups=9"]).contains("persistent_groups must be in 1..=8")
        );
        assert!(e("knn", &["knn.persistent_groups=two"]).contains("non-negative integer"));
    }

    #[test]
    fn persistent_knobs_reach_the_plan() {
        let a = args(
            "knn:gpu-persistent",
            &[
                "knn.stages=4:8:1",
                "knn.gpu_slots=128",
                "knn.gpu_batch=4",
                "knn.watchdog_ms=50",
                "knn.profile=1000",
            ],
        );
        let p = &plans(&a).unwrap()[0];
        assert_eq!(p.engine, EngineKind::GpuPersistent);
        assert_eq!(p.stages.as_deref(), Some(&[4, 8, 1][..]));
        assert_eq!((p.gpu_slots, p.gpu_batch, p.watchdog_ms), (128, 4, 50));
        assert_eq!(p.persistent_plan, PersistentPlan::Cohort);
        assert_eq!(p.profile, 1000);
        let a = args(
            "knn:gpu-persistent",
            &["knn.persistent_plan=per-pair", "knn.persistent_groups=3"],
        );
        assert_eq!(plans(&a).unwrap()[0].persistent_groups, 3);
        assert_eq!(
            plans(&a).unwrap()[0].persistent_plan,
            PersistentPlan::PerPair
        );
    }

    #[test]
    fn hybrid_takes_its_budget_and_needs_a_gpu_backend() {
        let a = args(
            "knn:hybrid",
            &["knn.latency_budget_us=2500", "knn.workers=3"],
        );
        let p = &plans(&a).unwrap()[0];
        assert_eq!(
            (p.engine, p.latency_budget_us, p.workers),
            (EngineKind::Hybrid, 2500, 3)
        );
        assert!(EngineKind::Hybrid.runs_cpu_function() && EngineKind::Hybrid.is_gpu());
        let err = check_backend(false, "bank", EngineKind::Hybrid)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no GPU backend"), "{err}");
    }

    #[test]
    fn a_gpu_engine_needs_a_gpu_backend() {
        let err = check_backend(false, "bank", EngineKind::GpuCohort)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no GPU backend") && err.contains("bank:cpu"),
            "{err}"
        );
        assert!(check_backend(false, "bank", EngineKind::Cpu).is_ok());
        assert!(check_backend(true, "knn", EngineKind::GpuDirect).is_ok());
    }
}
