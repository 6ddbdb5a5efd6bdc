//! Byte layout of a ring region; must match `include/cohort_mqueue.h`.

pub const CONTROL_BYTES: usize = 64;
pub const SLOT_HEADER_BYTES: usize = 48;
pub const SLOT_ALIGN: usize = 16;
pub(crate) const TAIL_OFFSET: usize = 0;
/// Bit of `len` marking a payload held host-side (too large for the slot).
pub const SPILLED: u32 = 1 << 31;

/// Mirror of `cohort_mq_slot_header`: one engine-boundary message.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotHeader {
    pub seq: u32,
    pub len: u32,
    pub token: u32,
    pub service: u16,
    pub status: u16,
    pub request_id: u64,
    pub deadline: u64,
    pub arrived: u64,
    /// Engine-internal routing word (the persistent engine's TX ring: the ingress the answer
    /// goes to); 0 elsewhere.
    pub route: u64,
}

/// Geometry of one ring: a power-of-two number of slots, each with room for
/// `payload_capacity` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub slots: usize,
    pub payload_capacity: usize,
}

impl Layout {
    pub fn new(slots: usize, payload_capacity: usize) -> Layout {
        assert!(
            slots.is_power_of_two() && slots >= 2,
            "slots must be a power of two >= 2"
        );
        assert!(slots <= 1 << 24, "at most 2^24 slots");
        assert!(
            payload_capacity < SPILLED as usize,
            "payload capacity too large"
        );
        Layout {
            slots,
            payload_capacity,
        }
    }

    /// A layout whose slots are `stride` bytes in all (header included).
    pub fn with_stride(slots: usize, stride: usize) -> Layout {
        assert!(stride > SLOT_HEADER_BYTES && stride.is_multiple_of(SLOT_ALIGN));
        Layout::new(slots, stride - SLOT_HEADER_BYTES)
    }

    pub fn slot_stride(&self) -> usize {
        (SLOT_HEADER_BYTES + self.payload_capacity).div_ceil(SLOT_ALIGN) * SLOT_ALIGN
    }

    pub fn bytes(&self) -> usize {
        CONTROL_BYTES + self.slots * self.slot_stride()
    }

    pub fn slot_offset(&self, index: usize) -> usize {
        debug_assert!(index < self.slots);
        CONTROL_BYTES + index * self.slot_stride()
    }
}
