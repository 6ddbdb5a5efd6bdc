//! Starting and stopping the listeners.

use crate::async_ingress::AsyncIngress;
use crate::context::Context;
use crate::http::{serve_http, MetricsRender};
use crate::tasks::Tracker;
use crate::tcp::serve_tcp;
use crate::udp::spawn_udp;
use anyhow::{Context as _, Result};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Debug, Clone)]
pub struct NetConfig {
    pub udp: Option<SocketAddr>,
    pub tcp: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    /// UDP io threads (one socket each) and tokio workers for TCP/HTTP.
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
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            udp: None,
            tcp: None,
            http: None,
            io_threads: 1,
            cpus: vec![],
            udp_table_capacity: 65_536,
            tcp_max_inflight: 1024,
            drain_timeout: Duration::from_secs(10),
            default_timeout: Duration::from_secs(1),
        }
    }
}

pub struct Server {
    pub udp_addr: Option<SocketAddr>,
    pub tcp_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    ctx: Arc<Context>,
    udp_stop: Arc<AtomicBool>,
    udp_threads: Vec<JoinHandle<()>>,
    egress_stop: Arc<AtomicBool>,
    egress: Option<JoinHandle<()>>,
    shutdown_tx: watch::Sender<bool>,
    closed_tx: watch::Sender<bool>,
    tasks: Tracker,
    runtime: Option<tokio::runtime::Runtime>,
    drain_timeout: Duration,
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

/// What the listeners share besides their ring ends.
pub struct Shared {
    pub registry: cohort_engine::Registry,
    pub metrics: Arc<cohort_engine::Metrics>,
    pub max_payload: usize,
}

impl Server {
    /// Ingresses a server with this configuration needs (`cohort_engine::wire`): one per UDP
    /// io thread, then one for the TCP/HTTP side.
    pub fn ingresses(cfg: &NetConfig) -> usize {
        usize::from(cfg.udp.is_some()) * cfg.io_threads + 1
    }

    /// Starts the listeners over `ingresses` (as many as [`Server::ingresses`] says).
    pub fn start(
        cfg: &NetConfig,
        shared: Shared,
        ingresses: Vec<cohort_engine::IngressEnds>,
        metrics: MetricsRender,
    ) -> Result<Server> {
        anyhow::ensure!(cfg.io_threads >= 1, "--io-threads must be at least 1");
        anyhow::ensure!(
            cfg.udp.is_some() || cfg.tcp.is_some() || cfg.http.is_some(),
            "no listener enabled (give --udp, --tcp or --http)"
        );
        anyhow::ensure!(
            ingresses.len() == Server::ingresses(cfg),
            "wiring has {} ingresses, the listeners need {}",
            ingresses.len(),
            Server::ingresses(cfg)
        );
        let mut ingresses = ingresses;
        let async_ends = ingresses.pop().expect("checked");
        let ctx = Arc::new(Context {
            async_side: AsyncIngress::new(
                async_ends,
                cfg.udp_table_capacity,
                shared.metrics.clone(),
                cfg.default_timeout,
            ),
            registry: shared.registry,
            metrics: shared.metrics,
            max_payload: shared.max_payload,
            shutting_down: AtomicBool::new(false),
        });
        let core_of = |i: usize| (!cfg.cpus.is_empty()).then(|| cfg.cpus[i % cfg.cpus.len()]);
        let udp_stop = Arc::new(AtomicBool::new(false));
        let mut udp_threads = Vec::new();
        let mut udp_addr = None;
        if let Some(addr) = cfg.udp {
            let first = udp_socket(addr)?;
            let bound = first.local_addr()?;
            udp_addr = Some(bound);
            let mut sockets = vec![first];
            for _ in 1..cfg.io_threads {
                sockets.push(udp_socket(bound)?);
            }
            for (i, (s, ends)) in sockets.into_iter().zip(ingresses.drain(..)).enumerate() {
                let tc = crate::udp::UdpThreadConfig {
                    table_capacity: cfg.udp_table_capacity,
                    core: core_of(i),
                    drain_timeout: cfg.drain_timeout,
                    default_timeout: cfg.default_timeout,
                };
                udp_threads.push(spawn_udp(s, ctx.clone(), ends, udp_stop.clone(), tc, i)?);
            }
        }
        let egress_stop = Arc::new(AtomicBool::new(false));
        let egress = ctx
            .async_side
            .spawn_egress(egress_stop.clone(), core_of(cfg.io_threads))?;
        let next_core = Arc::new(AtomicUsize::new(0));
        let cpus = cfg.cpus.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.io_threads)
            .thread_name("net-io")
            .on_thread_start(move || {
                if !cpus.is_empty() {
                    let i = next_core.fetch_add(1, Ordering::Relaxed);
                    core_affinity::set_for_current(core_affinity::CoreId {
                        id: cpus[i % cpus.len()],
                    });
                }
            })
            .enable_all()
            .build()?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (closed_tx, closed_rx) = watch::channel(false);
        let tasks = Tracker::default();
        let mut tcp_addr = None;
        if let Some(addr) = cfg.tcp {
            let l = runtime
                .block_on(tokio::net::TcpListener::bind(addr))
                .with_context(|| format!("binding tcp {addr}"))?;
            tcp_addr = Some(l.local_addr()?);
            let (c, sd, t, max) = (
                ctx.clone(),
                shutdown_rx.clone(),
                tasks.clone(),
                cfg.tcp_max_inflight,
            );
            runtime.spawn(serve_tcp(l, c, max, sd, t));
        }
        let mut http_addr = None;
        if let Some(addr) = cfg.http {
            let l = runtime
                .block_on(tokio::net::TcpListener::bind(addr))
                .with_context(|| format!("binding http {addr}"))?;
            http_addr = Some(l.local_addr()?);
            runtime.spawn(serve_http(
                l,
                ctx.clone(),
                metrics,
                shutdown_rx.clone(),
                closed_rx,
                tasks.clone(),
            ));
        }
        Ok(Server {
            udp_addr,
            tcp_addr,
            http_addr,
            ctx,
            udp_stop,
            udp_threads,
            egress_stop,
            egress: Some(egress),
            shutdown_tx,
            closed_tx,
            tasks,
            runtime: Some(runtime),
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
        while (self.tasks.live() > 0 || self.ctx.async_side.in_flight() > 0)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let abandoned = self.ctx.async_side.abandon_all();
        if abandoned > 0 {
            tracing::warn!(
                abandoned,
                "tcp/http requests unanswered at the drain timeout: UNAVAILABLE"
            );
            // Let the writers send those answers (and close) before the runtime goes.
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
        self.egress_stop.store(true, Ordering::Release);
        if let Some(t) = self.egress.take() {
            let _ = t.join();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}
