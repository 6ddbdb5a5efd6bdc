//! Page-locked host memory mapped into the GPU's address space: where the persistent engine's
//! RX and TX rings and its stop flag live, so the GPU polls them over the bus and the host
//! never launches anything per request.

use crate::GpuError;
use cohort_mq::RingMemory;
use cudarc::driver::{result, sys, CudaContext};
use std::sync::Arc;

pub struct MappedMemory {
    ctx: Arc<CudaContext>,
    host: *mut u8,
    dev: u64,
    len: usize,
}

// SAFETY: the allocation is owned; host access goes through the ring protocol's atomics (or
// volatile accesses for the stop flag), device access through the kernels' system-scope
// operations.
unsafe impl Send for MappedMemory {}
unsafe impl Sync for MappedMemory {}

impl MappedMemory {
    /// `len` zeroed bytes, 64-byte aligned (page aligned in fact), mapped for `ctx`'s device.
    pub fn zeroed(ctx: &Arc<CudaContext>, len: usize) -> Result<MappedMemory, GpuError> {
        ctx.bind_to_thread()?;
        let len = len.max(64);
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: a plain allocation; the pointer is owned below and freed in Drop.
        let host = unsafe { result::malloc_host(len, flags) }? as *mut u8;
        let mut mem = MappedMemory {
            ctx: ctx.clone(),
            host,
            dev: 0,
            len,
        };
        // SAFETY: `host` points to `len` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(host, 0, len) };
        mem.dev = device_address(ctx, host)?;
        Ok(mem)
    }

    /// As `zeroed`, for serving device `dev` (a virtual GPU's shares its device's memory).
    pub fn on_device(dev: &crate::DeviceInfo, len: usize) -> Result<MappedMemory, GpuError> {
        MappedMemory::zeroed(&crate::launch::open(dev)?, len)
    }

    /// The address kernels use.
    pub fn device_ptr(&self) -> u64 {
        self.dev
    }

    pub fn host_ptr(&self) -> *mut u8 {
        self.host
    }
}

/// The device address of mapped host memory at `host` (fails for memory that is not mapped:
/// rings the persistent engine did not allocate).
pub fn device_address(ctx: &Arc<CudaContext>, host: *mut u8) -> Result<u64, GpuError> {
    ctx.bind_to_thread()?;
    let mut dev: sys::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local; `host` is only looked up by the driver.
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host as *mut _, 0) }.result()?;
    Ok(dev)
}

impl Drop for MappedMemory {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_host in `zeroed`, freed once.
        let _ = unsafe { result::free_host(self.host as *mut _) };
    }
}

// SAFETY: see MappedMemory::zeroed (zeroed, 64-aligned, lives as long as self).
unsafe impl RingMemory for MappedMemory {
    fn ptr(&self) -> *mut u8 {
        self.host
    }
    fn len(&self) -> usize {
        self.len
    }
}
