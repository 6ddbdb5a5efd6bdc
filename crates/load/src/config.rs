//! What a load run is asked to do: the target, the mode (open or closed loop), the whole
//! configuration and the client's credentials.

use anyhow::{bail, Context, Result};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Udp(SocketAddr),
    Tcp(SocketAddr),
    Http(SocketAddr),
    /// The Open Inference Protocol over gRPC.
    Grpc(SocketAddr),
}

impl std::str::FromStr for Target {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Target> {
        let (scheme, rest) = s
            .split_once("://")
            .context("target must look like udp://HOST:PORT")?;
        let addr = rest
            .trim_end_matches('/')
            .to_socket_addrs()
            .with_context(|| format!("resolving {rest:?}"))?
            .next()
            .with_context(|| format!("{rest:?} resolves to no address"))?;
        match scheme {
            "udp" => Ok(Target::Udp(addr)),
            "tcp" => Ok(Target::Tcp(addr)),
            "http" => Ok(Target::Http(addr)),
            "grpc" => Ok(Target::Grpc(addr)),
            _ => bail!("unknown scheme {scheme:?} (udp, tcp, http, grpc)"),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Udp(a) => write!(f, "udp://{a}"),
            Target::Tcp(a) => write!(f, "tcp://{a}"),
            Target::Http(a) => write!(f, "http://{a}"),
            Target::Grpc(a) => write!(f, "grpc://{a}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Open { rate: f64, poisson: bool },
    Closed { concurrency: usize },
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub target: Target,
    pub mode: Mode,
    pub duration: Duration,
    pub warmup: Duration,
    /// Sockets / connections the load is spread over.
    pub connections: usize,
    /// How long to wait for an answer before counting it as `no_answer`.
    pub answer_timeout: Duration,
    /// Deadline put in each request header (0 = the server's default).
    pub request_timeout_us: u32,
    pub seed: u64,
    /// The server's process id, for its CPU time over the measured window (same host).
    pub server_pid: Option<u32>,
    /// Sample GPU board power through NVML over the measured window (100 reads a second from
    /// a thread of the generator). Off, the report says energy was not sampled: a run can
    /// then show whether those reads move the latency of a GPU server on the same host.
    pub gpu_energy: bool,
    /// An API key to sign frames with (UDP/TCP) and send as the bearer token (HTTP).
    pub key: Option<ClientKey>,
    /// TLS to the TCP and HTTP targets (`tls_client`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// A TLS client that trusts the certificates in `ca` (PEM), e.g. a server's self-signed one.
pub fn tls_client(ca: &std::path::Path) -> Result<Arc<rustls::ClientConfig>> {
    let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut &pem[..]) {
        roots.add(c.with_context(|| format!("{}: not PEM", ca.display()))?)?;
    }
    anyhow::ensure!(!roots.is_empty(), "{}: no certificate", ca.display());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// An API key as the client holds it (`cohort load --key ID:SECRET`).
#[derive(Clone)]
pub struct ClientKey {
    pub id: [u8; cohort_proto::KEY_ID_LEN],
    pub secret: String,
}

impl std::fmt::Debug for ClientKey {
    /// The secret is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = String::from_utf8_lossy(&self.id);
        write!(f, "ClientKey({}:***)", id.trim_end_matches('\0'))
    }
}

impl std::str::FromStr for ClientKey {
    type Err = String;
    fn from_str(s: &str) -> Result<ClientKey, String> {
        let (id, secret) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected ID:SECRET"))?;
        let id = cohort_proto::key_id_bytes(id)
            .ok_or_else(|| format!("key id {id:?}: 1-16 printable ASCII bytes"))?;
        Ok(ClientKey {
            id,
            secret: secret.to_string(),
        })
    }
}

impl LoadConfig {
    /// The settings the benchmarks and the demo share: 500 ms warm-up, 2 s answer timeout,
    /// the server's default deadline, seed 1.
    pub fn new(target: Target, mode: Mode, duration: Duration, connections: usize) -> LoadConfig {
        LoadConfig {
            target,
            mode,
            duration,
            warmup: Duration::from_millis(500),
            connections,
            answer_timeout: Duration::from_secs(2),
            request_timeout_us: 0,
            seed: 1,
            server_pid: None,
            gpu_energy: true,
            key: None,
            tls: None,
        }
    }
}
