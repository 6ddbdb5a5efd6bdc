//! Which engine runs each service, with what knobs (Triton's per-model configuration). A
//! service's settings come from the config file's `[services.NAME]` table, the serve flags the
//! service owns (`--index`), and `--service-opt NAME.KEY=VALUE`, in that order of precedence,
//! as one TOML table: the engine keys below set the service's engine (over the server-wide
//! flags as defaults), every other key is the service's own and its typed settings read it.

pub use crate::engine_config::EngineKind;
use crate::engine_config::{engine_keys, is_engine_key, knob_of, EngineConfig};
use anyhow::{bail, Context as _, Result};
use cohort_services::config::{value_of, Settings};

/// One service's engine and knobs.
#[derive(Debug, Clone)]
pub struct ServicePlan {
    pub name: &'static str,
    /// Its engine and the engine's knobs: the server-wide flags, then its own keys.
    pub cfg: EngineConfig,
    /// The service's own settings (what its typed settings struct reads).
    pub settings: Settings,
    /// Why its GPU engine runs the control threads it does, where the number was chosen
    /// (`--control-threads 0`, the default) rather than given.
    pub control_threads_why: Option<String>,
}

/// The services to serve and what each runs on: `services` as `--service` names them
/// (`NAME[:ENGINE],...`), `server_wide` the engine knobs every service starts from (the
/// flags), `settings` the services' tables and flags (service -> key -> value) and `opts`
/// the `--service-opt NAME.KEY=VALUE`s over them; `cores` the cores the server runs on (its
/// GPU batching services share them for auto control threads). Called once, by
/// `ServerConfig::resolve`.
pub fn plans(
    services: &str,
    server_wide: &EngineConfig,
    settings: &std::collections::BTreeMap<String, Settings>,
    opts: &[String],
    cores: usize,
) -> Result<Vec<ServicePlan>> {
    let default_engine = server_wide.engine;
    let mut out: Vec<ServicePlan> = Vec::new();
    for item in services.split(',').map(str::trim).filter(|s| !s.is_empty()) {
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
            cfg: EngineConfig {
                engine,
                ..server_wide.clone()
            },
            settings: Settings::new(),
            control_threads_why: None,
        });
    }
    anyhow::ensure!(!out.is_empty(), "--service names no service");
    // Settings from the config file and the services' flags, then --service-opt: the engine
    // keys gathered per service (a later one wins), the rest the service's own.
    let mut engine_keys: Vec<toml::Table> = vec![toml::Table::new(); out.len()];
    for (name, table) in settings {
        let Some(i) = out.iter().position(|p| p.name == name.as_str()) else {
            // A flag of a service not served (the demo's --index with --service echo): unused.
            continue;
        };
        for (key, value) in table {
            set(&mut out[i], &mut engine_keys[i], key, value.clone());
        }
    }
    for opt in opts {
        let (name, key, value) =
            split_opt(opt).with_context(|| format!("--service-opt {opt:?}"))?;
        let Some(i) = out.iter().position(|p| p.name == name) else {
            bail!("--service-opt {opt:?}: service {name:?} is not in --service");
        };
        set(&mut out[i], &mut engine_keys[i], &key, value_of(value));
    }
    // Each service's engine read once from all its keys, then each key held to that engine.
    for (p, keys) in out.iter_mut().zip(&engine_keys) {
        p.cfg = p
            .cfg
            .with_keys(keys)
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.name))?;
        for key in keys.keys() {
            knob_of(p.cfg.engine, key).map_err(|e| anyhow::anyhow!("{}: {e}", p.name))?;
        }
    }
    // Auto control threads: the server's cores shared by its GPU batching services.
    let batching = out
        .iter()
        .filter(|p| uses_control_threads(p.cfg.engine))
        .count();
    for p in &mut out {
        if uses_control_threads(p.cfg.engine) {
            p.control_threads_why = p.cfg.gpu.resolve_control_threads(cores / batching.max(1));
        } else if p.cfg.gpu.control_threads == 0 {
            p.cfg.gpu.control_threads = 1; // not read by this engine; shown as one
        }
    }
    for p in &out {
        check(p)?;
    }
    Ok(out)
}

/// Engines whose GPU host work runs on control threads (`--control-threads`).
fn uses_control_threads(engine: EngineKind) -> bool {
    matches!(
        engine,
        EngineKind::GpuDirect | EngineKind::GpuCohort | EngineKind::Hybrid
    )
}

/// `opts` (`NAME.KEY=VALUE`) less the engine knobs `engine` does not read: what a benchmark
/// that runs the same settings on several engines in turn hands each.
pub fn opts_for(engine: EngineKind, opts: &[String]) -> Vec<String> {
    opts.iter()
        .filter(|o| match split_opt(o) {
            Ok((_, key, _)) => !is_engine_key(&key) || knob_of(engine, &key).is_ok(),
            Err(_) => true,
        })
        .cloned()
        .collect()
}

/// `NAME.KEY=VALUE` split; `-` in KEY read as `_`.
fn split_opt(opt: &str) -> Result<(&str, String, &str)> {
    let Some((path, value)) = opt.split_once('=') else {
        bail!("expected NAME.KEY=VALUE");
    };
    let Some((name, key)) = path.split_once('.') else {
        bail!("expected NAME.KEY=VALUE");
    };
    Ok((name, key.replace('-', "_"), value))
}

/// One setting of a service: an engine key goes to the keys its engine is read from (its
/// typed struct, once all are in), any other key to the service's own settings (checked
/// against its typed struct in [`check`]).
fn set(p: &mut ServicePlan, engine_keys: &mut toml::Table, key: &str, value: toml::Value) {
    if is_engine_key(key) {
        engine_keys.insert(key.to_string(), value);
    } else {
        p.settings.insert(key.to_string(), value);
    }
}

/// The knobs the plan's engine reads, as the keys a `[services.NAME]` table takes (what
/// `--check-config` prints; read back, they give the same plan).
pub fn engine_settings(p: &ServicePlan) -> Settings {
    let mut t = p.cfg.to_table();
    t.retain(|k, _| knob_of(p.cfg.engine, k).is_ok());
    t
}

/// The service's own settings, resolved by its typed struct (every default filled in); an
/// unknown key names the engine keys too.
pub fn resolved_settings(p: &ServicePlan) -> Result<Settings> {
    let entry = cohort_services::catalog::entry(p.name).expect("plans hold catalog names");
    (entry.resolve)(&p.settings).map_err(|e| {
        if e.contains("unknown field") {
            let keys: Vec<&str> = engine_keys().collect();
            anyhow::anyhow!("{e}; engine keys: {}", keys.join(", "))
        } else {
            anyhow::anyhow!(e)
        }
    })
}

fn check(p: &ServicePlan) -> Result<()> {
    resolved_settings(p)?;
    let EngineConfig {
        engine,
        admission: a,
        gpu: g,
        persistent: q,
        hybrid: h,
        ..
    } = &p.cfg;
    anyhow::ensure!(a.max_queue >= 1, "{}: max_queue must be at least 1", p.name);
    anyhow::ensure!(
        g.max_cohort >= 1,
        "{}: max_cohort must be at least 1",
        p.name
    );
    anyhow::ensure!(
        g.streams != Some(0),
        "{}: streams must be at least 1",
        p.name
    );
    anyhow::ensure!(
        (1..=64).contains(&g.control_threads),
        "{}: control_threads must be in 1..=64",
        p.name
    );
    anyhow::ensure!(
        (1..=64).contains(&g.gpus_per_control_thread),
        "{}: gpus_per_control_thread must be in 1..=64",
        p.name
    );
    anyhow::ensure!(
        g.control_threads == 1 || g.gpus_per_control_thread == 1,
        "{}: control_threads ({}) spreads one GPU over threads and gpus_per_control_thread ({}) \
         puts GPUs on one thread: set one of them, not both",
        p.name,
        g.control_threads,
        g.gpus_per_control_thread
    );
    anyhow::ensure!(
        (1..=1 << 20).contains(&q.gpu_slots),
        "{}: gpu_slots must be in 1..=1048576",
        p.name
    );
    anyhow::ensure!(
        (1..=cohort_gpu::persistent::rt::MAX_BATCH).contains(&q.gpu_batch),
        "{}: gpu_batch must be in 1..={}",
        p.name,
        cohort_gpu::persistent::rt::MAX_BATCH
    );
    anyhow::ensure!(
        q.profile <= 1 << 22,
        "{}: profile must be at most 4194304 answers",
        p.name
    );
    anyhow::ensure!(
        q.egress_threads <= cohort_gpu::persistent::rt::MAX_TX,
        "{}: egress_threads must be at most {} (0 = auto)",
        p.name,
        cohort_gpu::persistent::rt::MAX_TX
    );
    anyhow::ensure!(
        q.watchdog_ms >= 1,
        "{}: watchdog_ms must be at least 1",
        p.name
    );
    anyhow::ensure!(
        a.max_deadline_ms >= 1,
        "{}: max_deadline_ms must be at least 1",
        p.name
    );
    anyhow::ensure!(
        (1..=u32::MAX as u64).contains(&h.latency_budget_us),
        "{}: latency_budget_us must be in 1..=4294967295",
        p.name
    );
    if engine.is_gpu() {
        let entry = cohort_services::catalog::entry(p.name).expect("plans hold catalog names");
        let has = if *engine == EngineKind::GpuPersistent {
            entry.persistent.is_some()
        } else {
            entry.gpu.is_some()
        };
        check_backend(has, p.name, *engine)?;
        anyhow::ensure!(!g.gpus.is_empty(), "{}: no GPU listed (gpus)", p.name);
        anyhow::ensure!(
            !entry.one_gpu || (g.gpus.len() == 1 && *engine != EngineKind::Hybrid),
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
    use crate::ServeArgs;

    /// The plans of a command line, as `ServerConfig::resolve` makes them.
    fn plans(a: &ServeArgs) -> Result<Vec<ServicePlan>> {
        super::plans(
            &a.service,
            &crate::server_config::engine_defaults(a)?,
            &a.service_settings,
            &a.service_opt,
            8,
        )
    }

    #[test]
    fn a_service_with_per_gpu_state_is_refused_on_two_gpus_and_on_hybrid() {
        // A catalogued service whose GPU backend keeps shared state on one GPU.
        let name = cohort_services::catalog::all()
            .find(|e| e.one_gpu)
            .expect("a one-GPU service in the catalog")
            .name;
        let mut a = args(&format!("{name}:gpu-cohort"), &[]);
        a.gpu.gpus = vec![0];
        assert!(plans(&a).is_ok());
        a.gpu.gpus = vec![0, 1];
        let e = plans(&a).unwrap_err().to_string();
        assert!(e.contains("one GPU"), "{e}");
        a.gpu.gpus = vec![0];
        a.service = format!("{name}:hybrid");
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
            (p[0].name, p[0].cfg.engine, p[0].cfg.gpu.max_cohort),
            ("knn", EngineKind::GpuCohort, 512)
        );
        assert_eq!(p[0].cfg.gpu.gpus, vec![0, 1]);
        assert_eq!((p[1].name, p[1].cfg.engine), ("echo", EngineKind::Cpu));
        assert_eq!(
            (p[2].name, p[2].cfg.engine),
            ("spin", EngineKind::GpuDirect)
        );
        assert_eq!(p[2].cfg.gpu.max_cohort, 256, "server-wide default");
    }

    #[test]
    fn bad_plans_are_refused_with_the_reason() {
        let e = |s: &str, o: &[&str]| format!("{:#}", plans(&args(s, o)).unwrap_err());
        assert!(e("echo,echo", &[]).contains("listed twice"));
        assert!(e("nope", &[]).contains("unknown service \"nope\""));
        assert!(e("echo:warp-drive", &[]).contains("unknown engine"));
        assert!(e("echo", &["spin.workers=2"]).contains("not in --service"));
        let unknown = e("echo", &["echo.colour=red"]);
        assert!(
            unknown.contains("unknown field `colour`") && unknown.contains("engine keys: engine"),
            "{unknown}"
        );
        let unknown = e("knn", &["knn.colour=red"]);
        assert!(
            unknown.contains("colour") && unknown.contains("index_mapped"),
            "{unknown}"
        );
        assert!(e("echo", &["echo.max_queue=x"]).contains("non-negative integer"));
        assert!(e("echo:gpu-cohort", &["echo.streams=0"]).contains("streams must be at least 1"));
        assert!(e("echo:gpu-cohort", &["echo.control_threads=65"])
            .contains("control_threads must be in 1..=64"));
        // 0 is auto: chosen from the cores, and said why.
        let auto = plans(&args("echo:gpu-cohort", &["echo.control_threads=0"])).unwrap();
        assert!((1..=4).contains(&auto[0].cfg.gpu.control_threads));
        assert!(auto[0].control_threads_why.is_some());
        let given = plans(&args("echo:gpu-cohort", &["echo.control_threads=3"])).unwrap();
        assert_eq!(given[0].cfg.gpu.control_threads, 3);
        assert!(given[0].control_threads_why.is_none());
        assert!(e("echo", &["echo"]).contains("NAME.KEY=VALUE"));
        assert!(e("knn", &["knn.stages=8:x:2"]).contains("stages is a list of block counts"));
        assert!(e("knn", &["knn.stages="]).contains("stages is a list of block counts"));
        let p = "echo:gpu-persistent";
        assert!(e(p, &["echo.gpu_batch=0"]).contains("gpu_batch must be in 1..=32"));
        assert!(e(p, &["echo.gpu_batch=33"]).contains("gpu_batch must be in 1..=32"));
        assert!(e(p, &["echo.gpu_slots=0"]).contains("gpu_slots must be in"));
        assert!(e(p, &["echo.watchdog_ms=0"]).contains("watchdog_ms must be at least 1"));
        assert!(e(p, &["echo.egress_threads=17"]).contains("egress_threads must be at most 16"));
        assert!(e(p, &["echo.profile=99999999"]).contains("profile must be at most"));
        assert!(e(p, &["echo.profile=x"]).contains("profile"));
        let h = "echo:hybrid";
        assert!(e(h, &["echo.latency_budget_us=0"]).contains("latency_budget_us must be"));
        assert!(e("knn", &["knn.persistent_plan=x"]).contains("cohort, per-pair"));
        assert!(e("echo", &["echo.persistent_plan=cohort"]).contains("unknown field"));
        assert!(
            e("knn", &["knn.persistent_groups=0"]).contains("persistent_groups must be in 1..=64")
        );
        assert!(
            e("knn", &["knn.persistent_groups=65"]).contains("persistent_groups must be in 1..=64")
        );
        assert!(e("knn", &["knn.persistent_groups=two"]).contains("persistent_groups"));
    }

    /// A service's own engine keys are held to its engine: a knob another engine reads is
    /// refused, naming both, whichever way it came (and set after the engine key or before).
    #[test]
    fn a_service_takes_only_the_knobs_its_engine_reads() {
        let e = |s: &str, o: &[&str]| format!("{:#}", plans(&args(s, o)).unwrap_err());
        let m = e("echo:cpu", &["echo.gpu_batch=4"]);
        assert!(
            m.contains("echo: gpu_batch is a knob of gpu-persistent only")
                && m.contains("engine is cpu"),
            "{m}"
        );
        let m = e("echo:gpu-persistent", &["echo.max_cohort=64"]);
        assert!(
            m.contains("max_cohort is a knob of gpu-direct, gpu-cohort, hybrid only"),
            "{m}"
        );
        assert!(e("echo:inline", &["echo.workers=2"]).contains("engine is inline"));
        // The engine key itself may come with the knobs, in any order.
        let p = plans(&args(
            "echo",
            &["echo.gpu_batch=4", "echo.engine=gpu-persistent"],
        ));
        assert_eq!(p.unwrap()[0].cfg.persistent.gpu_batch, 4);
        // Server-wide flags are every service's defaults: not held to any one engine.
        let mut a = args("echo:cpu", &[]);
        a.persistent.gpu_batch = 4;
        assert!(plans(&a).is_ok());
        // A benchmark running several engines in turn hands each only its knobs.
        let opts = vec!["echo.gpu_batch=4".to_string(), "echo.max_queue=9".into()];
        assert_eq!(opts_for(EngineKind::Cpu, &opts), vec!["echo.max_queue=9"]);
        assert_eq!(opts_for(EngineKind::GpuPersistent, &opts), opts);
    }

    #[test]
    fn service_settings_come_from_the_file_then_flags_then_service_opt() {
        let mut a = args("knn:gpu-persistent", &["knn.persistent_groups=3"]);
        let file: toml::Table = "persistent_groups = 2\ngpu_slots = 64\nindex = \"/x.ivf\"\ngpus = [0, 1]\nstages = [4, 8, 1]\n"
            .parse()
            .unwrap();
        a.service_settings.insert("knn".into(), file);
        let p = &plans(&a).unwrap()[0];
        assert_eq!(
            (p.cfg.persistent.gpu_slots, p.cfg.gpu.gpus.clone()),
            (64, vec![0, 1])
        );
        assert_eq!(
            p.cfg.persistent.stages.as_ref().map(|s| &s.0[..]),
            Some(&[4, 8, 1][..])
        );
        let s = resolved_settings(p).unwrap();
        assert_eq!(s["persistent_groups"], toml::Value::Integer(3));
        assert_eq!(s["index"], toml::Value::String("/x.ivf".into()));
        assert_eq!(s["precision"], toml::Value::String("auto".into()));
        assert_eq!(s["persistent_plan"], toml::Value::String("cohort".into()));
    }

    /// What `--check-config` prints for a service is every knob its engine reads, and read
    /// back as its settings it gives the same knobs.
    #[test]
    fn engine_settings_are_the_engines_knobs_and_read_back_alike() {
        for kind in EngineKind::ALL {
            let a = args(&format!("echo:{kind}"), &["echo.dispatch=key-hash"]);
            let p = plans(&a).unwrap().remove(0);
            let written = engine_settings(&p);
            let mut keys: Vec<&str> = written.keys().map(String::as_str).collect();
            let mut want: Vec<&str> = engine_keys()
                .filter(|k| knob_of(kind, k).is_ok())
                // Optional knobs left unset are not written.
                .filter(|k| !["streams", "stages", "worker_cpus"].contains(k))
                .collect();
            keys.sort_unstable();
            want.sort_unstable();
            assert_eq!(keys, want, "{kind}");
            let mut b = args("echo", &[]);
            b.service_settings.insert("echo".into(), written.clone());
            let q = plans(&b).unwrap().remove(0);
            assert_eq!(engine_settings(&q), written, "{kind}");
            assert!(q.settings.is_empty(), "an engine key went to the service");
        }
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
                "knn.persistent_plan=per-pair",
            ],
        );
        let p = &plans(&a).unwrap()[0];
        assert_eq!(p.cfg.engine, EngineKind::GpuPersistent);
        assert_eq!(
            p.cfg.persistent.stages.as_ref().map(|s| &s.0[..]),
            Some(&[4, 8, 1][..])
        );
        assert_eq!(
            (
                p.cfg.persistent.gpu_slots,
                p.cfg.persistent.gpu_batch,
                p.cfg.persistent.watchdog_ms
            ),
            (128, 4, 50)
        );
        assert_eq!(p.cfg.persistent.profile, 1000);
        assert_eq!(
            resolved_settings(p).unwrap()["persistent_plan"],
            toml::Value::String("per-pair".into())
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
            (
                p.cfg.engine,
                p.cfg.hybrid.latency_budget_us,
                p.cfg.cpu.workers
            ),
            (EngineKind::Hybrid, 2500, 3)
        );
        assert!(EngineKind::Hybrid.runs_cpu_function() && EngineKind::Hybrid.is_gpu());
        let err = check_backend(false, "pages", EngineKind::Hybrid)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no GPU backend"), "{err}");
    }

    #[test]
    fn a_gpu_engine_needs_a_gpu_backend() {
        let err = check_backend(false, "pages", EngineKind::GpuCohort)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no GPU backend") && err.contains("pages:cpu"),
            "{err}"
        );
        assert!(check_backend(false, "pages", EngineKind::Cpu).is_ok());
        assert!(check_backend(true, "knn", EngineKind::GpuDirect).is_ok());
    }
}
