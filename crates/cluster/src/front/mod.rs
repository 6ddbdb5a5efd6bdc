//! The front end's remote engine: each lane is a thread that takes the requests its ingresses
//! admitted (auth, limits and deadlines are the ingress's, as for any engine), sends each to
//! the node serving its service with the fewest requests outstanding, batched per node, and
//! writes each node's answer back to the ingress that asked. Every request gets one answer:
//! the node's, or TIMEOUT at its deadline, or (the node gone) a retry on another node for a
//! service that is safe to run twice, else UNAVAILABLE. A node's window bounds what is in
//! flight to it; with every window full a request is answered OVERLOADED at once.
//!
//! A service whose nodes each hold one shard of it (knn: `--index-shard I/N`) is scattered:
//! the request goes to one node of every shard, and the service's merge (`RemoteConfig::
//! merges`) makes the shards' answers into one. The first error of a shard answers the
//! whole request; a failed shard is retried on another node of that shard when it may run
//! twice. Nodes serving a service whole are preferred over its shards.
//!
//! The code is laid out by job: `event_loop` runs a lane, `routing` picks nodes and sends
//! batches, `shards` scatters and gathers split services, `answers` takes the nodes'
//! answers and their failures, `hello` makes and checks the connections, `members`
//! follows the membership, `metrics` exports what the lanes count.

mod answers;
mod event_loop;
mod hello;
mod members;
mod metrics;
mod routing;
mod shards;

use event_loop::run;
pub use hello::{backoff, HELLO_TIMEOUT};
use metrics::NodeCounters;
pub use metrics::RemoteMetrics;

use crate::link::{ClusterKey, Link};
use crate::membership::{self, NodeInfo};
use crate::ring::{InRings, OutRing};
use crate::tuning::mode;
use crate::wire::Batch;
use cohort_engine::split::{MergeFn, ShardOf};
use cohort_engine::LaneEnds;
use cohort_mq::Envelope;
use cohort_ucx::{EpId, Mode, Worker};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct RemoteConfig {
    /// etcd: its client endpoints and how to reach them.
    pub etcd: membership::Etcd,
    /// Requests in flight to one node at most (its registered capacity, if smaller, wins).
    pub window: u32,
    /// Services whose requests may run twice (reads): retried once on another node when
    /// their node fails and their deadline allows.
    pub idempotent: HashSet<u16>,
    /// How long after a request's deadline the front end answers TIMEOUT itself (the node
    /// answers at the deadline; this covers a node that cannot).
    pub grace: Duration,
    /// Poll UCX without blocking (shared-memory transports allowed; a core per lane).
    pub busy_poll: bool,
    /// With `busy_poll`: ask each node for a ring and write request batches into it
    /// one-sided (Lynx's design), messages where a node offers none.
    pub rings: bool,
    /// Services that may be served from shards, and how their answers merge.
    pub merges: HashMap<u16, MergeFn>,
    /// The cluster's key: messages sealed both ways (`link`); None: plain.
    pub key: Option<ClusterKey>,
}

struct Pending {
    ingress: usize,
    env: Envelope,
    node: usize,
    /// The payload, kept for a retry (idempotent services only; else empty).
    payload: Vec<u8>,
    retried: bool,
    /// A shard's part of a scattered request: (its gather, the shard).
    gather: Option<(u64, u16)>,
}

/// A request scattered to every shard of its service, until each has answered.
struct Gather {
    ingress: usize,
    env: Envelope,
    /// The request, for the merge and for a shard's retry.
    request: Vec<u8>,
    layout: u64,
    answers: Vec<Option<Vec<u8>>>,
    left: u16,
}

/// How a service is served now: whole by any of its nodes, or split over shards of one
/// layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Split {
    layout: u64,
    shards: u16,
}

struct Node {
    info: NodeInfo,
    ep: Option<EpId>,
    /// The node's ring on this connection, once offered.
    ring: Option<OutRing>,
    /// When to connect again after a failed connection.
    retry_at: Option<Instant>,
    /// The node answered this connection's hello (sealed under the cluster key, with the
    /// entry's id): only then is it routed to.
    verified: bool,
    /// The hello awaiting its answer on this connection: its nonce and when it was sent.
    hello: Option<(u64, Instant)>,
    /// Failures since the last connection that carried an answer (the first is logged).
    failures: u32,
    outstanding: u32,
    window: u32,
    batch: Batch,
    gone: bool,
    counters: NodeCounters,
}

struct Lane {
    cfg: RemoteConfig,
    w: Worker,
    nodes: Vec<Node>,
    by_ep: HashMap<EpId, usize>,
    pending: HashMap<u64, Pending>,
    gathers: HashMap<u64, Gather>,
    /// Services served from shards (none serving them whole), each with its layout.
    splits: HashMap<u16, Split>,
    deadlines: BTreeSet<(u64, u64)>,
    next_id: u64,
    /// Turns of `pick`, which break its ties.
    turn: usize,
    /// Late answers for requests already answered (timed out, failed over): dropped.
    stale: u64,
    /// UCX's event fd (-1 when busy polling).
    efd: std::os::fd::RawFd,
    link: Link,
    /// The seal of ring batches: a session of their own, as a ring and the messages are two
    /// channels whose order to each other is not kept (a receiver refuses a session's
    /// numbers out of order).
    ring_link: Link,
    /// Rings offered to the nodes for their answers, by connection (offered once a node's
    /// own ring is taken: the node polls, so it writes one-sided too).
    answer_rings: InRings<EpId>,
    /// Where an answer ring's batch is copied to be opened, and what this turn read.
    ring_slot: Vec<u8>,
    ring_reads: Vec<(EpId, Result<Vec<u8>, String>)>,
    metrics: RemoteMetrics,
    /// This lane's number (its `lane` label).
    index: usize,
}

pub struct RemoteEngine {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Each lane's membership watch (it sees the stop within a second).
    watches: Vec<std::thread::JoinHandle<()>>,
}

impl RemoteEngine {
    /// One thread per lane, each with its own UCX worker and its own view of the membership.
    pub fn start(
        cfg: &RemoteConfig,
        lanes: Vec<LaneEnds>,
        metrics: RemoteMetrics,
    ) -> anyhow::Result<RemoteEngine> {
        let stop = Arc::new(AtomicBool::new(false));
        let (mut threads, mut watches) = (Vec::new(), Vec::new());
        for (index, lane) in lanes.into_iter().enumerate() {
            let metrics = metrics.clone();
            let (tx, rx) = crossbeam_channel::unbounded();
            watches.push(membership::watch(cfg.etcd.clone(), tx, stop.clone()));
            let (cfg, stop) = (cfg.clone(), stop.clone());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            threads.push(
                std::thread::Builder::new()
                    .name("remote-lane".into())
                    .spawn(move || {
                        let made = if cfg.busy_poll && cfg.rings {
                            Worker::with_rma(Mode::Polled)
                        } else {
                            Worker::new(mode(cfg.busy_poll))
                        };
                        match made {
                            Ok(w) => {
                                ready_tx.send(Ok(())).ok();
                                run(cfg, w, lane, rx, &stop, (metrics, index))
                            }
                            Err(e) => {
                                ready_tx.send(Err(e)).ok();
                            }
                        }
                    })?,
            );
            ready_rx
                .recv()
                .map_err(|_| anyhow::anyhow!("a remote lane ended at start"))??;
        }
        Ok(RemoteEngine {
            stop,
            threads,
            watches,
        })
    }

    /// Stops the lanes (each answers what it holds first, a while) and the watches. A watch
    /// stuck connecting to an etcd that is gone is left to end with the process.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            t.join().ok();
        }
        let until = Instant::now() + Duration::from_secs(3);
        for w in self.watches {
            while !w.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            if w.is_finished() {
                w.join().ok();
            } else {
                tracing::warn!("remote: a membership watch did not stop in time (etcd unreachable?); left to the process's end");
            }
        }
    }
}

/// Why no node can take a request now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NoNode {
    /// None serves its service (or shard).
    Serving,
    /// Those that do are not connected (connecting again after a failure).
    Unconnected,
    /// Those connected are at their windows.
    Full,
}

impl Split {
    fn shard(self, shard: u16) -> ShardOf {
        ShardOf {
            shard,
            shards: self.shards,
            layout: self.layout,
        }
    }
}

impl Node {
    /// Connected and its hello answered: it may be sent requests.
    fn routable(&self) -> bool {
        self.ep.is_some() && self.verified
    }
}
