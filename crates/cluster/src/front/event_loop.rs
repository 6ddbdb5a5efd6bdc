//! A lane's thread: the loop that takes membership changes, routes what the ingresses
//! admitted, flushes the batches, handles UCX's events and the answer rings, expires
//! deadlines, and spins, sleeps or blocks on UCX's events when idle; and the dispatch of
//! each UCX event.

use super::{backoff, Lane, RemoteConfig, RemoteMetrics};
use crate::link::Link;
use crate::membership::Change;
use crate::ring::InRings;
use crate::tuning::SPIN;
use crate::wire;
use cohort_engine::wiring::AnswerRings;
use cohort_engine::LaneEnds;
use cohort_ucx::{Event, Worker};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(super) fn run(
    cfg: RemoteConfig,
    w: Worker,
    mut lane: LaneEnds,
    changes: crossbeam_channel::Receiver<Change>,
    stop: &AtomicBool,
    (metrics, index): (RemoteMetrics, usize),
) {
    let _health = lane.health_guard();
    // The ingresses unpark this thread when they write it a request.
    lane.bell.bind_current();
    let efd = if cfg.busy_poll {
        -1
    } else {
        w.event_fd().unwrap_or(-1)
    };
    let mut s = Lane {
        efd,
        link: Link::new(cfg.key.clone()),
        ring_link: Link::new(cfg.key.clone()),
        answer_rings: InRings::default(),
        ring_slot: Vec::new(),
        ring_reads: Vec::new(),
        metrics,
        index,
        cfg,
        w,
        nodes: Vec::new(),
        by_ep: HashMap::new(),
        pending: HashMap::new(),
        gathers: HashMap::new(),
        splits: HashMap::new(),
        deadlines: BTreeSet::new(),
        next_id: 1,
        turn: 0,
        stale: 0,
    };
    let mut idle_since = None;
    let mut stopping: Option<Instant> = None;
    loop {
        if stopping.is_none() && stop.load(Ordering::Acquire) {
            // The ingresses have stopped; what is in flight gets its answers, a while.
            stopping = Some(Instant::now());
        }
        if let Some(t) = stopping {
            if s.pending.is_empty() || t.elapsed() > Duration::from_secs(5) {
                s.fail_all(&mut lane.answers, "the front end is stopping");
                break;
            }
        }
        let mut busy = false;
        while let Ok(c) = changes.try_recv() {
            s.apply(c, &mut lane.answers);
            busy = true;
        }
        s.reconnect();
        // Take what the ingresses admitted, a bounded run at a time.
        for _ in 0..4096 {
            let answers = &mut lane.answers;
            let Some(()) = lane.requests.poll(|ingress, m| {
                // The payload is kept only where a failed node's request may be sent
                // again (idempotent services): no copy per request otherwise.
                let keep = s.cfg.idempotent.contains(&m.env.service);
                let payload = if keep { m.payload.to_vec() } else { Vec::new() };
                s.route(answers, ingress, m.env, m.payload, payload, false)
            }) else {
                break;
            };
            busy = true;
        }
        s.flush(&mut lane.answers);
        busy |= s.w.progress();
        for ev in s.w.take_events() {
            busy = true;
            s.on_event(ev, &mut lane.answers);
        }
        busy |= s.read_answer_rings(&mut lane.answers);
        s.expire(&mut lane.answers);
        if busy {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < SPIN || s.cfg.busy_poll {
            std::hint::spin_loop();
        } else if s.pending.is_empty() && stopping.is_none() {
            // Nothing in flight: only a request can bring work, and its ingress rings the bell.
            lane.sleep(Duration::from_millis(1));
        } else if s.w.arm() {
            // Answers owed: block on UCX's events, briefly (a new request may come meanwhile,
            // and its bell is not one this wait hears).
            let mut fd = libc::pollfd {
                fd: s.efd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000,
            };
            // SAFETY: one valid pollfd and timeout.
            unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
        }
    }
    if s.stale > 0 {
        tracing::info!(stale = s.stale, "remote lane: late answers dropped");
    }
}

impl Lane {
    pub(super) fn on_event(&mut self, ev: Event, lane: &mut AnswerRings) {
        match ev {
            Event::Message { data, from } => {
                if let Some(reason) = wire::refusal_reason(&data) {
                    return self.refused_by(from, &reason, lane);
                }
                let data = match self.link.open(&data) {
                    Ok(inner) => inner,
                    Err(why) => return self.refused(from, &data, &why, lane),
                };
                match wire::kind(data) {
                    Ok(wire::HELLO_ACK) => return self.hello_answered(from, data),
                    _ if self.unverified(from) => {
                        // Before its hello's answer a peer's messages are not taken.
                        return self.refused(
                            from,
                            data,
                            "a message before the hello's answer",
                            lane,
                        );
                    }
                    Ok(wire::RING_OFFER) => return self.ring_offered(from, data),
                    Ok(wire::RING_CREDIT) => return self.ring_read(from, data),
                    _ => {}
                }
                self.answers(data, lane);
            }
            Event::Failed { ep, why } => {
                self.answer_rings.retire(ep);
                if let Some(i) = self.by_ep.remove(&ep) {
                    let n = &mut self.nodes[i];
                    if n.failures == 0 {
                        tracing::warn!(node = %n.info.id, %why, "remote: the connection to a node failed; connecting again while it is registered");
                    }
                    n.failures += 1;
                    n.ep = None;
                    n.ring = None;
                    n.verified = false;
                    n.hello = None;
                    n.retry_at = Some(Instant::now() + backoff(n.failures));
                    self.node_failed(
                        i,
                        lane,
                        "the connection to the node serving this request failed",
                    );
                }
            }
            Event::Accepted(_) => {}
        }
    }
}
