//! Responder threads: turn a finished cohort's (ids, distances) into encoded answers and hand
//! them to the transports, off the control thread. The control thread copies a cohort's
//! results out of its pinned buffers (so the slot can be reused at once) in chunks.

use crate::knn::to_neighbors;
use crate::GpuError;
use cohort_engine::{Metrics, Request, ResponseBody};
use cohort_services::knn::encode_response;
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Answers per hand-over: small enough that several responders share one big cohort.
pub(super) const CHUNK: usize = 256;
/// Chunks queued for the responders before the control thread answers a chunk itself.
const QUEUE: usize = 256;

/// One chunk of a finished cohort: request i's k results are ids/dist[i * k..(i + 1) * k].
pub(super) struct Answers {
    pub reqs: Vec<Request>,
    pub ids: Vec<u32>,
    pub dist: Vec<f32>,
    pub k: usize,
    /// When the cohort was launched, and how long it ran.
    pub started: Instant,
    pub compute: Duration,
}

impl Answers {
    pub fn send(self, metrics: &Metrics) {
        let rows = to_neighbors(&self.ids, &self.dist, self.reqs.len(), self.k);
        for (req, row) in self.reqs.into_iter().zip(rows) {
            let wait = self.started.saturating_duration_since(req.arrived);
            metrics.stage("gpu", wait, self.compute);
            req.respond(ResponseBody::Ok(encode_response(&row)));
        }
    }
}

/// Where the control thread hands answers: the responders' queue, or itself when there are
/// no responders or their queue is full (never blocks, never drops).
pub(super) struct AnswerSink {
    tx: Option<Sender<Answers>>,
    metrics: Arc<Metrics>,
}

impl AnswerSink {
    pub fn hand_over(&self, a: Answers) {
        let a = match &self.tx {
            Some(tx) => match tx.try_send(a) {
                Ok(()) => return,
                Err(TrySendError::Full(a) | TrySendError::Disconnected(a)) => a,
            },
            None => a,
        };
        a.send(&self.metrics);
    }
}

pub(super) fn spawn(
    n: usize,
    gpu: usize,
    metrics: &Arc<Metrics>,
) -> Result<(AnswerSink, Vec<JoinHandle<()>>), GpuError> {
    if n == 0 {
        let sink = AnswerSink {
            tx: None,
            metrics: metrics.clone(),
        };
        return Ok((sink, Vec::new()));
    }
    let (tx, rx): (Sender<Answers>, Receiver<Answers>) = bounded(QUEUE);
    let threads = (0..n)
        .map(|i| {
            let (rx, m) = (rx.clone(), metrics.clone());
            std::thread::Builder::new()
                .name(format!("gpu-respond-{gpu}-{i}"))
                .spawn(move || {
                    // Ends when the control thread (the only sender) is gone and the queue is empty.
                    for a in rx.iter() {
                        a.send(&m);
                    }
                })
                .map_err(|e| GpuError::Invalid(format!("spawning a responder: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let sink = AnswerSink {
        tx: Some(tx),
        metrics: metrics.clone(),
    };
    Ok((sink, threads))
}
