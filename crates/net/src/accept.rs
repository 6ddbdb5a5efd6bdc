//! Accepting TCP and HTTP connections within the limits: past `--max-connections` a client is
//! told at once (its protocol's refusal, then close) instead of being served; at the process's
//! descriptor limit a spare descriptor is given up to accept and refuse the waiting client
//! (else it would sit in the backlog after its handshake, and the listener would wake the
//! loop forever); other accept errors back off. Each kind of trouble is logged at most once a
//! second, with how many times it happened since.
//!
//! Connections are dealt evenly over the shards ([`Dealer`]). Each shard has a listener of its
//! own on the port (SO_REUSEPORT), and the kernel picks one by hashing the client's address
//! and port: with few clients that gives some shards several and others none (8 connections
//! over 6 shards, as a batching client opens them), and a connection stays on its shard for
//! life, so the loaded shard saturates while others idle (the same hash over UDP sockets
//! broke served k-NN at 800 K datagrams/s with one io thread at 100%: issue 80). A shard that
//! accepts a connection while another serves fewer hands it over at once, through that
//! shard's inbox: one cross-thread hop at the connection's start, none per request.

use crate::limits::{Connections, Slot};
use cohort_engine::Metrics;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A connection handed to another shard, with its place under `--max-connections`.
type Handoff = (std::net::TcpStream, Slot);

/// The shards that accept one kind of connection (tcp, http or grpc): how many each serves,
/// and their inboxes.
struct Table {
    open: Vec<Arc<AtomicUsize>>,
    inbox: Vec<mpsc::UnboundedSender<Handoff>>,
}

/// One shard's end of the deal: where its accepted connections go, and the connections other
/// shards hand it.
pub(crate) struct Dealer {
    table: Arc<Table>,
    me: usize,
    inbox: mpsc::UnboundedReceiver<Handoff>,
}

/// A dealer for each of `shards` shards accepting one kind of connection, in shard order.
pub(crate) fn dealers(shards: usize) -> Vec<Dealer> {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..shards).map(|_| mpsc::unbounded_channel()).unzip();
    let table = Arc::new(Table {
        open: (0..shards).map(|_| Arc::new(AtomicUsize::new(0))).collect(),
        inbox: tx,
    });
    rx.into_iter()
        .enumerate()
        .map(|(me, inbox)| Dealer {
            table: table.clone(),
            me,
            inbox,
        })
        .collect()
}

impl Dealer {
    /// The shard that serves a connection accepted here: this one, unless another serves
    /// fewer (then the one that serves fewest). The connection is counted on it at once, so
    /// that shards accepting at the same moment see each other's choices.
    fn place(&self, slot: &mut Slot) -> usize {
        let open = &self.table.open;
        let mine = open[self.me].load(Ordering::Acquire);
        let (least, n) = open
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .enumerate()
            .min_by_key(|&(_, n)| n)
            .expect("a dealer has at least its own shard");
        let to = if n < mine { least } else { self.me };
        slot.count_on(&open[to]);
        to
    }

    /// Hands `stream` to shard `to`, or gives it back where that cannot be done (the shard
    /// has stopped, or the socket cannot leave this runtime).
    fn hand(&self, to: usize, stream: TcpStream, slot: Slot) -> Option<(TcpStream, Slot)> {
        let std = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "a connection could not be handed to another shard: closed");
                return None;
            }
        };
        match self.table.inbox[to].send((std, slot)) {
            Ok(()) => None,
            Err(mpsc::error::SendError((std, mut slot))) => {
                slot.count_on(&self.table.open[self.me]);
                TcpStream::from_std(std).ok().map(|s| (s, slot))
            }
        }
    }
}

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

/// Accepts until `stop` resolves, handing each admitted connection and its slot to `serve`
/// here or to the shard `dealer` places it on (whose own loop serves it).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn accept_loop<S, F>(
    listener: TcpListener,
    mut dealer: Dealer,
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
            Some((std, slot)) = dealer.inbox.recv() => {
                // Handed over by another shard: served here as if accepted here.
                match TcpStream::from_std(std) {
                    Ok(stream) => serve(stream, slot),
                    Err(e) => tracing::warn!(listener = what, error = %e, "a connection handed to this shard could not be served"),
                }
                continue;
            }
            _ = &mut stop => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::from_millis(5);
                match conns.open() {
                    Some(mut slot) => {
                        let to = dealer.place(&mut slot);
                        if to == dealer.me {
                            serve(stream, slot);
                        } else if let Some((stream, slot)) = dealer.hand(to, stream, slot) {
                            serve(stream, slot);
                        }
                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Shard `me`'s accept loop on its own thread and runtime, recording each connection it
    /// serves (and holding it open) until `stop` is sent.
    fn shard(
        listener: std::net::TcpListener,
        dealer: Dealer,
        conns: Arc<Connections>,
        served: Arc<Mutex<Vec<(usize, TcpStream, Slot)>>>,
        me: usize,
        stop: tokio::sync::oneshot::Receiver<()>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                listener.set_nonblocking(true).unwrap();
                let listener = TcpListener::from_std(listener).unwrap();
                let metrics = Arc::new(Metrics::new(HashMap::new()));
                let stop = async move {
                    let _ = stop.await;
                };
                accept_loop(
                    listener,
                    dealer,
                    "tcp",
                    conns,
                    metrics,
                    b"",
                    stop,
                    |s, slot| served.lock().unwrap().push((me, s, slot)),
                )
                .await;
                // The runtime ends here: its sockets are dropped with it.
                served.lock().unwrap().clear();
            })
        })
    }

    #[test]
    fn connections_to_one_shard_are_dealt_evenly_over_the_shards() {
        let metrics = Metrics::new(HashMap::new());
        let conns = Connections::new(100, &metrics);
        // Every client connects to shard 0's listener (the kernel's hash at its worst);
        // shard 1 listens on a port no client uses.
        let l0 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let l1 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l0.local_addr().unwrap();
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut stops = Vec::new();
        let mut threads = Vec::new();
        for (me, (l, d)) in [l0, l1].into_iter().zip(dealers(2)).enumerate() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            stops.push(tx);
            threads.push(shard(l, d, conns.clone(), served.clone(), me, rx));
        }
        let clients: Vec<_> = (0..8)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while served.lock().unwrap().len() < clients.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let per_shard = |s: usize| served.lock().unwrap().iter().filter(|c| c.0 == s).count();
        assert_eq!((per_shard(0), per_shard(1)), (4, 4));
        // Closing connections frees their places on their shards: the next ones go where
        // fewer are served again.
        served.lock().unwrap().retain(|c| c.0 != 0);
        let more: Vec<_> = (0..2)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while served.lock().unwrap().len() < 6 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!((per_shard(0), per_shard(1)), (2, 4));
        for s in stops {
            let _ = s.send(());
        }
        for t in threads {
            t.join().unwrap();
        }
        drop((clients, more));
    }
}
