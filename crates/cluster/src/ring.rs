//! Rings: batches written one-sided into the peer's registered memory (Lynx's design), the
//! same both ways. A front end writes its request batches into a ring the node offers, and
//! the node writes its answer batches into a ring the front end offers back (`cohort_proto::
//! node_wire`, "Rings"). The end that owns a ring polls it ([`InRing`]) and tells the writer
//! how far it has read; the writer ([`OutRing`]) never has more than a ring's slots unread
//! and sends a batch as a message when the ring is full or the batch does not fit a slot.

use crate::link::Link;
use crate::wire;
use cohort_ucx::{EpId, RegionId, RemoteKey, Worker};
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Instant;

/// A ring's slots, and each slot's bytes.
pub const RING_SLOTS: u32 = 64;
pub const RING_SLOT_BYTES: u32 = 64 * 1024;
/// Rings one worker makes in its life (a ring outlives its connection until the worker
/// stops: [`InRings`]): past this, offers stop and the peer sends messages. 64 rings of
/// 4 MiB: 256 MiB at most.
pub const MAX_RINGS: usize = 64;
/// Slots read from one ring per turn of a loop (the other rings, and the rest of the
/// loop's work, wait no longer than that).
pub const RING_READS_PER_TURN: u64 = 16;
/// How long a ring's reader may hold back a credit of fewer than a quarter of its slots. A
/// credit is a message: one per batch read (what an idle ring drained each turn would send)
/// doubled the messages and made the hop slower through rings than by messages (measured);
/// one a quarter ring, or at most this late, leaves the writer 48 slots of room and costs
/// no message per batch.
pub const CREDIT_DELAY: std::time::Duration = std::time::Duration::from_micros(200);

/// A ring in this worker's memory that a peer writes and this end polls.
pub struct InRing {
    region: RegionId,
    /// The sequence number of the next slot to read (from 1).
    next: u64,
    /// Slots read that the writer has been told of, and when it was last told.
    reported: u64,
    reported_at: Instant,
}

/// The rings a worker owns, live ones by key (a connection), and how many it retired. A
/// retired ring's memory stays registered until the worker stops: a peer that has not yet
/// seen its connection end may still be writing into it, and over shared memory a write into
/// freed memory would corrupt this process.
pub struct InRings<K> {
    live: HashMap<K, InRing>,
    retired: usize,
}

impl<K: Eq + Hash + Copy> Default for InRings<K> {
    fn default() -> Self {
        InRings {
            live: HashMap::new(),
            retired: 0,
        }
    }
}

impl<K: Eq + Hash + Copy> InRings<K> {
    pub fn has(&self, k: K) -> bool {
        self.live.contains_key(&k)
    }

    /// Its connection ended: nothing of it is read again.
    pub fn retire(&mut self, k: K) {
        if self.live.remove(&k).is_some() {
            self.retired += 1;
        }
    }

    /// Registers a ring for `k` and returns its offer (sealed under `link`), or None where
    /// this worker has made [`MAX_RINGS`] or registering failed (both logged: the peer then
    /// sends messages).
    pub fn make(&mut self, w: &mut Worker, link: &mut Link, k: K, who: &str) -> Option<Vec<u8>> {
        let made = self.live.len() + self.retired;
        if made >= MAX_RINGS {
            tracing::warn!(
                rings = made,
                "{who}: a peer could write into a ring, and this end has made as many as it keeps; messages it is"
            );
            return None;
        }
        let region = match w.register((RING_SLOTS * RING_SLOT_BYTES) as usize) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%e, "{who}: no ring for a peer (messages it is)");
                return None;
            }
        };
        let (Some(key), Some(mem)) = (w.region_key(region), w.region(region)) else {
            unreachable!("a region just registered");
        };
        let mut b = link.batch(wire::RING_OFFER);
        b.push_ring_offer(&wire::RingOffer {
            address: mem.address(),
            slots: RING_SLOTS,
            slot_bytes: RING_SLOT_BYTES,
            key,
        });
        self.retire(k);
        self.live.insert(
            k,
            InRing {
                region,
                next: 1,
                reported: 0,
                reported_at: Instant::now(),
            },
        );
        Some(link.take(&mut b))
    }

    /// Reads what the peers wrote (a few slots of each ring per turn), each batch opened
    /// under `link`, into `got`; and the credits due: how far each ring is read, to send
    /// its writer. A slot that claims more bytes than it holds, or fails the key's check,
    /// ends that ring's read with an error (its connection is to close).
    #[allow(clippy::type_complexity)]
    pub fn read(
        &mut self,
        w: &Worker,
        slot: &mut Vec<u8>,
        link: &mut Link,
        got: &mut Vec<(K, Result<Vec<u8>, String>)>,
    ) -> Vec<(K, Vec<u8>)> {
        slot.resize(RING_SLOT_BYTES as usize, 0);
        let mut credits = Vec::new();
        for (&k, ring) in self.live.iter_mut() {
            let Some(mem) = w.region(ring.region) else {
                continue;
            };
            let mut read = 0;
            while read < RING_READS_PER_TURN {
                let at =
                    ((ring.next - 1) % u64::from(RING_SLOTS)) as usize * RING_SLOT_BYTES as usize;
                if mem.load_u64(at) != ring.next {
                    break;
                }
                let len = mem.load_u64(at + 8) as usize;
                if len > RING_SLOT_BYTES as usize - wire::RING_DATA_AT {
                    got.push((k, Err(format!("a ring slot claiming {len} bytes"))));
                    break;
                }
                mem.read(at + wire::RING_DATA_AT, &mut slot[..len]);
                ring.next += 1;
                read += 1;
                got.push((k, link.open(&slot[..len]).map(<[u8]>::to_vec)));
            }
            // Told a quarter of the ring at a time, or what is read within CREDIT_DELAY (so a
            // writer that filled the ring and went to messages gets its room back soon).
            let unreported = ring.next - 1 - ring.reported;
            if unreported > 0
                && (unreported >= u64::from(RING_SLOTS / 4)
                    || ring.reported_at.elapsed() >= CREDIT_DELAY)
            {
                ring.reported = ring.next - 1;
                ring.reported_at = Instant::now();
                let mut b = link.batch(wire::RING_CREDIT);
                b.push_ring_credit(ring.reported);
                credits.push((k, link.take(&mut b)));
            }
        }
        credits
    }
}

/// A peer's ring, as this end writes it.
pub struct OutRing {
    key: RemoteKey,
    room: Room,
}

/// What a writer knows of a peer's ring: where it is, how it is cut, and how far it is written
/// and read (no UCX in it: the rules a writer keeps, tested alone).
#[derive(Debug)]
struct Room {
    address: u64,
    slots: u64,
    slot_bytes: usize,
    /// Batches written (the last one's sequence number) and those the peer has read.
    written: u64,
    read: u64,
}

impl Room {
    fn new(o: &wire::RingOffer<'_>) -> Room {
        Room {
            address: o.address,
            slots: u64::from(o.slots),
            slot_bytes: o.slot_bytes as usize,
            written: 0,
            read: 0,
        }
    }

    /// Whether a message of `bytes` goes into the ring now: it fits a slot and a slot is free
    /// (never more than `slots` batches unread).
    fn takes(&self, bytes: usize) -> bool {
        self.written - self.read < self.slots && bytes <= self.slot_bytes - wire::RING_DATA_AT
    }

    /// Takes the next slot: its sequence number and address.
    fn next(&mut self) -> (u64, u64) {
        self.written += 1;
        let at = self.address + ((self.written - 1) % self.slots) * self.slot_bytes as u64;
        (self.written, at)
    }

    /// The owner has read `read` slots: a credit past what was written is refused, and one
    /// older than the last changes nothing.
    fn credited(&mut self, read: u64) -> Result<(), String> {
        if read > self.written {
            return Err(format!(
                "a credit of {read} slots for a ring written {}",
                self.written
            ));
        }
        self.read = self.read.max(read);
        Ok(())
    }
}

impl OutRing {
    /// The ring a peer offered on `ep` (a message of kind RING_OFFER, opened).
    pub fn accept(w: &mut Worker, ep: EpId, offer: &[u8]) -> Result<OutRing, String> {
        let o = wire::ring_offer(offer).map_err(|e| e.to_string())?;
        let key = w.remote_key(ep, o.key).map_err(|e| e.to_string())?;
        Ok(OutRing {
            key,
            room: Room::new(&o),
        })
    }

    /// Whether a message of `bytes` goes into the ring now: it fits a slot and a slot is free.
    pub fn takes(&self, bytes: usize) -> bool {
        self.room.takes(bytes)
    }

    /// Writes one batch: its length and bytes into the next slot, a fence, then the slot's
    /// sequence number, which the owner polls (the data lands before it).
    pub fn write(&mut self, w: &mut Worker, msg: &[u8]) -> Result<(), cohort_ucx::Error> {
        debug_assert!(self.takes(msg.len()));
        let (seq, slot) = self.room.next();
        let mut body = Vec::with_capacity(wire::RING_DATA_AT - 8 + msg.len());
        body.extend_from_slice(&(msg.len() as u64).to_le_bytes());
        body.resize(wire::RING_DATA_AT - 8, 0);
        body.extend_from_slice(msg);
        w.put(self.key, slot + 8, body)?;
        w.fence()?;
        w.put(self.key, slot, seq.to_le_bytes().to_vec())
    }

    /// The owner's credit (a message of kind RING_CREDIT, opened): slots read so far.
    pub fn credited(&mut self, credit: &[u8]) -> Result<(), String> {
        let read = wire::ring_credit(credit).map_err(|e| e.to_string())?;
        self.room.credited(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn room(slots: u32, slot_bytes: u32) -> Room {
        Room::new(&wire::RingOffer {
            address: 1 << 20,
            slots,
            slot_bytes,
            key: &[1],
        })
    }

    #[test]
    fn a_batch_fits_a_slot_after_its_head_or_goes_as_a_message() {
        let r = room(4, 1024);
        assert!(r.takes(1024 - wire::RING_DATA_AT));
        assert!(!r.takes(1024 - wire::RING_DATA_AT + 1));
    }

    #[test]
    fn slots_are_numbered_from_one_and_wrap_at_the_ring_s_end() {
        let mut r = room(3, 128);
        let got: Vec<(u64, u64)> = (0..4).map(|_| r.next()).collect();
        let base = 1 << 20;
        assert_eq!(
            got,
            vec![(1, base), (2, base + 128), (3, base + 256), (4, base)]
        );
    }

    #[test]
    fn credits_past_what_was_written_are_refused_and_stale_ones_change_nothing() {
        let mut r = room(4, 128);
        r.next();
        r.next();
        assert!(r.credited(3).unwrap_err().contains("written 2"));
        r.credited(2).unwrap();
        r.credited(1).unwrap();
        assert_eq!(r.read, 2);
    }

    proptest! {
        /// Whatever the order of writes and credits (each credit at most what was written),
        /// a writer never has more than the ring's slots unread, and a slot is written again
        /// only after the owner has read what was there.
        #[test]
        fn a_writer_never_overruns_its_reader(
            slots in 1u32..16,
            steps in proptest::collection::vec(any::<(bool, u8)>(), 1..300),
        ) {
            let mut r = room(slots, 256);
            let mut owner_read = 0u64;
            for (write, n) in steps {
                if write {
                    if r.takes(8) {
                        let (seq, _) = r.next();
                        // The slot this batch lands in held batch seq - slots, read already.
                        prop_assert!(seq <= owner_read + u64::from(slots));
                    }
                } else {
                    owner_read = (owner_read + u64::from(n % 4)).min(r.written);
                    r.credited(owner_read).unwrap();
                }
                prop_assert!(r.written - r.read <= u64::from(slots));
            }
        }
    }
}
