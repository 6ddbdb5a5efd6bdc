//! Answers from the GPU to the ingresses: a lane's TX rings, each drained by one host thread
//! into the answer rings of its own ingresses.
//!
//! One thread moving every answer was the engine's limit (measured on the H200: the egress
//! thread at 100% of its core, 0.51 us an answer, k-NN 1M at 1.9-2.8 M q/s in process against
//! 11.4 M for the kernels). The GPU writes the answer to RX ring r's requests into TX ring
//! r % n, so thread k drains TX ring k into the answer rings of ingresses k, k + n, ... : no
//! answer ring has two writers and no lock sits between the threads. Thread 0 is the lane's
//! egress thread (it also launches, watches and restarts the kernels: egress.rs); the others
//! ([`Drainer`]) only drain, and park while the GPU holds nothing.

use super::profile::HostStamp;
use super::LaneStats;
use cohort_engine::wiring::AnswerRings;
use cohort_mq::Consumer;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle drainer polls before it parks (a wake-up costs more than the GPU's
/// round trip).
const IDLE_SPIN: Duration = Duration::from_micros(50);
/// How long a parked drainer sleeps at most before it looks again (the lane's egress thread
/// wakes it when the GPU takes requests).
const PARK: Duration = Duration::from_millis(2);

/// One TX ring and the answer rings of the ingresses it answers.
pub(super) struct TxDrain {
    /// Which of the lane's TX rings (its ingresses are those i with i % rings == index).
    index: usize,
    rings: usize,
    /// The lane's ingresses (routes past them are dropped with an error).
    ingresses: usize,
    tx: Consumer,
    /// Ingress i's answer ring at i / rings.
    answers: AnswerRings,
    stats: Arc<LaneStats>,
    /// From a request's arrival at ingress to its answer read from TX, in ns: the engine's own
    /// round trip (no client wake-ups), logged at shutdown.
    pub(super) ring_to_ring: hdrhistogram::Histogram<u64>,
    /// Profile: the host's stamps of the first answers (up to `keep`).
    pub(super) host_stamps: HashMap<(u64, u64), HostStamp>,
    keep: usize,
}

impl TxDrain {
    /// The lane's drains: TX ring k with the answer rings `answers.split` gave part k.
    pub(super) fn for_lane(
        tx: Vec<Consumer>,
        answers: Vec<AnswerRings>,
        ingresses: usize,
        stats: &Arc<LaneStats>,
        profile: usize,
    ) -> Vec<TxDrain> {
        assert_eq!(tx.len(), answers.len(), "one answer set per TX ring");
        let rings = tx.len();
        tx.into_iter()
            .zip(answers)
            .enumerate()
            .map(|(index, (tx, answers))| TxDrain {
                index,
                rings,
                ingresses,
                tx,
                answers,
                stats: stats.clone(),
                ring_to_ring: hdrhistogram::Histogram::new(3).expect("3 significant digits"),
                // Answers leave TX in about the order the GPU logged them: twice the log's
                // size covers it without growing without bound.
                host_stamps: HashMap::with_capacity(profile * 2),
                keep: profile * 2,
            })
            .collect()
    }

    /// Moves up to `max` TX answers into the answer rings of the ingresses they came from.
    pub(super) fn drain(&mut self, max: usize) -> usize {
        // One wake-up per ingress for the batch (every 32 answers at most), not one fence and
        // a possible futex call per answer: this thread is every answer's one core.
        self.answers.defer_wakes();
        let n = self.drain_deferred(max);
        self.answers.wake_deferred();
        n
    }

    fn drain_deferred(&mut self, max: usize) -> usize {
        let mut n = 0;
        let (index, rings, ingresses) = (self.index, self.rings, self.ingresses);
        while n < max {
            let answers = &mut self.answers;
            let hist = &mut self.ring_to_ring;
            let stamps = &mut self.host_stamps;
            let keep = self.keep;
            let got = self.tx.try_recv(|m| {
                let now = cohort_engine::clock::now_ns();
                let _ = hist.record(now.saturating_sub(m.env.arrived));
                if stamps.len() < keep {
                    let s = HostStamp {
                        arrived: m.env.arrived,
                        read: now,
                    };
                    stamps.insert((m.env.request_id, m.route), s);
                }
                let to = m.route as usize;
                if to < ingresses && to % rings == index {
                    answers.send(to / rings, m.env, m.payload);
                } else {
                    tracing::error!(
                        route = to,
                        tx_ring = index,
                        "gpu-persistent: answer for an unknown ring dropped"
                    );
                }
            });
            if got.is_none() {
                break;
            }
            n += 1;
        }
        self.stats.answered.fetch_add(n as u64, Ordering::Relaxed);
        n
    }
}

/// A thread draining one TX ring of a lane (all but its first).
pub(super) struct Drainer {
    thread: Option<JoinHandle<TxDrain>>,
    stop: Arc<AtomicBool>,
}

impl Drainer {
    pub(super) fn spawn(d: TxDrain, name: &str) -> std::io::Result<Drainer> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-tx{}", d.index))
            .spawn(move || run(d, &s))?;
        Ok(Drainer {
            thread: Some(thread),
            stop,
        })
    }

    /// Wakes the thread if it parked (the GPU took requests: answers will follow).
    pub(super) fn nudge(&self) {
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Stops the thread once its ring is empty and takes its drain back (None if the
    /// thread panicked: its ring's memory went with it).
    pub(super) fn join(mut self) -> Option<TxDrain> {
        self.stop.store(true, Ordering::Release);
        let t = self.thread.take()?;
        t.thread().unpark();
        t.join().ok()
    }
}

impl Drop for Drainer {
    /// A lane dropped without `join` (its start failed before any kernel ran): the thread
    /// ends once its ring is empty, and its ring's memory with it.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Drains until told to stop, then once more until the ring is empty (the lane stops its
/// kernels before it stops the drainers: nothing is written after).
fn run(mut d: TxDrain, stop: &AtomicBool) -> TxDrain {
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
    loop {
        if d.drain(512) > 0 {
            idle_since = None;
            spins = 0;
            continue;
        }
        if stop.load(Ordering::Acquire) {
            while d.drain(usize::MAX) > 0 {}
            return d;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < IDLE_SPIN {
            std::hint::spin_loop();
            continue;
        }
        if d.stats.holding() == 0 {
            // The egress thread unparks this one when the GPU takes requests; an unpark
            // between the look above and the park makes the park return at once.
            std::thread::park_timeout(PARK);
            idle_since = None;
            continue;
        }
        // The GPU holds requests: their answers may be for this ring.
        spins += 1;
        if spins < 256 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
