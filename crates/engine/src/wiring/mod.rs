//! The rings between ingress threads and engine lanes: the engine boundary.
//!
//! Every (ingress thread, engine lane) pair has two single-producer single-consumer mqueues:
//! requests (ingress -> lane) and answers (lane -> ingress). An ingress is an io thread (one
//! UDP socket) or the shared TCP/HTTP side; a lane is one consumer thread of an engine (a cpu
//! worker, a GPU's control thread). [`wire`] builds them all at start-up; each side then owns
//! its ends ([`IngressEnds`], [`LaneEnds`]) and no lock or allocation sits between them.
//!
//! Laid out by side: `ingress` holds the ingress ends and the engine's admission, `lane` the
//! lane ends and their request rings, `answers` the answer rings; this module builds them.

mod answers;
mod ingress;
mod lane;
#[cfg(test)]
mod tests;

pub use answers::{answer_of, ok, AnswerRings};
pub use ingress::{IngressEnds, Refusal};
pub use lane::{LaneEnds, RequestRings};

use crate::bell::{Bell, Wake};
use crate::dispatch::{DispatchPolicy, LaneRate};
use crate::inflight::LaneRef;
use cohort_mq::{channel, channel_in, Consumer, Layout, RingMemory};
use ingress::{EngineTx, LaneTx, Queued};
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
