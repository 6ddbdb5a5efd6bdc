//! The GPU backends of `echo` and `spin` (Lynx's micro-benchmarks on the GPU): every request
//! is one block of `kernels/micro.cu`; spin busy-waits the requested microseconds on the GPU's
//! clock. A batch packs its payloads end to end, so only the bytes sent cross the bus.

use super::spin;
use cohort_engine::BatchBackend;
use cohort_gpu::engine::{GpuBackend, PackedRows, Pinned, StreamBuffers};
use cohort_gpu::kernel_args;
use cohort_gpu::launch::{Dev, Grid, Kernel, KernelDecl, Work};
use cohort_gpu::{load_module, DeviceInfo, GpuError, KernelSource, Prelude};
use cohort_proto::{ErrorCode, ErrorPayload};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use std::sync::Arc;

/// Largest payload one request may carry on the GPU engines.
pub const MAX_ROW_BYTES: usize = 4096;

kernel_args! {
    /// A packed batch: row r's payload is input[offs[r] .. offs[r] + lens[r]], its answer goes
    /// to the same place in out.
    pub struct MicroRowsArgs {
        input: Dev<u8>,
        offs: Dev<u32>,
        lens: Dev<u32>,
        out: Dev<u8>,
        rows: u32,
    }
}

pub const ECHO_ROWS: KernelDecl<MicroRowsArgs> =
    KernelDecl::new("echo_rows", 128, Grid::BlockPerItem);
pub const SPIN_ROWS: KernelDecl<MicroRowsArgs> =
    KernelDecl::new("spin_rows", 128, Grid::BlockPerItem);

/// `kernels/micro.cu`: one block per request (no limit shared with the host: an empty prelude).
pub fn source() -> &'static KernelSource {
    static S: std::sync::OnceLock<&'static KernelSource> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        KernelSource::assemble_typed(
            "micro.cu",
            &Prelude::new("crates/services/micro/src/gpu.rs"),
            &[("micro.cu", include_str!("kernels/micro.cu"))],
            vec![ECHO_ROWS.checked(), SPIN_ROWS.checked()],
        )
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Micro {
    Echo,
    Spin,
}

pub struct MicroGpu {
    kind: Micro,
    ctx: Arc<CudaContext>,
    kernel: Kernel<MicroRowsArgs>,
}

impl MicroGpu {
    pub fn new(kind: Micro, dev: &DeviceInfo) -> Result<MicroGpu, GpuError> {
        let ctx = cohort_gpu::launch::context(dev)?;
        let module = load_module(&ctx, dev, source())?;
        let kernel = Kernel::load(
            &module,
            match kind {
                Micro::Echo => &ECHO_ROWS,
                Micro::Spin => &SPIN_ROWS,
            },
        )?;
        Ok(MicroGpu { kind, ctx, kernel })
    }
}

impl BatchBackend for MicroGpu {
    fn batch_key(&self, payload: &[u8]) -> Result<u64, ErrorPayload> {
        if self.kind == Micro::Spin {
            spin::decode(payload)?;
        }
        if payload.len() > MAX_ROW_BYTES {
            return Err(ErrorPayload::new(
                ErrorCode::TooLarge,
                format!("the gpu engines carry at most {MAX_ROW_BYTES} payload bytes per request"),
            ));
        }
        Ok(0)
    }
}

impl GpuBackend for MicroGpu {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn stream_buffers(
        &self,
        stream: &Arc<CudaStream>,
        cap: usize,
    ) -> Result<Box<dyn StreamBuffers>, GpuError> {
        let bytes = cap * MAX_ROW_BYTES;
        Ok(Box::new(MicroBuffers {
            kernel: self.kernel.clone(),
            rows: PackedRows::new(&self.ctx, stream, cap, MAX_ROW_BYTES)?,
            host_out: Pinned::for_reads(&self.ctx, bytes)?,
            dev_lens: stream.alloc_zeros(cap)?,
            dev_out: stream.alloc_zeros(bytes)?,
        }))
    }

    /// The byte counts of a batch vary, so a captured graph could not be replayed.
    fn graphable(&self) -> bool {
        false
    }
}

struct MicroBuffers {
    kernel: Kernel<MicroRowsArgs>,
    rows: PackedRows,
    host_out: Pinned<u8>,
    dev_lens: CudaSlice<u32>,
    dev_out: CudaSlice<u8>,
}

impl StreamBuffers for MicroBuffers {
    fn stage(&mut self, _key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        // batch_key capped the length, so a full batch fits its arena of cap x MAX_ROW_BYTES.
        self.rows.stage(row, payload, payload.len() as u32);
        Ok(())
    }

    fn enqueue(&mut self, s: &Arc<CudaStream>, _key: u64, rows: usize) -> Result<(), GpuError> {
        let bytes = self.rows.bytes();
        self.rows.upload(s, rows, &mut self.dev_lens)?;
        let args = MicroRowsArgs {
            input: Dev::of(self.rows.dev_bytes(), s),
            offs: Dev::of(self.rows.dev_offs(), s),
            lens: Dev::of(&self.dev_lens, s),
            out: Dev::of_mut(&mut self.dev_out, s),
            rows: rows as u32,
        };
        // SAFETY: offs + lens of every row lie inside `bytes`, which every buffer holds.
        unsafe { self.kernel.launch(s, Work::Items(rows), 0, &args) }?;
        s.memcpy_dtoh(
            &self.dev_out.slice(0..bytes),
            &mut self.host_out.as_mut_slice()[..bytes],
        )?;
        Ok(())
    }

    fn answer(&mut self, _key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let (off, len) = self.rows.row(row);
        out.extend_from_slice(&self.host_out.as_slice()[off..off + len]);
        Ok(())
    }
}
