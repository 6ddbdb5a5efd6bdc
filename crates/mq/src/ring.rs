//! Producer and consumer handles over a ring region.

use crate::layout::{Layout, SlotHeader, SLOT_HEADER_BYTES, TAIL_OFFSET};
use crate::memory::{HostMemory, RingMemory};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The ring is full: the consumer has not released enough slots yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

struct Shared {
    mem: Box<dyn RingMemory>,
    layout: Layout,
}

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

/// Creates a ring in fresh host memory.
pub fn channel(layout: Layout, publish_every: usize) -> (Producer, Consumer) {
    channel_in(
        Box::new(HostMemory::zeroed(layout.bytes())),
        layout,
        publish_every,
    )
}

/// Creates a ring over caller-provided memory, which must be zeroed and at least
/// `layout.bytes()` long.
pub fn channel_in(
    mem: Box<dyn RingMemory>,
    layout: Layout,
    publish_every: usize,
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
    let shared = Arc::new(Shared { mem, layout });
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

/// A message borrowed from its slot; the slot is released when it is dropped.
pub struct Message<'a> {
    pub token: u32,
    pub service: u16,
    pub status: u16,
    pub payload: &'a [u8],
}

impl Producer {
    pub fn layout(&self) -> Layout {
        self.shared.layout
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

    /// Copies `payload` into the next slot. Fails with [`Full`] without blocking.
    pub fn try_send(
        &mut self,
        token: u32,
        service: u16,
        status: u16,
        payload: &[u8],
    ) -> Result<(), Full> {
        assert!(
            payload.len() <= self.shared.layout.payload_capacity,
            "payload over slot size"
        );
        self.try_send_with(token, service, status, |buf| {
            buf[..payload.len()].copy_from_slice(payload);
            payload.len()
        })
    }

    /// Lets `fill` write the payload in place; it returns the number of bytes written.
    pub fn try_send_with(
        &mut self,
        token: u32,
        service: u16,
        status: u16,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), Full> {
        if !self.has_room() {
            return Err(Full);
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
            let len = fill(payload);
            assert!(len <= layout.payload_capacity, "fill wrote past the slot");
            let hdr = self.shared.base().add(off) as *mut SlotHeader;
            std::ptr::addr_of_mut!((*hdr).len).write_volatile(len as u32);
            std::ptr::addr_of_mut!((*hdr).token).write_volatile(token);
            std::ptr::addr_of_mut!((*hdr).service).write_volatile(service);
            std::ptr::addr_of_mut!((*hdr).status).write_volatile(status);
        }
        self.head = self.head.wrapping_add(1);
        // The doorbell: everything above becomes visible to a consumer that acquires this.
        self.shared.seq(slot).store(self.head, Ordering::Release);
        Ok(())
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
    /// Reads the next message in place if one is ready.
    pub fn try_recv<R>(&mut self, f: impl FnOnce(Message<'_>) -> R) -> Option<R> {
        let layout = self.shared.layout;
        let slot = self.tail as usize & (layout.slots - 1);
        let expected = self.tail.wrapping_add(1);
        if self.shared.seq(slot).load(Ordering::Acquire) != expected {
            return None;
        }
        let off = layout.slot_offset(slot);
        // SAFETY: seq == tail + 1 was acquired, so the producer finished writing this slot and
        // will not touch it again until we publish a tail past it.
        let out = unsafe {
            let hdr = (self.shared.base().add(off) as *const SlotHeader).read_volatile();
            assert!(
                hdr.len as usize <= layout.payload_capacity,
                "corrupt slot length"
            );
            let payload = std::slice::from_raw_parts(
                self.shared.base().add(off + SLOT_HEADER_BYTES),
                hdr.len as usize,
            );
            f(Message {
                token: hdr.token,
                service: hdr.service,
                status: hdr.status,
                payload,
            })
        };
        self.tail = expected;
        self.unpublished += 1;
        if self.unpublished >= self.publish_every {
            self.publish();
        }
        Some(out)
    }

    /// Publishes the tail now (call when going idle, so the producer sees all free slots).
    pub fn publish(&mut self) {
        self.shared.tail().store(self.tail, Ordering::Release);
        self.unpublished = 0;
    }
}
