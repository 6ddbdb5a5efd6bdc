//! The generic batching engine (gpu-direct / gpu-cohort's loop) on CPU twin slots: batches
//! close at their size or their timeout, keys never mix, deadlines expire, shutdown drains,
//! and a panicking backend loses no request.

use crate::common;
use cohort_proto::ErrorCode;
use common::*;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(10);

#[test]
fn a_batch_closes_at_its_size() {
    let _one = common::serial();
    let mut r = batch_rig(1, 2, 4, LONG, Duration::ZERO, 64);
    let c = &mut r.clients[0];
    for i in 0..8 {
        c.send(i, &[1, i as u8], LONG);
    }
    c.collect(Duration::from_secs(2));
    for i in 0..8u64 {
        assert_eq!(c.answers[&i], vec![Ok(vec![i as u8, 1])]);
    }
    assert_eq!(
        r.batches(),
        (2, 8),
        "two full batches of four, no timeout waited"
    );
    r.stop();
}

#[test]
fn a_batch_closes_at_its_timeout() {
    let _one = common::serial();
    let mut r = batch_rig(1, 2, 100, Duration::from_millis(40), Duration::ZERO, 64);
    let c = &mut r.clients[0];
    let t = Instant::now();
    for i in 0..3 {
        c.send(i, &[7, 7], LONG);
    }
    c.collect(Duration::from_secs(2));
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(35),
        "answered after {waited:?}"
    );
    assert!(waited < Duration::from_secs(1), "answered after {waited:?}");
    assert_eq!(r.batches(), (1, 3));
    r.stop();
}

#[test]
fn an_idle_device_never_waits_out_the_timeout() {
    let _one = common::serial();
    // Work-conserving: with nothing in flight a lone request launches at once, although
    // its batch has room for 100 and the timeout is 10 s.
    let mut r = batch_rig_with(1, 2, 100, LONG, Duration::ZERO, 64, 1, false);
    let c = &mut r.clients[0];
    let t = Instant::now();
    c.send(1, &[7, 7], LONG);
    c.collect(Duration::from_secs(2));
    assert_eq!(c.code(1), None);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "waited {:?}",
        t.elapsed()
    );
    assert_eq!(r.batches(), (1, 1));
    r.stop();
}

#[test]
fn while_the_device_is_busy_batches_grow_with_what_arrives() {
    let _one = common::serial();
    // One batch in flight for 200 ms: the 20 requests sent meanwhile wait for it (not for
    // the 10 s timeout) and go together, as one batch, once it finishes.
    let mut r = batch_rig_with(1, 2, 100, LONG, Duration::from_millis(200), 64, 1, false);
    let c = &mut r.clients[0];
    c.send(0, &[7, 0], LONG);
    std::thread::sleep(Duration::from_millis(50));
    for i in 1..=20 {
        c.send(i, &[7, i as u8], LONG);
    }
    c.collect(Duration::from_secs(5));
    assert!((0..=20).all(|i| c.code(i).is_none()));
    assert_eq!(
        r.batches(),
        (2, 21),
        "the first alone, then the other 20 at once"
    );
    r.stop();
}

#[test]
fn admission_refuses_at_once_what_would_wait_past_its_deadline() {
    let _one = common::serial();
    // One slot, batches of up to 50 taking 20 ms: about 2 500 answers/s under load. The
    // ingress learns that rate from a backlog (phase 1); then a burst of 400 requests with
    // 100 ms deadlines holds about 250 that can make it, and the rest are refused OVERLOADED
    // as they arrive instead of waiting out their deadline in the queue.
    let mut r = batch_rig_with(
        1,
        1,
        50,
        Duration::from_millis(1),
        Duration::from_millis(20),
        4096,
        1,
        true,
    );
    let c = &mut r.clients[0];
    let mut id = 0u64;
    let learn = Instant::now();
    while learn.elapsed() < Duration::from_millis(300) {
        for _ in 0..20 {
            c.send(id, &[1, id as u8], LONG);
            id += 1;
        }
        c.collect(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(4));
    }
    c.collect(Duration::from_secs(5));
    let codes: Vec<_> = (0..id).filter_map(|i| c.code(i)).collect();
    assert!(
        codes.is_empty(),
        "the backlog is served: {} of {id} refused {:?}",
        codes.len(),
        &codes[..codes.len().min(5)]
    );
    let burst = 1_000_000..1_000_400u64;
    let t = Instant::now();
    for i in burst.clone() {
        c.send(i, &[1, i as u8], Duration::from_millis(100));
    }
    let sending = t.elapsed();
    let refused_at_once = burst
        .clone()
        .filter(|i| matches!(c.answers.get(i).map(|a| &a[..]), Some([Err(e)]) if e.code == ErrorCode::Overloaded))
        .count();
    c.collect(Duration::from_secs(3));
    let ok = burst.clone().filter(|&i| c.code(i).is_none()).count();
    assert!(
        sending < Duration::from_millis(50),
        "sending took {sending:?}"
    );
    assert!(
        refused_at_once >= 50,
        "refused {refused_at_once} at once, served {ok}"
    );
    assert!(ok >= 100, "served {ok}, refused {refused_at_once} at once");
    r.stop();
}

#[test]
fn batch_keys_never_mix() {
    let _one = common::serial();
    let mut r = batch_rig(1, 3, 100, Duration::from_millis(5), Duration::ZERO, 64);
    let c = &mut r.clients[0];
    for i in 0..6 {
        c.send(i, &[(i % 2) as u8 + 1, 9], LONG);
    }
    c.collect(Duration::from_secs(2));
    assert_eq!(c.code(5), None);
    assert_eq!(r.batches(), (2, 6), "one batch per key");
    r.stop();
}

#[test]
fn requests_past_their_deadline_time_out_and_bad_ones_are_refused() {
    let _one = common::serial();
    // The batch waits 60 ms; a request with a 10 ms deadline expires in it.
    let mut r = batch_rig(1, 2, 100, Duration::from_millis(60), Duration::ZERO, 64);
    let c = &mut r.clients[0];
    c.send(1, &[3, 1], Duration::from_millis(10));
    c.send(2, &[3, 2], LONG);
    c.send(3, &[], LONG);
    c.collect(Duration::from_secs(2));
    assert_eq!(c.code(1), Some(ErrorCode::Timeout));
    assert_eq!(c.code(2), None);
    assert_eq!(
        c.code(3),
        Some(ErrorCode::BadRequest),
        "batch_key's error is the answer"
    );
    r.stop();
}

#[test]
fn shutdown_launches_what_is_waiting_and_answers_everything() {
    let _one = common::serial();
    let mut r = batch_rig(1, 2, 1000, LONG, Duration::from_millis(5), 1024);
    for i in 0..500 {
        r.clients[0].send(i, &[1, 2, 3], LONG);
    }
    let t = Instant::now();
    r.stop();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "stop did not wait out the batch timeout"
    );
    let c = &mut r.clients[0];
    c.collect(Duration::from_secs(1));
    assert_eq!(c.answers.len(), 500);
    assert!((0..500).all(|i| c.code(i).is_none()));
}

#[test]
fn a_panicking_backend_loses_no_request() {
    let _one = common::serial();
    let mut r = batch_rig(1, 2, 8, Duration::from_millis(20), Duration::ZERO, 64);
    let c = &mut r.clients[0];
    for i in 0..20 {
        c.send(i, if i == 5 { b"panic" } else { b"ok" }, LONG);
    }
    c.collect(Duration::from_secs(5));
    assert_eq!(c.ingress.in_flight(), 0, "all answered");
    for i in 0..20u64 {
        let n = c.answers[&i].len();
        assert_eq!(n, 1, "request {i} answered {n} times");
    }
    assert_eq!(c.code(5), Some(ErrorCode::Internal));
    // The lane is gone: new requests are refused at once, not queued forever.
    c.send(99, b"ok", LONG);
    assert_eq!(c.code(99), Some(ErrorCode::Internal));
    r.stop();
}

#[test]
fn under_load_from_several_ingresses_every_request_is_answered_once() {
    let _one = common::serial();
    // Four ingress threads, small rings (many OVERLOADED), two slots with a device time: each
    // request gets exactly one answer, a result or OVERLOADED.
    let mut r = batch_rig(
        4,
        2,
        64,
        Duration::from_micros(200),
        Duration::from_micros(300),
        64,
    );
    let clients = std::mem::take(&mut r.clients);
    let handles: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(t, mut c)| {
            std::thread::spawn(move || {
                c.bell.bind_current();
                for i in 0..20_000u64 {
                    c.send(i, &[(i % 3) as u8, t as u8], LONG);
                    if c.answers.contains_key(&i) {
                        // Refused (OVERLOADED): back off as a client would.
                        c.collect(Duration::from_micros(200));
                    }
                    // Drain as an io thread does between reads; up to 512 in flight against
                    // rings of 64: both answers and OVERLOADED.
                    if i % 16 == 0 {
                        c.collect(Duration::ZERO);
                    }
                    while c.ingress.in_flight() >= 512 {
                        c.collect(Duration::from_micros(100));
                    }
                }
                c.collect(Duration::from_secs(10));
                c
            })
        })
        .collect();
    let mut ok = 0;
    for h in handles {
        let c = h.join().unwrap();
        assert_eq!(c.answers.len(), 20_000);
        for i in 0..20_000u64 {
            match c.code(i) {
                None => ok += 1,
                Some(ErrorCode::Overloaded) => {}
                other => panic!("request {i}: {other:?}"),
            }
        }
    }
    assert!(ok > 10_000, "{ok} answered");
    r.stop();
}

#[test]
fn time_spent_waiting_for_a_slot_counts_toward_the_timeout() {
    let _one = common::serial();
    // One slot, batches of up to 100 closing 60 ms after their oldest request arrived, and a
    // device that takes 60 ms per batch. A launches at 60 ms, finishes at 120. B arrives at
    // 70, waits in its ring for the slot, is staged at 120 and, having waited 50 ms already,
    // launches at 130 and finishes at 190; counted from staging it would finish at 240.
    let mut r = batch_rig(
        1,
        1,
        100,
        Duration::from_millis(60),
        Duration::from_millis(60),
        64,
    );
    let c = &mut r.clients[0];
    let t0 = Instant::now();
    c.send(1, &[1, 1], LONG);
    std::thread::sleep(Duration::from_millis(70));
    c.send(2, &[1, 2], LONG);
    c.collect(Duration::from_secs(2));
    let took = t0.elapsed();
    assert_eq!((c.code(1), c.code(2)), (None, None));
    assert!(took >= Duration::from_millis(180), "{took:?}");
    assert!(
        took < Duration::from_millis(225),
        "B waited out a fresh timeout: {took:?}"
    );
    r.stop();
}

#[test]
fn least_loaded_spreads_work_over_batching_lanes() {
    let _one = common::serial();
    // Two batching lanes (two "GPUs"): a batching lane empties its ring into a slot at once,
    // so least-loaded must count what each lane still owes the ingress, not its ring depth.
    use cohort_engine::*;
    use std::sync::Arc;
    let metrics = common::metrics("batch");
    let mut w = wire(1, &[common::spec("batch", 2, 64)]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut launches = Vec::new();
    for lane in w.engines.pop().unwrap() {
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        launches.push(count.clone());
        let devs: Vec<Box<dyn BatchSlot>> = vec![Box::new(Counted {
            slot: CpuTwinSlot::new(Arc::new(common::Rev), 8, Duration::from_millis(20)),
            launches: count,
        })];
        let (m, st) = (metrics.clone(), stop.clone());
        let cfg = BatchConfig {
            max_batch: 8,
            timeout: Duration::from_millis(30),
            keep_busy: 0,
            stage: "gpu",
        };
        threads.push(std::thread::spawn(move || {
            batch::run(lane, &common::FirstByte, devs, &cfg, &m, &st)
        }));
    }
    let mut c = common::Client::new(w.ingresses.pop().unwrap(), &metrics);
    // Spaced sends: each lane empties its ring before the next request, so ring depths are
    // always equal (zero) and only the outstanding count tells the lanes apart. A lane owes
    // its requests until its batch (20 ms) is answered, long after the last send.
    for i in 0..16 {
        c.send(i, &[1, i as u8], LONG);
        std::thread::sleep(Duration::from_micros(500));
    }
    c.collect(Duration::from_secs(2));
    assert!((0..16).all(|i| c.code(i).is_none()));
    // Which lanes ran batches, not how long it took (the 2-core CI machine's timing varies).
    let per_lane: Vec<usize> = launches
        .iter()
        .map(|l| l.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    assert!(
        per_lane.iter().all(|&n| n >= 1),
        "batches per lane {per_lane:?}: one lane did all"
    );
    stop.store(true, std::sync::atomic::Ordering::Release);
    threads.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn one_thread_serves_several_lanes_in_turn() {
    let _one = common::serial();
    // Centaur's one core for many GPUs: three lanes (three "GPUs", each with its own slot)
    // on one control thread. Every request is answered by the lane it was sent to, each
    // lane runs batches of its own, and an idle thread wakes for a request on any lane.
    use cohort_engine::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let metrics = common::metrics("batch");
    let mut w = wire(1, &[common::spec("batch", 3, 64)]);
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let lanes: Vec<(LaneEnds, Vec<Box<dyn BatchSlot>>)> = w
        .engines
        .pop()
        .unwrap()
        .into_iter()
        .zip(&counts)
        .map(|(lane, count)| {
            let slot: Box<dyn BatchSlot> = Box::new(Counted {
                slot: CpuTwinSlot::new(Arc::new(common::Rev), 8, Duration::from_millis(5)),
                launches: count.clone(),
            });
            (lane, vec![slot])
        })
        .collect();
    let (m, st) = (metrics.clone(), stop.clone());
    let thread = std::thread::spawn(move || {
        let cfg = BatchConfig {
            max_batch: 8,
            timeout: Duration::from_millis(2),
            keep_busy: 1,
            stage: "gpu",
        };
        let lanes = lanes
            .into_iter()
            .map(|(lane, slots)| batch::BatchLane {
                lane,
                backend: &common::FirstByte,
                slots,
            })
            .collect();
        batch::run_lanes(lanes, &cfg, &m, &st)
    });
    let mut c = common::Client::new(w.ingresses.pop().unwrap(), &metrics);
    // First a pause long enough for the thread to park on its bells, then spaced sends.
    std::thread::sleep(Duration::from_millis(60));
    for i in 0..48u64 {
        c.send(i, &[1, i as u8], LONG);
        std::thread::sleep(Duration::from_micros(300));
    }
    c.collect(Duration::from_secs(3));
    for i in 0..48u64 {
        assert_eq!(c.code(i), None, "request {i}");
        let got = c.answers[&i][0].as_ref().unwrap();
        assert_eq!(got, &vec![i as u8, 1], "request {i}: another's answer");
    }
    let per_lane: Vec<usize> = counts.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    assert!(
        per_lane.iter().all(|&n| n >= 1),
        "batches per lane {per_lane:?}: a lane was never served"
    );
    stop.store(true, Ordering::Release);
    thread.join().unwrap();
}

/// A slot that counts its launches (which lane ran what).
struct Counted {
    slot: cohort_engine::CpuTwinSlot,
    launches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl cohort_engine::BatchSlot for Counted {
    fn capacity(&self) -> usize {
        self.slot.capacity()
    }
    fn stage(
        &mut self,
        key: u64,
        row: usize,
        payload: &[u8],
    ) -> Result<(), cohort_proto::ErrorPayload> {
        self.slot.stage(key, row, payload)
    }
    fn launch(&mut self, key: u64, rows: usize) -> Result<(), String> {
        self.launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.slot.launch(key, rows)
    }
    fn poll(&mut self) -> Result<bool, String> {
        self.slot.poll()
    }
    fn answer(
        &mut self,
        key: u64,
        row: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), cohort_proto::ErrorPayload> {
        self.slot.answer(key, row, out)
    }
}
