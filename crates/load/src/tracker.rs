//! Which requests are outstanding, and since when. A fixed window of slots indexed by
//! sequence number (bounded memory, no allocation while running): a slot still occupied when
//! its sequence number comes round again holds a request that went unanswered for a whole
//! window, and it is counted as `no_answer` then.

use std::sync::atomic::{AtomicU64, Ordering};

pub struct Tracker {
    /// seq + 1 of the request in the slot, 0 = free.
    ids: Vec<AtomicU64>,
    /// Intended send time of that request, ns since the run's start.
    intended: Vec<AtomicU64>,
    mask: u64,
}

pub enum Claim {
    /// The answer's request was outstanding; here is its intended send time.
    Outstanding(u64),
    /// Not outstanding: a duplicate, a very late answer, or an id we never sent.
    Unknown,
}

impl Tracker {
    pub fn new(window: usize) -> Tracker {
        let n = window.next_power_of_two().max(1024);
        Tracker {
            ids: (0..n).map(|_| AtomicU64::new(0)).collect(),
            intended: (0..n).map(|_| AtomicU64::new(0)).collect(),
            mask: n as u64 - 1,
        }
    }

    /// Records a request about to be sent. Returns the intended time of an evicted request
    /// that never got its answer, if any.
    pub fn start(&self, seq: u64, intended_ns: u64) -> Option<u64> {
        let i = (seq & self.mask) as usize;
        let evicted_intended = self.intended[i].swap(intended_ns, Ordering::AcqRel);
        let old = self.ids[i].swap(seq + 1, Ordering::AcqRel);
        (old != 0).then_some(evicted_intended)
    }

    /// Claims the answer for `seq`: succeeds at most once per request.
    pub fn finish(&self, seq: u64) -> Claim {
        let i = (seq & self.mask) as usize;
        let intended = self.intended[i].load(Ordering::Acquire);
        match self.ids[i].compare_exchange(seq + 1, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Claim::Outstanding(intended),
            Err(_) => Claim::Unknown,
        }
    }

    /// Requests still outstanding: (seq, intended ns).
    pub fn outstanding(&self) -> Vec<(u64, u64)> {
        self.ids
            .iter()
            .zip(&self.intended)
            .filter_map(|(id, t)| {
                let id = id.load(Ordering::Acquire);
                (id != 0).then(|| (id - 1, t.load(Ordering::Acquire)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_claimed_once_and_wraps_evict() {
        let t = Tracker::new(1024);
        assert!(t.start(5, 100).is_none());
        assert!(matches!(t.finish(5), Claim::Outstanding(100)));
        assert!(matches!(t.finish(5), Claim::Unknown));
        assert!(t.start(6, 200).is_none());
        assert_eq!(t.start(6 + 1024, 300), Some(200));
        assert!(matches!(t.finish(6), Claim::Unknown));
        assert_eq!(t.outstanding(), vec![(6 + 1024, 300)]);
    }
}
