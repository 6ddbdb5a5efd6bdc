//! Memory that can back a ring.

use std::alloc::{alloc_zeroed, dealloc, Layout as AllocLayout};

/// A zero-initialised, 64-byte aligned region that outlives every producer/consumer handle.
///
/// # Safety
/// `ptr()` must point to `len()` bytes, aligned to 64, valid for reads and writes from any
/// thread (and from the device, for device-visible memory) for the lifetime of `self`.
pub unsafe trait RingMemory: Send + Sync {
    fn ptr(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Ordinary host memory (the cpu engine's rings).
pub struct HostMemory {
    ptr: *mut u8,
    layout: AllocLayout,
}

// SAFETY: the allocation is owned and only accessed through the ring protocol's atomics.
unsafe impl Send for HostMemory {}
unsafe impl Sync for HostMemory {}

impl HostMemory {
    pub fn zeroed(len: usize) -> HostMemory {
        let layout = AllocLayout::from_size_align(len.max(64), 64).expect("valid ring layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        HostMemory { ptr, layout }
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

// SAFETY: see HostMemory::zeroed.
unsafe impl RingMemory for HostMemory {
    fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.layout.size()
    }
}
