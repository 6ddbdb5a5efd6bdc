//! The wiring's tests: slot strides, deferred answer wakes, the queue bound across ingresses,
//! and the defaults' admission of a batched load.

use super::answers::WAKE_EVERY;
use super::*;
use cohort_mq::Envelope;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the wakes an ingress gets.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

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

/// A lane's answer rings split over threads: part k answers ingresses k, k + n, ... (at
/// index i / n), each answer reaches the ingress it was sent to, and a restart still wakes
/// every ingress from the lane.
#[test]
fn split_answer_rings_reach_their_own_ingresses_and_restarts_wake_all() {
    let spec = EngineSpec {
        name: "t".into(),
        lanes: 1,
        policy: DispatchPolicy::RoundRobin,
        services: vec![1],
        slots: 64,
        admit_by_deadline: false,
        max_queued: None,
        stride: DEFAULT_STRIDE,
    };
    let ingresses = 5;
    let mut w = wire(ingresses, &[spec]);
    let counts: Vec<Arc<Count>> = (0..ingresses).map(|_| Arc::new(Count::default())).collect();
    for (ing, c) in w.ingresses.iter().zip(&counts) {
        ing.set_wake(c.clone());
    }
    let mut lane = w.engines.pop().unwrap().pop().unwrap();
    let mut parts = lane.answers.split(2);
    assert_eq!(
        parts.iter().map(AnswerRings::len).collect::<Vec<_>>(),
        [3, 2]
    );
    assert!(
        lane.answers.is_empty(),
        "the lane's own set sends nothing after"
    );
    for i in 0..ingresses {
        let env = Envelope {
            token: 1,
            service: 1,
            status: 0,
            request_id: i as u64,
            deadline: 0,
            arrived: 0,
        };
        parts[i % 2].send(i / 2, env, &[i as u8]);
    }
    for (i, ing) in w.ingresses.iter_mut().enumerate() {
        let mut got = Vec::new();
        ing.drain_answers(usize::MAX, |m| got.push((m.env.request_id, m.payload[0])));
        assert_eq!(got, [(i as u64, i as u8)], "ingress {i}");
    }
    let before: Vec<usize> = counts.iter().map(|c| c.0.load(Ordering::Relaxed)).collect();
    lane.announce_restart();
    for (i, c) in counts.iter().enumerate() {
        assert_eq!(
            c.0.load(Ordering::Relaxed),
            before[i] + 1,
            "ingress {i} woken"
        );
    }
}
