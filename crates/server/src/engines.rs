//! Starting the engines a plan asks for: one engine per service (its own rings, so a full
//! queue of one service refuses that service alone), wired to the listeners' ingresses.

use crate::plan::{EngineKind, ServicePlan};
use crate::server_config::{ClusterConfig, ServeConfig, ServerConfig};
use anyhow::{Context as _, Result};
use cohort_engine::wiring::slots_for;
use cohort_engine::wiring::DEFAULT_STRIDE;
use cohort_engine::{
    wire_in, CpuEngine, CpuEngineConfig, DispatchPolicy, EngineSpec, IngressEnds, InlineEngine,
    LaneEnds, Metrics, Registry, ServiceLabel,
};
use cohort_gpu::engine::{GpuEngine, GpuEngineConfig, GpuUnit, Mode};
use cohort_gpu::persistent::profile::Profile;
use cohort_gpu::persistent::{MappedMemory, PersistentConfig, PersistentEngine};
use cohort_mq::{Layout, RingMemory};
use cohort_services::catalog;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

enum Running {
    Cpu(CpuEngine),
    Gpu(Vec<GpuEngine>),
    Persistent(Vec<PersistentEngine>),
    Hybrid(Vec<GpuEngine>, CpuEngine),
    Remote(cohort_cluster::front::RemoteEngine),
}

/// The engine side of a server: what the listeners (or the engine benchmark's drivers) need.
pub struct EngineSide {
    pub registry: Registry,
    pub metrics: Arc<Metrics>,
    /// The ingress ends, one per ingress asked for; taken by whoever drives them.
    pub ingresses: Vec<IngressEnds>,
    /// The services the io threads run themselves (`inline`): no lanes, nothing to stop.
    pub inline: Option<Arc<InlineEngine>>,
    engines: Vec<Running>,
}

impl EngineSide {
    /// Lets every engine finish its queued work (call after the ingresses stopped); returns
    /// the gpu-persistent lanes' profiles (those started with `profile`).
    pub fn shutdown(self) -> Vec<Profile> {
        drop(self.ingresses);
        let lanes: Vec<_> = self
            .engines
            .iter()
            .filter_map(|e| match e {
                Running::Persistent(v) => Some(v.iter().flat_map(|p| p.stats.iter().cloned())),
                _ => None,
            })
            .flatten()
            .collect();
        // Last started, first stopped: persistent kernels (started last) end before another
        // engine on their GPU frees its memory, which could otherwise wait on them forever.
        for e in self.engines.into_iter().rev() {
            match e {
                Running::Cpu(c) => c.shutdown(),
                Running::Gpu(v) => v.into_iter().for_each(GpuEngine::shutdown),
                Running::Persistent(v) => PersistentEngine::shutdown_all(v),
                Running::Hybrid(g, c) => {
                    g.into_iter().for_each(GpuEngine::shutdown);
                    c.shutdown();
                }
                Running::Remote(r) => r.shutdown(),
            }
        }
        lanes
            .iter()
            .filter_map(|s| s.profile.lock().expect("profile lock").take())
            .collect()
    }
}

/// The services themselves (CPU functions, schemas): every engine's reference.
pub fn build_registry(plans: &[ServicePlan]) -> Result<Registry> {
    let mut reg = Registry::new();
    for p in plans {
        let entry = catalog::entry(p.name).expect("plans hold catalog names");
        let s = (entry.build)(&p.settings, !p.cfg.engine.runs_cpu_function())
            .map_err(anyhow::Error::msg)?;
        reg.add(s).map_err(anyhow::Error::msg)?;
    }
    Ok(reg)
}

/// What the service chose from its settings and its data where they left it the choice
/// (`Entry::choices`: knn's GPU precision), for its engine.
pub fn service_choices(p: &ServicePlan) -> Result<Vec<cohort_services::entry::Choice>> {
    let entry = catalog::entry(p.name).expect("plans hold catalog names");
    let mut choices = match entry.choices {
        Some(f) => {
            f(&p.settings, p.cfg.engine.is_gpu()).map_err(|e| anyhow::anyhow!("{}: {e}", p.name))?
        }
        None => Vec::new(),
    };
    if let Some(why) = &p.control_threads_why {
        choices.push(cohort_services::entry::Choice {
            setting: "control_threads",
            value: p.cfg.gpu.control_threads.to_string(),
            why: why.clone(),
        });
    }
    Ok(choices)
}

/// GPU engines' host threads spin while their GPU works: where they and the io threads are
/// more than the cores the server may run on, they take turns on the cores and answers wait
/// milliseconds. Measured on 8 cores with 4 GPUs (`lab/results/issue48-control-threads-4xh100`):
/// 8 io threads and 4 control threads gave p99 4.4 ms at 300 K k-NN queries/s, 4 io threads
/// 0.43 ms at 600 K.
fn warn_if_cores_are_shared(s: &ServeConfig) {
    let gpu_threads: usize = s.plans.iter().map(crate::threads::gpu_threads).sum();
    let cores = s.machine_cores;
    let io_threads = s.threads.io_threads;
    // One GPU host thread sharing the io threads' cores is the chosen default (measured).
    if gpu_threads > 1 && io_threads + gpu_threads > cores {
        tracing::warn!(
            io_threads,
            gpu_threads,
            cores,
            "the GPU engines' host threads and the io threads are more than the server's cores: \
             they will take turns and the tail latency grows; give the GPU threads cores of \
             their own (--io-threads {}), or drive several GPUs from one thread \
             (--gpus-per-control-thread; gpu-persistent served 3x one GPU so on 8 cores)",
            cores.saturating_sub(gpu_threads).max(1)
        );
    }
}

/// A service's GPU lanes: one per GPU and control thread, one per GPU on gpu-persistent.
fn gpu_lanes(p: &ServicePlan) -> usize {
    match p.cfg.engine {
        EngineKind::GpuDirect | EngineKind::GpuCohort | EngineKind::Hybrid => p.cfg.gpu.gpu_lanes(),
        EngineKind::GpuPersistent => p.cfg.gpu.gpus.len(),
        EngineKind::Cpu | EngineKind::Inline => 0,
    }
}

/// Starts one engine per service of `cfg`, wired to `ingresses` ingress ends (a front end's
/// one remote engine for all).
pub fn start_engines(cfg: &ServerConfig, ingresses: usize) -> Result<EngineSide> {
    let all = cfg.serve.plans.clone();
    if let (Some(cluster), true) = (&cfg.cluster, cfg.is_front_end()) {
        return start_front_end(cluster, all, ingresses);
    }
    let serve = &cfg.serve;
    let registry = build_registry(&all)?;
    let id_of = |p: &ServicePlan| registry.by_name(p.name).expect("built above").id();
    // Inline services get no lanes: the ingresses run them (`Ingress::admit`).
    let (inline, plans): (Vec<_>, Vec<_>) = all
        .iter()
        .cloned()
        .partition(|p| p.cfg.engine == EngineKind::Inline);
    let inline = (!inline.is_empty()).then(|| {
        Arc::new(InlineEngine::new(
            inline
                .iter()
                .map(|p| registry.get(id_of(p)).expect("built above").clone()),
        ))
    });
    let lanes: Vec<usize> = plans
        .iter()
        .map(|p| match p.cfg.engine {
            EngineKind::Cpu => serve.cpu_workers(p),
            EngineKind::Hybrid => gpu_lanes(p) + serve.cpu_workers(p),
            _ => gpu_lanes(p),
        })
        .collect();
    let specs: Vec<EngineSpec> = plans
        .iter()
        .zip(&lanes)
        .map(|(p, &n)| EngineSpec {
            name: p.cfg.engine.name().into(),
            lanes: n,
            policy: match p.cfg.engine {
                EngineKind::Hybrid => DispatchPolicy::Hybrid {
                    gpu_lanes: p.cfg.gpu.gpu_lanes() as u16,
                    budget_us: p.cfg.hybrid.latency_budget_us as u32,
                },
                _ => p.cfg.admission.dispatch,
            },
            services: vec![id_of(p)],
            slots: slots_for(p.cfg.admission.max_queue, n, ingresses),
            // The batching GPU engines queue requests behind cohorts in flight: refuse at
            // once what would wait past its deadline (cpu workers keep the queue-and-timeout
            // behaviour their tests and clients rely on).
            admit_by_deadline: matches!(
                p.cfg.engine,
                EngineKind::GpuCohort | EngineKind::GpuDirect
            ),
            // --max-queue is exact: the rings are sized near it, the count bounds it.
            max_queued: Some(p.cfg.admission.max_queue),
            stride: match p.cfg.engine {
                EngineKind::GpuPersistent => EngineSpec::stride_for(
                    catalog::entry(p.name)
                        .expect("plans hold catalog names")
                        .persistent_request_bytes,
                ),
                _ => DEFAULT_STRIDE,
            },
        })
        .collect();
    let mut labels: HashMap<u16, ServiceLabel> = all
        .iter()
        .map(|p| {
            let l = ServiceLabel {
                name: p.name.into(),
                engine: p.cfg.engine.name().into(),
            };
            (id_of(p), l)
        })
        .collect();
    if cfg.collections.is_some() {
        // The collections' frames (no engine: the TCP shards' blocking pool) are counted
        // under their own name, not "unknown".
        labels.insert(
            cohort_collections::frames::SERVICE_ID,
            ServiceLabel {
                name: cohort_collections::frames::SERVICE_NAME.into(),
                engine: "blocking".into(),
            },
        );
    }
    let metrics = Arc::new(Metrics::new(labels));
    for p in &all {
        for c in service_choices(p)? {
            tracing::info!(service = p.name, setting = c.setting, value = %c.value,
                why = %c.why, "chosen");
            metrics.record_choice(p.name, c.setting, &c.value);
        }
    }
    let on_gpu: Vec<String> = plans
        .iter()
        .filter(|p| p.cfg.engine.is_gpu())
        .map(|p| format!("{} on {}", p.name, p.cfg.engine.name()))
        .collect();
    let devices = if on_gpu.is_empty() {
        Vec::new()
    } else {
        cohort_gpu::probe().with_context(|| format!("{} needs a GPU", on_gpu.join(", ")))?
    };
    let mut mapped = mapped_rings(&plans, &specs, ingresses, &devices)?;
    let wiring = wire_in(ingresses, &specs, &mut |e, l, i, _| {
        mapped
            .remove(&(e, l, i))
            .map(|m| Box::new(m) as Box<dyn RingMemory>)
    });
    let mut engines = Vec::new();
    // Persistent kernels start last: once they run, setting up another engine on the same GPU
    // (module loads, allocations) can wait on them forever (measured on the H200: a gpu-direct
    // engine started after a gpu-persistent one never came up).
    let mut order: Vec<_> = plans.iter().zip(wiring.engines).zip(lanes).collect();
    order.sort_by_key(|((p, _), _)| p.cfg.engine == EngineKind::GpuPersistent);
    for ((p, lanes), n) in order {
        let started = match p.cfg.engine {
            EngineKind::Cpu => start_cpu(serve, p, lanes, n, &registry, &metrics),
            EngineKind::Inline => unreachable!("inline services have no lanes"),
            EngineKind::GpuPersistent => start_persistent(p, lanes, &devices),
            EngineKind::Hybrid => start_hybrid(serve, p, lanes, n, &devices, &registry, &metrics),
            kind => start_gpu(p, kind, lanes, &devices, &metrics),
        };
        match started {
            Ok(r) => engines.push(r),
            Err(e) => {
                // Stop what already runs before reporting.
                EngineSide {
                    registry: registry.clone(),
                    metrics: metrics.clone(),
                    ingresses: Vec::new(),
                    inline: None,
                    engines,
                }
                .shutdown();
                return Err(e.context(format!("starting {} on {}", p.name, p.cfg.engine.name())));
            }
        }
        tracing::info!(
            service = p.name,
            engine = p.cfg.engine.name(),
            "engine started"
        );
    }
    warn_if_cores_are_shared(serve);
    Ok(EngineSide {
        registry,
        metrics,
        ingresses: wiring.ingresses,
        inline,
        engines,
    })
}

fn start_cpu(
    s: &ServeConfig,
    p: &ServicePlan,
    lanes: Vec<LaneEnds>,
    workers: usize,
    registry: &Registry,
    metrics: &Arc<Metrics>,
) -> Result<Running> {
    let (spin_us, _) = s.worker_spin_us(workers);
    let cfg = CpuEngineConfig {
        cpus: p
            .cfg
            .cpu
            .worker_cpus
            .clone()
            .map(|c| c.0)
            .unwrap_or_default(),
        spin: Duration::from_micros(spin_us),
        fair: s.fair_queue,
    };
    Ok(Running::Cpu(CpuEngine::start(
        &cfg,
        lanes,
        registry.clone(),
        metrics.clone(),
    )?))
}

/// GPU lanes first (gpu-cohort, one per GPU), then cpu workers, as the hybrid dispatch
/// numbers them.
fn start_hybrid(
    s: &ServeConfig,
    p: &ServicePlan,
    mut lanes: Vec<LaneEnds>,
    n: usize,
    devices: &[cohort_gpu::DeviceInfo],
    registry: &Registry,
    metrics: &Arc<Metrics>,
) -> Result<Running> {
    let cpu_lanes = lanes.split_off(p.cfg.gpu.gpu_lanes());
    let Running::Gpu(gpus) = start_gpu(p, EngineKind::GpuCohort, lanes, devices, metrics)? else {
        unreachable!("start_gpu starts GPU engines")
    };
    match start_cpu(
        s,
        p,
        cpu_lanes,
        n - p.cfg.gpu.gpu_lanes(),
        registry,
        metrics,
    ) {
        Ok(Running::Cpu(c)) => Ok(Running::Hybrid(gpus, c)),
        Ok(_) => unreachable!("start_cpu starts a cpu engine"),
        Err(e) => {
            gpus.into_iter().for_each(GpuEngine::shutdown);
            Err(e)
        }
    }
}

fn start_gpu(
    p: &ServicePlan,
    kind: EngineKind,
    lanes: Vec<LaneEnds>,
    devices: &[cohort_gpu::DeviceInfo],
    metrics: &Arc<Metrics>,
) -> Result<Running> {
    let entry = catalog::entry(p.name).expect("plans hold catalog names");
    // Every device's backend first: a service whose devices share state (knn's sharded
    // index) builds them together.
    let serving = cohort_gpu::pick_devices(devices, &p.cfg.gpu.gpus)?;
    let mut backends = entry
        .gpu_backends(&p.settings, &serving)
        .map_err(anyhow::Error::msg)?
        .into_iter();
    let mode = if kind == EngineKind::GpuDirect {
        Mode::Direct
    } else {
        Mode::Cohort
    };
    let cfg = GpuEngineConfig {
        mode,
        max_cohort: p.cfg.gpu.max_cohort,
        cohort_timeout: Duration::from_micros(p.cfg.gpu.cohort_timeout_us),
        keep_busy: p.cfg.gpu.cohort_keep_busy,
        streams: p.cfg.gpu.streams.unwrap_or(0),
        graphs: p.cfg.gpu.cohort_graphs,
        device: None,
    };
    // Each GPU's control threads take consecutive lanes and share its backend, or
    // `gpus_per_control_thread` consecutive GPUs share one control thread; if one fails to
    // start, those already started are stopped before the error is returned.
    let threads = usize::from(p.cfg.gpu.control_threads.max(1));
    let per_thread = usize::from(p.cfg.gpu.gpus_per_control_thread.max(1));
    let mut lanes = lanes.into_iter();
    let mut started: Vec<GpuEngine> = Vec::new();
    let mut start = |group: &[usize], started: &mut Vec<GpuEngine>| -> Result<()> {
        let mut units = Vec::with_capacity(group.len());
        for &g in group {
            let backend = backends.next().expect("one backend per serving device");
            let dev = cohort_gpu::find_device(devices, g)?;
            let mut cfg = cfg.clone();
            cfg.device = Some(dev.ordinal);
            if p.cfg.gpu.streams.is_none() {
                cfg.streams = GpuEngineConfig::default_streams(mode, backend.batch_keys());
            }
            tracing::info!(gpu = dev.ordinal, name = %dev.name, sms = dev.sms, mem = dev.total_mem,
                pci = %dev.pci_bus_id, numa = ?dev.numa_node, service = p.name,
                streams = cfg.streams, control_threads = threads,
                gpus_per_control_thread = per_thread, "gpu");
            for _ in 0..threads {
                let lane = lanes.next().expect("control_threads lanes per GPU");
                units.push(GpuUnit {
                    backend: backend.clone(),
                    lane,
                    cfg: cfg.clone(),
                });
            }
        }
        if per_thread == 1 {
            for u in units {
                started.push(GpuEngine::start_shared(vec![u], metrics.clone())?);
            }
        } else {
            started.push(GpuEngine::start_shared(units, metrics.clone())?);
        }
        Ok(())
    };
    for group in p.cfg.gpu.gpus.chunks(per_thread) {
        if let Err(e) = start(group, &mut started) {
            started.into_iter().for_each(GpuEngine::shutdown);
            return Err(e);
        }
    }
    Ok(Running::Gpu(started))
}

/// The request rings of gpu-persistent engines, in memory mapped for their GPU (the GPU polls
/// them), keyed by (engine, lane, ingress) as `wire_in` asks for them.
fn mapped_rings(
    plans: &[ServicePlan],
    specs: &[EngineSpec],
    ingresses: usize,
    devices: &[cohort_gpu::DeviceInfo],
) -> Result<HashMap<(usize, usize, usize), MappedMemory>> {
    let mut out = HashMap::new();
    for (e, (p, spec)) in plans.iter().zip(specs).enumerate() {
        if p.cfg.engine != EngineKind::GpuPersistent {
            continue;
        }
        let bytes = Layout::with_stride(spec.slots, spec.stride).bytes();
        for (l, &g) in p.cfg.gpu.gpus.iter().enumerate() {
            let dev = cohort_gpu::find_device(devices, g)?;
            for i in 0..ingresses {
                let m = MappedMemory::on_device(dev, bytes)
                    .with_context(|| format!("{}: mapped request rings on GPU {g}", p.name))?;
                out.insert((e, l, i), m);
            }
        }
    }
    Ok(out)
}

fn start_persistent(
    p: &ServicePlan,
    lanes: Vec<LaneEnds>,
    devices: &[cohort_gpu::DeviceInfo],
) -> Result<Running> {
    let entry = catalog::entry(p.name).expect("plans hold catalog names");
    let ingresses = lanes.first().map_or(1, |l| l.requests.len());
    let cfg = PersistentConfig {
        slots: p.cfg.persistent.gpu_slots,
        egress_threads: p.cfg.persistent.egress_threads_for(ingresses),
        blocks: p.cfg.persistent.stages.clone().map(|s| s.0),
        batch: p.cfg.persistent.gpu_batch,
        watchdog: Duration::from_millis(p.cfg.persistent.watchdog_ms),
        profile: p.cfg.persistent.profile,
        lanes_per_thread: usize::from(p.cfg.gpu.gpus_per_control_thread.max(1)),
        ..PersistentConfig::default()
    };
    // Every device's backend first (module loads, allocations; a sharded index's lanes all
    // at once), then every engine set up before any kernel runs: virtual GPUs share one
    // device, and set-up there can wait on resident persistent kernels
    // (`PersistentEngine::start_all`).
    let devs = cohort_gpu::pick_devices(devices, &p.cfg.gpu.gpus)?;
    for dev in &devs {
        tracing::info!(gpu = dev.ordinal, name = %dev.name, sms = dev.sms, service = p.name, "gpu-persistent");
    }
    let backends = entry
        .persistent_backends(&p.settings, &devs)
        .map_err(anyhow::Error::msg)?;
    let items = backends.into_iter().zip(lanes).collect();
    let started = PersistentEngine::start_all(items, &cfg)?;
    Ok(Running::Persistent(started))
}

/// A cluster front end's engine side: one remote engine for every service, forwarding what
/// the ingresses admit to the nodes registered in etcd (`cohort_cluster::front`). The
/// services are built as for a GPU engine (no resident CPU state): the front end maps and
/// checks requests, the nodes run them.
fn start_front_end(
    c: &ClusterConfig,
    all: Vec<ServicePlan>,
    ingresses: usize,
) -> Result<EngineSide> {
    let url = c.etcd.as_str();
    let etcd = cohort_cluster::membership::Etcd::open(url, &c.access)?;
    let mut registry = Registry::new();
    for p in &all {
        let entry = catalog::entry(p.name).expect("plans hold catalog names");
        registry
            .add((entry.build)(&p.settings, true).map_err(anyhow::Error::msg)?)
            .map_err(anyhow::Error::msg)?;
    }
    let ids: Vec<u16> = all
        .iter()
        .map(|p| registry.by_name(p.name).expect("built above").id())
        .collect();
    let lanes = c.lanes;
    let max_queue = all
        .iter()
        .map(|p| p.cfg.admission.max_queue)
        .max()
        .unwrap_or(1);
    let spec = EngineSpec {
        name: "remote".into(),
        lanes,
        policy: DispatchPolicy::RoundRobin,
        services: ids.clone(),
        slots: slots_for(max_queue, lanes, ingresses),
        admit_by_deadline: false,
        max_queued: Some(max_queue),
        stride: DEFAULT_STRIDE,
    };
    let labels: HashMap<u16, ServiceLabel> = all
        .iter()
        .zip(&ids)
        .map(|(p, &id)| {
            let l = ServiceLabel {
                name: p.name.into(),
                engine: "remote".into(),
            };
            (id, l)
        })
        .collect();
    let metrics = Arc::new(Metrics::new(labels));
    let wiring = wire_in(ingresses, &[spec], &mut |_, _, _, _| None);
    let cfg = cohort_cluster::front::RemoteConfig {
        etcd,
        window: c.window,
        idempotent: all
            .iter()
            .zip(&ids)
            .filter(|(p, _)| catalog::entry(p.name).is_some_and(|e| e.idempotent))
            .map(|(_, &id)| id)
            .collect(),
        grace: Duration::from_millis(5),
        busy_poll: c.busy_poll,
        rings: c.rings,
        key: crate::cluster_key(c, false)?,
        merges: all
            .iter()
            .zip(&ids)
            .filter_map(|(p, &id)| Some((id, catalog::entry(p.name)?.split?.merge)))
            .collect(),
    };
    let lanes = wiring.engines.into_iter().flatten().collect();
    let remote_metrics = cohort_cluster::front::RemoteMetrics::registered(&metrics);
    let remote = cohort_cluster::front::RemoteEngine::start(&cfg, lanes, remote_metrics)?;
    tracing::info!(
        cluster = url,
        services = all.len(),
        "front end: every service forwarded to the cluster's nodes"
    );
    Ok(EngineSide {
        registry,
        metrics,
        ingresses: wiring.ingresses,
        inline: None,
        engines: vec![Running::Remote(remote)],
    })
}
