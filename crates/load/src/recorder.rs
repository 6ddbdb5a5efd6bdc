//! What the generator's threads share during one run (the tracker of outstanding requests,
//! the clock, the GOAWAYs) and what each records of the answers; the transports drive
//! requests through these, `run` starts them and turns the records into a report.

use crate::config::{ClientKey, LoadConfig, Mode};
use crate::schedule::Schedule;
use crate::tracker::{Claim, Tracker};
use crate::workload::Workload;
use anyhow::Result;
use cohort_proto::{ErrorPayload, Kind};
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// State shared by the generator's threads during one run.
pub(crate) struct Shared {
    pub tracker: Tracker,
    pub workload: Arc<dyn Workload>,
    pub start: Instant,
    pub measure_from_ns: u64,
    pub end_ns: u64,
    pub connections: usize,
    pub answer_timeout: Duration,
    pub request_timeout_us: u32,
    pub key: Option<ClientKey>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Added to each request's sequence number to make its signed frame's nonce (a run's
    /// nonces differ from the last run's).
    pub nonce_base: u64,
    /// Requests sent, and requests settled (answered, or given up as unanswered).
    pub sent: AtomicU64,
    pub settled: AtomicU64,
    pub stop: AtomicBool,
    /// Per connection: the ids a GOAWAY promised to answer, once one arrived.
    pub goaway: Vec<Mutex<Option<HashSet<u64>>>>,
    pub goaway_seen: AtomicBool,
}

impl Shared {
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
    pub fn measured(&self, intended_ns: u64) -> bool {
        intended_ns >= self.measure_from_ns && intended_ns < self.end_ns
    }
    pub fn conn_has_goaway(&self, c: usize) -> bool {
        self.goaway_seen.load(Ordering::Acquire)
            && self.goaway[c].lock().expect("goaway lock").is_some()
    }
    pub fn record_goaway(&self, c: usize, pending: Vec<u64>) {
        *self.goaway[c].lock().expect("goaway lock") = Some(pending.into_iter().collect());
        self.goaway_seen.store(true, Ordering::Release);
    }
    /// Sleeps or spins until `t_ns`.
    pub fn wait_until(&self, t_ns: u64) {
        loop {
            let now = self.now_ns();
            if now >= t_ns {
                return;
            }
            let left = t_ns - now;
            if left > 200_000 {
                std::thread::sleep(Duration::from_nanos(left - 100_000));
            } else if left > 20_000 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// What one thread of the generator counted. Merged at the end.
pub(crate) struct Recorder {
    pub ok_ns: Histogram<u64>,
    pub all_ns: Histogram<u64>,
    /// Answers that were refusals (OVERLOADED, TIMEOUT): how soon a client hears "no".
    pub refused_ns: Histogram<u64>,
    pub lag_ns: Histogram<u64>,
    /// How long each answer waited in the socket after the kernel received it, before a
    /// generator thread read it (UDP, where the kernel stamps datagrams).
    pub read_ns: Histogram<u64>,
    pub sent: u64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub unexpected: u64,
    /// Page services and workloads that name their requests' kinds (`request_kind`): latency
    /// of every answer per request type, and the type's errors.
    pub per_type: BTreeMap<&'static str, (Histogram<u64>, u64)>,
}

pub(crate) enum Answer<'a> {
    Frame(Kind, &'a [u8]),
    /// HTTP: status and parsed JSON body.
    Json(u16, serde_json::Value),
    /// The transport failed for this request (e.g. connection closed).
    Failed(&'static str),
    /// A page service: the request's type and its checked outcome (an error's name).
    Page(&'static str, Result<(), String>),
    /// gRPC: the output tensors, or the error's name.
    Tensors(Result<Vec<cohort_engine::tensor::Tensor>, String>),
    /// gRPC, a service of Cohort's own: the encoded reply, or the error's name.
    Grpc(Result<Vec<u8>, String>),
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            ok_ns: hist(),
            all_ns: hist(),
            refused_ns: hist(),
            lag_ns: hist(),
            read_ns: hist(),
            sent: 0,
            ok: 0,
            errors: BTreeMap::new(),
            unexpected: 0,
            per_type: BTreeMap::new(),
        }
    }

    fn error(&mut self, name: &str) {
        *self.errors.entry(name.to_string()).or_insert(0) += 1;
    }

    /// An answer was read `waited_ns` after the kernel received it (counted for reads in
    /// the measured window, as the send lag is for sends).
    pub fn on_read(&mut self, sh: &Shared, waited_ns: u64) {
        if sh.measured(sh.now_ns()) {
            self.read_ns.saturating_record(waited_ns.max(1));
        }
    }

    /// Registers a request about to be sent at `intended_ns` (now = `now_ns`).
    pub fn on_send(&mut self, sh: &Shared, seq: u64, intended_ns: u64, now_ns: u64) {
        if let Some(evicted) = sh.tracker.start(seq, intended_ns) {
            sh.settled.fetch_add(1, Ordering::Relaxed);
            if sh.measured(evicted) {
                self.error("no_answer");
            }
        }
        sh.sent.fetch_add(1, Ordering::Relaxed);
        if sh.measured(intended_ns) {
            self.sent += 1;
            self.lag_ns
                .saturating_record(now_ns.saturating_sub(intended_ns).max(1));
        }
    }

    /// Gives up on an outstanding request (answer timeout); counts it as no_answer.
    pub fn give_up(&mut self, sh: &Shared, seq: u64) {
        if let Claim::Outstanding(intended) = sh.tracker.finish(seq) {
            sh.settled.fetch_add(1, Ordering::Relaxed);
            if sh.measured(intended) {
                self.error("no_answer");
            }
        }
    }

    pub fn on_answer(&mut self, sh: &Shared, seq: u64, answer: Answer<'_>) {
        let intended = match sh.tracker.finish(seq) {
            Claim::Outstanding(t) => t,
            Claim::Unknown => {
                self.unexpected += 1;
                return;
            }
        };
        let now = sh.now_ns();
        sh.settled.fetch_add(1, Ordering::Relaxed);
        let w = &sh.workload;
        // A page's kind comes with its answer; other workloads may say each request's kind.
        let mut page_type = w.request_kind(seq);
        let outcome: Result<(), String> = match answer {
            Answer::Page(kind, outcome) => {
                page_type = Some(kind);
                outcome
            }
            Answer::Frame(Kind::Response, p) if w.check(seq, p) => Ok(()),
            Answer::Frame(Kind::Response, _) => Err("wrong_answer".into()),
            Answer::Frame(Kind::Error, p) => Err(ErrorPayload::decode(p)
                .map(|e| e.code.name().to_string())
                .unwrap_or_else(|_| "malformed_error".into())),
            Answer::Frame(_, _) => Err("unexpected_frame".into()),
            Answer::Json(200, v) if w.check_json(seq, &v) => Ok(()),
            Answer::Json(200, _) => Err("wrong_answer".into()),
            Answer::Json(status, v) => Err(v
                .get("error")
                .and_then(|e| e.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| format!("http_{status}"))),
            Answer::Failed(why) => Err(why.into()),
            Answer::Tensors(Ok(t)) if w.check_tensors(seq, &t) => Ok(()),
            Answer::Tensors(Ok(_)) => Err("wrong_answer".into()),
            Answer::Tensors(Err(name)) => Err(name),
            Answer::Grpc(Ok(b)) if w.check_grpc(seq, &b) => Ok(()),
            Answer::Grpc(Ok(_)) => Err("wrong_answer".into()),
            Answer::Grpc(Err(name)) => Err(name),
        };
        if !sh.measured(intended) {
            return;
        }
        let lat = now.saturating_sub(intended).max(1);
        self.all_ns.saturating_record(lat);
        if let Some(kind) = page_type {
            let (h, errors) = self.per_type.entry(kind).or_insert_with(|| (hist(), 0));
            h.saturating_record(lat);
            *errors += outcome.is_err() as u64;
        }
        match outcome {
            Ok(()) => {
                self.ok += 1;
                self.ok_ns.saturating_record(lat);
            }
            Err(name) => {
                if is_refusal(&name) {
                    self.refused_ns.saturating_record(lat);
                }
                self.error(&name)
            }
        }
    }

    pub fn merge(&mut self, o: Recorder) {
        self.ok_ns.add(&o.ok_ns).expect("same bounds");
        self.all_ns.add(&o.all_ns).expect("same bounds");
        self.refused_ns.add(&o.refused_ns).expect("same bounds");
        self.lag_ns.add(&o.lag_ns).expect("same bounds");
        self.read_ns.add(&o.read_ns).expect("same bounds");
        self.sent += o.sent;
        self.ok += o.ok;
        self.unexpected += o.unexpected;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_insert(0) += v;
        }
        for (k, (h, e)) in o.per_type {
            let (mine, errors) = self.per_type.entry(k).or_insert_with(|| (hist(), 0));
            mine.add(&h).expect("same bounds");
            *errors += e;
        }
    }
}

/// Whether an error answer is a refusal made for load (the request was not run): OVERLOADED
/// (gRPC's RESOURCE_EXHAUSTED carries it as its message's first word) or TIMEOUT.
pub fn is_refusal(name: &str) -> bool {
    matches!(name, "OVERLOADED" | "TIMEOUT")
}

/// Sequence numbers of connection `c`: c, c + n, c + 2n, ... so that `seq % n` names the
/// connection a request went out on.
pub(crate) fn seq_of(c: usize, k: u64, connections: usize) -> u64 {
    c as u64 + k * connections as u64
}

/// The open-loop schedule of connection `c`: its share of the rate.
pub(crate) fn schedule_for(cfg: &LoadConfig, c: usize) -> Option<Schedule> {
    match cfg.mode {
        Mode::Open { rate, poisson } => {
            let share = rate / cfg.connections as f64;
            // Stagger connections so constant-rate sends interleave instead of colliding.
            let offset = (1e9 / rate * c as f64) as u64;
            Some(Schedule::new(
                share,
                poisson,
                cfg.seed ^ (c as u64 * 0x9E37),
                offset,
            ))
        }
        Mode::Closed { .. } => None,
    }
}
