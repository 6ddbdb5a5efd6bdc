//! TLS on the TCP, HTTP and gRPC listeners (`cohort serve --tls-cert FILE --tls-key FILE`,
//! PEM), through rustls with the `ring` provider. HTTP offers ALPN `http/1.1`, gRPC `h2`. A handshake must
//! finish within the read timeout.

use anyhow::{Context as _, Result};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// The listeners' acceptors.
#[derive(Clone)]
pub struct Acceptors {
    pub tcp: TlsAcceptor,
    pub http: TlsAcceptor,
    pub grpc: TlsAcceptor,
}

pub fn acceptors(cert: &Path, key: &Path) -> Result<Acceptors> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let certs = rustls_pemfile::certs(&mut &read(cert)?[..])
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("--tls-cert {}: not PEM certificates", cert.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "--tls-cert {}: no certificate in the file",
        cert.display()
    );
    let key = rustls_pemfile::private_key(&mut &read(key)?[..])
        .with_context(|| format!("--tls-key {}: not a PEM private key", key.display()))?
        .with_context(|| format!("--tls-key {}: no private key in the file", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = |alpn: &[&[u8]]| -> Result<Arc<rustls::ServerConfig>> {
        let mut c = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs.clone(), key.clone_key())
            .context("--tls-cert/--tls-key: the key does not fit the certificate")?;
        c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(c))
    };
    Ok(Acceptors {
        tcp: TlsAcceptor::from(config(&[])?),
        http: TlsAcceptor::from(config(&[b"http/1.1"])?),
        grpc: TlsAcceptor::from(config(&[b"h2"])?),
    })
}

/// The server side of a handshake on an accepted connection, within `timeout`; a failed or
/// timed-out one is counted and gives None (the connection is dropped).
pub(crate) async fn handshake(
    tls: &TlsAcceptor,
    stream: tokio::net::TcpStream,
    timeout: std::time::Duration,
    metrics: &cohort_engine::Metrics,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    match tokio::time::timeout(timeout, tls.accept(stream)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(_)) => {
            metrics.refused_connection("tls_handshake");
            None
        }
        Err(_) => {
            metrics.timed_out_connection("tls_handshake");
            None
        }
    }
}

/// Whether the files make a working TLS server configuration (`--check-config`).
pub fn check_tls(cert: &Path, key: &Path) -> Result<()> {
    acceptors(cert, key).map(|_| ())
}
