//! Fair queueing between clients inside a cpu lane: the worker takes what its request rings
//! hold (up to a window) into one queue per client class and runs next the request of the
//! class that has had the least service time so far (start-time fair queueing over measured
//! execution time). A class that empties leaves; one that arrives starts level with the
//! least-served class present, so idling earns no credit. A client that floods a service
//! then waits behind its own requests, not the other way round.
//!
//! The class is the ingress's hash of the client (API key or source address) carried in the
//! request envelope (`Envelope::status`, which requests do not otherwise use); class 0 (no
//! client known) is one class like any other. Beyond the window, requests wait in the rings in
//! arrival order, and `--max-queue` still bounds the whole.

use bytes::Bytes;
use cohort_mq::Envelope;
use std::collections::VecDeque;

/// A request taken out of its ring, waiting for its turn.
pub struct Staged {
    pub ingress: usize,
    pub env: Envelope,
    pub payload: Payload,
}

/// A staged request's bytes: a slot-sized payload copied out of its ring slot, or a large one
/// that crossed the ring in its own buffer, kept by reference (no copy).
pub enum Payload {
    Copied(Vec<u8>),
    Shared(Bytes),
}

impl Payload {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Payload::Copied(v) => v,
            Payload::Shared(b) => b,
        }
    }
}

struct Class {
    id: u16,
    /// Service time given to this class while it has been waiting, in ns.
    attained: u64,
    queue: VecDeque<Staged>,
}

pub struct FairQueue {
    /// Classes with requests waiting.
    active: Vec<Class>,
    /// Where each class id sits in `active`, plus one (0: not active). 64 K entries: O(1)
    /// lookup, no hashing on the hot path.
    index: Box<[u16]>,
    /// Emptied classes and payload buffers kept for reuse (no allocation once warm).
    spare_classes: Vec<Class>,
    spare_payloads: Vec<Vec<u8>>,
    len: usize,
    bytes: usize,
    max_len: usize,
    max_bytes: usize,
}

impl FairQueue {
    /// At most `max_len` requests and `max_bytes` of payload staged (a larger request is
    /// still taken when nothing else is staged).
    pub fn new(max_len: usize, max_bytes: usize) -> FairQueue {
        assert!((1..u16::MAX as usize).contains(&max_len));
        FairQueue {
            active: Vec::with_capacity(max_len),
            index: vec![0; 1 << 16].into_boxed_slice(),
            spare_classes: Vec::new(),
            spare_payloads: Vec::new(),
            len: 0,
            bytes: 0,
            max_len,
            max_bytes,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether a request of `payload` bytes may be staged now.
    pub fn has_room(&self, payload: usize) -> bool {
        self.len == 0 || (self.len < self.max_len && self.bytes + payload <= self.max_bytes)
    }

    /// Stages a request under its client class: its payload copied, or `spilled` (the
    /// payload's own buffer, when it has one) kept by reference.
    pub fn push(&mut self, ingress: usize, env: Envelope, payload: &[u8], spilled: Option<&Bytes>) {
        debug_assert!(self.has_room(payload.len()));
        let class = env.status;
        let at = match self.index[class as usize] {
            0 => {
                // Arrives level with the least-served class present.
                let start = self.active.iter().map(|c| c.attained).min().unwrap_or(0);
                let mut c = self.spare_classes.pop().unwrap_or_else(|| Class {
                    id: 0,
                    attained: 0,
                    queue: VecDeque::new(),
                });
                c.id = class;
                c.attained = start;
                self.active.push(c);
                self.index[class as usize] = self.active.len() as u16;
                self.active.len() - 1
            }
            i => i as usize - 1,
        };
        let payload = match spilled {
            Some(b) => Payload::Shared(b.clone()),
            None => {
                let mut buf = self.spare_payloads.pop().unwrap_or_default();
                buf.clear();
                buf.extend_from_slice(payload);
                Payload::Copied(buf)
            }
        };
        self.bytes += payload.bytes().len();
        self.len += 1;
        self.active[at].queue.push_back(Staged {
            ingress,
            env,
            payload,
        });
    }

    /// The next request to run: the oldest of the least-served class (ties: the class with
    /// fewer requests waiting, so a newcomer goes before a flood it arrives level with).
    pub fn pop(&mut self) -> Option<Staged> {
        let at = (0..self.active.len())
            .min_by_key(|&i| (self.active[i].attained, self.active[i].queue.len()))?;
        let s = self.active[at]
            .queue
            .pop_front()
            .expect("an active class has a request waiting");
        self.len -= 1;
        self.bytes -= s.payload.bytes().len();
        if self.active[at].queue.is_empty() {
            self.retire(at);
        }
        Some(s)
    }

    /// Charges `class` for `ns` of service (after running one of its requests). A class that
    /// has emptied since is not charged: it left.
    pub fn charge(&mut self, class: u16, ns: u64) {
        if let Some(i) = (self.index[class as usize] as usize).checked_sub(1) {
            self.active[i].attained = self.active[i].attained.saturating_add(ns.max(1));
        }
    }

    /// A copied payload's buffer back for reuse (a shared one is just dropped).
    pub fn recycle(&mut self, payload: Payload) {
        if let Payload::Copied(v) = payload {
            if self.spare_payloads.len() < self.max_len {
                self.spare_payloads.push(v);
            }
        }
    }

    fn retire(&mut self, at: usize) {
        let c = self.active.swap_remove(at);
        self.index[c.id as usize] = 0;
        if let Some(moved) = self.active.get(at) {
            self.index[moved.id as usize] = at as u16 + 1;
        }
        self.spare_classes.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(class: u16, id: u64) -> Envelope {
        Envelope {
            token: 0,
            service: 1,
            status: class,
            request_id: id,
            deadline: 0,
            arrived: 0,
        }
    }

    /// A flood of one class queued first does not hold back a single request of another:
    /// it runs after at most one of the flood's.
    #[test]
    fn a_late_light_client_overtakes_a_flood() {
        let mut q = FairQueue::new(1024, 1 << 20);
        for i in 0..100 {
            q.push(0, env(7, i), b"flood", None);
        }
        let first = q.pop().unwrap();
        q.charge(7, 20_000_000);
        q.push(1, env(9, 1000), b"light", None);
        assert_eq!(first.env.request_id, 0);
        assert_eq!(q.pop().unwrap().env.request_id, 1000);
        assert_eq!(q.pop().unwrap().env.status, 7);
        assert_eq!(q.len(), 98);
    }

    proptest! {
        /// Every staged request comes out exactly once, in its own class's arrival order,
        /// and two classes that stay busy get service within one request's cost of each
        /// other.
        #[test]
        fn each_request_once_in_class_order_and_busy_classes_share_evenly(
            pushes in proptest::collection::vec((0u16..5, 1usize..64), 1..300),
            cost in 1u64..1000,
        ) {
            let mut q = FairQueue::new(1000, 1 << 20);
            for (i, &(c, len)) in pushes.iter().enumerate() {
                let bytes = vec![c as u8; len];
                // Every third a shared buffer, as a large payload crosses its ring.
                let shared = (i % 3 == 0).then(|| Bytes::from(bytes.clone()));
                q.push(0, env(c, i as u64), &bytes, shared.as_ref());
            }
            let mut seen = vec![false; pushes.len()];
            let mut last = [None::<u64>; 5];
            let mut given = [0u64; 5];
            let mut waiting = [0usize; 5];
            for &(c, _) in &pushes {
                waiting[c as usize] += 1;
            }
            while let Some(s) = q.pop() {
                let (i, c) = (s.env.request_id as usize, s.env.status as usize);
                prop_assert!(!seen[i]);
                seen[i] = true;
                prop_assert_eq!(s.payload.bytes(), &vec![c as u8; pushes[i].1][..]);
                prop_assert!(last[c].is_none_or(|l| l < i as u64));
                last[c] = Some(i as u64);
                // While every class still waits, their service stays within one cost.
                if waiting.iter().all(|&w| w > 0) {
                    let (lo, hi) = (given.iter().min().unwrap(), given.iter().max().unwrap());
                    prop_assert!(hi - lo <= cost, "{:?}", given);
                }
                given[c] += cost;
                waiting[c] -= 1;
                q.charge(c as u16, cost);
                q.recycle(s.payload);
            }
            prop_assert!(seen.iter().all(|&s| s));
            prop_assert!(q.is_empty());
        }
    }
}
