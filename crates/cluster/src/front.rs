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

use crate::link::{ClusterKey, Link};
use crate::membership::{self, Change, NodeInfo};
use crate::node::SPIN;
use crate::ring::{InRings, OutRing};
use crate::wire::{self, Batch, Request};
use cohort_engine::clock::now_ns;
use cohort_engine::split::{MergeFn, ShardOf};
use cohort_engine::wiring::AnswerRings;
use cohort_engine::{LaneEnds, Shed};
use cohort_mq::Envelope;
use cohort_proto::{ErrorCode, ErrorPayload};
use cohort_ucx::{EpId, Event, Mode, Worker};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

/// What a front end's lanes export per node (`/metrics`): the requests (parts, for a split
/// service) and messages sent to it, so parts per message says how well a lane batches; and
/// what each lane has outstanding there, sampled at each send.
#[derive(Clone, Default)]
pub struct RemoteMetrics {
    parts: Family<NodeLabels, Counter>,
    messages: Family<NodeLabels, Counter>,
    ring_writes: Family<NodeLabels, Counter>,
    ring_answers: Family<NodeLabels, Counter>,
    outstanding: Family<LaneLabels, Gauge>,
    /// The server's metrics, for the requests refused because every node is at its window.
    server: Option<Arc<cohort_engine::Metrics>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    node: String,
    lane: String,
}

impl RemoteMetrics {
    /// Registers them with the server's metrics.
    pub fn registered(m: &Arc<cohort_engine::Metrics>) -> RemoteMetrics {
        let r = RemoteMetrics {
            server: Some(m.clone()),
            ..RemoteMetrics::default()
        };
        m.register(
            "cohort_cluster_parts_sent",
            "Requests sent to a node (a split service's query counts once per shard)",
            r.parts.clone(),
        );
        m.register(
            "cohort_cluster_messages_sent",
            "Batched messages sent to a node",
            r.messages.clone(),
        );
        m.register(
            "cohort_cluster_ring_writes",
            "Batches written one-sided into a node's ring (the rest of the messages sent went as messages)",
            r.ring_writes.clone(),
        );
        m.register(
            "cohort_cluster_ring_answers",
            "Answer batches a node wrote one-sided into this front end's ring (the rest came as messages)",
            r.ring_answers.clone(),
        );
        m.register(
            "cohort_cluster_outstanding",
            "Requests a lane has in flight at a node, as of its last send there",
            r.outstanding.clone(),
        );
        r
    }
}

/// One node's handles, resolved once (no label lookup per message).
struct NodeCounters {
    parts: Counter,
    messages: Counter,
    ring_writes: Counter,
    ring_answers: Counter,
    outstanding: Gauge,
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

/// How long a front end waits for a node's answer to its hello before it closes the
/// connection (and makes it again after a backoff).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// The wait before connecting again to a node after `failures` failures in a row: 200 ms,
/// doubling, at most 10 s (a peer that fails every connection costs the front end a
/// connection every 10 s).
pub fn backoff(failures: u32) -> Duration {
    Duration::from_millis(200 << failures.saturating_sub(1).min(6)).min(Duration::from_secs(10))
}

/// The UCX worker mode a role's `--cluster-busy-poll` asks for.
pub(crate) fn mode(busy_poll: bool) -> Mode {
    if busy_poll {
        Mode::Polled
    } else {
        Mode::Events
    }
}

fn run(
    cfg: RemoteConfig,
    w: Worker,
    mut lane: LaneEnds,
    changes: crossbeam_channel::Receiver<Change>,
    stop: &AtomicBool,
    (metrics, index): (RemoteMetrics, usize),
) {
    let _health = lane.health_guard();
    // The ingresses unpark this thread when they write it a request.
    lane.bell.bind_current();
    let efd = if cfg.busy_poll {
        -1
    } else {
        w.event_fd().unwrap_or(-1)
    };
    let mut s = Lane {
        efd,
        link: Link::new(cfg.key.clone()),
        ring_link: Link::new(cfg.key.clone()),
        answer_rings: InRings::default(),
        ring_slot: Vec::new(),
        ring_reads: Vec::new(),
        metrics,
        index,
        cfg,
        w,
        nodes: Vec::new(),
        by_ep: HashMap::new(),
        pending: HashMap::new(),
        gathers: HashMap::new(),
        splits: HashMap::new(),
        deadlines: BTreeSet::new(),
        next_id: 1,
        turn: 0,
        stale: 0,
    };
    let mut idle_since = None;
    let mut stopping: Option<Instant> = None;
    loop {
        if stopping.is_none() && stop.load(Ordering::Acquire) {
            // The ingresses have stopped; what is in flight gets its answers, a while.
            stopping = Some(Instant::now());
        }
        if let Some(t) = stopping {
            if s.pending.is_empty() || t.elapsed() > Duration::from_secs(5) {
                s.fail_all(&mut lane.answers, "the front end is stopping");
                break;
            }
        }
        let mut busy = false;
        while let Ok(c) = changes.try_recv() {
            s.apply(c, &mut lane.answers);
            busy = true;
        }
        s.reconnect();
        // Take what the ingresses admitted, a bounded run at a time.
        for _ in 0..4096 {
            let answers = &mut lane.answers;
            let Some(()) = lane.requests.poll(|ingress, m| {
                // The payload is kept only where a failed node's request may be sent
                // again (idempotent services): no copy per request otherwise.
                let keep = s.cfg.idempotent.contains(&m.env.service);
                let payload = if keep { m.payload.to_vec() } else { Vec::new() };
                s.route(answers, ingress, m.env, m.payload, payload, false)
            }) else {
                break;
            };
            busy = true;
        }
        s.flush(&mut lane.answers);
        busy |= s.w.progress();
        for ev in s.w.take_events() {
            busy = true;
            s.on_event(ev, &mut lane.answers);
        }
        busy |= s.read_answer_rings(&mut lane.answers);
        s.expire(&mut lane.answers);
        if busy {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < SPIN || s.cfg.busy_poll {
            std::hint::spin_loop();
        } else if s.pending.is_empty() && stopping.is_none() {
            // Nothing in flight: only a request can bring work, and its ingress rings the bell.
            lane.sleep(Duration::from_millis(1));
        } else if s.w.arm() {
            // Answers owed: block on UCX's events, briefly (a new request may come meanwhile,
            // and its bell is not one this wait hears).
            let mut fd = libc::pollfd {
                fd: s.efd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000,
            };
            // SAFETY: one valid pollfd and timeout.
            unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
        }
    }
    if s.stale > 0 {
        tracing::info!(stale = s.stale, "remote lane: late answers dropped");
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

impl Lane {
    /// Whether the connection `from` is a node's whose hello is not answered yet (a node's
    /// answers come without their connection: only its replies name it).
    fn unverified(&self, from: Option<EpId>) -> bool {
        from.and_then(|ep| self.by_ep.get(&ep))
            .is_some_and(|&i| !self.nodes[i].verified)
    }

    /// A request refused because every node that could take it is at its window, counted
    /// (its answer is counted by the ingress that gets it).
    fn shed(&self, service: u16) {
        if let Some(m) = &self.metrics.server {
            m.refused(service, Shed::Nodes);
        }
    }

    fn answer_error(
        lane: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        code: ErrorCode,
        why: &str,
    ) {
        lane.send_error(ingress, env, &ErrorPayload::new(code, why));
    }

    /// Sends a request to the least-loaded node serving its service (to one of every shard
    /// where it is split), or answers it. `bytes` is the request's payload; `kept`, the copy
    /// held for a retry (empty for a service that is never sent twice).
    fn route(
        &mut self,
        lane: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        bytes: &[u8],
        kept: Vec<u8>,
        retried: bool,
    ) {
        if env.deadline != 0 && now_ns() >= env.deadline {
            return Self::answer_error(
                lane,
                ingress,
                env,
                ErrorCode::Timeout,
                "deadline passed before a node took it",
            );
        }
        if let Some(&split) = self.splits.get(&env.service) {
            return self.scatter(lane, ingress, env, bytes, split);
        }
        match self.pick(env.service, None) {
            Ok(i) => {
                let p = Pending {
                    ingress,
                    env,
                    node: i,
                    payload: kept,
                    retried,
                    gather: None,
                };
                self.send_to(i, bytes, p);
            }
            Err(none) => {
                let (code, why) = match none {
                    NoNode::Full => {
                        self.shed(env.service);
                        let e =
                            Shed::Nodes.error("every node serving this service is at its window");
                        return lane.send_error(ingress, env, &e);
                    }
                    NoNode::Unconnected => (
                        ErrorCode::Unavailable,
                        "no node serving this service is connected now (connecting again)",
                    ),
                    NoNode::Serving => (ErrorCode::Unavailable, "no node serves this service now"),
                };
                Self::answer_error(lane, ingress, env, code, why)
            }
        }
    }

    /// The connected node with room and the fewest requests outstanding among those serving
    /// `service` (its `shard`, or whole), ties taken in turn (at low load every node gets
    /// its share, not the first listed); else why none can take it.
    fn pick(&mut self, service: u16, shard: Option<ShardOf>) -> Result<usize, NoNode> {
        let (mut serving, mut connected) = (false, false);
        self.turn = self.turn.wrapping_add(1);
        let (turn, count) = (self.turn, self.nodes.len());
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                !n.gone
                    && n.info
                        .services
                        .iter()
                        .any(|s| s.id == service && s.shard == shard)
            })
            .inspect(|(_, n)| {
                serving = true;
                connected |= n.routable();
            })
            .filter(|(_, n)| n.routable() && n.outstanding < n.window)
            .min_by_key(|&(i, n)| (n.outstanding, (i + count - turn % count) % count))
            .map(|(i, _)| i)
            .ok_or(match (serving, connected) {
                (false, _) => NoNode::Serving,
                (true, false) => NoNode::Unconnected,
                (true, true) => NoNode::Full,
            })
    }

    /// Batches a request (or a shard's part of one) to node `i`.
    fn send_to(&mut self, i: usize, bytes: &[u8], p: Pending) {
        let id = self.next_id;
        self.next_id += 1;
        let now = now_ns();
        let node = &mut self.nodes[i];
        node.outstanding += 1;
        node.batch.push_request(&Request {
            id,
            service: p.env.service,
            class: p.env.status,
            request_id: p.env.request_id,
            deadline_left_us: match p.env.deadline {
                0 => 0,
                d => (d.saturating_sub(now) / 1000).clamp(1, u64::from(u32::MAX)) as u32,
            },
            payload: bytes,
        });
        if p.env.deadline != 0 {
            self.deadlines.insert((p.env.deadline, id));
        }
        self.pending.insert(id, p);
    }

    /// Sends a request to one node of every shard of `split`, or answers it: OVERLOADED when
    /// a shard's nodes are all at their windows, UNAVAILABLE when a shard has none.
    fn scatter(
        &mut self,
        lane: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        bytes: &[u8],
        split: Split,
    ) {
        let mut picks = Vec::with_capacity(split.shards as usize);
        for shard in 0..split.shards {
            match self.pick(env.service, Some(split.shard(shard))) {
                Ok(i) => picks.push(i),
                Err(NoNode::Full) => {
                    self.shed(env.service);
                    let e = Shed::Nodes
                        .error("every node of one of this service's shards is at its window");
                    return lane.send_error(ingress, env, &e);
                }
                Err(none) => {
                    let why = if none == NoNode::Unconnected {
                        "is connected now (connecting again)"
                    } else {
                        "serves it now"
                    };
                    return Self::answer_error(
                        lane,
                        ingress,
                        env,
                        ErrorCode::Unavailable,
                        &format!(
                            "no node of shard {shard} of this service's {} {why}",
                            split.shards
                        ),
                    );
                }
            }
        }
        let gid = self.next_id;
        self.next_id += 1;
        self.gathers.insert(
            gid,
            Gather {
                ingress,
                env,
                request: bytes.to_vec(),
                layout: split.layout,
                answers: vec![None; split.shards as usize],
                left: split.shards,
            },
        );
        for (shard, i) in picks.into_iter().enumerate() {
            let p = Pending {
                ingress,
                env,
                node: i,
                payload: Vec::new(),
                retried: false,
                gather: Some((gid, shard as u16)),
            };
            self.send_to(i, bytes, p);
        }
    }

    /// Shard `shard`'s answer to gather `gid`: kept until every shard has answered, then
    /// merged; an error answers the request at once (the other shards' answers, when they
    /// come, find it gone and are dropped).
    fn gathered(
        &mut self,
        lane: &mut AnswerRings,
        gid: u64,
        shard: u16,
        status: u16,
        payload: &[u8],
    ) {
        let Some(g) = self.gathers.get_mut(&gid) else {
            self.stale += 1;
            return;
        };
        if status == 0 {
            let slot = &mut g.answers[shard as usize];
            if slot.is_none() {
                *slot = Some(payload.to_vec());
                g.left -= 1;
            }
            if g.left > 0 {
                return;
            }
        }
        let g = self.gathers.remove(&gid).expect("looked up above");
        if status != 0 {
            return lane.send(g.ingress, Envelope { status, ..g.env }, payload);
        }
        let merge = self.cfg.merges[&g.env.service];
        let parts: Vec<&[u8]> = g
            .answers
            .iter()
            .map(|a| a.as_deref().expect("every shard answered"))
            .collect();
        let mut out = Vec::new();
        match merge(&g.request, &parts, &mut out) {
            Ok(()) => lane.send(g.ingress, Envelope { status: 0, ..g.env }, &out),
            Err(e) => lane.send_error(g.ingress, g.env, &e),
        }
    }

    /// Answers gather `gid` with an error, if it is still waiting.
    fn fail_gather(&mut self, lane: &mut AnswerRings, gid: u64, code: ErrorCode, why: &str) {
        if let Some(g) = self.gathers.remove(&gid) {
            Self::answer_error(lane, g.ingress, g.env, code, why);
        }
    }

    /// Which services are served from shards, from the membership: a service with a merge
    /// that no node serves whole, from the layout most of its shard nodes hold.
    fn relayout(&mut self) {
        let mut whole = HashSet::new();
        let mut layouts: HashMap<u16, HashMap<Split, usize>> = HashMap::new();
        for n in self.nodes.iter().filter(|n| !n.gone) {
            for s in &n.info.services {
                match s.shard {
                    None => {
                        whole.insert(s.id);
                    }
                    Some(t) => {
                        let split = Split {
                            layout: t.layout,
                            shards: t.shards,
                        };
                        *layouts.entry(s.id).or_default().entry(split).or_default() += 1;
                    }
                }
            }
        }
        let mut splits = HashMap::new();
        for (service, seen) in layouts {
            if whole.contains(&service) || !self.cfg.merges.contains_key(&service) {
                continue;
            }
            let (&split, _) = seen
                .iter()
                .max_by_key(|(sp, &nodes)| (nodes, std::cmp::Reverse((sp.layout, sp.shards))))
                .expect("a service listed has a layout");
            if seen.len() > 1 {
                tracing::warn!(service, layouts = seen.len(), ?split,
                    "remote: nodes hold shards of different layouts of one service (another index or placement); serving the one most nodes hold");
            }
            let missing: Vec<u16> = (0..split.shards)
                .filter(|&i| {
                    !self.nodes.iter().any(|n| {
                        !n.gone
                            && n.info
                                .services
                                .iter()
                                .any(|s| s.id == service && s.shard == Some(split.shard(i)))
                    })
                })
                .collect();
            if !missing.is_empty() {
                tracing::warn!(
                    service,
                    ?missing,
                    shards = split.shards,
                    "remote: shards with no node: this service's requests are answered UNAVAILABLE"
                );
            }
            splits.insert(service, split);
        }
        if splits != self.splits {
            tracing::info!(?splits, "remote: services served from shards");
        }
        self.splits = splits;
    }

    fn flush(&mut self, lane: &mut AnswerRings) {
        let mut failed = Vec::new();
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if n.batch.records() == 0 {
                continue;
            }
            let ep = n.ep.expect("batches go to connected nodes");
            n.counters.parts.inc_by(n.batch.records() as u64);
            n.counters.messages.inc();
            n.counters.outstanding.set(i64::from(n.outstanding));
            let sent = match &mut n.ring {
                Some(ring) if ring.takes(n.batch.bytes()) => {
                    n.counters.ring_writes.inc();
                    let msg = self.ring_link.take(&mut n.batch);
                    ring.write(&mut self.w, &msg)
                }
                _ => self.w.send(ep, self.link.take(&mut n.batch), true),
            };
            if let Err(e) = sent {
                tracing::warn!(node = %n.info.id, %e, "remote: send failed");
                failed.push(i);
            }
        }
        for i in failed {
            self.node_failed(i, lane, "sending to the node failed");
        }
    }

    fn on_event(&mut self, ev: Event, lane: &mut AnswerRings) {
        match ev {
            Event::Message { data, from } => {
                if let Some(reason) = wire::refusal_reason(&data) {
                    return self.refused_by(from, &reason, lane);
                }
                let data = match self.link.open(&data) {
                    Ok(inner) => inner,
                    Err(why) => return self.refused(from, &data, &why, lane),
                };
                match wire::kind(data) {
                    Ok(wire::HELLO_ACK) => return self.hello_answered(from, data),
                    _ if self.unverified(from) => {
                        // Before its hello's answer a peer's messages are not taken.
                        return self.refused(
                            from,
                            data,
                            "a message before the hello's answer",
                            lane,
                        );
                    }
                    Ok(wire::RING_OFFER) => return self.ring_offered(from, data),
                    Ok(wire::RING_CREDIT) => return self.ring_read(from, data),
                    _ => {}
                }
                self.answers(data, lane);
            }
            Event::Failed { ep, why } => {
                self.answer_rings.retire(ep);
                if let Some(i) = self.by_ep.remove(&ep) {
                    let n = &mut self.nodes[i];
                    if n.failures == 0 {
                        tracing::warn!(node = %n.info.id, %why, "remote: the connection to a node failed; connecting again while it is registered");
                    }
                    n.failures += 1;
                    n.ep = None;
                    n.ring = None;
                    n.verified = false;
                    n.hello = None;
                    n.retry_at = Some(Instant::now() + backoff(n.failures));
                    self.node_failed(
                        i,
                        lane,
                        "the connection to the node serving this request failed",
                    );
                }
            }
            Event::Accepted(_) => {}
        }
    }

    /// A batch of a node's answers (by message or through an answer ring): each to its
    /// ingress, or into its gather.
    fn answers(&mut self, data: &[u8], lane: &mut AnswerRings) {
        let got = wire::answers(data, |a| match self.pending.remove(&a.id) {
            Some(p) => {
                if p.env.deadline != 0 {
                    self.deadlines.remove(&(p.env.deadline, a.id));
                }
                let n = &mut self.nodes[p.node];
                n.outstanding -= 1;
                n.failures = 0;
                match p.gather {
                    Some((gid, shard)) => self.gathered(lane, gid, shard, a.status, a.payload),
                    None => {
                        let env = Envelope {
                            status: a.status,
                            ..p.env
                        };
                        lane.send(p.ingress, env, a.payload);
                    }
                }
            }
            None => self.stale += 1,
        });
        if let Err(e) = got {
            tracing::warn!(%e, "remote: a malformed answer batch from a node");
        }
    }

    /// What the nodes wrote into this lane's answer rings; each ring's credit back to its
    /// node. A batch that fails its checks fails its node's connection.
    fn read_answer_rings(&mut self, lane: &mut AnswerRings) -> bool {
        let credits = self.answer_rings.read(
            &self.w,
            &mut self.ring_slot,
            &mut self.link,
            &mut self.ring_reads,
        );
        // Taken out to be drained while `self` answers, then put back: its room is kept.
        let mut reads = std::mem::take(&mut self.ring_reads);
        let busy = !reads.is_empty();
        for (ep, batch) in reads.drain(..) {
            let Some(&i) = self.by_ep.get(&ep) else {
                continue; // its connection failed this turn: its requests are answered
            };
            match batch {
                Ok(data) => {
                    self.nodes[i].counters.ring_answers.inc();
                    self.answers(&data, lane);
                }
                Err(why) => {
                    tracing::warn!(node = %self.nodes[i].info.id, %why, "remote: refused a batch in a node's answer ring");
                    self.node_failed(i, lane, "a node's answers failed the cluster key's check");
                }
            }
        }
        self.ring_reads = reads;
        // The credits after the answers are on their way to their clients.
        for (ep, credit) in credits {
            if !self.by_ep.contains_key(&ep) {
                continue; // failed above
            }
            if let Err(e) = self.w.send(ep, credit, true) {
                tracing::warn!(%e, "remote: an answer ring's credit not sent");
            }
        }
        busy
    }

    /// A message that failed the cluster key's check (altered on the way, or not from a
    /// node of this cluster: a node with another key closes the connection before it
    /// answers). Nothing in it is taken as an answer; the nodes holding the requests it names
    /// are failed (their requests retried or answered), so none waits for an answer that was
    /// lost. A forged message can at most make a connection be made again.
    fn refused(&mut self, from: Option<EpId>, msg: &[u8], why: &str, lane: &mut AnswerRings) {
        if let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) {
            if !self.nodes[i].verified {
                // A peer that has not answered its hello holds nothing: its connection goes.
                let n = &mut self.nodes[i];
                if n.failures == 0 {
                    tracing::error!(node = %n.info.id, address = %n.info.address, %why,
                        "remote: refused a message from a node before its hello's answer; not routing to it");
                }
                n.failures += 1;
                return self.close_connection(i);
            }
        }
        let inner = if wire::is_sealed(msg) {
            msg.get(wire::SEAL_HEAD..).unwrap_or(&[])
        } else {
            msg
        };
        let mut named = BTreeSet::new();
        let _ = wire::answers(inner, |a| {
            if let Some(p) = self.pending.get(&a.id) {
                named.insert(p.node);
            }
        });
        tracing::warn!(%why, nodes = ?named.iter().map(|&i| &self.nodes[i].info.id).collect::<Vec<_>>(),
            "remote: refused a message from a node; failing the connections it names");
        for i in named {
            self.node_failed(i, lane, "a node's answers failed the cluster key's check");
        }
    }

    /// A node's refusal of this front end's messages (it closes the connection next): said
    /// once per run of failures, at error level, with the node's reason, since it is a
    /// misconfiguration (another --cluster-key, or none on one side) rather than a node lost,
    /// and the requests it held are answered with it. Not sealed, so it is taken only as the
    /// end of the connection it came on (as a reset would be).
    fn refused_by(&mut self, from: Option<EpId>, reason: &str, lane: &mut AnswerRings) {
        let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) else {
            tracing::warn!(%reason, "remote: a refusal on no node's connection; ignored");
            return;
        };
        let n = &mut self.nodes[i];
        if n.failures == 0 {
            tracing::error!(node = %n.info.id, %reason,
                "remote: the node refused this front end's messages (check that --cluster-key is the same file on both); connecting again while it is registered");
        }
        n.failures += 1;
        let why = format!("node {} refused this front end: {reason}", n.info.id);
        self.node_failed(i, lane, &why);
    }

    /// Answers (or retries elsewhere) every request node `i` holds.
    fn node_failed(&mut self, i: usize, lane: &mut AnswerRings, why: &str) {
        self.close_connection(i);
        self.nodes[i].batch.take();
        self.nodes[i].outstanding = 0;
        let ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.node == i)
            .map(|(&id, _)| id)
            .collect();
        let now = now_ns();
        for id in ids {
            let p = self.pending.remove(&id).expect("listed");
            if p.env.deadline != 0 {
                self.deadlines.remove(&(p.env.deadline, id));
            }
            let time_left = p.env.deadline == 0 || p.env.deadline > now;
            let again = !p.retried && time_left && self.cfg.idempotent.contains(&p.env.service);
            if let Some((gid, shard)) = p.gather {
                self.shard_failed(lane, p, gid, shard, again, why);
                continue;
            }
            if again {
                let bytes = p.payload.clone();
                self.route(lane, p.ingress, p.env, &bytes, p.payload, true);
            } else {
                Self::answer_error(lane, p.ingress, p.env, ErrorCode::Unavailable, why);
            }
        }
    }

    /// A scattered request's shard whose node failed: sent to another node of that shard
    /// when `again` allows, else the whole request answered UNAVAILABLE.
    fn shard_failed(
        &mut self,
        lane: &mut AnswerRings,
        p: Pending,
        gid: u64,
        shard: u16,
        again: bool,
        why: &str,
    ) {
        let Some(g) = self.gathers.get(&gid) else {
            return; // answered already
        };
        let split = Split {
            layout: g.layout,
            shards: g.answers.len() as u16,
        };
        let bytes = g.request.clone();
        let other = again
            .then(|| self.pick(p.env.service, Some(split.shard(shard))).ok())
            .flatten();
        match other {
            Some(i) => {
                let retry = Pending {
                    node: i,
                    retried: true,
                    ..p
                };
                self.send_to(i, &bytes, retry);
            }
            None => self.fail_gather(lane, gid, ErrorCode::Unavailable, why),
        }
    }

    fn fail_all(&mut self, lane: &mut AnswerRings, why: &str) {
        for (_, p) in self.pending.drain() {
            if p.gather.is_none() {
                Self::answer_error(lane, p.ingress, p.env, ErrorCode::Unavailable, why);
            }
        }
        for (_, g) in self.gathers.drain() {
            Self::answer_error(lane, g.ingress, g.env, ErrorCode::Unavailable, why);
        }
        self.deadlines.clear();
    }

    /// TIMEOUT for what a node has not answered by its deadline (and the grace).
    fn expire(&mut self, lane: &mut AnswerRings) {
        let now = now_ns();
        let grace = self.cfg.grace.as_nanos() as u64;
        while let Some(&(d, id)) = self.deadlines.first() {
            if d.saturating_add(grace) > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(p) = self.pending.remove(&id) {
                self.nodes[p.node].outstanding -= 1;
                if let Some((gid, _)) = p.gather {
                    self.fail_gather(
                        lane,
                        gid,
                        ErrorCode::Timeout,
                        "a shard's node did not answer by the request's deadline",
                    );
                    continue;
                }
                Self::answer_error(
                    lane,
                    p.ingress,
                    p.env,
                    ErrorCode::Timeout,
                    "the node did not answer by the request's deadline",
                );
            }
        }
    }

    /// A node offered its ring on the connection `from`: batches to it go there from now.
    /// An offer that cannot be used leaves the node on messages.
    fn ring_offered(&mut self, from: Option<EpId>, data: &[u8]) {
        let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) else {
            return tracing::warn!("remote: a ring offered on no connection of a node; ignored");
        };
        let ep = self.nodes[i].ep.expect("by_ep names connected nodes");
        match OutRing::accept(&mut self.w, ep, data) {
            Ok(ring) => {
                tracing::info!(node = %self.nodes[i].info.id, "remote: writing batches into the node's ring");
                self.nodes[i].ring = Some(ring);
            }
            Err(e) => {
                return tracing::warn!(node = %self.nodes[i].info.id, %e, "remote: a node's ring offer unusable; messages it is")
            }
        }
        // The node polls (it offered a ring): its answers can come the same way.
        if self.answer_rings.has(ep) {
            return;
        }
        let Some(offer) = self
            .answer_rings
            .make(&mut self.w, &mut self.link, ep, "remote")
        else {
            return;
        };
        if let Err(e) = self.w.send(ep, offer, true) {
            tracing::warn!(%e, "remote: offering a node an answer ring failed (messages it is)");
            self.answer_rings.retire(ep);
        }
    }

    /// A node has read its ring up to a slot: those slots are free again.
    fn ring_read(&mut self, from: Option<EpId>, data: &[u8]) {
        let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) else {
            return;
        };
        let got = match &mut self.nodes[i].ring {
            Some(ring) => ring.credited(data),
            None => Err("no ring on that connection".into()),
        };
        if let Err(e) = got {
            tracing::warn!(node = %self.nodes[i].info.id, %e, "remote: a ring credit that does not fit; ignored")
        }
    }

    /// Closes node `i`'s connection (if any); the next is made after a backoff that grows
    /// with its failures in a row.
    fn close_connection(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.ring = None;
        n.verified = false;
        n.hello = None;
        if let Some(ep) = n.ep.take() {
            self.by_ep.remove(&ep);
            self.answer_rings.retire(ep);
            self.w.close(ep);
            n.retry_at = Some(Instant::now() + backoff(n.failures));
        }
    }

    /// A node's answer to this connection's hello: the node is routed to from now, if it
    /// answers the hello sent with the id its entry has; else its connection is closed and
    /// made again after a backoff (an entry pointing at another node, or a replay).
    fn hello_answered(&mut self, from: Option<EpId>, data: &[u8]) {
        let Some(&i) = from.and_then(|ep| self.by_ep.get(&ep)) else {
            return tracing::warn!("remote: a hello's answer on no node's connection; ignored");
        };
        let n = &mut self.nodes[i];
        let why = match (wire::hello_ack(data), n.hello) {
            (Ok((nonce, id)), Some((sent, _))) if nonce == sent && id == n.info.id => None,
            (Ok((_, id)), Some(_)) if id != n.info.id => Some(format!(
                "the node at that address says it is {id:?}, not the entry's {:?}",
                n.info.id
            )),
            (Ok(_), _) => Some("an answer to no hello sent on this connection".to_string()),
            (Err(e), _) => Some(e.to_string()),
        };
        if let Some(why) = why {
            if n.failures == 0 {
                tracing::error!(node = %n.info.id, address = %n.info.address, %why,
                    "remote: a node's hello answer refused; not routing to it (connecting again later)");
            }
            n.failures += 1;
            return self.close_connection(i);
        }
        n.verified = true;
        n.hello = None;
        n.failures = 0;
        tracing::info!(node = %n.info.id, address = %n.info.address, "remote: the node answered its hello; routing to it");
        let ep = n.ep.expect("by_ep names connected nodes");
        if self.cfg.busy_poll && self.cfg.rings {
            let mut b = self.link.batch(wire::RING_ASK);
            let ask = self.link.take(&mut b);
            if let Err(e) = self.w.send(ep, ask, true) {
                tracing::warn!(%e, "remote: asking a node for a ring failed (messages it is)");
            }
        }
    }

    /// Connections whose hello went unanswered for [`HELLO_TIMEOUT`] are closed (a silent
    /// port, a peer that is not a node of this cluster): made again after a backoff. While
    /// a hello waits, the sockets UCX dialed are looked at: one that a stranger fills with
    /// bytes that are not UCX's (UCX's connection manager would spin on it, a core gone) is
    /// cut off at once, and its hello failed.
    fn hellos_unanswered(&mut self) {
        if !self.nodes.iter().any(|n| n.hello.is_some()) {
            return;
        }
        let garbled = self.w.sweep_dialed();
        for i in 0..self.nodes.len() {
            let n = &mut self.nodes[i];
            let Some((_, sent)) = n.hello else { continue };
            let cut = garbled.contains(&n.info.address);
            if !cut && sent.elapsed() < HELLO_TIMEOUT {
                continue;
            }
            if n.failures == 0 {
                let why = if cut {
                    "its address answered with bytes that are not UCX's"
                } else {
                    "no answer (not a node of this cluster, or with another --cluster-key?)"
                };
                tracing::error!(node = %n.info.id, address = %n.info.address, why,
                    "remote: a node did not answer its hello; not routing to it, connecting again later");
            }
            n.failures += 1;
            self.close_connection(i);
        }
    }

    fn connect(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        // Polling, by the node's worker address where it gave one (shared memory possible);
        // else, and always when blocking on events, through its listener.
        let by_address = self
            .cfg
            .busy_poll
            .then(|| n.info.ucx_address.as_deref().and_then(membership::from_hex))
            .flatten();
        let connected = match &by_address {
            Some(a) => self.w.connect_address(a),
            None => self.w.connect(n.info.address),
        };
        match connected {
            Ok(ep) => {
                if n.failures == 0 {
                    tracing::info!(node = %n.info.id, address = %n.info.address, "remote: connected to a node");
                }
                n.ep = Some(ep);
                n.ring = None;
                n.retry_at = None;
                n.verified = false;
                self.by_ep.insert(ep, i);
                // Nothing is routed here before the node answers this (`hello_answered`).
                let nonce: u64 = rand::random();
                let mut b = self.link.batch(wire::HELLO);
                b.push_hello(nonce);
                let hello = self.link.take(&mut b);
                n.hello = Some((nonce, Instant::now()));
                if let Err(e) = self.w.send(ep, hello, true) {
                    tracing::warn!(node = %n.info.id, %e, "remote: a hello not sent (its answer's wait times out)");
                }
            }
            Err(e) => {
                if n.failures == 0 {
                    tracing::warn!(node = %n.info.id, %e, "remote: cannot connect to a node");
                }
                n.failures += 1;
                n.retry_at =
                    Some(Instant::now() + backoff(n.failures).max(Duration::from_millis(500)));
            }
        }
    }

    fn reconnect(&mut self) {
        self.hellos_unanswered();
        let now = Instant::now();
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if !n.gone && n.ep.is_none() && n.retry_at.is_none_or(|t| t <= now) {
                self.connect(i);
            }
        }
    }

    fn join(&mut self, info: NodeInfo, lane: &mut AnswerRings) {
        let window = self.cfg.window.min(info.capacity.max(1));
        if let Some(i) = self
            .nodes
            .iter()
            .position(|n| n.info.id == info.id && !n.gone)
        {
            if self.nodes[i].info.address != info.address {
                self.node_failed(i, lane, "the node serving this request restarted");
            }
            self.nodes[i].info = info;
            self.nodes[i].window = window;
            return;
        }
        tracing::info!(node = %info.id, address = %info.address,
            services = ?info.services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), "remote: a node joined");
        // A slot of a node that left is reused: indexes held by pending requests are only
        // of live nodes (a leaving node's requests are answered when it leaves).
        let node_label = NodeLabels {
            node: info.id.clone(),
        };
        let counters = NodeCounters {
            parts: self.metrics.parts.get_or_create(&node_label).clone(),
            messages: self.metrics.messages.get_or_create(&node_label).clone(),
            ring_writes: self.metrics.ring_writes.get_or_create(&node_label).clone(),
            ring_answers: self.metrics.ring_answers.get_or_create(&node_label).clone(),
            outstanding: self
                .metrics
                .outstanding
                .get_or_create(&LaneLabels {
                    node: info.id.clone(),
                    lane: self.index.to_string(),
                })
                .clone(),
        };
        let node = Node {
            counters,
            info,
            ep: None,
            ring: None,
            retry_at: None,
            verified: false,
            hello: None,
            failures: 0,
            outstanding: 0,
            window,
            batch: self.link.batch(wire::REQUESTS),
            gone: false,
        };
        let i = match self.nodes.iter().position(|n| n.gone) {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.connect(i);
    }

    fn leave(&mut self, id: &str, lane: &mut AnswerRings) {
        if let Some(i) = self.nodes.iter().position(|n| n.info.id == id && !n.gone) {
            tracing::warn!(node = %id, held = self.nodes[i].outstanding, "remote: a node left");
            self.node_failed(i, lane, "the node serving this request left the cluster");
            self.nodes[i].gone = true;
            self.nodes[i].retry_at = None;
        }
    }

    fn apply(&mut self, c: Change, lane: &mut AnswerRings) {
        match c {
            Change::Listed(nodes) => {
                let listed: HashSet<String> = nodes.iter().map(|n| n.id.clone()).collect();
                let known: Vec<String> = self
                    .nodes
                    .iter()
                    .filter(|n| !n.gone && !listed.contains(&n.info.id))
                    .map(|n| n.info.id.clone())
                    .collect();
                for id in known {
                    self.leave(&id, lane);
                }
                for n in nodes {
                    self.join(n, lane);
                }
            }
            Change::Joined(n) => self.join(n, lane),
            Change::Left(id) => self.leave(&id, lane),
        }
        self.relayout();
    }
}
