//! The server's configuration, resolved once (issue 81): [`ServerConfig::resolve`] takes the
//! command line's [`ServeArgs`] (flags and config file already merged, `config_file.rs`),
//! validates it, and derives everything the server runs with: each service's plan (engine and
//! knobs, `plan.rs`), the io threads and cpu workers (`threads.rs`), the listeners' addresses
//! and limits (`NetConfig`), and the cluster, node and collections parts apart. The server's
//! functions take this (or the part they need), never the flags; `--check-config` prints it,
//! every limit in one table with why it has its value ([`ServerConfig::limits`]).

use crate::args::{ServeArgs, UdpIoArg};
use crate::engine_config::EngineConfig;
use crate::plan::{self, ServicePlan};
use crate::threads::Threads;
use anyhow::{Context as _, Result};
use cohort_cluster::membership::EtcdAccess;
use cohort_net::NetConfig;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Descriptors kept for the server's own files (index, rings, eventfds, GPU driver) when
/// `--max-connections` is derived from the descriptor limit.
const FDS_KEPT: usize = 256;

/// Everything a server runs with, typed and derived once.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The services and their engines: plans, threads, the server-wide engine defaults.
    pub serve: ServeConfig,
    /// The client listeners (front-end side): addresses, io threads, limits, timeouts, TLS.
    pub net: NetConfig,
    /// Why the derived network limits have their values (`--check-config`).
    pub net_why: NetWhy,
    /// `--cluster`: the etcd this server (front end or node) reaches, and the link's settings.
    pub cluster: Option<ClusterConfig>,
    /// `--node-listen`: this server is a cluster node (it starts only with `cluster`).
    pub node: Option<NodeConfig>,
    /// `--data-dir`: the live collections served over HTTP and gRPC.
    pub collections: Option<CollectionsConfig>,
    /// `--auth-keys`: the API keys file (read at start, reloaded on SIGHUP).
    pub auth_keys: Option<PathBuf>,
}

/// The engine side: which engine runs each service with what knobs, and the threads.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// `--service` as given (the start line names it).
    pub services: String,
    /// One plan per service, in `--service` order.
    pub plans: Vec<ServicePlan>,
    /// The server-wide engine knobs (the flags): every service's defaults.
    pub defaults: EngineConfig,
    /// The io threads and the default cpu workers, and why.
    pub threads: Threads,
    /// The cores the server's threads are sized for (`--cpus`, else the process's affinity).
    pub cores: usize,
    /// The machine's cores as the process sees them (what a worker's spin is chosen against).
    pub machine_cores: usize,
    /// `--worker-spin-us` where given.
    pub worker_spin_us: Option<u64>,
    /// `--fair-queue`.
    pub fair_queue: bool,
    /// `--sched-slice-us` (checked: 100 to 100000).
    pub sched_slice_us: Option<u64>,
}

/// Why the network limits that are derived have their values.
#[derive(Debug, Clone, Default)]
pub struct NetWhy {
    pub max_connections: String,
    pub max_buffered_bytes: String,
    pub io_spin: String,
}

/// A cluster role's link to etcd and to the other side.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// etcd's client endpoints (`etcd://HOST:PORT[,...]`).
    pub etcd: String,
    pub access: EtcdAccess,
    /// The shared secret's file (loaded at start: `cluster_key`).
    pub key: Option<PathBuf>,
    pub busy_poll: bool,
    /// Request batches written one-sided into polling nodes' rings (not `--cluster-no-rings`).
    pub rings: bool,
    /// A front end's forwarding threads (1 to 64).
    pub lanes: usize,
    /// Requests in flight to one node at most (above 0).
    pub window: u32,
}

/// A cluster node's own settings.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Where front ends reach it (a specific address).
    pub listen: SocketAddr,
    pub id: Option<String>,
    /// The lease its registration is under.
    pub lease: Duration,
}

/// The live collections of `--data-dir`.
#[derive(Debug, Clone)]
pub struct CollectionsConfig {
    pub dir: PathBuf,
    /// `--collections-on`: auto, gpu or cpu.
    pub on: String,
    /// The GPUs their searches may run on (`--gpus`).
    pub gpus: Vec<usize>,
}

impl ServerConfig {
    /// Validates `a` once and derives the server's configuration from it. Errors name the
    /// flag (or config key) at fault.
    pub fn resolve(a: &ServeArgs) -> Result<ServerConfig> {
        let defaults = engine_defaults(a)?;
        let cores = match &a.cpus {
            Some(c) if !c.0.is_empty() => c.0.len(),
            _ => machine_cores(),
        };
        let plans = plan::plans(
            &a.service,
            &defaults,
            &a.service_settings,
            &a.service_opt,
            cores,
        )?;
        let threads = crate::threads::for_plans(cores, a.io_threads, &plans);
        let (net, net_why) = net_config(a, threads.io_threads)?;
        let cluster = cluster_config(a)?;
        let collections = collections_config(a)?;
        let node = match &a.node_listen {
            None => None,
            Some(_) => {
                // (What a node needs past an address, a specific one and --cluster, is
                // checked as it starts: `--check-config` takes a node's flags alone.)
                let listen =
                    resolve_addr("node-listen", &a.node_listen)?.expect("a node has --node-listen");
                Some(NodeConfig {
                    listen,
                    id: a.node_id.clone(),
                    lease: Duration::from_secs(a.lease_secs),
                })
            }
        };
        Ok(ServerConfig {
            serve: ServeConfig {
                services: a.service.clone(),
                plans,
                defaults,
                threads,
                cores,
                machine_cores: machine_cores(),
                worker_spin_us: a.worker_spin_us,
                fair_queue: a.fair_queue,
                sched_slice_us: a.sched_slice_us,
            },
            net,
            net_why,
            cluster,
            node,
            collections,
            auth_keys: a.auth_keys.clone(),
        })
    }

    /// A cluster front end: every service forwarded to the nodes, no engine here.
    pub fn is_front_end(&self) -> bool {
        self.cluster.is_some() && self.node.is_none()
    }
}

impl ServeConfig {
    /// The cpu workers a service on the cpu engine (or hybrid's CPU side) runs: its own
    /// `workers` where given, else the server's chosen count.
    pub fn cpu_workers(&self, p: &ServicePlan) -> usize {
        if p.cfg.cpu.workers > 0 {
            return p.cfg.cpu.workers;
        }
        self.threads.workers.max(1)
    }

    /// How long `workers` idle cpu workers poll before parking (microseconds), and why:
    /// `--worker-spin-us` where given, else 50 when the workers and io threads have a core
    /// each, else 0 (spinning on a shared core only steals it from the producer).
    pub fn worker_spin_us(&self, workers: usize) -> (u64, String) {
        if let Some(us) = self.worker_spin_us {
            return (us, "given (--worker-spin-us)".into());
        }
        let (io, cores) = (self.threads.io_threads, self.machine_cores);
        if workers + io < cores {
            (
                50,
                format!("{workers} workers and {io} io threads have a core each of {cores}"),
            )
        } else {
            (
                0,
                format!(
                    "{workers} workers and {io} io threads share {cores} cores: they park at once"
                ),
            )
        }
    }
}

/// The server-wide engine knobs (`--engine` and the engine flags): every service's defaults.
pub(crate) fn engine_defaults(a: &ServeArgs) -> Result<EngineConfig> {
    Ok(EngineConfig {
        engine: a.engine.parse().map_err(anyhow::Error::msg)?,
        admission: a.admission.clone(),
        cpu: a.cpu.clone(),
        gpu: a.gpu.clone(),
        persistent: a.persistent.clone(),
        hybrid: a.hybrid.clone(),
    })
}

/// The machine's cores as the process's affinity gives them.
fn machine_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// HOST:PORT -> the first address it resolves to.
fn resolve_addr(what: &str, a: &Option<String>) -> Result<Option<SocketAddr>> {
    let Some(a) = a else { return Ok(None) };
    let addr = a
        .to_socket_addrs()
        .with_context(|| format!("--{what} {a:?}: expected HOST:PORT"))?
        .next()
        .with_context(|| format!("--{what} {a:?} resolves to no address"))?;
    Ok(Some(addr))
}

/// The listeners' configuration, checked: addresses, limits, timeouts, quotas.
fn net_config(a: &ServeArgs, io_threads: usize) -> Result<(NetConfig, NetWhy)> {
    if let Some(us) = a.sched_slice_us {
        anyhow::ensure!(
            (100..=100_000).contains(&us),
            "--sched-slice-us {us}: the kernel takes 100 to 100000"
        );
    }
    anyhow::ensure!(
        a.udp.is_some()
            || a.tcp.is_some()
            || a.http.is_some()
            || a.grpc.is_some()
            || a.node_listen.is_some(),
        "no listener (give --udp, --tcp, --http or --grpc)"
    );
    anyhow::ensure!(a.node_window > 0, "--node-window must be above 0");
    anyhow::ensure!(
        (1..=64).contains(&a.cluster_lanes),
        "--cluster-lanes takes 1 to 64"
    );
    anyhow::ensure!(
        a.idle_timeout_ms > 0 && a.read_timeout_ms > 0,
        "--idle-timeout-ms and --read-timeout-ms must be above 0"
    );
    let fds = cohort_net::raise_fd_limit();
    let fit = fds.saturating_sub(FDS_KEPT).max(1);
    let (max_connections, connections_why) = match a.max_connections {
        Some(0) => anyhow::bail!("--max-connections must be at least 1"),
        Some(n) => {
            if n > fit {
                tracing::warn!(
                    max_connections = n,
                    fd_limit = fds,
                    "--max-connections is above what the descriptor limit leaves room \
                     for: clients past about {fit} are refused at the limit instead"
                );
                (
                    n,
                    format!("given; above the {fit} the descriptor limit ({fds}) leaves room for"),
                )
            } else {
                (n, "given (--max-connections)".to_string())
            }
        }
        None => (
            fit,
            format!("the descriptor limit ({fds}) less {FDS_KEPT} for the server's own files"),
        ),
    };
    let (max_buffered_bytes, buffered_why) = match a.max_buffered_bytes {
        Some(n) => (n, "given (--max-buffered-bytes)".to_string()),
        None => (
            cohort_net::default_buffered_bytes(),
            "an eighth of the machine's memory, between 64M and 4G".to_string(),
        ),
    };
    let limits = cohort_net::Limits {
        max_connections,
        max_buffered_bytes,
        idle_timeout: Duration::from_millis(a.idle_timeout_ms),
        read_timeout: Duration::from_millis(a.read_timeout_ms),
        socket_buffer_bytes: a.socket_buffer_bytes,
    };
    anyhow::ensure!(
        a.client_rate >= 0.0 && a.client_rate.is_finite(),
        "--client-rate must be 0 (off) or a positive rate"
    );
    anyhow::ensure!(
        a.admission.max_deadline_ms > 0,
        "--max-deadline-ms must be above 0"
    );
    let (io_spin_us, io_spin_why) = match a.io_spin_us {
        Some(us) => (us, "given (--io-spin-us)".to_string()),
        None if io_threads == 1 => (50, "one io thread: it polls before sleeping".to_string()),
        None => (
            0,
            format!("{io_threads} io threads: each sleeps at once when idle"),
        ),
    };
    let net = NetConfig {
        limits,
        client_quota: cohort_net::ClientQuota {
            max_inflight: a.client_max_inflight,
            rate: a.client_rate,
        },
        max_timeout: Duration::from_millis(a.admission.max_deadline_ms),
        tls: a.tls_cert.clone().zip(a.tls_key.clone()),
        udp: resolve_addr("udp", &a.udp)?,
        tcp: resolve_addr("tcp", &a.tcp)?,
        http: resolve_addr("http", &a.http)?,
        grpc: resolve_addr("grpc", &a.grpc)?,
        admin: match &a.admin {
            Some(p) if p.parse::<u16>().is_ok() => Some(SocketAddr::from((
                [127, 0, 0, 1],
                p.parse::<u16>().expect("checked"),
            ))),
            admin => resolve_addr("admin", admin)?,
        },
        io_threads,
        cpus: a.cpus.clone().map(|c| c.0).unwrap_or_default(),
        drain_timeout: Duration::from_millis(a.drain_timeout_ms),
        default_timeout: Duration::from_micros(a.default_timeout_us.max(1)),
        io_spin: Duration::from_micros(io_spin_us),
        udp_io: match a.udp_io {
            UdpIoArg::Recvmmsg => cohort_net::UdpIo::Recvmmsg,
            UdpIoArg::Uring => cohort_net::UdpIo::Uring,
        },
        udp_gso: a.udp_gso,
        udp_spread: a.udp_spread,
        ..NetConfig::default()
    };
    let why = NetWhy {
        max_connections: connections_why,
        max_buffered_bytes: buffered_why,
        io_spin: io_spin_why,
    };
    Ok((net, why))
}

/// The cluster flags, checked: the key and etcd's access need `--cluster` (the files are
/// read at start and by `check`).
fn cluster_config(a: &ServeArgs) -> Result<Option<ClusterConfig>> {
    if a.cluster_key.is_some() {
        anyhow::ensure!(
            a.cluster.is_some(),
            "--cluster-key seals the messages between front ends and nodes: it needs --cluster"
        );
    }
    if a.etcd_user.is_some() || a.etcd_ca.is_some() || a.etcd_cert.is_some() {
        anyhow::ensure!(
            a.cluster.is_some(),
            "--etcd-user, --etcd-ca and --etcd-cert are how a cluster role reaches etcd: they need --cluster",
        );
    }
    Ok(a.cluster.as_ref().map(|url| ClusterConfig {
        etcd: url.clone(),
        access: EtcdAccess {
            user: a.etcd_user.clone(),
            password_file: a.etcd_password_file.clone(),
            ca: a.etcd_ca.clone(),
            cert: a.etcd_cert.clone(),
            key: a.etcd_key.clone(),
        },
        key: a.cluster_key.clone(),
        busy_poll: a.cluster_busy_poll,
        rings: !a.cluster_no_rings,
        lanes: a.cluster_lanes,
        window: a.node_window,
    }))
}

/// What `--data-dir` needs of the other settings (no store is opened).
fn collections_config(a: &ServeArgs) -> Result<Option<CollectionsConfig>> {
    let Some(dir) = &a.data_dir else {
        return Ok(None);
    };
    // REST and gRPC each carry every operation (create and drop too); frames do not.
    anyhow::ensure!(
        a.http.is_some() || a.grpc.is_some(),
        "--data-dir serves the collections over HTTP or gRPC: give --http or --grpc too"
    );
    anyhow::ensure!(
        a.cluster.is_none() && a.node_listen.is_none(),
        "--data-dir: collections are not served by cluster front ends or nodes yet"
    );
    anyhow::ensure!(
        !dir.exists() || dir.is_dir(),
        "--data-dir {}: not a directory",
        dir.display()
    );
    Ok(Some(CollectionsConfig {
        dir: dir.clone(),
        on: a.collections_on.clone(),
        gpus: a.gpu.gpus.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_file::apply_text;
    use crate::engine_config::EngineKind;

    fn resolve(a: &ServeArgs) -> ServerConfig {
        ServerConfig::resolve(a).unwrap()
    }

    fn error(a: &ServeArgs) -> String {
        format!("{:#}", ServerConfig::resolve(a).unwrap_err())
    }

    #[test]
    fn defaults_resolve_to_the_declared_limits_once() {
        let c = resolve(&ServeArgs::loopback("echo"));
        assert_eq!(c.serve.plans.len(), 1);
        let p = &c.serve.plans[0];
        assert_eq!((p.name, p.cfg.engine), ("echo", EngineKind::Cpu));
        assert_eq!(
            p.cfg.admission.max_queue,
            cohort_engine::wiring::DEFAULT_MAX_QUEUE
        );
        // The threads are chosen once: the listeners run as many as the plans were sized for.
        assert_eq!(c.net.io_threads, c.serve.threads.io_threads);
        assert_eq!(c.net.limits.idle_timeout, Duration::from_secs(60));
        assert_eq!(c.net.limits.read_timeout, Duration::from_secs(10));
        assert_eq!(c.net.drain_timeout, Duration::from_secs(10));
        assert_eq!(c.net.max_timeout, Duration::from_secs(60));
        assert_eq!(
            c.net.limits.socket_buffer_bytes,
            cohort_net::DEFAULT_SOCKET_BUFFER
        );
        assert_eq!(
            c.net.limits.max_buffered_bytes,
            cohort_net::default_buffered_bytes()
        );
        assert!(c
            .net
            .udp
            .is_some_and(|a| a.ip().is_loopback() && a.port() == 0));
        assert!(c.net.grpc.is_none() && c.net.admin.is_none());
        let spin = if c.net.io_threads == 1 { 50 } else { 0 };
        assert_eq!(c.net.io_spin, Duration::from_micros(spin));
        assert!(c.cluster.is_none() && c.node.is_none() && c.collections.is_none());
        assert!(!c.is_front_end());
        assert!(c.net_why.max_connections.contains("descriptor limit"));
        assert!(c.net_why.max_buffered_bytes.contains("an eighth"));
    }

    #[test]
    fn a_config_file_value_overrides_a_default() {
        let mut a = ServeArgs::loopback("echo");
        let file =
            "idle_timeout_ms = 5000\nmax_connections = 77\n[services.echo]\nmax_queue = 64\n";
        apply_text(&mut a, file, &|_| false).unwrap();
        let c = resolve(&a);
        assert_eq!(c.net.limits.idle_timeout, Duration::from_secs(5));
        assert_eq!(c.net.limits.max_connections, 77);
        assert_eq!(c.net_why.max_connections, "given (--max-connections)");
        assert_eq!(c.serve.plans[0].cfg.admission.max_queue, 64);
    }

    #[test]
    fn a_flag_overrides_the_file() {
        // `--idle-timeout-ms 7000 --io-threads 3` on the command line, the file saying
        // otherwise: the flags win, the file's other keys still apply.
        let mut a = ServeArgs::loopback("echo");
        a.idle_timeout_ms = 7000;
        a.io_threads = 3;
        let file = "idle_timeout_ms = 5000\nio_threads = 1\nread_timeout_ms = 2000\n";
        let flags = ["idle_timeout_ms", "io_threads"];
        apply_text(&mut a, file, &|id| flags.contains(&id)).unwrap();
        let c = resolve(&a);
        assert_eq!(c.net.limits.idle_timeout, Duration::from_secs(7));
        assert_eq!(c.net.limits.read_timeout, Duration::from_secs(2));
        assert_eq!((c.net.io_threads, c.serve.threads.io_threads), (3, 3));
        assert!(c.serve.threads.why.starts_with("--io-threads 3 (given)"));
        assert_eq!(c.net.io_spin, Duration::ZERO, "{}", c.net_why.io_spin);
    }

    #[test]
    fn a_bad_setting_is_caught_at_resolve_with_a_clear_message() {
        let bad = |f: &dyn Fn(&mut ServeArgs)| {
            let mut a = ServeArgs::loopback("echo");
            f(&mut a);
            error(&a)
        };
        assert_eq!(
            bad(&|a| a.max_connections = Some(0)),
            "--max-connections must be at least 1"
        );
        assert_eq!(
            bad(&|a| {
                a.udp = None;
                a.tcp = None;
                a.http = None;
            }),
            "no listener (give --udp, --tcp, --http or --grpc)"
        );
        assert!(bad(&|a| a.service = "echo,nope".into()).starts_with("unknown service \"nope\""));
        assert!(bad(&|a| a.cluster_key = Some("k".into())).contains("it needs --cluster"));
        assert!(bad(&|a| {
            a.http = None;
            a.data_dir = Some("/nonexistent".into());
        })
        .contains("--data-dir serves the collections over HTTP or gRPC"));
        assert!(bad(&|a| a.node_listen = Some("nowhere".into())).contains("--node-listen"));
        // A file's bad value: named with its key, before anything resolves.
        let mut a = ServeArgs::loopback("echo");
        let e = apply_text(&mut a, "idle_timeout_ms = \"soon\"\n", &|_| false).unwrap_err();
        assert!(
            format!("{e:#}").contains("key \"idle_timeout_ms\""),
            "{e:#}"
        );
        a.idle_timeout_ms = 0;
        assert_eq!(
            error(&a),
            "--idle-timeout-ms and --read-timeout-ms must be above 0"
        );
    }

    #[test]
    fn the_roles_and_their_parts_come_apart() {
        let mut a = ServeArgs::loopback("echo");
        a.cluster = Some("etcd://127.0.0.1:2379".into());
        a.cluster_lanes = 2;
        let front = resolve(&a);
        assert!(front.is_front_end());
        let c = front.cluster.as_ref().unwrap();
        assert_eq!((c.lanes, c.window, c.rings), (2, 4096, true));
        a.node_listen = Some("127.0.0.1:7100".into());
        a.lease_secs = 5;
        let node = resolve(&a);
        assert!(!node.is_front_end());
        let n = node.node.as_ref().unwrap();
        assert_eq!(n.listen.port(), 7100);
        assert_eq!(n.lease, Duration::from_secs(5));
        let table = front.limits_table();
        assert!(table.contains("cluster lanes") && table.contains("node window"));
        assert!(!node.limits_table().contains("cluster lanes"));
    }

    #[test]
    fn the_limits_table_has_every_limit_and_each_service_says_why() {
        let mut a = ServeArgs::loopback("echo,spin:inline");
        a.cpu.workers = 3;
        a.io_threads = 2;
        a.worker_spin_us = Some(7);
        let c = resolve(&a);
        let table = c.limits_table();
        for name in [
            "io threads",
            "max connections",
            "max buffered bytes",
            "socket buffer bytes",
            "idle timeout",
            "read timeout",
            "drain timeout",
            "default timeout",
            "max deadline",
            "client max inflight",
            "client rate",
            "io spin",
            "echo engine",
            "echo max queue",
            "echo cpu workers",
            "echo worker spin",
            "spin engine",
            "spin max queue",
        ] {
            assert!(table.contains(&format!("#   {name} ")), "{name}:\n{table}");
        }
        let row = |name: &str| c.limits().into_iter().find(|l| l.name == name).unwrap();
        assert_eq!(row("echo cpu workers").value, "3");
        assert_eq!(row("echo cpu workers").why, "its workers (given)");
        assert_eq!(row("echo worker spin").value, "7 us");
        assert_eq!(row("spin engine").value, "inline");
        assert!(row("io threads").why.contains("--io-threads 2 (given)"));
        assert!(table.lines().all(|l| l.starts_with('#')));
        assert!(c.limits().iter().all(|l| !l.why.is_empty()));
    }
}
