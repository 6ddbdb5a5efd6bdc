//! A batch of variable-length payloads packed end to end for one copy-in (the micro services'
//! echo and spin, the bank's requests): only the bytes sent cross the bus, and row r is
//! `bytes[offs[r] .. offs[r] + lens[r]]` on both sides.

use super::Pinned;
use crate::GpuError;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

pub struct PackedRows {
    host_bytes: Pinned<u8>,
    // Read back by the answers: cached, not write-combined.
    host_offs: Pinned<u32>,
    host_lens: Pinned<u32>,
    dev_bytes: CudaSlice<u8>,
    dev_offs: CudaSlice<u32>,
    /// Bytes staged so far in this batch.
    cursor: usize,
}

impl PackedRows {
    /// Room for `cap` rows of up to `row_bytes` each, staged and on `stream`'s device.
    pub fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        cap: usize,
        row_bytes: usize,
    ) -> Result<PackedRows, GpuError> {
        Ok(PackedRows {
            host_bytes: Pinned::for_uploads(ctx, cap * row_bytes)?,
            host_offs: Pinned::for_reads(ctx, cap)?,
            host_lens: Pinned::for_reads(ctx, cap)?,
            dev_bytes: stream.alloc_zeros(cap * row_bytes)?,
            dev_offs: stream.alloc_zeros(cap)?,
            cursor: 0,
        })
    }

    /// Stages row `row` (rows come in order from 0, which starts a new batch): `payload` is
    /// packed and its length recorded as `len` (a service may pack only a request's first
    /// bytes and record its whole length, for its kernels to refuse).
    pub fn stage(&mut self, row: usize, payload: &[u8], len: u32) {
        if row == 0 {
            self.cursor = 0;
        }
        let at = self.cursor;
        self.host_bytes.as_mut_slice()[at..at + payload.len()].copy_from_slice(payload);
        self.host_offs.as_mut_slice()[row] = at as u32;
        self.host_lens.as_mut_slice()[row] = len;
        self.cursor += payload.len();
    }

    /// Bytes staged in this batch (at least 1: a copy of nothing is refused by the driver).
    pub fn bytes(&self) -> usize {
        self.cursor.max(1)
    }

    /// Copies the batch's bytes and offsets in, and its lengths into `dev_lens` (the service's
    /// own buffer, which its kernels may also write).
    pub fn upload(
        &mut self,
        s: &Arc<CudaStream>,
        rows: usize,
        dev_lens: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        let bytes = self.bytes();
        s.memcpy_htod(
            &self.host_bytes.as_slice()[..bytes],
            &mut self.dev_bytes.slice_mut(0..bytes),
        )?;
        s.memcpy_htod(
            &self.host_offs.as_slice()[..rows],
            &mut self.dev_offs.slice_mut(0..rows),
        )?;
        s.memcpy_htod(
            &self.host_lens.as_slice()[..rows],
            &mut dev_lens.slice_mut(0..rows),
        )?;
        Ok(())
    }

    pub fn dev_bytes(&self) -> &CudaSlice<u8> {
        &self.dev_bytes
    }

    pub fn dev_offs(&self) -> &CudaSlice<u32> {
        &self.dev_offs
    }

    /// Where row `row` of the batch lies: `(offset, length)`.
    pub fn row(&self, row: usize) -> (usize, usize) {
        (
            self.host_offs.as_slice()[row] as usize,
            self.host_lens.as_slice()[row] as usize,
        )
    }
}
