//! Accepting TCP and HTTP connections within the limits: past `--max-connections` a client is
//! told at once (its protocol's refusal, then close) instead of being served; at the process's
//! descriptor limit a spare descriptor is given up to accept and refuse the waiting client
//! (else it would sit in the backlog after its handshake, and the listener would wake the
//! loop forever); other accept errors back off. Each kind of trouble is logged at most once a
//! second, with how many times it happened since.

use crate::limits::{Connections, Slot};
use cohort_engine::Metrics;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// What a listener says to a client it refuses (written once, without waiting, then closed).
pub(crate) type Refusal = &'static [u8];

/// A log line at most once a second, counting what it stood for.
struct RateLimitedLog {
    last: Option<Instant>,
    since: u64,
}

impl RateLimitedLog {
    fn new() -> Self {
        RateLimitedLog {
            last: None,
            since: 0,
        }
    }

    /// How many events this line stands for, when it is time to log one.
    fn due(&mut self) -> Option<u64> {
        self.since += 1;
        let now = Instant::now();
        if self.last.is_some_and(|t| now - t < Duration::from_secs(1)) {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.since))
    }
}

/// A descriptor held in reserve for refusing clients at the descriptor limit.
fn spare_fd() -> Option<OwnedFd> {
    std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
}

fn refuse(stream: TcpStream, refusal: Refusal) {
    // Best effort and never waiting: a fresh socket's send buffer takes a short message.
    let _ = stream.try_write(refusal);
    drop(stream);
}

fn out_of_fds(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Accepts until `stop` resolves, handing each admitted connection and its slot to `serve`.
pub(crate) async fn accept_loop<S, F>(
    listener: TcpListener,
    what: &'static str,
    conns: Arc<Connections>,
    metrics: Arc<Metrics>,
    refusal: Refusal,
    stop: F,
    mut serve: S,
) where
    S: FnMut(TcpStream, Slot),
    F: std::future::Future<Output = ()>,
{
    tokio::pin!(stop);
    let mut spare = spare_fd();
    let mut capped = RateLimitedLog::new();
    let mut fd_limit = RateLimitedLog::new();
    let mut failed = RateLimitedLog::new();
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut stop => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::from_millis(5);
                match conns.open() {
                    Some(slot) => serve(stream, slot),
                    None => {
                        metrics.refused_connection("max_connections");
                        if let Some(n) = capped.due() {
                            tracing::warn!(
                                listener = what,
                                max = conns.max(),
                                refused = n,
                                %peer,
                                "connections refused: at --max-connections"
                            );
                        }
                        refuse(stream, refusal);
                    }
                }
            }
            Err(e) if out_of_fds(&e) => {
                metrics.refused_connection("fd_limit");
                if let Some(n) = fd_limit.due() {
                    tracing::warn!(
                        listener = what,
                        refused = n,
                        "connections refused: the process is out of file descriptors \
                         (lower --max-connections or raise the limit)"
                    );
                }
                // Free the spare, take the waiting client off the backlog with it, refuse it.
                if spare.take().is_some() {
                    if let Ok((stream, _)) = listener.accept().await {
                        refuse(stream, refusal);
                    }
                    spare = spare_fd();
                }
                if spare.is_none() {
                    // Another thread took the descriptor: wait for one to free.
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    spare = spare_fd();
                }
            }
            Err(e) => {
                if let Some(n) = failed.due() {
                    tracing::warn!(listener = what, error = %e, failures = n, "accept failed");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}
