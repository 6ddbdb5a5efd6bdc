//! The server behind `cohort serve`: the command line (`args.rs`) resolves once into a typed
//! [`ServerConfig`] (`server_config.rs`: each service's plan from `plan.rs`, with each engine
//! kind's typed knobs in `engine_config.rs`, the threads, the listeners and their limits);
//! from that the server wires the rings between the listeners and the engines, starts the
//! engines (`engines.rs`), then the listeners, and waits for a signal. The benchmarks start
//! it in process through [`start`].

mod args;
pub mod collections;
pub mod config_file;
pub mod engine_config;
mod engines;
pub mod gpu_args;
pub mod limits_table;
pub mod plan;
mod resolved;
mod serve_serde;
pub mod server_config;
mod slice;
pub mod threads;
pub mod util;

use anyhow::{Context as _, Result};
use cohort_net::{Server, Shared};
use std::time::Duration;

pub use args::{ServeArgs, UdpIoArg};
pub use engine_config::{AdmissionArgs, CpuEngineArgs, HybridEngineArgs, PersistentEngineArgs};
pub use engines::{start_engines, EngineSide};
pub use gpu_args::GpuEngineArgs;
pub use limits_table::Limit;
pub use server_config::{ClusterConfig, NodeConfig, ServeConfig, ServerConfig};

/// A running server: listeners plus engines.
pub struct Stack {
    pub server: Server,
    engines: EngineSide,
    /// A cluster node's registration and UCX ingress (`cohort node`).
    pub node: Option<ClusterNode>,
    /// The API keys in force (reloaded on SIGHUP).
    pub auth: Option<std::sync::Arc<cohort_net::Auth>>,
}

/// A node's side of the cluster: leaves etcd first (front ends stop routing to it), then
/// answers what front ends sent it, then the engines stop with the rest of the stack.
pub struct ClusterNode {
    pub registration: cohort_cluster::membership::Registration,
    pub ingress: cohort_cluster::node::NodeIngress,
}

impl Stack {
    pub fn shutdown(self) {
        if let Some(n) = self.node {
            drop(n.registration);
            // Front ends learn of the revoked lease through their watch (milliseconds):
            // requests they sent meanwhile are still served before the ingress stops.
            std::thread::sleep(Duration::from_millis(300));
            n.ingress.stop();
        }
        self.server.shutdown();
        self.engines.shutdown();
    }
}

/// Starts the server `cfg` describes: the engines, then the listeners (and a node's ingress
/// and registration).
pub fn start(cfg: &ServerConfig) -> Result<Stack> {
    let mut ncfg = cfg.net.clone();
    let threads = &cfg.serve.threads;
    cohort_net::check_ports(&ncfg)?;
    let plans = &cfg.serve.plans;
    // A GPU engine on a machine without the GPU is refused now, not after the index and the
    // collections have loaded (minutes for a large index) only for the engine to fail. (A
    // front end runs no engine here: its nodes own the GPUs.)
    if !cfg.is_front_end() {
        check_gpus(plans)?;
    }
    // Before the engines: a collection that cannot be read back whole stops the start here.
    let routes = collections::open(cfg.collections.as_ref())?;
    // A node takes one ingress more than its listeners: the front ends' (UCX).
    let node_ingresses = usize::from(cfg.node.is_some());
    let mut side = engines::start_engines(cfg, Server::ingresses(&ncfg) + node_ingresses)?;
    // Services that cut deadlines shorter (or longer) than the server's --max-deadline-ms.
    ncfg.service_max_timeout = plans
        .iter()
        .filter(|p| p.cfg.admission.max_deadline_ms != cfg.serve.defaults.admission.max_deadline_ms)
        .filter_map(|p| {
            let id = side.registry.by_name(p.name)?.id();
            Some((id, Duration::from_millis(p.cfg.admission.max_deadline_ms)))
        })
        .collect();
    let auth = match load_keys(cfg.auth_keys.as_deref(), &side.registry) {
        Ok(auth) => auth,
        Err(e) => {
            side.shutdown();
            return Err(e);
        }
    };
    let shared = Shared {
        registry: side.registry.clone(),
        metrics: side.metrics.clone(),
        max_payload: cohort_proto::MAX_PAYLOAD,
        inline: side.inline.clone(),
        auth: auth.clone(),
        routes,
    };
    let metrics = side.metrics.clone();
    // GPU board power, utilization and energy are read when /metrics is, not on a timer of
    // their own.
    let power = cohort_power::GpuPower::open()
        .map(|p| std::sync::Mutex::new(cohort_power::EnergySince::new(p)));
    if let Err(why) = &power {
        // A machine without NVIDIA's driver has nothing to report; not worth a line at info.
        tracing::debug!(%why, "no GPU power metrics");
    }
    let render = std::sync::Arc::new(move || {
        if let Ok(p) = &power {
            for (board, joules) in p.lock().expect("power lock").read() {
                metrics.record_gpu_board(&cohort_engine::metrics::GpuBoardReading {
                    gpu: board.index,
                    uuid: board.uuid,
                    watts: board.power_w,
                    utilization: board.utilization,
                    joules_since_last: joules,
                });
            }
        }
        metrics.encode()
    });
    let mut ingresses = std::mem::take(&mut side.ingresses);
    let node_ends = (node_ingresses > 0).then(|| ingresses.pop().expect("the node's ingress"));
    let server = match Server::start(&ncfg, shared, ingresses, render) {
        Ok(s) => s,
        Err(e) => {
            side.shutdown();
            return Err(e);
        }
    };
    let node = match node_ends
        .map(|ends| start_node(cfg, &side, ends))
        .transpose()
    {
        Ok(n) => n,
        Err(e) => {
            server.shutdown();
            side.shutdown();
            return Err(e);
        }
    };
    tracing::info!(io_threads = threads.io_threads, cpu_workers = threads.workers,
        why = %threads.why, services = %cfg.serve.services,
        dispatch = %cfg.serve.defaults.admission.dispatch, "server started");
    if let Some(k) = &auth {
        tracing::info!(keys = k.key_count(), "API keys required");
    }
    Ok(Stack {
        server,
        engines: side,
        node,
        auth,
    })
}

/// `cohort node`: the UCX listener over the node's ingress, then the registration in etcd
/// (what it serves, where, with what window).
fn start_node(
    cfg: &ServerConfig,
    side: &engines::EngineSide,
    ends: cohort_engine::IngressEnds,
) -> Result<ClusterNode> {
    use cohort_cluster::membership::{Etcd, NodeInfo, Registration, ServiceAt};
    let node = cfg.node.as_ref().expect("a node has --node-listen");
    let listen = node.listen;
    anyhow::ensure!(
        !listen.ip().is_unspecified(),
        "--node-listen {listen}: give the address front ends reach this node at (it is registered as given)"
    );
    let cluster = cfg
        .cluster
        .as_ref()
        .context("--node-listen needs --cluster (the etcd the node registers in)")?;
    let plans = &cfg.serve.plans;
    let etcd = Etcd::open(&cluster.etcd, &cluster.access)?;
    let ingress = cohort_cluster::node::NodeIngress::start(
        node.listen,
        node.id.clone(),
        ends,
        side.metrics.clone(),
        cluster.busy_poll,
        cluster_key(cluster, true)?,
    )
    .context("the node's UCX listener")?;
    let info = NodeInfo {
        id: ingress.id.clone(),
        address: ingress.bound,
        services: plans
            .iter()
            .filter_map(|p| Some((p, side.registry.by_name(p.name)?.id())))
            .map(|(p, id)| {
                let split = cohort_services::catalog::entry(p.name).and_then(|e| e.split);
                let shard = match split {
                    Some(s) => (s.shard_of)(&p.settings)
                        .map_err(|e| anyhow::anyhow!("service {}: {e}", p.name))?,
                    None => None,
                };
                Ok(ServiceAt {
                    name: p.name.to_string(),
                    id,
                    engine: p.cfg.engine.name().to_string(),
                    shard,
                })
            })
            .collect::<Result<_>>()?,
        devices: plans
            .iter()
            .filter(|p| p.cfg.engine.is_gpu())
            .flat_map(|p| p.cfg.gpu.gpus.iter().map(|g| format!("gpu {g}")))
            .collect(),
        capacity: cluster.window,
        ucx_address: Some(cohort_cluster::membership::to_hex(&ingress.address)),
    };
    tracing::info!(id = %info.id, address = %info.address, "node: taking front ends' requests over UCX");
    let registration = Registration::start(etcd, info, node.lease);
    Ok(ClusterNode {
        registration,
        ingress,
    })
}

/// The cluster key a node or front end was given; a node without one says what that means.
pub(crate) fn cluster_key(
    c: &ClusterConfig,
    node: bool,
) -> Result<Option<cohort_cluster::link::ClusterKey>> {
    match &c.key {
        Some(path) => Ok(Some(cohort_cluster::link::ClusterKey::load(path)?)),
        None => {
            if node {
                tracing::warn!("node: no --cluster-key: any peer that reaches --node-listen can run requests here");
            }
            Ok(None)
        }
    }
}

/// Everything `serve` checks before it binds sockets or starts threads, past what
/// [`ServerConfig::resolve`] validated: the files the cluster roles and the services read,
/// the GPUs the GPU engines would open, the API keys and the TLS files.
pub fn check(cfg: &ServerConfig) -> Result<()> {
    if let Some(c) = &cfg.cluster {
        if let Some(path) = &c.key {
            cohort_cluster::link::ClusterKey::load(path)?;
        }
        let a = &c.access;
        if a.user.is_some() || a.ca.is_some() || a.cert.is_some() {
            cohort_cluster::membership::Etcd::open(&c.etcd, a)?;
        }
    }
    let plans = &cfg.serve.plans;
    if cfg.node.is_none() {
        refuse_shards(plans)?;
    }
    check_gpus(plans)?;
    let registry = engines::build_registry(plans)?;
    load_keys(cfg.auth_keys.as_deref(), &registry)?;
    if let Some((cert, key)) = &cfg.net.tls {
        cohort_net::check_tls(cert, key)?;
    }
    Ok(())
}

/// A shard of a service answers only from its part (knn: its lists): only a cluster node
/// serves one, for a front end that merges every shard's answer.
fn refuse_shards(plans: &[plan::ServicePlan]) -> Result<()> {
    for p in plans {
        let Some(split) = cohort_services::catalog::entry(p.name).and_then(|e| e.split) else {
            continue;
        };
        if let Some(s) = (split.shard_of)(&p.settings).map_err(anyhow::Error::msg)? {
            anyhow::bail!(
                "{}: shard {} of {} is served by `cohort node` (a front end merges the shards); \
                 `serve` answers from the whole service",
                p.name,
                s.shard,
                s.shards
            );
        }
    }
    Ok(())
}

/// The API keys file, its service names checked against what is served.
fn load_keys(
    path: Option<&std::path::Path>,
    registry: &cohort_engine::Registry,
) -> Result<Option<std::sync::Arc<cohort_net::Auth>>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let services = registry
        .names()
        .into_iter()
        .filter_map(|n| Some((n.to_string(), registry.by_name(n)?.id())))
        .collect();
    Ok(Some(std::sync::Arc::new(cohort_net::Auth::load(
        path, services,
    )?)))
}

/// The GPUs every GPU engine is planned on exist.
fn check_gpus(plans: &[plan::ServicePlan]) -> Result<()> {
    let Some(p) = plans.iter().find(|p| p.cfg.engine.is_gpu()) else {
        return Ok(());
    };
    let devices = cohort_gpu::probe().map_err(|e| {
        // (The error's own text begins "no CUDA device" too: say it once.)
        let why = match e {
            cohort_gpu::GpuError::NoDevice(why) => why,
            other => other.to_string(),
        };
        anyhow::anyhow!(
            "service {} runs on {}, but there is no CUDA device: {why}",
            p.name,
            p.cfg.engine.name()
        )
    })?;
    for p in plans.iter().filter(|p| p.cfg.engine.is_gpu()) {
        if let Some(g) = p.cfg.gpu.gpus.iter().find(|&&g| g >= devices.len()) {
            anyhow::bail!(
                "service {} runs on {} with GPU {g}, but this machine has {} (0..{})",
                p.name,
                p.cfg.engine.name(),
                devices.len(),
                devices.len()
            );
        }
    }
    Ok(())
}

/// `cohort serve --check-config`: what [`check`] checks, then the configuration as
/// resolved: the threads and why, every limit in one table, each service's engine and
/// choices (comment lines), and the settings as a config file that reads back through
/// `--config` (`a`, the command line they came from; `matches`, its parsed arguments, tell
/// the settings given from the defaults).
pub fn check_config(
    cfg: &ServerConfig,
    a: &ServeArgs,
    matches: Option<&clap::ArgMatches>,
) -> Result<String> {
    check(cfg)?;
    let plans = &cfg.serve.plans;
    let choices = plans
        .iter()
        .map(engines::service_choices)
        .collect::<Result<Vec<_>>>()?;
    let mut out = String::from("# configuration ok\n");
    let t = &cfg.serve.threads;
    out.push_str(&format!(
        "# threads: {} io threads, {} cpu workers per cpu-engine service: {}\n",
        t.io_threads, t.workers, t.why
    ));
    out.push_str(&cfg.limits_table());
    for (p, choices) in plans.iter().zip(choices) {
        out.push_str(&format!(
            "# service {}: engine {}\n",
            p.name,
            p.cfg.engine.name()
        ));
        for c in choices {
            out.push_str(&format!(
                "# service {}: {} {}: {}\n",
                p.name, c.setting, c.value, c.why
            ));
        }
    }
    out.push_str(&resolved::as_toml(a, matches, plans)?);
    Ok(out)
}

/// Serves what `cfg` describes until SIGINT or SIGTERM (SIGHUP reloads the API keys).
pub fn run(cfg: &ServerConfig) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    tracing::debug!(config = ?cfg, "starting");
    // Register before announcing readiness so an early signal is never missed.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let stack = start(cfg)?;
    if let Some(us) = cfg.serve.sched_slice_us {
        let threads = slice::apply(us)?;
        match slice::reported_ns() {
            Some(ns) => tracing::info!(threads, slice_ns = ns, "scheduler slice set"),
            None => tracing::info!(
                threads,
                "scheduler slice asked (the kernel does not report it)"
            ),
        }
    }
    match &stack.node {
        Some(n) => println!("{} node={}", stack.server.listening_line(), n.ingress.bound),
        None => println!("{}", stack.server.listening_line()),
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    for sig in signals.forever() {
        if sig != SIGHUP {
            tracing::info!(signal = sig, "shutting down");
            break;
        }
        match &stack.auth {
            Some(auth) => match auth.reload() {
                Ok(n) => tracing::info!(keys = n, "API keys reloaded"),
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "API keys not reloaded; the old keys stay in force")
                }
            },
            None => tracing::info!("SIGHUP: nothing to reload (no --auth-keys)"),
        }
    }
    stack.shutdown();
    tracing::info!("stopped");
    Ok(())
}
