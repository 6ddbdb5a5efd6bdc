//! The rings between ingress threads and engine lanes: the engine boundary.
//!
//! Every (ingress thread, engine lane) pair has two single-producer single-consumer mqueues:
//! requests (ingress -> lane) and answers (lane -> ingress). An ingress is an io thread (one
//! UDP socket) or the shared TCP/HTTP side; a lane is one consumer thread of an engine (a cpu
//! worker, a GPU's control thread). [`wire`] builds them all at start-up; each side then owns
//! its ends ([`IngressEnds`], [`LaneEnds`]) and no lock or allocation sits between them.

use crate::bell::{Bell, Wake};
use crate::dispatch::{hybrid_choice, DispatchPolicy, LaneRate};
use crate::inflight::LaneRef;
use crate::metrics::Shed;
use bytes::Bytes;
use cohort_mq::{
    channel, channel_in, Consumer, Envelope, Layout, Message, Producer, RingMemory, SendError,
};
use cohort_proto::{ErrorCode, ErrorPayload};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// Slot sizes: a request or answer up to `stride - 48` bytes sits in its slot; larger ones
/// (rare: k-NN with dimension > 240 as f32, big echo payloads) spill to the heap.
pub const DEFAULT_STRIDE: usize = 1024;

/// One engine as the wiring sees it.
#[derive(Debug, Clone)]
pub struct EngineSpec {
    /// The engine kind's name (`cpu`, `gpu-cohort`, ...): metrics label and messages.
    pub name: String,
    /// Consumer threads, one ring pair per ingress each.
    pub lanes: usize,
    pub policy: DispatchPolicy,
    /// Wire ids of the services this engine runs.
    pub services: Vec<u16>,
    /// Slots per request ring and per answer ring (powers of two).
    pub slots: usize,
    /// Admission by deadline: a request whose lane would, at its measured answer rate, not
    /// reach it before its deadline is refused OVERLOADED at once (503 + Retry-After on
    /// HTTP) instead of waiting in the queue to time out.
    pub admit_by_deadline: bool,
    /// At most this many requests in the engine at once (sent by any ingress and not yet
    /// answered: waiting in a ring, in a device slot or running); past it, OVERLOADED. None:
    /// only the rings bound it (a batching lane empties its rings into device slots, so they
    /// do not bound what it holds).
    pub max_queued: Option<usize>,
    /// Bytes of a ring slot, header included ([`DEFAULT_STRIDE`] unless the engine must carry
    /// larger requests in place: the persistent engine's GPU reads them from the ring and
    /// cannot follow a spill to the heap).
    pub stride: usize,
}

impl EngineSpec {
    /// The slot stride that carries payloads of up to `bytes` in place (at least
    /// [`DEFAULT_STRIDE`], a power of two).
    pub fn stride_for(bytes: usize) -> usize {
        (cohort_mq::SLOT_HEADER_BYTES + bytes)
            .next_power_of_two()
            .max(DEFAULT_STRIDE)
    }
}

/// An engine's places for requests in flight across all its ingresses, against
/// `--max-queue`: `count` is the places the ingresses hold. An ingress reserves places a
/// run at a time (`EngineTx::credits`) and gives them back a run at a time, so the count's
/// cache line is not written by every thread per request (two writes per request from every
/// ingress capped the engines' host side, docs/gpu.md). Never more than `limit` requests are
/// in flight; a place an idle ingress holds in reserve (at most 2 runs) is not lent to another.
#[derive(Debug)]
struct Queued {
    count: std::sync::atomic::AtomicUsize,
    limit: usize,
}

impl Queued {
    /// Reserves up to `want` places (fewer near the limit): how many, 0 when none is left.
    fn reserve(&self, want: usize) -> usize {
        let mut cur = self.count.load(Ordering::Acquire);
        loop {
            let got = want.min(self.limit.saturating_sub(cur));
            if got == 0 {
                return 0;
            }
            match self.count.compare_exchange_weak(
                cur,
                cur + got,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return got,
                Err(now) => cur = now,
            }
        }
    }

    fn give_back(&self, n: usize) {
        if n > 0 {
            let before = self.count.fetch_sub(n, Ordering::AcqRel);
            debug_assert!(before >= n, "more places given back than taken");
        }
    }
}

/// The batched client load the defaults are sized for: 32 clients with 256 rows each in
/// flight (a knn request of N queries, an `/v2` request of N rows, takes N places).
pub const BATCHED_LOAD_ROWS: usize = 32 * 256;

/// `--max-queue`'s default, in rows: [`BATCHED_LOAD_ROWS`] twice over, so that such a load
/// is admitted whole while as much again waits in the rings and device slots (a GPU cohort
/// engine holds `streams x max_cohort` rows in flight on the device besides, 4 x 256 by
/// default: far below this). Still a bound: past it a request is refused, never dropped.
pub const DEFAULT_MAX_QUEUE: usize = 2 * BATCHED_LOAD_ROWS;

/// Slots per request ring of an engine of `lanes` lanes fed by `ingresses` io threads under a
/// bound of `max_queue` rows in flight: all the rings together hold about `max_queue`, and
/// one ingress's rings together hold at least `min(max_queue, BATCHED_LOAD_ROWS)`, so that
/// a batched load whose connections all landed on one io thread is not refused by a full
/// ring while the engine's bound has room (rings of 1 KiB slots: 8 MiB per ingress at most
/// for that floor, request and answer rings each).
pub fn slots_for(max_queue: usize, lanes: usize, ingresses: usize) -> usize {
    let lanes = lanes.max(1);
    let shared = max_queue / (lanes * ingresses.max(1));
    let one_ingress = max_queue.min(BATCHED_LOAD_ROWS).div_ceil(lanes);
    shared
        .max(one_ingress)
        .clamp(8, 1 << 14)
        .next_power_of_two()
}

/// Whether a lane's thread still runs. Set false by [`HealthGuard`] when the thread ends for
/// any reason, a panic included; the ingresses then answer what the lane held. `restarts`
/// counts the times the lane lost what it held and went on (a GPU watchdog restarting its
/// kernels): the ingresses answer what they had sent it before, as for a dead lane.
#[derive(Default)]
struct LaneHealth {
    dead: AtomicBool,
    restarts: AtomicU32,
}

/// Dropped when a lane's thread ends (returning or unwinding).
pub struct HealthGuard(Arc<LaneHealth>);

impl Drop for HealthGuard {
    fn drop(&mut self) {
        self.0.dead.store(true, Ordering::Release);
    }
}

/// Where an ingress is woken when answers arrive; set by the ingress once it exists.
type WakeCell = Arc<OnceLock<Arc<dyn Wake>>>;

pub struct Wiring {
    pub ingresses: Vec<IngressEnds>,
    /// engines[e][l]: lane l of engine e.
    pub engines: Vec<Vec<LaneEnds>>,
}

/// Where a request ring lives: `(engine, lane, ingress, bytes)` -> memory, or None for
/// ordinary host memory. Rings in provided memory never spill (a device reads them).
pub type RequestMemory<'a> =
    &'a mut dyn FnMut(usize, usize, usize, usize) -> Option<Box<dyn RingMemory>>;

pub fn wire(ingresses: usize, engines: &[EngineSpec]) -> Wiring {
    wire_in(ingresses, engines, &mut |_, _, _, _| None)
}

/// [`wire`], with request rings in memory that `memory` provides (the persistent GPU engine's
/// rings in mapped host memory, polled by the GPU).
pub fn wire_in(ingresses: usize, engines: &[EngineSpec], memory: RequestMemory<'_>) -> Wiring {
    assert!(ingresses >= 1, "at least one ingress");
    assert!(engines.len() < u16::MAX as usize);
    let wakes: Vec<WakeCell> = (0..ingresses).map(|_| Arc::new(OnceLock::new())).collect();
    let mut routes = Vec::new();
    let mut ing_engines: Vec<Vec<EngineTx>> = (0..ingresses).map(|_| Vec::new()).collect();
    let mut ing_answers: Vec<Vec<(LaneRef, Consumer)>> =
        (0..ingresses).map(|_| Vec::new()).collect();
    let mut lanes_out = Vec::new();
    for (e, spec) in engines.iter().enumerate() {
        assert!(spec.lanes >= 1, "engine {} has no lane", spec.name);
        for &s in &spec.services {
            assert!(
                !routes.iter().any(|&(r, _)| r == s),
                "service {s} routed to two engines"
            );
            routes.push((s, e as u16));
        }
        let name: Arc<str> = spec.name.as_str().into();
        let queued = spec.max_queued.map(|limit| {
            assert!(limit >= 1, "engine {} admits nothing", spec.name);
            Arc::new(Queued {
                count: 0.into(),
                limit,
            })
        });
        // Places an ingress reserves at a time: what its reserve may keep from the others is
        // at most 2 runs, all ingresses together at most an eighth of the bound (1: exact).
        let run = spec
            .max_queued
            .map_or(1, |limit| (limit / (16 * ingresses.max(1))).clamp(1, 256));
        let layout = Layout::with_stride(spec.slots, spec.stride);
        let publish = (spec.slots / 8).clamp(1, 32);
        let mut txs: Vec<Vec<LaneTx>> = (0..ingresses).map(|_| Vec::new()).collect();
        let mut lanes = Vec::new();
        for l in 0..spec.lanes {
            let id = LaneRef {
                engine: e as u16,
                lane: l as u16,
            };
            let bell = Bell::new();
            let health = Arc::new(LaneHealth::default());
            let mut requests = Vec::new();
            let mut answers = Vec::new();
            for i in 0..ingresses {
                let (rp, rc) = match memory(e, l, i, layout.bytes()) {
                    Some(mem) => channel_in(mem, layout, publish, false),
                    None => channel(layout, publish),
                };
                let (ap, ac) = channel(layout, publish);
                txs[i].push(LaneTx {
                    ring: rp,
                    bell: bell.clone(),
                    health: health.clone(),
                    dead_seen: false,
                    restarts_seen: 0,
                    outstanding: 0,
                    answered: 0,
                    rate: LaneRate::default(),
                });
                requests.push(rc);
                answers.push(ap);
                ing_answers[i].push((id, ac));
            }
            lanes.push(LaneEnds {
                id,
                engine: name.clone(),
                requests: RequestRings {
                    rings: requests,
                    next: 0,
                },
                answers: AnswerRings::new(answers, wakes.clone()),
                bell,
                health,
            });
        }
        for (i, lanes) in txs.into_iter().enumerate() {
            ing_engines[i].push(EngineTx {
                name: name.clone(),
                policy: spec.policy,
                admit_by_deadline: spec.admit_by_deadline,
                lanes,
                next: i,
                waits: Vec::new(),
                queued: queued.clone(),
                credits: 0,
                run,
            });
        }
        lanes_out.push(lanes);
    }
    let ingresses = ing_engines
        .into_iter()
        .zip(ing_answers)
        .enumerate()
        .map(|(i, (engines, answers))| IngressEnds {
            index: i,
            wake: wakes[i].clone(),
            routes: routes.clone(),
            engines,
            answers,
            next_answer: 0,
        })
        .collect();
    Wiring {
        ingresses,
        engines: lanes_out,
    }
}

/// `IngressEnds::send` once the engine has room: the dispatch policy picks a lane with room in
/// its ring.
fn send_to_lane(
    eng: &mut EngineTx,
    e: u16,
    env: Envelope,
    payload: &[u8],
) -> Result<LaneRef, Refusal> {
    let n = eng.lanes.len();
    let live = |l: &LaneTx| !l.health.dead.load(Ordering::Relaxed);
    let first = match eng.policy {
        DispatchPolicy::RoundRobin => {
            eng.next = eng.next.wrapping_add(1);
            eng.next % n
        }
        DispatchPolicy::LeastLoaded => {
            let mut best = (usize::MAX, 0);
            for (i, l) in eng.lanes.iter().enumerate() {
                // Ties go to the lowest lane: an idle engine keeps one lane hot.
                if live(l) && l.outstanding < best.0 {
                    best = (l.outstanding, i);
                }
            }
            best.1
        }
        // Fibonacci hashing spreads sequential ids evenly.
        DispatchPolicy::KeyHash => {
            (env.request_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % n
        }
        DispatchPolicy::Hybrid {
            gpu_lanes,
            budget_us,
        } => {
            let now = env.arrived;
            eng.waits.clear();
            for (i, l) in eng.lanes.iter_mut().enumerate() {
                l.rate.update(now, l.answered, l.outstanding);
                let cpu = i >= gpu_lanes as usize;
                let w = live(l).then(|| l.rate.expected_wait_ns(l.outstanding, cpu));
                eng.waits.push(w);
            }
            hybrid_choice(&eng.waits, gpu_lanes as usize, budget_us as f64 * 1e3).unwrap_or(0)
        }
    };
    let mut any_live = false;
    let budget_ns = env.deadline.saturating_sub(env.arrived);
    let mut past_deadline: Option<f64> = None;
    for k in 0..n {
        let i = (first + k) % n;
        let lane = &mut eng.lanes[i];
        if !live(lane) {
            continue;
        }
        any_live = true;
        if eng.admit_by_deadline {
            // Little's law over this ingress's share of the lane: what it owes the
            // ingress / how fast it has been answering it (0 until measured).
            lane.rate
                .update(env.arrived, lane.answered, lane.outstanding);
            let wait = lane.rate.expected_wait_ns(lane.outstanding, false);
            // A lane measured at a rate of zero (nothing answered for a window) is not
            // judged here: a ring that stays full refuses it.
            if wait.is_finite() && wait > budget_ns as f64 {
                past_deadline = Some(past_deadline.map_or(wait, |w| w.min(wait)));
                continue;
            }
        }
        match lane.ring.try_send(env, payload) {
            Ok(()) => {
                lane.outstanding += 1;
                lane.bell.wake();
                return Ok(LaneRef {
                    engine: e,
                    lane: i as u16,
                });
            }
            Err(SendError::Full) if eng.policy != DispatchPolicy::KeyHash => continue,
            Err(SendError::Full) => {
                return Err(Refusal::RingsFull {
                    lanes: 1,
                    slots: lane.ring.layout().slots,
                })
            }
            Err(SendError::TooLarge) => {
                return Err(Refusal::TooLarge(lane.ring.layout().payload_capacity))
            }
            Err(SendError::Closed) => continue,
        }
    }
    Err(match (any_live, past_deadline) {
        (false, _) => Refusal::EngineDown,
        (true, Some(wait)) => Refusal::PastDeadline {
            wait_us: if wait.is_finite() {
                (wait / 1e3) as u64
            } else {
                u64::MAX
            },
            budget_us: budget_ns / 1000,
        },
        (true, None) => Refusal::RingsFull {
            lanes: eng.lanes.iter().filter(|l| live(l)).count(),
            slots: eng.lanes[first].ring.layout().slots,
        },
    })
}

struct LaneTx {
    ring: Producer,
    bell: Arc<Bell>,
    health: Arc<LaneHealth>,
    dead_seen: bool,
    restarts_seen: u32,
    /// Requests this ingress sent the lane and has no answer for yet: the load least-loaded
    /// compares. (A ring's depth would not do: a batching lane empties its rings into device
    /// slots at once, so every ring of an engine under load looks empty.)
    outstanding: usize,
    /// Answers received from the lane, and its measured rate (hybrid dispatch).
    answered: u64,
    rate: LaneRate,
}

struct EngineTx {
    name: Arc<str>,
    policy: DispatchPolicy,
    admit_by_deadline: bool,
    lanes: Vec<LaneTx>,
    next: usize,
    /// Hybrid dispatch's per-lane waits, reused (no allocation per request).
    waits: Vec<Option<f64>>,
    /// The engine's bound on requests in flight, shared by every ingress.
    queued: Option<Arc<Queued>>,
    /// Places of `queued` this ingress holds and has not used, and how many it reserves or
    /// gives back at a time.
    credits: usize,
    run: usize,
}

impl EngineTx {
    /// Takes one of the engine's places: false when none is left.
    fn take_place(&mut self, q: &Queued) -> bool {
        if self.credits == 0 {
            self.credits = q.reserve(self.run);
        }
        if self.credits == 0 {
            return false;
        }
        self.credits -= 1;
        true
    }

    /// `n` places are free again (answers came): kept for the next requests up to two runs.
    fn free_places(&mut self, n: usize) {
        let Some(q) = &self.queued else { return };
        self.credits += n;
        // A run of one is the exact bound: nothing is kept back.
        let keep = if self.run == 1 { 0 } else { self.run };
        if self.credits > 2 * keep {
            q.give_back(self.credits - keep);
            self.credits = keep;
        }
    }
}

/// Why ingress could not hand a request to an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No engine of this server runs the service.
    UnknownService,
    /// The engine holds its bound of requests in flight (`--max-queue`, rows): `limit`.
    QueueFull { limit: usize },
    /// Every request ring from this ingress the request could go to is full (`lanes` rings
    /// of `slots` slots) while the engine's bound still had room: the lanes are not taking
    /// requests as fast as this io thread brings them.
    RingsFull { lanes: usize, slots: usize },
    /// Every lane of the service's engine has stopped.
    EngineDown,
    /// The request does not fit the engine's ring slots (engines whose rings a device reads
    /// cannot spill): the payload limit is given.
    TooLarge(usize),
    /// Every lane would answer after the request's deadline (expected wait, budget; us).
    PastDeadline { wait_us: u64, budget_us: u64 },
}

impl Refusal {
    /// Why an OVERLOADED refusal was made (`cohort_requests_refused_total`'s reason); None
    /// for the refusals that are not overload.
    pub fn shed(self) -> Option<Shed> {
        match self {
            Refusal::QueueFull { .. } | Refusal::RingsFull { .. } => Some(Shed::Queue),
            Refusal::PastDeadline { .. } => Some(Shed::Deadline),
            _ => None,
        }
    }

    pub fn error(self, service: u16) -> ErrorPayload {
        match self {
            Refusal::UnknownService => ErrorPayload::new(
                ErrorCode::UnknownService,
                format!("unknown service {service}"),
            ),
            Refusal::QueueFull { limit } => Shed::Queue.error(&format!(
                "engine queue full: {limit} rows in flight, the service's max_queue \
                 (--max-queue, NAME.max_queue)"
            )),
            Refusal::RingsFull { lanes, slots } => Shed::Queue.error(&format!(
                "engine queue full: this io thread's {lanes} request ring(s) of {slots} \
                 rows to the engine are full (the engine's lanes are behind)"
            )),
            Refusal::EngineDown => {
                ErrorPayload::new(ErrorCode::Internal, "the service's engine has stopped")
            }
            Refusal::TooLarge(max) => ErrorPayload::new(
                ErrorCode::TooLarge,
                format!("this engine carries requests of at most {max} bytes"),
            ),
            Refusal::PastDeadline { wait_us, budget_us } => Shed::Deadline.error(&format!(
                "the engine would answer in about {wait_us} us, past this request's \
                 deadline of {budget_us} us"
            )),
        }
    }
}

/// One ingress thread's ends: a request ring into every lane, an answer ring out of every lane.
pub struct IngressEnds {
    pub index: usize,
    wake: WakeCell,
    routes: Vec<(u16, u16)>,
    engines: Vec<EngineTx>,
    answers: Vec<(LaneRef, Consumer)>,
    next_answer: usize,
}

impl IngressEnds {
    /// Registers what the lanes wake after writing this ingress an answer (once).
    pub fn set_wake(&self, w: Arc<dyn Wake>) {
        assert!(self.wake.set(w).is_ok(), "ingress wake set twice");
    }

    /// The engine index serving `service`.
    pub fn engine_of(&self, service: u16) -> Option<u16> {
        self.routes
            .iter()
            .find(|&&(s, _)| s == service)
            .map(|&(_, e)| e)
    }

    pub fn engine_name(&self, engine: u16) -> &str {
        &self.engines[engine as usize].name
    }

    /// Writes a request into one lane of its service's engine (chosen by the engine's
    /// dispatch policy) and wakes that lane. Never blocks.
    pub fn send(&mut self, env: Envelope, payload: &[u8]) -> Result<LaneRef, Refusal> {
        let e = self.engine_of(env.service).ok_or(Refusal::UnknownService)?;
        let eng = &mut self.engines[e as usize];
        // The bound is moved out and back, not cloned: no shared reference count touched per
        // request on this path.
        let Some(q) = eng.queued.take() else {
            return send_to_lane(eng, e, env, payload);
        };
        let sent = if eng.take_place(&q) {
            let sent = send_to_lane(eng, e, env, payload);
            if sent.is_err() {
                eng.credits += 1;
            }
            sent
        } else {
            Err(Refusal::QueueFull { limit: q.limit })
        };
        eng.queued = Some(q);
        sent
    }

    /// Hands up to `max` waiting answers to `f`, from every lane in turn. Returns how many.
    pub fn drain_answers(&mut self, max: usize, mut f: impl FnMut(Message<'_>)) -> usize {
        let n = self.answers.len();
        let mut got = 0;
        let mut empty_in_a_row = 0;
        while got < max && empty_in_a_row < n {
            let i = self.next_answer % n;
            let mut arrived = None;
            let got_one = self.answers[i]
                .1
                .try_recv(|m| {
                    arrived = Some(m.env.arrived);
                    f(m)
                })
                .is_some();
            if got_one {
                let lane = self.answers[i].0;
                let eng = &mut self.engines[lane.engine as usize];
                let tx = &mut eng.lanes[lane.lane as usize];
                // An answer the lane owed (not a late one from before a restart, which was
                // given back when the lane was reaped) frees its place in the engine.
                let owed = tx.outstanding > 0;
                tx.outstanding = tx.outstanding.saturating_sub(1);
                tx.answered += 1;
                if let Some(arrived) = arrived {
                    // Only hybrid dispatch reads latencies: the clock is read for it alone.
                    if matches!(eng.policy, DispatchPolicy::Hybrid { .. }) {
                        tx.rate
                            .on_answer(crate::clock::now_ns().saturating_sub(arrived));
                    }
                }
                if owed {
                    eng.free_places(1);
                }
                got += 1;
                empty_in_a_row = 0;
            } else {
                self.answers[i].1.publish();
                self.next_answer = self.next_answer.wrapping_add(1);
                empty_in_a_row += 1;
            }
        }
        got
    }

    /// Answers this ingress has received from one lane.
    pub fn answered_by(&self, lane: LaneRef) -> u64 {
        self.engines[lane.engine as usize].lanes[lane.lane as usize].answered
    }

    pub fn answers_waiting(&self) -> bool {
        self.answers.iter().any(|(_, c)| c.is_ready())
    }

    /// Lanes whose thread has ended (`true`) or that restarted (`false`) since the last call.
    /// The caller drains the answers they wrote, then answers whatever it still holds for
    /// them (a dead lane sends nothing more; a restarted one lost it).
    pub fn lanes_to_reap(&mut self) -> Vec<(LaneRef, bool)> {
        let mut out = Vec::new();
        for (e, eng) in self.engines.iter_mut().enumerate() {
            for (l, lane) in eng.lanes.iter_mut().enumerate() {
                let id = LaneRef {
                    engine: e as u16,
                    lane: l as u16,
                };
                // What the lane owed is answered by the caller from here on (its places in
                // the engine are given back now; answers that still come are not counted).
                let owed_answered_by_caller = |lane: &mut LaneTx| {
                    if let Some(q) = &eng.queued {
                        q.give_back(lane.outstanding);
                    }
                    lane.outstanding = 0;
                };
                if !lane.dead_seen && lane.health.dead.load(Ordering::Acquire) {
                    lane.dead_seen = true;
                    owed_answered_by_caller(lane);
                    out.push((id, true));
                    continue;
                }
                let r = lane.health.restarts.load(Ordering::Acquire);
                if r != lane.restarts_seen {
                    lane.restarts_seen = r;
                    owed_answered_by_caller(lane);
                    out.push((id, false));
                }
            }
        }
        out
    }
}

/// One lane's ends: a request ring from every ingress, an answer ring to every ingress.
pub struct LaneEnds {
    pub id: LaneRef,
    pub engine: Arc<str>,
    pub requests: RequestRings,
    pub answers: AnswerRings,
    pub bell: Arc<Bell>,
    health: Arc<LaneHealth>,
}

impl LaneEnds {
    /// Hold this in the lane's thread for its whole life: when the thread ends (a panic
    /// included) the ingresses learn it and answer what this lane held.
    pub fn health_guard(&self) -> HealthGuard {
        HealthGuard(self.health.clone())
    }

    /// Says that the lane lost every request it held (its GPU kernels were restarted): each
    /// ingress answers INTERNAL for what it had sent the lane so far. Call after the lane can
    /// no longer answer them; a request sent between the loss and the ingress noticing is
    /// failed too (any late answer for it is dropped as stale: one answer per request).
    pub fn announce_restart(&mut self) {
        self.health.restarts.fetch_add(1, Ordering::AcqRel);
        self.answers.wake_all();
    }

    /// Parks the calling thread until a request may have arrived, or `timeout`.
    pub fn sleep(&mut self, timeout: std::time::Duration) {
        self.requests.publish();
        let req = &self.requests;
        self.bell.sleep(timeout, || req.any_ready());
    }

    /// Parks the calling thread, which consumes all of `lanes`, until a request may have
    /// arrived on any of them, or `timeout`.
    pub fn sleep_all(lanes: &mut [LaneEnds], timeout: std::time::Duration) {
        for l in lanes.iter_mut() {
            l.requests.publish();
        }
        let bells: Vec<&Bell> = lanes.iter().map(|l| &*l.bell).collect();
        crate::bell::sleep_on(&bells, timeout, || {
            lanes.iter().any(|l| l.requests.any_ready())
        });
    }
}

pub struct RequestRings {
    rings: Vec<Consumer>,
    next: usize,
}

impl RequestRings {
    /// Ingresses (one ring each).
    pub fn len(&self) -> usize {
        self.rings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// Offers ingress `i`'s next request to `f`; it is released if `f` returns Some.
    pub fn poll_from<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(Message<'_>) -> Option<R>,
    ) -> Option<R> {
        self.rings[i].try_recv_if(f)
    }

    /// Takes one request from the next ingress that has one (round robin) and hands it to
    /// `f` with its ingress index.
    pub fn poll<R>(&mut self, f: impl FnOnce(usize, Message<'_>) -> R) -> Option<R> {
        let i = self.next_ready()?;
        self.rings[i].try_recv(|m| f(i, m))
    }

    /// `poll`, but the request is released only if `f` returns Some (else it stays first in
    /// its ring and polling stops).
    pub fn poll_if<R>(&mut self, f: impl FnOnce(usize, Message<'_>) -> Option<R>) -> Option<R> {
        let i = self.next_ready()?;
        self.rings[i].try_recv_if(|m| f(i, m))
    }

    /// The next ingress (round robin from the last one served) whose ring holds a request.
    fn next_ready(&mut self) -> Option<usize> {
        let n = self.rings.len();
        let i = (0..n)
            .map(|k| (self.next + k) % n)
            .find(|&i| self.rings[i].is_ready())?;
        self.next = i + 1;
        Some(i)
    }

    pub fn any_ready(&self) -> bool {
        self.rings.iter().any(|c| c.is_ready())
    }

    /// Ingress `i`'s ring (a device consumer reads it in place of this handle).
    pub fn ring(&self, i: usize) -> &Consumer {
        &self.rings[i]
    }

    /// Whether ingress `i`'s ring holds a request.
    pub fn is_ready(&self, i: usize) -> bool {
        self.rings[i].is_ready()
    }

    /// Publishes every ring's tail (before going idle).
    pub fn publish(&mut self) {
        self.rings.iter_mut().for_each(Consumer::publish);
    }
}

pub struct AnswerRings {
    rings: Vec<Producer>,
    wakes: Vec<WakeCell>,
    /// Between `defer_wakes` and `wake_deferred`: answers written to each ring since its
    /// ingress was last woken.
    unwoken: Vec<u32>,
    deferring: bool,
}

/// Answers a deferred batch leaves in one ring before it wakes that ingress anyway: the first
/// answer of a long batch waits for at most this many more writes, not the whole batch.
const WAKE_EVERY: u32 = 32;

impl AnswerRings {
    fn new(rings: Vec<Producer>, wakes: Vec<WakeCell>) -> AnswerRings {
        let unwoken = vec![0; rings.len()];
        AnswerRings {
            rings,
            wakes,
            unwoken,
            deferring: false,
        }
    }

    /// Until `wake_deferred`, a written answer wakes its ingress only every `WAKE_EVERY`
    /// answers (and whenever its ring is full). A thread that answers a batch at a time (the
    /// persistent egress, a finished cohort) otherwise pays a full fence, and for a sleeping
    /// ingress a wake-up, per answer: at 8 ingresses that made the persistent egress thread,
    /// the one core every answer crosses, the limit of the engine.
    pub fn defer_wakes(&mut self) {
        self.deferring = true;
    }

    /// Wakes every ingress with an answer written since `defer_wakes` and ends deferring.
    pub fn wake_deferred(&mut self) {
        self.deferring = false;
        for to in 0..self.unwoken.len() {
            if self.unwoken[to] > 0 {
                self.unwoken[to] = 0;
                self.wake(to);
            }
        }
    }

    /// Writes an answer for a request that came from ingress `to` (its envelope, with
    /// `status` 0 for a result or an error code) and wakes that ingress. Waits while the ring
    /// is full (the ingress drains it continuously); drops the answer if the ingress is gone
    /// (it answered everything itself before leaving).
    pub fn send(&mut self, to: usize, env: Envelope, payload: &[u8]) {
        self.send_with(to, |ring| ring.try_send(env, payload));
    }

    /// `send` for an answer that is a shared buffer already (a page in the device's pinned
    /// results): a large one crosses the ring as a reference, with no copy.
    pub fn send_bytes(&mut self, to: usize, env: Envelope, payload: &Bytes) {
        self.send_with(to, |ring| ring.try_send_bytes(env, payload));
    }

    /// `send` for an answer built in `buf`: one larger than a slot moves into the ring with
    /// its buffer (no copy; the ingress hands that buffer on) and `buf` is left empty, to be
    /// refilled by the caller; a smaller one is copied and `buf` kept.
    pub fn send_vec(&mut self, to: usize, env: Envelope, buf: &mut Vec<u8>) {
        self.send_with(to, |ring| ring.try_send_vec(env, buf));
    }

    /// Retries `try_send` on ingress `to`'s ring while it is full (waking the ingress, then
    /// yielding after a short spin), wakes it once written; gives up if the ingress is gone.
    fn send_with(
        &mut self,
        to: usize,
        mut try_send: impl FnMut(&mut Producer) -> Result<(), SendError>,
    ) {
        let mut spins = 0u32;
        loop {
            match try_send(&mut self.rings[to]) {
                Ok(()) => break,
                Err(SendError::Full) => {
                    self.wake(to);
                    spins += 1;
                    if spins > 64 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                Err(SendError::Closed) => return,
                Err(SendError::TooLarge) => unreachable!("answer rings spill"),
            }
        }
        if self.deferring {
            self.unwoken[to] += 1;
            if self.unwoken[to] < WAKE_EVERY {
                return;
            }
            self.unwoken[to] = 0;
        }
        self.wake(to);
    }

    /// An error answer: the code in `status`, the message as payload.
    pub fn send_error(&mut self, to: usize, env: Envelope, e: &ErrorPayload) {
        let env = Envelope {
            status: e.code as u16,
            ..env
        };
        self.send(to, env, e.message.as_bytes());
    }

    /// Ingresses (one ring each).
    pub fn len(&self) -> usize {
        self.rings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// Wakes every ingress (something changed that they must look at).
    pub fn wake_all(&self) {
        (0..self.wakes.len()).for_each(|i| self.wake(i));
    }

    fn wake(&self, to: usize) {
        if let Some(w) = self.wakes[to].get() {
            w.wake();
        }
    }
}

/// The answer envelope of a request (status 0: a result).
pub fn ok(env: Envelope) -> Envelope {
    Envelope { status: 0, ..env }
}

/// Turns an answer message back into a result or an error.
pub fn answer_of(m: &Message<'_>) -> Result<(), ErrorPayload> {
    if m.env.status == 0 {
        return Ok(());
    }
    let code = ErrorCode::from_u16(m.env.status).unwrap_or(ErrorCode::Internal);
    Err(ErrorPayload::new(
        code,
        String::from_utf8_lossy(m.payload).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stride carries its payload in place (no spill: the persistent GPU reads the ring),
    /// is never below the default, and is a power of two.
    #[test]
    fn the_stride_for_a_payload_carries_it_in_place() {
        assert_eq!(EngineSpec::stride_for(0), DEFAULT_STRIDE);
        assert_eq!(EngineSpec::stride_for(784), DEFAULT_STRIDE);
        for bytes in [977, 2580, 4000, 70_000] {
            let s = EngineSpec::stride_for(bytes);
            assert!(s.is_power_of_two() && s >= DEFAULT_STRIDE);
            assert!(
                Layout::with_stride(2, s).payload_capacity >= bytes,
                "{bytes} in {s}"
            );
        }
        assert_eq!(EngineSpec::stride_for(2580), 4096);
    }

    /// `--max-queue` over several ingresses that reserve places a run at a time: together
    /// they never send more than the bound, and once answered the places come back to the
    /// others but for what an ingress keeps in reserve (at most two runs each).
    #[test]
    fn deferred_answers_wake_their_ingress_once_a_batch_and_every_32() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        #[derive(Default)]
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(&self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let spec = EngineSpec {
            name: "t".into(),
            lanes: 1,
            policy: DispatchPolicy::RoundRobin,
            services: vec![1],
            slots: 256,
            admit_by_deadline: false,
            max_queued: None,
            stride: DEFAULT_STRIDE,
        };
        let mut w = wire(2, &[spec]);
        let counts: Vec<Arc<Count>> = (0..2).map(|_| Arc::new(Count::default())).collect();
        for (ing, c) in w.ingresses.iter().zip(&counts) {
            ing.set_wake(c.clone());
        }
        let woken = |i: usize| counts[i].0.load(Ordering::Relaxed);
        let mut lane = w.engines.pop().unwrap().pop().unwrap();
        let env = Envelope {
            token: 1,
            service: 1,
            status: 0,
            request_id: 1,
            deadline: 0,
            arrived: 0,
        };
        // Immediate: a wake per answer.
        lane.answers.send(0, env, b"a");
        lane.answers.send(0, env, b"a");
        assert_eq!(woken(0), 2);
        lane.answers.defer_wakes();
        for _ in 0..(WAKE_EVERY + 8) {
            lane.answers.send(0, env, b"a");
        }
        for _ in 0..3 {
            lane.answers.send(1, env, b"a");
        }
        assert_eq!(
            (woken(0), woken(1)),
            (3, 0),
            "one wake at 32, none yet for ingress 1"
        );
        lane.answers.wake_deferred();
        assert_eq!((woken(0), woken(1)), (4, 1), "the batch's end wakes both");
        lane.answers.wake_deferred();
        assert_eq!((woken(0), woken(1)), (4, 1), "nothing new, no wake");
        lane.answers.send(1, env, b"a");
        assert_eq!(woken(1), 2, "deferring ended: immediate again");
        let mut got = 0;
        for ing in w.ingresses.iter_mut() {
            ing.drain_answers(usize::MAX, |_| got += 1);
        }
        assert_eq!(
            got,
            2 + WAKE_EVERY as usize + 8 + 3 + 1,
            "every answer arrived"
        );
    }

    #[test]
    fn the_queue_bound_holds_across_ingresses_and_answered_places_come_back() {
        let (limit, ingresses) = (1000, 4);
        let spec = EngineSpec {
            name: "t".into(),
            lanes: 1,
            policy: DispatchPolicy::RoundRobin,
            services: vec![1],
            slots: 2048,
            admit_by_deadline: false,
            max_queued: Some(limit),
            stride: DEFAULT_STRIDE,
        };
        let mut w = wire(ingresses, &[spec]);
        let mut lane = w.engines.pop().unwrap().pop().unwrap();
        let env = |id: u64| Envelope {
            token: id as u32,
            service: 1,
            status: 0,
            request_id: id,
            deadline: 0,
            arrived: 0,
        };
        let fill = |w: &mut Wiring, order: &[usize]| -> Vec<usize> {
            let mut sent = vec![0; ingresses];
            for &k in order {
                while w.ingresses[k].send(env(k as u64), b"q").is_ok() {
                    sent[k] += 1;
                }
                assert_eq!(
                    w.ingresses[k].send(env(0), b"q").unwrap_err(),
                    Refusal::QueueFull { limit }
                );
            }
            sent
        };
        // Interleaved sends first: each ingress reserves runs as it goes.
        for round in 0..10 {
            for (k, ing) in w.ingresses.iter_mut().enumerate() {
                ing.send(env((round * 10 + k) as u64), b"q").expect("room");
            }
        }
        let sent = fill(&mut w, &[2, 0, 3, 1]);
        assert_eq!(sent.iter().sum::<usize>() + 40, limit, "{sent:?}");
        // The lane answers everything; every ingress takes its answers.
        let (rq, an) = (&mut lane.requests, &mut lane.answers);
        let mut answered = 0;
        while rq.poll(|i, m| an.send(i, m.env, b"a")).is_some() {
            answered += 1;
        }
        assert_eq!(answered, limit);
        for ing in w.ingresses.iter_mut() {
            ing.drain_answers(usize::MAX, |_| {});
        }
        // One ingress alone now gets all but the others' reserves.
        let run = limit / (16 * ingresses);
        let again = fill(&mut w, &[3])[3];
        assert!(
            again <= limit && again + 3 * 2 * run >= limit,
            "{again} of {limit} (runs of {run})"
        );
    }

    /// The defaults admit the batched load they are sized for (32 clients x 256 rows in
    /// flight, nothing answered yet) even when every one of those clients came in through
    /// the same io thread, for engines of 1, 2 and 8 lanes behind 1, 4 and 8 io threads;
    /// past the bound every request is refused with a reason and its numbers, and every
    /// admitted one reaches a lane (none dropped).
    #[test]
    fn the_defaults_admit_32_clients_of_256_rows_and_refuse_past_the_bound() {
        let env = |id: u64| Envelope {
            token: id as u32,
            service: 1,
            status: 0,
            request_id: id,
            deadline: u64::MAX,
            arrived: 0,
        };
        for lanes in [1, 2, 8] {
            for ingresses in [1, 4, 8] {
                let spec = EngineSpec {
                    name: "t".into(),
                    lanes,
                    policy: DispatchPolicy::LeastLoaded,
                    services: vec![1],
                    slots: slots_for(DEFAULT_MAX_QUEUE, lanes, ingresses),
                    admit_by_deadline: false,
                    max_queued: Some(DEFAULT_MAX_QUEUE),
                    stride: DEFAULT_STRIDE,
                };
                let mut w = wire(ingresses, &[spec]);
                let at = format!("{lanes} lanes, {ingresses} io threads");
                let mut admitted = 0;
                for id in 0..BATCHED_LOAD_ROWS {
                    w.ingresses[0]
                        .send(env(id as u64), b"row")
                        .unwrap_or_else(|r| panic!("{at}: row {id} refused: {r:?}"));
                    admitted += 1;
                }
                // A flood from every io thread: each sends until refused.
                let mut refused = 0;
                for ing in w.ingresses.iter_mut() {
                    loop {
                        match ing.send(env(0), b"row") {
                            Ok(_) => admitted += 1,
                            Err(r) => {
                                let msg = r.error(1).message;
                                match r {
                                    Refusal::QueueFull { limit } => {
                                        assert_eq!(limit, DEFAULT_MAX_QUEUE, "{at}");
                                        assert!(msg.contains(&limit.to_string()), "{msg}");
                                    }
                                    Refusal::RingsFull { slots, .. } => {
                                        assert!(msg.contains(&slots.to_string()), "{msg}")
                                    }
                                    other => panic!("{at}: {other:?}"),
                                }
                                assert!(msg.starts_with("queue: engine queue full: "), "{msg}");
                                refused += 1;
                                break;
                            }
                        }
                    }
                }
                assert_eq!(refused, ingresses, "{at}");
                assert!(admitted <= DEFAULT_MAX_QUEUE, "{at}: {admitted} admitted");
                // An ingress keeps at most two runs of places in reserve.
                let run = (DEFAULT_MAX_QUEUE / (16 * ingresses)).clamp(1, 256);
                assert!(
                    admitted + 2 * run * ingresses >= DEFAULT_MAX_QUEUE,
                    "{at}: only {admitted} admitted"
                );
                let mut reached = 0;
                for lane in w.engines[0].iter_mut() {
                    while lane.requests.poll(|_, _| ()).is_some() {
                        reached += 1;
                    }
                }
                assert_eq!(reached, admitted, "{at}: every admitted row reaches a lane");
            }
        }
    }

    /// One ingress's rings hold the batched load alone, whatever the lanes; all the rings
    /// together still about the bound; a small bound gives small rings.
    #[test]
    fn ring_slots_hold_one_io_threads_batched_load_and_the_bound() {
        for lanes in [1, 3, 8, 64] {
            for ingresses in [1, 2, 8, 32] {
                let slots = slots_for(DEFAULT_MAX_QUEUE, lanes, ingresses);
                assert!(slots.is_power_of_two());
                assert!(slots * lanes >= BATCHED_LOAD_ROWS, "{lanes} x {ingresses}");
                assert!(slots * lanes * ingresses >= DEFAULT_MAX_QUEUE);
            }
        }
        assert_eq!(slots_for(16, 1, 8), 16);
        assert_eq!(slots_for(1000, 1, 1), 1024);
        assert_eq!(slots_for(DEFAULT_MAX_QUEUE, 1, 8), BATCHED_LOAD_ROWS);
    }
}
