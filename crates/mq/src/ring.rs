//! Producer and consumer handles over a ring region.

use crate::layout::{Layout, SlotHeader, SLOT_HEADER_BYTES, SPILLED, TAIL_OFFSET};
use crate::memory::{HostMemory, RingMemory};
use bytes::Bytes;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// Why a message was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The consumer has not released enough slots yet.
    Full,
    /// The consumer is gone: nothing will ever read this ring again.
    Closed,
    /// The payload does not fit a slot and this ring may not spill (device-read rings).
    TooLarge,
}

/// The message fields besides the payload (the slot header minus the doorbell and length).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Envelope {
    pub token: u32,
    pub service: u16,
    /// Answers: 0 = ok, else a wire error code. Requests: the client's fairness class (the
    /// ingress's hash of its key or address; 0 = unknown), which the cpu engine's fair queue
    /// reads.
    pub status: u16,
    pub request_id: u64,
    /// Nanoseconds on the server's monotonic clock; 0 = none.
    pub deadline: u64,
    /// When ingress read the request (same clock): queue-wait metrics.
    pub arrived: u64,
}

/// A host-side payload too large for its slot, owned like the slot it belongs to. Shared
/// bytes, so that a producer can move a buffer it built into the ring and the consumer can
/// keep it (a reference count) instead of copying it out: a 16-47 KB page crosses the ring
/// without a copy.
type SpillCell = UnsafeCell<Option<Bytes>>;

struct Shared {
    mem: Box<dyn RingMemory>,
    layout: Layout,
    /// Host-side payloads of messages larger than a slot, one cell per slot. A cell belongs to
    /// whoever owns its slot under the seq/tail protocol, exactly like the slot's bytes.
    spill: Option<Box<[SpillCell]>>,
    consumer_gone: AtomicBool,
}

// SAFETY: the region is only accessed through the ring protocol's atomics, and each spill cell
// is touched only by the side that owns its slot (producer before publishing seq, consumer
// after acquiring it and before publishing a tail past it).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn base(&self) -> *mut u8 {
        self.mem.ptr()
    }
    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset + 4 <= self.mem.len());
        // SAFETY: in bounds, 4-aligned (region is 64-aligned, offsets multiples of 4), and the
        // region lives as long as `self`.
        unsafe { &*(self.base().add(offset) as *const AtomicU32) }
    }
    fn seq(&self, slot: usize) -> &AtomicU32 {
        self.atomic_u32(self.layout.slot_offset(slot))
    }
    fn tail(&self) -> &AtomicU32 {
        self.atomic_u32(TAIL_OFFSET)
    }
}

/// Creates a ring in fresh host memory; payloads larger than a slot spill to the heap.
pub fn channel(layout: Layout, publish_every: usize) -> (Producer, Consumer) {
    channel_in(
        Box::new(HostMemory::zeroed(layout.bytes())),
        layout,
        publish_every,
        true,
    )
}

/// Creates a ring over caller-provided memory, which must be zeroed and at least
/// `layout.bytes()` long. `spill`: allow payloads larger than a slot (host-only rings).
pub fn channel_in(
    mem: Box<dyn RingMemory>,
    layout: Layout,
    publish_every: usize,
    spill: bool,
) -> (Producer, Consumer) {
    assert!(
        mem.len() >= layout.bytes(),
        "ring memory smaller than its layout"
    );
    assert!(
        (mem.ptr() as usize).is_multiple_of(64),
        "ring memory must be 64-byte aligned"
    );
    assert!(publish_every >= 1 && publish_every <= layout.slots / 2);
    let spill = spill.then(|| (0..layout.slots).map(|_| UnsafeCell::new(None)).collect());
    let shared = Arc::new(Shared {
        mem,
        layout,
        spill,
        consumer_gone: AtomicBool::new(false),
    });
    (
        Producer {
            shared: shared.clone(),
            head: 0,
            cached_tail: 0,
        },
        Consumer {
            shared,
            tail: 0,
            unpublished: 0,
            publish_every: publish_every as u32,
        },
    )
}

/// The single writer of a ring.
pub struct Producer {
    shared: Arc<Shared>,
    head: u32,
    cached_tail: u32,
}

/// A message borrowed from its slot (or its spill cell).
pub struct Message<'a> {
    pub env: Envelope,
    pub payload: &'a [u8],
    /// The payload's own buffer when it spilled (`payload` is its contents): a consumer that
    /// keeps the payload clones this instead of copying the bytes.
    pub spilled: Option<&'a Bytes>,
    /// The header's routing word (written by device producers; 0 from host producers).
    pub route: u64,
}

impl Producer {
    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// True once the consumer has been dropped.
    pub fn is_closed(&self) -> bool {
        self.shared.consumer_gone.load(Ordering::Acquire)
    }

    fn has_room(&mut self) -> bool {
        let slots = self.shared.layout.slots as u32;
        if self.head.wrapping_sub(self.cached_tail) < slots {
            return true;
        }
        self.cached_tail = self.shared.tail().load(Ordering::Acquire);
        let used = self.head.wrapping_sub(self.cached_tail);
        assert!(used <= slots, "consumer tail ran ahead of the producer");
        used < slots
    }

    /// Copies `payload` into the next slot (or its spill cell when larger than a slot).
    /// Never blocks.
    pub fn try_send(&mut self, env: Envelope, payload: &[u8]) -> Result<(), SendError> {
        let cap = self.shared.layout.payload_capacity;
        if payload.len() <= cap {
            return self.try_send_with(env, |buf| {
                buf[..payload.len()].copy_from_slice(payload);
                payload.len()
            });
        }
        self.spill(env, Bytes::copy_from_slice(payload))
    }

    /// Sends the payload in `buf`: copied into the slot when it fits; otherwise the buffer
    /// itself moves into the slot's spill cell (no copy) and `buf` is left empty. Never blocks;
    /// on an error `buf` is untouched.
    pub fn try_send_vec(&mut self, env: Envelope, buf: &mut Vec<u8>) -> Result<(), SendError> {
        if buf.len() <= self.shared.layout.payload_capacity {
            return self.try_send(env, buf);
        }
        if self.shared.spill.is_none() {
            return Err(SendError::TooLarge);
        }
        if self.is_closed() {
            return Err(SendError::Closed);
        }
        if !self.has_room() {
            return Err(SendError::Full);
        }
        self.spill(env, Bytes::from(std::mem::take(buf)))
    }

    /// Sends a payload that is already a shared buffer: copied into the slot when it fits,
    /// else the buffer itself (a reference, no copy) goes into the slot's spill cell.
    pub fn try_send_bytes(&mut self, env: Envelope, payload: &Bytes) -> Result<(), SendError> {
        if payload.len() <= self.shared.layout.payload_capacity {
            return self.try_send(env, payload);
        }
        self.spill(env, payload.clone())
    }

    fn spill(&mut self, env: Envelope, payload: Bytes) -> Result<(), SendError> {
        if self.shared.spill.is_none() {
            return Err(SendError::TooLarge);
        }
        let len = payload.len();
        self.write(env, move |_, cell| {
            let cell = cell.expect("spill checked");
            // SAFETY: the producer owns this slot (and its cell) until seq is published.
            unsafe { *cell.get() = Some(payload) };
            len as u32 | SPILLED
        })
    }

    /// Lets `fill` write the payload in place (at most a slot's capacity); it returns the
    /// number of bytes written.
    pub fn try_send_with(
        &mut self,
        env: Envelope,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), SendError> {
        let cap = self.shared.layout.payload_capacity;
        self.write(env, |payload, _| {
            let len = fill(payload);
            assert!(len <= cap, "fill wrote past the slot");
            len as u32
        })
    }

    fn write(
        &mut self,
        env: Envelope,
        fill: impl FnOnce(&mut [u8], Option<&SpillCell>) -> u32,
    ) -> Result<(), SendError> {
        if self.is_closed() {
            return Err(SendError::Closed);
        }
        if !self.has_room() {
            return Err(SendError::Full);
        }
        let layout = self.shared.layout;
        let slot = self.head as usize & (layout.slots - 1);
        let off = layout.slot_offset(slot);
        // SAFETY: the slot is owned by the producer until its seq is published: the consumer
        // only reads it after seeing seq == head + 1, and released it (tail moved past) before.
        unsafe {
            let payload = std::slice::from_raw_parts_mut(
                self.shared.base().add(off + SLOT_HEADER_BYTES),
                layout.payload_capacity,
            );
            let cell = self.shared.spill.as_ref().map(|s| &s[slot]);
            let len = fill(payload, cell);
            let hdr = self.shared.base().add(off) as *mut SlotHeader;
            std::ptr::addr_of_mut!((*hdr).len).write_volatile(len);
            std::ptr::addr_of_mut!((*hdr).token).write_volatile(env.token);
            std::ptr::addr_of_mut!((*hdr).service).write_volatile(env.service);
            std::ptr::addr_of_mut!((*hdr).status).write_volatile(env.status);
            std::ptr::addr_of_mut!((*hdr).request_id).write_volatile(env.request_id);
            std::ptr::addr_of_mut!((*hdr).deadline).write_volatile(env.deadline);
            std::ptr::addr_of_mut!((*hdr).arrived).write_volatile(env.arrived);
        }
        self.head = self.head.wrapping_add(1);
        // The doorbell: everything above becomes visible to a consumer that acquires this.
        self.shared.seq(slot).store(self.head, Ordering::Release);
        Ok(())
    }

    /// Messages written and not yet released by the consumer (as far as the producer knows:
    /// an upper bound).
    pub fn occupancy(&self) -> usize {
        self.head.wrapping_sub(self.cached_tail) as usize
    }

    /// Slots the producer may still fill without asking the consumer (a lower bound).
    pub fn free_slots(&mut self) -> usize {
        self.has_room();
        self.shared.layout.slots - self.head.wrapping_sub(self.cached_tail) as usize
    }
}

/// The single reader of a ring.
pub struct Consumer {
    shared: Arc<Shared>,
    tail: u32,
    unpublished: u32,
    publish_every: u32,
}

impl Consumer {
    /// The ring's region (for a device producer or consumer: the address it uses).
    pub fn region(&self) -> *mut u8 {
        self.shared.base()
    }

    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// The tail as last published in the control block, by this handle or by a device
    /// consumer that reads the ring in its place (the persistent engine's GPU ingress).
    pub fn published_tail(&self) -> u32 {
        self.shared.tail().load(Ordering::Acquire)
    }

    /// Whether the message at position `pos` (wrapping) has been written: how a host thread
    /// watches a ring that a device consumer reads.
    pub fn is_written(&self, pos: u32) -> bool {
        let slot = pos as usize & (self.shared.layout.slots - 1);
        self.shared.seq(slot).load(Ordering::Acquire) == pos.wrapping_add(1)
    }

    /// Reads the next message in place if one is ready, and releases it.
    pub fn try_recv<R>(&mut self, f: impl FnOnce(Message<'_>) -> R) -> Option<R> {
        self.try_recv_if(|m| Some(f(m)))
    }

    /// Shows the next message to `f`; it is released only if `f` returns `Some` (otherwise it
    /// stays at the head of the ring, to be shown again).
    pub fn try_recv_if<R>(&mut self, f: impl FnOnce(Message<'_>) -> Option<R>) -> Option<R> {
        let layout = self.shared.layout;
        let slot = self.tail as usize & (layout.slots - 1);
        let expected = self.tail.wrapping_add(1);
        if self.shared.seq(slot).load(Ordering::Acquire) != expected {
            return None;
        }
        let off = layout.slot_offset(slot);
        // SAFETY: seq == tail + 1 was acquired, so the producer finished writing this slot (and
        // its spill cell) and will not touch either again until we publish a tail past it.
        let (out, spilled) = unsafe {
            let hdr = (self.shared.base().add(off) as *const SlotHeader).read_volatile();
            let env = Envelope {
                token: hdr.token,
                service: hdr.service,
                status: hdr.status,
                request_id: hdr.request_id,
                deadline: hdr.deadline,
                arrived: hdr.arrived,
            };
            if hdr.len & SPILLED != 0 {
                let cell = &self
                    .shared
                    .spill
                    .as_ref()
                    .expect("spilled message in a ring without spill cells")[slot];
                let v = (*cell.get())
                    .as_ref()
                    .expect("spilled message without its payload");
                assert_eq!(
                    v.len(),
                    (hdr.len & !SPILLED) as usize,
                    "corrupt spill length"
                );
                (
                    f(Message {
                        env,
                        payload: v,
                        spilled: Some(v),
                        route: hdr.route,
                    }),
                    Some(cell),
                )
            } else {
                assert!(
                    hdr.len as usize <= layout.payload_capacity,
                    "corrupt slot length"
                );
                let payload = std::slice::from_raw_parts(
                    self.shared.base().add(off + SLOT_HEADER_BYTES),
                    hdr.len as usize,
                );
                (
                    f(Message {
                        env,
                        payload,
                        spilled: None,
                        route: hdr.route,
                    }),
                    None,
                )
            }
        };
        let out = out?;
        if let Some(cell) = spilled {
            // SAFETY: still ours (tail not yet published past this slot).
            unsafe { *cell.get() = None };
        }
        self.tail = expected;
        self.unpublished += 1;
        if self.unpublished >= self.publish_every {
            self.publish();
        }
        Some(out)
    }

    /// True when a message is waiting.
    pub fn is_ready(&self) -> bool {
        let slot = self.tail as usize & (self.shared.layout.slots - 1);
        self.shared.seq(slot).load(Ordering::Acquire) == self.tail.wrapping_add(1)
    }

    /// Publishes the tail now (call when going idle, so the producer sees all free slots).
    pub fn publish(&mut self) {
        if self.unpublished > 0 {
            self.shared.tail().store(self.tail, Ordering::Release);
            self.unpublished = 0;
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shared.consumer_gone.store(true, Ordering::Release);
    }
}
