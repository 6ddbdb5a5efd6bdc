//! A node's ingress: a UCX listener that front ends connect to. Each message is a batch of
//! requests; each request goes into the node's engines through an ordinary [`IngressEnds`]
//! (so the engines, admission and deadlines are the ones `cohort serve` runs), and the
//! engines' answers go back, batched per front end, on the connection the request came by.
//!
//! A busy-polling node also takes batches by one-sided writes (Lynx's design): a front end
//! that asks gets a ring in the node's registered memory, writes its batches there, and the
//! node polls the slots; a front end that offers a ring of its own gets its answers written
//! there the same way ([`crate::ring`]).

use crate::link::{ClusterKey, Link};
use crate::ring::{InRings, OutRing};
use crate::tuning::SPIN;
use crate::wait::EventWait;
use crate::wire::{self, Answer, Batch};
use cohort_engine::clock::now_ns;
use cohort_engine::{IngressEnds, Metrics, Shed};
use cohort_mq::Envelope;
use cohort_proto::{ErrorCode, ErrorPayload};
use cohort_ucx::{EpId, Event, Worker};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests a node holds at once, from every front end together: a token names one.
pub const MAX_HELD: usize = 1 << 20;

/// Who asked for a request the node holds: the connection and the front end's id.
#[derive(Clone, Copy)]
struct Asker {
    ep: EpId,
    id: u64,
    service: u16,
    arrived: Instant,
    /// Its connection failed: the answer has nowhere to go (the front end answered it).
    orphan: bool,
}

/// Tokens for requests in the node's engines (a slab with a free list: no allocation per
/// request once warm).
struct Held {
    slots: Vec<Option<Asker>>,
    free: Vec<u32>,
}

impl Held {
    fn insert(&mut self, a: Asker) -> Option<u32> {
        if let Some(t) = self.free.pop() {
            self.slots[t as usize] = Some(a);
            return Some(t);
        }
        if self.slots.len() >= MAX_HELD {
            return None;
        }
        self.slots.push(Some(a));
        Some(self.slots.len() as u32 - 1)
    }

    fn take(&mut self, t: u32) -> Option<Asker> {
        let a = self.slots.get_mut(t as usize)?.take()?;
        self.free.push(t);
        Some(a)
    }

    fn held(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Marks what `ep` asked for as having no one to answer (its connection failed): a new
    /// connection may get the same handle, so answers are dropped by request, not by handle.
    fn orphan(&mut self, ep: EpId) {
        for a in self.slots.iter_mut().flatten() {
            if a.ep == ep {
                a.orphan = true;
            }
        }
    }
}

pub struct NodeIngress {
    pub bound: SocketAddr,
    /// The id it answers a front end's hello with (and registers under).
    pub id: String,
    /// The worker's UCX address (for front ends that connect by it).
    pub address: Vec<u8>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NodeIngress {
    /// Listens on `listen` (port 0: any) and serves front ends through `ends`. `busy_poll`:
    /// poll UCX without ever blocking (a core spent; shared-memory transports allowed), else
    /// block on UCX's events and the engines' doorbell when idle. `id`: the node's id (None:
    /// the address bound), which it gives a front end that says hello.
    pub fn start(
        listen: SocketAddr,
        id: Option<String>,
        ends: IngressEnds,
        metrics: Arc<Metrics>,
        busy_poll: bool,
        key: Option<ClusterKey>,
    ) -> anyhow::Result<NodeIngress> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let given = id.clone();
        let thread = std::thread::Builder::new()
            .name("node-ingress".into())
            .spawn(move || {
                let started = if busy_poll {
                    Worker::with_rma(crate::tuning::mode(busy_poll))
                } else {
                    Worker::new(crate::tuning::mode(busy_poll))
                }
                .map_err(anyhow::Error::from)
                .and_then(|mut w| {
                    let b = (w.listen(listen)?, w.address()?);
                    let wait = (!busy_poll).then(|| EventWait::new(&w)).transpose()?;
                    Ok((w, b, wait))
                });
                let (mut w, wait, bound) = match started {
                    Ok((w, b, wait)) => {
                        let bound = b.0;
                        tx.send(Ok(b)).ok();
                        (w, wait, bound)
                    }
                    Err(e) => {
                        tx.send(Err(e)).ok();
                        return;
                    }
                };
                if let Some(wait) = &wait {
                    ends.set_wake(wait.doorbell());
                }
                let id = given.unwrap_or_else(|| bound.to_string());
                serve(&mut w, ends, &metrics, &s, wait.as_ref(), key, &id);
            })?;
        let (bound, address) = rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the node's ingress thread ended"))??;
        let id = id.unwrap_or_else(|| bound.to_string());
        Ok(NodeIngress {
            bound,
            id,
            address,
            stop,
            thread: Some(thread),
        })
    }

    /// Stops taking requests, answers what the engines still return for a moment, closes.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
    }
}

impl Drop for NodeIngress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Every answer the node gives is counted as `serve`'s ingresses count theirs.
fn error_answer(
    out: &mut HashMap<EpId, Batch>,
    link: &Link,
    metrics: &Metrics,
    a: Asker,
    e: &ErrorPayload,
) {
    metrics.answered(a.service, e.code.label(), a.arrived.elapsed());
    out.entry(a.ep)
        .or_insert_with(|| link.batch(wire::ANSWERS))
        .push_answer(&Answer {
            id: a.id,
            status: e.code as u16,
            payload: e.message.as_bytes(),
        });
}

fn serve(
    w: &mut Worker,
    mut ends: IngressEnds,
    metrics: &Metrics,
    stop: &AtomicBool,
    wait: Option<&EventWait>,
    key: Option<ClusterKey>,
    id: &str,
) {
    let mut link = Link::new(key.clone());
    let mut held = Held {
        slots: Vec::new(),
        free: Vec::new(),
    };
    let mut out: HashMap<EpId, Batch> = HashMap::new();
    let mut rings = Rings {
        requests: InRings::default(),
        answers: HashMap::new(),
        slot: Vec::new(),
        link: Link::new(key),
    };
    let mut from_rings = Vec::new();
    let mut batches: Vec<(EpId, Vec<u8>, usize)> = Vec::new();
    let mut dropped: Vec<EpId> = Vec::new();
    let mut idle_since: Option<Instant> = None;
    let mut stopping_at: Option<Instant> = None;
    // Connections refused (their message failed the key's check), closed once their refusal
    // has had a moment to leave: UCX's close is forced and drops what is still unsent.
    let mut refusing: Vec<(EpId, Instant)> = Vec::new();
    loop {
        if stopping_at.is_none() && stop.load(Ordering::Acquire) {
            stopping_at = Some(Instant::now());
        }
        if let Some(t) = stopping_at {
            // Answers for what the engines hold, a short while; then the front ends time out
            // or fail the rest when the connection closes.
            if held.held() == 0 || t.elapsed() > Duration::from_secs(2) {
                break;
            }
        }
        dropped.clear();
        refusing.retain(|&(ep, at)| {
            let due = at.elapsed() >= REFUSAL_LINGER;
            if due {
                w.close(ep);
            }
            !due
        });
        // A stranger's bytes at the listener never become a connection request, yet spin
        // UCX's connection manager for good: such connections are closed (at most one look
        // a second; docs/cluster.md).
        w.sweep_stalled();
        let mut busy = w.progress();
        for ev in w.take_events() {
            busy = true;
            match ev {
                Event::Message {
                    from: Some(ep),
                    data: message,
                } => {
                    if refusing.iter().any(|&(r, _)| r == ep) {
                        continue; // refused already: nothing more of it is read
                    }
                    let data = match link.open(&message) {
                        Ok(inner) => inner,
                        Err(why) => {
                            // Not from a front end holding this cluster's key: nothing of it
                            // runs, and the connection is closed (the front end, if honest
                            // but misconfigured, answers what it sent and says so). It is
                            // told why first: else it sees only a reset connection.
                            tracing::warn!(%why, "node: refused a message; closing that connection");
                            let reason = format!(
                                "{why} (is --cluster-key the same file on the front end and the node?)"
                            );
                            let _ = w.send(ep, wire::refusal(&reason), true);
                            forget_connection(&mut out, &mut held, &mut rings, ep);
                            refusing.push((ep, Instant::now()));
                            dropped.push(ep);
                            continue;
                        }
                    };
                    match wire::kind(data) {
                        Ok(wire::HELLO) => {
                            hello(w, &mut link, ep, data, id);
                            continue;
                        }
                        Ok(wire::RING_ASK) => {
                            rings.offer(w, &mut link, ep, wait.is_none());
                            continue;
                        }
                        Ok(wire::RING_OFFER) => {
                            rings.accept(w, ep, data);
                            continue;
                        }
                        Ok(wire::RING_CREDIT) => {
                            rings.credited(ep, data);
                            continue;
                        }
                        _ => {}
                    }
                    // (The batch stays in the message's buffer: where its plain bytes start.)
                    let at = data.as_ptr() as usize - message.as_ptr() as usize;
                    batches.push((ep, message, at));
                }
                Event::Message { from: None, .. } => {
                    tracing::warn!("node: a message with no reply endpoint; dropped");
                }
                Event::Failed { ep, why } => {
                    // Answers still owed there are dropped when they come (the front end
                    // answered those requests itself when the connection failed).
                    out.remove(&ep);
                    held.orphan(ep);
                    rings.forget(ep);
                    tracing::info!(%why, "node: a front end's connection ended");
                }
                Event::Accepted(_) => tracing::info!("node: a front end connected"),
            }
        }
        let credits = rings
            .requests
            .read(w, &mut rings.slot, &mut link, &mut from_rings);
        for (ep, batch) in from_rings.drain(..) {
            busy = true;
            match batch {
                Ok(data) => batches.push((ep, data, 0)),
                Err(why) => {
                    tracing::warn!(%why, "node: refused a ring's batch; closing that connection");
                    drop_connection(w, &mut out, &mut held, &mut rings, ep);
                    dropped.push(ep);
                }
            }
        }
        // Every batch of this turn, by message or through a ring, into the engines (but
        // those of a connection closed this turn: no one would take their answers).
        for (ep, buf, at) in batches.drain(..) {
            if dropped.contains(&ep) {
                continue;
            }
            Taking {
                held: &mut held,
                out: &mut out,
                link: &link,
                metrics,
                ends: &mut ends,
                stopping: stopping_at.is_some(),
            }
            .requests(ep, &buf[at..]);
        }
        // The credits after the requests are on their way (a credit waits; a request should not).
        for (ep, credit) in credits {
            if dropped.contains(&ep) {
                continue;
            }
            if let Err(e) = w.send(ep, credit, true) {
                tracing::warn!(%e, "node: a ring's credit not sent");
            }
        }
        let answered = ends.drain_answers(4096, |m| {
            if let Some(a) = held.take(m.env.token) {
                let outcome = match ErrorCode::from_u16(m.env.status) {
                    _ if m.env.status == 0 => "ok",
                    Some(code) => code.label(),
                    None => ErrorCode::Internal.label(),
                };
                metrics.answered(a.service, outcome, a.arrived.elapsed());
                if a.orphan {
                    return;
                }
                out.entry(a.ep)
                    .or_insert_with(|| link.batch(wire::ANSWERS))
                    .push_answer(&Answer {
                        id: a.id,
                        status: m.env.status,
                        payload: m.payload,
                    });
            }
        });
        busy |= answered > 0;
        for (&ep, batch) in out.iter_mut() {
            if batch.records() > 0 {
                if let Err(e) = rings.send(w, &mut link, ep, batch) {
                    tracing::warn!(%e, "node: answers not sent (the front end's connection failed)");
                    dropped.push(ep);
                }
            }
        }
        // A front end that cannot be written to is gone: what it asked for has no one to
        // take it (it answers those itself).
        for ep in dropped.drain(..) {
            if out.contains_key(&ep) {
                drop_connection(w, &mut out, &mut held, &mut rings, ep);
            }
        }
        if busy {
            idle_since = None;
            continue;
        }
        // Idle: spin a moment (the next request often follows), then block on UCX's events
        // and the engines' doorbell.
        let since = *idle_since.get_or_insert_with(Instant::now);
        match wait {
            Some(wait) if since.elapsed() > SPIN => {
                wait.wait(w, Duration::from_millis(20), || ends.answers_waiting())
            }
            _ => std::hint::spin_loop(),
        }
    }
}

/// A front end's hello (it routes nothing here before the answer): answered with its nonce
/// and this node's id, sealed as every message. A malformed one is ignored: that front end
/// then never routes here, and says so.
fn hello(w: &mut Worker, link: &mut Link, ep: EpId, data: &[u8], id: &str) {
    let nonce = match wire::hello(data) {
        Ok(n) => n,
        Err(e) => return tracing::warn!(%e, "node: a malformed hello; not answered"),
    };
    let mut b = link.batch(wire::HELLO_ACK);
    b.push_hello_ack(nonce, id);
    // As a reply: the front end learns which connection it came on.
    if let Err(e) = w.send(ep, link.take(&mut b), true) {
        tracing::warn!(%e, "node: a hello's answer not sent");
    }
}

/// Where a batch's requests go: into the engines, or answered at once (stopping, full).
struct Taking<'a> {
    held: &'a mut Held,
    out: &'a mut HashMap<EpId, Batch>,
    link: &'a Link,
    metrics: &'a Metrics,
    ends: &'a mut IngressEnds,
    stopping: bool,
}

impl Taking<'_> {
    /// Every request of a batch that came on `ep` (by message or through its ring).
    fn requests(&mut self, ep: EpId, data: &[u8]) {
        let now = now_ns();
        let arrived = Instant::now();
        let got = wire::requests(data, |r| {
            let asker = Asker {
                ep,
                id: r.id,
                service: r.service,
                arrived,
                orphan: false,
            };
            if self.stopping {
                let e = ErrorPayload::new(ErrorCode::Unavailable, "the node is stopping");
                return error_answer(self.out, self.link, self.metrics, asker, &e);
            }
            let Some(token) = self.held.insert(asker) else {
                self.metrics.refused(r.service, Shed::Ingress);
                let e = Shed::Ingress.error("the node holds as many requests as it can");
                return error_answer(self.out, self.link, self.metrics, asker, &e);
            };
            let env = Envelope {
                token,
                service: r.service,
                status: r.class,
                request_id: r.request_id,
                deadline: match r.deadline_left_us {
                    0 => 0,
                    us => now + u64::from(us) * 1000,
                },
                arrived: now,
            };
            if let Err(refusal) = self.ends.send(env, r.payload) {
                self.held.take(token);
                if let Some(why) = refusal.shed() {
                    self.metrics.refused(r.service, why);
                }
                error_answer(
                    self.out,
                    self.link,
                    self.metrics,
                    asker,
                    &refusal.error(r.service),
                );
            }
        });
        if let Err(e) = got {
            tracing::warn!(%e, "node: a malformed request batch; its requests from there on are not answered");
        }
    }
}

/// Closes a front end's connection: what it asked for is not answered there (it answers
/// those itself when the connection fails), and its rings are given up.
fn drop_connection(
    w: &mut Worker,
    out: &mut HashMap<EpId, Batch>,
    held: &mut Held,
    rings: &mut Rings,
    ep: EpId,
) {
    forget_connection(out, held, rings, ep);
    w.close(ep);
}

/// `drop_connection` but for the close (a refused connection is closed a moment later).
fn forget_connection(out: &mut HashMap<EpId, Batch>, held: &mut Held, rings: &mut Rings, ep: EpId) {
    out.remove(&ep);
    held.orphan(ep);
    rings.forget(ep);
}

/// How long a refused connection stays open for its refusal to leave (nothing of it is read
/// meanwhile).
const REFUSAL_LINGER: Duration = Duration::from_millis(100);

/// The rings of the node's front ends: those they write their requests into (in the node's
/// memory), and those they offered for their answers (in theirs).
struct Rings {
    requests: InRings<EpId>,
    answers: HashMap<EpId, OutRing>,
    /// Where a ring's batch is copied to be opened.
    slot: Vec<u8>,
    /// The seal of answers written into rings: a session of its own (`front::Lane::ring_link`).
    link: Link,
}

impl Rings {
    fn forget(&mut self, ep: EpId) {
        self.requests.retire(ep);
        self.answers.remove(&ep);
    }

    /// A front end asked for a ring: registers one and offers it, or declines by silence (a
    /// node that blocks when idle would not see writes; too many rings): the front end then
    /// keeps sending messages.
    fn offer(&mut self, w: &mut Worker, link: &mut Link, ep: EpId, polling: bool) {
        if !polling || self.requests.has(ep) {
            return;
        }
        let Some(offer) = self.requests.make(w, link, ep, "node") else {
            return;
        };
        // As a reply: the front end learns which connection it came on.
        if let Err(e) = w.send(ep, offer, true) {
            tracing::warn!(%e, "node: a ring's offer not sent");
            self.requests.retire(ep);
        }
    }

    /// A front end offered a ring for its answers: they are written there from now.
    fn accept(&mut self, w: &mut Worker, ep: EpId, offer: &[u8]) {
        match OutRing::accept(w, ep, offer) {
            Ok(r) => {
                self.answers.insert(ep, r);
            }
            Err(e) => {
                tracing::warn!(%e, "node: a front end's answer ring is unusable; messages it is")
            }
        }
    }

    fn credited(&mut self, ep: EpId, credit: &[u8]) {
        let got = match self.answers.get_mut(&ep) {
            Some(r) => r.credited(credit),
            None => Err("no answer ring on that connection".into()),
        };
        if let Err(e) = got {
            tracing::warn!(%e, "node: a ring credit that does not fit; ignored");
        }
    }

    /// Sends `ep`'s answers: into its ring where it offered one with room, else as a message.
    fn send(
        &mut self,
        w: &mut Worker,
        link: &mut Link,
        ep: EpId,
        batch: &mut Batch,
    ) -> Result<(), cohort_ucx::Error> {
        match self.answers.get_mut(&ep) {
            Some(ring) if ring.takes(batch.bytes()) => ring.write(w, &self.link.take(batch)),
            // (As a reply: the front end learns which connection it came on.)
            _ => w.send(ep, link.take(batch), false),
        }
    }
}
