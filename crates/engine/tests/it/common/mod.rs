//! A rig for engine tests: real rings and ingresses (as the network side would hold them),
//! one engine behind them, answers collected per request id.

use cohort_engine::*;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const SERVICE: u16 = 9;

/// Turns between the tests that measure and the others: all of them share one binary
/// (tests/it) and so its test threads.
static TURNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Tests that assert on batch timings hold this, so no other test's threads share the (on
/// CI, two) cores with theirs while they measure.
pub fn serial() -> std::sync::RwLockWriteGuard<'static, ()> {
    TURNS.write().unwrap_or_else(|e| e.into_inner())
}

/// Tests that run an engine but measure nothing hold this: side by side with each other,
/// never beside a test holding `serial`.
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    TURNS.read().unwrap_or_else(|e| e.into_inner())
}

/// Reverses the payload; "panic" panics, "bad" is a BAD_REQUEST, "sleep" takes 30 ms.
pub struct Rev;
impl Service for Rev {
    fn id(&self) -> u16 {
        SERVICE
    }
    fn name(&self) -> &'static str {
        "rev"
    }
    fn execute_cpu(&self, p: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        match p {
            b"panic" => panic!("backend bug"),
            b"bad" => Err(ErrorPayload::new(ErrorCode::BadRequest, "bad")),
            b"sleep" => {
                std::thread::sleep(Duration::from_millis(30));
                Ok(())
            }
            _ => {
                out.extend(p.iter().rev());
                Ok(())
            }
        }
    }
    fn json_to_payload(&self, _: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        Ok(vec![])
    }
    fn payload_to_json(&self, _: &[u8]) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// Batch key: the first byte (so tests choose which requests may share a batch).
pub struct FirstByte;
impl BatchBackend for FirstByte {
    fn batch_key(&self, p: &[u8]) -> Result<u64, ErrorPayload> {
        match p.first() {
            Some(&b) => Ok(b as u64),
            None => Err(ErrorPayload::new(ErrorCode::BadRequest, "empty")),
        }
    }
}

pub type Answers = HashMap<u64, Vec<Result<Vec<u8>, ErrorPayload>>>;

pub struct Client {
    pub ingress: Ingress<u64>,
    pub bell: Arc<Bell>,
    pub answers: Answers,
}

impl Client {
    pub fn new(ends: IngressEnds, metrics: &Arc<Metrics>) -> Client {
        let bell = Bell::new();
        ends.set_wake(bell.clone());
        Client {
            ingress: Ingress::new(ends, 1 << 16, metrics.clone(), Duration::from_secs(5)),
            bell,
            answers: HashMap::new(),
        }
    }

    /// Admits request `id`; a refusal is recorded as its answer.
    pub fn send(&mut self, id: u64, payload: &[u8], timeout: Duration) {
        let us = timeout.as_micros() as u32;
        if let Err((who, e)) = self.ingress.submit(id, SERVICE, id, us, payload) {
            self.answers.entry(who).or_default().push(Err(e));
        }
    }

    /// Collects answers until nothing is in flight or `limit` passes.
    pub fn collect(&mut self, limit: Duration) {
        self.bell.bind_current();
        let until = Instant::now() + limit;
        loop {
            let answers = &mut self.answers;
            let mut record = |id: u64, _: &Meta, a: Answer<'_>| {
                answers.entry(id).or_default().push(a.map(|p| p.to_vec()))
            };
            let n = self.ingress.drain(usize::MAX, &mut record)
                + self.ingress.reap_dead_lanes(&mut record);
            if self.ingress.in_flight() == 0 || Instant::now() >= until {
                break;
            }
            if n == 0 {
                let ends = &self.ingress.ends;
                self.bell
                    .sleep(Duration::from_millis(2), || ends.answers_waiting());
            }
        }
    }

    pub fn code(&self, id: u64) -> Option<ErrorCode> {
        match &self.answers[&id][..] {
            [Ok(_)] => None,
            [Err(e)] => Some(e.code),
            other => panic!("request {id} answered {} times", other.len()),
        }
    }
}

pub fn metrics(engine: &str) -> Arc<Metrics> {
    let label = ServiceLabel {
        name: "rev".into(),
        engine: engine.into(),
    };
    Arc::new(Metrics::new([(SERVICE, label)].into()))
}

pub fn spec(engine: &str, lanes: usize, slots: usize) -> EngineSpec {
    EngineSpec {
        name: engine.into(),
        lanes,
        policy: DispatchPolicy::LeastLoaded,
        services: vec![SERVICE],
        slots,
        admit_by_deadline: false,
        max_queued: None,
        stride: cohort_engine::wiring::DEFAULT_STRIDE,
    }
}

/// A batching engine over CPU twin slots, on its own thread.
pub struct BatchRig {
    pub clients: Vec<Client>,
    pub metrics: Arc<Metrics>,
    pub stop: Arc<AtomicBool>,
    pub thread: Option<std::thread::JoinHandle<()>>,
}

/// Fixed batches (size or timeout only).
pub fn batch_rig(
    ingresses: usize,
    slots: usize,
    max_batch: usize,
    timeout: Duration,
    batch_time: Duration,
    ring_slots: usize,
) -> BatchRig {
    batch_rig_with(
        ingresses, slots, max_batch, timeout, batch_time, ring_slots, 0, false,
    )
}

/// A batching engine with every knob: `keep_busy` (launch while fewer batches are in flight)
/// and admission by deadline included.
#[allow(clippy::too_many_arguments)]
pub fn batch_rig_with(
    ingresses: usize,
    slots: usize,
    max_batch: usize,
    timeout: Duration,
    batch_time: Duration,
    ring_slots: usize,
    keep_busy: usize,
    admit_by_deadline: bool,
) -> BatchRig {
    let metrics = metrics("batch");
    let mut spec = spec("batch", 1, ring_slots);
    spec.admit_by_deadline = admit_by_deadline;
    let mut w = wire(ingresses, &[spec]);
    let lane = w.engines[0].pop().unwrap();
    let devs: Vec<Box<dyn BatchSlot>> = (0..slots)
        .map(|_| {
            Box::new(CpuTwinSlot::new(Arc::new(Rev), max_batch, batch_time)) as Box<dyn BatchSlot>
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = BatchConfig {
        max_batch,
        timeout,
        keep_busy,
        stage: "gpu",
    };
    let (m, st) = (metrics.clone(), stop.clone());
    let thread = std::thread::spawn(move || batch::run(lane, &FirstByte, devs, &cfg, &m, &st));
    let clients = w
        .ingresses
        .into_iter()
        .map(|e| Client::new(e, &metrics))
        .collect();
    BatchRig {
        clients,
        metrics,
        stop,
        thread: Some(thread),
    }
}

impl BatchRig {
    pub fn stop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// (batches launched, requests in them) from the cohort-size histogram.
    pub fn batches(&self) -> (u64, u64) {
        let text = self.metrics.encode();
        let read = |suffix: &str| -> u64 {
            text.lines()
                .find(|l| {
                    l.starts_with(&format!("cohort_cohort_size_{suffix}{{engine=\"batch\"}}"))
                })
                .and_then(|l| l.split_whitespace().last())
                .map(|v| v.parse::<f64>().unwrap() as u64)
                .unwrap_or(0)
        };
        (read("count"), read("sum"))
    }
}
