//! The serve command line (`cohort serve`, `cohort node`): every flag, typed, as clap and
//! serde fill it (flags, then a config file: `config_file.rs`). Nothing below the command line
//! reads it: [`crate::ServerConfig::resolve`] turns it into the server's configuration once.

use crate::serve_serde;
use crate::util::{parse_bytes, parse_bytes_or_zero, parse_cpu_list, parse_on_off, CpuList};
use crate::{AdmissionArgs, CpuEngineArgs, GpuEngineArgs, HybridEngineArgs, PersistentEngineArgs};
use clap::Args;

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
    #[arg(long, default_value = defaults::SERVICE)]
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
    #[arg(long, default_value = defaults::ENGINE)]
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
    #[arg(long, default_value_t = defaults::LEASE_SECS)]
    pub lease_secs: u64,
    /// Requests a front end has in flight to one node at most (a node registers this as its
    /// capacity; a front end takes the smaller of the node's and its own). With every node's
    /// window full a request is answered OVERLOADED.
    #[arg(long, default_value_t = defaults::NODE_WINDOW)]
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
    #[arg(long, default_value_t = defaults::CLUSTER_LANES)]
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
    /// listener serves /v1/collections (create, upsert, delete, get, filtered search) and the
    /// gRPC listener cohort.collections.v1.Collections, each write acknowledged once durable
    /// in this directory's logs. Needs --http or --grpc.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<std::path::PathBuf>,
    /// Where the collections' searches run: auto (a GPU of --gpus when the machine has one,
    /// else the CPU), gpu (refused without one) or cpu. The collections' state, logs and
    /// writes are on the host either way; the device holds a copy kept current before each
    /// write is acknowledged (docs/collections.md).
    #[arg(long, default_value = defaults::COLLECTIONS_ON, value_parser = ["auto", "gpu", "cpu"])]
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
    #[arg(long, default_value_t = defaults::IO_THREADS)]
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
    #[arg(long, value_parser = parse_on_off, default_value = on_off(defaults::FAIR_QUEUE), action = clap::ArgAction::Set)]
    #[serde(with = "serve_serde::on_off")]
    pub fair_queue: bool,
    /// Deadline for requests that carry none (their header says 0).
    #[arg(long, default_value_t = defaults::DEFAULT_TIMEOUT_US)]
    pub default_timeout_us: u64,
    /// How long shutdown waits for in-flight answers (then: UNAVAILABLE); the whole shutdown
    /// ends within this plus about two seconds, whatever the clients do.
    #[arg(long, default_value_t = defaults::DRAIN_TIMEOUT_MS)]
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
    #[arg(long, default_value_t = defaults::CLIENT_MAX_INFLIGHT)]
    pub client_max_inflight: u32,
    /// Requests per second one client (source address) may send (a burst of a tenth of a
    /// second's worth at once); past it OVERLOADED (HTTP 429). 0 = no limit.
    #[arg(long, default_value_t = defaults::CLIENT_RATE)]
    pub client_rate: f64,
    /// A TCP connection with no request started or in flight is closed after this (GOAWAY).
    #[arg(long, default_value_t = defaults::IDLE_TIMEOUT_MS)]
    pub idle_timeout_ms: u64,
    /// A started TCP frame, an HTTP request head (and an idle HTTP keep-alive connection)
    /// and an HTTP body must each arrive within this (TIMEOUT frame or 408, then close); a
    /// client that takes no answer bytes for this long is closed.
    #[arg(long, default_value_t = defaults::READ_TIMEOUT_MS)]
    pub read_timeout_ms: u64,
    /// Each TCP/HTTP connection's kernel send and receive buffer (e.g. 64K, 1M; the kernel
    /// doubles it): bounds the kernel memory a client that neither reads nor stops sending
    /// holds until it is closed. 0 = the kernel's autotuning (up to its tcp_rmem/tcp_wmem
    /// maximum, megabytes a connection; for high-latency clients).
    #[arg(long, value_parser = parse_bytes_or_zero, default_value_t = defaults::SOCKET_BUFFER_BYTES)]
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
    #[arg(long, value_enum, default_value_t = defaults::UDP_IO)]
    pub udp_io: UdpIoArg,
    /// UDP generic segmentation offload on the recvmmsg path: the answers of one send batch
    /// that go to the same address leave as one datagram train (one pass through the kernel's
    /// send path, cut into datagrams at the end). on|off. Where the kernel lacks it, the
    /// server says so once and sends datagram by datagram.
    #[arg(long, value_parser = parse_on_off, default_value = on_off(defaults::UDP_GSO), action = clap::ArgAction::Set)]
    #[serde(with = "serve_serde::on_off")]
    pub udp_gso: bool,
    /// Deal each UDP datagram to an io thread at random (on), or give each client's
    /// datagrams to one thread by the kernel's hash of its address (off). With few clients
    /// the hash loads one thread with several while others idle: it saturates and its
    /// clients' datagrams wait or are dropped. on|off.
    #[arg(long, value_parser = parse_on_off, default_value = on_off(defaults::UDP_SPREAD), action = clap::ArgAction::Set)]
    #[serde(with = "serve_serde::on_off")]
    pub udp_spread: bool,
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
    /// `cohort serve`'s flags (without the word `serve`) as serve itself reads them: what a
    /// benchmark that starts a server records of its setup as data, not as a command line to
    /// parse back.
    pub fn from_flags<I, T>(flags: I) -> Result<ServeArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory as _, FromArgMatches as _};
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            serve: ServeArgs,
            // The cohort binary's global flags, which `cohort serve` takes too (not settings
            // of the server).
            #[arg(long)]
            log_level: Option<String>,
            #[arg(long)]
            virtual_gpus: Option<String>,
        }
        let argv = std::iter::once(std::ffi::OsString::from("serve"))
            .chain(flags.into_iter().map(Into::into));
        let m = Serve::command().try_get_matches_from(argv)?;
        Ok(Serve::from_arg_matches(&m)?.serve)
    }

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
        ServeArgs {
            service: service.into(),
            udp: Some("127.0.0.1:0".into()),
            tcp: Some("127.0.0.1:0".into()),
            http: Some("127.0.0.1:0".into()),
            ..ServeArgs::default()
        }
    }
}

fn default_collections_on() -> String {
    defaults::COLLECTIONS_ON.into()
}

/// A switch's default as its flag writes it.
const fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// The serve flags' defaults, each defined once: the flags' clap attributes and
/// [`ServeArgs::default`] both read these (no command line is parsed for them).
pub mod defaults {
    use super::UdpIoArg;
    pub const SERVICE: &str = "echo";
    pub const ENGINE: &str = "cpu";
    pub const LEASE_SECS: u64 = 3;
    pub const NODE_WINDOW: u32 = 4096;
    pub const CLUSTER_LANES: usize = 1;
    pub const COLLECTIONS_ON: &str = "auto";
    /// 0: chosen from the cores (`threads.rs`).
    pub const IO_THREADS: usize = 0;
    pub const FAIR_QUEUE: bool = false;
    pub const DEFAULT_TIMEOUT_US: u64 = 1_000_000;
    pub const DRAIN_TIMEOUT_MS: u64 = 10_000;
    pub const CLIENT_MAX_INFLIGHT: u32 = 0;
    pub const CLIENT_RATE: f64 = 0.0;
    pub const IDLE_TIMEOUT_MS: u64 = 60_000;
    pub const READ_TIMEOUT_MS: u64 = 10_000;
    pub const SOCKET_BUFFER_BYTES: usize = cohort_net::DEFAULT_SOCKET_BUFFER;
    pub const UDP_IO: UdpIoArg = UdpIoArg::Recvmmsg;
    pub const UDP_GSO: bool = true;
    pub const UDP_SPREAD: bool = true;
}

impl Default for ServeArgs {
    /// Every setting at its default: what `cohort serve` with no flag holds (no listener).
    fn default() -> Self {
        ServeArgs {
            config: None,
            check_config: false,
            service: defaults::SERVICE.into(),
            service_opt: Vec::new(),
            service_settings: Default::default(),
            from_file: Default::default(),
            engine: defaults::ENGINE.into(),
            admission: AdmissionArgs::default(),
            cpu: CpuEngineArgs::default(),
            gpu: GpuEngineArgs::default(),
            persistent: PersistentEngineArgs::default(),
            hybrid: HybridEngineArgs::default(),
            udp: None,
            tcp: None,
            http: None,
            grpc: None,
            cluster: None,
            node_listen: None,
            node_id: None,
            lease_secs: defaults::LEASE_SECS,
            node_window: defaults::NODE_WINDOW,
            cluster_busy_poll: false,
            cluster_no_rings: false,
            cluster_lanes: defaults::CLUSTER_LANES,
            cluster_key: None,
            etcd_user: None,
            etcd_password_file: None,
            etcd_ca: None,
            etcd_cert: None,
            etcd_key: None,
            admin: None,
            auth_keys: None,
            data_dir: None,
            collections_on: defaults::COLLECTIONS_ON.into(),
            tls_cert: None,
            tls_key: None,
            io_threads: defaults::IO_THREADS,
            cpus: None,
            worker_spin_us: None,
            fair_queue: defaults::FAIR_QUEUE,
            default_timeout_us: defaults::DEFAULT_TIMEOUT_US,
            drain_timeout_ms: defaults::DRAIN_TIMEOUT_MS,
            max_connections: None,
            max_buffered_bytes: None,
            client_max_inflight: defaults::CLIENT_MAX_INFLIGHT,
            client_rate: defaults::CLIENT_RATE,
            idle_timeout_ms: defaults::IDLE_TIMEOUT_MS,
            read_timeout_ms: defaults::READ_TIMEOUT_MS,
            socket_buffer_bytes: defaults::SOCKET_BUFFER_BYTES,
            io_spin_us: None,
            udp_io: defaults::UDP_IO,
            udp_gso: defaults::UDP_GSO,
            udp_spread: defaults::UDP_SPREAD,
            sched_slice_us: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults in code are the flags' defaults: what clap fills with no flag given.
    #[test]
    fn the_defaults_are_what_no_flag_gives() {
        use clap::{CommandFactory as _, FromArgMatches as _};
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let m = Cli::command().get_matches_from(["serve"]);
        let parsed = Cli::from_arg_matches(&m).unwrap().serve;
        let toml = |a: &ServeArgs| toml::Table::try_from(a).unwrap();
        assert_eq!(toml(&ServeArgs::default()), toml(&parsed));
        assert_eq!(
            toml(&ServeArgs::from_flags(Vec::<String>::new()).unwrap()),
            toml(&parsed)
        );
    }

    #[test]
    fn flags_read_as_serve_reads_them() {
        let a = ServeArgs::from_flags([
            "--udp",
            "127.0.0.1:7300",
            "--service",
            "knn:gpu-cohort",
            "--gpus=0,1",
            "--gpus-per-control-thread=2",
            "--service-opt=knn.placement=shard",
            "--log-level",
            "warn",
        ])
        .unwrap();
        let t = toml::Table::try_from(&a).unwrap();
        assert_eq!(t["gpus"], toml::Value::try_from([0, 1]).unwrap());
        assert_eq!(t["gpus_per_control_thread"], toml::Value::Integer(2));
        assert_eq!(a.service_opt, ["knn.placement=shard"]);
        let e = ServeArgs::from_flags(["--no-such-flag"]).unwrap_err();
        assert!(e.to_string().contains("no-such-flag"), "{e}");
    }
}
