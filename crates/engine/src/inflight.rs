//! The in-flight table of one ingress: token -> what cannot cross to an engine or a device
//! (who asked, when, through which lane). Fixed capacity, allocated once.
//!
//! Exactly-once lives here: an answer is delivered only by `take`, which empties the entry, and
//! a token carries a generation so an answer for an entry already answered (by the ingress
//! itself, when a lane died or shutdown timed out) can never reach the entry's next owner.

use std::time::Instant;

/// Index bits of a token; the rest is the entry's generation.
const INDEX_BITS: u32 = 20;
pub const MAX_INFLIGHT: usize = 1 << INDEX_BITS;

/// An engine lane: (engine index, lane index) in the server's wiring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaneRef {
    pub engine: u16,
    pub lane: u16,
}

/// What every entry records besides the caller's value.
#[derive(Debug, Clone, Copy)]
pub struct Meta {
    pub service: u16,
    pub request_id: u64,
    pub arrived: Instant,
    pub lane: LaneRef,
}

struct Entry<T> {
    generation: u32,
    live: Option<(T, Meta)>,
}

pub struct InflightTable<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
}

impl<T> InflightTable<T> {
    pub fn new(capacity: usize) -> InflightTable<T> {
        assert!(
            capacity > 0 && capacity <= MAX_INFLIGHT,
            "in-flight capacity must be 1..={MAX_INFLIGHT}"
        );
        InflightTable {
            entries: (0..capacity)
                .map(|_| Entry {
                    generation: 0,
                    live: None,
                })
                .collect(),
            free: (0..capacity as u32).rev().collect(),
        }
    }

    /// A token for a new request, or None when the table is full.
    pub fn insert(&mut self, value: T, meta: Meta) -> Option<u32> {
        let i = self.free.pop()?;
        let e = &mut self.entries[i as usize];
        debug_assert!(e.live.is_none());
        e.live = Some((value, meta));
        Some(e.generation << INDEX_BITS | i)
    }

    /// Records the lane a request was finally written to.
    pub fn set_lane(&mut self, token: u32, lane: LaneRef) {
        if let Some((_, m)) = self.get_mut(token) {
            m.lane = lane;
        }
    }

    fn get_mut(&mut self, token: u32) -> Option<&mut (T, Meta)> {
        let e = self
            .entries
            .get_mut((token & (MAX_INFLIGHT as u32 - 1)) as usize)?;
        if e.generation != token >> INDEX_BITS {
            return None;
        }
        e.live.as_mut()
    }

    /// Ends the request: its entry, once. None for a token that is not (or no longer) in flight.
    pub fn take(&mut self, token: u32) -> Option<(T, Meta)> {
        let i = token & (MAX_INFLIGHT as u32 - 1);
        let e = self.entries.get_mut(i as usize)?;
        if e.generation != token >> INDEX_BITS {
            return None;
        }
        let v = e.live.take()?;
        e.generation = (e.generation + 1) & ((1 << (32 - INDEX_BITS)) - 1);
        self.free.push(i);
        Some(v)
    }

    /// Tokens of every request in flight whose meta matches (shutdown, a lane that died).
    pub fn tokens_where(&self, f: impl Fn(&Meta) -> bool) -> Vec<u32> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match &e.live {
                Some((_, m)) if f(m) => Some(e.generation << INDEX_BITS | i as u32),
                _ => None,
            })
            .collect()
    }

    pub fn in_flight(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    pub fn capacity(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            service: 1,
            request_id: 2,
            arrived: Instant::now(),
            lane: LaneRef { engine: 0, lane: 0 },
        }
    }

    #[test]
    fn a_token_is_answered_once_and_a_stale_token_never_reaches_the_next_owner() {
        let mut t = InflightTable::new(2);
        let a = t.insert("a", meta()).unwrap();
        let b = t.insert("b", meta()).unwrap();
        assert!(t.insert("c", meta()).is_none(), "full");
        assert_eq!(t.take(a).map(|v| v.0), Some("a"));
        assert!(t.take(a).is_none(), "second answer refused");
        let c = t.insert("c", meta()).unwrap();
        assert_ne!(a, c, "slot reused under a new generation");
        assert!(t.take(a).is_none(), "late answer for the old owner");
        assert_eq!(t.tokens_where(|_| true).len(), 2);
        assert_eq!(t.take(c).map(|v| v.0), Some("c"));
        assert_eq!(t.take(b).map(|v| v.0), Some("b"));
        assert_eq!(t.in_flight(), 0);
        assert!(t.take(u32::MAX).is_none());
    }
}
