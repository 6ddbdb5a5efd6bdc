//! What the collection load knows of each id's writes, to judge a search's answer that
//! holds a deleted point (`Liveness`).

use super::mix;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};

/// Lock stripes over the ids' write state.
const STRIPES: usize = 1024;
/// Shards of the maps from a request in flight to what it was sent with.
const SHARDS: usize = 16;
/// `dead_from` of an id not known to be deleted.
const ALIVE: u64 = u64::MAX;

/// A delete in flight: its send tick and the ids that had no upsert outstanding then.
type InFlightDelete = (u64, Vec<u64>);

/// What the client knows of each id's writes, to tell a deleted point in an answer
/// (`CollectionWorkload::check_search`). Clock values are ticks of `clock`, taken at sends
/// and acknowledgements (all `SeqCst`, so their order is one total order).
///
/// An id is *known deleted since tick a* when a delete carrying it was acknowledged at tick
/// a, every upsert of it sent before that delete was sent had been answered by then (so
/// none can be applied after the delete), and no upsert of it has been sent since the
/// delete was sent. An upsert sent later clears it at once, before it is sent. A search
/// sent at tick g answering an id that is still known deleted, since a tick before g, when
/// its answer arrives has answered a point that was deleted all the time the search could
/// have run: a wrong answer. Anything less certain is not judged.
pub(super) struct Liveness {
    clock: AtomicU64,
    stripes: Vec<Mutex<()>>,
    /// Per id: upserts sent and not yet answered; the tick of the last upsert sent; the tick
    /// since which it is known deleted (`ALIVE`: not known).
    pending: Vec<AtomicU64>,
    last_upsert: Vec<AtomicU64>,
    dead_from: Vec<AtomicU64>,
    /// Searches in flight: their send tick. Deletes in flight: their send tick and the ids
    /// that had no upsert outstanding then.
    searches: Vec<Mutex<HashMap<u64, u64>>>,
    deletes: Vec<Mutex<HashMap<u64, InFlightDelete>>>,
}

impl Liveness {
    pub(super) fn new(points: u64) -> Liveness {
        let n = points as usize;
        let atomics = |v| (0..n).map(|_| AtomicU64::new(v)).collect::<Vec<_>>();
        Liveness {
            clock: AtomicU64::new(0),
            stripes: (0..STRIPES).map(|_| Default::default()).collect(),
            pending: atomics(0),
            last_upsert: atomics(0),
            dead_from: atomics(ALIVE),
            searches: (0..SHARDS).map(|_| Default::default()).collect(),
            deletes: (0..SHARDS).map(|_| Default::default()).collect(),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, SeqCst)
    }

    fn lock(&self, id: u64) -> MutexGuard<'_, ()> {
        self.stripes[id as usize % STRIPES]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn shard<T>(v: &[Mutex<T>], seq: u64) -> MutexGuard<'_, T> {
        v[(mix(seq) % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn upsert_sent(&self, ids: &[u64]) {
        for &id in ids {
            let _g = self.lock(id);
            let i = id as usize;
            self.pending[i].fetch_add(1, SeqCst);
            self.dead_from[i].store(ALIVE, SeqCst);
            self.last_upsert[i].store(self.tick(), SeqCst);
        }
    }

    pub(super) fn upsert_answered(&self, ids: &[u64]) {
        for &id in ids {
            let _g = self.lock(id);
            self.pending[id as usize].fetch_sub(1, SeqCst);
        }
    }

    pub(super) fn delete_sent(&self, seq: u64, ids: &[u64]) {
        // The tick first: an upsert ticked before it has its pending count seen below.
        let sent = self.tick();
        let clean = ids
            .iter()
            .copied()
            .filter(|&id| {
                let _g = self.lock(id);
                self.pending[id as usize].load(SeqCst) == 0
            })
            .collect();
        Self::shard(&self.deletes, seq).insert(seq, (sent, clean));
    }

    pub(super) fn delete_answered(&self, seq: u64) {
        let Some((sent, clean)) = Self::shard(&self.deletes, seq).remove(&seq) else {
            return;
        };
        for id in clean {
            let _g = self.lock(id);
            let i = id as usize;
            if self.last_upsert[i].load(SeqCst) < sent {
                let at = self.tick();
                self.dead_from[i].store(at, SeqCst);
            }
        }
    }

    pub(super) fn search_sent(&self, seq: u64) {
        let at = self.tick();
        Self::shard(&self.searches, seq).insert(seq, at);
    }

    /// The search's send tick (once: its answer is being checked).
    pub(super) fn search_answered(&self, seq: u64) -> Option<u64> {
        Self::shard(&self.searches, seq).remove(&seq)
    }

    /// Whether `id` was deleted since before tick `sent` and still is.
    pub(super) fn deleted_before(&self, id: u64, sent: u64) -> bool {
        self.dead_from[id as usize].load(SeqCst) < sent
    }
}
