//! The batching engine's host side alone, without a GPU: gpu-cohort's loop (`cohort_engine::
//! batch::run`) over CPU twin slots whose "device" answers at once (or after `--batch-us`),
//! fed by driver threads through the real rings. What it measures is what every request
//! costs the control thread (admission, staging, answering, waking the ingress) and the
//! drivers, the part that held lenet near 2 M images/s in process on an H100 while its
//! kernels alone gave 3.96 M (bench/README.md, "What holds lenet at ~2 M images/s"). It runs
//! on any machine, CI's included.

use super::write_result;
use anyhow::{ensure, Result};
use clap::Args;
use cohort_engine::batch::{self, BatchBackend, BatchConfig, BatchSlot};
use cohort_engine::{
    wire, Bell, CpuTwinSlot, DispatchPolicy, EngineSpec, Ingress, Metrics, Service, ServiceLabel,
};
use cohort_proto::ErrorPayload;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BatcherBench {
    /// Driver threads, each an ingress with its own rings.
    #[arg(long, default_value_t = 1)]
    drivers: usize,
    /// Requests each driver keeps outstanding.
    #[arg(long, value_delimiter = ',', default_value = "64,1024,8192")]
    window: Vec<usize>,
    /// Request payload bytes (lenet: 784).
    #[arg(long, default_value_t = 784)]
    payload: usize,
    /// Answer bytes (lenet: 41).
    #[arg(long, default_value_t = 41)]
    answer: usize,
    /// A batch closes at this many requests...
    #[arg(long, default_value_t = 8192)]
    max_cohort: usize,
    /// ...or when its first request has waited this long...
    #[arg(long, default_value_t = 200)]
    cohort_timeout_us: u64,
    /// ...or at once while fewer than this many batches are in flight.
    #[arg(long, default_value_t = 1)]
    keep_busy: usize,
    /// Lanes (GPUs) the one control thread serves in turn, each with its own slots
    /// (`--gpus-per-control-thread`): whether one thread keeps its rate over several GPUs.
    #[arg(long, default_value_t = 1)]
    lanes: usize,
    /// Slots per lane (gpu-cohort's default for a service of one batch key: 4).
    #[arg(long, default_value_t = 4)]
    slots: usize,
    /// A batch counts as finished this long after its launch at the earliest (a GPU's
    /// kernel time; 0: as soon as the twin has copied its answers).
    #[arg(long, default_value_t = 0)]
    batch_us: u64,
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    #[arg(long, default_value = "lab/results/batcher.json")]
    out: PathBuf,
}

const SERVICE: u16 = 0xbe;

/// The probe's service: every payload of the right size is answered with `answer` bytes
/// (its first byte repeated), the answer a driver checks.
struct Probe {
    payload: usize,
    answer: usize,
}

impl Service for Probe {
    fn id(&self) -> u16 {
        SERVICE
    }
    fn name(&self) -> &'static str {
        "batcher-probe"
    }
    fn execute_cpu(&self, p: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        out.resize(self.answer, p[0]);
        Ok(())
    }
    fn json_to_payload(&self, _: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        Err(ErrorPayload::new(
            cohort_proto::ErrorCode::BadRequest,
            "the batcher probe takes no JSON",
        ))
    }
    fn payload_to_json(&self, _: &[u8]) -> serde_json::Value {
        serde_json::Value::Null
    }
}

impl BatchBackend for Probe {
    fn batch_key(&self, p: &[u8]) -> Result<u64, ErrorPayload> {
        if p.len() != self.payload {
            return Err(ErrorPayload::new(
                cohort_proto::ErrorCode::BadRequest,
                "wrong payload size",
            ));
        }
        Ok(0)
    }
}

/// One window's run: (answered, wrong answers, latency histogram in ns, seconds, the control
/// thread's CPU share).
struct Run {
    answered: u64,
    wrong: u64,
    hist: hdrhistogram::Histogram<u64>,
    secs: f64,
    control_cpu: Option<f64>,
}

pub fn run(a: &BatcherBench) -> Result<()> {
    ensure!(
        a.drivers >= 1 && a.slots >= 1 && a.max_cohort >= 1,
        "drivers, slots and max cohort must be at least 1"
    );
    ensure!(a.payload >= 1, "a payload of at least one byte");
    let mut results = Vec::new();
    for &window in &a.window {
        ensure!(window >= 1, "a window of at least one request");
        ensure!(a.lanes >= 1, "--lanes: at least one");
        let r = one_window(a, window)?;
        let qps = r.answered as f64 / r.secs;
        let us = |q: f64| r.hist.value_at_quantile(q) as f64 / 1e3;
        println!(
            "batcher: {} drivers, {} lanes, window {window}: {:.0} requests/s, p50 {:.1} us, p99 {:.1} us, control thread {}",
            a.drivers,
            a.lanes,
            qps,
            us(0.5),
            us(0.99),
            r.control_cpu.map_or("?".into(), |c| format!("{:.0}% busy", 100.0 * c))
        );
        ensure!(r.wrong == 0, "{} answers were not the probe's", r.wrong);
        results.push(json!({
            "window": window, "drivers": a.drivers, "payload": a.payload, "answer": a.answer,
            "max_cohort": a.max_cohort, "cohort_timeout_us": a.cohort_timeout_us,
            "keep_busy": a.keep_busy, "lanes": a.lanes, "slots": a.slots, "batch_us": a.batch_us,
            "requests_per_s": qps, "answered": r.answered,
            "latency_us": {"p50": us(0.5), "p99": us(0.99), "p999": us(0.999)},
            "control_thread_cpu": r.control_cpu,
        }));
    }
    write_result(&a.out, serde_json::Value::Array(results))
}

fn one_window(a: &BatcherBench, window: usize) -> Result<Run> {
    let label = ServiceLabel {
        name: "batcher-probe".into(),
        engine: "batcher".into(),
    };
    let metrics = Arc::new(Metrics::new([(SERVICE, label)].into()));
    let spec = EngineSpec {
        name: "batcher".into(),
        lanes: a.lanes,
        policy: DispatchPolicy::LeastLoaded,
        services: vec![SERVICE],
        slots: (2 * window).next_power_of_two().max(1024),
        admit_by_deadline: false,
        max_queued: None,
        stride: cohort_engine::wiring::DEFAULT_STRIDE,
    };
    let mut w = wire(a.drivers, &[spec]);
    let probe = Arc::new(Probe {
        payload: a.payload,
        answer: a.answer,
    });
    let lanes: Vec<_> = w.engines[0]
        .drain(..)
        .map(|lane| {
            let slots: Vec<Box<dyn BatchSlot>> = (0..a.slots)
                .map(|_| {
                    Box::new(CpuTwinSlot::new(
                        probe.clone(),
                        a.max_cohort,
                        Duration::from_micros(a.batch_us),
                    )) as Box<dyn BatchSlot>
                })
                .collect();
            (lane, slots)
        })
        .collect();
    let cfg = BatchConfig {
        max_batch: a.max_cohort,
        timeout: Duration::from_micros(a.cohort_timeout_us),
        keep_busy: a.keep_busy,
        stage: "gpu",
    };
    let stop = Arc::new(AtomicBool::new(false));
    let control = {
        let (m, st, p) = (metrics.clone(), stop.clone(), probe.clone());
        std::thread::Builder::new()
            .name("batcher-control".into())
            .spawn(move || {
                let lanes = lanes
                    .into_iter()
                    .map(|(lane, slots)| batch::BatchLane {
                        lane,
                        backend: &*p as &dyn BatchBackend,
                        slots,
                    })
                    .collect();
                batch::run_lanes(lanes, &cfg, &m, &st)
            })?
    };
    // The thread names itself once it runs: wait for that, so its CPU time can be read.
    let mut cpu_before = thread_cpu();
    for _ in 0..100 {
        if cpu_before.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
        cpu_before = thread_cpu();
    }
    let until = Instant::now() + Duration::from_secs_f64(a.duration);
    let started = Instant::now();
    let per_driver: Vec<(u64, u64, hdrhistogram::Histogram<u64>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = w
            .ingresses
            .drain(..)
            .enumerate()
            .map(|(d, ends)| {
                let metrics = metrics.clone();
                sc.spawn(move || drive(ends, metrics, window, a.payload, a.answer, d as u8, until))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("driver"))
            .collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let control_cpu = match (cpu_before, thread_cpu()) {
        (Some(b), Some(e)) => Some((e - b) / secs),
        _ => None,
    };
    stop.store(true, Ordering::Release);
    control
        .join()
        .map_err(|_| anyhow::anyhow!("the control thread panicked"))?;
    let mut hist = hdrhistogram::Histogram::new(3)?;
    let (mut answered, mut wrong) = (0, 0);
    for (n, bad, h) in per_driver {
        answered += n;
        wrong += bad;
        hist.add(&h)?;
    }
    Ok(Run {
        answered,
        wrong,
        hist,
        secs,
        control_cpu,
    })
}

/// One driver: keeps `window` requests outstanding until `until`, then collects what is in
/// flight. Returns (answered, wrong answers, latencies in ns).
fn drive(
    ends: cohort_engine::IngressEnds,
    metrics: Arc<Metrics>,
    window: usize,
    payload: usize,
    answer: usize,
    tag: u8,
    until: Instant,
) -> (u64, u64, hdrhistogram::Histogram<u64>) {
    let bell = Bell::new();
    ends.set_wake(bell.clone());
    bell.bind_current();
    let mut ingress: Ingress<u64> =
        Ingress::new(ends, window.max(1024) * 2, metrics, Duration::from_secs(5));
    let body = vec![tag; payload];
    // Compared whole (memcmp): a byte-by-byte `all` does not vectorize, and on 16 KB answers
    // it, not the engine, was the limit (70% of a run's cycles).
    let expected = vec![tag; answer];
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    let (mut next, mut answered, mut wrong) = (0u64, 0u64, 0u64);
    loop {
        let sending = Instant::now() < until;
        while sending && ingress.in_flight() < window {
            if ingress.submit(next, SERVICE, next, 0, &body).is_err() {
                wrong += 1;
            }
            next += 1;
        }
        let n = ingress.drain(usize::MAX, |_, meta, a| {
            answered += 1;
            let _ = hist.record(meta.arrived.elapsed().as_nanos() as u64);
            if !matches!(a, Ok(p) if p == expected.as_slice()) {
                wrong += 1;
            }
        });
        if !sending && ingress.in_flight() == 0 {
            break;
        }
        if n == 0 {
            let ends = &ingress.ends;
            bell.sleep(Duration::from_millis(2), || ends.answers_waiting());
        }
    }
    (answered, wrong, hist)
}

/// CPU seconds the control thread has used so far (Linux; None elsewhere).
fn thread_cpu() -> Option<f64> {
    cohort_load::cpu_time::of_own_thread("batcher-control").map(|d| d.as_secs_f64())
}
