//! The hybrid dispatch end to end: a slow batching lane (a GPU stand-in: CPU twin slots that
//! take 5 ms a batch) and fast cpu workers behind one engine. Below the batching lane's
//! capacity every request goes to it; above, the cpu workers take the excess and every
//! request is still answered once.

use crate::common;

use cohort_engine::*;
use common::*;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Rig {
    client: Client,
    batch: BatchRig,
    cpu: Option<CpuEngine>,
}

/// One batching lane (one slot, batches of up to 64, 5 ms each: ~12.8K/s) + two cpu workers.
fn rig(budget_us: u32) -> Rig {
    let metrics = metrics("hybrid");
    let spec = EngineSpec {
        name: "batch".into(),
        lanes: 3,
        policy: DispatchPolicy::Hybrid {
            gpu_lanes: 1,
            budget_us,
        },
        services: vec![SERVICE],
        slots: 4096,
        admit_by_deadline: false,
        max_queued: None,
        stride: cohort_engine::wiring::DEFAULT_STRIDE,
    };
    let mut w = wire(1, &[spec]);
    let mut lanes = std::mem::take(&mut w.engines[0]);
    let cpu_lanes = lanes.split_off(1);
    let lane = lanes.pop().unwrap();
    let devs: Vec<Box<dyn BatchSlot>> = vec![Box::new(CpuTwinSlot::new(
        Arc::new(Rev),
        64,
        Duration::from_millis(5),
    ))];
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = BatchConfig {
        max_batch: 64,
        timeout: Duration::from_micros(200),
        keep_busy: 0,
        stage: "gpu",
    };
    let (m, st) = (metrics.clone(), stop.clone());
    let thread = std::thread::spawn(move || batch::run(lane, &FirstByte, devs, &cfg, &m, &st));
    let mut reg = Registry::new();
    reg.add(Arc::new(Rev)).unwrap();
    let cpu = CpuEngine::start(
        &CpuEngineConfig {
            cpus: vec![],
            spin: Duration::from_micros(50),
            fair: true,
        },
        cpu_lanes,
        reg,
        metrics.clone(),
    )
    .unwrap();
    let client = Client::new(w.ingresses.pop().unwrap(), &metrics);
    Rig {
        client,
        batch: BatchRig {
            clients: vec![],
            metrics,
            stop,
            thread: Some(thread),
        },
        cpu: Some(cpu),
    }
}

/// Sends `n` requests at `rate`/s, collecting answers as it goes; returns the share the
/// batching lane ran.
fn drive(r: &mut Rig, n: u64, rate: f64) -> f64 {
    let gap = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    for id in 0..n {
        while Instant::now() < start + gap.mul_f64(id as f64) {
            let answers = &mut r.client.answers;
            r.client.ingress.drain(usize::MAX, |id, _, a| {
                answers.entry(id).or_default().push(a.map(|p| p.to_vec()))
            });
        }
        r.client.send(id, b"abc", Duration::from_secs(5));
    }
    r.client.collect(Duration::from_secs(10));
    for id in 0..n {
        assert_eq!(r.client.code(id), None, "request {id}");
        assert_eq!(r.client.answers[&id][0].as_ref().unwrap(), b"cba");
    }
    let on_batch = r
        .client
        .ingress
        .ends
        .answered_by(LaneRef { engine: 0, lane: 0 });
    let share = on_batch as f64 / n as f64;
    eprintln!("{n} requests at {rate}/s: batching lane ran {share:.3}");
    share
}

fn finish(mut r: Rig) {
    r.batch.stop();
    r.cpu.take().unwrap().shutdown();
}

#[test]
fn below_its_capacity_the_batching_lane_takes_everything() {
    // Timing-dependent shares: one test at a time.
    let _one = common::serial();
    let mut r = rig(20_000);
    let share = drive(&mut r, 400, 2_000.0);
    // Alone on a quiet machine it runs > 0.97; with a compiler sharing the 2-core CI machine
    // it was measured at 0.83 (the lane's thread, delayed, looks late to the dispatcher).
    // A dispatcher that splits work regardless of capacity sends about half away.
    assert!(share > 0.75, "batching lane ran {share:.3} of the requests");
    finish(r);
}

#[test]
fn past_its_capacity_cpu_workers_take_the_excess() {
    // ~12.8K/s of batching capacity (5 ms a batch), 40K/s offered, a 12 ms budget: most must
    // go to the cpu workers, and the batching lane must stay busy rather than be abandoned.
    // Timing-dependent shares: one test at a time.
    let _one = common::serial();
    let mut r = rig(12_000);
    let share = drive(&mut r, 12_000, 40_000.0);
    assert!(
        (0.08..0.8).contains(&share),
        "batching lane ran {share:.3} of the requests"
    );
    finish(r);
}
