//! The server behind `cohort serve`: plans each service's engine (`plan.rs`, with each engine
//! kind's typed knobs in `engine_config.rs`), wires the rings between the listeners and the
//! engines, starts the engines (`engines.rs`), then the listeners, and waits for a signal.
//! The benchmarks start it in process through [`start`].

pub mod collections;
pub mod config_file;
pub mod engine_config;
mod engines;
pub mod gpu_args;
pub mod plan;
mod resolved;
mod serve_serde;
mod slice;
pub mod threads;
pub mod util;

use crate::util::{parse_bytes, parse_bytes_or_zero, parse_cpu_list, CpuList};
use anyhow::{Context as _, Result};
use clap::Args;
use cohort_net::{NetConfig, Server, Shared};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

pub use engine_config::{AdmissionArgs, CpuEngineArgs, HybridEngineArgs, PersistentEngineArgs};
pub use engines::{start_engines, EngineSide};
pub use gpu_args::GpuEngineArgs;

/// Every serve setting, typed: filled by clap from the flags and by serde from a config file
/// (`config_file::apply`: each key the command line leaves unset, read with its field's own
/// type), and written back by `--check-config`. Field names are the config keys; the flags
/// are the same names with `-`.
#[derive(Args, Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ServeArgs {
    /// TOML file of serve settings, keys named as these flags (io_threads = 2, ...), plus a
    /// `[services.NAME]` table per service (engine, gpus, max_cohort, ...); flags given on the
    /// command line override it.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<std::path::PathBuf>,
    /// Check the configuration (flags, config file, index file) and exit without serving.
    #[arg(long)]
    pub check_config: bool,
    /// Services to serve, comma-separated, each optionally with its engine:
    /// NAME[:ENGINE], e.g. knn:gpu-cohort,echo:cpu,spin:gpu-direct; each service's own flags
    /// are listed below, each help text starting with the service's name.
    #[arg(long, default_value = "echo")]
    pub service: String,
    /// Per-service setting NAME.KEY=VALUE (repeatable), e.g. knn.max_cohort=512: the service's
    /// own keys (the configuration check prints them with their values) and the engine keys,
    /// named as the engine flags (engine, max_queue, workers, gpus, max_cohort, stages,
    /// gpu_slots, latency_budget_us, ...), over those flags for this service. A config file's
    /// [services.NAME] tables take the same keys (below these in precedence).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_opt: Vec<String>,
    /// The services' settings given by their `[services.NAME]` tables and by the serve flags
    /// each service declares (service name -> key -> value): filled by `main` from the config
    /// file and those flags, read by `plan`.
    #[arg(skip)]
    #[serde(skip)]
    pub service_settings: std::collections::BTreeMap<String, cohort_services::config::Settings>,
    /// The settings a config file gave (their keys), for `--check-config` to tell them from
    /// defaults.
    #[arg(skip)]
    #[serde(skip)]
    pub from_file: std::collections::BTreeSet<String>,
    /// Engine of the services that name none: cpu, inline (the io thread runs the CPU
    /// function: no worker hand-off; for microsecond services), gpu-direct, gpu-cohort,
    /// gpu-persistent or hybrid.
    #[arg(long, default_value = "cpu")]
    pub engine: String,
    /// What every engine honours per service: admission, deadlines, lane choice.
    #[command(flatten)]
    #[serde(flatten)]
    pub admission: AdmissionArgs,
    /// The cpu engine's workers.
    #[command(flatten)]
    #[serde(flatten)]
    pub cpu: CpuEngineArgs,
    /// The GPU batching engines' settings.
    #[command(flatten)]
    #[serde(flatten)]
    pub gpu: GpuEngineArgs,
    /// gpu-persistent's settings.
    #[command(flatten)]
    #[serde(flatten)]
    pub persistent: PersistentEngineArgs,
    /// hybrid's settings.
    #[command(flatten)]
    #[serde(flatten)]
    pub hybrid: HybridEngineArgs,
    /// UDP listen address (HOST:PORT; host names are resolved).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<String>,
    /// TCP listen address (HOST:PORT; host names are resolved).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<String>,
    /// HTTP listen address (HOST:PORT; host names are resolved).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// gRPC listen address (HOST:PORT): the Open Inference Protocol's
    /// `inference.GRPCInferenceService`, as Triton's clients and perf_analyzer speak it.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<String>,
    /// etcd's client endpoints, `etcd://HOST:PORT[,HOST:PORT...]`. `cohort serve` with this is
    /// a front end: every service is forwarded to the nodes registered there (docs/cluster.md);
    /// `cohort node` registers there.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// `cohort node` only: where front ends reach this node (HOST:PORT, a specific address:
    /// it is registered as given; port 0 takes a free one).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_listen: Option<String>,
    /// `cohort node` only: the node's name in etcd (default: its listen address).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// `cohort node` only: the lease its registration is under, renewed every third of it;
    /// a node that stops renewing leaves the front ends' routing within this.
    #[arg(long, default_value_t = 3)]
    pub lease_secs: u64,
    /// Requests a front end has in flight to one node at most (a node registers this as its
    /// capacity; a front end takes the smaller of the node's and its own). With every node's
    /// window full a request is answered OVERLOADED.
    #[arg(long, default_value_t = 4096)]
    pub node_window: u32,
    /// Cluster roles: poll UCX without ever blocking (lowest latency, a core per thread, and
    /// UCX may use shared memory between processes of one machine); off: block on UCX's events
    /// when idle (TCP and other transports that raise events).
    #[arg(long)]
    pub cluster_busy_poll: bool,
    /// A polling front end writes request batches one-sided into each polling node's ring
    /// (UCX RMA, Lynx's design) unless this is given: then every batch goes as a message.
    #[arg(long)]
    pub cluster_no_rings: bool,
    /// A front end's forwarding threads (the remote engine's lanes): each takes requests from
    /// every io thread and has its own UCX connections (and window) to every node. Measured
    /// on a 4x H100 host: a lane forwards ~300 K requests a second, a query to a service
    /// split over N shards counting N.
    #[arg(long, default_value_t = 1)]
    pub cluster_lanes: usize,
    /// The cluster's shared secret (the same file on every node and front end: hex, as
    /// `openssl rand -hex 32` writes, or 16+ bytes): every message between front end and node
    /// sealed (HMAC-SHA256, numbered, timed) and the receiver refuses any other. Without it
    /// a node runs what any peer reaching --node-listen sends.
    #[arg(long, value_name = "FILE")]
    pub cluster_key: Option<std::path::PathBuf>,
    /// Cluster roles: the etcd user to authenticate as, its password in a file (give
    /// both). Without a user etcd must let anyone write /cohort/nodes/ (docs/cluster.md).
    #[arg(long, requires = "etcd_password_file")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_user: Option<String>,
    /// The file holding the password of --etcd-user (its first line; keep it readable by
    /// the service's user only).
    #[arg(long, value_name = "FILE", requires = "etcd_user")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_password_file: Option<std::path::PathBuf>,
    /// Cluster roles: speak TLS to etcd, trusting this CA (PEM) for its certificate.
    #[arg(long, value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_ca: Option<std::path::PathBuf>,
    /// Cluster roles: TLS client certificate (PEM) for etcd's client certificate auth;
    /// give its key with it.
    #[arg(long, value_name = "FILE", requires = "etcd_key")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --etcd-cert (TLS client auth).
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_key: Option<std::path::PathBuf>,
    /// Admin listen address (HOST:PORT, or a PORT alone for loopback): `GET /metrics` and
    /// `GET /healthz` there, and `/metrics` no longer on the HTTP port.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
    /// API keys file (TOML, `[[key]]` tables of id, secret, services): every request must
    /// then carry a key that allows its service - HTTP `Authorization: Bearer SECRET`, UDP/TCP
    /// frames signed with it (docs/protocol.md, Authentication). SIGHUP reloads the file.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_keys: Option<std::path::PathBuf>,
    /// Directory of the live vector collections (docs/collections.md): with it the HTTP
    /// listener serves /v1/collections (create, upsert, delete, get, filtered search), each
    /// write acknowledged once durable in this directory's logs. Needs --http.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<std::path::PathBuf>,
    /// Where the collections' searches run: auto (a GPU of --gpus when the machine has one,
    /// else the CPU), gpu (refused without one) or cpu. The collections' state, logs and
    /// writes are on the host either way; the device holds a copy kept current before each
    /// write is acknowledged (docs/collections.md).
    #[arg(long, default_value = "auto", value_parser = ["auto", "gpu", "cpu"])]
    #[serde(default = "default_collections_on")]
    pub collections_on: String,
    /// TLS certificate chain (PEM): the TCP, HTTP and gRPC listeners then speak TLS only (rustls;
    /// give --tls-key with it).
    #[arg(long, requires = "tls_key")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<std::path::PathBuf>,
    /// io threads: each owns one UDP socket and one TCP/HTTP shard (listeners, ingress).
    /// 0 (the default): chosen from the cores given (`--cpus`, else the process's affinity)
    /// and the GPU engines' host threads, `--check-config` says how (`threads.rs`).
    #[arg(long, default_value_t = 0)]
    pub io_threads: usize,
    /// Pin network threads to these cores, e.g. 0-1,4.
    #[arg(long, value_parser = parse_cpu_list)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<CpuList>,
    /// How long an idle cpu worker polls before parking, in microseconds (default: 50 when
    /// the workers and io threads have a core each, else 0: spinning on a shared core only
    /// steals it from the thread that would produce the work).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_spin_us: Option<u64>,
    /// Fair queueing between clients on the cpu engine: each worker runs next the request of
    /// the client (API key, else source address) that has had the least service time, among
    /// up to 1024 queued requests, so one client's flood does not delay another's requests.
    /// on|off. Off by default (arrival order): on the H200 it cost cpu-engine HTTP echo 20% of
    /// its rate on 8 cores (bench/README.md), not yet explained.
    #[arg(long, value_parser = parse_on_off, default_value = "off", action = clap::ArgAction::Set)]
    #[serde(with = "serve_serde::on_off")]
    pub fair_queue: bool,
    /// Deadline for requests that carry none (their header says 0).
    #[arg(long, default_value_t = 1_000_000)]
    pub default_timeout_us: u64,
    /// How long shutdown waits for in-flight answers (then: UNAVAILABLE); the whole shutdown
    /// ends within this plus about two seconds, whatever the clients do.
    #[arg(long, default_value_t = 10_000)]
    pub drain_timeout_ms: u64,
    /// TCP and HTTP connections open at once; past it a new client gets OVERLOADED (TCP) or
    /// 503 (HTTP) and is closed. Default: the process's file-descriptor limit (raised to its
    /// hard limit at start) less 256 for the server's own files.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Bytes of requests and answers all TCP/HTTP connections may hold together (e.g. 512M,
    /// 2G); while over it no connection is read. Default: an eighth of the machine's memory,
    /// between 64M and 4G.
    #[arg(long, value_parser = parse_bytes)]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "serve_serde::bytes::option"
    )]
    pub max_buffered_bytes: Option<usize>,
    /// Requests one client (source address, over UDP, TCP and HTTP together) may have in
    /// flight; past it OVERLOADED (HTTP 429). 0 = no cap. Clients behind one address (a
    /// proxy, a NAT) share it.
    #[arg(long, default_value_t = 0)]
    pub client_max_inflight: u32,
    /// Requests per second one client (source address) may send (a burst of a tenth of a
    /// second's worth at once); past it OVERLOADED (HTTP 429). 0 = no limit.
    #[arg(long, default_value_t = 0.0)]
    pub client_rate: f64,
    /// A TCP connection with no request started or in flight is closed after this (GOAWAY).
    #[arg(long, default_value_t = 60_000)]
    pub idle_timeout_ms: u64,
    /// A started TCP frame, an HTTP request head (and an idle HTTP keep-alive connection)
    /// and an HTTP body must each arrive within this (TIMEOUT frame or 408, then close); a
    /// client that takes no answer bytes for this long is closed.
    #[arg(long, default_value_t = 10_000)]
    pub read_timeout_ms: u64,
    /// Each TCP/HTTP connection's kernel send and receive buffer (e.g. 64K, 1M; the kernel
    /// doubles it): bounds the kernel memory a client that neither reads nor stops sending
    /// holds until it is closed. 0 = the kernel's autotuning (up to its tcp_rmem/tcp_wmem
    /// maximum, megabytes a connection; for high-latency clients).
    #[arg(long, value_parser = parse_bytes_or_zero, default_value_t = cohort_net::DEFAULT_SOCKET_BUFFER)]
    #[serde(with = "serve_serde::bytes")]
    pub socket_buffer_bytes: usize,
    /// How long an idle UDP io thread polls its socket and answer rings before sleeping, in
    /// microseconds (0: sleep at once). Default: 50 with one io thread, else 0 - measured on
    /// an H200 host: one io thread 2-3x the rate at p99 <= 1 ms; eight io threads beside eight
    /// workers on eight cores lost more than half (bench/README.md, "The host's UDP path").
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_spin_us: Option<u64>,
    /// How UDP io threads drive their sockets: recvmmsg (recvmmsg/sendmmsg batches, poll()
    /// to sleep) or uring (io_uring: one multishot receive into kernel-picked buffers,
    /// batched sendmsg, one io_uring_enter per wake-up). Where the kernel or a sandbox
    /// refuses io_uring, the server says so in one log line and uses recvmmsg.
    #[arg(long, value_enum, default_value = "recvmmsg")]
    pub udp_io: UdpIoArg,
    /// UDP generic segmentation offload on the recvmmsg path: the answers of one send batch
    /// that go to the same address leave as one datagram train (one pass through the kernel's
    /// send path, cut into datagrams at the end). on|off. Where the kernel lacks it, the
    /// server says so once and sends datagram by datagram.
    #[arg(long, value_parser = parse_on_off, default_value = "on", action = clap::ArgAction::Set)]
    #[serde(with = "serve_serde::on_off")]
    pub udp_gso: bool,
    /// Ask the kernel's fair scheduler for this time slice (microseconds, 100 to 100000) for
    /// every server thread: a shorter slice lets a waking io thread preempt a CPU-bound
    /// neighbour on its core sooner (Linux 6.12+, no privilege needed; older kernels ignore
    /// it). Default: the kernel's.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched_slice_us: Option<u64>,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum UdpIoArg {
    Recvmmsg,
    Uring,
}

impl ServeArgs {
    /// Sets a service's own setting, as its flag or its `[services.NAME]` key would.
    pub fn set_service(&mut self, service: &str, key: &str, value: impl Into<toml::Value>) {
        self.service_settings
            .entry(service.to_string())
            .or_default()
            .insert(key.to_string(), value.into());
    }

    /// Loopback defaults for in-process servers (demo, tests): the flags' own defaults, with
    /// every listener on an ephemeral loopback port.
    pub fn loopback(service: &str) -> ServeArgs {
        use clap::{CommandFactory as _, FromArgMatches as _};
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let m = Defaults::command().get_matches_from(["serve"]);
        let mut a = Defaults::from_arg_matches(&m)
            .expect("the declared defaults parse")
            .serve;
        a.service = service.into();
        a.udp = Some("127.0.0.1:0".into());
        a.tcp = Some("127.0.0.1:0".into());
        a.http = Some("127.0.0.1:0".into());
        a
    }

    /// The cores the server's threads are sized for: `--cpus`, else the process's affinity.
    pub fn cores(&self) -> usize {
        match &self.cpus {
            Some(c) if !c.0.is_empty() => c.0.len(),
            _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// The io threads and cpu workers this server runs: `--io-threads` and `--workers` where
    /// given, else `threads::choose`'s for its cores and its services' engines.
    pub fn threads(&self) -> Result<threads::Threads> {
        Ok(engines::threads(self, &plan::plans(self)?))
    }

    /// The etcd flags, for `cohort_cluster::membership::Etcd::open`.
    pub fn etcd_access(&self) -> cohort_cluster::membership::EtcdAccess {
        cohort_cluster::membership::EtcdAccess {
            user: self.etcd_user.clone(),
            password_file: self.etcd_password_file.clone(),
            ca: self.etcd_ca.clone(),
            cert: self.etcd_cert.clone(),
            key: self.etcd_key.clone(),
        }
    }

    pub fn net_config(&self) -> Result<NetConfig> {
        let io_threads = self.threads()?.io_threads;
        if let Some(us) = self.sched_slice_us {
            anyhow::ensure!(
                (100..=100_000).contains(&us),
                "--sched-slice-us {us}: the kernel takes 100 to 100000"
            );
        }
        anyhow::ensure!(
            self.udp.is_some()
                || self.tcp.is_some()
                || self.http.is_some()
                || self.grpc.is_some()
                || self.node_listen.is_some(),
            "no listener (give --udp, --tcp, --http or --grpc)"
        );
        anyhow::ensure!(self.node_window > 0, "--node-window must be above 0");
        anyhow::ensure!(
            (1..=64).contains(&self.cluster_lanes),
            "--cluster-lanes takes 1 to 64"
        );
        anyhow::ensure!(
            self.idle_timeout_ms > 0 && self.read_timeout_ms > 0,
            "--idle-timeout-ms and --read-timeout-ms must be above 0"
        );
        let fds = cohort_net::raise_fd_limit();
        let fit = fds.saturating_sub(FDS_KEPT).max(1);
        let max_connections = match self.max_connections {
            Some(0) => anyhow::bail!("--max-connections must be at least 1"),
            Some(n) => {
                if n > fit {
                    tracing::warn!(
                        max_connections = n,
                        fd_limit = fds,
                        "--max-connections is above what the descriptor limit leaves room \
                         for: clients past about {fit} are refused at the limit instead"
                    );
                }
                n
            }
            None => fit,
        };
        let limits = cohort_net::Limits {
            max_connections,
            max_buffered_bytes: self
                .max_buffered_bytes
                .unwrap_or_else(cohort_net::default_buffered_bytes),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            read_timeout: Duration::from_millis(self.read_timeout_ms),
            socket_buffer_bytes: self.socket_buffer_bytes,
        };
        anyhow::ensure!(
            self.client_rate >= 0.0 && self.client_rate.is_finite(),
            "--client-rate must be 0 (off) or a positive rate"
        );
        anyhow::ensure!(
            self.admission.max_deadline_ms > 0,
            "--max-deadline-ms must be above 0"
        );
        Ok(NetConfig {
            limits,
            client_quota: cohort_net::ClientQuota {
                max_inflight: self.client_max_inflight,
                rate: self.client_rate,
            },
            max_timeout: Duration::from_millis(self.admission.max_deadline_ms),
            tls: self.tls_cert.clone().zip(self.tls_key.clone()),
            udp: resolve("udp", &self.udp)?,
            tcp: resolve("tcp", &self.tcp)?,
            http: resolve("http", &self.http)?,
            grpc: resolve("grpc", &self.grpc)?,
            admin: match &self.admin {
                Some(p) if p.parse::<u16>().is_ok() => Some(SocketAddr::from((
                    [127, 0, 0, 1],
                    p.parse::<u16>().expect("checked"),
                ))),
                a => resolve("admin", a)?,
            },
            io_threads,
            cpus: self.cpus.clone().map(|c| c.0).unwrap_or_default(),
            drain_timeout: Duration::from_millis(self.drain_timeout_ms),
            default_timeout: Duration::from_micros(self.default_timeout_us.max(1)),
            io_spin: Duration::from_micros(self.io_spin_us.unwrap_or(match io_threads {
                1 => 50,
                _ => 0,
            })),
            udp_io: match self.udp_io {
                UdpIoArg::Recvmmsg => cohort_net::UdpIo::Recvmmsg,
                UdpIoArg::Uring => cohort_net::UdpIo::Uring,
            },
            udp_gso: self.udp_gso,
            ..NetConfig::default()
        })
    }
}

/// Descriptors kept for the server's own files (index, rings, eventfds, GPU driver) when
/// `--max-connections` is derived from the descriptor limit.
const FDS_KEPT: usize = 256;

/// `on` / `off` (also true/false, 1/0) for a switch that defaults on.
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

/// HOST:PORT -> the first address it resolves to.
fn resolve(what: &str, a: &Option<String>) -> Result<Option<SocketAddr>> {
    let Some(a) = a else { return Ok(None) };
    let addr = a
        .to_socket_addrs()
        .with_context(|| format!("--{what} {a:?}: expected HOST:PORT"))?
        .next()
        .with_context(|| format!("--{what} {a:?} resolves to no address"))?;
    Ok(Some(addr))
}

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

fn default_collections_on() -> String {
    "auto".into()
}

pub fn start(a: &ServeArgs) -> Result<Stack> {
    let mut ncfg = a.net_config()?;
    let threads = a.threads()?;
    cohort_net::check_ports(&ncfg)?;
    let plans = plan::plans(a)?;
    // A GPU engine on a machine without the GPU is refused now, not after the index and the
    // collections have loaded (minutes for a large index) only for the engine to fail. (A
    // front end runs no engine here: its nodes own the GPUs.)
    if a.cluster.is_none() || a.node_listen.is_some() {
        check_gpus(&plans)?;
    }
    // Before the engines: a collection that cannot be read back whole stops the start here.
    let routes = collections::open(a)?;
    // A node takes one ingress more than its listeners: the front ends' (UCX).
    let node_ingresses = usize::from(a.node_listen.is_some());
    let mut side =
        engines::start_planned(a, plans.clone(), Server::ingresses(&ncfg) + node_ingresses)?;
    // Services that cut deadlines shorter (or longer) than the server's --max-deadline-ms.
    ncfg.service_max_timeout = plans
        .iter()
        .filter(|p| p.cfg.admission.max_deadline_ms != a.admission.max_deadline_ms)
        .filter_map(|p| {
            let id = side.registry.by_name(p.name)?.id();
            Some((id, Duration::from_millis(p.cfg.admission.max_deadline_ms)))
        })
        .collect();
    let auth = match load_keys(a, &side.registry) {
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
        .map(|ends| start_node(a, &plans, &side, ends))
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
        why = %threads.why, services = %a.service,
        dispatch = %a.admission.dispatch, "server started");
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
    a: &ServeArgs,
    plans: &[plan::ServicePlan],
    side: &engines::EngineSide,
    ends: cohort_engine::IngressEnds,
) -> Result<ClusterNode> {
    use cohort_cluster::membership::{Etcd, NodeInfo, Registration, ServiceAt};
    let listen = resolve("node-listen", &a.node_listen)?.expect("a node has --node-listen");
    anyhow::ensure!(
        !listen.ip().is_unspecified(),
        "--node-listen {listen}: give the address front ends reach this node at (it is registered as given)"
    );
    let url = a
        .cluster
        .as_deref()
        .context("--node-listen needs --cluster (the etcd the node registers in)")?;
    let etcd = Etcd::open(url, &a.etcd_access())?;
    let ingress = cohort_cluster::node::NodeIngress::start(
        listen,
        a.node_id.clone(),
        ends,
        side.metrics.clone(),
        a.cluster_busy_poll,
        cluster_key(a)?,
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
        capacity: a.node_window,
        ucx_address: Some(cohort_cluster::membership::to_hex(&ingress.address)),
    };
    tracing::info!(id = %info.id, address = %info.address, "node: taking front ends' requests over UCX");
    let registration = Registration::start(etcd, info, Duration::from_secs(a.lease_secs));
    Ok(ClusterNode {
        registration,
        ingress,
    })
}

/// The cluster key a node or front end was given; a node without one says what that means.
pub(crate) fn cluster_key(a: &ServeArgs) -> Result<Option<cohort_cluster::link::ClusterKey>> {
    match &a.cluster_key {
        Some(path) => Ok(Some(cohort_cluster::link::ClusterKey::load(path)?)),
        None => {
            if a.node_listen.is_some() {
                tracing::warn!("node: no --cluster-key: any peer that reaches --node-listen can run requests here");
            }
            Ok(None)
        }
    }
}

/// Everything `serve` checks before it binds sockets or starts threads: the flags, the plans,
/// the files the services read, and the GPUs the GPU engines would open.
pub fn check(a: &ServeArgs) -> Result<Vec<plan::ServicePlan>> {
    a.net_config()?;
    if let Some(path) = &a.cluster_key {
        anyhow::ensure!(
            a.cluster.is_some(),
            "--cluster-key seals the messages between front ends and nodes: it needs --cluster"
        );
        cohort_cluster::link::ClusterKey::load(path)?;
    }
    if a.etcd_user.is_some() || a.etcd_ca.is_some() || a.etcd_cert.is_some() {
        let url = a.cluster.as_deref().context(
            "--etcd-user, --etcd-ca and --etcd-cert are how a cluster role reaches etcd: they need --cluster",
        )?;
        cohort_cluster::membership::Etcd::open(url, &a.etcd_access())?;
    }
    collections::check(a)?;
    let plans = plan::plans(a)?;
    if a.node_listen.is_none() {
        refuse_shards(&plans)?;
    }
    check_gpus(&plans)?;
    let registry = engines::build_registry(&plans)?;
    load_keys(a, &registry)?;
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        cohort_net::check_tls(cert, key)?;
    }
    Ok(plans)
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
    a: &ServeArgs,
    registry: &cohort_engine::Registry,
) -> Result<Option<std::sync::Arc<cohort_net::Auth>>> {
    let Some(path) = &a.auth_keys else {
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

/// `matches`: the serve command's parsed arguments (`--check-config` marks the settings they
/// did not give, nor the config file, as defaults).
pub fn run(a: ServeArgs, matches: Option<&clap::ArgMatches>) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    if a.check_config {
        let plans = check(&a)?;
        let choices = plans
            .iter()
            .map(engines::service_choices)
            .collect::<Result<Vec<_>>>()?;
        println!("# configuration ok");
        let t = a.threads()?;
        println!(
            "# threads: {} io threads, {} cpu workers per cpu-engine service: {}",
            t.io_threads, t.workers, t.why
        );
        for (p, choices) in plans.iter().zip(choices) {
            println!("# service {}: engine {}", p.name, p.cfg.engine.name());
            for c in choices {
                println!("# service {}: {} {}: {}", p.name, c.setting, c.value, c.why);
            }
        }
        print!("{}", resolved::as_toml(&a, matches, &plans)?);
        return Ok(());
    }
    tracing::debug!(config = ?a, "starting");
    // Register before announcing readiness so an early signal is never missed.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let stack = start(&a)?;
    if let Some(us) = a.sched_slice_us {
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
