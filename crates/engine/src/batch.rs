//! The generic batching engine: `gpu-direct` and `gpu-cohort` are this loop over a service's
//! batch backend (Rhythm's cohorts, Triton's dynamic batcher, Centaur's per-request design as
//! the batch-of-one case).
//!
//! One thread per lane. It reads request messages, asks the backend for each one's batch key
//! (requests of one key run together, e.g. k-NN's (k, nprobe)), stages it straight from its
//! ring slot into a free slot's staging memory (pinned memory on a GPU), launches a slot when
//! it holds `max_batch` requests or its oldest request has waited `timeout`, polls launched
//! slots without blocking, and writes every answer into the answer ring of the ingress that
//! sent the request. Work-conserving (`keep_busy`, Triton's dynamic batcher): a filling batch
//! also launches at once while fewer than `keep_busy` batches are running, so an idle device
//! never waits out the timeout, and under load batches grow by themselves to what arrives
//! while the device is busy (the timeout only bounds waiting; it is never a fixed wait). A request that cannot be staged (every slot busy) stays in its ring: the
//! rings are the queue, and a full ring is OVERLOADED at the ingress.

use crate::clock;
use crate::metrics::Metrics;
use crate::wiring::{ok, AnswerRings, LaneEnds};
use bytes::Bytes;
use cohort_mq::Envelope;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a service tells the batcher about a request before it is staged.
pub trait BatchBackend: Send + Sync {
    /// Validates the request and names its batch (requests with equal keys run together).
    /// An error is that request's answer.
    fn batch_key(&self, payload: &[u8]) -> Result<u64, ErrorPayload>;
}

/// One slot of a device: staging memory for up to `capacity` requests, the buffers a launch
/// uses and a way to learn that it finished (a GPU stream and its event; a CPU twin).
pub trait BatchSlot: Send {
    fn capacity(&self) -> usize;
    /// Copies request `row` (already validated by `batch_key`) into staging. An error is that
    /// request's answer and the row stays free.
    fn stage(&mut self, key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload>;
    /// Starts the batch of rows `0..rows`.
    fn launch(&mut self, key: u64, rows: usize) -> Result<(), String>;
    /// True once the launched batch has finished. Never blocks.
    fn poll(&mut self) -> Result<bool, String>;
    /// Writes row `row`'s answer payload into `out` (cleared by the caller).
    fn answer(&mut self, key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload>;
    /// Row `row`'s answer lent as a buffer shared with the slot's results (no copy: a page
    /// leaves from the pinned memory the device wrote), or None where the slot cannot lend it
    /// now (then `answer` copies it).
    fn answer_shared(&mut self, _key: u64, _row: usize) -> Option<Result<Bytes, ErrorPayload>> {
        None
    }
}

#[derive(Debug, Clone)]
pub struct BatchConfig {
    /// A batch launches at this many requests (1: every request alone, gpu-direct)...
    pub max_batch: usize,
    /// ...or when its oldest request has waited this long since it arrived...
    pub timeout: Duration,
    /// ...or at once while fewer than this many batches are in flight (0: only at size or
    /// timeout, Rhythm's fixed cohorts; 1: whenever the device is idle).
    pub keep_busy: usize,
    /// Metrics label of the compute stage ("gpu").
    pub stage: &'static str,
}

struct Row {
    ingress: u32,
    env: Envelope,
    /// Answered already (deadline passed before launch): computed, not answered again.
    answered: bool,
}

enum Phase {
    Free,
    /// `oldest`: the earliest arrival (server clock, ns) among the rows: a batch is due when
    /// its oldest request has waited `timeout` since the ingress read it, time spent in a
    /// ring waiting for a free slot included.
    Filling {
        key: u64,
        oldest: u64,
    },
    InFlight {
        key: u64,
        launched: Instant,
    },
}

struct Slot {
    dev: Box<dyn BatchSlot>,
    phase: Phase,
    rows: Vec<Row>,
    /// Rows per batch: the device's capacity or max_batch, whichever is smaller.
    cap: usize,
}

/// One lane's share of a control thread: its rings, its service's batch rules and its
/// device's slots.
pub struct BatchLane<'a> {
    pub lane: LaneEnds,
    pub backend: &'a dyn BatchBackend,
    pub slots: Vec<Box<dyn BatchSlot>>,
}

/// Runs the batching loop of one lane until `stop` is set and everything queued is answered.
/// A panic in the backend ends the thread; the lane's health guard then makes every ingress
/// answer what this lane held (INTERNAL).
pub fn run(
    lane: LaneEnds,
    backend: &dyn BatchBackend,
    slots: Vec<Box<dyn BatchSlot>>,
    cfg: &BatchConfig,
    metrics: &Metrics,
    stop: &AtomicBool,
) {
    run_lanes(
        vec![BatchLane {
            lane,
            backend,
            slots,
        }],
        cfg,
        metrics,
        stop,
    )
}

/// Runs the batching loops of several lanes (several GPUs) on the calling thread, a pass over
/// each in turn: Centaur's one host core driving many GPUs. Each lane keeps its own rings and
/// slots, so nothing is shared per request between them; what is shared is the thread, whose
/// polling (and its core) no longer multiplies with the GPUs. A panic ends every lane of the
/// thread, each answered INTERNAL by its health guard.
pub fn run_lanes(
    lanes: Vec<BatchLane<'_>>,
    cfg: &BatchConfig,
    metrics: &Metrics,
    stop: &AtomicBool,
) {
    let _health: Vec<_> = lanes.iter().map(|l| l.lane.health_guard()).collect();
    assert!(cfg.max_batch >= 1 && !lanes.is_empty());
    let mut ends = Vec::with_capacity(lanes.len());
    let mut units = Vec::with_capacity(lanes.len());
    for l in lanes {
        assert!(!l.slots.is_empty(), "a lane needs at least one slot");
        l.lane.bell.bind_current();
        units.push(Unit {
            backend: l.backend,
            b: Batcher::new(l.slots, cfg, metrics),
        });
        ends.push(l.lane);
    }
    let mut quiet = 0u32;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let mut work = 0;
        for (u, lane) in units.iter_mut().zip(ends.iter_mut()) {
            work += u.b.pass(lane, u.backend, stopping);
        }
        if work > 0 {
            quiet = 0;
            continue;
        }
        quiet = quiet.saturating_add(1);
        let idle = units.iter().all(|u| u.b.idle());
        if idle && stopping && !ends.iter().any(|l| l.requests.any_ready()) {
            return;
        }
        if idle {
            LaneEnds::sleep_all(&mut ends, Duration::from_millis(20));
        } else if quiet > 256 {
            // Waiting on the device with nothing else to do: let a thread that shares this
            // core (an io thread, another engine) run, instead of spinning it out.
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A lane's batcher and the rules of its service.
struct Unit<'a> {
    backend: &'a dyn BatchBackend,
    b: Batcher<'a>,
}

struct Batcher<'a> {
    slots: Vec<Slot>,
    cfg: &'a BatchConfig,
    metrics: &'a Metrics,
    scratch: Vec<u8>,
    /// The last admission pass left a request in its ring for want of a slot.
    blocked: bool,
    /// The ring the next admission pass reads first.
    first_ring: usize,
}

impl<'a> Batcher<'a> {
    fn new(devs: Vec<Box<dyn BatchSlot>>, cfg: &'a BatchConfig, metrics: &'a Metrics) -> Self {
        Batcher {
            slots: devs
                .into_iter()
                .map(|dev| {
                    let cap = dev.capacity().min(cfg.max_batch);
                    assert!(cap >= 1, "a slot must hold at least one request");
                    Slot {
                        dev,
                        phase: Phase::Free,
                        rows: Vec::with_capacity(cap),
                        cap,
                    }
                })
                .collect(),
            cfg,
            metrics,
            scratch: Vec::with_capacity(crate::cpu::ANSWER_BUFFER),
            blocked: false,
            first_ring: 0,
        }
    }

    /// One turn of the loop on `lane`: answers finished batches, admits requests, launches
    /// what is due. Returns how much it did (0: nothing to do now).
    fn pass(&mut self, lane: &mut LaneEnds, backend: &dyn BatchBackend, stopping: bool) -> usize {
        let completed = self.complete(&lane.engine, &mut lane.answers);
        let admitted = self.admit(lane, backend);
        // A request waiting for a slot of its key, with every slot taken: launch what is
        // filling now instead of letting the waiting request sit out the timeout.
        let hurry = stopping || self.blocked;
        let launched = self.launch_due(&lane.engine, &mut lane.answers, hurry);
        completed + admitted + launched
    }

    /// No batch filling or in flight.
    fn idle(&self) -> bool {
        self.slots.iter().all(|s| matches!(s.phase, Phase::Free))
    }

    /// Moves requests from the rings into slots. Returns how many were taken.
    fn admit(&mut self, lane: &mut LaneEnds, backend: &dyn BatchBackend) -> usize {
        let mut taken = 0;
        self.blocked = false;
        let (requests, answers) = (&mut lane.requests, &mut lane.answers);
        // The ring read first rotates: when slots are scarce, the first ring read takes the
        // slot that frees, and a fixed order would starve the last ingress.
        let n = requests.len();
        self.first_ring = (self.first_ring + 1) % n.max(1);
        for k in 0..n {
            let i = (self.first_ring + k) % n;
            // A bounded share per ingress per pass keeps the loop polling completions.
            // One clock read per run of up to 256 requests: a deadline is checked against a
            // time at most one run old (reading the clock per request cost ~10% of the
            // control thread at 1.7 M requests/s).
            let now = clock::now_ns();
            for _ in 0..256 {
                let got = requests.poll_from(i, |msg| {
                    let env = msg.env;
                    if clock::expired(env.deadline, now) {
                        let e =
                            ErrorPayload::new(ErrorCode::Timeout, "deadline passed while queued");
                        answers.send_error(i, env, &e);
                        return Some(());
                    }
                    let key = match backend.batch_key(msg.payload) {
                        Ok(k) => k,
                        Err(e) => {
                            answers.send_error(i, env, &e);
                            return Some(());
                        }
                    };
                    // The filling slot of this key with room, else a free slot; else the
                    // request waits in its ring.
                    let Some(si) = self
                        .slots
                        .iter()
                        .position(|s| {
                            matches!(s.phase, Phase::Filling { key: k, .. } if k == key)
                                && s.rows.len() < s.cap
                        })
                        .or_else(|| {
                            self.slots
                                .iter()
                                .position(|s| matches!(s.phase, Phase::Free))
                        })
                    else {
                        self.blocked = true;
                        return None;
                    };
                    let slot = &mut self.slots[si];
                    let row = slot.rows.len();
                    if let Err(e) = slot.dev.stage(key, row, msg.payload) {
                        answers.send_error(i, env, &e);
                        return Some(());
                    }
                    match &mut slot.phase {
                        Phase::Filling { oldest, .. } => *oldest = (*oldest).min(env.arrived),
                        phase => {
                            *phase = Phase::Filling {
                                key,
                                oldest: env.arrived,
                            }
                        }
                    }
                    slot.rows.push(Row {
                        ingress: i as u32,
                        env,
                        answered: false,
                    });
                    Some(())
                });
                if got.is_none() {
                    break;
                }
                taken += 1;
            }
        }
        taken
    }

    /// Launches every filling slot that is full or has waited its timeout (all of them when
    /// `hurry`: stopping, or a request waits for a slot).
    fn launch_due(&mut self, engine: &str, answers: &mut AnswerRings, hurry: bool) -> usize {
        let mut launched = 0;
        let now_ns = clock::now_ns();
        let mut in_flight = self
            .slots
            .iter()
            .filter(|s| matches!(s.phase, Phase::InFlight { .. }))
            .count();
        for slot in self.slots.iter_mut() {
            let room = slot.cap;
            let Phase::Filling { key, oldest } = slot.phase else {
                continue;
            };
            let waited = Duration::from_nanos(now_ns.saturating_sub(oldest));
            let idle = in_flight < self.cfg.keep_busy;
            let due = hurry || idle || slot.rows.len() >= room || waited >= self.cfg.timeout;
            if !due {
                continue;
            }
            // Requests whose deadline passed while the batch filled are answered now; their
            // rows are still computed (the batch is already staged) but not answered again.
            for r in slot.rows.iter_mut() {
                if clock::expired(r.env.deadline, now_ns) {
                    let e = ErrorPayload::new(ErrorCode::Timeout, "deadline passed while batching");
                    answers.send_error(r.ingress as usize, r.env, &e);
                    r.answered = true;
                }
            }
            if slot.rows.iter().all(|r| r.answered) {
                slot.rows.clear();
                slot.phase = Phase::Free;
                continue;
            }
            let rows = slot.rows.len();
            match slot.dev.launch(key, rows) {
                Ok(()) => {
                    in_flight += 1;
                    self.metrics.cohort(engine, rows);
                    slot.phase = Phase::InFlight {
                        key,
                        launched: Instant::now(),
                    };
                }
                Err(msg) => {
                    tracing::error!(error = %msg, "batch launch failed");
                    let e = ErrorPayload::new(ErrorCode::Internal, format!("launch failed: {msg}"));
                    for r in slot.rows.drain(..).filter(|r| !r.answered) {
                        answers.send_error(r.ingress as usize, r.env, &e);
                    }
                    slot.phase = Phase::Free;
                }
            }
            launched += 1;
        }
        launched
    }

    /// Answers every launched batch that has finished.
    fn complete(&mut self, engine: &str, answers: &mut AnswerRings) -> usize {
        answers.defer_wakes();
        let done = self.complete_deferred(engine, answers);
        answers.wake_deferred();
        done
    }

    /// `complete`'s work, its answers' wakes deferred to the end (a cohort's answers reach
    /// each ingress as one wake-up, not one per answer).
    fn complete_deferred(&mut self, engine: &str, answers: &mut AnswerRings) -> usize {
        let mut done = 0;
        for slot in self.slots.iter_mut() {
            let Phase::InFlight { key, launched } = slot.phase else {
                continue;
            };
            let finished = match slot.dev.poll() {
                Ok(f) => f,
                Err(msg) => {
                    tracing::error!(error = %msg, "batch failed");
                    let e =
                        ErrorPayload::new(ErrorCode::Internal, format!("device failure: {msg}"));
                    for r in slot.rows.drain(..).filter(|r| !r.answered) {
                        answers.send_error(r.ingress as usize, r.env, &e);
                    }
                    slot.phase = Phase::Free;
                    done += 1;
                    continue;
                }
            };
            if !finished {
                continue;
            }
            let compute = launched.elapsed();
            let launched_ns = clock::now_ns().saturating_sub(compute.as_nanos() as u64);
            let hists = self.metrics.stage_hists(engine, self.cfg.stage);
            for (row, r) in slot.rows.iter().enumerate() {
                if r.answered {
                    continue;
                }
                let wait = Duration::from_nanos(launched_ns.saturating_sub(r.env.arrived));
                hists.observe(wait, compute);
                match slot.dev.answer_shared(key, row) {
                    Some(Ok(page)) => {
                        answers.send_bytes(r.ingress as usize, ok(r.env), &page);
                        continue;
                    }
                    Some(Err(e)) => {
                        answers.send_error(r.ingress as usize, r.env, &e);
                        continue;
                    }
                    None => {}
                }
                self.scratch.clear();
                match slot.dev.answer(key, row, &mut self.scratch) {
                    Ok(()) => {
                        // A page leaves with its buffer (no copy into the ring, none out).
                        answers.send_vec(r.ingress as usize, ok(r.env), &mut self.scratch);
                        if self.scratch.capacity() == 0 {
                            self.scratch.reserve(crate::cpu::ANSWER_BUFFER);
                        }
                    }
                    Err(e) => answers.send_error(r.ingress as usize, r.env, &e),
                }
            }
            slot.rows.clear();
            slot.phase = Phase::Free;
            done += 1;
        }
        done
    }
}
