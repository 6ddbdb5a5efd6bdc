//! Starting and stopping the listeners.

use crate::accept::{dealers, Dealer};
use crate::context::Context;
use crate::grpc::{serve_grpc, GrpcEnv};
use crate::http::serve_http;
use crate::http_reply::{HttpEnv, MetricsRender};
use crate::limits::{Budget, Connections, Limits};
use crate::quota::{ClientQuota, Quotas};
use crate::shard::Shard;
use crate::tasks::Tracker;
use crate::tcp::{serve_tcp, TcpEnv};
use crate::udp::spawn_udp;
use anyhow::{Context as _, Result};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct NetConfig {
    pub udp: Option<SocketAddr>,
    pub tcp: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    /// The Open Inference Protocol over gRPC (HTTP/2).
    pub grpc: Option<SocketAddr>,
    /// `/metrics` and `/healthz` on their own listener (then `/metrics` leaves the HTTP port).
    pub admin: Option<SocketAddr>,
    /// io threads: each owns one UDP socket and one TCP/HTTP shard (listeners + ingress).
    pub io_threads: usize,
    /// Cores the network threads are pinned to, in order; empty = not pinned.
    pub cpus: Vec<usize>,
    /// Requests in flight per UDP io thread before OVERLOADED.
    pub udp_table_capacity: usize,
    /// Requests in flight per TCP connection before the server stops reading it.
    pub tcp_max_inflight: usize,
    /// How long shutdown waits for in-flight answers.
    pub drain_timeout: Duration,
    /// Deadline of requests whose header says 0.
    pub default_timeout: Duration,
    /// How long an idle UDP io thread keeps polling its socket and answer rings before it
    /// sleeps in poll() (0: sleep at once). A wake-up costs a syscall and a scheduler round
    /// trip on each side; polling costs a core.
    pub io_spin: Duration,
    /// How UDP io threads drive their sockets.
    pub udp_io: UdpIo,
    /// Answers of one send batch to one address leave as one UDP GSO train (recvmmsg path;
    /// off where the kernel lacks it, said once in the log).
    pub udp_gso: bool,
    /// Datagrams dealt to the io threads' sockets at random rather than by client
    /// (`cohort_udp::spread_evenly`): no thread saturates while others idle.
    pub udp_spread: bool,
    /// Bounds on TCP/HTTP connections and the bytes they hold, and their timeouts.
    pub limits: Limits,
    /// Per-client quotas (requests in flight, per second), per source address.
    pub client_quota: ClientQuota,
    /// The longest deadline a request may ask for (longer ones are cut to it), and per
    /// service where it sets its own.
    pub max_timeout: Duration,
    pub service_max_timeout: Vec<(u16, Duration)>,
    /// TLS on the TCP and HTTP listeners: (certificate chain, private key), PEM files.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// How a UDP io thread reads and writes its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpIo {
    /// recvmmsg/sendmmsg batches, poll() to sleep.
    #[default]
    Recvmmsg,
    /// io_uring: multishot receive into provided buffers, batched sendmsg; where the kernel
    /// refuses it, the server says so once and uses `Recvmmsg`.
    Uring,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            udp: None,
            tcp: None,
            http: None,
            grpc: None,
            admin: None,
            io_threads: 1,
            cpus: vec![],
            udp_table_capacity: 65_536,
            tcp_max_inflight: 1024,
            drain_timeout: Duration::from_secs(10),
            default_timeout: Duration::from_secs(1),
            io_spin: Duration::ZERO,
            udp_io: UdpIo::Recvmmsg,
            udp_gso: true,
            udp_spread: true,
            limits: Limits::default(),
            client_quota: ClientQuota::default(),
            max_timeout: Duration::from_secs(60),
            service_max_timeout: Vec::new(),
            tls: None,
        }
    }
}

pub struct Server {
    pub udp_addr: Option<SocketAddr>,
    pub tcp_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    pub grpc_addr: Option<SocketAddr>,
    pub admin_addr: Option<SocketAddr>,
    admin_thread: Option<JoinHandle<()>>,
    trim_thread: Option<JoinHandle<()>>,
    ctx: Arc<Context>,
    udp_stop: Arc<AtomicBool>,
    udp_threads: Vec<JoinHandle<()>>,
    shards: Vec<Arc<Shard>>,
    shard_threads: Vec<JoinHandle<()>>,
    shutdown_tx: watch::Sender<bool>,
    closed_tx: watch::Sender<bool>,
    halt_tx: watch::Sender<bool>,
    tasks: Tracker,
    drain_timeout: Duration,
}

/// Refuses a fixed port another process already serves. The listeners set SO_REUSEPORT (one
/// socket per io thread), which would also let a second server join the port and split its
/// traffic; a probe bound without it fails where any socket holds the port. (TCP probes set
/// SO_REUSEADDR so a port that only has connections in TIME_WAIT is not refused.)
fn check_port_free(addr: SocketAddr, ty: Type, what: &str) -> Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let proto = if ty == Type::DGRAM {
        Protocol::UDP
    } else {
        Protocol::TCP
    };
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if ty == Type::STREAM {
        s.set_reuse_address(true)?;
    }
    match s.bind(&addr.into()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "--{what} {addr}: the port is already in use (another cohort serve, or another \
             program, listens there); pick another port or stop that one"
        ),
        Err(e) => Err(e).with_context(|| format!("binding {what} {addr}")),
    }
}

/// Refuses at once a configuration whose fixed ports another process holds (before anything
/// else starts: a clash is then one clear error, not engines started and stopped first).
pub fn check_ports(cfg: &NetConfig) -> Result<()> {
    if let Some(a) = cfg.udp {
        check_port_free(a, Type::DGRAM, "udp")?;
    }
    if let Some(a) = cfg.tcp {
        check_port_free(a, Type::STREAM, "tcp")?;
    }
    if let Some(a) = cfg.http {
        check_port_free(a, Type::STREAM, "http")?;
    }
    if let Some(a) = cfg.grpc {
        check_port_free(a, Type::STREAM, "grpc")?;
    }
    if let Some(a) = cfg.admin {
        check_port_free(a, Type::STREAM, "admin")?;
    }
    Ok(())
}

fn udp_socket(addr: SocketAddr) -> Result<std::net::UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_port(true)?;
    // Large buffers absorb bursts between two io-thread batches.
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.bind(&addr.into())
        .with_context(|| format!("binding udp {addr}"))?;
    Ok(s.into())
}

/// `n` TCP listeners on one address (SO_REUSEPORT: the kernel spreads connections over them,
/// one per shard). Port 0 binds the first and gives the others its port.
/// `sockbuf` (0: the kernel's autotuning) caps each accepted connection's kernel send and
/// receive buffers (accepted sockets inherit the listener's): a client that neither reads nor
/// stops sending then holds at most that much kernel memory until the stall timeout closes
/// it, instead of the megabytes autotuning grows to (the host's TCP memory is shared by
/// every process).
fn tcp_listeners(
    addr: SocketAddr,
    n: usize,
    what: &str,
    sockbuf: usize,
) -> Result<Vec<std::net::TcpListener>> {
    let one = |a: SocketAddr| -> Result<std::net::TcpListener> {
        let s = Socket::new(Domain::for_address(a), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.set_nodelay(true)?;
        if sockbuf > 0 {
            s.set_recv_buffer_size(sockbuf)?;
            s.set_send_buffer_size(sockbuf)?;
        }
        s.bind(&a.into())
            .with_context(|| format!("binding {what} {a}"))?;
        s.listen(4096)?;
        s.set_nonblocking(true)?;
        Ok(s.into())
    };
    check_port_free(addr, Type::STREAM, what)?;
    let first = one(addr)?;
    let bound = first.local_addr()?;
    let mut v = vec![first];
    for _ in 1..n {
        v.push(one(bound)?);
    }
    Ok(v)
}

/// What the listeners share besides their ring ends.
pub struct Shared {
    pub registry: cohort_engine::Registry,
    pub metrics: Arc<cohort_engine::Metrics>,
    pub max_payload: usize,
    /// Services the io threads run themselves (`--service NAME:inline`).
    pub inline: Option<Arc<cohort_engine::InlineEngine>>,
    /// API keys; None = authentication off.
    pub auth: Option<Arc<crate::Auth>>,
    /// Routes served by a handler of another crate (the collections of `--data-dir`).
    pub routes: Option<Arc<dyn crate::handler::HttpRoutes>>,
}

/// What one shard thread serves.
struct ShardJob {
    shard: Arc<Shard>,
    core: Option<usize>,
    tcp: Option<(std::net::TcpListener, Dealer)>,
    http: Option<(std::net::TcpListener, Dealer)>,
    grpc: Option<(std::net::TcpListener, Dealer)>,
}

impl Server {
    /// Ingresses a server with this configuration needs (`cohort_engine::wire`): one per UDP
    /// io thread, then one per TCP/HTTP shard (one per io thread when TCP, HTTP or gRPC is on).
    pub fn ingresses(cfg: &NetConfig) -> usize {
        Server::udp_ingresses(cfg) + Server::shard_count(cfg)
    }

    fn udp_ingresses(cfg: &NetConfig) -> usize {
        usize::from(cfg.udp.is_some()) * cfg.io_threads
    }

    fn shard_count(cfg: &NetConfig) -> usize {
        let streams = cfg.tcp.is_some() || cfg.http.is_some() || cfg.grpc.is_some();
        usize::from(streams) * cfg.io_threads
    }

    /// Starts the listeners over `ingresses` (as many as [`Server::ingresses`] says).
    pub fn start(
        cfg: &NetConfig,
        shared: Shared,
        ingresses: Vec<cohort_engine::IngressEnds>,
        metrics: MetricsRender,
    ) -> Result<Server> {
        anyhow::ensure!(cfg.io_threads >= 1, "--io-threads must be at least 1");
        // No client listener at all is a cluster node's choice (front ends reach it over
        // UCX); `serve`'s flags refuse it otherwise.
        anyhow::ensure!(
            ingresses.len() == Server::ingresses(cfg),
            "wiring has {} ingresses, the listeners need {}",
            ingresses.len(),
            Server::ingresses(cfg)
        );
        let mut ingresses = ingresses;
        let shard_ends = ingresses.split_off(Server::udp_ingresses(cfg));
        let ctx = Arc::new(Context {
            registry: shared.registry,
            metrics: shared.metrics,
            max_payload: shared.max_payload,
            inline: shared.inline,
            shutting_down: AtomicBool::new(false),
            quotas: Arc::new(Quotas::new(cfg.client_quota)),
            auth: shared.auth,
            routes: shared.routes,
            frames_in_flight: Default::default(),
        });
        let core_of = |i: usize| (!cfg.cpus.is_empty()).then(|| cfg.cpus[i % cfg.cpus.len()]);
        let udp_stop = Arc::new(AtomicBool::new(false));
        let mut udp_threads = Vec::new();
        let mut udp_addr = None;
        if let Some(addr) = cfg.udp {
            check_port_free(addr, Type::DGRAM, "udp")?;
            let first = udp_socket(addr)?;
            let bound = first.local_addr()?;
            udp_addr = Some(bound);
            let uring = cfg.udp_io == UdpIo::Uring
                && match crate::udp::probe_uring() {
                    Ok(()) => {
                        tracing::info!("UDP io threads use io_uring");
                        true
                    }
                    Err(why) => {
                        tracing::warn!(%why, "io_uring refused: UDP io threads use recvmmsg");
                        false
                    }
                };
            let mut sockets = vec![first];
            for _ in 1..cfg.io_threads {
                sockets.push(udp_socket(bound)?);
            }
            if cfg.udp_spread {
                if let Err(e) = cohort_udp::spread_evenly(sockets[0].as_raw_fd(), sockets.len()) {
                    tracing::warn!(error = %e, "the kernel refused to spread datagrams over the io threads: each client's go to one thread (its address's hash)");
                }
            }
            for (i, (s, ends)) in sockets.into_iter().zip(ingresses.drain(..)).enumerate() {
                let tc = crate::udp::UdpThreadConfig {
                    table_capacity: cfg.udp_table_capacity,
                    core: core_of(i),
                    drain_timeout: cfg.drain_timeout,
                    default_timeout: cfg.default_timeout,
                    max_timeout: cfg.max_timeout,
                    service_max_timeout: cfg.service_max_timeout.clone(),
                    spin: cfg.io_spin,
                    uring,
                    gso: cfg.udp_gso,
                };
                udp_threads.push(spawn_udp(s, ctx.clone(), ends, udp_stop.clone(), tc, i)?);
            }
        }
        let n = shard_ends.len();
        let sockbuf = cfg.limits.socket_buffer_bytes;
        let listeners = |addr: Option<SocketAddr>, what| -> Result<Vec<Option<_>>> {
            Ok(match addr {
                Some(a) => tcp_listeners(a, n, what, sockbuf)?
                    .into_iter()
                    .map(Some)
                    .collect(),
                None => (0..n).map(|_| None).collect(),
            })
        };
        let mut tcp = listeners(cfg.tcp, "tcp")?;
        let mut http = listeners(cfg.http, "http")?;
        let mut grpc = listeners(cfg.grpc, "grpc")?;
        // Each kind's connections dealt evenly over the shards (`crate::accept::Dealer`).
        let (mut tcp_deal, mut http_deal, mut grpc_deal) = (
            dealers(n).into_iter(),
            dealers(n).into_iter(),
            dealers(n).into_iter(),
        );
        let bound = |l: &[Option<std::net::TcpListener>]| -> Result<Option<SocketAddr>> {
            Ok(match l.first() {
                Some(Some(l)) => Some(l.local_addr()?),
                _ => None,
            })
        };
        let (tcp_addr, http_addr, grpc_addr) = (bound(&tcp)?, bound(&http)?, bound(&grpc)?);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (closed_tx, closed_rx) = watch::channel(false);
        let (halt_tx, halt_rx) = watch::channel(false);
        let (admin_addr, admin_thread) = match cfg.admin {
            Some(a) => {
                let l = tcp_listeners(a, 1, "admin", sockbuf)?.remove(0);
                let bound = l.local_addr()?;
                let t =
                    crate::admin::spawn_admin(l, ctx.clone(), metrics.clone(), halt_rx.clone())?;
                (Some(bound), Some(t))
            }
            None => (None, None),
        };
        let tls = match &cfg.tls {
            Some((cert, key)) => Some(crate::tls::acceptors(cert, key)?),
            None => None,
        };
        let tasks = Tracker::default();
        let trim_thread = Some(crate::trim::spawn(ctx.metrics.clone(), halt_rx.clone())?);
        let budget = Budget::new(cfg.limits.max_buffered_bytes, &ctx.metrics);
        let conns = Connections::new(cfg.limits.max_connections, &ctx.metrics);
        let mut shards = Vec::new();
        let mut shard_threads = Vec::new();
        for (i, ends) in shard_ends.into_iter().enumerate() {
            let shard = Shard::new(
                i,
                ends,
                cfg.udp_table_capacity,
                ctx.metrics.clone(),
                (
                    cfg.default_timeout,
                    cfg.max_timeout,
                    &cfg.service_max_timeout,
                ),
                ctx.inline.clone(),
                &ctx.registry,
            )?;
            shards.push(shard.clone());
            let job = ShardJob {
                shard,
                core: core_of(i),
                tcp: tcp[i].take().zip(tcp_deal.next()),
                http: http[i].take().zip(http_deal.next()),
                grpc: grpc[i].take().zip(grpc_deal.next()),
            };
            let env = ShardEnv {
                ctx: ctx.clone(),
                metrics: metrics.clone(),
                tcp_max_inflight: cfg.tcp_max_inflight,
                limits: cfg.limits,
                budget: budget.clone(),
                conns: conns.clone(),
                admin_only_metrics: cfg.admin.is_some(),
                tls: tls.clone(),
                shutdown: shutdown_rx.clone(),
                closed: closed_rx.clone(),
                halt: halt_rx.clone(),
                tasks: tasks.clone(),
            };
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let t = std::thread::Builder::new()
                .name(format!("net-io-{i}"))
                .spawn(move || run_shard(job, env, ready_tx))?;
            // A shard that cannot start its runtime is a start-up error, not a silent hole.
            ready_rx
                .recv()
                .map_err(|_| anyhow::anyhow!("net-io-{i} ended while starting"))?
                .with_context(|| format!("starting net-io-{i}"))?;
            shard_threads.push(t);
        }
        Ok(Server {
            udp_addr,
            tcp_addr,
            http_addr,
            grpc_addr,
            admin_addr,
            admin_thread,
            trim_thread,
            ctx,
            udp_stop,
            udp_threads,
            shards,
            shard_threads,
            shutdown_tx,
            closed_tx,
            halt_tx,
            tasks,
            drain_timeout: cfg.drain_timeout,
        })
    }

    /// The line `cohort serve` prints once ready.
    pub fn listening_line(&self) -> String {
        let mut parts = vec!["listening".to_string()];
        for (name, a) in [
            ("udp", self.udp_addr),
            ("tcp", self.tcp_addr),
            ("http", self.http_addr),
            ("grpc", self.grpc_addr),
            ("admin", self.admin_addr),
        ] {
            if let Some(a) = a {
                parts.push(format!("{name}={a}"));
            }
        }
        parts.join(" ")
    }

    /// Stops reading new work, sends GOAWAY on TCP, answers everything in flight (bounded by
    /// the drain timeout; what is still unanswered then gets UNAVAILABLE), and returns. Stop
    /// the engines after this. `/healthz` answers 503 until the drain ends.
    pub fn shutdown(mut self) {
        self.ctx.shutting_down.store(true, Ordering::Release);
        let _ = self.shutdown_tx.send(true);
        let until = Instant::now() + self.drain_timeout;
        self.udp_stop.store(true, Ordering::Release);
        for t in self.udp_threads.drain(..) {
            let _ = t.join();
        }
        let in_flight = |s: &[Arc<Shard>]| s.iter().map(|s| s.in_flight()).sum::<usize>();
        while (self.tasks.live() > 0 || in_flight(&self.shards) > 0) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let abandoned: usize = self.shards.iter().map(|s| s.abandon_all()).sum();
        if abandoned > 0 {
            tracing::warn!(
                abandoned,
                "tcp/http requests unanswered at the drain timeout: UNAVAILABLE"
            );
            // Let the writers send those answers (and close) before the runtimes go.
            let grace = Instant::now() + Duration::from_secs(1);
            while self.tasks.live() > 0 && Instant::now() < grace {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let _ = self.closed_tx.send(true);
        if self.tasks.live() > 0 {
            tracing::warn!(
                connections = self.tasks.live(),
                "closing connections still draining"
            );
        }
        let _ = self.halt_tx.send(true);
        for t in self.shard_threads.drain(..) {
            let _ = t.join();
        }
        if let Some(t) = self.admin_thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.trim_thread.take() {
            let _ = t.join();
        }
    }
}

/// What every shard thread shares.
struct ShardEnv {
    ctx: Arc<Context>,
    metrics: MetricsRender,
    tcp_max_inflight: usize,
    limits: Limits,
    budget: Arc<Budget>,
    conns: Arc<Connections>,
    admin_only_metrics: bool,
    tls: Option<crate::tls::Acceptors>,
    shutdown: watch::Receiver<bool>,
    closed: watch::Receiver<bool>,
    halt: watch::Receiver<bool>,
    tasks: Tracker,
}

/// One shard's thread: its runtime serves its listeners and its answer pump until halted.
fn run_shard(job: ShardJob, env: ShardEnv, ready: std::sync::mpsc::Sender<Result<()>>) {
    if let Some(c) = job.core {
        core_affinity::set_for_current(core_affinity::CoreId { id: c });
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let ShardEnv {
        ctx,
        metrics,
        tcp_max_inflight,
        limits,
        budget,
        conns,
        admin_only_metrics,
        tls,
        shutdown,
        closed,
        mut halt,
        tasks,
    } = env;
    let shard = job.shard;
    let started = rt.block_on(async {
        if let Some((l, tcp_dealer)) = job.tcp {
            let l = tokio::net::TcpListener::from_std(l)?;
            let env = Arc::new(TcpEnv {
                ctx: ctx.clone(),
                shard: shard.clone(),
                max_inflight: tcp_max_inflight,
                limits,
                budget: budget.clone(),
                conns: conns.clone(),
                tls: tls.as_ref().map(|t| t.tcp.clone()),
            });
            tokio::spawn(serve_tcp(
                l,
                tcp_dealer,
                env,
                shutdown.clone(),
                tasks.clone(),
            ));
        }
        if let Some((l, grpc_dealer)) = job.grpc {
            let l = tokio::net::TcpListener::from_std(l)?;
            let env = Arc::new(GrpcEnv::new(
                ctx.clone(),
                shard.clone(),
                limits,
                budget.clone(),
                conns.clone(),
                tls.as_ref().map(|t| t.grpc.clone()),
                tcp_max_inflight,
            ));
            tokio::spawn(serve_grpc(
                l,
                grpc_dealer,
                env,
                shutdown.clone(),
                closed.clone(),
                tasks.clone(),
            ));
        }
        if let Some((l, http_dealer)) = job.http {
            let l = tokio::net::TcpListener::from_std(l)?;
            let openapi = crate::openapi::document(
                &ctx.registry,
                ctx.auth.is_some(),
                !admin_only_metrics,
                ctx.routes.as_deref(),
            );
            let env = Arc::new(HttpEnv {
                openapi: bytes::Bytes::from(openapi.to_string()),
                ctx: ctx.clone(),
                shard: shard.clone(),
                metrics,
                limits,
                budget,
                conns,
                admin_only_metrics,
                tls: tls.map(|t| t.http),
            });
            tokio::spawn(serve_http(
                l,
                http_dealer,
                env,
                shutdown.clone(),
                closed,
                tasks.clone(),
            ));
        }
        Ok::<_, std::io::Error>(())
    });
    let failed = started.is_err();
    let _ = ready.send(started.map_err(Into::into));
    if failed {
        return;
    }
    rt.block_on(async {
        let pump = tokio::spawn(shard.clone().pump(halt.clone()));
        while !*halt.borrow() {
            if halt.changed().await.is_err() {
                break;
            }
        }
        let _ = pump.await;
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}
