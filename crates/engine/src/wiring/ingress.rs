//! The ingress side of the rings: an ingress thread's ends ([`IngressEnds`]) and the engine's
//! admission. A request is admitted against the engine's bound on requests in flight (places
//! reserved and given back a run at a time, shared by every ingress), handed to a lane the
//! dispatch policy picks, or refused with a [`Refusal`] saying why; the ingress drains its
//! answer rings and learns which lanes died or restarted so it can answer what they held.

use super::{LaneHealth, WakeCell};
use crate::bell::{Bell, Wake};
use crate::dispatch::{hybrid_choice, DispatchPolicy, LaneRate};
use crate::inflight::LaneRef;
use crate::metrics::Shed;
use cohort_mq::{Consumer, Envelope, Message, Producer, SendError};
use cohort_proto::{ErrorCode, ErrorPayload};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// An engine's places for requests in flight across all its ingresses, against
/// `--max-queue`: `count` is the places the ingresses hold. An ingress reserves places a
/// run at a time (`EngineTx::credits`) and gives them back a run at a time, so the count's
/// cache line is not written by every thread per request (two writes per request from every
/// ingress capped the engines' host side, docs/gpu.md). Never more than `limit` requests are
/// in flight; a place an idle ingress holds in reserve (at most 2 runs) is not lent to another.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) count: std::sync::atomic::AtomicUsize,
    pub(super) limit: usize,
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

pub(super) struct LaneTx {
    pub(super) ring: Producer,
    pub(super) bell: Arc<Bell>,
    pub(super) health: Arc<LaneHealth>,
    pub(super) dead_seen: bool,
    pub(super) restarts_seen: u32,
    /// Requests this ingress sent the lane and has no answer for yet: the load least-loaded
    /// compares. (A ring's depth would not do: a batching lane empties its rings into device
    /// slots at once, so every ring of an engine under load looks empty.)
    pub(super) outstanding: usize,
    /// Answers received from the lane, and its measured rate (hybrid dispatch).
    pub(super) answered: u64,
    pub(super) rate: LaneRate,
}

pub(super) struct EngineTx {
    pub(super) name: Arc<str>,
    pub(super) policy: DispatchPolicy,
    pub(super) admit_by_deadline: bool,
    pub(super) lanes: Vec<LaneTx>,
    pub(super) next: usize,
    /// Hybrid dispatch's per-lane waits, reused (no allocation per request).
    pub(super) waits: Vec<Option<f64>>,
    /// The engine's bound on requests in flight, shared by every ingress.
    pub(super) queued: Option<Arc<Queued>>,
    /// Places of `queued` this ingress holds and has not used, and how many it reserves or
    /// gives back at a time.
    pub(super) credits: usize,
    pub(super) run: usize,
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
    pub(super) wake: WakeCell,
    pub(super) routes: Vec<(u16, u16)>,
    pub(super) engines: Vec<EngineTx>,
    pub(super) answers: Vec<(LaneRef, Consumer)>,
    pub(super) next_answer: usize,
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
