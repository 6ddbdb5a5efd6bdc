//! `cohort serve`: wires services -> engine -> dispatcher -> listeners, then waits for a signal.

use crate::util::parse_cpus;
use anyhow::{bail, Context as _, Result};
use clap::Args;
use cohort_engine::{CpuEngine, CpuEngineConfig, DispatchPolicy, Dispatcher, Metrics, Registry};
use cohort_gpu::engine::{GpuEngine, GpuEngineConfig, Mode};
use cohort_gpu::knn::{GpuIvf, Precision};
use cohort_net::{Context, NetConfig, Server};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// TOML file of serve settings, keys named as these flags (io_threads = 2, ...); flags
    /// given on the command line override it.
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Check the configuration (flags, config file, index file) and exit without serving.
    #[arg(long)]
    pub check_config: bool,
    /// Services to serve, comma-separated: echo, spin, knn.
    #[arg(long, default_value = "echo")]
    pub service: String,
    /// IVF index file for the knn service (`cohort index build`).
    #[arg(long)]
    pub index: Option<std::path::PathBuf>,
    /// Serve the index from its memory-mapped file instead of a resident (huge-page) copy:
    /// less memory at start, slower scans.
    #[arg(long)]
    pub index_mapped: bool,
    /// Engine: cpu, gpu-direct or gpu-cohort (the gpu engines serve knn).
    #[arg(long, default_value = "cpu")]
    pub engine: String,
    /// GPUs for the gpu engines (one control thread and a full index copy each).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub gpus: Vec<usize>,
    /// gpu-cohort: a cohort closes at this many requests...
    #[arg(long, default_value_t = 256)]
    pub max_cohort: usize,
    /// ...or when its oldest request has waited this long.
    #[arg(long, default_value_t = 200)]
    pub cohort_timeout_us: u64,
    /// gpu engines: element type of the vectors on the GPU (f32, f16, or u8 for integral data
    /// in 0..=255 such as SIFT).
    #[arg(long, default_value = "f32")]
    pub gpu_precision: Precision,
    /// gpu engines: streams, i.e. launches in flight (default 8 direct, 3 cohort).
    #[arg(long)]
    pub streams: Option<usize>,
    /// gpu engines: threads per GPU that encode and send answers (0: the control thread).
    #[arg(long, default_value_t = 2)]
    pub gpu_responders: usize,
    /// gpu-cohort: replay a CUDA graph per cohort-size bucket instead of launching each copy
    /// and kernel (measured within +-3% of launching on the H200: off by default).
    #[arg(long)]
    pub cohort_graphs: bool,
    #[arg(long)]
    pub udp: Option<SocketAddr>,
    #[arg(long)]
    pub tcp: Option<SocketAddr>,
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// Network threads: UDP io threads (one socket each) and TCP/HTTP workers.
    #[arg(long, default_value_t = 1)]
    pub io_threads: usize,
    /// Pin network threads to these cores, e.g. 0-1,4.
    #[arg(long, value_parser = parse_cpus)]
    pub cpus: Option<Vec<usize>>,
    /// cpu engine worker threads (0 = cores left after the io threads, at least 1).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Pin cpu engine workers to these cores.
    #[arg(long, value_parser = parse_cpus)]
    pub worker_cpus: Option<Vec<usize>>,
    /// How long an idle cpu worker polls before parking, in microseconds (default: 50 when
    /// the workers and io threads have a core each, else 0: spinning on a shared core only
    /// steals it from the thread that would produce the work).
    #[arg(long)]
    pub worker_spin_us: Option<u64>,
    /// Requests queued in the engine before new ones get OVERLOADED.
    #[arg(long, default_value_t = 16_384)]
    pub max_queue: usize,
    /// Deadline for requests that carry none (their header says 0).
    #[arg(long, default_value_t = 1_000_000)]
    pub default_timeout_us: u64,
    /// Dispatch policy: round-robin, least-loaded, key-hash.
    #[arg(long, default_value = "least-loaded")]
    pub dispatch: DispatchPolicy,
    /// How long shutdown waits for in-flight answers.
    #[arg(long, default_value_t = 10_000)]
    pub drain_timeout_ms: u64,
}

impl ServeArgs {
    /// Loopback defaults for in-process servers (demo, tests).
    pub fn loopback(service: &str) -> ServeArgs {
        ServeArgs {
            config: None,
            check_config: false,
            service: service.into(),
            index: None,
            index_mapped: false,
            engine: "cpu".into(),
            gpus: vec![0],
            max_cohort: 256,
            cohort_timeout_us: 200,
            streams: None,
            gpu_responders: 2,
            cohort_graphs: false,
            gpu_precision: Precision::F32,
            udp: Some("127.0.0.1:0".parse().expect("literal")),
            tcp: Some("127.0.0.1:0".parse().expect("literal")),
            http: Some("127.0.0.1:0".parse().expect("literal")),
            io_threads: 1,
            cpus: None,
            workers: 0,
            worker_cpus: None,
            worker_spin_us: None,
            max_queue: 16_384,
            default_timeout_us: 1_000_000,
            dispatch: DispatchPolicy::LeastLoaded,
            drain_timeout_ms: 10_000,
        }
    }
}

enum Engines {
    Cpu(CpuEngine),
    Gpu(Vec<GpuEngine>),
}

impl Engines {
    fn lanes(&self) -> Vec<Arc<dyn cohort_engine::Lane>> {
        match self {
            Engines::Cpu(e) => e.lanes(),
            Engines::Gpu(v) => v.iter().flat_map(|e| e.lanes()).collect(),
        }
    }
    fn shutdown(self) {
        match self {
            Engines::Cpu(e) => e.shutdown(),
            Engines::Gpu(v) => v.into_iter().for_each(GpuEngine::shutdown),
        }
    }
}

/// A running server: listeners plus engines.
pub struct Stack {
    pub server: Server,
    engines: Engines,
}

impl Stack {
    pub fn shutdown(self) {
        self.server.shutdown();
        self.engines.shutdown();
    }
}

/// The GPU engines: one per listed GPU, each with the whole index.
fn start_gpu(a: &ServeArgs, reg: &Registry, metrics: &Arc<Metrics>) -> Result<Vec<GpuEngine>> {
    let devs = cohort_gpu::probe()?;
    anyhow::ensure!(
        reg.get(cohort_proto::service_id::KNN).is_some(),
        "the gpu engines serve knn: give --service knn --index PATH"
    );
    let Some(path) = &a.index else {
        bail!("--index is required")
    };
    let index = cohort_knn::IvfIndex::load(path)?;
    let mode = if a.engine == "gpu-direct" {
        Mode::Direct
    } else {
        Mode::Cohort
    };
    let cfg = GpuEngineConfig {
        mode,
        max_cohort: a.max_cohort.max(1),
        cohort_timeout: Duration::from_micros(a.cohort_timeout_us),
        streams: a
            .streams
            .unwrap_or(if mode == Mode::Direct { 8 } else { 3 }),
        max_queue: a.max_queue,
        responders: a.gpu_responders,
        graphs: a.cohort_graphs,
    };
    let mut out = Vec::new();
    for &g in &a.gpus {
        let dev = devs
            .iter()
            .find(|d| d.ordinal == g)
            .with_context(|| format!("no GPU {g} ({} found)", devs.len()))?;
        tracing::info!(gpu = g, name = %dev.name, sms = dev.sms, mem = dev.total_mem, pci = %dev.pci_bus_id,
            numa = ?dev.numa_node, "gpu");
        let ivf = GpuIvf::upload(dev, &index, a.gpu_precision)?;
        out.push(GpuEngine::start(ivf, cfg.clone(), metrics.clone())?);
    }
    Ok(out)
}

fn registry(a: &ServeArgs) -> Result<Registry> {
    let mut reg = Registry::new();
    for name in a
        .service
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        match name {
            "echo" => reg.add(Arc::new(cohort_services::echo::Echo)),
            "spin" => reg.add(Arc::new(cohort_services::spin::Spin)),
            "knn" => {
                let Some(path) = &a.index else {
                    bail!("--service knn needs --index PATH")
                };
                // The gpu engines validate requests themselves and upload their own copy:
                // a mapped index here costs only the pages actually read (header, centroids).
                let index = if a.index_mapped || a.engine.starts_with("gpu") {
                    cohort_knn::IvfIndex::load(path)?
                } else {
                    cohort_knn::IvfIndex::load_resident(path)?
                };
                tracing::info!(path = %path.display(), n = index.n, dim = index.dim, nlist = index.nlist,
                    default_nprobe = index.default_nprobe, "index loaded");
                reg.add(Arc::new(cohort_services::knn::Knn {
                    index: Arc::new(index),
                }));
            }
            other => bail!("unknown service {other:?} (available: echo, spin, knn)"),
        }
    }
    anyhow::ensure!(!reg.names().is_empty(), "--service names no service");
    Ok(reg)
}

/// Everything that can be checked without binding sockets or starting threads.
fn validate(a: &ServeArgs) -> Result<Registry> {
    if !["cpu", "gpu-direct", "gpu-cohort"].contains(&a.engine.as_str()) {
        bail!(
            "unknown engine {:?} (available: cpu, gpu-direct, gpu-cohort)",
            a.engine
        );
    }
    anyhow::ensure!(a.io_threads >= 1, "--io-threads must be at least 1");
    anyhow::ensure!(a.max_queue >= 1, "--max-queue must be at least 1");
    anyhow::ensure!(
        a.udp.is_some() || a.tcp.is_some() || a.http.is_some(),
        "no listener (give --udp, --tcp or --http)"
    );
    registry(a)
}

/// The engine side of a server, without listeners (servers and the engine benchmark).
pub struct EngineSide {
    pub registry: Registry,
    pub metrics: Arc<Metrics>,
    pub dispatcher: Arc<Dispatcher>,
    engines: Engines,
}

impl EngineSide {
    pub fn shutdown(self) {
        self.engines.shutdown();
    }
}

pub fn start_engines(a: &ServeArgs) -> Result<EngineSide> {
    let reg = validate(a)?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let workers = if a.workers > 0 {
        a.workers
    } else {
        cores.saturating_sub(a.io_threads).max(1)
    };
    let ecfg = CpuEngineConfig {
        workers,
        max_queue: a.max_queue.max(1),
        cpus: a.worker_cpus.clone().unwrap_or_default(),
        spin: Duration::from_micros(a.worker_spin_us.unwrap_or(
            if workers + a.io_threads < cores {
                50
            } else {
                0
            },
        )),
    };
    let names = reg.names_by_id();
    let metrics = Arc::new(Metrics::new(&a.engine, names));
    let engines = if a.engine == "cpu" {
        Engines::Cpu(CpuEngine::start(&ecfg, reg.clone(), metrics.clone()))
    } else {
        Engines::Gpu(start_gpu(a, &reg, &metrics)?)
    };
    let dispatcher = Arc::new(Dispatcher::new(engines.lanes(), a.dispatch));
    Ok(EngineSide {
        registry: reg,
        metrics,
        dispatcher,
        engines,
    })
}

pub fn start(a: &ServeArgs) -> Result<Stack> {
    let EngineSide {
        registry: reg,
        metrics,
        dispatcher,
        engines,
    } = start_engines(a)?;
    let ctx = Arc::new(Context {
        registry: reg,
        dispatcher: dispatcher.clone(),
        max_payload: cohort_proto::MAX_PAYLOAD,
        default_timeout: Duration::from_micros(a.default_timeout_us.max(1)),
        metrics: metrics.clone(),
        shutting_down: AtomicBool::new(false),
    });
    let ncfg = NetConfig {
        udp: a.udp,
        tcp: a.tcp,
        http: a.http,
        io_threads: a.io_threads,
        cpus: a.cpus.clone().unwrap_or_default(),
        drain_timeout: Duration::from_millis(a.drain_timeout_ms),
        ..NetConfig::default()
    };
    let render = Arc::new(move || {
        metrics.set_queue_depth(dispatcher.queued());
        metrics.encode()
    });
    let server = match Server::start(&ncfg, ctx, render) {
        Ok(s) => s,
        Err(e) => {
            engines.shutdown();
            return Err(e);
        }
    };
    tracing::info!(engine = %a.engine, io_threads = a.io_threads, services = %a.service,
        max_queue = a.max_queue, dispatch = ?a.dispatch, "server started");
    Ok(Stack { server, engines })
}

pub fn run(a: ServeArgs) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    // Register before announcing readiness so an early signal is never missed.
    if a.check_config {
        validate(&a)?;
        println!("configuration ok: {a:#?}");
        return Ok(());
    }
    tracing::info!(config = ?a, "starting");
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let stack = start(&a)?;
    println!("{}", stack.server.listening_line());
    use std::io::Write;
    std::io::stdout().flush()?;
    if let Some(sig) = signals.forever().next() {
        tracing::info!(signal = sig, "shutting down");
    }
    stack.shutdown();
    tracing::info!("stopped");
    Ok(())
}
