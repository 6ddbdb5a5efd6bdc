//! The front end's remote engine: each lane is a thread that takes the requests its ingresses
//! admitted (auth, limits and deadlines are the ingress's, as for any engine), sends each to
//! the node serving its service with the fewest requests outstanding, batched per node, and
//! writes each node's answer back to the ingress that asked. Every request gets one answer:
//! the node's, or TIMEOUT at its deadline, or (the node gone) a retry on another node for a
//! service that is safe to run twice, else UNAVAILABLE. A node's window bounds what is in
//! flight to it; with every window full a request is answered OVERLOADED at once.

use crate::membership::{self, Change, NodeInfo};
use crate::node::SPIN;
use crate::wire::{self, Batch, Request};
use cohort_engine::clock::now_ns;
use cohort_engine::wiring::AnswerRings;
use cohort_engine::LaneEnds;
use cohort_mq::Envelope;
use cohort_proto::{ErrorCode, ErrorPayload};
use cohort_ucx::{EpId, Event, Mode, Worker};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct RemoteConfig {
    /// etcd's client endpoints (`http://host:port`).
    pub etcd: Vec<String>,
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
}

struct Pending {
    ingress: usize,
    env: Envelope,
    node: usize,
    /// The payload, kept for a retry (idempotent services only; else empty).
    payload: Vec<u8>,
    retried: bool,
}

struct Node {
    info: NodeInfo,
    ep: Option<EpId>,
    /// When to connect again after a failed connection.
    retry_at: Option<Instant>,
    /// Failures since the last connection that carried an answer (the first is logged).
    failures: u32,
    outstanding: u32,
    window: u32,
    batch: Batch,
    gone: bool,
}

struct Lane {
    cfg: RemoteConfig,
    w: Worker,
    nodes: Vec<Node>,
    by_ep: HashMap<EpId, usize>,
    pending: HashMap<u64, Pending>,
    deadlines: BTreeSet<(u64, u64)>,
    next_id: u64,
    /// Late answers for requests already answered (timed out, failed over): dropped.
    stale: u64,
    /// UCX's event fd (-1 when busy polling).
    efd: std::os::fd::RawFd,
}

pub struct RemoteEngine {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl RemoteEngine {
    /// One thread per lane, each with its own UCX worker and its own view of the membership.
    pub fn start(cfg: &RemoteConfig, lanes: Vec<LaneEnds>) -> anyhow::Result<RemoteEngine> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for lane in lanes {
            let (tx, rx) = crossbeam_channel::unbounded();
            membership::watch(cfg.etcd.clone(), tx);
            let (cfg, stop) = (cfg.clone(), stop.clone());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            threads.push(
                std::thread::Builder::new()
                    .name("remote-lane".into())
                    .spawn(move || {
                        match Worker::new(if cfg.busy_poll {
                            Mode::Polled
                        } else {
                            Mode::Events
                        }) {
                            Ok(w) => {
                                ready_tx.send(Ok(())).ok();
                                run(cfg, w, lane, rx, &stop)
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
        Ok(RemoteEngine { stop, threads })
    }

    pub fn shutdown(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            t.join().ok();
        }
    }
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
        cfg,
        w,
        nodes: Vec::new(),
        by_ep: HashMap::new(),
        pending: HashMap::new(),
        deadlines: BTreeSet::new(),
        next_id: 1,
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

impl Lane {
    fn answer_error(
        lane: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        code: ErrorCode,
        why: &str,
    ) {
        lane.send_error(ingress, env, &ErrorPayload::new(code, why));
    }

    /// Sends a request to the least-loaded node serving its service, or answers it.
    /// `bytes` is the request's payload; `kept`, the copy held for a retry (empty for a
    /// service that is never sent twice).
    fn route(
        &mut self,
        lane: &mut AnswerRings,
        ingress: usize,
        env: Envelope,
        bytes: &[u8],
        kept: Vec<u8>,
        retried: bool,
    ) {
        let now = now_ns();
        if env.deadline != 0 && now >= env.deadline {
            return Self::answer_error(
                lane,
                ingress,
                env,
                ErrorCode::Timeout,
                "deadline passed before a node took it",
            );
        }
        let mut serving = false;
        let best = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.gone && n.info.services.iter().any(|s| s.id == env.service))
            .inspect(|_| serving = true)
            .filter(|(_, n)| n.ep.is_some() && n.outstanding < n.window)
            .min_by_key(|(_, n)| n.outstanding)
            .map(|(i, _)| i);
        let Some(i) = best else {
            let (code, why) = if serving {
                (
                    ErrorCode::Overloaded,
                    "every node serving this service is at its window (or reconnecting)",
                )
            } else {
                (ErrorCode::Unavailable, "no node serves this service now")
            };
            return Self::answer_error(lane, ingress, env, code, why);
        };
        let id = self.next_id;
        self.next_id += 1;
        let node = &mut self.nodes[i];
        node.outstanding += 1;
        node.batch.push_request(&Request {
            id,
            service: env.service,
            class: env.status,
            request_id: env.request_id,
            deadline_left_us: match env.deadline {
                0 => 0,
                d => ((d - now) / 1000).clamp(1, u64::from(u32::MAX)) as u32,
            },
            payload: bytes,
        });
        if env.deadline != 0 {
            self.deadlines.insert((env.deadline, id));
        }
        self.pending.insert(
            id,
            Pending {
                ingress,
                env,
                node: i,
                payload: kept,
                retried,
            },
        );
    }

    fn flush(&mut self, lane: &mut AnswerRings) {
        let mut failed = Vec::new();
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if n.batch.records() == 0 {
                continue;
            }
            let ep = n.ep.expect("batches go to connected nodes");
            if let Err(e) = self.w.send(ep, n.batch.take(), true) {
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
            Event::Message { data, .. } => {
                let got = wire::answers(&data, |a| match self.pending.remove(&a.id) {
                    Some(p) => {
                        if p.env.deadline != 0 {
                            self.deadlines.remove(&(p.env.deadline, a.id));
                        }
                        let n = &mut self.nodes[p.node];
                        n.outstanding -= 1;
                        n.failures = 0;
                        let env = Envelope {
                            status: a.status,
                            ..p.env
                        };
                        lane.send(p.ingress, env, a.payload);
                    }
                    None => self.stale += 1,
                });
                if let Err(e) = got {
                    tracing::warn!(%e, "remote: a malformed answer batch from a node");
                }
            }
            Event::Failed { ep, why } => {
                if let Some(i) = self.by_ep.remove(&ep) {
                    let n = &mut self.nodes[i];
                    if n.failures == 0 {
                        tracing::warn!(node = %n.info.id, %why, "remote: the connection to a node failed; connecting again while it is registered");
                    }
                    n.failures += 1;
                    self.nodes[i].ep = None;
                    self.nodes[i].retry_at = Some(Instant::now() + Duration::from_millis(200));
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

    /// Answers (or retries elsewhere) every request node `i` holds.
    fn node_failed(&mut self, i: usize, lane: &mut AnswerRings, why: &str) {
        if let Some(ep) = self.nodes[i].ep.take() {
            self.by_ep.remove(&ep);
            self.w.close(ep);
            self.nodes[i].retry_at = Some(Instant::now() + Duration::from_millis(200));
        }
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
            if !p.retried && time_left && self.cfg.idempotent.contains(&p.env.service) {
                let bytes = p.payload.clone();
                self.route(lane, p.ingress, p.env, &bytes, p.payload, true);
            } else {
                Self::answer_error(lane, p.ingress, p.env, ErrorCode::Unavailable, why);
            }
        }
    }

    fn fail_all(&mut self, lane: &mut AnswerRings, why: &str) {
        for (_, p) in self.pending.drain() {
            Self::answer_error(lane, p.ingress, p.env, ErrorCode::Unavailable, why);
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
                n.retry_at = None;
                self.by_ep.insert(ep, i);
            }
            Err(e) => {
                tracing::warn!(node = %n.info.id, %e, "remote: cannot connect to a node");
                n.retry_at = Some(Instant::now() + Duration::from_millis(500));
            }
        }
    }

    fn reconnect(&mut self) {
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
        let node = Node {
            info,
            ep: None,
            retry_at: None,
            failures: 0,
            outstanding: 0,
            window,
            batch: Batch::new(wire::REQUESTS),
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
    }
}
