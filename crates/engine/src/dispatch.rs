//! The dispatcher: picks the engine lane (a worker queue, later a GPU) for each request.

use crate::request::Request;
use cohort_proto::ErrorCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// One bounded queue into an engine.
pub trait Lane: Send + Sync {
    /// Enqueues without blocking; gives the request back when the queue is full.
    fn try_submit(&self, req: Request) -> Result<(), Request>;
    /// Requests waiting in this lane (used by least-loaded).
    fn depth(&self) -> usize;
}

/// A lane that is a bounded channel into one consumer thread (a cpu worker, a GPU control
/// thread).
pub struct ChannelLane {
    pub tx: crossbeam_channel::Sender<Request>,
}

impl Lane for ChannelLane {
    fn try_submit(&self, req: Request) -> Result<(), Request> {
        match self.tx.try_send(req) {
            Ok(()) => Ok(()),
            Err(
                crossbeam_channel::TrySendError::Full(r)
                | crossbeam_channel::TrySendError::Disconnected(r),
            ) => Err(r),
        }
    }
    fn depth(&self) -> usize {
        self.tx.len()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchPolicy {
    /// Lanes in turn; a full lane passes the request to the next one.
    RoundRobin,
    /// The lane with the fewest queued requests.
    LeastLoaded,
    /// Lane chosen by request id, so a client can keep related requests together.
    KeyHash,
}

impl std::str::FromStr for DispatchPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" | "rr" => Ok(DispatchPolicy::RoundRobin),
            "least-loaded" => Ok(DispatchPolicy::LeastLoaded),
            "key-hash" => Ok(DispatchPolicy::KeyHash),
            _ => Err(format!(
                "unknown dispatch policy {s:?} (round-robin, least-loaded, key-hash)"
            )),
        }
    }
}

/// What happened to a submitted request. On `Overloaded` the request has already been
/// answered with OVERLOADED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submit {
    Queued,
    Overloaded,
}

pub struct Dispatcher {
    lanes: Vec<Arc<dyn Lane>>,
    policy: DispatchPolicy,
    next: AtomicUsize,
    overloaded: AtomicU64,
}

impl Dispatcher {
    pub fn new(lanes: Vec<Arc<dyn Lane>>, policy: DispatchPolicy) -> Dispatcher {
        assert!(!lanes.is_empty(), "a dispatcher needs at least one lane");
        Dispatcher {
            lanes,
            policy,
            next: AtomicUsize::new(0),
            overloaded: AtomicU64::new(0),
        }
    }

    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Requests refused because every lane was full.
    pub fn overloaded_counter(&self) -> &AtomicU64 {
        &self.overloaded
    }

    pub fn queued(&self) -> usize {
        self.lanes.iter().map(|l| l.depth()).sum()
    }

    pub fn submit(&self, req: Request) -> Submit {
        let n = self.lanes.len();
        let result = match self.policy {
            DispatchPolicy::RoundRobin => {
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                let mut pending = Err(req);
                for i in 0..n {
                    let Err(req) = pending else { break };
                    pending = self.lanes[(start + i) % n].try_submit(req);
                }
                pending
            }
            DispatchPolicy::LeastLoaded => {
                let best = (0..n)
                    .min_by_key(|&i| self.lanes[i].depth())
                    .expect("n >= 1");
                self.lanes[best].try_submit(req)
            }
            DispatchPolicy::KeyHash => {
                // Fibonacci hashing spreads sequential ids evenly.
                let h = req.request_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
                self.lanes[h as usize % n].try_submit(req)
            }
        };
        match result {
            Ok(()) => Submit::Queued,
            Err(req) => {
                self.overloaded.fetch_add(1, Ordering::Relaxed);
                req.respond_error(ErrorCode::Overloaded, "engine queue full");
                Submit::Overloaded
            }
        }
    }
}
